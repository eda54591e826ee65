//! The synthetic cluster of the placement benches: nodes of a mix of instance shapes and labels,
//! and workloads of a mix of sizes, constraints and priorities, all drawn from one seed.

use std::collections::BTreeMap;
use std::fmt::Debug;

use shoal_core::constraint::Constraint;
use shoal_core::placement::{Node, ReplicaId, Spread, Workload};
use shoal_core::resources::Resources;

/// The flags of a synthetic cluster and of the trials on it.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// Nodes.
    #[arg(long, default_value_t = 10_000)]
    pub nodes: usize,
    /// Replicas in all, over every workload.
    #[arg(long, default_value_t = 100_000)]
    pub replicas: usize,
    /// The share of the nodes' CPU and memory that the workloads request.
    #[arg(long, default_value_t = 0.75)]
    pub utilization: f64,
    /// The generator's seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Trials of each change, each from the same baseline (figures are their mean).
    #[arg(long, default_value_t = 30)]
    pub trials: usize,
    /// Print only the JSON line.
    #[arg(long)]
    pub json: bool,
    /// A mixed fleet (placement algorithm 7): node classes by runtime (a quarter process only, a
    /// quarter containers only, half both), a quarter with a volume root, 5% with port 8080
    /// taken; workloads of either runtime, some with a host path or port 8080 fixed; every
    /// workload yields when short.
    #[arg(long)]
    pub mixed: bool,
}

/// Makes the fleet mixed ([`ClusterArgs::mixed`]), by index only (`nodes[0]` is node number
/// `first`): the same cluster as without it otherwise.
pub fn mix(first: usize, nodes: &mut [Node], workloads: &mut [Workload]) {
    use shoal_core::placement::{Capabilities, HostPort, Needs, Runtime};
    let port = HostPort {
        port: 8080,
        protocol: Default::default(),
    };
    for (i, n) in nodes.iter_mut().enumerate() {
        let i = first + i;
        n.caps = Some(Capabilities {
            runtimes: match i % 4 {
                0 => vec![Runtime::Process],
                1 => vec![Runtime::Container],
                _ => vec![Runtime::Process, Runtime::Container],
            },
            volume_roots: if i % 4 == 3 {
                vec!["/srv".to_string()]
            } else {
                Vec::new()
            },
            ports_taken: if i % 20 == 7 { vec![port] } else { Vec::new() },
            root_allowed: false,
        });
    }
    for (j, w) in workloads.iter_mut().enumerate() {
        w.yields_when_short = true;
        w.yields_unplaced = true;
        w.needs = Needs {
            runtime: Some(if j % 5 < 3 {
                Runtime::Process
            } else {
                Runtime::Container
            }),
            host_paths: if j % 25 == 4 {
                vec!["/srv/data".to_string()]
            } else {
                Vec::new()
            },
            fixed_ports: if j % 30 == 5 { vec![port] } else { Vec::new() },
            root: false,
        };
        w.ports_exclusive = !w.needs.fixed_ports.is_empty();
    }
}

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;

/// splitmix64: ten lines instead of a dependency; the mix only has to be the same every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// Node shapes (cores, GiB, weight): a mix of general, compute and memory instance types.
const SHAPES: [(u64, u64, u64); 7] = [
    (4, 16, 10),
    (8, 32, 25),
    (16, 64, 25),
    (32, 128, 15),
    (16, 32, 10),
    (8, 64, 10),
    (64, 256, 5),
];

/// Node `i` (`node-0000i`) in zone `zone-ZZ`: a shape by weight, `disk` ssd or hdd, `arch`
/// amd64 or arm64, and rarely a `gpu`.
pub fn node(rng: &mut Rng, i: usize, zone: usize) -> Node {
    let total: u64 = SHAPES.iter().map(|s| s.2).sum();
    let mut pick = rng.below(total);
    let &(cores, gib, _) = SHAPES
        .iter()
        .find(|s| {
            let hit = pick < s.2;
            pick = pick.saturating_sub(s.2);
            hit
        })
        .expect("weights cover the range");
    let mut labels = BTreeMap::new();
    labels.insert(
        "disk".to_string(),
        if rng.chance(0.7) { "ssd" } else { "hdd" }.to_string(),
    );
    labels.insert(
        "arch".to_string(),
        if rng.chance(0.9) { "amd64" } else { "arm64" }.to_string(),
    );
    if rng.chance(0.05) {
        labels.insert("gpu".to_string(), "a100".to_string());
    }
    Node {
        id: format!("node-{i:05}"),
        capacity: Resources::new(cores * 1000, gib * GIB),
        labels,
        zone: format!("zone-{zone:02}"),
        draining: false,
        down: false,
        caps: None,
    }
}

