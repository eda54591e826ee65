//! What agents say of cells: a cell as `shoal nodes` lists it, and one cell's answer about the
//! copies of replicas it was asked about.

use shoal_core::cells::CellSummary;
use shoal_core::instance::ReplicaId;

/// A cell as `shoal nodes` lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CellView {
    /// Its summary, as last published.
    pub summary: CellSummary,
    /// This agent's view holds it down.
    pub down: bool,
    /// Since this agent last heard of it, ms.
    pub heard_ms_ago: u64,
    /// It is this agent's own cell.
    pub own: bool,
}

/// Of the replicas asked, what one cell said (`Response::CellCopies`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CopiesAnswer {
    /// Placed by the cell on a live member that gossips a serving copy.
    pub serving: Vec<ReplicaId>,
    /// With a copy that may be alive (starting, running, stopping) on any member of the cell
    /// whose last state reached the answering agent.
    pub alive: Vec<ReplicaId>,
    /// Placed in the cell by the answering agent's cell level.
    pub claimed: Vec<ReplicaId>,
}
