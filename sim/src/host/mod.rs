//! How the simulator runs each host's agent: exactly the code `shoal agent` runs
//! ([`shoal::agent::Agent`]: the mesh node, the host with its loop, the API), with the agent's
//! in-memory runtime in place of processes or containers, the host's (skewable) wall clock for
//! what is dated, and the simulation's clock as the monotonic clock. The simulator only
//! freezes the loop while the host is paused and hands the scenario's instance profiles to the
//! runtime; the invariant checkers read the runtimes, never this code.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal::agent::run::RunningNode;
use shoal::agent::Agent;
use shoal::node::guard::MemGuard;
use shoal::node::host::{Host, HostConfig as LoopConfig};
use shoal::node::runtime::mem::{MemProfile, MemRuntime, REVISION_ENV};
use shoal::state::mesh::node::WallClock;
use shoal_core::reconcile::ReconcileConfig;
use shoal_core::spec::{Run, WorkloadSpec};

use crate::scenario::{HostConfig, InstanceProfile};

/// Where a host is in its life: what the driver (`world`) keeps and the checkers read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostState {
    /// Not running (crashed or not started yet).
    Down,
    /// Its agent is joining.
    Starting,
    /// Its agent runs.
    Up,
}

/// Instance behaviour per workload and per revision, changed while the run goes on.
pub type Profiles = Arc<Mutex<ProfileTable>>;

/// Instance behaviour: per workload (`[[workloads]]`, `instance` events), and per revision of a
/// workload (an `update` event's faults), which instances started from that revision follow
/// whatever the workload's says.
#[derive(Clone, Debug, Default)]
pub struct ProfileTable {
    /// Per workload.
    pub workloads: BTreeMap<String, InstanceProfile>,
    /// Per (workload, revision).
    pub revisions: BTreeMap<(String, u64), InstanceProfile>,
}

/// The revision of a spec: its `SHOAL_SIM_REVISION` ([`REVISION_ENV`]), which `update` events
/// raise; 0 when it has none (a spec as first applied).
pub fn revision(spec: &WorkloadSpec) -> u64 {
    let env = match &spec.run {
        Run::Process(p) => &p.env,
        Run::Container(c) => &c.env,
    };
    env.get(REVISION_ENV)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Sets a spec's revision: one environment variable changes, so every replica is replaced.
pub fn set_revision(spec: &mut WorkloadSpec, revision: u64) {
    let env = match &mut spec.run {
        Run::Process(p) => &mut p.env,
        Run::Container(c) => &mut c.env,
    };
    env.insert(REVISION_ENV.into(), revision.to_string());
}

/// How old a peer's confirmation that it hears a host may be, in the simulator: its timers
/// are shorter than an agent's (fencing delay 5 s), and the host asks every second.
pub const HEARD_WINDOW_MS: u64 = 1_500;

/// The reconciler's timers for a scenario's `[host]` settings.
pub fn reconcile_config(h: &HostConfig) -> ReconcileConfig {
    ReconcileConfig {
        heard_window_ms: HEARD_WINDOW_MS,
        stop_grace_ms: h.stop_ms,
        orphan_handoff_max_ms: h.handoff_max_ms,
        self_fence_ms: h.fence_timeout_ms,
        fence_stop_grace_ms: h.stop_ms.min(h.fence_timeout_ms),
        fencing_delay_ms: h.fence_delay_ms,
        ..ReconcileConfig::default()
    }
}

/// The in-memory runtime's behaviour for a scenario's instance profile.
pub fn mem_profile(p: &InstanceProfile) -> MemProfile {
    MemProfile {
        start_latency: Duration::from_millis(p.start_ms),
        start_fail_probability: p.start_fail,
        exit_after: p
            .crash_after_ms
            .map(|d| Duration::from_millis(p.start_ms + d)),
        ..MemProfile::default()
    }
}

/// Hands every workload's and revision's profile to `mem` (future starts follow it).
pub fn apply_profiles(mem: &MemRuntime, profiles: &Profiles) {
    let table = profiles.lock().expect("profiles");
    for (w, p) in &table.workloads {
        mem.set_profile(w, mem_profile(p));
    }
    for ((w, revision), p) in &table.revisions {
        mem.set_revision_profile(w, &revision.to_string(), mem_profile(p));
    }
}

/// What one agent incarnation of a host is assembled from.
pub struct AgentParts {
    /// The joined mesh node.
    pub running: RunningNode,
    /// The host's in-memory runtime.
    pub mem: MemRuntime,
    /// The host's wall clock (skewed by clock faults).
    pub clock: WallClock,
    /// The simulation's start: the monotonic clock reads [`crate::clock::BASE_MS`] then.
    pub t0: tokio::time::Instant,
    /// Timing.
    pub config: HostConfig,
    /// The guard a previous agent left running (a planned restart): adopted instead of a new one.
    pub guard: Option<MemGuard>,
    /// `--volume-root` directories (`[[hosts]]`; none by default, as `shoal agent`).
    pub volume_roots: Vec<String>,
    /// Placements shared by input with the run's other agents (`HostConfig::placement_memo`).
    pub memo: Arc<shoal_core::cells::PlacementMemo>,
}

/// Assembles and starts the agent: the same [`Agent`] as `shoal agent`, with its guard (returned
/// too, for the simulator to watch it and to stop it when the host dies). The monotonic clock is
/// the simulation's, never the skewed wall clock, and reads like true wall-clock time
/// ([`crate::clock::BASE_MS`] at the start), as a real agent's starts at the wall clock's
/// reading (`shoal::node::host::clock::monotonic_from`): what the agent gossips on it (a phase's
/// `since_ms`) is compared with peers' wall clocks. The in-memory runtime dates instances on
/// the same scale (`MemRuntime::with_origin_ms`), as a real runtime's wall-clock dates.
pub fn start_agent(parts: AgentParts) -> (Agent, MemGuard) {
    let config = LoopConfig {
        tick: Duration::from_millis(parts.config.reconcile_interval_ms),
        reconcile: reconcile_config(&parts.config),
        volume_roots: parts.volume_roots,
        placement_memo: Some(parts.memo),
        ..LoopConfig::default()
    };
    let t0 = parts.t0;
    let base_ms = parts.mem.origin_ms();
    let mono: shoal::node::host::clock::MonoClock =
        Arc::new(move || base_ms + t0.elapsed().as_millis() as u64);
    // The lease of `shoal agent`'s guard (`GuardConfig::new`): the reconciler's self-fencing time.
    let guard = parts.guard.unwrap_or_else(|| {
        MemGuard::start(
            parts.mem.clone(),
            config.reconcile.self_fence_ms,
            parts.clock.clone(),
        )
    });
    let (host, host_loop) = Host::new(
        parts.running.node.clone(),
        Arc::new(parts.mem),
        parts.clock,
        mono,
        config,
    );
    host.attach_guard(guard.clone());
    let agent = Agent::start(parts.running, host, host_loop);
    (agent, guard)
}
