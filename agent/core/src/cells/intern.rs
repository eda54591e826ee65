//! Equal cell summaries held once per process ([`intern`]).
//!
//! Every agent holds every cell's summary, and a summary's `sees` names every cell: an agent's
//! table grows with the square of the number of cells (about 2.8 KB per summary at 50 cells, so
//! some 140 KB per agent; twice the cells, four times that). One agent per process holds each
//! summary once anyway; the simulator's real tier runs thousands of agents in one process, all
//! holding the same few versions of each cell's summary, so they hold one copy between them.
//!
//! Invisible to every result: [`intern`] returns a summary equal to the one it is given (a
//! copy found by a hash of its content is taken only when it is equal), so a table behaves the
//! same whether or not another table in the process holds that summary too. Bounded by what is
//! alive: the index holds weak references, swept of dead ones as it grows.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::summary::CellSummary;
use crate::stable_hash::StableHashMap;

/// The index: per content hash, the live summaries of that hash (almost always one).
#[derive(Default)]
struct Index {
    by_hash: StableHashMap<u64, Vec<Weak<CellSummary>>>,
    /// Weak references held, live or dead.
    held: usize,
    /// `held` after the last sweep: the next sweep comes when it has doubled.
    swept: usize,
}

/// Sweeps are never due below this many references.
const SWEEP_FLOOR: usize = 1_024;

fn index() -> &'static Mutex<Index> {
    static INDEX: OnceLock<Mutex<Index>> = OnceLock::new();
    INDEX.get_or_init(Default::default)
}

/// `summary`, or an equal one already held in this process, shared. `hash` is a hash of the
/// summary's whole content (a [`content_version`](super::content_version), or for placed
/// figures the placement hash).
pub(super) fn intern(summary: CellSummary, hash: u64) -> Arc<CellSummary> {
    // A poisoned lock holds a consistent index (nothing below panics between two writes).
    let mut index = index().lock().unwrap_or_else(|e| e.into_inner());
    let found = index.by_hash.get(&hash).and_then(|refs| {
        refs.iter()
            .filter_map(Weak::upgrade)
            .find(|held| **held == summary)
    });
    if let Some(held) = found {
        return held;
    }
    let shared = Arc::new(summary);
    index
        .by_hash
        .entry(hash)
        .or_default()
        .push(Arc::downgrade(&shared));
    index.held += 1;
    if index.held >= SWEEP_FLOOR.max(2 * index.swept) {
        index.by_hash.retain(|_, refs| {
            refs.retain(|r| r.strong_count() > 0);
            !refs.is_empty()
        });
        let held = index.by_hash.values().map(Vec::len).sum();
        index.held = held;
        index.swept = held;
    }
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(cell: &str, members: u32) -> CellSummary {
        CellSummary {
            cell: cell.into(),
            version: 0,
            members,
            capacity: Default::default(),
            largest: Default::default(),
            free: Default::default(),
            zones: Vec::new(),
            labels: Vec::new(),
            contacts: Vec::new(),
            sees: vec!["a".into(), "b".into()],
        }
    }

    #[test]
    fn equal_summaries_are_held_once_and_unequal_ones_of_one_hash_apart() {
        let a = intern(summary("intern-a", 3), 7);
        let b = intern(summary("intern-a", 3), 7);
        assert!(Arc::ptr_eq(&a, &b));
        // Another content under the same hash (a collision) is its own summary.
        let c = intern(summary("intern-a", 4), 7);
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.members, 4);
        assert_eq!(*a, summary("intern-a", 3));
    }

    #[test]
    fn a_summary_no_one_holds_is_swept_and_the_index_stays_bounded() {
        for round in 0..(4 * SWEEP_FLOOR as u64) {
            drop(intern(summary("intern-sweep", round as u32), round));
        }
        // Without sweeps this test alone would leave 4,096 dead references (other tests of the
        // process intern real summaries, whose hashes are not below 4,096).
        let index = index().lock().unwrap_or_else(|e| e.into_inner());
        let ours: usize = (0..4 * SWEEP_FLOOR as u64)
            .filter_map(|hash| index.by_hash.get(&hash))
            .map(Vec::len)
            .sum();
        assert!(ours <= 2 * SWEEP_FLOOR, "{ours} references left");
        assert!(index.held <= SWEEP_FLOOR.max(2 * index.swept));
    }
}
