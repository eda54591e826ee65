//! The observed state of this node's instances, as the shell gossips it and `shoal status` prints
//! it; peers' copies of the same records come back in [`ReconcileInput::peers`](super::ReconcileInput::peers).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::instance::{Phase, PullProgress, ReplicaId};

/// One instance (or one replica waiting for its instance) on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceStatus {
    /// The replica.
    pub replica: ReplicaId,
    /// The runtime handle; `None` for a replica placed here that has no instance yet (`pending`).
    pub handle: Option<String>,
    /// The phase: `starting` until a probe passes (or, without a probe, until it runs),
    /// `stopping` from the moment a stop is sent.
    pub phase: Phase,
    /// Running, not being stopped, and its probe passing (or no probe).
    pub healthy: bool,
    /// Restarts of this replica on this node since the agent started (after exits and failed
    /// health checks; rolling updates and handoffs are not restarts).
    pub restarts: u32,
    /// The spec version it runs (after a successful reload, the version it was reloaded to); for a
    /// pending replica, the version it will start.
    pub spec_version: String,
    /// Since when it has been in this phase, on the reporting agent's monotonic clock (ms):
    /// comparable with that agent's other reports only, never with another agent's clock.
    pub since_ms: u64,
    /// Exit code of the last exit, if it exited.
    pub exit_code: Option<i32>,
    /// The last thing that went wrong (start error, probe detail, exit), at most 256 bytes.
    pub last_error: Option<String>,
    /// The fencing token of an exclusive replica's instance (or of its start in flight): it
    /// grows every time the replica's ownership moves. `None` for normal replicas, for a pending
    /// claim, and in the gossip of agents that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_token: Option<u64>,
    /// Consecutive failures (exits, failed health, failed starts) of the replica at
    /// `spec_version` on this node: a rollout reads a crash loop of a new version from it. Reset
    /// once an instance stayed healthy for the restart policy's `backoff_reset`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// The host ports the instance was given, by name (the spec's named ports, allocated or
    /// fixed): what DNS answers in SRV records. Empty for a pending replica and in the gossip of
    /// agents that predate it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ports: BTreeMap<String, u16>,
    /// For a start in flight that waits for its image (`pulling`): the pull's progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullProgress>,
    /// A pending replica whose start waits for its data, held on another node (`data.rs`): that
    /// node keeps running its copy meanwhile rather than stopping it for a start that is not
    /// coming. False everywhere else, and in the gossip of agents that predate it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub waits_for_data: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl InstanceStatus {
    /// A report of `replica`'s instance `handle` in `phase` at `spec_version`, healthy when
    /// running, with nothing else to tell: no restarts, failures, exit, error, ports or pull.
    pub fn new(
        replica: ReplicaId,
        handle: Option<String>,
        phase: Phase,
        spec_version: impl Into<String>,
    ) -> InstanceStatus {
        InstanceStatus {
            replica,
            handle,
            phase,
            healthy: phase == Phase::Running,
            restarts: 0,
            spec_version: spec_version.into(),
            since_ms: 0,
            exit_code: None,
            last_error: None,
            fence_token: None,
            failures: 0,
            ports: BTreeMap::new(),
            pull: None,
            waits_for_data: false,
        }
    }

    /// Whether a process or container may be alive (counts as a copy for exclusive replicas).
    pub fn may_be_alive(&self) -> bool {
        self.phase.may_be_alive()
    }

    /// Whether this copy serves: running and healthy.
    pub fn serves(&self) -> bool {
        self.healthy && self.phase == Phase::Running
    }
}
