//! A deterministic in-memory runtime for the simulator and for tests of the agent loop.
//!
//! Instances are records, not processes. Behaviour comes from a [`MemProfile`] per workload (and,
//! optionally, per revision of its spec: [`REVISION_ENV`]): start latency, starts that fail
//! (always, or with a probability drawn from the injected rng), a crash loop (running instances
//! exit after a delay), instances that ignore SIGTERM, failing probes. Tests crash instances on
//! demand, take the engine away, or kill the whole host.
//!
//! Time is tokio's clock only (pausable, so a simulated hour takes milliseconds), measured from
//! the runtime's `origin`: `started_at_ms` and `exited_at_ms` are ms since that origin plus the
//! runtime's `origin_ms` (0 unless [`MemRuntime::with_origin_ms`] says otherwise: the simulator
//! dates them like a real runtime's wall-clock times, which the agent's monotonic clock reads
//! like). Randomness is the rng passed in. Under a paused current-thread runtime the same seed and
//! the same calls give the same instances, handles, times and events.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rand::{Rng, RngExt, SeedableRng};
use tokio::sync::broadcast;
use tokio::task::AbortHandle;
use tokio::time::{Duration, Instant};

use crate::core::instance::{Phase, RuntimeInstance};
use crate::core::spec::{Probe, ReloadHook, Run, WorkloadSpec};
use crate::node::runtime::{
    ProbeOutcome, Runtime, RuntimeError, RuntimeEvent, RuntimeKind, StartRequest,
};

mod faults;

pub use faults::MemProfile;

/// The environment variable that names a spec's revision for the in-memory runtime: an instance
/// started from a spec whose environment holds it takes the profile set for that revision of its
/// workload ([`MemRuntime::set_revision_profile`]), if any, else the workload's. The simulator's
/// `update` events change it, so a bad revision can crash-loop while the others run.
pub const REVISION_ENV: &str = "SHOAL_SIM_REVISION";

/// Events buffered per subscriber of an in-memory runtime (see [`super::EVENTS_CAPACITY`]).
pub const MEM_EVENTS_CAPACITY: usize = 64;

/// The deterministic in-memory runtime. Cloning shares the same instances.
#[derive(Clone)]
pub struct MemRuntime {
    node: String,
    origin: Instant,
    /// What `origin` reads as, ms.
    origin_ms: u64,
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<RuntimeEvent>,
}

struct State {
    rng: Box<dyn Rng + Send>,
    profiles: BTreeMap<String, MemProfile>,
    /// Profiles of one revision of a workload ([`REVISION_ENV`]), over the workload's.
    revision_profiles: BTreeMap<(String, String), MemProfile>,
    instances: BTreeMap<String, MemInstance>,
    handles_issued: u64,
    starts: u64,
    engine_down: Option<String>,
    runs_processes: bool,
    runs_containers: bool,
    probe_overrides: BTreeMap<String, ProbeOutcome>,
}

struct MemInstance {
    instance: RuntimeInstance,
    ignores_sigterm: bool,
    reloads: u32,
    /// The revision of the spec it was started from ([`REVISION_ENV`]), if it names one.
    revision: Option<String>,
    /// The pending crash-loop exit, cancelled when the instance exits otherwise.
    exit_timer: Option<AbortHandle>,
}

impl MemRuntime {
    /// A runtime for `node` whose random decisions come from a `StdRng` seeded with `seed`; its
    /// clock starts now.
    pub fn new(node: &str, seed: u64) -> Self {
        Self::with_rng(
            node,
            rand::rngs::StdRng::seed_from_u64(seed),
            Instant::now(),
        )
    }

    /// A runtime for `node` with its own rng, reporting times in ms since `origin`.
    pub fn with_rng(node: &str, rng: impl Rng + Send + 'static, origin: Instant) -> Self {
        // Smaller than a real runtime's buffer: a tokio broadcast channel allocates every slot
        // up front (about 100 KB at EVENTS_CAPACITY), and the simulator runs thousands of
        // these; the host loop only needs to be woken (a lagged receiver wakes it too).
        let (events, _) = broadcast::channel(MEM_EVENTS_CAPACITY);
        let state = State {
            rng: Box::new(rng),
            profiles: BTreeMap::new(),
            revision_profiles: BTreeMap::new(),
            instances: BTreeMap::new(),
            handles_issued: 0,
            starts: 0,
            engine_down: None,
            runs_processes: true,
            runs_containers: true,
            probe_overrides: BTreeMap::new(),
        };
        MemRuntime {
            node: node.to_string(),
            origin,
            origin_ms: 0,
            state: Arc::new(Mutex::new(state)),
            events,
        }
    }

    /// The same runtime with its times reading `origin_ms` at `origin` (ms since the Unix epoch,
    /// say, as a real runtime dates instances with the wall clock and the agent's monotonic
    /// clock starts at the wall clock's reading: `shoal::node::host::clock::monotonic_from`).
    pub fn with_origin_ms(mut self, origin_ms: u64) -> Self {
        self.origin_ms = origin_ms;
        self
    }

