//! The host loop: turns this node's slice of the placement into running instances.
//!
//! [`HostLoop::run`] owns the sans-IO [`Reconciler`]. It runs a round whenever something may have
//! changed (a runtime event, a probe or start result, a node leaving the live set, an operator's
//! approval) or a timer of the reconciler is due ([`Reconciler::poll_timeout`]), and at least
//! every `tick`, which catches what only gossip tells (peers' reports, new specs). A round builds
//! a [`ReconcileInput`] from the store, the gossip view and the runtime's list, hands it to the
//! reconciler, executes the actions it returns on the runtime, starts due probes, and gossips the
//! observed state of its instances and its issues.
//!
//! [`Host`] is the part others hold: the API and `/metrics` read the snapshot the loop published
//! after its last round (no lock is held across an await), and send approvals to the loop. The
//! host holds its mesh node; the node knows nothing of the host (no ownership cycle: dropping
//! the agent frees both).
//!
//! Durations run on a monotonic clock ([`clock`]); the wall clock only dates events and the
//! saved last-majority time.

mod claims;
pub mod clock;
mod data;
mod endpoints;
mod exec;
mod guard;
pub mod heard;
mod input;
mod known;
mod majority;
mod ports;
mod purge;
mod rollout;
mod verdicts;

pub mod events;
pub mod metrics;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::{
    ApproveError, InstanceStatus, Issue, ReconcileConfig, Reconciler, RestartError,
};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::node::guard::GuardLease;
use crate::node::runtime::Runtime;
use crate::state::mesh::node::{MeshNode, WallClock};
use clock::MonoClock;
use events::{Event, EventLog};

/// Chitchat key holding this node's observed instances (JSON array of `InstanceStatus`).
pub const INSTANCES_KEY: &str = "instances";
/// Chitchat key holding this node's current issues (JSON array of `Issue`, at most
/// [`ISSUES_GOSSIPED_MAX`]).
pub const ISSUES_KEY: &str = "issues";
pub use claims::NAME_ISSUE_KEY;
/// Most issues a node gossips (held ones first).
pub const ISSUES_GOSSIPED_MAX: usize = 64;
/// Feedback messages (start failures, probe results) queued at most; more are dropped and counted.
const FEEDBACK_QUEUE_LEN: usize = 4096;

/// Timing and bounds of the host loop.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Longest time between two rounds.
    pub tick: Duration,
    /// The reconciler's timers and bounds.
    pub reconcile: ReconcileConfig,
    /// Events kept for `shoal events`.
    pub events_max: usize,
    /// Probes running at once at most.
    pub probes_concurrent_max: usize,
    /// Where named ports without a number are allocated (`--port-range`).
    pub port_range: shoal_core::ports::PortRange,
    /// The directories under which replicas may use host paths (`--volume-root`); empty
    /// refuses every host path.
    pub volume_roots: Vec<String>,
    /// `--restart-grace`: a SIGTERM is a planned restart that keeps exclusive instances running
    /// under the guard's lease for this long (at most the lease); 0: they are fenced on stop.
    pub restart_grace_ms: u64,
    /// Placements shared by input with the other agents of this process: the simulator's, which
    /// runs thousands of agents that mostly hold the same inputs (`shoal_core::cells::PlacementMemo`). `None`
    /// for a real agent, which computes its own.
    pub placement_memo: Option<Arc<shoal_core::cells::PlacementMemo>>,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            tick: Duration::from_millis(500),
            reconcile: ReconcileConfig::default(),
            events_max: 1000,
            probes_concurrent_max: 32,
            port_range: shoal_core::ports::PORT_RANGE_DEFAULT,
            volume_roots: Vec::new(),
            restart_grace_ms: RESTART_GRACE_MS_DEFAULT,
            placement_memo: None,
        }
    }
}

/// `--restart-grace`'s default: the guard's lease (`ReconcileConfig::self_fence_ms`, 10 s).
pub const RESTART_GRACE_MS_DEFAULT: u64 = 10_000;

/// What finished in the background and must reach the reconciler.
pub(crate) enum Feedback {
    StartFailed {
        replica: shoal_core::instance::ReplicaId,
        error: String,
    },
    Probe {
        handle: String,
        ok: bool,
        detail: String,
    },
    Reload {
        handle: String,
        ok: bool,
        detail: String,
    },
}

