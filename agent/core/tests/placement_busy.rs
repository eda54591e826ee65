//! Placement on mid-sized, busy clusters (deterministic, generated from a seed): rankings that
//! must be extended past their first chunk, incremental == full under load, and how much a single
//! node change moves (property 9).

use std::collections::BTreeMap;

use shoal_core::constraint::Constraint;
use shoal_core::placement::{place, Node, Placement, PlacementEngine, Spread, Workload};
use shoal_core::resources::Resources;

const GIB: u64 = 1 << 30;

/// splitmix64, so that the cluster is the same on every run.
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
}

fn node(rng: &mut Rng, id: String) -> Node {
    let cores = [8, 16, 16, 32][rng.below(4) as usize];
    let mut labels = BTreeMap::new();
    labels.insert(
        "disk".to_string(),
        if rng.below(10) < 7 { "ssd" } else { "hdd" }.to_string(),
    );
    Node {
        id,
        capacity: Resources::new(cores * 1000, cores * 4 * GIB),
        labels,
        zone: format!("z{}", rng.below(8)),
        draining: false,
        down: false,
        caps: None,
    }
}

/// `nodes` nodes and workloads of about `replicas` replicas in all, whose requests add up to
/// `utilization` of the cluster's CPU and memory.
fn cluster(
    seed: u64,
    nodes: usize,
    replicas: usize,
    utilization: f64,
    zone_share: f64,
) -> (Vec<Node>, Vec<Workload>) {
    let mut rng = Rng(seed);
    let nodes: Vec<Node> = (0..nodes)
        .map(|i| node(&mut rng, format!("node-{i:04}")))
        .collect();
    let cpu: u64 = nodes.iter().map(|n| n.capacity.cpu_millis).sum();
    let mut workloads = Vec::new();
    let mut raw = Vec::new();
    let mut total = 0usize;
    while total < replicas {
        let n = 1 + rng.below(10) as u32;
        total += n as usize;
        raw.push(100.0 * 20f64.powf(rng.unit()));
        workloads.push(Workload {
            id: format!("wl-{:04}", workloads.len()),
            replicas: n,
            request: Resources::default(),
            spread: if rng.unit() < zone_share {
                Spread::Zone
            } else {
                Spread::Node
            },
            constraints: if rng.below(10) == 0 {
                vec![Constraint::parse("disk == ssd").unwrap()]
            } else {
                vec![]
            },
            exclusive: rng.below(20) == 0,
            priority: [0, 0, 0, 1, -1][rng.below(5) as usize],
            sticky: Default::default(),
            needs: Default::default(),
            yields_when_short: false,
            yields_unplaced: false,
            cell_level_needs: false,
            ports_exclusive: false,
        });
    }
    let demand: f64 = workloads
        .iter()
        .zip(&raw)
        .map(|(w, r)| w.replicas as f64 * r)
        .sum();
    let scale = cpu as f64 * utilization / demand;
    for (w, r) in workloads.iter_mut().zip(&raw) {
        let millis = ((r * scale) as u64).max(1);
        w.request = Resources::new(millis, millis * 4 * GIB / 1000);
    }
    (nodes, workloads)
}

fn moved(before: &Placement, after: &Placement) -> usize {
    before
        .assigned
        .iter()
        .filter(|(r, n)| after.assigned.get(*r) != Some(*n))
        .count()
}

/// Replicas moved over single-node changes on one cluster, summed over the trials.
#[derive(Debug, Default)]
struct Churn {
    /// A node goes down: replicas moved, and those that were on it.
    moved_down: usize,
    forced: usize,
    /// The node is removed from the inputs outright (as when a down node is forgotten).
    moved_removed: usize,
    /// A node joins: replicas moved, and those that land on it.
    moved_add: usize,
    onto: usize,
}

/// Single-node changes on one cluster; also checks that a node coming back up restores the
/// placement it had before it went down, exactly.
fn churn(nodes: &[Node], workloads: &[Workload], trials: usize) -> Churn {
    let mut base = PlacementEngine::new(nodes, workloads);
    let before = base.placement().clone();
    assert!(
        before.unschedulable.is_empty(),
        "{} unschedulable",
        before.unschedulable.len()
    );
    let mut rng = Rng(7);
    let mut c = Churn::default();
    for t in 0..trials {
        let victim = &nodes[rng.below(nodes.len() as u64) as usize];
        c.forced += before
            .assigned
            .values()
            .filter(|n| **n == victim.id)
            .count();
        let mut e = base.clone();
        let mut down = victim.clone();
        down.down = true;
        e.handle_node_changed(down).unwrap();
        c.moved_down += moved(&before, e.placement());
        assert!(e.placement().assigned.values().all(|n| *n != victim.id));
        e.handle_node_changed(victim.clone()).unwrap();
        assert_eq!(e.placement(), &before, "{} back up", victim.id);
        let mut e = base.clone();
        e.handle_node_removed(&victim.id).unwrap();
        c.moved_removed += moved(&before, e.placement());
        let mut e = base.clone();
        let newcomer = node(&mut rng, format!("new-{t}"));
        e.handle_node_added(newcomer.clone()).unwrap();
        c.moved_add += moved(&before, e.placement());
        c.onto += e
            .placement()
            .assigned
            .values()
            .filter(|n| **n == newcomer.id)
            .count();
    }
    c
}

