//! Records the frames and store payloads of the build it is compiled in, for
//! `agent/tests/compat.rs`: `cargo run --example compat_record -- OUT_DIR [PLACEMENT_DIR]`.
//! `scripts/compat-fixtures.sh` runs it in this tree (the newest wire version) and, in an older
//! build's tree, the copy frozen for that build (`agent/tests/compat/recorder/`), so it uses only
//! what every supported build has: the v7 requests and answers, the frame encoder, the spec
//! payload encoder and `place_stacked`.
//!
//! Writes `OUT_DIR/NAME.frame` (whole frames, prefix included: `req-*` requests, `resp-*`
//! answers, `reject`, `gossip`), and for each spec `NAME.toml` (its source) and `NAME.spec` (the
//! store payload the build writes for it). With `PLACEMENT_DIR`, also
//! `PLACEMENT_DIR/placement-A.json` (A the build's placement algorithm): a seeded input of nodes
//! and workloads and the build's `place_stacked` of it, the owner of every replica.

use std::collections::BTreeMap;
use std::path::Path;

use shoal::wire::api::{ApiError, Applied, ErrorKind, Request, Response, WorkloadView};
use shoal::wire::{encode_frame, FrameKind, API_FRAME_MAX_BYTES, GOSSIP_FRAME_MAX_BYTES};
use shoal_core::constraint::Constraint;
use shoal_core::placement::{Node, Spread, Workload, PLACEMENT_ALGORITHM_VERSION};
use shoal_core::resources::Resources;
use shoal_core::spec::WorkloadSpec;
use shoal_core::stacking::place_stacked;

/// Specs that together set every field of wire 7.
const SPECS: &[(&str, &str)] = &[
    (
        "process",
        r#"name = "web"
replicas = 3
restarted_at = "2026-12-01 21:30:00.123Z"
stop_grace = "45s"
[process]
command = ["sh", "-c", "exec python3 -m http.server $SHOAL_PORT_HTTP"]
env = { LOG_LEVEL = "info", B = "2" }
working_dir = "/srv"
ports = [{ name = "http" }, { name = "metrics", port = 9100, protocol = "udp" }]
[resources]
cpu = "250m"
memory = "64Mi"
[placement]
spread = "zone"
constraints = ["disk == ssd", "zone != eu-1c"]
priority = 5
[health]
http = { port = "http", path = "/healthz" }
interval = "5s"
timeout = "2s"
failure_threshold = 4
start_grace = "20s"
[restart]
policy = "on-failure"
backoff_initial = "1s"
backoff_max = "1m"
backoff_reset = "5m"
[update]
max_unavailable = 2
max_surge = 0
auto_rollback = false
progress_deadline = "3m"
failure_threshold = 2
[settings]
level = "debug"
[reload]
signal = "HUP"
"#,
    ),
    (
        "exclusive",
        r#"name = "pg"
replicas = 1
[process]
command = ["sleep", "86401"]
[resources]
cpu = "100m"
memory = "16Mi"
[placement]
exclusive = true
sticky_for = "10m"
on_data_loss = "start-empty"
[health]
exec = { command = ["true"] }
[reload]
command = ["kill", "-HUP", "1"]
[[volumes]]
name = "data"
[[volumes]]
name = "backups"
kind = "host"
host_path = "/srv/backups"
"#,
    ),
    (
        "container",
        r#"name = "box"
replicas = 2
[container]
image = "shoal-busybox:latest"
pull = "never"
command = ["sleep", "86402"]
env = { A = "1" }
ports = [{ name = "dns", container = 53, protocol = "udp" }, { container = 80, host = 8080 }]
[resources]
cpu = "100m"
memory = "16Mi"
[health.tcp]
port = 80
[[volumes]]
name = "cache"
kind = "docker"
source = "box-cache"
path = "/cache"
read_only = true
[[volumes]]
name = "state"
path = "/state"
"#,
    ),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        panic!("usage: compat_record OUT_DIR [PLACEMENT_DIR]")
    };
    let out = Path::new(out);
    std::fs::create_dir_all(out).expect("creating the output directory");
    let mut specs = Vec::new();
    for (file, text) in SPECS {
        let spec = WorkloadSpec::from_toml_str(text, file).expect("a fixture spec is valid");
        std::fs::write(out.join(format!("{file}.toml")), text).unwrap();
        let payload = shoal::state::mesh::view::encode_spec(&spec);
        std::fs::write(out.join(format!("{file}.spec")), payload).unwrap();
        specs.push(spec);
    }
    let frame = |name: &str, kind: FrameKind, bytes: Vec<u8>| {
        let _ = kind;
        std::fs::write(out.join(format!("{name}.frame")), bytes).unwrap();
    };
    let request =
        |req: &Request| encode_frame(FrameKind::Request, req, API_FRAME_MAX_BYTES).unwrap();
    let response =
        |resp: &Response| encode_frame(FrameKind::Response, resp, API_FRAME_MAX_BYTES).unwrap();
    frame(
        "req-apply",
        FrameKind::Request,
        request(&Request::Apply {
            specs: specs.clone(),
        }),
    );
    frame(
        "req-status",
        FrameKind::Request,
        request(&Request::Status {
            name: "web".into(),
            after: Some(1),
            limit: 100,
        }),
    );
    frame(
        "req-delete",
        FrameKind::Request,
        request(&Request::Delete {
            name: "web".into(),
            purge_data: true,
        }),
    );
    frame(
        "req-exec",
        FrameKind::Request,
        request(&Request::Exec {
            workload: "web".into(),
            replica: 2,
            command: vec!["sh".into(), "-c".into(), "ls -la".into()],
            stdin: true,
            tty: Some(shoal::node::runtime::exec::TtySize { rows: 24, cols: 80 }),
        }),
    );
    frame(
        "resp-applied",
        FrameKind::Response,
        response(&Response::Applied(vec![Applied {
            name: "web".into(),
            version: "1796349308286.0@n1".into(),
            durable_on: vec!["n1".into(), "n3".into()],
            changed: true,
            note: Some("a note".into()),
        }])),
    );
    frame(
        "resp-workload",
        FrameKind::Response,
        response(&Response::Workload(Box::new(WorkloadView {
            name: "pg".into(),
            replicas: 1,
            version: "1796349308286.3@n2".into(),
            spec: specs[1].clone(),
        }))),
    );
    frame(
        "resp-error",
        FrameKind::Response,
        response(&Response::Error(ApiError::new(
            ErrorKind::NotFound,
            "no workload \"nope\"",
        ))),
    );
    frame(
        "reject",
        FrameKind::Reject,
        shoal::transport::rpc::encode_reject("handler took over 30s"),
    );
    let gossip =
        shoal::transport::gossip::quic::encode_gossip(&chitchat::ChitchatMessage::BadCluster, None)
            .unwrap();
    assert!(gossip.len() <= GOSSIP_FRAME_MAX_BYTES + 4);
    frame("gossip", FrameKind::Gossip, gossip);
    // Wire 13: compact gossip's Syn (chitchat's bucket hashes).
    let mut hashes = chitchat::compact::BucketHashes::default();
    for (i, hash) in hashes.0.iter_mut().enumerate() {
        *hash = (i as u32).wrapping_mul(0x9e37_79b9);
    }
    let compact = shoal::transport::gossip::quic::encode_gossip(
        &chitchat::ChitchatMessage::SynBuckets {
            cluster_id: "compat".to_string(),
            hashes,
        },
        None,
    )
    .unwrap();
    frame("gossip-compact", FrameKind::Gossip, compact);
    println!("recorded into {}", out.display());
    if let Some(dir) = args.get(1) {
        let path = Path::new(dir).join(format!("placement-{PLACEMENT_ALGORITHM_VERSION}.json"));
        std::fs::write(&path, placement_json()).unwrap();
        println!("recorded {}", path.display());
    }
}

