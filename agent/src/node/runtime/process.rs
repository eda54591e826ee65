//! The process runtime: replicas as supervised host processes.
//!
//! Each instance gets a directory `<data_dir>/instances/<handle>/` with its `state.json` (see
//! `process/state.rs`), and a log relay writing its stdout and stderr to bounded, rotated files
//! under `<data_dir>/logs/` (see `process/logs.rs` and [`crate::node::runtime::logs`]). The process leads its own process group,
//! so a stop reaches everything it forked: SIGTERM to the group, then SIGKILL after the grace.
//! Its working directory defaults to `<data_dir>/replicas/<workload>/<replica>/`, which outlives
//! instances so a restarted replica finds its files again; its data volumes are under
//! `<data_dir>/volumes/` ([`crate::node::runtime::volumes`]), named in `SHOAL_VOLUME_<NAME>` and
//! `SHOAL_DATA_DIR`.
//!
//! Adoption: [`ProcessRuntime::open`] reads every state file. A live process whose start time still
//! matches is watched through a pidfd (it is not our child, so `wait` is impossible; `/proc` is
//! polled only where the kernel has no pidfd); one that vanished while no agent was watching is
//! reported exited with an unknown code. Children the agent spawned itself are reaped with `wait`
//! and report their exit code. Either way an exit is reported the moment it happens
//! (`process/exit.rs`): the host loop restarts a crashed instance within milliseconds.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::{broadcast, watch};

use crate::core::instance::{ReplicaId, RuntimeInstance};
use crate::core::spec::{Probe, ReloadHook, Run, WorkloadSpec};
use crate::node::runtime::logs::{LogPage, LogQuery};
use crate::node::runtime::{
    wall_clock_ms, ProbeOutcome, Runtime, RuntimeError, RuntimeEvent, RuntimeKind, StartRequest,
    EVENTS_CAPACITY,
};

mod cgroup;
mod control;
mod exec;
mod exit;
mod logs;
mod spawn;
pub(crate) mod state;
mod user;

use cgroup::Cgroups;
pub use logs::{default_relay_program, LogConfig};
use state::InstanceState;
pub(crate) use user::give;
pub use user::{resolve_user, RunAs};

/// The `PATH` children get when the agent has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Why the process runtime refuses container specs.
const CONTAINER_ON_PROCESS: &str =
    "a container workload needs the docker runtime; this agent runs host processes only";

/// Where and how the process runtime keeps its instances.
#[derive(Clone, Debug)]
pub struct ProcessConfig {
    /// The agent's data directory; instances live under `instances/`, replica data under
    /// `replicas/`.
    pub data_dir: PathBuf,
    /// This node's id (recorded with each instance, exported as `SHOAL_NODE`).
    pub node: String,
    /// The cgroup v2 mount point (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// How often an adopted process (not our child) is checked for exit where the kernel gives
    /// no pidfd to wait on (before Linux 5.3, or a sandbox that refuses `pidfd_open`).
    pub adopted_poll_interval: Duration,
    /// How long to wait for an exit after SIGKILL before reporting a stuck stop.
    pub kill_wait: Duration,
    /// How instances' output is relayed and bounded.
    pub logs: LogConfig,
    /// Who an instance without `user` runs as, and whether root may (`--workload-user`,
    /// `--allow-root-workloads`).
    pub users: crate::node::runtime::users::WorkloadUsers,
}

impl ProcessConfig {
    /// The defaults for a node: cgroups at `/sys/fs/cgroup`, adopted processes polled every
    /// 200 ms where there is no pidfd, 5 s of patience after SIGKILL, output bounded to 10 MiB
    /// per instance in 2 files ([`LogConfig::default`]).
    pub fn new(data_dir: impl Into<PathBuf>, node: &str) -> Self {
        ProcessConfig {
            data_dir: data_dir.into(),
            node: node.to_string(),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            adopted_poll_interval: Duration::from_millis(200),
            kill_wait: Duration::from_secs(5),
            logs: LogConfig::default(),
            users: crate::node::runtime::users::WorkloadUsers::agents(),
        }
    }
}

/// Supervised host processes. Dropping it leaves the processes running for the next agent to adopt.
pub struct ProcessRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    config: ProcessConfig,
    cgroups: Cgroups,
    instances: Mutex<BTreeMap<String, Entry>>,
    events: broadcast::Sender<RuntimeEvent>,
    /// Set when the runtime is dropped: watchers stop recording (a fresh runtime owns the files).
    detached: AtomicBool,
    handles_issued: AtomicU64,
}

struct Entry {
    state: InstanceState,
    /// Becomes `true` when the exit was recorded.
    exited: watch::Receiver<bool>,
}