/// 9. A single node change moves little. A node going down (failed or left: it keeps its place in
///    the rankings) moves at most 1.2x the replicas that were on it, up to 0.75 utilization: the
///    others keep their node unless a higher priority's displaced replica takes its room. A node
///    removed from the inputs outright (a down node forgotten) or added re-ranks, and a replica
///    that becomes a first choice again can send on one its next node took second-hand: this
///    cluster measures up to 1.30x there at 0.75, bounded by 1.4x (1.2x at 0.5).
#[test]
fn single_node_changes_move_little() {
    for (utilization, zone_share, bound) in [
        (0.5, 0.0, 1.2),
        (0.5, 0.3, 1.2),
        (0.75, 0.0, 1.4),
        (0.75, 0.3, 1.4),
    ] {
        let (nodes, workloads) = cluster(11, 400, 6000, utilization, zone_share);
        let c = churn(&nodes, &workloads, 20);
        println!("{utilization} zone {zone_share}: {c:?}");
        assert!(
            c.forced > 100 && c.onto > 100,
            "too few replicas moved to judge"
        );
        assert!(
            c.moved_down as f64 <= 1.2 * c.forced as f64,
            "down: {} vs {} at {utilization}",
            c.moved_down,
            c.forced
        );
        assert!(
            c.moved_removed as f64 <= bound * c.forced as f64,
            "removal: {} vs {} at {utilization}",
            c.moved_removed,
            c.forced
        );
        assert!(
            c.moved_add as f64 <= bound * c.onto as f64,
            "addition: {} vs {} at {utilization}",
            c.moved_add,
            c.onto
        );
    }
}

/// At 0.9 utilization walks run past the first chunk of many rankings; the incremental engine
/// must still equal a full recompute after each of a series of node and workload changes.
#[test]
fn incremental_equals_full_on_a_busy_cluster() {
    let (nodes, workloads) = cluster(5, 150, 2000, 0.9, 0.3);
    let mut engine = PlacementEngine::new(&nodes, &workloads);
    let mut live: BTreeMap<String, Node> =
        nodes.iter().map(|n| (n.id.clone(), n.clone())).collect();
    let mut specs: BTreeMap<String, Workload> = workloads
        .iter()
        .map(|w| (w.id.clone(), w.clone()))
        .collect();
    let mut rng = Rng(99);
    for step in 0..24 {
        match step % 4 {
            0 => {
                let id = live
                    .keys()
                    .nth(rng.below(live.len() as u64) as usize)
                    .unwrap()
                    .clone();
                engine.handle_node_removed(&id).unwrap();
                live.remove(&id);
            }
            1 => {
                let n = node(&mut rng, format!("added-{step}"));
                engine.handle_node_added(n.clone()).unwrap();
                live.insert(n.id.clone(), n);
            }
            2 => {
                let id = specs
                    .keys()
                    .nth(rng.below(specs.len() as u64) as usize)
                    .unwrap()
                    .clone();
                let mut w = specs[&id].clone();
                w.replicas = 1 + rng.below(12) as u32;
                engine.handle_workload_upserted(w.clone()).unwrap();
                specs.insert(id, w);
            }
            _ => {
                let id = live
                    .keys()
                    .nth(rng.below(live.len() as u64) as usize)
                    .unwrap()
                    .clone();
                let mut n = live[&id].clone();
                n.draining = rng.below(3) == 0;
                n.down = rng.below(3) == 0;
                n.capacity.cpu_millis = [8000, 16000, 32000][rng.below(3) as usize];
                engine.handle_node_changed(n.clone()).unwrap();
                live.insert(id, n);
            }
        }
        let full = place(
            &live.values().cloned().collect::<Vec<_>>(),
            &specs.values().cloned().collect::<Vec<_>>(),
        );
        assert_eq!(engine.placement(), &full, "step {step}");
    }
    engine.check_invariants();
}
