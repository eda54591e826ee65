//! The cell level's inputs (cells as their summaries say, and whether the mesh sees them down)
//! and its output (the cell of every replica).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::summary::{CellSummary, SummaryError};
use super::table::CellHealth;
use crate::placement::model::{InputError, ReplicaId, Unmet};

/// A cell as placement sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    pub assigned: CellAssignments,
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

/// Replica to cell name, compactly: every agent holds the cell of every replica of the mesh, and
/// a map of ids to names cost about 110 bytes a replica (two allocations each), a sixth of a
/// simulated agent's memory at 5,000 replicas. Here a replica costs 2 bytes: per workload, each
/// replica's index into the cell names (0 for none, `n` for the `n`th name). Iterates in
/// replica id order, as the map did; equal when they assign the same replicas to the same
/// cells, whatever order the names were met in.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CellAssignments {
    /// Cell names, in the order first assigned.
    names: Vec<String>,
    /// Per workload id: per replica index, 1 + its cell's index in `names`, or 0.
    cells: BTreeMap<String, Vec<u16>>,
    len: usize,
}

impl CellAssignments {
    /// Assigns replica `r` to `cell`; returns the cell it had, if any. At most `u16::MAX - 1`
    /// distinct cells (the mesh holds at most [`CELLS_MAX`](super::CELLS_MAX)).
    pub fn insert(&mut self, r: ReplicaId, cell: String) -> Option<String> {
        let at = match self.names.iter().position(|n| *n == cell) {
            Some(at) => at,
            None => {
                assert!(
                    self.names.len() < usize::from(u16::MAX - 1),
                    "more cells than a placement holds"
                );
                self.names.push(cell);
                self.names.len() - 1
            }
        };
        let slots = self.cells.entry(r.workload).or_default();
        let i = r.replica as usize;
        if slots.len() <= i {
            slots.resize(i + 1, 0);
        }
        let before = std::mem::replace(&mut slots[i], at as u16 + 1);
        match before {
            0 => {
                self.len += 1;
                None
            }
            n => Some(self.names[usize::from(n) - 1].clone()),
        }
    }

    /// The cell of replica `r`.
    pub fn get(&self, r: &ReplicaId) -> Option<&String> {
        let n = *self.cells.get(&r.workload)?.get(r.replica as usize)?;
        (n != 0).then(|| &self.names[usize::from(n) - 1])
    }

    /// Whether replica `r` has a cell.
    pub fn contains_key(&self, r: &ReplicaId) -> bool {
        self.get(r).is_some()
    }

    /// How many replicas have a cell.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no replica has a cell.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every replica with its cell, in replica id order.
    pub fn iter(&self) -> impl Iterator<Item = (ReplicaId, &String)> + '_ {
        self.cells.iter().flat_map(move |(w, slots)| {
            slots
                .iter()
                .enumerate()
                .filter(|(_, n)| **n != 0)
                .map(move |(i, n)| {
                    (
                        ReplicaId {
                            workload: w.clone(),
                            replica: i as u32,
                        },
                        &self.names[usize::from(*n) - 1],
                    )
                })
        })
    }

    /// Every replica's cell, in replica id order.
    pub fn values(&self) -> impl Iterator<Item = &String> + '_ {
        self.cells
            .values()
            .flat_map(|slots| slots.iter().filter(|n| **n != 0))
            .map(|n| &self.names[usize::from(*n) - 1])
    }

    /// The replica indices of workload `w` assigned to `cell`, ascending.
    pub fn indices_in<'a>(&'a self, w: &str, cell: &str) -> impl Iterator<Item = u32> + 'a {
        let at = self
            .names
            .iter()
            .position(|n| n == cell)
            .map(|at| at as u16 + 1);
        self.cells
            .get(w)
            .into_iter()
            .flat_map(|slots| slots.iter().enumerate())
            .filter(move |(_, n)| Some(**n) == at)
            .map(|(i, _)| i as u32)
    }

    /// The workloads with a replica assigned, by id.
    pub fn workloads(&self) -> impl Iterator<Item = &str> + '_ {
        self.cells
            .iter()
            .filter(|(_, slots)| slots.iter().any(|n| *n != 0))
            .map(|(w, _)| w.as_str())
    }
}

impl PartialEq for CellAssignments {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for CellAssignments {}

impl std::ops::Index<&ReplicaId> for CellAssignments {
    type Output = String;

    fn index(&self, r: &ReplicaId) -> &String {
        self.get(r).expect("a replica with no cell")
    }
}

impl<'a> IntoIterator for &'a CellAssignments {
    type Item = (ReplicaId, &'a String);
    type IntoIter = Box<dyn Iterator<Item = (ReplicaId, &'a String)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod assignments_tests {
    use super::*;

    fn r(w: &str, i: u32) -> ReplicaId {
        ReplicaId::new(w, i)
    }

    #[test]
    fn assignments_read_back_as_a_map_of_replica_to_cell_would() {
        let mut a = CellAssignments::default();
        assert_eq!(a.insert(r("web", 3), "c2".into()), None);
        assert_eq!(a.insert(r("api", 0), "c1".into()), None);
        assert_eq!(a.insert(r("web", 0), "c1".into()), None);
        assert_eq!(a.insert(r("web", 3), "c1".into()), Some("c2".to_string()));
        assert_eq!(a.len(), 3);
        assert_eq!(a.get(&r("web", 3)).map(String::as_str), Some("c1"));
        assert_eq!(a.get(&r("web", 1)), None);
        assert_eq!(a.get(&r("web", 9)), None);
        assert_eq!(a.get(&r("db", 0)), None);
        assert!(!a.contains_key(&r("web", 2)));
        let listed: Vec<(String, String)> = a
            .iter()
            .map(|(id, c)| (id.to_string(), c.clone()))
            .collect();
        let want = [("api/0", "c1"), ("web/0", "c1"), ("web/3", "c1")];
        assert_eq!(
            listed,
            want.map(|(a, b)| (a.to_string(), b.to_string())).to_vec()
        );
        assert_eq!(a.indices_in("web", "c1").collect::<Vec<_>>(), vec![0, 3]);
        assert_eq!(a.indices_in("web", "c2").count(), 0);
        assert_eq!(a.workloads().collect::<Vec<_>>(), vec!["api", "web"]);
        // The same assignments met in another order are equal; another cell is not.
        let mut b = CellAssignments::default();
        b.insert(r("web", 0), "c1".into());
        b.insert(r("web", 3), "c1".into());
        b.insert(r("api", 0), "c1".into());
        assert_eq!(a, b);
        b.insert(r("api", 0), "c3".into());
        assert_ne!(a, b);
    }
}
