//! The capacity pass: replicas in a canonical order, each taking the first node of its preference
//! that is eligible, free of its siblings, in a new zone if the workload spreads by zone and one is
//! available, and with room in every resource.
//!
//! Canonical order: priority descending; within a priority, replica index ascending (every
//! workload gets replica 0 before any gets replica 1); then workload hash, then workload id. A
//! replica's preference is its own list of the ranking (see `rank`), then, only if none of those
//! nodes will do, the rest of the workload's order. Room only shrinks during a pass and a
//! workload's used nodes and zones only grow, so a workload that found nothing for one replica
//! finds nothing for its later ones: the pass remembers that instead of searching again.

use super::engine::Tracked;
use super::model::{Spread, Unschedulable};
use super::rank::{Ranking, Scan};
use super::table::{eligible, ClassTable, NodeTable};
use crate::resources::Resources;

/// What became of one replica in a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// On the node in this slot, filled at this generation.
    Assigned { slot: u32, generation: u64 },
    /// Nowhere, for this reason.
    Unschedulable(Unschedulable),
}

/// A workload's state during one pass.
#[derive(Default)]
struct Progress {
    /// Node slots holding a replica, sorted.
    taken: Vec<u32>,
    used_zones: Vec<u32>,
    /// No node in an unused zone will do any more.
    zones_exhausted: bool,
    failed: Option<Unschedulable>,
}

/// Runs the pass over every workload; returns each workload slot's outcomes by replica index.
pub(crate) fn run(
    nodes: &NodeTable,
    classes: &ClassTable,
    workloads: &mut [Option<Tracked>],
    order: &[u32],
    node_epoch: u64,
) -> Vec<Vec<Outcome>> {
    let mut room: Vec<Resources> = nodes.capacity.clone();
    let mut progress: Vec<Progress> = workloads.iter().map(|_| Progress::default()).collect();
    let mut outcomes: Vec<Vec<Outcome>> = workloads
        .iter()
        .map(|w| Vec::with_capacity(w.as_ref().map_or(0, |t| t.spec.replicas as usize)))
        .collect();
    let replicas = |workloads: &[Option<Tracked>], w: u32| {
        workloads[w as usize]
            .as_ref()
            .map_or(0, |t| t.spec.replicas)
    };
    let priority = |workloads: &[Option<Tracked>], w: u32| {
        workloads[w as usize]
            .as_ref()
            .map_or(0, |t| t.spec.priority)
    };
    let mut start = 0;
    while start < order.len() {
        let level = priority(workloads, order[start]);
        let end = start
            + order[start..]
                .iter()
                .take_while(|&&w| priority(workloads, w) == level)
                .count();
        let mut active: Vec<u32> = order[start..end]
            .iter()
            .copied()
            .filter(|&w| replicas(workloads, w) > 0)
            .collect();
        let mut replica = 0;
        while !active.is_empty() {
            for &w in &active {
                let tracked = workloads[w as usize]
                    .as_mut()
                    .expect("ordered workload is gone");
                let p = &mut progress[w as usize];
                let outcome = place(nodes, classes, tracked, p, &mut room, replica, node_epoch);
                outcomes[w as usize].push(outcome);
            }
            replica += 1;
            active.retain(|&w| replicas(workloads, w) > replica);
        }
        start = end;
    }
    outcomes
}

fn place(
    nodes: &NodeTable,
    classes: &ClassTable,
    tracked: &mut Tracked,
    progress: &mut Progress,
    room: &mut [Resources],
    replica: u32,
    node_epoch: u64,
) -> Outcome {
    if let Some(reason) = &progress.failed {
        return Outcome::Unschedulable(reason.clone());
    }
    let (scan, ranking, empty_reason) = tracked.parts(nodes, classes);
    let mut chosen = None;
    let wants_zone = scan.spread == Spread::Zone
        && !progress.zones_exhausted
        && (progress.used_zones.len() as u32) < scan.zones;
    if wants_zone {
        chosen = walk(&scan, ranking, progress, room, replica, true);
        progress.zones_exhausted = chosen.is_none();
    }
    if chosen.is_none() {
        chosen = walk(&scan, ranking, progress, room, replica, false);
    }
    let Some(slot) = chosen else {
        let reason = diagnose(&scan, ranking, empty_reason, progress, room, node_epoch);
        progress.failed = Some(reason.clone());
        return Outcome::Unschedulable(reason);
    };
    let s = slot as usize;
    assert!(
        tracked.spec.request.fits_in(&room[s]),
        "chosen node lacks room"
    );
    room[s] = room[s].saturating_sub(&tracked.spec.request);
    let at = progress
        .taken
        .binary_search(&slot)
        .expect_err("node chosen twice for a workload");
    progress.taken.insert(at, slot);
    if !progress.used_zones.contains(&nodes.zone[s]) {
        progress.used_zones.push(nodes.zone[s]);
    }
    Outcome::Assigned {
        slot,
        generation: nodes.generation[s],
    }
}