/// Counters of the host loop, for `/metrics`.
#[derive(Debug, Default, Clone)]
pub struct HostStats {
    /// Rounds run.
    pub rounds: u64,
    /// Duration of the last round, microseconds.
    pub round_last_us: u64,
    /// Duration of the last placement computation, microseconds.
    pub placement_last_us: u64,
    /// Actions executed, by kind.
    pub actions: BTreeMap<&'static str, u64>,
    /// Feedback messages (start failures, probe and reload results) dropped on a full queue.
    pub feedback_dropped: u64,
    /// Latest a reconciler timer was served after its deadline, ms (monotonic clock).
    pub timer_late_max_ms: u64,
    /// Data holder records this node wrote (`data.rs`).
    pub data_records_written: u64,
    /// Data holder record writes that failed (tried again).
    pub data_records_failed: u64,
    /// Data holder records in the store refused at the last read (`mesh/data.rs`).
    pub data_records_refused: u64,
    /// Disputes of a node name this agent saw begin (two live agents claiming one name).
    pub name_disputes: u64,
}

/// What the loop published after its last round: read by the API and `/metrics` without
/// waiting for a round.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// This node's observed instances.
    pub observed: Vec<InstanceStatus>,
    /// This node's current issues.
    pub issues: Vec<Issue>,
    /// Workloads whose replicas are exclusive, as of the last round (fenced when leaving).
    pub exclusive: BTreeSet<String>,
    /// This agent's last assessment of each rollout not yet settled (no record for its current
    /// version), by workload.
    pub rollouts: BTreeMap<String, shoal_core::rollout::Assessment>,
}

/// Why an approval did not happen (nothing changed in either case).
#[derive(Debug, thiserror::Error)]
pub enum HostApproveError {
    /// The reconciler refused it (unknown or not held).
    #[error(transparent)]
    Reconciler(ApproveError),
    /// The host loop is not running (the agent is stopping).
    #[error("the host loop of this agent is not running; try again once it is up")]
    NotRunning,
}

/// Requests from the API to the loop that owns the reconciler.
enum Command {
    Approve {
        id: String,
        reply: oneshot::Sender<Result<(), ApproveError>>,
    },
    Restart {
        replica: ReplicaId,
        reply: oneshot::Sender<Result<String, RestartError>>,
    },
}

/// Why [`Host::restart`] failed.
#[derive(Debug, thiserror::Error)]
pub enum HostRestartError {
    /// The reconciler refused it (no running instance here).
    #[error(transparent)]
    Reconciler(RestartError),
    /// The host loop is not running (the agent is stopping).
    #[error("the host loop of this agent is not running; try again once it is up")]
    NotRunning,
}

/// Commands queued at most (the API waits for each answer, so few are ever queued).
const COMMANDS_QUEUE_LEN: usize = 64;

/// One node's host: what the API, `/metrics` and the running loop share. Created with its
/// [`HostLoop`] by [`Host::new`].
pub struct Host {
    node: Arc<MeshNode>,
    runtime: Arc<dyn Runtime>,
    clock: WallClock,
    mono: MonoClock,
    config: HostConfig,
    events: Mutex<EventLog>,
    stats: Mutex<HostStats>,
    wake: Arc<Notify>,
    feedback_tx: mpsc::Sender<Feedback>,
    commands_tx: mpsc::Sender<Command>,
    snapshot: Mutex<Arc<Snapshot>>,
    /// Every workload's endpoints, rebuilt after a round in which something moved (DNS and
    /// `shoal endpoints` read it).
    endpoints: Mutex<Arc<crate::node::dns::EndpointTable>>,
    /// Peers' confirmations that they hear this node (for exclusive replicas).
    heard: Arc<heard::Heard>,
    /// The host ports held by this node's instances and starts (`ports.rs`).
    ports: Arc<Mutex<shoal_core::ports::PortBook>>,
    /// When the host was created, on the monotonic clock.
    started_mono_ms: u64,
    /// Feedback messages dropped because the queue was full.
    pub(crate) feedback_dropped: Arc<std::sync::atomic::AtomicU64>,
    /// The guard that stops exclusive instances if this agent freezes: the `shoal guard`
    /// process of a real agent, the simulator's in-memory one, or none (in-memory agents of
    /// tests). The loop renews it, a graceful leave releases it.
    guard: Mutex<Option<Box<dyn GuardLease>>>,
    /// The issues of node names two live agents claim, as of the last round (`claims.rs`).
    name_issues: Mutex<Vec<Issue>>,
}

