//! Cells: one Shoal mesh of many gossip domains, placed in two levels.
//!
//! A mesh of thousands of hosts is split into **cells** of about a hundred, each its own gossip
//! domain. Cells exchange only a [`CellSummary`] each (live members, ranked capacity in total,
//! per zone and per label value, what its members lack of the runtimes and root, what is free, a
//! few contact addresses, a version). Placement is
//! then two levels, both deterministic on every agent:
//!
//! 1. **Cell level** ([`place_cells`], every agent, every replica): weighted rendezvous over the
//!    cells, capacity-aware through the summaries, honouring constraints, what the members can
//!    run (placement algorithm 9) and zone spread; a full
//!    cell spills to the next in the replica's ranking; a down cell's replicas go to the cells
//!    ranked next and come back with it. `assign` states the rules.
//! 2. **Node level** (each agent, its own cell only): single-level placement
//!    ([`place_stacked_shares`](crate::stacking::place_stacked_shares)) of the replicas the cell
//!    level gave the cell ([`CellPlacement::shares`]) on the cell's members. A replica keeps its
//!    index, so it ranks nodes as if its whole workload were placed there.
//!
//! [`place_mesh`] is one agent's whole computation; [`CellPlacer`] keeps it up to date, redoing
//! the cell level only when summaries or specs change. A mesh of one cell places exactly as
//! single-level placement does. Envoys build their cell's summary with [`summarize`].
//!
//! The module is pure like the rest of the core: no I/O, no clock. Which cells are down, and
//! which summary version is the latest, are the shell's to decide and to feed in.

mod assign;
mod capability;
mod intern;
mod local;
mod memo;
mod model;
mod offer;
mod publish;
mod quorum;
mod settle;
mod summary;
mod table;

pub use assign::{cell_hash, place_cells, CELL_FILL_PERMILLE, CELL_SEED};
pub use capability::{LACKS_KEYS_MAX, LACKS_KEY_PREFIX, LACKS_VALUE};
pub use local::{place_mesh, CellPlacer, MeshPlacement};
pub use memo::{MemoStats, PlacementMemo};
pub use model::{
    cell_changes, Cell, CellAssignments, CellChange, CellInputError, CellPlacement,
    CellUnschedulable,
};
pub use publish::{summarize, RANKED_DRIFT_DIVISOR};
pub use quorum::CellQuorum;
pub use settle::{CellsSettle, CELLS_SETTLE_MAX_MS, CELLS_SETTLE_MS};
pub use summary::{
    CellSummary, LabelOffer, SummaryError, ZoneOffer, CELL_CONTACTS_MAX, CELL_CONTACT_LEN_MAX,
    CELL_LABELS_MAX, CELL_MEMBERS_MAX, CELL_NAME_LEN_MAX, CELL_SUMMARY_BYTES_MAX,
    CELL_TOKEN_LEN_MAX, CELL_ZONES_MAX,
};
pub use table::{
    content_version, CellEntry, CellHealth, CellRule, CellTable, EntryRefusal, Known, MergeOutcome,
    OwnBound, PlacementStamp, CELLS_MAX, CELL_DEGRADED_MS, CELL_DOWN_MS, CELL_DOWN_OBSERVERS,
    CELL_FORGET_MS, CELL_PROBED_MIN, CELL_PROBE_MS, CELL_REPROBE_MS, CELL_STALE_MS,
    STAMP_AHEAD_MAX_MS,
};

/// The mesh version from which cells are judged on evidence ([`CellRule::Evidence`]).
pub const CELL_EVIDENCE_SINCE: u16 = 14;

impl CellRule {
    /// The rule at mesh version `version`.
    pub fn at_mesh_version(version: u16) -> CellRule {
        match version >= CELL_EVIDENCE_SINCE {
            true => CellRule::Evidence,
            false => CellRule::Stamp,
        }
    }
}
