//! What the reconciler remembers about this node: every runtime instance it tracks (adopted or
//! started), and per replica the restart backoff, the start in flight and the last exit.
//!
//! The runtime's list is the truth about what exists: an instance listed is tracked (and adopted if
//! new: no duplicate start), an instance no longer listed is forgotten, an exit is recorded once.
//!
//! Failures are counted per replica ([`ReplicaState::failures`]) and the count picks the delay
//! ([`backoff_delay_ms`]): an instance that ran and failed for the first time restarts at once,
//! the next failures back off. A start that failed (nothing ran) always backs off (`count_failure` says why).

use std::collections::BTreeMap;

use crate::instance::{Phase, PullProgress, ReplicaId, RuntimeInstance};
use crate::resources::Resources;
use crate::spec::{RestartMode, RestartPolicy};

use super::action::StopCause;
use super::cache::SpecCache;
use super::health::{backoff_delay_ms, truncate, Health, Verdict, DETAIL_BYTES_MAX};
use super::input::ReconcileInput;

/// One runtime instance as the reconciler tracks it.
#[derive(Clone, Debug)]
pub(crate) struct Tracked {
    pub replica: ReplicaId,
    /// The version it runs: the runtime's label, or the version a reload brought it to.
    pub version: String,
    /// The runtime's phase.
    pub phase: Phase,
    pub started_at_ms: u64,
    pub exited_at_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub phase_since_ms: u64,
    pub health: Health,
    /// Whether its spec has a probe (without one it is healthy while it runs).
    pub probed: bool,
    pub stop: Option<StopRequest>,
    pub exit_handled: bool,
    pub remove_sent: bool,
    /// Since when it has been here while placed elsewhere.
    pub orphan_since_ms: Option<u64>,
    /// Since when, while an orphan, its new owner has been live and gossiping a serving copy
    /// (without a gap).
    pub successor_serving_since: Option<u64>,
    pub reload: Option<ReloadState>,
    /// The fencing token the runtime lists it with (exclusive replicas).
    pub fence_token: Option<u64>,
    /// The host ports the runtime lists it with, by name.
    pub ports: BTreeMap<String, u16>,
}

/// A stop sent for an instance.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StopRequest {
    pub at_ms: u64,
    pub cause: StopCause,
    pub grace_ms: u64,
}

/// A live-settings reload of one instance.
#[derive(Clone, Debug)]
pub(crate) struct ReloadState {
    pub target: String,
    pub sent_at_ms: u64,
    pub in_flight: bool,
    pub attempts: u32,
    pub retry_at_ms: u64,
    pub last_error: Option<String>,
}

/// Per-replica memory on this node.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReplicaState {
    /// Consecutive failures (exits, failed health, failed starts) since the last reset.
    pub failures: u32,
    /// Restarts done (shown in status).
    pub restarts: u32,
    /// Consecutive failures of the version that failed last (reset as `failures` is, and when
    /// another version fails): what a rollout reads to tell a crash loop of a new version.
    pub version_failures: u32,
    /// The version `version_failures` counts.
    pub failing_version: Option<String>,
    /// No (re)start before this time.
    pub next_start_at_ms: u64,
    /// The last exit asked for a restart: the next start counts as one.
    pub restart_due: bool,
    pub last_exit: Option<ExitRecord>,
    pub pending_start: Option<PendingStart>,
    /// The replica exited for good at this version (restart policy never, or on-failure after a
    /// clean exit).
    pub completed_version: Option<String>,
    /// Since when it has had no instance record.
    pub pending_since_ms: Option<u64>,
    /// Since when an exclusive start has waited on something the mesh cannot decide.
    pub undecided_since_ms: Option<u64>,
    /// The fencing token under which this node holds the replica while its ownership has not
    /// moved; a start reuses it (see `fence_token.rs`).
    pub fence_token: Option<u64>,
    /// The highest fencing token peers published for the replica while it waited here.
    pub fence_seen: u64,
    /// Since when its start has waited for its data, held on another node (`data.rs`).
    pub data_wait_since_ms: Option<u64>,
    /// An operator's approval or the spec's `on_data_loss` let it start here without the data
    /// another node holds: later starts here do not ask again.
    pub data_taken: bool,
    /// This agent sent a start for it here (a failed start may leave the holder record naming
    /// this node without its data directories: they are not missing data).
    pub started_here: bool,
}

