//! [`RuntimeError`]: what the world can do to a runtime call. Each variant says whether anything
//! changed on the node, so the caller knows whether to look (`list`) before retrying.

use std::time::Duration;

/// Why a runtime call failed. Messages say what was wrong and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The spec cannot run on this runtime (a container spec on the process runtime). Nothing
    /// was started.
    #[error("this runtime cannot run the workload: {reason}")]
    Unsupported {
        /// Why, for `shoal issues`.
        reason: String,
    },
    /// The request names another node than the one this runtime serves: a programming error in
    /// the caller. Nothing was started.
    #[error("start request for node {requested:?} sent to the runtime of node {serving:?}")]
    WrongNode {
        /// The node in the request.
        requested: String,
        /// The node this runtime labels its instances with.
        serving: String,
    },
    /// The image is not in the engine's local store and the spec says `pull = "never"`.
    /// Nothing was started.
    #[error(
        "image {image:?} is not on this host and the spec says pull = \"never\": load it here \
         (docker load, docker pull) or let the agent pull it (pull = \"if-not-present\")"
    )]
    ImageMissing {
        /// The image reference from the spec.
        image: String,
    },
    /// The engine could not pull the image (unknown registry, wrong credentials, no such tag or
    /// digest, a digest that does not match). Nothing was started; the same reference is not
    /// pulled again before its backoff has passed.
    #[error("pulling image {image:?} failed: {reason}")]
    PullFailed {
        /// The image reference from the spec.
        image: String,
        /// The engine's reason.
        reason: String,
    },
    /// The program does not exist (not in `PATH`, or not in the image). Nothing is left running;
    /// a container that was created for it has been removed.
    #[error("command {command:?} not found: install it, or fix the spec's command or PATH")]
    CommandNotFound {
        /// The program name.
        command: String,
    },
    /// The spec's working directory does not exist on this host. Nothing was started.
    #[error("working directory {path:?} does not exist on this host: create it or fix the spec")]
    WorkingDirMissing {
        /// The directory.
        path: String,
    },
    /// The container engine cannot be reached. Nothing is known to have changed; retry with
    /// backoff, and `list` once it is back (an `EngineAvailable` event says when).
    #[error("container engine unreachable: {detail} (is the Docker daemon running?)")]
    EngineUnavailable {
        /// The transport error.
        detail: String,
    },
    /// The engine answered with an error. The operation did not take effect.
    #[error("container engine refused to {operation}: {detail}")]
    Engine {
        /// What was asked ("create container", "start container", ...).
        operation: &'static str,
        /// The engine's message.
        detail: String,
    },
    /// No instance with this handle is known to this runtime. Nothing changed.
    #[error("no instance {handle:?} on this node")]
    UnknownHandle {
        /// The handle asked for.
        handle: String,
    },
    /// `remove` of an instance that may still be alive. Nothing changed.
    #[error("instance {handle:?} is still running: stop it before removing it")]
    StillRunning {
        /// The handle.
        handle: String,
    },
    /// The instance did not exit even after SIGKILL (or the engine's kill) and the wait after it.
    /// It has been signalled; `list` tells whether it is gone.
    #[error(
        "instance {handle:?} did not exit within {} after being killed",
        crate::core::spec::format_duration_ms(.waited.as_millis() as u64)
    )]
    StopTimedOut {
        /// The handle.
        handle: String,
        /// How long the runtime waited after the kill.
        waited: Duration,
    },
    /// The instance could not be started for another reason (spawn failure, injected failure).
    /// Nothing is left running.
    #[error("start failed: {reason}")]
    StartFailed {
        /// Why.
        reason: String,
    },
    /// The reload hook failed (signal refused, command failed or timed out). The instance keeps
    /// running with whatever it had applied.
    #[error("reload failed: {reason}")]
    ReloadFailed {
        /// Why.
        reason: String,
    },
    /// A file under the data directory could not be read or written. The instance's state on
    /// disk may be stale; the process itself is unaffected.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// No output of the asked instance is kept here (never started here, the previous instance's
    /// logs are gone, or the runtime keeps no output). Nothing changed.
    #[error("{reason}")]
    NoLogs {
        /// What is missing, and where to look instead.
        reason: String,
    },
    /// An operator's command could not be started in the instance (not running, program not
    /// found, engine refusal). Nothing is left running.
    #[error("{reason}")]
    ExecFailed {
        /// Why, naming the instance.
        reason: String,
    },
}

impl RuntimeError {
    /// Whether the same call may succeed later without any change to the spec: the engine was
    /// unreachable or the instance was slow to die. Everything else needs a change by someone.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            RuntimeError::EngineUnavailable { .. } | RuntimeError::StopTimedOut { .. }
        )
    }

    /// An [`RuntimeError::Io`] with its context.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        RuntimeError::Io {
            context: context.into(),
            source,
        }
    }
}
