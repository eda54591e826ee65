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
//! workloads are those of placement_bench (the same generator, `support/synth.rs`, and seed).

mod support;

use std::collections::BTreeMap;
use std::time::Instant;

use clap::Parser;

use shoal_core::cells::{place_cells, place_mesh, summarize, Cell, CellPlacer};
use shoal_core::placement::{Node, Placement, Share};
use shoal_core::resources::Resources;
use shoal_core::stacking::place_stacked_shares;
use support::procfs::schedstat_ns;
use support::synth::{count_reasons, node, used_by, workloads, ClusterArgs, Rng};

/// Two-level placement on a synthetic mesh of cells.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Cells the nodes are spread over (node `i` in cell `i % cells`).
    #[arg(long, default_value_t = 100)]
    cells: usize,
}

/// Wall and thread CPU time since a start.
#[derive(Clone, Copy)]
struct Clock {
    wall: Instant,
    cpu_ns: u64,
}

fn cpu_ns() -> u64 {
    schedstat_ns("/proc/thread-self/schedstat").unwrap_or(0)
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
    let Args {
        cluster: args,
        cells: cell_count,
    } = Args::parse();
    let mut rng = Rng(args.seed);
    let nodes: Vec<Node> = (0..args.nodes)
        .map(|i| node(&mut rng, i, (i % cell_count) % 16))
        .collect();
    let capacity = nodes
        .iter()
        .fold(Resources::default(), |a, n| a.saturating_add(&n.capacity));
    let workloads = workloads(&mut rng, args.replicas, args.utilization, capacity);
    let cell_name = |k: usize| format!("cell-{k:03}");
    let mut members: Vec<Vec<Node>> = vec![Vec::new(); cell_count];
    for (i, n) in nodes.iter().enumerate() {
        members[i % cell_count].push(n.clone());
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
        let i = cell_count * (args.nodes + t);
        let mut fresh = node(&mut rng, i, (i % cell_count) % 16);
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
    let victim = cell_name(cell_count / 2);
    let mut dead = cells.clone();
    dead[cell_count / 2].down = true;
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
        .filter(|(r, c)| after_death.assigned.get(r) != Some(*c))
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
        .filter(|(r, c)| after_scale.assigned.get(r) != Some(*c))
        .map(|(r, _)| r.to_string())
        .collect();
    let moved_scale_own = moved_scale
        .iter()
        .filter(|r| r.starts_with(&format!("{}/", scaled[grow].id)))
        .count();

    // How full the cell level made the cells, by its ranked capacity.
    let used = used_by(&workloads, &cell_level.assigned);
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
        count_reasons(&mut mesh_reasons, local.unschedulable.values());
    }
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    count_reasons(&mut reasons, mesh.local.unschedulable.values());
    let (down, add) = (mean(&down_ms), mean(&add_ms));
    let trials = args.trials.max(1) as f64;
    let report = serde_json::json!({
        "nodes": args.nodes,
        "cells": cell_count,
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