    /// The instant its times count from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// What its times read at [`MemRuntime::origin`], ms.
    pub fn origin_ms(&self) -> u64 {
        self.origin_ms
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("mem runtime lock")
    }

    fn now_ms(&self) -> u64 {
        let elapsed = Instant::now().saturating_duration_since(self.origin);
        self.origin_ms + elapsed.as_millis() as u64
    }

    fn engine_check(&self) -> Result<(), RuntimeError> {
        match &self.lock().engine_down {
            Some(detail) => Err(RuntimeError::EngineUnavailable {
                detail: detail.clone(),
            }),
            None => Ok(()),
        }
    }

    fn profile(&self, workload: &str, revision: Option<&str>) -> MemProfile {
        self.lock()
            .profile(workload, revision)
            .cloned()
            .unwrap_or_default()
    }

    /// Records the exit of a live instance; false if it was not alive.
    fn exit(&self, handle: &str, exit_code: i32) -> bool {
        let now_ms = self.now_ms();
        {
            let mut state = self.lock();
            let Some(inst) = state.instances.get_mut(handle) else {
                return false;
            };
            if inst.instance.phase == Phase::Exited {
                return false;
            }
            if let Some(timer) = inst.exit_timer.take() {
                timer.abort();
            }
            let i = &mut inst.instance;
            i.phase = Phase::Exited;
            i.exited_at_ms = Some(now_ms);
            i.exit_code = Some(exit_code);
            // Sent under the lock, so events come out in the order of the changes.
            let _ = self.events.send(RuntimeEvent::Exited {
                handle: handle.to_string(),
                replica: i.replica.clone(),
                exit_code: Some(exit_code),
                at_ms: now_ms,
            });
        };
        true
    }

    /// Decides, after the start latency, whether this start fails.
    fn start_failure(&self, profile: &MemProfile) -> Option<String> {
        let mut state = self.lock();
        state.starts += 1;
        if let Some(reason) = &profile.fail_starts {
            return Some(reason.clone());
        }
        let p = profile.start_fail_probability;
        (p > 0.0 && state.rng.random::<f64>() < p).then(|| "injected start failure".to_string())
    }
}

impl State {
    /// The profile of `workload`'s instances of `revision`: the revision's own, else the
    /// workload's.
    fn profile(&self, workload: &str, revision: Option<&str>) -> Option<&MemProfile> {
        let own = revision.and_then(|r| {
            self.revision_profiles
                .get(&(workload.to_string(), r.to_string()))
        });
        own.or_else(|| self.profiles.get(workload))
    }
}

/// The revision a spec names in its environment ([`REVISION_ENV`]).
fn revision_of(spec: &WorkloadSpec) -> Option<String> {
    let env = match &spec.run {
        Run::Process(p) => &p.env,
        Run::Container(c) => &c.env,
    };
    env.get(REVISION_ENV).cloned()
}

