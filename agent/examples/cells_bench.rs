//! Two-level placement benchmark: a deterministic synthetic mesh of cells, one agent's full
//! computation (the cell level for every replica, the node level for its own cell), then what a
//! node change in its cell costs through its `CellPlacer`, and what moves when a whole cell dies
//! or a workload scales.
//!
//! ```text
//! cargo run --release -p shoal --example cells_bench -- \
//!     --nodes 10000 --cells 100 --replicas 100000 --utilization 0.75 --json
//! ```
//! The last stdout line is one JSON object (docs/placement.md, "Two levels: cells"). Times are
//! given twice: `*_ms` is wall time, `*_cpu_ms` the thread's CPU time (from
//! /proc/thread-self/schedstat; the same figure on a machine others share). Node changes are the
//! mean of `--trials` trials (default 30), each from the same baseline: a random member of the
//! agent's cell goes down (`node_down_*`), and a fresh member joins it (`node_add_*`).
//!
//! The mesh: node `i` of `--nodes` is in cell `i % cells` and every cell is in one zone
//! (`zone-(cell % 16)`), so zone spread is the cell level's to honour; shapes, labels and
//! workloads are those of `agent/examples/placement_bench.rs` (same generator, same seed).

use std::collections::BTreeMap;
use std::time::Instant;

use shoal_core::cells::{place_cells, place_mesh, summarize, Cell, CellPlacer};
use shoal_core::constraint::Constraint;
use shoal_core::placement::{Node, Placement, Share, Spread, Workload};
use shoal_core::resources::Resources;
use shoal_core::stacking::place_stacked_shares;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// splitmix64, as in placement_bench.
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
    cells: usize,
    replicas: usize,
    utilization: f64,
    seed: u64,
    trials: usize,
    json: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        nodes: 10_000,
        cells: 100,
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
            "--cells" => args.cells = value().parse().expect("--cells N"),
            "--replicas" => args.replicas = value().parse().expect("--replicas N"),
            "--utilization" => args.utilization = value().parse().expect("--utilization F"),
            "--seed" => args.seed = value().parse().expect("--seed N"),
            "--trials" => args.trials = value().parse().expect("--trials N"),
            "--json" => args.json = true,
            other => panic!(
                "unknown flag {other}; flags: --nodes --cells --replicas --utilization --seed --trials --json"
            ),
        }
    }
    args
}

/// Node shapes (cores, GiB, weight), as in placement_bench.
const SHAPES: [(u64, u64, u64); 7] = [
    (4, 16, 10),
    (8, 32, 25),
    (16, 64, 25),
    (32, 128, 15),
    (16, 32, 10),
    (8, 64, 10),
    (64, 256, 5),
];

