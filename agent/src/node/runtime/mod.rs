//! Runtimes: what actually starts, stops, lists and probes instances on this node.
//!
//! One trait, [`Runtime`], three implementations:
//! - [`process::ProcessRuntime`]: supervised host processes, one process group each, a JSON
//!   state file under `<data_dir>/instances/<handle>/`, output through a log relay into bounded
//!   files under `<data_dir>/logs/` ([`logs`]), cgroup v2 limits where writable;
//! - [`docker::DockerRuntime`]: containers through the Docker engine API (bollard), labelled
//!   `shoal.*` so a restarted agent finds them again;
//! - [`mem::MemRuntime`]: a deterministic in-memory runtime for the simulator.
//!
//! A runtime executes; it never decides. Which replica to start, when to restart and when to give
//! up is the reconciler's business (in the core); the agent loop feeds it [`Runtime::list`] and
//! [`RuntimeEvent`]s and calls back here with what it returned.
//!
//! **Architecture Invariant:** every instance a runtime starts can be found again by a fresh
//! runtime over the same node (state files, engine labels): [`Runtime::list`] after an agent
//! restart reports it, alive or exited, so the agent adopts instead of starting a duplicate.
//!
//! **Architecture Invariant:** runtimes report failures as [`RuntimeError`] values and events; no
//! input, missing image or vanished engine makes them panic.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::core::instance::{PullProgress, ReplicaId, RuntimeInstance};
use crate::core::spec::{Probe, ReloadHook, WorkloadSpec};

pub mod docker;
mod error;
pub mod exec;
pub mod logs;
pub mod mem;
pub mod probe;
pub mod process;
pub mod users;
pub mod volumes;

pub use error::RuntimeError;

/// How many events a runtime buffers per subscriber. A subscriber that falls further behind gets
/// `RecvError::Lagged` and must resynchronise with [`Runtime::list`].
pub const EVENTS_CAPACITY: usize = 1024;

/// Which runtime an implementation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuntimeKind {
    /// Host processes.
    Process,
    /// Docker containers.
    Docker,
    /// The simulator's in-memory runtime.
    Mem,
}

impl RuntimeKind {
    /// The lowercase name, as `status` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Process => "process",
            RuntimeKind::Docker => "docker",
            RuntimeKind::Mem => "mem",
        }
    }
}

impl std::fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to start: one replica of one spec version, on this node.
#[derive(Clone, Debug)]
pub struct StartRequest {
    /// The replica to run.
    pub replica: ReplicaId,
    /// The validated spec (shared: the agent keeps one copy per version).
    pub spec: Arc<WorkloadSpec>,
    /// The store version string the spec came from, recorded with the instance.
    pub spec_version: String,
    /// This node's id; must be the node the runtime serves.
    pub node: String,
    /// An exclusive replica's fencing token, handed to the instance as `SHOAL_FENCE_TOKEN` and
    /// recorded with it (the runtime lists the instance with it, after an agent restart too).
    pub fence_token: Option<u64>,
    /// The host's advertised address, handed to the instance as `SHOAL_ADDR`.
    pub addr: IpAddr,
    /// The host port of each of the spec's named ports (allocated by the host, or fixed by the
    /// spec), handed to the instance as `SHOAL_PORT_<NAME>` and recorded with it.
    pub ports: BTreeMap<String, u16>,
    /// The node's `--volume-root` directories: each of the spec's host paths must resolve,
    /// symlinks included, beneath one of them at this start (`volumes::VolumeDirs::prepare`).
    pub volume_roots: Arc<[String]>,
}

impl StartRequest {
    /// A request with no named ports and no volume roots, on the unspecified address (tests and
    /// tools).
    pub fn new(
        replica: ReplicaId,
        spec: Arc<WorkloadSpec>,
        spec_version: &str,
        node: &str,
    ) -> StartRequest {
        StartRequest {
            replica,
            spec,
            spec_version: spec_version.to_string(),
            node: node.to_string(),
            fence_token: None,
            addr: IpAddr::from([0, 0, 0, 0]),
            ports: BTreeMap::new(),
            volume_roots: Arc::from(Vec::new()),
        }
    }
}