/// Gives the signals instances are sent (the reload hooks' HUP, USR1 and USR2; INT and QUIT,
/// which exec sessions forward) a handler in this process, so that every instance starts with
/// them at their default: a handled signal is reset on exec, an ignored one is inherited. An agent
/// started under `nohup` (HUP ignored) or in the background of a script (INT and QUIT ignored)
/// would otherwise start instances that cannot trap them (a shell refuses to trap a signal ignored
/// on entry), and a reload by signal would do nothing. The handlers only note the signal (tokio's);
/// the agent ignores them as before, except INT, on which `shoal agent` stops as it did.
fn catch_instance_signals() {
    use tokio::signal::unix::{signal, SignalKind};
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        for kind in [
            SignalKind::hangup(),
            SignalKind::user_defined1(),
            SignalKind::user_defined2(),
            SignalKind::interrupt(),
            SignalKind::quit(),
        ] {
            // The handler stays installed after the stream is dropped (tokio keeps it for the
            // process); a failure leaves the disposition as it was, which is only worth a line.
            if let Err(e) = signal(kind) {
                tracing::warn!(error = %e, signal = ?kind, "could not catch a signal for instances");
            }
        }
    });
}

impl ProcessRuntime {
    /// Opens the runtime over `config.data_dir` and adopts the instances found there. Must be
    /// called inside a tokio runtime (watchers are spawned).
    pub async fn open(config: ProcessConfig) -> Result<Self, RuntimeError> {
        catch_instance_signals();
        let instances_dir = config.data_dir.join("instances");
        std::fs::create_dir_all(&instances_dir)
            .map_err(|e| RuntimeError::io(format!("creating {}", instances_dir.display()), e))?;
        let (events, _) = broadcast::channel(EVENTS_CAPACITY);
        let inner = Arc::new(Inner {
            cgroups: Cgroups::detect(&config.cgroup_root),
            config,
            instances: Mutex::new(BTreeMap::new()),
            events,
            detached: AtomicBool::new(false),
            handles_issued: AtomicU64::new(0),
        });
        for state in state::load_all(&instances_dir)? {
            inner.adopt(state);
        }
        Ok(ProcessRuntime { inner })
    }

    /// The directory holding an instance's state file.
    pub fn instance_dir(&self, handle: &str) -> PathBuf {
        self.inner.instance_dir(handle)
    }

    /// The directory holding an instance's log files (`output.log`, `output.log.1`, ...), while
    /// the runtime knows the instance.
    pub fn log_dir(&self, handle: &str) -> Option<PathBuf> {
        let replica = {
            let instances = self.inner.instances.lock().expect("instances lock");
            instances.get(handle)?.state.replica.clone()
        };
        self.inner.log_dir(&replica, handle)
    }

    /// Everything kept of an instance's stdout or stderr, as the instance wrote it (each full line
    /// with its newline); empty when it has no log directory.
    pub fn output(&self, handle: &str, stream: crate::node::runtime::logs::Stream) -> String {
        self.log_dir(handle)
            .and_then(|dir| crate::node::runtime::logs::read::stream_text(&dir, stream).ok())
            .unwrap_or_default()
    }

    /// The pid (and process group) of a live instance, for tests and diagnostics.
    pub fn pid(&self, handle: &str) -> Option<i32> {
        let instances = self.inner.instances.lock().expect("instances lock");
        instances
            .get(handle)
            .filter(|e| !e.state.exited())
            .map(|e| e.state.pid)
    }
}

impl Drop for ProcessRuntime {
    fn drop(&mut self) {
        self.inner.detached.store(true, Ordering::SeqCst);
    }
}

impl Inner {
    fn instance_dir(&self, handle: &str) -> PathBuf {
        self.config.data_dir.join("instances").join(handle)
    }

    /// Takes over an instance found on disk (see the module doc).
    fn adopt(self: &Arc<Self>, mut state: InstanceState) {
        let (tx, rx) = watch::channel(state.exited());
        if !state.exited() {
            if state::is_same_live_process(state.pid, state.proc_start_ticks) {
                tracing::info!(handle = %state.handle, pid = state.pid, "adopted running process");
                tokio::spawn(exit::watch_adopted(self.clone(), state.clone(), tx));
            } else {
                state.exited_at_ms = Some(wall_clock_ms());
                state.stopping = false;
                state.error = Some("exited while no agent was watching (exit code unknown)".into());
                let _ = tx.send(true);
                if let Err(e) = state.save(&self.instance_dir(&state.handle)) {
                    tracing::warn!(error = %e, "could not record an adopted instance's exit");
                }
            }
        }
        let entry = Entry { state, exited: rx };
        let mut instances = self.instances.lock().expect("instances lock");
        instances.insert(entry.state.handle.clone(), entry);
    }

    /// Records an exit once, persists it, and tells the subscribers.
    fn record_exit(&self, handle: &str, exit_code: Option<i32>, tx: &watch::Sender<bool>) {
        if self.detached.load(Ordering::SeqCst) {
            return;
        }
        let event = {
            let mut instances = self.instances.lock().expect("instances lock");
            let Some(entry) = instances.get_mut(handle) else {
                return;
            };
            let state = &mut entry.state;
            if state.exited() {
                return;
            }
            state.exited_at_ms = Some(wall_clock_ms());
            state.exit_code = exit_code;
            state.stopping = false;
            if exit_code.is_none() {
                state.error = Some("exited while adopted (exit code unknown)".into());
            }
            if let Err(e) = state.save(&self.instance_dir(handle)) {
                tracing::warn!(error = %e, "could not record an exit");
            }
            if let Some(dir) = &state.cgroup {
                Cgroups::release(dir);
            }
            RuntimeEvent::Exited {
                handle: handle.to_string(),
                replica: state.replica.clone(),
                exit_code,
                at_ms: state.exited_at_ms.unwrap_or_default(),
            }
        };
        let _ = tx.send(true);
        let _ = self.events.send(event);
    }

