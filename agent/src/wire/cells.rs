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
    /// This agent's view holds it degraded: stale, but not shown lost (its members answer, or
    /// too few cells say they do not). `None` from an agent older than wire version 14.
    #[serde(default, with = "shoal_core::version::since_14_lossy")]
    pub degraded: Option<bool>,
}

impl CellView {
    /// How `shoal nodes` and the web page name its state: `own`, `up`, `degraded` or `down`.
    pub fn state(&self) -> &'static str {
        match (self.own, self.down, self.degraded) {
            (true, _, _) => "own",
            (false, true, _) => "down",
            (false, false, Some(true)) => "degraded",
            (false, false, _) => "up",
        }
    }
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
