//! What the reconciler asks the shell to do. Every action carries a sentence for `shoal events`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::instance::ReplicaId;
use crate::spec::{ReloadHook, WorkloadSpec};

/// One step of reconciliation, for the shell to execute with a runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start a new instance of `replica` from `spec`, labelled with `replica` and `version` so a
    /// restarted agent adopts it. If the runtime cannot, the shell reports it through
    /// [`Reconciler::handle_start_failed`](super::Reconciler::handle_start_failed) or lists the
    /// instance as `failed`.
    Start {
        /// The replica.
        replica: ReplicaId,
        /// The spec to run.
        spec: Arc<WorkloadSpec>,
        /// The spec's store version, to label the instance with.
        version: String,
        /// For an exclusive replica, its fencing token: the runtime hands it to the instance as
        /// `SHOAL_FENCE_TOKEN` and records it, so that it lists the instance with it (adoption
        /// keeps it). `None` for a normal replica.
        fence_token: Option<u64>,
        /// Why, for `shoal events`.
        reason: String,
    },
    /// Stop an instance: the polite signal, `grace_ms`, then the kill. Keep its record (the
    /// reconciler sends [`Action::Remove`] when it is no longer needed).
    Stop {
        /// The runtime handle.
        handle: String,
        /// The replica it runs.
        replica: ReplicaId,
        /// Time between the polite signal and the kill.
        grace_ms: u64,
        /// Why, as data.
        cause: StopCause,
        /// Why, for `shoal events`.
        reason: String,
    },
    /// Run the spec's reload hook in a running instance: its live settings changed. Report the
    /// outcome with [`Reconciler::handle_reload_result`](super::Reconciler::handle_reload_result).
    Reload {
        /// The runtime handle.
        handle: String,
        /// The replica it runs.
        replica: ReplicaId,
        /// The hook to run (a signal, or a command with the settings in its environment).
        hook: ReloadHook,
        /// The new settings.
        settings: BTreeMap<String, String>,
        /// The spec version the instance runs once the hook succeeds.
        version: String,
        /// Why, for `shoal events`.
        reason: String,
    },
    /// Forget an exited instance's record (remove the container, delete the process record).
    Remove {
        /// The runtime handle.
        handle: String,
        /// The replica it ran.
        replica: ReplicaId,
        /// Why, for `shoal events`.
        reason: String,
    },
}

/// Why an instance is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopCause {
    /// This node lost sight of a majority for the self-fencing timeout (exclusive replica).
    Fence,
    /// Its probe failed past the failure threshold; it will be restarted with backoff.
    Unhealthy,
    /// Another instance of the same replica runs here (or replaced it after a surge).
    Duplicate,
    /// It runs an older spec version; a new instance replaces it (rolling update).
    Update,
    /// It moved to another node, whose copy is healthy now.
    Handoff,
    /// It moved to another node, whose copy did not become healthy within the handoff bound.
    HandoffTimeout,
    /// An exclusive replica moved to another node: stop before the new owner starts.
    ExclusiveMoved,
    /// Its workload was deleted.
    Deleted,
    /// Its workload was scaled below its index.
    ScaledDown,
    /// An operator asked for this replica to restart (`shoal restart NAME/REPLICA`): a new
    /// instance starts here once it stopped, without backoff (a planned stop is no failure).
    Restart,
}

impl StopCause {
    /// Whether the stop is decided on this node's view alone, with no copy known healthy
    /// elsewhere: such stops are held when the view is suspicious (never mass-stop).
    pub fn is_unilateral(self) -> bool {
        matches!(
            self,
            StopCause::HandoffTimeout
                | StopCause::ExclusiveMoved
                | StopCause::Deleted
                | StopCause::ScaledDown
        )
    }

    /// Whether the exit that follows counts as a failure of the replica (backoff applies).
    pub fn is_failure(self) -> bool {
        self == StopCause::Unhealthy
    }
}

impl fmt::Display for StopCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopCause::Fence => "fence",
            StopCause::Unhealthy => "unhealthy",
            StopCause::Duplicate => "duplicate",
            StopCause::Update => "update",
            StopCause::Handoff => "handoff",
            StopCause::HandoffTimeout => "handoff-timeout",
            StopCause::ExclusiveMoved => "exclusive-moved",
            StopCause::Deleted => "deleted",
            StopCause::ScaledDown => "scaled-down",
            StopCause::Restart => "restart",
        })
    }
}

impl Action {
    /// The replica the action is about.
    pub fn replica(&self) -> &ReplicaId {
        match self {
            Action::Start { replica, .. }
            | Action::Stop { replica, .. }
            | Action::Reload { replica, .. }
            | Action::Remove { replica, .. } => replica,
        }
    }

    /// The human reason.
    pub fn reason(&self) -> &str {
        match self {
            Action::Start { reason, .. }
            | Action::Stop { reason, .. }
            | Action::Reload { reason, .. }
            | Action::Remove { reason, .. } => reason,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Start {
                replica,
                version,
                fence_token: Some(token),
                reason,
                ..
            } => {
                let version = crate::hlc::format_version(version);
                write!(
                    f,
                    "start {replica} at {version} with fencing token {token}: {reason}"
                )
            }
            Action::Start {
                replica,
                version,
                reason,
                ..
            } => {
                let version = crate::hlc::format_version(version);
                write!(f, "start {replica} at {version}: {reason}")
            }
            Action::Stop {
                handle,
                replica,
                cause,
                reason,
                ..
            } => {
                write!(f, "stop {replica} ({handle}, {cause}): {reason}")
            }
            Action::Reload {
                handle,
                replica,
                version,
                reason,
                ..
            } => {
                let version = crate::hlc::format_version(version);
                write!(f, "reload {replica} ({handle}) to {version}: {reason}")
            }
            Action::Remove {
                handle,
                replica,
                reason,
            } => {
                write!(f, "remove {replica} ({handle}): {reason}")
            }
        }
    }
}
