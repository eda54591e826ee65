//! One agent's placement: the cell level for every replica of the mesh, the node level for the
//! replicas of its own cell on its cell's members ([`place_mesh`]), and the same kept up to date
//! by [`CellPlacer`], which redoes the cell level only when the cells' summaries or the specs
//! change, and the node level through a [`StackedPlacer`] (a node change in the cell costs what
//! it costs in a single cell).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::assign::place_cells;
use super::memo::PlacementMemo;
use super::model::{Cell, CellPlacement};
use crate::placement::model::{Node, Placement, Share, Spread, Workload};
use crate::stacking::{place_stacked_shares, StackedPlacer};

/// One agent's view: where every replica's cell is, and where its own cell's replicas run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshPlacement {
    /// The cell level: every replica's cell.
    pub cells: CellPlacement,
    /// The agent's own cell.
    pub cell: String,
    /// The node level in the agent's cell: the replicas the cell level gave it, on its members
    /// (replica ids keep the workload's indices), with the node level's reasons for those that
    /// do not fit. What [`place_stacked`](crate::stacking::place_stacked) gives for a whole mesh
    /// of one cell.
    pub local: Placement,
}

impl CellPlacement {
    /// What `cell`'s node level places: for each workload with replicas in the cell, those
    /// replicas by index; zone-spread ones with their home zones when the mesh has more than one
    /// cell (so a replica sent to a cell for its home zone gets a node there).
    pub fn shares(&self, cell: &str, workloads: &[Workload]) -> Vec<Share> {
        let mut indices: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for w in self.assigned.workloads() {
            let mine: Vec<u32> = self.assigned.indices_in(w, cell).collect();
            if !mine.is_empty() {
                indices.insert(w, mine);
            }
        }
        let mut shares = Vec::with_capacity(indices.len());
        for w in workloads {
            // A rejected (duplicated) id has no replica assigned, so it is not taken twice.
            let Some(indices) = indices.remove(w.id.as_str()) else {
                continue;
            };
            let home_zones = match (w.spread, self.cells_known > 1) {
                (Spread::Zone, true) => self.home_zones.get(&w.id).cloned().unwrap_or_default(),
                _ => Vec::new(),
            };
            shares.push(Share {
                workload: w.clone(),
                indices,
                home_zones,
            });
        }
        shares
    }
}

/// One agent's full placement: the cell level over `cells` for every workload, then the node
/// level of `own_cell` over its members `nodes` (every known member of the cell, down and
/// draining ones flagged, as single-level placement takes them). Pure.
pub fn place_mesh(
    own_cell: &str,
    cells: &[Cell],
    nodes: &[Node],
    workloads: &[Workload],
) -> MeshPlacement {
    let placed = place_cells(cells, workloads);
    let shares = placed.shares(own_cell, workloads);
    MeshPlacement {
        local: place_stacked_shares(nodes, &shares),
        cells: placed,
        cell: own_cell.to_string(),
    }
}

/// [`place_mesh`], kept up to date incrementally: its result equals `place_mesh` on the same
/// inputs, bit for bit (a property test checks it).
#[derive(Clone, Default)]
pub struct CellPlacer {
    /// The inputs of the last cell-level pass (shared with the caller's copy, when it passes
    /// one: [`CellPlacer::update_shared`]).
    cells: Arc<Vec<Cell>>,
    workloads: Vec<Workload>,
    /// Its own cell's shares, for the cell the last update named.
    shares: Vec<Share>,
    placer: StackedPlacer,
    result: MeshPlacement,
    fresh: bool,
    /// Results shared with the other agents of the process ([`CellPlacer::set_memo`]).
    memo: Option<Arc<PlacementMemo>>,
}

impl CellPlacer {
    /// A placer with no inputs yet.
    pub fn new() -> CellPlacer {
        CellPlacer::default()
    }

    /// Takes both levels' results from `memo`, and leaves there those it computes (the
    /// simulator's agents share one; [`crate::memo`]).
    pub fn set_memo(&mut self, memo: Option<Arc<PlacementMemo>>) {
        self.placer.set_memo(memo.as_ref().map(|m| m.nodes()));
        self.memo = memo;
    }

    /// The placement of these inputs: what [`place_mesh`] returns. The cell level is redone only
    /// when `cells` or `workloads` differ from the last call's (order counts: pass them in a
    /// stable order, e.g. by name); the node level goes through the incremental engine.
    pub fn update(
        &mut self,
        own_cell: &str,
        cells: &[Cell],
        nodes: &[Node],
        workloads: &[Workload],
    ) -> &MeshPlacement {
        let cells = match self.cells.as_slice() == cells {
            true => self.cells.clone(),
            false => Arc::new(cells.to_vec()),
        };
        self.update_shared(own_cell, &cells, nodes, workloads)
    }

    /// [`CellPlacer::update`] with the cells shared: the placer keeps `cells` itself, not a
    /// copy (an agent's cells are 50 summaries at 50 cells, about 70 KB).
    pub fn update_shared(
        &mut self,
        own_cell: &str,
        cells: &Arc<Vec<Cell>>,
        nodes: &[Node],
        workloads: &[Workload],
    ) -> &MeshPlacement {
        let same_cells = Arc::ptr_eq(&self.cells, cells) || self.cells == *cells;
        let cells_moved = !self.fresh || !same_cells || self.workloads != workloads;
        if cells_moved {
            self.result.cells = match &self.memo {
                Some(memo) => (*memo.place_cells(cells, workloads)).clone(),
                None => place_cells(cells, workloads),
            };
            self.cells = cells.clone();
            self.workloads = workloads.to_vec();
        }
        if cells_moved || self.result.cell != own_cell {
            self.shares = self.result.cells.shares(own_cell, workloads);
            self.result.cell = own_cell.to_string();
        }
        self.fresh = true;
        self.result.local = self.placer.update_shares(nodes, &self.shares);
        &self.result
    }

    /// The result of the last [`update`](CellPlacer::update) (empty before the first).
    pub fn last(&self) -> &MeshPlacement {
        &self.result
    }
}