/// The loop itself: owns the reconciler and the shell's caches. Run it with [`HostLoop::run`].
pub struct HostLoop {
    host: Arc<Host>,
    reconciler: Reconciler,
    shell: input::ShellState,
    feedback_rx: mpsc::Receiver<Feedback>,
    commands_rx: mpsc::Receiver<Command>,
    probes_due: HashMap<String, u64>,
    probe_slots: Arc<tokio::sync::Semaphore>,
    /// The observed instances and issues gossiped last.
    published: Option<Published>,
    /// The store digest the exclusive set was computed at, and the set.
    exclusive_at: Option<u64>,
    exclusive: BTreeSet<String>,
    /// Issues about what the guard did.
    guard_issues: Vec<guard::GuardIssue>,
    /// Where the last-majority time is kept across restarts, and the wall time saved last.
    majority_file: Option<std::path::PathBuf>,
    majority_saved_wall: Option<u64>,
    /// The member count at a majority saved in the store last.
    members_saved: Option<usize>,
    /// The count of cells last saved at a quorum of cells.
    cells_saved: Option<usize>,
    /// Rollout assessments, writes in flight and the issues about them.
    rollouts: rollout::Rollouts,
    /// What the endpoint table was last built from.
    endpoints_at: Option<endpoints::EndpointsAt>,
    /// Whether this node saw a majority of the mesh at the last round (None before the first).
    had_majority: Option<bool>,
    /// `delete --purge-data` on this node (`purge.rs`).
    purges: purge::Purges,
    /// Data holder records this node writes (`data.rs`).
    data_records: data::DataRecords,
    /// The node-name disputes this agent raised issues for (`claims.rs`).
    claims: claims::Claims,
}

impl Host {
    /// A host for `node` running instances on `runtime`, and the loop that drives it (spawn
    /// [`HostLoop::run`]). `mono` times durations; `clock` dates events and saved times.
    pub fn new(
        node: Arc<MeshNode>,
        runtime: Arc<dyn Runtime>,
        clock: WallClock,
        mono: MonoClock,
        config: HostConfig,
    ) -> (Arc<Host>, HostLoop) {
        let (feedback_tx, feedback_rx) = mpsc::channel(FEEDBACK_QUEUE_LEN);
        let (commands_tx, commands_rx) = mpsc::channel(COMMANDS_QUEUE_LEN);
        let reconciler = Reconciler::new(&node.name, config.reconcile.clone());
        let member_cache = node.member_cache();
        let started_mono_ms = mono();
        let probe_slots = Arc::new(tokio::sync::Semaphore::new(config.probes_concurrent_max));
        let port_book = ports::book(config.port_range);
        let host = Arc::new(Host {
            events: Mutex::new(EventLog::new(config.events_max)),
            node,
            runtime,
            clock,
            mono,
            config,
            stats: Mutex::new(HostStats::default()),
            wake: Arc::new(Notify::new()),
            feedback_tx,
            commands_tx,
            snapshot: Mutex::new(Arc::default()),
            endpoints: Mutex::new(Arc::default()),
            heard: Arc::default(),
            ports: port_book,
            started_mono_ms,
            feedback_dropped: Arc::default(),
            guard: Mutex::new(None),
            name_issues: Mutex::new(Vec::new()),
        });
        let host_loop = HostLoop {
            host: host.clone(),
            reconciler,
            shell: input::ShellState::new(member_cache, host.config.placement_memo.clone()),
            feedback_rx,
            commands_rx,
            probes_due: HashMap::new(),
            probe_slots,
            published: None,
            exclusive_at: None,
            exclusive: BTreeSet::new(),
            guard_issues: Vec::new(),
            majority_file: None,
            majority_saved_wall: None,
            members_saved: None,
            cells_saved: None,
            rollouts: rollout::Rollouts::default(),
            endpoints_at: None,
            had_majority: None,
            purges: purge::Purges::default(),
            data_records: data::DataRecords::default(),
            claims: claims::Claims::default(),
        };
        (host, host_loop)
    }

    /// The node this host serves.
    pub fn node(&self) -> &Arc<MeshNode> {
        &self.node
    }