/// How the last instance of a replica ended.
#[derive(Clone, Debug)]
pub(crate) struct ExitRecord {
    pub code: Option<i32>,
    pub error: Option<String>,
    pub start_failed: bool,
    pub failure: bool,
}

/// A start sent, not yet listed by the runtime.
#[derive(Clone, Debug)]
pub(crate) struct PendingStart {
    pub version: String,
    pub at_ms: u64,
    /// Since when the start has waited without news: `at_ms`, or the last tick at which the
    /// runtime reported pulling its image. It times out `start_report_timeout_ms` after this.
    pub waited_from_ms: u64,
    /// The runtime's last report of pulling the image for this start.
    pub pull: Option<PullProgress>,
    pub fence_token: Option<u64>,
}

impl ReplicaState {
    /// Consecutive failures of the replica at `version`.
    pub fn failures_of(&self, version: &str) -> u32 {
        match self.failing_version.as_deref() == Some(version) {
            true => self.version_failures,
            false => 0,
        }
    }
}

impl Tracked {
    /// Whether a process may be alive.
    pub fn alive(&self) -> bool {
        self.phase.may_be_alive() || self.phase == Phase::Pending
    }

    /// Running, healthy, and not being stopped: it serves.
    pub fn serves(&self) -> bool {
        self.phase == Phase::Running
            && self.stop.is_none()
            && matches!(self.health.verdict, Verdict::Healthy { .. })
    }

    /// The phase to report: `starting` until healthy, `stopping` once a stop was sent.
    pub fn status_phase(&self) -> Phase {
        if self.stop.is_some() && self.alive() {
            return Phase::Stopping;
        }
        match self.phase {
            Phase::Running if self.health.verdict == Verdict::Unknown => Phase::Starting,
            Phase::Pending => Phase::Starting,
            p => p,
        }
    }
}

/// The instances and replicas of this node.
#[derive(Clone, Debug, Default)]
pub(crate) struct Local {
    pub instances: BTreeMap<String, Tracked>,
    pub replicas: BTreeMap<ReplicaId, ReplicaState>,
}

impl Local {
    /// Brings the tracked instances in line with the runtime's list: adopts new ones, updates
    /// phases, records exits once, forgets vanished ones, and times out starts never listed.
    pub fn ingest(
        &mut self,
        input: &ReconcileInput,
        cache: &SpecCache,
        node: &str,
        now_ms: u64,
        start_timeout_ms: u64,
    ) {
        let mut list: Vec<&RuntimeInstance> = input.instances.iter().collect();
        list.sort_by(|a, b| {
            a.handle
                .cmp(&b.handle)
                .then(a.started_at_ms.cmp(&b.started_at_ms))
        });
        list.dedup_by(|later, earlier| later.handle == earlier.handle);
        let listed: std::collections::BTreeSet<&str> =
            list.iter().map(|i| i.handle.as_str()).collect();
        let vanished: Vec<String> = self
            .instances
            .keys()
            .filter(|h| !listed.contains(h.as_str()))
            .cloned()
            .collect();
        for handle in vanished {
            if let Some(mut t) = self.instances.remove(&handle) {
                if t.alive() && !t.exit_handled {
                    t.phase = Phase::Exited;
                    t.error = Some("the instance vanished from the runtime's list".to_string());
                    self.record_exit(&t, input, false, now_ms);
                }
            }
        }
        for ri in list {
            let new = !self.instances.contains_key(&ri.handle);
            let mut adopted = false;
            if new {
                let t = adopt(ri, input, cache, now_ms);
                let state = self.replicas.get_mut(&ri.replica);
                adopted = state.as_ref().is_none_or(|s| s.pending_start.is_none());
                if let Some(state) = state {
                    state.pending_start = None;
                }
                self.instances.insert(ri.handle.clone(), t);
            } else if let Some(t) = self.instances.get_mut(&ri.handle) {
                update(t, ri, now_ms);
            }
            let t = &self.instances[&ri.handle];
            if !t.alive() && !t.exit_handled {
                let t = t.clone();
                self.record_exit(&t, input, adopted, now_ms);
                self.instances
                    .get_mut(&ri.handle)
                    .expect("just tracked")
                    .exit_handled = true;
            }
        }
        for t in self.instances.values_mut() {
            let placed_here = input.owners.get(&t.replica).is_some_and(|n| n == node);
            t.orphan_since_ms = match (placed_here, t.alive()) {
                (false, true) => Some(t.orphan_since_ms.unwrap_or(now_ms)),
                _ => None,
            };
            let serving = t.orphan_since_ms.is_some()
                && input.owners.get(&t.replica).is_some_and(|owner| {
                    owner != node
                        && input.membership.live.contains(owner)
                        && input.peers.get(owner).is_some_and(|copies| {
                            copies.iter().any(|c| c.replica == t.replica && c.serves())
                        })
                });
            t.successor_serving_since = match serving {
                true => Some(t.successor_serving_since.unwrap_or(now_ms)),
                false => None,
            };
        }
        self.time_out_starts(input, now_ms, start_timeout_ms);
    }

