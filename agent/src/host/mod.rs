//! The host loop: turns this node's slice of the placement into running instances.
//!
//! Every round (a tick, or sooner when the runtime reports an exit or a probe finishes) the shell
//! builds a [`ReconcileInput`] from the store, the gossip view and the runtime's list, hands it to
//! the sans-IO [`Reconciler`], executes the actions it returns on the runtime, runs due probes,
//! and gossips the observed state of its instances and its issues.

mod exec;
mod input;
mod majority;

pub mod events;
pub mod metrics;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_core::reconcile::{ApproveError, InstanceStatus, Issue, ReconcileConfig, Reconciler};
use tokio::sync::{mpsc, Notify};

use crate::mesh::node::{MeshNode, WallClock};
use crate::runtime::Runtime;
use events::{Event, EventLog};

/// Chitchat key holding this node's observed instances (JSON array of `InstanceStatus`).
pub const INSTANCES_KEY: &str = "instances";
/// Chitchat key holding this node's current issues (JSON array of `Issue`, at most
/// [`ISSUES_GOSSIPED_MAX`]).
pub const ISSUES_KEY: &str = "issues";
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
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            tick: Duration::from_millis(500),
            reconcile: ReconcileConfig::default(),
            events_max: 1000,
            probes_concurrent_max: 32,
        }
    }
}

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
}

/// One node's host loop and what the API reads from it.
pub struct Host {
    node: Arc<MeshNode>,
    runtime: Arc<dyn Runtime>,
    clock: WallClock,
    config: HostConfig,
    reconciler: tokio::sync::Mutex<Reconciler>,
    shell: tokio::sync::Mutex<input::ShellState>,
    events: Mutex<EventLog>,
    stats: Mutex<HostStats>,
    wake: Notify,
    feedback_tx: mpsc::Sender<Feedback>,
    feedback_rx: tokio::sync::Mutex<mpsc::Receiver<Feedback>>,
    probes_due: Mutex<HashMap<String, u64>>,
    probe_slots: Arc<tokio::sync::Semaphore>,
    started_ms: u64,
    /// The observed instances and issues gossiped last.
    published: Mutex<Option<Published>>,
    /// Feedback messages dropped because the queue was full.
    pub(crate) feedback_dropped: Arc<std::sync::atomic::AtomicU64>,
    /// Where the last-majority time is kept across restarts, and the value saved last.
    majority_file: std::sync::OnceLock<std::path::PathBuf>,
    majority_saved: Mutex<Option<u64>>,
}

impl Host {
    /// A host loop for `node` running instances on `runtime`. Call [`Host::run`] to start it.
    pub fn new(
        node: Arc<MeshNode>,
        runtime: Arc<dyn Runtime>,
        clock: WallClock,
        config: HostConfig,
    ) -> Arc<Host> {
        let (feedback_tx, feedback_rx) = mpsc::channel(FEEDBACK_QUEUE_LEN);
        let reconciler = Reconciler::new(&node.name, config.reconcile.clone());
        let started_ms = clock();
        Arc::new(Host {
            events: Mutex::new(EventLog::new(config.events_max)),
            probe_slots: Arc::new(tokio::sync::Semaphore::new(config.probes_concurrent_max)),
            node,
            runtime,
            clock,
            config,
            reconciler: tokio::sync::Mutex::new(reconciler),
            shell: tokio::sync::Mutex::new(input::ShellState::default()),
            stats: Mutex::new(HostStats::default()),
            wake: Notify::new(),
            feedback_tx,
            feedback_rx: tokio::sync::Mutex::new(feedback_rx),
            probes_due: Mutex::new(HashMap::new()),
            started_ms,
            published: Mutex::new(None),
            feedback_dropped: Arc::default(),
            majority_file: std::sync::OnceLock::new(),
            majority_saved: Mutex::new(None),
        })
    }

    /// Keeps the reconciler's last-majority time in `path` across restarts: restores the saved
    /// value now (call before [`Host::run`]) and saves it every few seconds from then on.
    pub async fn keep_majority_time_in(&self, path: std::path::PathBuf) {
        if let Some(ms) = majority::read(&path) {
            tracing::info!(
                last_majority_ms = ms,
                "restored the last time a majority was seen"
            );
            self.reconciler.lock().await.restore_last_majority(ms);
            *self.majority_saved.lock().expect("majority lock") = Some(ms);
        }
        let _ = self.majority_file.set(path);
    }