/// splitmix64: the placement input is the same on every build without a generator crate.
struct Mix(u64);

impl Mix {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

const ZONES: [&str; 4] = ["eu-1a", "eu-1b", "eu-1c", "us-2a"];
const CONSTRAINTS: &[&[&str]] = &[
    &[],
    &["disk == ssd"],
    &["zone != eu-1c"],
    &["rack in (r1, r2, r3)"],
    &["disk == ssd", "zone == eu-1a"],
    &["gpu"],
    &["node != n07", "!spot"],
    &["disk == hdd", "zone in (eu-1b, us-2a)"],
    &[],
    &["rack not in (r0)"],
];

/// 40 nodes in 4 zones with labels, every 7th down and every 11th draining; 30 workloads with
/// constraints, spreads, priorities, ports, exclusive ones with a data holder, and a few with
/// more replicas than eligible nodes (layers and overflow).
fn placement_input() -> (Vec<Node>, Vec<Workload>) {
    let mut mix = Mix(0x5_0a1c_0de0_2026);
    let nodes: Vec<Node> = (0..40usize)
        .map(|i| {
            let mut labels = BTreeMap::new();
            let disk = if mix.below(3) == 0 { "hdd" } else { "ssd" };
            labels.insert("disk".to_string(), disk.to_string());
            labels.insert("rack".to_string(), format!("r{}", mix.below(6)));
            if i % 9 == 0 {
                labels.insert("gpu".to_string(), "a100".to_string());
            }
            if mix.below(5) == 0 {
                labels.insert("spot".to_string(), "true".to_string());
            }
            Node {
                id: format!("n{i:02}"),
                capacity: Resources {
                    cpu_millis: 1000 * (2 + mix.below(15)),
                    memory_bytes: (4 + mix.below(29)) << 30,
                    ports: 64,
                },
                labels,
                zone: ZONES[i % ZONES.len()].to_string(),
                draining: i % 11 == 3,
                down: i % 7 == 5,
                caps: None,
            }
        })
        .collect();
    let workloads: Vec<Workload> = (0..30usize)
        .map(|i| {
            // w05 and w12 have more replicas than eligible nodes: small, stateless, stacked.
            let stacked = i == 5 || i == 12;
            let exclusive = i % 4 == 1 && !stacked;
            let replicas = match i {
                5 => 60,
                12 => 25,
                _ => 1 + mix.below(12) as u32,
            };
            let scale = if stacked { 1 } else { 1 + mix.below(20) };
            let mut sticky = BTreeMap::new();
            if exclusive {
                // Some holders are down, draining, unknown (n4x) or ruled out by constraints.
                sticky.insert(0, format!("n{:02}", mix.below(44)));
                sticky.insert(replicas / 2, format!("n{:02}", mix.below(44)));
            }
            Workload {
                id: format!("w{i:02}"),
                replicas,
                request: Resources {
                    cpu_millis: 100 * scale,
                    memory_bytes: (64 * scale) << 20,
                    ports: if stacked { 0 } else { mix.below(3) },
                },
                spread: if i % 3 == 0 {
                    Spread::Zone
                } else {
                    Spread::Node
                },
                constraints: CONSTRAINTS[i % CONSTRAINTS.len()]
                    .iter()
                    .map(|c| Constraint::parse(c).unwrap())
                    .collect(),
                exclusive,
                priority: mix.below(5) as i32 - 1,
                sticky,
                needs: Default::default(),
                yields_when_short: false,
                yields_unplaced: false,
                cell_level_needs: false,
                ports_exclusive: false,
            }
        })
        .collect();
    let (mut nodes, mut workloads) = (nodes, workloads);
    if PLACEMENT_ALGORITHM_VERSION >= 7 {
        capabilities(&mut nodes, &mut workloads);
    }
    (nodes, workloads)
}

/// Algorithm 7's inputs, from a generator of their own (the input of the algorithms before stays
/// what it was): runtimes, volume roots and taken ports on the nodes; runtimes, host paths and
/// fixed ports in the workloads, some of them met by no node.
fn capabilities(nodes: &mut [Node], workloads: &mut [Workload]) {
    use shoal_core::placement::{Capabilities, HostPort, Needs, Runtime};
    let mut mix = Mix(0x7_ca9a_b1e5_2026);
    let port = |port| HostPort {
        port,
        protocol: Default::default(),
    };
    for (i, node) in nodes.iter_mut().enumerate() {
        let runtimes = match mix.below(5) {
            0 => vec![Runtime::Container],
            1 => vec![Runtime::Process],
            _ => vec![Runtime::Process, Runtime::Container],
        };
        node.caps = (i != 12).then(|| Capabilities {
            runtimes,
            volume_roots: if mix.below(3) == 0 {
                vec!["/srv".to_string()]
            } else {
                Vec::new()
            },
            ports_taken: if mix.below(6) == 0 {
                vec![port(8080)]
            } else {
                Vec::new()
            },
            root_allowed: false,
        });
    }
    for (i, w) in workloads.iter_mut().enumerate() {
        w.yields_when_short = true;
        w.yields_unplaced = true;
        w.needs = Needs {
            runtime: Some(if mix.below(5) == 0 {
                Runtime::Container
            } else {
                Runtime::Process
            }),
            host_paths: match i {
                2 | 17 => vec!["/srv/data".to_string()],
                28 => vec!["/opt/nowhere".to_string()],
                _ => Vec::new(),
            },
            fixed_ports: if i % 7 == 3 {
                vec![port(8080)]
            } else {
                Vec::new()
            },
            root: false,
        };
        // Algorithm 8: those fixed ports held exclusively, between the five workloads fixing 8080.
        w.ports_exclusive = PLACEMENT_ALGORITHM_VERSION >= 8 && !w.needs.fixed_ports.is_empty();
    }
}

fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap()
}

/// The input and its placement, one item a line so a difference reads in a diff.
fn placement_json() -> String {
    let (nodes, workloads) = placement_input();
    let placement = place_stacked(&nodes, &workloads);
    assert!(placement.rejected.is_empty(), "{:?}", placement.rejected);
    let lines = |items: Vec<String>| items.join(",\n  ");
    let nodes: Vec<String> = nodes.iter().map(json).collect();
    let workloads: Vec<String> = workloads.iter().map(json).collect();
    let assigned: Vec<String> = placement
        .assigned
        .iter()
        .map(|(r, node)| format!("{}: {}", json(&r.to_string()), json(node)))
        .collect();
    let unschedulable: Vec<String> = placement
        .unschedulable
        .iter()
        .map(|(r, why)| format!("{}: {}", json(&r.to_string()), json(why)))
        .collect();
    format!(
        "{{\n\"algorithm\": {PLACEMENT_ALGORITHM_VERSION},\n\"nodes\": [\n  {}\n],\n\"workloads\": [\n  {}\n],\n\"assigned\": {{\n  {}\n}},\n\"unschedulable\": {{\n  {}\n}}\n}}\n",
        lines(nodes),
        lines(workloads),
        lines(assigned),
        lines(unschedulable)
    )
}