fn replica_count(rng: &mut Rng) -> u32 {
    let p = rng.unit();
    let (lo, hi) = if p < 0.40 {
        (1, 3)
    } else if p < 0.75 {
        (4, 10)
    } else if p < 0.95 {
        (11, 30)
    } else {
        (31, 200)
    };
    (lo + rng.below(hi - lo + 1)) as u32
}

/// Workloads with `replicas` replicas in total, requests scaled so that the sum of requests is
/// `utilization` of the cluster's CPU and of its memory.
pub fn workloads(
    rng: &mut Rng,
    replicas: usize,
    utilization: f64,
    capacity: Resources,
) -> Vec<Workload> {
    let mut out = Vec::new();
    let mut raw: Vec<(f64, f64)> = Vec::new();
    let mut placed = 0usize;
    while placed < replicas {
        let n = (replica_count(rng) as usize).min(replicas - placed) as u32;
        placed += n as usize;
        let cpu = 100.0 * 40f64.powf(rng.unit()); // 100m .. 4 cores, log-uniform
        let gib_per_core = [1.0, 2.0, 4.0, 8.0][rng.below(4) as usize];
        raw.push((cpu, cpu / 1000.0 * gib_per_core));
        let constraints = match rng.below(100) {
            0..=9 => vec!["disk == ssd"],
            10..=13 => vec!["zone != zone-03"],
            14..=15 => vec!["arch == amd64", "disk == ssd"],
            16 => vec!["gpu"],
            _ => vec![],
        };
        out.push(Workload {
            id: format!("wl-{:05}", out.len()),
            replicas: n,
            request: Resources::default(),
            spread: if rng.chance(0.3) {
                Spread::Zone
            } else {
                Spread::Node
            },
            constraints: constraints
                .iter()
                .map(|c| Constraint::parse(c).expect("valid"))
                .collect(),
            exclusive: rng.chance(0.05),
            priority: match rng.below(20) {
                0..=15 => 0,
                16..=18 => 100,
                _ => -10,
            },
            sticky: Default::default(),
            needs: Default::default(),
            yields_when_short: false,
            yields_unplaced: false,
            cell_level_needs: false,
            ports_exclusive: false,
        });
    }
    let want_cpu: f64 = capacity.cpu_millis as f64 * utilization;
    let want_memory: f64 = capacity.memory_bytes as f64 * utilization;
    let have_cpu: f64 = out
        .iter()
        .zip(&raw)
        .map(|(w, r)| r.0 * w.replicas as f64)
        .sum();
    let have_memory: f64 = out
        .iter()
        .zip(&raw)
        .map(|(w, r)| r.1 * GIB as f64 * w.replicas as f64)
        .sum();
    for (w, r) in out.iter_mut().zip(&raw) {
        let cpu = (r.0 * want_cpu / have_cpu).floor().max(1.0) as u64;
        let memory = ((r.1 * GIB as f64 * want_memory / have_memory).floor() as u64).max(MIB);
        w.request = Resources::new(cpu, memory);
    }
    out
}

/// The sum of the requests each holder (node or cell) gets from `assigned` (replica -> holder).
pub fn used_by<'a>(
    workloads: &'a [Workload],
    assigned: impl IntoIterator<Item = (impl std::borrow::Borrow<ReplicaId>, &'a String)>,
) -> BTreeMap<&'a str, Resources> {
    let requests: BTreeMap<&str, Resources> = workloads
        .iter()
        .map(|w| (w.id.as_str(), w.request))
        .collect();
    let mut used: BTreeMap<&str, Resources> = BTreeMap::new();
    for (r, holder) in assigned {
        let u = used.entry(holder.as_str()).or_default();
        *u = u.saturating_add(&requests[r.borrow().workload.as_str()]);
    }
    used
}

/// Adds each reason to `counts` by the name of its variant.
pub fn count_reasons<'a, R: Debug + 'a>(
    counts: &mut BTreeMap<String, usize>,
    reasons: impl IntoIterator<Item = &'a R>,
) {
    for why in reasons {
        let name = format!("{why:?}");
        let name = name
            .split([' ', '{'])
            .next()
            .unwrap_or_default()
            .to_string();
        *counts.entry(name).or_default() += 1;
    }
}