    /// Saves the last-majority time when it moved enough since the last save.
    fn save_majority_time(&self, last_majority_ms: Option<u64>) {
        let (Some(path), Some(ms)) = (self.majority_file.get(), last_majority_ms) else {
            return;
        };
        let mut saved = self.majority_saved.lock().expect("majority lock");
        if saved.is_some_and(|s| ms < s.saturating_add(majority::SAVE_EVERY_MS)) {
            return;
        }
        match majority::write(path, ms) {
            Ok(()) => *saved = Some(ms),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot save the last-majority time")
            }
        }
    }

    /// The node this loop serves.
    pub fn node(&self) -> &Arc<MeshNode> {
        &self.node
    }

    /// The runtime.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    /// Runs rounds forever (abort the task to stop it). Runtime events wake it early.
    pub async fn run(self: Arc<Self>) {
        let mut runtime_events = self.runtime.events();
        let waker = self.clone();
        let watcher = tokio::spawn(async move {
            loop {
                match runtime_events.recv().await {
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        waker.wake.notify_one()
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        let _guard = AbortOnDrop(watcher);
        // A node leaving the live set (a death, a leave) wakes the loop at once: a new owner need
        // not wait for the next tick to start what it took over. Joins wait for the tick (a
        // mesh starting would otherwise run a round per join on every agent).
        let mut live = self
            .node
            .gossip()
            .chitchat()
            .lock()
            .await
            .live_nodes_watcher();
        let waker = self.clone();
        let membership = tokio::spawn(async move {
            let mut last: Vec<chitchat::ChitchatId> = Vec::new();
            while live.changed().await.is_ok() {
                let left = {
                    let now = live.borrow_and_update();
                    if now.len() == last.len() && now.keys().zip(&last).all(|(a, b)| a == b) {
                        false
                    } else {
                        let left = last.iter().any(|id| !now.contains_key(id));
                        last = now.keys().cloned().collect();
                        left
                    }
                };
                if left {
                    waker.wake.notify_one();
                }
            }
        });
        let _membership_guard = AbortOnDrop(membership);
        loop {
            self.round().await;
            tokio::select! {
                _ = tokio::time::sleep(self.config.tick) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// One round: feedback in, input built, actions out, probes started, state gossiped.
    pub async fn round(&self) {
        let began = std::time::Instant::now();
        let now = (self.clock)();
        let mut reconciler = self.reconciler.lock().await;
        self.drain_feedback(&mut reconciler, now).await;
        let actions = {
            let mut shell = self.shell.lock().await;
            let input = input::build(self, &mut shell, now).await;
            reconciler.handle_tick(input, now)
        };
        if cfg!(debug_assertions) {
            reconciler.check_invariants();
        }
        for action in actions {
            self.execute(action, now);
        }
        self.start_probes(&reconciler, now);
        let observed = reconciler.observed();
        let issues = reconciler.issues();
        let last_majority = reconciler.last_majority_ms();
        drop(reconciler);
        self.save_majority_time(last_majority);
        self.publish(observed, issues).await;
        let mut stats = self.stats.lock().expect("stats lock");
        stats.rounds += 1;
        stats.round_last_us = began.elapsed().as_micros() as u64;
    }

    async fn drain_feedback(&self, reconciler: &mut Reconciler, now: u64) {
        let mut rx = self.feedback_rx.lock().await;
        while let Ok(feedback) = rx.try_recv() {
            match feedback {
                Feedback::StartFailed { replica, error } => {
                    self.record(
                        now,
                        "start-failed",
                        Some(replica.to_string()),
                        error.clone(),
                    );
                    reconciler.handle_start_failed(&replica, &error, now);
                }
                Feedback::Probe { handle, ok, detail } => {
                    reconciler.handle_probe_result(&handle, ok, &detail, now);
                }
                Feedback::Reload { handle, ok, detail } => {
                    reconciler.handle_reload_result(&handle, ok, &detail, now);
                }
            }
        }
    }

    fn start_probes(&self, reconciler: &Reconciler, now: u64) {
        let targets = reconciler.probe_targets();
        let mut due = self.probes_due.lock().expect("probes lock");
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
            let (runtime, tx) = (self.runtime.clone(), self.feedback_tx.clone());
            let wake = self.wake_handle();
            let dropped = self.feedback_dropped.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let timeout = Duration::from_millis(check.timeout_ms);
                let outcome = runtime.probe(&handle, &check.probe, timeout).await;
                let (ok, detail) = match outcome {
                    crate::runtime::ProbeOutcome::Healthy => (true, String::new()),
                    crate::runtime::ProbeOutcome::Unhealthy { reason } => (false, reason),
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

    /// A closure that wakes the loop (for tasks that outlive a borrow of `self`).
    pub(crate) fn wake_handle(&self) -> impl Fn() + Send + 'static {
        let node = Arc::downgrade(&self.node);
        move || {
            if let Some(node) = node.upgrade() {
                if let Some(host) = node.host() {
                    host.wake.notify_one();
                }
            }
        }
    }

    pub(crate) fn record(&self, at_ms: u64, kind: &str, replica: Option<String>, reason: String) {
        tracing::info!(kind, replica = replica.as_deref().unwrap_or("-"), %reason, "reconcile");
        let mut events = self.events.lock().expect("events lock");
        events.push(at_ms, &self.node.name, kind, replica, reason);
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

    /// Gossips the observed instances and the issues (held ones first, at most
    /// [`ISSUES_GOSSIPED_MAX`]) when they differ from what was gossiped last: most rounds change
    /// nothing, and encoding both every round was measurable at 100 nodes.
    async fn publish(&self, observed: Vec<InstanceStatus>, mut issues: Vec<Issue>) {
        issues.sort_by(|a, b| {
            (a.held.is_none(), a.since_ms, &a.id).cmp(&(b.held.is_none(), b.since_ms, &b.id))
        });
        issues.truncate(ISSUES_GOSSIPED_MAX);
        let now = Published { observed, issues };
        if self.published.lock().expect("published lock").as_ref() == Some(&now) {
            return;
        }
        let observed_text = serde_json::to_string(&now.observed).unwrap_or_default();
        let issues_text = serde_json::to_string(&now.issues).unwrap_or_default();
        {
            let chitchat = self.node.gossip().chitchat();
            let mut guard = chitchat.lock().await;
            let state = guard.self_node_state();
            if state.get(INSTANCES_KEY) != Some(observed_text.as_str()) {
                state.set(INSTANCES_KEY, &observed_text);
            }
            if state.get(ISSUES_KEY) != Some(issues_text.as_str()) {
                state.set(ISSUES_KEY, &issues_text);
            }
        }
        *self.published.lock().expect("published lock") = Some(now);
    }

    /// This node's observed instances.
    pub async fn observed(&self) -> Vec<InstanceStatus> {
        self.reconciler.lock().await.observed()
    }

    /// This node's current issues.
    pub async fn issues(&self) -> Vec<Issue> {
        self.reconciler.lock().await.issues()
    }

    /// Approves a held issue of this node and runs a round at once.
    pub async fn approve(&self, id: &str) -> Result<(), ApproveError> {
        self.reconciler.lock().await.approve(id)?;
        self.record(
            (self.clock)(),
            "approve",
            None,
            format!("operator approved issue {id}"),
        );
        self.wake.notify_one();
        Ok(())
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
    /// a quick restart (an upgrade) adopts them without a gap.
    pub async fn fence_on_leave(&self) {
        let Ok(instances) = self.runtime.list().await else {
            return;
        };
        let specs = self.shell.lock().await.specs_snapshot();
        let grace = Duration::from_millis(self.config.reconcile.fence_stop_grace_ms);
        for instance in instances.into_iter().filter(|i| i.phase.may_be_alive()) {
            let exclusive = specs
                .get(&instance.replica.workload)
                .is_some_and(|e| e.spec.placement.exclusive);
            if exclusive {
                let now = (self.clock)();
                self.record(
                    now,
                    "stop",
                    Some(instance.replica.to_string()),
                    "agent leaving: exclusive replica fenced".into(),
                );
                let _ = self.runtime.stop(&instance.handle, grace).await;
            }
        }
    }

    /// When this loop was created, ms since the Unix epoch.
    pub fn started_ms(&self) -> u64 {
        self.started_ms
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
