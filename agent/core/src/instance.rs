//! The vocabulary shared by the reconciler (core), the runtimes (shell) and gossip: what an
//! instance of a replica is and what state it is in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::placement::model::ReplicaId;

/// Lifecycle phase of an instance, as `shoal status -o json` prints it (lowercase).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Wanted here, not started yet (waiting for backoff, fencing or an approval).
    Pending,
    /// Started, within its start grace or not yet proven healthy.
    Starting,
    /// Running (and healthy when it has a probe that passed).
    Running,
    /// Being stopped (SIGTERM or engine stop sent, grace running).
    Stopping,
    /// Exited (by itself or stopped); the exit code is in the observation.
    Exited,
    /// Could not be started (image missing, command not found, engine unreachable).
    Failed,
    /// A start in flight whose image the runtime is pulling first (docker); it may yet become
    /// an instance, so it counts as a copy as `starting` does.
    Pulling,
}

impl Phase {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Starting => "starting",
            Phase::Running => "running",
            Phase::Stopping => "stopping",
            Phase::Exited => "exited",
            Phase::Failed => "failed",
            Phase::Pulling => "pulling",
        }
    }

    /// Whether a process or container may be alive in this phase (it holds resources and, for an
    /// exclusive replica, counts as a copy).
    pub fn may_be_alive(self) -> bool {
        matches!(
            self,
            Phase::Pulling | Phase::Starting | Phase::Running | Phase::Stopping
        )
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An image pull a start waits for, as far as the engine has reported it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullProgress {
    /// The image reference being pulled.
    pub image: String,
    /// Bytes downloaded so far, over every layer the engine has reported.
    pub done_bytes: u64,
    /// Bytes to download, over the same layers (0 until the engine knows any size).
    pub total_bytes: u64,
}

/// What a runtime reports about one instance it manages on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeInstance {
    /// The runtime's handle: a container id, or a process-runtime instance id. Unique per node.
    pub handle: String,
    /// Which replica it runs.
    pub replica: ReplicaId,
    /// The spec version it was started from (the store version string).
    pub spec_version: String,
    /// Alive or exited, as far as the runtime knows (never `Pending`).
    pub phase: Phase,
    /// When it was started, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// When it exited, if it did.
    pub exited_at_ms: Option<u64>,
    /// Exit code (or 128 + signal) if it exited.
    pub exit_code: Option<i32>,
    /// Why it failed to start or what the runtime last reported wrong.
    pub error: Option<String>,
    /// The fencing token it was started with (`SHOAL_FENCE_TOKEN`), recorded by the runtime so
    /// that an adopted instance keeps it; `None` for a normal replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_token: Option<u64>,
    /// The host ports it was given by name (`SHOAL_PORT_<NAME>`), recorded by the runtime so
    /// that an adopted instance keeps them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ports: BTreeMap<String, u16>,
}
