//! A bounded cache of placements by their inputs, for many agents in one process.
//!
//! Placement is a pure function of its inputs ([`place_cells`] for the cell level,
//! [`place_stacked_shares`] for the node level), and the agents of a mesh mostly hold the same
//! inputs: the same summaries of the cells, the same members of their cell, the same specs. A
//! real agent computes its own placement on its own CPU; the simulator runs thousands of agents
//! on two cores, where each computing the same result again made the cell level alone cost
//! O(agents x cells x replicas) per change of any cell. A [`PlacementMemo`] shared by the agents
//! of one process (and by the simulator's checker) computes each distinct input once.
//!
//! The memo changes no result: an entry is found by a hash of its inputs and taken only when
//! the inputs are equal to the ones it was computed from, so a hit returns exactly what the
//! function returns (a property test checks it against fresh calls). A real agent has no memo.
//! Bounded: at most [`CELL_ENTRIES`] cell-level and [`NODE_ENTRIES`] node-level results, the
//! least recently used dropped first.

use std::hash::Hasher;
use std::sync::{Arc, Mutex};

use crate::cells::{place_cells, Cell, CellPlacement};
use crate::placement::model::{Node, Placement, Share, Workload};
use crate::stacking::place_stacked_shares;

/// Cell-level results kept at most.
pub const CELL_ENTRIES: usize = 32;
/// Node-level results kept at most.
pub const NODE_ENTRIES: usize = 256;

/// How the memo served its callers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoStats {
    /// Cell-level results served from the memo.
    pub cell_hits: u64,
    /// Cell-level results computed.
    pub cell_misses: u64,
    /// Node-level results served from the memo.
    pub node_hits: u64,
    /// Node-level results computed (by the caller, or by the memo).
    pub node_misses: u64,
}

struct Entry<I, O> {
    hash: u64,
    inputs: I,
    out: Arc<O>,
    used: u64,
}

struct Table<I, O> {
    entries: Vec<Entry<I, O>>,
    cap: usize,
}

impl<I, O> Table<I, O> {
    fn new(cap: usize) -> Self {
        Table {
            entries: Vec::new(),
            cap,
        }
    }

    fn find(&mut self, hash: u64, tick: u64, same: impl Fn(&I) -> bool) -> Option<Arc<O>> {
        let e = self
            .entries
            .iter_mut()
            .find(|e| e.hash == hash && same(&e.inputs))?;
        e.used = tick;
        Some(e.out.clone())
    }

    fn insert(&mut self, hash: u64, inputs: I, out: Arc<O>, tick: u64) {
        if self.entries.len() >= self.cap {
            let oldest = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used);
            if let Some(i) = oldest {
                self.entries.swap_remove(i);
            }
        }
        self.entries.push(Entry {
            hash,
            inputs,
            out,
            used: tick,
        });
    }
}

type CellInputs = (Arc<Vec<Cell>>, Vec<Workload>);
type NodeInputs = (Vec<Node>, Vec<Share>);

struct Inner {
    cells: Table<CellInputs, CellPlacement>,
    nodes: Table<NodeInputs, Placement>,
    tick: u64,
    stats: MemoStats,
}

/// Placements by their inputs, shared by the agents of one process (module doc).
pub struct PlacementMemo {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for PlacementMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacementMemo")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for PlacementMemo {
    fn default() -> Self {
        PlacementMemo::new()
    }
}

/// A hash of the inputs' serialized forms (equal inputs, equal hashes).
fn hash_of<A: serde::Serialize + ?Sized, B: serde::Serialize + ?Sized>(a: &A, b: &B) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let a = serde_json::to_vec(a).expect("placement inputs always serialize");
    h.write_u64(a.len() as u64);
    h.write(&a);
    h.write(&serde_json::to_vec(b).expect("placement inputs always serialize"));
    h.finish()
}

/// A hash of the cell level's inputs: the cells by `Hash` (serializing 50 summaries each time
/// cost more than the lookup saved), the few workloads serialized.
fn cells_hash(cells: &[Cell], workloads: &[Workload]) -> u64 {
    use std::hash::Hash;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    cells.hash(&mut h);
    h.write(&serde_json::to_vec(workloads).expect("placement inputs always serialize"));
    h.finish()
}

impl PlacementMemo {
    /// An empty memo.
    pub fn new() -> PlacementMemo {
        PlacementMemo {
            inner: Mutex::new(Inner {
                cells: Table::new(CELL_ENTRIES),
                nodes: Table::new(NODE_ENTRIES),
                tick: 0,
                stats: MemoStats::default(),
            }),
        }
    }