    /// The directories under which this node lets replicas use host paths (`--volume-root`).
    pub fn volume_roots(&self) -> &[String] {
        &self.config.volume_roots
    }

    /// The runtime.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    /// Wakes the loop for a round now (it coalesces wakes).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// A closure that wakes the loop, for tasks that must not hold the host.
    pub(crate) fn wake_handle(&self) -> impl Fn() + Send + 'static {
        let wake = self.wake.clone();
        move || wake.notify_one()
    }

    /// What the loop published after its last round.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.lock().expect("snapshot lock").clone()
    }

    /// This node's observed instances, as of the last round.
    pub fn observed(&self) -> Vec<InstanceStatus> {
        self.snapshot().observed.clone()
    }

    /// This node's current issues, as of the last round.
    pub fn issues(&self) -> Vec<Issue> {
        self.snapshot().issues.clone()
    }

    /// The issues of node names this agent sees claimed by two live agents, as of the last round.
    pub fn name_issues(&self) -> Vec<Issue> {
        self.name_issues.lock().expect("name issues lock").clone()
    }

    /// Restarts the running instance of `replica` on this node (stop, then a new start); the
    /// loop runs a round at once. Returns the handle of the instance being restarted.
    pub async fn restart(&self, replica: &ReplicaId) -> Result<String, HostRestartError> {
        let (reply, answer) = oneshot::channel();
        let command = Command::Restart {
            replica: replica.clone(),
            reply,
        };
        if self.commands_tx.send(command).await.is_err() {
            return Err(HostRestartError::NotRunning);
        }
        self.wake();
        match answer.await {
            Ok(outcome) => outcome.map_err(HostRestartError::Reconciler),
            Err(_) => Err(HostRestartError::NotRunning),
        }
    }

    /// Approves a held issue of this node; the loop runs a round at once. Fails when the loop
    /// is not running.
    pub async fn approve(&self, id: &str) -> Result<(), HostApproveError> {
        let (reply, answer) = oneshot::channel();
        let command = Command::Approve {
            id: id.to_string(),
            reply,
        };
        if self.commands_tx.send(command).await.is_err() {
            return Err(HostApproveError::NotRunning);
        }
        self.wake();
        let outcome = match answer.await {
            Ok(outcome) => outcome.map_err(HostApproveError::Reconciler),
            Err(_) => Err(HostApproveError::NotRunning),
        };
        outcome
    }

    pub(crate) fn record(&self, kind: &str, replica: Option<String>, reason: String) {
        tracing::info!(kind, replica = replica.as_deref().unwrap_or("-"), %reason, "reconcile");
        let at_ms = (self.clock)();
        let mut events = self.events.lock().expect("events lock");
        events.push(at_ms, &self.node.name, kind, replica, reason, None);
    }

    /// Records an operator's request this agent accepted, with who asked.
    pub fn record_asked(&self, kind: &str, replica: Option<String>, reason: String, by: &str) {
        tracing::info!(kind, replica = replica.as_deref().unwrap_or("-"), %reason, by, "operator request");
        let at_ms = (self.clock)();
        let mut events = self.events.lock().expect("events lock");
        events.push(
            at_ms,
            &self.node.name,
            kind,
            replica,
            reason,
            Some(by.to_string()),
        );
    }

    pub(crate) fn count_action(&self, kind: &'static str) {
        *self
            .stats
            .lock()
            .expect("stats lock")
            .actions
            .entry(kind)
            .or_default() += 1;
    }

    /// Events after sequence number `after`, at most `limit`.
    pub fn events_after(&self, after: u64, limit: usize) -> Vec<Event> {
        self.events.lock().expect("events lock").after(after, limit)
    }

    /// The loop's counters.
    pub fn stats(&self) -> HostStats {
        let mut stats = self.stats.lock().expect("stats lock").clone();
        stats.feedback_dropped = self
            .feedback_dropped
            .load(std::sync::atomic::Ordering::Relaxed);
        stats
    }

    /// Stops this node's exclusive instances before the agent leaves: nothing supervises them
    /// once it is gone, and the mesh will start them elsewhere. Normal instances keep running, so
    /// a quick restart (an upgrade) adopts them without a gap. Stop the loop first.
    pub async fn fence_on_leave(&self) {
        let Ok(instances) = self.runtime.list().await else {
            return;
        };
        let exclusive = self.snapshot().exclusive.clone();
        let grace = Duration::from_millis(self.config.reconcile.fence_stop_grace_ms);
        for instance in instances.into_iter().filter(|i| i.phase.may_be_alive()) {
            if exclusive.contains(&instance.replica.workload) {
                self.record(
                    "stop",
                    Some(instance.replica.to_string()),
                    "agent leaving: exclusive replica fenced".into(),
                );
                let _ = self.runtime.stop(&instance.handle, grace).await;
            }
        }
    }

    /// Peers' confirmations that they hear this node, by peer (monotonic ms).
    pub fn heard_snapshot(&self) -> BTreeMap<String, u64> {
        self.heard.snapshot()
    }

    /// When this host was created, on the monotonic clock.
    pub fn started_mono_ms(&self) -> u64 {
        self.started_mono_ms
    }

    /// Hands the host its guard; the loop renews it from its next round on.
    pub fn attach_guard(&self, link: impl GuardLease + 'static) {
        *self.guard.lock().expect("guard lock") = Some(Box::new(link));
    }

    /// Extends the guard's lease to a full lease from now and keeps the guard running, for a
    /// planned restart: the restarted agent adopts it and renews; if none does, the guard fences
    /// the exclusive instances when the lease ends. Returns the lease length (0 without a guard).
    pub fn hold_guard(&self) -> u64 {
        match self.guard.lock().expect("guard lock").as_mut() {
            Some(link) => {
                link.hold();
                link.lease_ms()
            }
            None => 0,
        }
    }

    /// Releases the guard as the agent leaves (after [`Host::fence_on_leave`]): it stops what
    /// still runs of the exclusive workloads and exits. Stop the loop first.
    pub fn release_guard(&self) {
        if let Some(link) = self.guard.lock().expect("guard lock").as_mut() {
            link.release();
        }
    }
}

