//! The cell level's inputs (cells as their summaries say, and whether the mesh sees them down)
//! and its output (the cell of every replica).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::summary::{CellSummary, SummaryError};
use super::table::CellHealth;
use crate::placement::model::{InputError, ReplicaId, Unmet};

/// A cell as placement sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    /// Its latest summary.
    pub summary: CellSummary,
    /// The mesh has lost every envoy of the cell (failed, or cut off) and has not forgotten it
    /// yet. A down cell keeps its place in every ranking but takes no replica: its replicas
    /// wait in the cells ranked next, and come back when it does, to the cells they had.
    pub down: bool,
}

impl Cell {
    /// Not down, with a member and capacity: the cell may be given replicas.
    pub fn usable(&self) -> bool {
        let c = self.summary.capacity;
        !self.down && self.summary.members > 0 && c.cpu_millis > 0 && c.memory_bytes > 0
    }
}

/// How one agent's view of a cell changed between two readings of its cell table: what its
/// events say (`cell-down`, `cell-degraded`, `cell-up`, `cell-forgotten`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CellChange {
    /// Held up or degraded before (or first heard of as up), held down now.
    Down(String),
    /// Held up or down before, degraded now (stale, its members answer or too few cells say
    /// they do not).
    Degraded(String),
    /// Held down or degraded before, up again now.
    Up(String),
    /// Held down before, and no longer held at all (forgotten after `CELL_FORGET_MS`).
    Forgotten(String),
}

impl CellChange {
    /// The event kind.
    pub fn kind(&self) -> &'static str {
        match self {
            CellChange::Down(_) => "cell-down",
            CellChange::Degraded(_) => "cell-degraded",
            CellChange::Up(_) => "cell-up",
            CellChange::Forgotten(_) => "cell-forgotten",
        }
    }
}

/// The changes from `before` to `after` (two readings of the cells' standing, by cell name). A
/// cell first heard of is no change (a cell first heard of as down was down before this agent
/// knew it: also none); a cell gone that was not down moved nowhere (an up cell is not
/// forgotten, its summary was replaced under another name, or this agent restarted its table):
/// none either.
pub fn cell_changes(
    before: &[(String, CellHealth)],
    after: &[(String, CellHealth)],
) -> Vec<CellChange> {
    let was: BTreeMap<&str, CellHealth> = before.iter().map(|(c, h)| (c.as_str(), *h)).collect();
    let now: BTreeMap<&str, CellHealth> = after.iter().map(|(c, h)| (c.as_str(), *h)).collect();
    let mut out = Vec::new();
    for (cell, health) in &now {
        let Some(was) = was.get(cell) else {
            continue;
        };
        let cell = cell.to_string();
        match (was, health) {
            (a, b) if a == b => {}
            (_, CellHealth::Down) => out.push(CellChange::Down(cell)),
            (_, CellHealth::Degraded) => out.push(CellChange::Degraded(cell)),
            (_, CellHealth::Up) => out.push(CellChange::Up(cell)),
        }
    }
    for (cell, health) in &was {
        if *health == CellHealth::Down && !now.contains_key(cell) {
            out.push(CellChange::Forgotten(cell.to_string()));
        }
    }
    out.sort();
    out
}

/// An input the cell level refused; it is placed without it, and nothing panics.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CellInputError {
    /// Two or more cells share this name: all are left out (which one is right is unknown).
    DuplicateCell {
        /// The shared name.
        cell: String,
    },
    /// The cell's summary failed validation: the cell is left out.
    InvalidSummary {
        /// The name as given (cut to 64 bytes).
        cell: String,
        /// What was wrong.
        error: SummaryError,
    },
    /// A workload refused as node-level placement refuses it (duplicate, bad id, too many
    /// replicas): left out.
    Workload(InputError),
}

impl fmt::Display for CellInputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CellInputError::DuplicateCell { cell } => {
                write!(
                    f,
                    "cell {cell:?} appears more than once; all copies are ignored"
                )
            }
            CellInputError::InvalidSummary { cell, error } => {
                write!(f, "the summary of cell {cell:?} is ignored: {error}")
            }
            CellInputError::Workload(e) => e.fmt(f),
        }
    }
}

/// Why a replica has no cell. Computed by every agent for itself, never sent between agents.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CellUnschedulable {
    /// No cell can take a replica: every known cell is down, has no member or no capacity.
    NoCells {
        /// How many cells are known (valid summaries).
        known: u32,
    },
    /// Some cell is usable, but by their summaries none has members that can run the replica
    /// (placement algorithm 9): none offers its runtime, or root workloads when it runs as root.
    Incapable {
        /// How many cells are known (valid summaries).
        known: u32,
        /// The needs no usable cell offers; all the judged ones when each is offered by some
        /// cell but none offers them together. In the order runtime, root.
        needs: Vec<Unmet>,
    },
}

impl fmt::Display for CellUnschedulable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CellUnschedulable::NoCells { known } => write!(
                f,
                "none of the {known} known cells is up with a member and capacity"
            ),
            CellUnschedulable::Incapable { known, needs } => {
                let needs: Vec<String> = needs.iter().map(Unmet::to_string).collect();
                write!(
                    f,
                    "needs {}, which no cell that is up offers ({known} cells known)",
                    needs.join(" and ")
                )
            }
        }
    }
}

/// The cell of every replica: each replica of each accepted workload is in exactly one of
/// `assigned` and `unschedulable`, so an exclusive replica has one cell or none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellPlacement {
    /// Replica to cell name.
    pub assigned: BTreeMap<ReplicaId, String>,
    /// Replicas no cell can take, and why.
    pub unschedulable: BTreeMap<ReplicaId, CellUnschedulable>,
    /// Replicas assigned to a cell that, by the summaries, has no room for them or does not
    /// offer what their constraints ask (no cell does): that cell's node level decides, and
    /// reports them unschedulable with the exact reason if they do not fit.
    pub unsure: BTreeSet<ReplicaId>,
    /// For each zone-spread workload, the zones its replicas make their homes in, in order
    /// (replica `i`'s is `[i % len]`): its eligible zones over all cells, ranked by the
    /// workload's hash of each name as the node level ranks them.
    pub home_zones: BTreeMap<String, Vec<String>>,
    /// How many valid cells the inputs held (down ones included). With one, each cell's node
    /// level ranks its own zones (exactly what single-level placement does); with more, it is
    /// told `home_zones`.
    pub cells_known: u32,
    /// Inputs left out, sorted.
    pub rejected: Vec<CellInputError>,
}
