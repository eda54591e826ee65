//! One recorded action or outcome of an agent's reconciler (`shoal events`).

use serde::{Deserialize, Serialize};

/// One recorded action or outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Increasing number, per agent process.
    pub seq: u64,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// The node that acted.
    pub node: String,
    /// `start`, `stop`, `remove`, `reload`, `start-failed`, `stop-failed`, `probe`, ...
    pub kind: String,
    /// `workload/replica`, when it concerns one.
    pub replica: Option<String>,
    /// Why, in a sentence.
    pub reason: String,
    /// Who asked, for an operator's request (`name (role)` of the certificate that made it).
    #[serde(default)]
    pub by: Option<String>,
}