impl HostLoop {
    /// The shared part.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// Runs rounds until the task is aborted: at once when woken, when the reconciler's next
    /// timer is due, and at least every `tick`.
    pub async fn run(mut self) {
        self.restore_members_known().await;
        self.restore_cells_known().await;
        let _watchers = self.spawn_watchers().await;
        loop {
            self.round().await;
            let now = (self.host.mono)();
            let tick_ms = self.host.config.tick.as_millis() as u64;
            let due = self.reconciler.poll_timeout();
            let deadline = due.map_or(now + tick_ms, |d| d.min(now + tick_ms));
            // At least a millisecond: a timer already due runs next round, never in a spin.
            let wait_ms = deadline.saturating_sub(now).max(1);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
                _ = self.host.wake.notified() => {}
            }
            // How late a timer that was still ahead when the wait began is served.
            let woke = (self.host.mono)();
            if let Some(due) = due.filter(|d| *d > now && *d <= woke) {
                let mut stats = self.host.stats.lock().expect("stats lock");
                stats.timer_late_max_ms = stats.timer_late_max_ms.max(woke - due);
            }
        }
    }

    /// The tasks that wake the loop: runtime events, and a node leaving the live set (a new
    /// owner need not wait for the tick to start what it took over). Joins wait for the tick:
    /// a mesh starting would otherwise run a round per join on every agent.
    async fn spawn_watchers(&self) -> [AbortOnDrop; 4] {
        let node = &self.host.node;
        let heard = node.spawn(heard::run(
            self.host.node.clone(),
            self.host.heard.clone(),
            self.host.mono.clone(),
        ));
        let mut runtime_events = self.host.runtime.events();
        let wake = self.host.wake.clone();
        let runtime = node.spawn(async move {
            loop {
                match runtime_events.recv().await {
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        wake.notify_one()
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        let mut live = self
            .host
            .node
            .gossip()
            .chitchat()
            .lock()
            .await
            .live_node_ids_watcher();
        let (node, wake) = (self.host.node.clone(), self.host.wake.clone());
        let verdicts = self.host.node.spawn(async move {
            loop {
                node.membership_moved.notified().await;
                wake.notify_one();
            }
        });
        let wake = self.host.wake.clone();
        let membership = self.host.node.spawn(async move {
            let mut last: Vec<chitchat::ChitchatId> = Vec::new();
            while live.changed().await.is_ok() {
                // The watcher sends only when the sorted set of ids changed.
                let left = {
                    let now = live.borrow_and_update();
                    let left = last.iter().any(|id| now.binary_search(id).is_err());
                    last = now.clone();
                    left
                };
                if left {
                    wake.notify_one();
                }
            }
        });
        [
            AbortOnDrop(runtime),
            AbortOnDrop(membership),
            AbortOnDrop(heard),
            AbortOnDrop(verdicts),
        ]
    }

    /// One round: commands and feedback in, input built, actions out, probes started, state
    /// published and gossiped.
    pub async fn round(&mut self) {
        let began = std::time::Instant::now();
        let now = (self.host.mono)();
        self.drain_commands();
        self.drain_feedback(now);
        input::build(&self.host, &mut self.shell, now).await;
        self.refresh_exclusive();
        let guard_unavailable = self.guard_unavailable();
        self.shell.set_guard_unavailable(guard_unavailable);
        let actions = self.reconciler.handle_tick(self.shell.input(), now);
        if cfg!(debug_assertions) {
            self.reconciler.check_invariants();
        }
        self.note_majority();
        let issues = self.reconciler.issues();
        self.tend_guard(&issues, now);
        for action in actions {
            self.host.execute(action);
        }
        self.start_probes(now);
        self.tend_purges(now).await;
        let observed = self.reconciler.observed();
        self.tend_rollouts(&observed, now);
        self.tend_data_records(&observed, now);
        let last_majority = self.reconciler.last_majority_ms();
        self.save_majority_time(last_majority);
        self.save_members_known().await;
        self.save_cells_known().await;
        self.refresh_endpoints(&observed, now);
        self.publish(observed, issues).await;
        self.tend_claims().await;
        self.record_verdicts();
        tracing::trace!(took_us = began.elapsed().as_micros() as u64, "round");
        let mut stats = self.host.stats.lock().expect("stats lock");
        stats.rounds += 1;
        stats.round_last_us = began.elapsed().as_micros() as u64;
    }

    /// Purges the data of workloads deleted with `--purge-data` once none of their instances
    /// is listed here (`purge.rs`).
    async fn tend_purges(&mut self, now: u64) {
        let digest = self.shell.specs_digest();
        self.purges.refresh(&self.host, digest).await;
        let input = self.shell.input();
        if self.purges.is_idle() {
            return;
        }
        // A runtime that cannot list shows nothing: purge nothing on that round.
        if input.runtime_unavailable.is_some() {
            return;
        }
        let listed: Vec<String> = input
            .instances
            .iter()
            .map(|i| i.replica.workload.clone())
            .collect();
        self.purges.start_due(&self.host, &listed, now);
    }

    /// The exclusive workloads, computed again when the store moved.
    fn refresh_exclusive(&mut self) {
        if self.exclusive_at != self.shell.specs_digest() {
            self.exclusive_at = self.shell.specs_digest();
            self.exclusive = self.shell.exclusive_workloads();
        }
    }

    fn drain_commands(&mut self) {
        while let Ok(command) = self.commands_rx.try_recv() {
            match command {
                Command::Approve { id, reply } => {
                    let _ = reply.send(self.reconciler.approve(&id));
                }
                Command::Restart { replica, reply } => {
                    let _ = reply.send(self.reconciler.restart(&replica));
                }
            }
        }
    }

    fn drain_feedback(&mut self, now: u64) {
        while let Ok(feedback) = self.feedback_rx.try_recv() {
            match feedback {
                Feedback::StartFailed { replica, error } => {
                    self.host
                        .record("start-failed", Some(replica.to_string()), error.clone());
                    self.reconciler.handle_start_failed(&replica, &error, now);
                }
                Feedback::Probe { handle, ok, detail } => {
                    self.reconciler
                        .handle_probe_result(&handle, ok, &detail, now);
                }
                Feedback::Reload { handle, ok, detail } => {
                    self.reconciler
                        .handle_reload_result(&handle, ok, &detail, now);
                }
            }
        }
    }

    fn start_probes(&mut self, now: u64) {
        let targets = self.reconciler.probe_targets();
        let due = &mut self.probes_due;
        due.retain(|handle, _| targets.iter().any(|t| &t.handle == handle));
        for target in targets {
            let (handle, check) = (target.handle, target.check);
            let next = due.entry(handle.clone()).or_insert(now);
            if *next > now {
                continue;
            }
            let Ok(permit) = self.probe_slots.clone().try_acquire_owned() else {
                break; // the rest run next round
            };
            *next = now + check.interval_ms;
            let (runtime, tx) = (self.host.runtime.clone(), self.host.feedback_tx.clone());
            let wake = self.host.wake_handle();
            let dropped = self.host.feedback_dropped.clone();
            self.host.node.spawn(async move {
                let _permit = permit;
                let timeout = Duration::from_millis(check.timeout_ms);
                let outcome = runtime.probe(&handle, &check.probe, timeout).await;
                let (ok, detail) = match outcome {
                    crate::node::runtime::ProbeOutcome::Healthy => (true, String::new()),
                    crate::node::runtime::ProbeOutcome::Unhealthy { reason } => (false, reason),
                };
                match tx.try_send(Feedback::Probe { handle, ok, detail }) {
                    Ok(()) => wake(),
                    Err(_) => {
                        dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    }

    /// Publishes the round's snapshot, and gossips the observed instances and the issues (held
    /// ones first, at most [`ISSUES_GOSSIPED_MAX`]) when they differ from what was gossiped last:
    /// most rounds change nothing, and encoding both every round was measurable at 100 nodes.
    async fn publish(&mut self, observed: Vec<InstanceStatus>, mut issues: Vec<Issue>) {
        // Owning or running an exclusive replica (observed lists claims too): ask the peers
        // whether they hear this node.
        let owns_exclusive = observed
            .iter()
            .any(|s| self.exclusive.contains(&s.replica.workload));
        // A copy handing off to a new owner stops only once that owner answered a round trip
        // (the reconciler's handoff confirmation): ask while one waits.
        let handing_off =
            (issues.iter()).any(|i| i.kind == shoal_core::reconcile::IssueKind::Orphan);
        // Only the new owners' answers confirm a handoff: asking every peer of the cell each
        // second for each agent handing off was most of the RPC while a mesh of cells formed.
        let asked = match owns_exclusive {
            true => None,
            false => Some(
                (issues.iter())
                    .filter(|i| i.kind == shoal_core::reconcile::IssueKind::Orphan)
                    .filter_map(|i| self.shell.input().owners.get(i.replica.as_ref()?))
                    .cloned()
                    .collect(),
            ),
        };
        self.host.heard.set_asked(asked);
        self.host.heard.set_active(owns_exclusive || handing_off);
        // A copy that may be alive keeps the exclusive lease advancing: peers that cannot reach
        // this node wait for it (rule 5 of the exclusive start rule). A claim alone does not.
        self.host.heard.set_leasing(
            observed
                .iter()
                .any(|s| self.exclusive.contains(&s.replica.workload) && s.phase.may_be_alive()),
        );
        issues.extend(self.guard_issues().cloned());
        issues.extend(self.rollout_issues().cloned());
        *self.host.snapshot.lock().expect("snapshot lock") = Arc::new(Snapshot {
            observed: observed.clone(),
            issues: issues.clone(),
            exclusive: self.exclusive.clone(),
            rollouts: self.rollouts.assessments().clone(),
        });
        issues.sort_by(|a, b| {
            (a.held.is_none(), a.since_ms, &a.id).cmp(&(b.held.is_none(), b.since_ms, &b.id))
        });
        issues.truncate(ISSUES_GOSSIPED_MAX);
        let now = Published { observed, issues };
        if self.published.as_ref() == Some(&now) {
            return;
        }
        let observed_text = serde_json::to_string(&now.observed).unwrap_or_default();
        let issues_text = serde_json::to_string(&now.issues).unwrap_or_default();
        {
            let chitchat = self.host.node.gossip().chitchat();
            let mut guard = chitchat.lock().await;
            let state = guard.self_node_state();
            if state.get(INSTANCES_KEY) != Some(observed_text.as_str()) {
                state.set(INSTANCES_KEY, &observed_text);
            }
            if state.get(ISSUES_KEY) != Some(issues_text.as_str()) {
                state.set(ISSUES_KEY, &issues_text);
            }
        }
        self.published = Some(now);
    }
}

/// What a round gossiped.
#[derive(PartialEq)]
struct Published {
    observed: Vec<InstanceStatus>,
    issues: Vec<Issue>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