    fn snapshot(
        &self,
        handle: &str,
    ) -> Result<(InstanceState, watch::Receiver<bool>), RuntimeError> {
        let instances = self.instances.lock().expect("instances lock");
        let entry = instances
            .get(handle)
            .ok_or_else(|| RuntimeError::UnknownHandle {
                handle: handle.to_string(),
            })?;
        Ok((entry.state.clone(), entry.exited.clone()))
    }

    /// A handle nobody has used on this node: `<workload>-<replica>-<8 hex digits>`.
    fn new_handle(&self, request: &StartRequest) -> String {
        let count = self.handles_issued.fetch_add(1, Ordering::Relaxed);
        let salt = format!(
            "{}/{}/{}/{count}",
            self.config.node,
            std::process::id(),
            wall_clock_nanos()
        );
        let suffix = xxhash_rust::xxh3::xxh3_64(salt.as_bytes()) as u32;
        format!(
            "{}-{}-{suffix:08x}",
            request.replica.workload, request.replica.replica
        )
    }
}

fn wall_clock_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Sends `signal` to the process group led by `pid`. A group that is already gone is fine.
fn signal_group(pid: i32, signal: Signal) {
    if pid <= 1 {
        return;
    }
    match nix::sys::signal::killpg(Pid::from_raw(pid), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pid, %signal, error = %e, "signalling the process group failed"),
    }
}

#[async_trait]
impl Runtime for ProcessRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Process
    }

    fn supports(&self, spec: &WorkloadSpec) -> Result<(), String> {
        match spec.run {
            Run::Process(_) => Ok(()),
            Run::Container(_) => Err(CONTAINER_ON_PROCESS.to_string()),
        }
    }

    async fn start(&self, request: StartRequest) -> Result<RuntimeInstance, RuntimeError> {
        self.inner.start(request)
    }

    async fn stop(&self, handle: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.inner.stop(handle, grace).await
    }

    async fn list(&self) -> Result<Vec<RuntimeInstance>, RuntimeError> {
        let instances = self.inner.instances.lock().expect("instances lock");
        Ok(instances.values().map(|e| e.state.to_instance()).collect())
    }

    async fn remove(&self, handle: &str) -> Result<(), RuntimeError> {
        self.inner.remove(handle)
    }

    async fn reload(
        &self,
        handle: &str,
        hook: &ReloadHook,
        settings: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<(), RuntimeError> {
        self.inner.reload(handle, hook, settings, timeout).await
    }

    async fn probe(&self, handle: &str, probe: &Probe, timeout: Duration) -> ProbeOutcome {
        self.inner.probe(handle, probe, timeout).await
    }

    fn events(&self) -> broadcast::Receiver<RuntimeEvent> {
        self.inner.events.subscribe()
    }

    fn limits_note(&self) -> Option<String> {
        self.inner.cgroups.note()
    }

    async fn data_missing(&self, replica: &ReplicaId, spec: &WorkloadSpec) -> Option<String> {
        crate::node::runtime::volumes::VolumeDirs::new(&self.inner.config.data_dir)
            .missing(replica, spec)
    }

    async fn purge_data(&self, workload: &str) -> Result<(), RuntimeError> {
        // The default working directories (`replicas/<workload>/`) are the workload's data too.
        let data_dir = self.inner.config.data_dir.clone();
        let dirs = crate::node::runtime::volumes::VolumeDirs::new(&data_dir);
        let workload = workload.to_string();
        tokio::task::spawn_blocking(move || {
            dirs.purge(&workload)?;
            let working = data_dir.join("replicas").join(&workload);
            match std::fs::remove_dir_all(&working) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RuntimeError::io(
                    format!("removing {}", working.display()),
                    e,
                )),
                _ => Ok(()),
            }
        })
        .await
        .map_err(|e| RuntimeError::StartFailed {
            reason: format!("purging data failed: {e}"),
        })?
    }

    async fn logs(
        &self,
        replica: &ReplicaId,
        previous: bool,
        query: &LogQuery,
    ) -> Result<LogPage, RuntimeError> {
        // File reads (up to the bound for a tail) stay off the async workers.
        let (inner, replica, query) = (self.inner.clone(), replica.clone(), query.clone());
        tokio::task::spawn_blocking(move || inner.logs(&replica, previous, &query))
            .await
            .map_err(|e| RuntimeError::NoLogs {
                reason: format!("reading logs failed: {e}"),
            })?
    }

    async fn exec(
        &self,
        handle: &str,
        request: &crate::node::runtime::exec::ExecRequest,
    ) -> Result<crate::node::runtime::exec::ExecChild, RuntimeError> {
        self.inner.exec(handle, request)
    }
}
