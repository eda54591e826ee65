//! Placement benchmark: a deterministic synthetic cluster, a full placement from scratch, then
//! incremental updates after single node removals and additions.
//!
//! ```text
//! cargo run --release -p shoal --example placement_bench -- \
//!     --nodes 10000 --replicas 100000 --utilization 0.75 --json
//! ```
//! The last stdout line is one JSON object with the figures (see docs/placement.md): node changes
//! are the mean of `--trials` (default 30) trials, each from the same baseline:
//! - `node_remove_*`, `moved_on_remove`, `forced_on_remove`: a random node leaves, as agents see a
//!   failure or a leave: the node is `down` (it keeps its place in the rankings);
//!   `moved_forced_on_remove_by_priority` splits those moved and forced replicas by priority;
//! - `node_forget_*`, `moved_on_forget`: that down node is then forgotten (removed from the
//!   inputs; agents do this after chitchat's dead-node grace period, an hour);
//! - `moved_on_return`, `return_restores_baseline`: instead, the down node comes back up;
//! - `moved_on_remove_outright`: the node removed from the inputs without being down first;
//! - `node_add_*`, `moved_on_add`, `moved_onto_added_node`: a fresh node joins; and
//!   `node_add_with_a_node_down_ms` the same while another node is down (both passes run);
//! - `agent_*`: what an agent's host loop pays (`StackedPlacer::update`: layers, the diff of the
//!   inputs, the engine, the finished placement) for its first placement, a node going down and
//!   a workload scaled by one, against `agent_full_ms` (`place_stacked` from scratch, what it
//!   paid on every change before); the mean of up to 5 trials.

use std::collections::BTreeMap;
use std::time::Instant;

use shoal_core::constraint::Constraint;
use shoal_core::placement::{Node, Placement, PlacementEngine, Spread, Workload};
use shoal_core::resources::Resources;
use shoal_core::stacking::{place_stacked, StackedPlacer};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// splitmix64: ten lines instead of a dependency; the mix only has to be the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

struct Args {
    nodes: usize,
    replicas: usize,
    utilization: f64,
    seed: u64,
    trials: usize,
    json: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        nodes: 10_000,
        replicas: 100_000,
        utilization: 0.75,
        seed: 1,
        trials: 30,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => args.nodes = value().parse().expect("--nodes N"),
            "--replicas" => args.replicas = value().parse().expect("--replicas N"),
            "--utilization" => args.utilization = value().parse().expect("--utilization F"),
            "--seed" => args.seed = value().parse().expect("--seed N"),
            "--trials" => args.trials = value().parse().expect("--trials N"),
            "--json" => args.json = true,
            other => panic!("unknown flag {other}; flags: --nodes --replicas --utilization --seed --trials --json"),
        }
    }
    args
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