/// The first acceptable node of the replica's own list, extending the ranking as needed, then of
/// the rest of the workload's order.
fn walk(
    scan: &Scan<'_>,
    ranking: &mut Ranking,
    progress: &Progress,
    room: &[Resources],
    replica: u32,
    new_zone_only: bool,
) -> Option<u32> {
    let request = scan.request;
    let acceptable = |slot: u32| {
        request.fits_in(&room[slot as usize])
            && progress.taken.binary_search(&slot).is_err()
            && !(new_zone_only
                && progress
                    .used_zones
                    .contains(&scan.nodes.zone[slot as usize]))
    };
    let mut i = 0;
    loop {
        let list = ranking.list(replica);
        while i < list.len() {
            if acceptable(list[i].node) {
                return Some(list[i].node);
            }
            i += 1;
        }
        if !ranking.extend(scan) {
            break;
        }
    }
    ranking
        .merged(scan)
        .iter()
        .find(|e| e.replica != replica && acceptable(e.node))
        .map(|e| e.node)
}

/// Why nothing in the (complete) ranking will do.
fn diagnose(
    scan: &Scan<'_>,
    ranking: &mut Ranking,
    empty_reason: &mut Option<(u64, Unschedulable)>,
    progress: &Progress,
    room: &[Resources],
    node_epoch: u64,
) -> Unschedulable {
    let eligible_count = ranking.len();
    if eligible_count == 0 {
        return match empty_reason {
            Some((epoch, reason)) if *epoch == node_epoch => reason.clone(),
            _ => {
                let reason = why_no_eligible_node(scan.nodes, scan.constraints, scan.request);
                *empty_reason = Some((node_epoch, reason.clone()));
                reason
            }
        };
    }
    let request = scan.request;
    let (mut candidates, mut cpu_short, mut memory_short) = (0u32, 0u32, 0u32);
    for e in ranking.merged(scan) {
        if progress.taken.binary_search(&e.node).is_ok() {
            continue;
        }
        candidates += 1;
        let r = &room[e.node as usize];
        cpu_short += u32::from(r.cpu_millis < request.cpu_millis);
        memory_short += u32::from(r.memory_bytes < request.memory_bytes);
    }
    if candidates == 0 {
        return Unschedulable::NotEnoughNodes {
            eligible: eligible_count as u32,
        };
    }
    Unschedulable::NoRoom {
        candidates,
        cpu_short,
        memory_short,
    }
}

/// Why no node at all is eligible: no nodes, a constraint, or the request's size.
pub(crate) fn why_no_eligible_node(
    nodes: &NodeTable,
    constraints: &[crate::constraint::Constraint],
    request: Resources,
) -> Unschedulable {
    let live: Vec<_> = nodes
        .live_slots()
        .map(|s| nodes.spec(s))
        .filter(|n| !n.draining)
        .collect();
    if live.is_empty() {
        return Unschedulable::NoNodes;
    }
    for c in constraints {
        if !live.iter().any(|n| c.matches(&n.labels, &n.zone, &n.id)) {
            return Unschedulable::ConstraintUnsatisfiable {
                constraint: c.to_string(),
            };
        }
    }
    let matching: Vec<_> = live.iter().filter(|n| eligible(n, constraints)).collect();
    if matching.is_empty() {
        return Unschedulable::ConstraintsConflict {
            constraints: constraints.iter().map(|c| c.to_string()).collect(),
        };
    }
    let cpu_largest = matching
        .iter()
        .map(|n| n.capacity.cpu_millis)
        .max()
        .unwrap_or(0);
    let memory_largest = matching
        .iter()
        .map(|n| n.capacity.memory_bytes)
        .max()
        .unwrap_or(0);
    if request.cpu_millis > cpu_largest {
        return Unschedulable::RequestTooLarge {
            resource: super::model::Resource::Cpu,
            requested: request.cpu_millis,
            largest: cpu_largest,
        };
    }
    if request.memory_bytes > memory_largest {
        return Unschedulable::RequestTooLarge {
            resource: super::model::Resource::Memory,
            requested: request.memory_bytes,
            largest: memory_largest,
        };
    }
    Unschedulable::RequestFitsNoSingleNode { requested: request }
}
