//! `shoal plan`: where the replicas of some specs would go if they were applied, what else would
//! move, and what would fit nowhere, computed by the same placement every agent runs; nothing is
//! written (since wire 9).

use serde::{Deserialize, Serialize};

/// Most replica rows a plan lists per workload, and most moves of other replicas (the counts
/// are always whole).
pub const PLAN_ROWS_MAX: usize = 1000;

/// The answer to `Request::Plan`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanView {
    /// The agent that computed it.
    pub agent: String,
    /// The mesh version it placed at, and the placement algorithm that names.
    pub mesh_version: u16,
    /// The placement algorithm.
    pub placement_algorithm: u32,
    /// One per spec planned, in the order given.
    pub workloads: Vec<PlanWorkload>,
    /// Replicas of other workloads whose node would change (at most [`PLAN_ROWS_MAX`]).
    pub moves: Vec<PlanMove>,
    /// How many there are in all.
    pub moves_count: usize,
}

/// What applying one spec would do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanWorkload {
    /// The workload.
    pub name: String,
    /// `create`, `update` or `unchanged` (the spec equals the stored one).
    pub change: String,
    /// Its replica count.
    pub replicas: u32,
    /// Why an apply of it would be refused now (mesh version, host path), if it would be.
    pub refused: Option<String>,
    /// Each replica's node, or why it has none (at most [`PLAN_ROWS_MAX`]).
    pub rows: Vec<PlanRow>,
    /// How much of it fits, when some replicas fit nowhere.
    pub fit: Option<String>,
    /// How many of its replicas would be on another node than now.
    pub moved: u32,
}

/// One replica of a planned workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRow {
    /// Its index.
    pub replica: u32,
    /// The node it would run on.
    pub node: Option<String>,
    /// The node it is placed on now, when it exists now.
    pub now: Option<String>,
    /// Why it would have no node.
    pub reason: Option<String>,
}

/// A replica of another workload that the plan would move.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanMove {
    /// `workload/index`.
    pub replica: String,
    /// Where it is placed now.
    pub from: Option<String>,
    /// Where it would be (none: it would fit nowhere).
    pub to: Option<String>,
}