/// Something a runtime noticed without being asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeEvent {
    /// An instance started (also reported for starts the agent asked for).
    Started {
        /// The instance.
        handle: String,
        /// Its replica.
        replica: ReplicaId,
    },
    /// An instance exited, by itself or because it was stopped.
    Exited {
        /// The instance.
        handle: String,
        /// Its replica.
        replica: ReplicaId,
        /// Exit code, or 128 + signal; `None` when the runtime could not learn it (an adopted
        /// process that exited while the agent was down).
        exit_code: Option<i32>,
        /// When, in ms since the Unix epoch.
        at_ms: u64,
    },
    /// The engine's own health check changed state (docker only).
    Health {
        /// The instance.
        handle: String,
        /// Its replica.
        replica: ReplicaId,
        /// The new state.
        healthy: bool,
    },
    /// The container engine went away: calls fail with [`RuntimeError::EngineUnavailable`] and
    /// exits are not reported until [`RuntimeEvent::EngineAvailable`].
    EngineUnavailable {
        /// The error that showed it.
        reason: String,
    },
    /// The engine is back: call [`Runtime::list`] to catch up on what happened meanwhile.
    EngineAvailable,
}

/// The result of one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The probe passed.
    Healthy,
    /// The probe failed, timed out, or could not be run.
    Unhealthy {
        /// Why, for `status` and `issues`.
        reason: String,
    },
}

impl ProbeOutcome {
    /// A failed outcome with this reason.
    pub fn fail(reason: impl Into<String>) -> Self {
        ProbeOutcome::Unhealthy {
            reason: reason.into(),
        }
    }

    /// Whether the probe passed.
    pub fn is_healthy(&self) -> bool {
        matches!(self, ProbeOutcome::Healthy)
    }
}

/// A place where instances run. Implementations are cheap to share behind an `Arc<dyn Runtime>`.
///
/// Calls never block on each other for long: `stop` may take up to its grace plus a short kill
/// wait, so the agent runs it in its own task. Every call may be retried; `remove` and `stop` of
/// an exited instance succeed.
#[async_trait]
pub trait Runtime: Send + Sync {
    /// Which runtime this is.
    fn kind(&self) -> RuntimeKind;

    /// Whether this runtime can run `spec`; `Err` carries the reason for `shoal issues`.
    fn supports(&self, spec: &WorkloadSpec) -> Result<(), String>;

    /// The kinds of spec it runs at all (what the reconciler's input and the gossiped
    /// capabilities say): processes for the process runtime, containers for docker, both for
    /// the in-memory runtime unless it was told otherwise (`MemRuntime::set_supported`).
    fn runs(&self) -> Vec<shoal_core::placement::Runtime> {
        use shoal_core::placement::Runtime;
        match self.kind() {
            RuntimeKind::Process => vec![Runtime::Process],
            RuntimeKind::Docker => vec![Runtime::Container],
            RuntimeKind::Mem => vec![Runtime::Process, Runtime::Container],
        }
    }

    /// Starts one instance and returns it as the runtime sees it right after (running, or
    /// already exited if it died at once). On error nothing is left running.
    async fn start(&self, request: StartRequest) -> Result<RuntimeInstance, RuntimeError>;

    /// Stops an instance: SIGTERM (or the engine's stop), then SIGKILL after `grace`; returns
    /// once it exited. Stopping an exited instance succeeds at once.
    async fn stop(&self, handle: &str, grace: Duration) -> Result<(), RuntimeError>;

    /// Every instance this node manages, alive or exited and not yet removed, including those
    /// started by an earlier agent process: this is how a restarted agent adopts its instances.
    async fn list(&self) -> Result<Vec<RuntimeInstance>, RuntimeError>;

    /// Forgets an exited instance and deletes what it left (state, logs, container). Unknown
    /// handles succeed (already removed); a live instance is refused.
    async fn remove(&self, handle: &str) -> Result<(), RuntimeError>;