fn node(rng: &mut Rng, i: usize, cells: usize) -> Node {
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
        zone: format!("zone-{:02}", (i % cells) % 16),
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

/// Workloads as in placement_bench: `replicas` in all, requests scaled to `utilization`.
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
        let cpu = 100.0 * 40f64.powf(rng.unit());
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
    let want_cpu = capacity.cpu_millis as f64 * utilization;
    let want_memory = capacity.memory_bytes as f64 * utilization;
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

/// Wall and thread CPU time since a start.
#[derive(Clone, Copy)]
struct Clock {
    wall: Instant,
    cpu_ns: u64,
}

fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Clock {
    fn start() -> Clock {
        Clock {
            wall: Instant::now(),
            cpu_ns: cpu_ns(),
        }
    }
    /// (wall ms, cpu ms).
    fn stop(self) -> (f64, f64) {
        (
            self.wall.elapsed().as_secs_f64() * 1000.0,
            (cpu_ns() - self.cpu_ns) as f64 / 1e6,
        )
    }
}

fn mean(v: &[(f64, f64)]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    (
        v.iter().map(|x| x.0).sum::<f64>() / n,
        v.iter().map(|x| x.1).sum::<f64>() / n,
    )
}

fn max(v: &[(f64, f64)]) -> (f64, f64) {
    (
        v.iter().map(|x| x.0).fold(0.0, f64::max),
        v.iter().map(|x| x.1).fold(0.0, f64::max),
    )
}

fn main() {
    let args = parse_args();
    let mut rng = Rng(args.seed);
    let nodes: Vec<Node> = (0..args.nodes)
        .map(|i| node(&mut rng, i, args.cells))
        .collect();
    let capacity = nodes
        .iter()
        .fold(Resources::default(), |a, n| a.saturating_add(&n.capacity));
    let workloads = workloads(&mut rng, args.replicas, args.utilization, capacity);
    let cell_name = |k: usize| format!("cell-{k:03}");
    let mut members: Vec<Vec<Node>> = vec![Vec::new(); args.cells];
    for (i, n) in nodes.iter().enumerate() {
        members[i % args.cells].push(n.clone());
    }

    // What the envoys publish (each cell's own placement is not known yet: free = capacity).
    let clock = Clock::start();
    let cells: Vec<Cell> = members
        .iter()
        .enumerate()
        .map(|(k, m)| Cell {
            summary: summarize(
                &cell_name(k),
                1,
                &[format!("{}.envoy:7100", cell_name(k))],
                m,
                &Placement::default(),
                &workloads,
                None,
            ),
            down: false,
        })
        .collect();
    let summarize_ms = clock.stop();

    // One agent's full computation, and its two levels apart.
    let own = cell_name(0);
    let own_nodes = &members[0];
    let clock = Clock::start();
    let mesh = place_mesh(&own, &cells, own_nodes, &workloads);
    let full_ms = clock.stop();
    let clock = Clock::start();
    let cell_level = place_cells(&cells, &workloads);
    let cell_level_ms = clock.stop();
    let shares: Vec<Share> = cell_level.shares(&own, &workloads);
    let clock = Clock::start();
    let local = place_stacked_shares(own_nodes, &shares);
    let node_level_ms = clock.stop();
    assert_eq!(local, mesh.local);

    // Node changes in the agent's cell, through its CellPlacer.
    let mut base = CellPlacer::new();
    let clock = Clock::start();
    let first = base.update(&own, &cells, own_nodes, &workloads).clone();
    let first_update_ms = clock.stop();
    let mut matches_full = first == mesh;
    let (mut down_ms, mut add_ms) = (Vec::new(), Vec::new());
    let (mut moved_down, mut forced_down) = (0usize, 0usize);
    for t in 0..args.trials {
        let mut placer = base.clone();
        let mut changed = own_nodes.clone();
        let victim = rng.below(changed.len() as u64) as usize;
        changed[victim].down = true;
        let clock = Clock::start();
        placer.update(&own, &cells, &changed, &workloads);
        down_ms.push(clock.stop());
        let after = placer.update(&own, &cells, &changed, &workloads).clone();
        forced_down += first
            .local
            .assigned
            .values()
            .filter(|n| **n == changed[victim].id)
            .count();
        moved_down += first
            .local
            .assigned
            .iter()
            .filter(|(r, n)| after.local.assigned.get(*r) != Some(*n))
            .count();
        if t < 3 {
            matches_full &= after == place_mesh(&own, &cells, &changed, &workloads);
        }
        let mut placer = base.clone();
        let mut grown = own_nodes.clone();
        let mut fresh = node(&mut rng, args.cells * (args.nodes + t), args.cells);
        fresh.id = format!("node-new-{t}");
        grown.push(fresh);
        let clock = Clock::start();
        placer.update(&own, &cells, &grown, &workloads);
        add_ms.push(clock.stop());
        let after = placer.update(&own, &cells, &grown, &workloads).clone();
        if t < 3 {
            matches_full &= after == place_mesh(&own, &cells, &grown, &workloads);
        }
    }

    // A whole cell dies: only its replicas change cells (room allowing).
    let victim = cell_name(args.cells / 2);
    let mut dead = cells.clone();
    dead[args.cells / 2].down = true;
    let clock = Clock::start();
    let after_death = place_cells(&dead, &workloads);
    let cell_down_ms = clock.stop();
    let forced_cell = cell_level
        .assigned
        .values()
        .filter(|c| **c == victim)
        .count();
    let moved_cell = cell_level
        .assigned
        .iter()
        .filter(|(r, c)| after_death.assigned.get(*r) != Some(*c))
        .count();
    let back = place_cells(&cells, &workloads) == cell_level;

    // A workload scales up by one: which replicas change cells.
    let mut scaled = workloads.clone();
    let grow = rng.below(scaled.len() as u64) as usize;
    scaled[grow].replicas += 1;
    let after_scale = place_cells(&cells, &scaled);
    let moved_scale: Vec<String> = cell_level
        .assigned
        .iter()
        .filter(|(r, c)| after_scale.assigned.get(*r) != Some(*c))
        .map(|(r, _)| r.to_string())
        .collect();
    let moved_scale_own = moved_scale
        .iter()
        .filter(|r| r.starts_with(&format!("{}/", scaled[grow].id)))
        .count();

    // How full the cell level made the cells, by its ranked capacity.
    let requests: BTreeMap<&str, Resources> = workloads
        .iter()
        .map(|w| (w.id.as_str(), w.request))
        .collect();
    let mut used: BTreeMap<&str, Resources> = BTreeMap::new();
    for (r, c) in &cell_level.assigned {
        let u = used.entry(c.as_str()).or_default();
        *u = u.saturating_add(&requests[r.workload.as_str()]);
    }
    let fill: Vec<f64> = cells
        .iter()
        .map(|c| {
            let u = used
                .get(c.summary.cell.as_str())
                .copied()
                .unwrap_or_default();
            (u.cpu_millis as f64 / c.summary.capacity.cpu_millis as f64)
                .max(u.memory_bytes as f64 / c.summary.capacity.memory_bytes as f64)
        })
        .collect();
    // Every cell's node level, as its agents compute it: what the whole mesh cannot run.
    let mut mesh_unschedulable = 0usize;
    let mut mesh_reasons: BTreeMap<String, usize> = BTreeMap::new();
    for (k, m) in members.iter().enumerate() {
        let local = place_stacked_shares(m, &cell_level.shares(&cell_name(k), &workloads));
        mesh_unschedulable += local.unschedulable.len();
        for why in local.unschedulable.values() {
            let name = format!("{why:?}");
            let name = name
                .split([' ', '{'])
                .next()
                .unwrap_or_default()
                .to_string();
            *mesh_reasons.entry(name).or_default() += 1;
        }
    }
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for why in mesh.local.unschedulable.values() {
        let name = format!("{why:?}");
        let name = name
            .split([' ', '{'])
            .next()
            .unwrap_or_default()
            .to_string();
        *reasons.entry(name).or_default() += 1;
    }
    let (down, add) = (mean(&down_ms), mean(&add_ms));
    let trials = args.trials.max(1) as f64;
    let report = serde_json::json!({
        "nodes": args.nodes,
        "cells": args.cells,
        "replicas": cell_level.assigned.len() + cell_level.unschedulable.len(),
        "workloads": workloads.len(),
        "utilization": args.utilization,
        "seed": args.seed,
        "trials": args.trials,
        "summarize_all_cells_ms": summarize_ms.0,
        "full_ms": full_ms.0,
        "full_cpu_ms": full_ms.1,
        "cell_level_ms": cell_level_ms.0,
        "cell_level_cpu_ms": cell_level_ms.1,
        "node_level_ms": node_level_ms.0,
        "node_level_cpu_ms": node_level_ms.1,
        "placer_first_update_ms": first_update_ms.0,
        "node_down_ms": down.0,
        "node_down_cpu_ms": down.1,
        "node_down_ms_max": max(&down_ms).0,
        "node_add_ms": add.0,
        "node_add_cpu_ms": add.1,
        "node_add_ms_max": max(&add_ms).0,
        "placer_matches_full": matches_full,
        "own_cell_members": own_nodes.len(),
        "own_cell_replicas": mesh.local.assigned.len() + mesh.local.unschedulable.len(),
        "own_cell_unschedulable": mesh.local.unschedulable.len(),
        "own_cell_unschedulable_reasons": reasons,
        "mesh_unschedulable": mesh_unschedulable,
        "mesh_unschedulable_reasons": mesh_reasons,
        "moved_on_node_down": moved_down as f64 / trials,
        "forced_on_node_down": forced_down as f64 / trials,
        "cell_level_unsure": cell_level.unsure.len(),
        "cell_level_unschedulable": cell_level.unschedulable.len(),
        "cell_fill_min": fill.iter().copied().fold(f64::INFINITY, f64::min),
        "cell_fill_max": fill.iter().copied().fold(0.0, f64::max),
        "cell_down_ms": cell_down_ms.0,
        "moved_on_cell_down": moved_cell,
        "forced_on_cell_down": forced_cell,
        "cell_back_restores": back,
        "moved_on_scale_up": moved_scale.len(),
        "moved_on_scale_up_of_the_workload": moved_scale_own,
    });
    if !args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("json"));
    }
    println!("{report}");
}
