//! [`PlacementMemo`]: the placements of many agents in one process, shared by input.
//!
//! Placement is a pure function of its inputs ([`place_cells`] for the cell level,
//! [`place_stacked_shares`] for the node level), and the agents of a mesh mostly hold the same
//! inputs: the same summaries of the cells, the same members of their cell, the same specs. A
//! real agent computes its own placement on its own CPU; the simulator runs thousands of agents
//! on two cores, where each computing the same result again made the cell level alone cost
//! O(agents x cells x replicas) per change of any cell. A [`PlacementMemo`] shared by the agents
//! of one process (and by the simulator's checker) computes each distinct input once
//! ([`crate::memo::Memo`]: taken only on equal inputs, so results are unchanged; a property test
//! checks it against fresh calls). A real agent has none. Bounded: at most [`CELL_ENTRIES`]
//! cell-level and [`NODE_ENTRIES`] node-level results, or what
//! [`PlacementMemo::with_capacity`] was given.

use std::sync::Arc;

use super::assign::place_cells;
use super::model::{Cell, CellPlacement};
use crate::memo::{hash_serialized, Memo};
use crate::placement::model::{Node, Placement, Share, Workload};
use crate::stacking::{node_level, place_stacked_shares, NodeMemo};

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

type CellInputs = (Arc<Vec<Cell>>, Vec<Workload>);

/// Placements by their inputs, shared by the agents of one process (module doc).
pub struct PlacementMemo {
    cells: Memo<CellInputs, CellPlacement>,
    nodes: Arc<NodeMemo>,
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

/// A hash of the cell level's inputs: the cells by `Hash` (serializing 50 summaries each time
/// cost more than the lookup saved), the few workloads serialized.
fn cells_hash(cells: &[Cell], workloads: &[Workload]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    cells.hash(&mut h);
    h.write_u64(hash_serialized(workloads, &()));
    h.finish()
}

impl PlacementMemo {
    /// An empty memo of [`CELL_ENTRIES`] and [`NODE_ENTRIES`].
    pub fn new() -> PlacementMemo {
        PlacementMemo::with_capacity(CELL_ENTRIES, NODE_ENTRIES)
    }

    /// An empty memo of at most `cell_entries` cell-level and `node_entries` node-level
    /// results (at least the defaults): a process of many agents while a large mesh forms
    /// holds more distinct views at once than the defaults keep, and each result pushed out
    /// is computed again by the next agent that asks.
    pub fn with_capacity(cell_entries: usize, node_entries: usize) -> PlacementMemo {
        PlacementMemo {
            cells: Memo::new(cell_entries.max(CELL_ENTRIES)),
            nodes: Arc::new(Memo::new(node_entries.max(NODE_ENTRIES))),
        }
    }

    /// How it served so far.
    pub fn stats(&self) -> MemoStats {
        let (cell_hits, cell_misses) = self.cells.counts();
        let (node_hits, node_misses) = self.nodes.counts();
        MemoStats {
            cell_hits,
            cell_misses,
            node_hits,
            node_misses,
        }
    }

    /// The node level's part, for a [`StackedPlacer`](crate::stacking::StackedPlacer).
    pub fn nodes(&self) -> Arc<NodeMemo> {
        self.nodes.clone()
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
        let inputs = || (cells.clone(), workloads.to_vec());
        (self.cells).get_or(hash, same, inputs, || place_cells(cells, workloads))
    }

    /// [`place_stacked_shares`]`(nodes, shares)`, computed once per distinct input.
    pub fn place_stacked_shares(&self, nodes: &[Node], shares: &[Share]) -> Arc<Placement> {
        node_level(&self.nodes, nodes, shares, || {
            place_stacked_shares(nodes, shares)
        })
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
    use crate::resources::Resources;

    /// The memo serves what the functions return, and counts.
    #[test]
    fn the_memo_serves_what_placement_returns() {
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
