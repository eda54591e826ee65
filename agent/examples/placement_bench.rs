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

mod support;

use std::collections::BTreeMap;
use std::time::Instant;

use clap::Parser;

use shoal_core::placement::{Node, Placement, PlacementEngine, Workload};
use shoal_core::resources::Resources;
use shoal_core::stacking::{place_stacked, StackedPlacer};
use support::synth::{count_reasons, node, used_by, workloads, ClusterArgs, Rng};

/// Placement from scratch and after single node changes, on a synthetic cluster.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
}

fn moved(before: &Placement, after: &Placement) -> usize {
    before
        .assigned
        .iter()
        .filter(|(r, n)| after.assigned.get(*r) != Some(*n))
        .count()
}

fn over_capacity(nodes: &[Node], workloads: &[Workload], p: &Placement) -> usize {
    let used = used_by(workloads, &p.assigned);
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
    let args = Args::parse().cluster;
    let mut rng = Rng(args.seed);
    let nodes: Vec<Node> = (0..args.nodes).map(|i| node(&mut rng, i, i % 16)).collect();
    let capacity = nodes
        .iter()
        .fold(Resources::default(), |a, n| a.saturating_add(&n.capacity));
    let mut workloads = workloads(&mut rng, args.replicas, args.utilization, capacity);
    let mut nodes = nodes;
    if args.mixed {
        support::synth::mix(0, &mut nodes, &mut workloads);
    }

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
        engine.placement();
        remove_ms.push(ms(start));
        // The copy the comparisons below need is the bench's, not the placement's: not timed.
        let after = engine.placement().clone();
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

        let mut fresh = node(&mut rng, args.nodes + t, (args.nodes + t) % 16);
        fresh.id = format!("node-new-{t}");
        if args.mixed {
            // A node of a class as the others are (by its index).
            let mut one = [fresh];
            support::synth::mix(args.nodes + t, &mut one, &mut []);
            let [again] = one;
            fresh = again;
        }
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
    count_reasons(&mut reasons, baseline.unschedulable.values());
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