    fn time_out_starts(&mut self, input: &ReconcileInput, now_ms: u64, timeout_ms: u64) {
        // A pull reported this tick is the runtime working on the start: it waits anew.
        for (replica, state) in self.replicas.iter_mut() {
            if let Some(p) = state.pending_start.as_mut() {
                p.pull = input.pulling.get(replica).cloned();
                if p.pull.is_some() {
                    p.waited_from_ms = now_ms;
                }
            }
        }
        let late: Vec<ReplicaId> = self
            .replicas
            .iter()
            .filter(|(_, s)| {
                s.pending_start
                    .as_ref()
                    .is_some_and(|p| now_ms >= p.waited_from_ms.saturating_add(timeout_ms))
            })
            .map(|(r, _)| r.clone())
            .collect();
        for replica in late {
            let error =
                format!("the runtime did not list the started instance within {timeout_ms} ms");
            self.record_start_failure(&replica, &error, restart_policy(input, &replica), now_ms);
        }
    }

    /// A start that failed before any instance existed (image missing, engine refused).
    pub fn record_start_failure(
        &mut self,
        replica: &ReplicaId,
        error: &str,
        policy: RestartPolicy,
        now_ms: u64,
    ) {
        let state = self.replicas.entry(replica.clone()).or_default();
        if let Some(start) = state.pending_start.take() {
            count_version_failure(state, &start.version);
        }
        count_failure(state, true);
        state.next_start_at_ms = now_ms.saturating_add(backoff_delay_ms(&policy, state.failures));
        state.last_exit = Some(ExitRecord {
            code: None,
            error: Some(truncate(error, DETAIL_BYTES_MAX)),
            start_failed: true,
            failure: true,
        });
    }

    /// Records how an instance ended: a planned stop restarts at once, a failure counts toward the
    /// backoff (the count reset first if it had been healthy for `backoff_reset_ms`; the first
    /// failure restarts at once), and the restart policy may end it. An exit found on adoption
    /// restarts at once: the agent, not the replica, was away.
    fn record_exit(&mut self, t: &Tracked, input: &ReconcileInput, adopted: bool, now_ms: u64) {
        let policy = restart_policy(input, &t.replica);
        let state = self.replicas.entry(t.replica.clone()).or_default();
        let cause = t.stop.map(|s| s.cause);
        let start_failed = t.phase == Phase::Failed;
        let planned = cause.is_some_and(|c| !c.is_failure());
        let clean = t.exit_code == Some(0) && cause.is_none() && !start_failed;
        let error = t
            .error
            .clone()
            .or_else(|| t.health.detail.clone())
            .or_else(|| match t.exit_code {
                Some(code) if code != 0 => Some(format!("exited with code {code}")),
                _ => None,
            });
        state.last_exit = Some(ExitRecord {
            code: t.exit_code,
            error: error.map(|e| truncate(&e, DETAIL_BYTES_MAX)),
            start_failed,
            failure: !planned && !clean,
        });
        if planned {
            return;
        }
        let wants_restart = match policy.policy {
            RestartMode::Always => true,
            RestartMode::OnFailure => !clean,
            RestartMode::Never => false,
        };
        if !wants_restart {
            state.completed_version = Some(t.version.clone());
            return;
        }
        // A start that failed is retried with backoff but is not a restart of a running replica.
        state.restart_due |= !start_failed;
        if adopted {
            return;
        }
        // The delay counts from the exit as the runtime dates it, never from the future.
        let exited_ms = t.exited_at_ms.unwrap_or(now_ms).min(now_ms);
        let healthy_for = t
            .health
            .healthy_since()
            .map(|s| exited_ms.saturating_sub(s));
        if healthy_for.is_some_and(|d| d >= policy.backoff_reset_ms) {
            state.failures = 0;
            state.version_failures = 0;
        }
        count_failure(state, start_failed);
        count_version_failure(state, &t.version);
        state.next_start_at_ms =
            exited_ms.saturating_add(backoff_delay_ms(&policy, state.failures));
    }