#[async_trait]
impl Runtime for MemRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Mem
    }

    fn runs(&self) -> Vec<shoal_core::placement::Runtime> {
        use shoal_core::placement::Runtime;
        let state = self.lock();
        let kinds = [
            (state.runs_processes, Runtime::Process),
            (state.runs_containers, Runtime::Container),
        ];
        kinds.into_iter().filter(|k| k.0).map(|k| k.1).collect()
    }

    fn supports(&self, spec: &WorkloadSpec) -> Result<(), String> {
        let state = self.lock();
        match spec.run {
            Run::Process(_) if !state.runs_processes => Err("this agent runs containers only".into()),
            Run::Container(_) if !state.runs_containers => {
                Err("a container workload needs the docker runtime; this agent runs host processes only".into())
            }
            _ => Ok(()),
        }
    }

    async fn start(&self, request: StartRequest) -> Result<RuntimeInstance, RuntimeError> {
        self.engine_check()?;
        self.supports(&request.spec)
            .map_err(|reason| RuntimeError::Unsupported { reason })?;
        // As the process and docker runtimes refuse a host path outside the volume roots.
        if let Some((volume, path)) = request.spec.host_path_refused(&request.volume_roots) {
            return Err(RuntimeError::Unsupported {
                reason: format!("volume {volume:?}: host path {path} is under no volume root"),
            });
        }
        if request.node != self.node {
            let serving = self.node.clone();
            return Err(RuntimeError::WrongNode {
                requested: request.node,
                serving,
            });
        }
        let revision = revision_of(&request.spec);
        let profile = self.profile(&request.replica.workload, revision.as_deref());
        tokio::time::sleep(profile.start_latency).await;
        if let Some(reason) = self.start_failure(&profile) {
            return Err(RuntimeError::StartFailed { reason });
        }
        let instance = {
            let mut state = self.lock();
            state.handles_issued += 1;
            let replica = &request.replica;
            let handle = format!(
                "{}-{}-{}",
                replica.workload, replica.replica, state.handles_issued
            );
            let instance = RuntimeInstance {
                handle: handle.clone(),
                replica: replica.clone(),
                spec_version: request.spec_version.clone(),
                phase: Phase::Running,
                started_at_ms: self.now_ms(),
                exited_at_ms: None,
                exit_code: None,
                error: None,
                fence_token: request.fence_token,
                ports: request.ports.clone(),
            };
            let exit_timer = profile.exit_after.map(|after| {
                let (runtime, handle, code) = (self.clone(), handle.clone(), profile.exit_code);
                let timer = async move {
                    tokio::time::sleep(after).await;
                    runtime.exit(&handle, code);
                };
                tokio::spawn(timer).abort_handle()
            });
            let inst = MemInstance {
                instance: instance.clone(),
                ignores_sigterm: profile.ignores_sigterm,
                reloads: 0,
                revision,
                exit_timer,
            };
            state.instances.insert(handle.clone(), inst);
            let replica = instance.replica.clone();
            let _ = self.events.send(RuntimeEvent::Started { handle, replica });
            instance
        };
        Ok(instance)
    }

    async fn stop(&self, handle: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.engine_check()?;
        let ignores_sigterm = {
            let mut state = self.lock();
            let unknown = || RuntimeError::UnknownHandle {
                handle: handle.to_string(),
            };
            let inst = state.instances.get_mut(handle).ok_or_else(unknown)?;
            if inst.instance.phase == Phase::Exited {
                return Ok(());
            }
            inst.instance.phase = Phase::Stopping;
            inst.ignores_sigterm
        };
        if ignores_sigterm {
            tokio::time::sleep(grace).await;
            self.exit(handle, 128 + 9);
        } else {
            self.exit(handle, 128 + 15);
        }
        Ok(())
    }

    async fn list(&self) -> Result<Vec<RuntimeInstance>, RuntimeError> {
        self.engine_check()?;
        Ok(self
            .lock()
            .instances
            .values()
            .map(|i| i.instance.clone())
            .collect())
    }

    async fn remove(&self, handle: &str) -> Result<(), RuntimeError> {
        self.engine_check()?;
        let mut state = self.lock();
        match state.instances.get(handle) {
            Some(inst) if inst.instance.phase != Phase::Exited => Err(RuntimeError::StillRunning {
                handle: handle.to_string(),
            }),
            Some(_) => {
                state.instances.remove(handle);
                state.probe_overrides.remove(handle);
                Ok(())
            }
            None => Ok(()),
        }
    }

    async fn reload(
        &self,
        handle: &str,
        _hook: &ReloadHook,
        _settings: &BTreeMap<String, String>,
        _timeout: Duration,
    ) -> Result<(), RuntimeError> {
        self.engine_check()?;
        let mut state = self.lock();
        match state.instances.get_mut(handle) {
            Some(inst) if inst.instance.phase.may_be_alive() => {
                inst.reloads += 1;
                Ok(())
            }
            _ => Err(RuntimeError::ReloadFailed {
                reason: format!("instance {handle} is not running"),
            }),
        }
    }

    async fn probe(&self, handle: &str, _probe: &Probe, _timeout: Duration) -> ProbeOutcome {
        let state = self.lock();
        if let Some(reason) = &state.engine_down {
            return ProbeOutcome::fail(format!("engine unavailable: {reason}"));
        }
        let Some(inst) = state.instances.get(handle) else {
            return ProbeOutcome::fail(format!("no instance {handle:?} on this node"));
        };
        if inst.instance.phase == Phase::Exited {
            return ProbeOutcome::fail(format!("instance {handle} has exited"));
        }
        if let Some(outcome) = state.probe_overrides.get(handle) {
            return outcome.clone();
        }
        let workload = &inst.instance.replica.workload;
        match state
            .profile(workload, inst.revision.as_deref())
            .and_then(|p| p.probe_failure.clone())
        {
            Some(reason) => ProbeOutcome::fail(reason),
            None => ProbeOutcome::Healthy,
        }
    }

    fn events(&self) -> broadcast::Receiver<RuntimeEvent> {
        self.events.subscribe()
    }

    fn limits_note(&self) -> Option<String> {
        None
    }

    /// The in-memory runtime runs nothing, so there is no output: always
    /// [`RuntimeError::NoLogs`].
    async fn logs(
        &self,
        replica: &crate::core::instance::ReplicaId,
        _previous: bool,
        _query: &crate::node::runtime::logs::LogQuery,
    ) -> Result<crate::node::runtime::logs::LogPage, RuntimeError> {
        Err(RuntimeError::NoLogs {
            reason: format!(
                "{replica} runs on the in-memory runtime, whose instances print nothing: it                  keeps no logs"
            ),
        })
    }

    async fn exec(
        &self,
        handle: &str,
        _request: &crate::node::runtime::exec::ExecRequest,
    ) -> Result<crate::node::runtime::exec::ExecChild, RuntimeError> {
        Err(RuntimeError::ExecFailed {
            reason: format!(
                "instance {handle} runs on the in-memory runtime, whose instances are records, \
                 not processes: there is nothing to run a command in"
            ),
        })
    }
}
