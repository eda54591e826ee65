//! Sticky replicas: a replica with data volumes prefers the node that holds its data.
//!
//! [`Workload::sticky`](super::model::Workload::sticky) names, by replica index, the node holding
//! a replica's data. In the actual pass that node, not the replica's node in the ideal pass, is
//! its home: it proposes there first with the strongest claim, and once there it counts as at
//! home, so no replica away from home displaces it and zone repair leaves it where it is. A
//! holder is taken only while the engine knows it and the workload's constraints match it (for
//! zone spread, in any of the workload's zones); otherwise the entry is ignored and the ideal
//! node stays the home. A known holder that is down or draining is a home that takes nothing:
//! the replica goes on to its own list, and comes back when the holder does.

use super::accept::Outcome;
use super::engine::Tracked;
use super::table::{eligible, NodeTable};

/// The slot of the node that holds the data of replica `index` of `t`, if the engine knows it
/// and the workload's constraints match it; `None` for no holder, an unknown node, or one the
/// constraints rule out (such entries are ignored, never an error).
pub(crate) fn holder(nodes: &NodeTable, t: &Tracked, index: u32) -> Option<u32> {
    let id = t.spec.sticky.get(&index)?;
    let slot = nodes.slot(id)?;
    eligible(nodes.spec(slot), &t.spec.constraints, &t.spec.needs).then_some(slot)
}

/// True when some replica placed here has a holder that is not its node in the ideal placement
/// (`ideal`, by workload slot): then the actual placement differs from the ideal one even with
/// every node available. Costs one emptiness test per workload without sticky entries.
pub(crate) fn diverges(
    nodes: &NodeTable,
    workloads: &[Option<Tracked>],
    ideal: &[Vec<Outcome>],
) -> bool {
    workloads.iter().zip(ideal).any(|(t, ideal)| {
        let Some(t) = t else { return false };
        t.spec.sticky.keys().any(|&index| {
            let Ok(p) = t.indices.binary_search(&index) else {
                return false;
            };
            holder(nodes, t, index).is_some_and(
                |h| !matches!(ideal.get(p), Some(Outcome::Assigned { slot, .. }) if *slot == h),
            )
        })
    })
}