    /// The requests of everything that may hold resources here: instances that may be alive
    /// (stopping ones included) and starts not yet listed by the runtime.
    pub fn in_use(&self, input: &ReconcileInput, cache: &SpecCache) -> Resources {
        let request = |replica: &ReplicaId, version: Option<&str>| {
            version
                .and_then(|v| cache.for_instance(replica, v))
                .map(|s| s.resources)
                .or_else(|| input.spec(&replica.workload).map(|e| e.spec.resources))
                .unwrap_or_default()
        };
        let running = self
            .instances
            .values()
            .filter(|t| t.alive())
            .map(|t| request(&t.replica, Some(&t.version)));
        let starting = self
            .replicas
            .iter()
            .filter(|(_, s)| s.pending_start.is_some())
            .map(|(r, _)| request(r, None));
        running
            .chain(starting)
            .fold(Resources::default(), |a, r| a.saturating_add(&r))
    }

    /// The alive instances of a replica, oldest first (by start time, then handle).
    pub fn alive_of(&self, replica: &ReplicaId) -> Vec<(&String, &Tracked)> {
        let mut v: Vec<(&String, &Tracked)> = self
            .instances
            .iter()
            .filter(|(_, t)| &t.replica == replica && t.alive())
            .collect();
        v.sort_by(|a, b| a.1.started_at_ms.cmp(&b.1.started_at_ms).then(a.0.cmp(b.0)));
        v
    }
}

/// Counts one more consecutive failure of a replica. A start that failed counts as at least the
/// second, so it never gets the immediate retry: that is for an instance that ran and then
/// crashed, most often a one-off, while a refused start (image or command missing, the engine not
/// answering, the instance never listed) mostly fails again when asked again at once. Kubernetes,
/// too, waits before it pulls a missing image again.
fn count_failure(state: &mut ReplicaState, start_failed: bool) {
    let floor = if start_failed { 2 } else { 1 };
    state.failures = state.failures.saturating_add(1).max(floor);
}

fn count_version_failure(state: &mut ReplicaState, version: &str) {
    if state.failing_version.as_deref() == Some(version) {
        state.version_failures = state.version_failures.saturating_add(1);
    } else {
        state.failing_version = Some(version.to_string());
        state.version_failures = 1;
    }
}

fn restart_policy(input: &ReconcileInput, replica: &ReplicaId) -> RestartPolicy {
    input
        .spec(&replica.workload)
        .map(|e| e.spec.restart)
        .unwrap_or_default()
}

fn adopt(ri: &RuntimeInstance, input: &ReconcileInput, cache: &SpecCache, now_ms: u64) -> Tracked {
    let spec = cache
        .exact(&ri.replica.workload, &ri.spec_version)
        .or_else(|| input.spec(&ri.replica.workload).map(|e| &e.spec));
    let check = spec.and_then(|s| s.health.as_ref());
    Tracked {
        replica: ri.replica.clone(),
        version: ri.spec_version.clone(),
        phase: ri.phase,
        started_at_ms: ri.started_at_ms,
        exited_at_ms: ri.exited_at_ms,
        exit_code: ri.exit_code,
        error: ri.error.as_deref().map(|e| truncate(e, DETAIL_BYTES_MAX)),
        phase_since_ms: now_ms,
        health: Health::new(
            check,
            ri.phase == Phase::Running,
            ri.started_at_ms.min(now_ms),
        ),
        probed: check.is_some(),
        stop: None,
        exit_handled: false,
        remove_sent: false,
        orphan_since_ms: None,
        successor_serving_since: None,
        reload: None,
        fence_token: ri.fence_token,
        ports: ri.ports.clone(),
    }
}

fn update(t: &mut Tracked, ri: &RuntimeInstance, now_ms: u64) {
    if t.phase != ri.phase {
        t.phase = ri.phase;
        t.phase_since_ms = now_ms;
    }
    if t.phase == Phase::Running && !t.probed && t.health.verdict == Verdict::Unknown {
        t.health.verdict = Verdict::Healthy { since_ms: now_ms };
    }
    t.exit_code = ri.exit_code;
    t.exited_at_ms = ri.exited_at_ms;
    if let Some(e) = &ri.error {
        t.error = Some(truncate(e, DETAIL_BYTES_MAX));
    }
}
