//! Records the frames and store payloads of the build it is compiled in, for
//! `agent/tests/compat.rs`: `cargo run --example compat_record -- OUT_DIR`. The same file is
//! compiled in an older build's tree by `scripts/compat-fixtures.sh OLD_COMMIT` (which copies it
//! there), so it uses only what every supported build has: the v7 requests and answers, the frame
//! encoder and the spec payload encoder.
//!
//! Writes `OUT_DIR/NAME.frame` (whole frames, prefix included: `req-*` requests, `resp-*`
//! answers, `reject`, `gossip`), and for each spec `NAME.toml` (its source) and `NAME.spec` (the
//! store payload the build writes for it).

use std::path::Path;

use shoal::mesh::api::{ApiError, Applied, ErrorKind, Request, Response};
use shoal::wire::{encode_frame, FrameKind, API_FRAME_MAX_BYTES, GOSSIP_FRAME_MAX_BYTES};
use shoal_core::spec::WorkloadSpec;

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
    let out = std::env::args()
        .nth(1)
        .expect("usage: compat_record OUT_DIR");
    let out = Path::new(&out);
    std::fs::create_dir_all(out).expect("creating the output directory");
    let mut specs = Vec::new();
    for (file, text) in SPECS {
        let spec = WorkloadSpec::from_toml_str(text, file).expect("a fixture spec is valid");
        std::fs::write(out.join(format!("{file}.toml")), text).unwrap();
        let payload = shoal::mesh::view::encode_spec(&spec);
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
        request(&Request::Apply { specs }),
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
            tty: Some(shoal::runtime::exec::TtySize { rows: 24, cols: 80 }),
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
        shoal::rpc::encode_reject("handler took over 30s"),
    );
    let gossip =
        shoal::gossip::quic::encode_gossip(&chitchat::ChitchatMessage::BadCluster, None).unwrap();
    assert!(gossip.len() <= GOSSIP_FRAME_MAX_BYTES + 4);
    frame("gossip", FrameKind::Gossip, gossip);
    println!("recorded into {}", out.display());
}