    /// Tells a running instance that its live settings changed: a signal to its main process,
    /// or a command run in its context with every setting as `SHOAL_SETTING_<NAME>`.
    async fn reload(
        &self,
        handle: &str,
        hook: &ReloadHook,
        settings: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<(), RuntimeError>;

    /// Runs one probe against an instance within `timeout`. Never fails: a probe that cannot
    /// run is unhealthy, with the reason.
    async fn probe(&self, handle: &str, probe: &Probe, timeout: Duration) -> ProbeOutcome;

    /// A new subscription to this runtime's events, from now on (bounded: see
    /// [`EVENTS_CAPACITY`]).
    fn events(&self) -> broadcast::Receiver<RuntimeEvent>;

    /// What this runtime cannot enforce here, said plainly for `status`; `None` when it enforces
    /// every limit in the spec.
    fn limits_note(&self) -> Option<String>;

    /// The starts in flight that wait for an image pull, by replica, with the pull's progress
    /// (docker only; the agent shows them as `pulling`).
    fn pulling(&self) -> BTreeMap<ReplicaId, PullProgress> {
        BTreeMap::new()
    }

    /// Why this node does not hold the data of `replica` of `spec` any more (a data directory,
    /// or the docker volume Shoal names for it, is missing), when it can tell; `None`: it holds
    /// it, or cannot tell (the default).
    async fn data_missing(&self, replica: &ReplicaId, spec: &WorkloadSpec) -> Option<String> {
        let _ = (replica, spec);
        None
    }

    /// Removes what `workload` keeps on this node in its volumes (`shoal delete --purge-data`):
    /// its data volumes, and the docker volumes Shoal named for its replicas. Called once no
    /// instance of it is listed here. Nothing to remove is fine; the default keeps nothing.
    async fn purge_data(&self, workload: &str) -> Result<(), RuntimeError> {
        let _ = workload;
        Ok(())
    }

    /// Output of the replica's newest instance on this node (with `previous`, of the one before
    /// it), as `query` asks: at most [`logs::PAGE_BYTES_MAX`] bytes of text per answer.
    /// [`RuntimeError::NoLogs`] when this node keeps none of it.
    async fn logs(
        &self,
        replica: &ReplicaId,
        previous: bool,
        query: &logs::LogQuery,
    ) -> Result<logs::LogPage, RuntimeError>;

    /// Starts `request`'s command in the context of the running instance `handle` (its
    /// environment and working directory, or its container) for an operator; the caller drives
    /// it ([`exec::ExecChild`]). [`RuntimeError::ExecFailed`] when it cannot run.
    async fn exec(
        &self,
        handle: &str,
        request: &exec::ExecRequest,
    ) -> Result<exec::ExecChild, RuntimeError>;
}

/// The environment variable that carries a live setting to the workload.
pub fn setting_env_name(name: &str) -> String {
    format!("SHOAL_SETTING_{}", name.to_ascii_uppercase())
}

/// The variable that carries an exclusive replica's fencing token to the workload.
pub const FENCE_TOKEN_ENV: &str = "SHOAL_FENCE_TOKEN";

/// The variable that carries a named port to the workload: `SHOAL_PORT_<NAME>`, uppercased,
/// `-` as `_` (`grpc-admin` -> `SHOAL_PORT_GRPC_ADMIN`).
pub fn port_env_name(name: &str) -> String {
    format!("SHOAL_PORT_{}", name.to_ascii_uppercase().replace('-', "_"))
}

/// The variable that carries the host's advertised address to the workload.
pub const ADDR_ENV: &str = "SHOAL_ADDR";

/// The environment an instance starts with, on top of the runtime's base: the spec's variables,
/// every setting as `SHOAL_SETTING_<NAME>`, then `SHOAL_WORKLOAD`, `SHOAL_REPLICA`, `SHOAL_NODE`,
/// `SHOAL_ADDR`, each named port as `SHOAL_PORT_<NAME>` and, for an exclusive replica,
/// `SHOAL_FENCE_TOKEN` (set last, so a spec cannot fake them).
pub fn instance_env(
    request: &StartRequest,
    spec_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = spec_env.clone();
    // Validation keeps a secret's name out of `env`; its value reaches the instance only here.
    if let Some(secrets) = &request.spec.secret_env {
        env.extend(secrets.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    for (name, value) in &request.spec.settings {
        env.insert(setting_env_name(name), value.clone());
    }
    env.insert("SHOAL_WORKLOAD".into(), request.replica.workload.clone());
    env.insert("SHOAL_REPLICA".into(), request.replica.replica.to_string());
    env.insert("SHOAL_NODE".into(), request.node.clone());
    env.insert(ADDR_ENV.into(), request.addr.to_string());
    for (name, port) in &request.ports {
        env.insert(port_env_name(name), port.to_string());
    }
    match request.fence_token {
        Some(token) => env.insert(FENCE_TOKEN_ENV.into(), token.to_string()),
        None => env.remove(FENCE_TOKEN_ENV),
    };
    env
}

/// The fencing token an instance was started with, read back from its environment.
pub fn fence_token_of(env: &BTreeMap<String, String>) -> Option<u64> {
    env.get(FENCE_TOKEN_ENV)?.parse().ok()
}

/// Wall-clock time in ns since the Unix epoch (0 if the clock is before 1970): the stamp of a log
/// line.
pub(crate) fn wall_clock_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Wall-clock time in ms since the Unix epoch (0 if the clock is before 1970). Only the real
/// runtimes read it; the in-memory runtime derives time from tokio's (pausable) clock.
pub(crate) fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