fn node(rng: &mut Rng, i: usize) -> Node {
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
        zone: format!("zone-{:02}", i % 16),
        draining: false,
        down: false,
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
fn workloads(
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

fn moved(before: &Placement, after: &Placement) -> usize {
    before
        .assigned
        .iter()
        .filter(|(r, n)| after.assigned.get(*r) != Some(*n))
        .count()
}

fn over_capacity(nodes: &[Node], workloads: &[Workload], p: &Placement) -> usize {
    let requests: BTreeMap<&str, Resources> = workloads
        .iter()
        .map(|w| (w.id.as_str(), w.request))
        .collect();
    let mut used: BTreeMap<&str, Resources> = BTreeMap::new();
    for (r, n) in &p.assigned {
        let u = used.entry(n.as_str()).or_default();
        *u = u.saturating_add(&requests[r.workload.as_str()]);
    }
    nodes
        .iter()
        .filter(|n| {
            used.get(n.id.as_str())
                .is_some_and(|u| !u.fits_in(&n.capacity))
        })
        .count()
}

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

fn main() {
    let args = parse_args();
    let mut rng = Rng(args.seed);
    let nodes: Vec<Node> = (0..args.nodes).map(|i| node(&mut rng, i)).collect();
    let capacity = nodes
        .iter()
        .fold(Resources::default(), |a, n| a.saturating_add(&n.capacity));
    let workloads = workloads(&mut rng, args.replicas, args.utilization, capacity);

    let start = Instant::now();
    let mut base = PlacementEngine::new(&nodes, &workloads);
    let baseline = base.placement().clone();
    let full_ms = ms(start);

    let priority: BTreeMap<&str, i32> = workloads
        .iter()
        .map(|w| (w.id.as_str(), w.priority))
        .collect();
    let (mut remove_ms, mut add_ms, mut forget_ms, mut add_down_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut moved_remove, mut forced_remove, mut moved_add, mut onto_new) = (0, 0, 0, 0);
    let (mut moved_forget, mut moved_return, mut moved_outright) = (0, 0, 0);
    let mut return_restores = true;
    // Per priority: replicas moved by a removal, and those of them that were on the removed node.
    let mut by_priority: BTreeMap<i32, (usize, usize)> = BTreeMap::new();
    for t in 0..args.trials {
        let victim = &nodes[rng.below(nodes.len() as u64) as usize];
        forced_remove += baseline
            .assigned
            .values()
            .filter(|n| **n == victim.id)
            .count();
        let mut engine = base.clone();
        let mut down = victim.clone();
        down.down = true;
        let start = Instant::now();
        engine.handle_node_changed(down).expect("known node");
        let after = engine.placement().clone();
        remove_ms.push(ms(start));
        moved_remove += moved(&baseline, &after);

        let mut back = engine.clone();
        back.handle_node_changed(victim.clone())
            .expect("known node");
        moved_return += moved(&after, back.placement());
        return_restores &= back.placement() == &baseline;

        let mut forgot = engine.clone();
        let start = Instant::now();
        forgot.handle_node_removed(&victim.id).expect("known node");
        moved_forget += moved(&after, forgot.placement());
        forget_ms.push(ms(start));

        let mut outright = base.clone();
        outright
            .handle_node_removed(&victim.id)
            .expect("known node");
        moved_outright += moved(&baseline, outright.placement());

        let mut fresh = node(&mut rng, args.nodes + t);
        fresh.id = format!("node-new-{t}");
        let mut with_down = engine.clone();
        let start = Instant::now();
        with_down
            .handle_node_added(fresh.clone())
            .expect("new node");
        with_down.placement();
        add_down_ms.push(ms(start));

        for (r, n) in &baseline.assigned {
            if after.assigned.get(r) != Some(n) {
                let level = by_priority
                    .entry(priority[r.workload.as_str()])
                    .or_default();
                level.0 += 1;
                level.1 += usize::from(*n == victim.id);
            }
        }

        let mut engine = base.clone();
        let start = Instant::now();
        engine.handle_node_added(fresh.clone()).expect("new node");
        let after = engine.placement();
        add_ms.push(ms(start));
        moved_add += moved(&baseline, after);
        onto_new += after.assigned.values().filter(|n| **n == fresh.id).count();
    }
    let agent = agent_costs(&mut rng, &nodes, &workloads, args.trials.clamp(1, 5));
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for why in baseline.unschedulable.values() {
        let name = format!("{why:?}");
        let name = name
            .split([' ', '{'])
            .next()
            .unwrap_or_default()
            .to_string();
        *reasons.entry(name).or_default() += 1;
    }
    let trials = args.trials.max(1) as f64;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let report = serde_json::json!({
        "nodes": args.nodes,
        "replicas": baseline.assigned.len() + baseline.unschedulable.len(),
        "workloads": workloads.len(),
        "utilization": args.utilization,
        "seed": args.seed,
        "trials": args.trials,
        "full_ms": full_ms,
        "node_remove_ms": mean(&remove_ms),
        "node_remove_ms_max": max(&remove_ms),
        "node_add_ms": mean(&add_ms),
        "node_add_ms_max": max(&add_ms),
        "moved_on_remove": moved_remove as f64 / trials,
        "forced_on_remove": forced_remove as f64 / trials,
        "moved_forced_on_remove_by_priority": by_priority
            .iter()
            .map(|(p, (m, f))| (p.to_string(), [*m as f64 / trials, *f as f64 / trials]))
            .collect::<BTreeMap<_, _>>(),
        "node_forget_ms": mean(&forget_ms),
        "moved_on_forget": moved_forget as f64 / trials,
        "moved_on_return": moved_return as f64 / trials,
        "return_restores_baseline": return_restores,
        "moved_on_remove_outright": moved_outright as f64 / trials,
        "node_add_with_a_node_down_ms": mean(&add_down_ms),
        "moved_on_add": moved_add as f64 / trials,
        "moved_onto_added_node": onto_new as f64 / trials,
        "unschedulable": baseline.unschedulable.len(),
        "unschedulable_reasons": reasons,
        "over_capacity_nodes": over_capacity(&nodes, &workloads, &baseline),
        "rejected_inputs": baseline.rejected.len(),
        "agent_full_ms": agent.full_ms,
        "agent_first_update_ms": agent.first_ms,
        "agent_node_down_ms": agent.node_down_ms,
        "agent_scale_ms": agent.scale_ms,
        "agent_matches_full": agent.matches_full,
    });
    if !args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("json"));
    }
    println!("{report}");
}

/// What the agent's placement costs, from scratch and through its `StackedPlacer`.
struct AgentCosts {
    full_ms: f64,
    first_ms: f64,
    node_down_ms: f64,
    scale_ms: f64,
    /// Every incremental result equalled `place_stacked` on the same inputs.
    matches_full: bool,
}

fn agent_costs(rng: &mut Rng, nodes: &[Node], workloads: &[Workload], trials: usize) -> AgentCosts {
    let start = Instant::now();
    let full = place_stacked(nodes, workloads);
    let full_ms = ms(start);
    let mut base = StackedPlacer::new();
    let start = Instant::now();
    let mut matches_full = base.update(nodes, workloads) == full;
    let first_ms = ms(start);
    let (mut down_ms, mut scale_ms) = (Vec::new(), Vec::new());
    for _ in 0..trials {
        let mut down = nodes.to_vec();
        down[rng.below(nodes.len() as u64) as usize].down = true;
        let mut placer = base.clone();
        let start = Instant::now();
        let after = placer.update(&down, workloads);
        down_ms.push(ms(start));
        matches_full &= after == place_stacked(&down, workloads);

        let mut scaled = workloads.to_vec();
        scaled[rng.below(workloads.len() as u64) as usize].replicas += 1;
        let mut placer = base.clone();
        let start = Instant::now();
        let after = placer.update(nodes, &scaled);
        scale_ms.push(ms(start));
        matches_full &= after == place_stacked(nodes, &scaled);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    AgentCosts {
        full_ms,
        first_ms,
        node_down_ms: mean(&down_ms),
        scale_ms: mean(&scale_ms),
        matches_full,
    }
}