    /// How it served so far.
    pub fn stats(&self) -> MemoStats {
        self.lock().stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while held leaves only a cache behind: its entries are whole or absent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`place_cells`]`(cells, workloads)`, computed once per distinct input.
    pub fn place_cells(
        &self,
        cells: &Arc<Vec<Cell>>,
        workloads: &[Workload],
    ) -> Arc<CellPlacement> {
        let hash = cells_hash(cells, workloads);
        let same = |(c, w): &CellInputs| {
            (Arc::ptr_eq(c, cells) || c.as_slice() == cells.as_slice()) && w.as_slice() == workloads
        };
        {
            let mut inner = self.lock();
            inner.tick += 1;
            let tick = inner.tick;
            if let Some(out) = inner.cells.find(hash, tick, same) {
                inner.stats.cell_hits += 1;
                return out;
            }
            inner.stats.cell_misses += 1;
        }
        // Computed without the lock: another thread may compute the same meanwhile, and then
        // both entries are equal.
        let out = Arc::new(place_cells(cells, workloads));
        let mut inner = self.lock();
        let tick = inner.tick;
        let inputs = (cells.clone(), workloads.to_vec());
        inner.cells.insert(hash, inputs, out.clone(), tick);
        out
    }

    /// The node-level result for these inputs if the memo holds it, else `None` with the key to
    /// [`PlacementMemo::keep_shares`] the result under once computed (a caller with an
    /// incremental placer computes it its own way).
    pub fn find_shares(&self, nodes: &[Node], shares: &[Share]) -> Result<Arc<Placement>, u64> {
        let hash = hash_of(nodes, shares);
        let same = |(n, s): &NodeInputs| n.as_slice() == nodes && s.as_slice() == shares;
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        match inner.nodes.find(hash, tick, same) {
            Some(out) => {
                inner.stats.node_hits += 1;
                Ok(out)
            }
            None => {
                inner.stats.node_misses += 1;
                Err(hash)
            }
        }
    }

    /// Keeps `out`, computed from these inputs, under `key` (from
    /// [`PlacementMemo::find_shares`]).
    pub fn keep_shares(&self, key: u64, nodes: &[Node], shares: &[Share], out: Arc<Placement>) {
        let mut inner = self.lock();
        let tick = inner.tick;
        let inputs = (nodes.to_vec(), shares.to_vec());
        inner.nodes.insert(key, inputs, out, tick);
    }

    /// [`place_stacked_shares`]`(nodes, shares)`, computed once per distinct input.
    pub fn place_stacked_shares(&self, nodes: &[Node], shares: &[Share]) -> Arc<Placement> {
        match self.find_shares(nodes, shares) {
            Ok(out) => out,
            Err(key) => {
                let out = Arc::new(place_stacked_shares(nodes, shares));
                self.keep_shares(key, nodes, shares, out.clone());
                out
            }
        }
    }

    /// [`place_stacked`](crate::stacking::place_stacked)`(nodes, workloads)`, computed once per
    /// distinct input.
    pub fn place_stacked(&self, nodes: &[Node], workloads: &[Workload]) -> Arc<Placement> {
        let shares: Vec<Share> = workloads.iter().cloned().map(Share::whole).collect();
        self.place_stacked_shares(nodes, &shares)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries with equal hashes are told apart by their inputs, and the least recently used
    /// goes first when full.
    #[test]
    fn a_table_takes_only_equal_inputs_and_stays_bounded() {
        let mut t: Table<u32, u32> = Table::new(2);
        t.insert(7, 1, Arc::new(10), 1);
        t.insert(7, 2, Arc::new(20), 2);
        assert_eq!(t.find(7, 3, |i| *i == 2).as_deref(), Some(&20));
        assert_eq!(t.find(7, 4, |i| *i == 1).as_deref(), Some(&10));
        assert_eq!(t.find(7, 5, |i| *i == 3), None);
        // 2 was used last at tick 3, 1 at tick 4: 2 goes.
        t.insert(8, 3, Arc::new(30), 6);
        assert_eq!(t.entries.len(), 2);
        assert_eq!(t.find(7, 7, |i| *i == 2), None);
        assert_eq!(t.find(7, 8, |i| *i == 1).as_deref(), Some(&10));
        assert_eq!(t.find(8, 9, |i| *i == 3).as_deref(), Some(&30));
    }

    /// The memo serves what the functions return, and counts.
    #[test]
    fn the_memo_serves_what_placement_returns() {
        use crate::placement::model::Node;
        use crate::resources::Resources;
        let node = |i: u32| Node {
            id: format!("n{i}"),
            capacity: Resources::new(4000, 8 << 30),
            labels: Default::default(),
            zone: "z1".into(),
            draining: false,
            down: false,
            caps: None,
        };
        let nodes: Vec<Node> = (0..4).map(node).collect();
        let w = vec![Workload {
            id: "web".into(),
            replicas: 5,
            request: Resources::new(100, 16 << 20),
            spread: crate::placement::model::Spread::Node,
            constraints: vec![],
            exclusive: false,
            priority: 0,
            sticky: Default::default(),
            needs: Default::default(),
            yields_when_short: false,
            yields_unplaced: false,
            cell_level_needs: false,
            ports_exclusive: false,
        }];
        let memo = PlacementMemo::new();
        let first = memo.place_stacked(&nodes, &w);
        assert_eq!(*first, crate::stacking::place_stacked(&nodes, &w));
        let again = memo.place_stacked(&nodes, &w);
        assert!(Arc::ptr_eq(&first, &again));
        let fewer = memo.place_stacked(&nodes[..3], &w);
        assert_eq!(*fewer, crate::stacking::place_stacked(&nodes[..3], &w));
        let s = memo.stats();
        assert_eq!((s.node_hits, s.node_misses), (1, 2));
    }
}
