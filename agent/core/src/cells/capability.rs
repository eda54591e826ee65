//! What a cell's members can run, as its summary tells it (placement algorithm 9): the cell level
//! gives a replica only to a cell whose members offer its runtime, and root workloads when it runs
//! as root, as the node level gives it only to a node whose capabilities meet its needs.
//!
//! **Encoding.** Reserved label offers, one key per capability, each listing the ranked capacity
//! of the cell's live, non-draining members that **lack** it: `shoal:lacks:process`,
//! `shoal:lacks:container`, `shoal:lacks:root`, with the value `yes`. So:
//! - The summary's format does not change. Builds before read them as label values no constraint
//!   can name (a constraint's key has no `:`, nor can a `--label`'s) and validate them as any
//!   other: one value per key, so a key's capacity never exceeds the cell's.
//! - Lacks, not offers: a summary that says nothing of capabilities (an envoy of an older build,
//!   members that gossip none: `Node::caps` is `None`) lacks nothing, and its cell stays eligible
//!   for everything, as the node level takes a node that said nothing to meet every need.
//! - [`summarize`](super::summarize) lists them first; ordinary labels get the rest of
//!   [`CELL_LABELS_MAX`](super::CELL_LABELS_MAX), so neither crowds the other out.
//! - Hysteresis republishes when the set of label values changes, or the set of capabilities no
//!   member offers ([`wholly_lacked`]), so whether a cell's members can run a replica at all is
//!   exact at every version; only the amounts are within 1/16.
//!
//! Host paths, fixed ports and `node` constraints are left to the node level: they depend on each
//! member's volume roots and ports, which a summary cannot carry in bounded size.

use crate::placement::model::{Capabilities, Runtime, Unmet, Workload};
use crate::resources::Resources;

use super::summary::CellSummary;

/// Prefix of the reserved label keys that say what a cell's members lack.
pub const LACKS_KEY_PREFIX: &str = "shoal:lacks:";
/// The value of every reserved label offer.
pub const LACKS_VALUE: &str = "yes";
/// How many reserved keys a summary may list (each runtime, and root).
pub const LACKS_KEYS_MAX: usize = 3;

/// The reserved key of a need the cell level judges (runtime, root), `None` for the others.
pub(crate) fn lacks_key(need: &Unmet) -> Option<&'static str> {
    match need {
        Unmet::Runtime(Runtime::Process) => Some("shoal:lacks:process"),
        Unmet::Runtime(Runtime::Container) => Some("shoal:lacks:container"),
        Unmet::Root => Some("shoal:lacks:root"),
        Unmet::HostPath(_) | Unmet::PortTaken(_) => None,
    }
}

/// The reserved keys of what a member with these capabilities lacks (nothing when it said
/// nothing), sorted.
pub(crate) fn lacked(caps: Option<&Capabilities>) -> Vec<&'static str> {
    let Some(caps) = caps else {
        return Vec::new();
    };
    let mut keys = Vec::with_capacity(LACKS_KEYS_MAX);
    for r in [Runtime::Process, Runtime::Container] {
        if !caps.runtimes.contains(&r) {
            keys.extend(lacks_key(&Unmet::Runtime(r)));
        }
    }
    if !caps.root_allowed {
        keys.extend(lacks_key(&Unmet::Root));
    }
    keys.sort_unstable();
    keys
}

/// What the cell level judges of a workload's needs: its runtime, then root; nothing unless
/// `cell_level_needs` is set (placement algorithm 9).
pub(crate) fn judged(w: &Workload) -> Vec<Unmet> {
    if !w.cell_level_needs {
        return Vec::new();
    }
    let mut needs = Vec::with_capacity(2);
    needs.extend(w.needs.runtime.map(Unmet::Runtime));
    if w.needs.root {
        needs.push(Unmet::Root);
    }
    needs
}

/// The capacity of the cell's members that offer `need`: the cell's, less what lacks it.
fn offering(summary: &CellSummary, need: &Unmet) -> Resources {
    let Some(key) = lacks_key(need) else {
        return summary.capacity;
    };
    let lacking = summary
        .label_values(key)
        .iter()
        .fold(Resources::default(), |a, l| a.saturating_add(&l.capacity));
    summary.capacity.saturating_sub(&lacking)
}

/// The capacity of the cell's members that could meet every need: the smallest of the needs'
/// capacities, per resource (an upper bound, as for constraints; the cell's capacity with none).
pub(crate) fn capable_capacity(summary: &CellSummary, needs: &[Unmet]) -> Resources {
    needs.iter().fold(summary.capacity, |c, need| {
        let o = offering(summary, need);
        Resources {
            cpu_millis: c.cpu_millis.min(o.cpu_millis),
            memory_bytes: c.memory_bytes.min(o.memory_bytes),
            ports: c.ports.min(o.ports),
        }
    })
}

/// True when some member of the cell offers `need` (capacity in every resource).
pub(crate) fn offers(summary: &CellSummary, need: &Unmet) -> bool {
    let o = offering(summary, need);
    o.cpu_millis > 0 && o.memory_bytes > 0
}

/// The reserved keys of the capabilities no member of the cell offers, by its summary, sorted:
/// hysteresis keeps a published summary only while these stay the same, so that whether a cell
/// can run a replica at all is exact at every version.
pub(crate) fn wholly_lacked(summary: &CellSummary) -> Vec<&str> {
    let from = summary
        .labels
        .partition_point(|l| l.key.as_str() < LACKS_KEY_PREFIX);
    summary.labels[from..]
        .iter()
        .take_while(|l| l.key.starts_with(LACKS_KEY_PREFIX))
        .filter(|l| {
            let o = summary.capacity.saturating_sub(&l.capacity);
            o.cpu_millis == 0 || o.memory_bytes == 0
        })
        .map(|l| l.key.as_str())
        .collect()
}
