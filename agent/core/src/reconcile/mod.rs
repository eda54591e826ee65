//! The convergence loop as a sans-IO state machine (source document 000): compare this node's
//! slice of the placement with the instances it observes, derive issues, and return one step of
//! reconciliation per issue as [`Action`]s. The shell executes them and feeds back what happened
//! (the runtime's list on the next tick, probe results, start and reload outcomes).
//!
//! Inputs in, actions out: [`Reconciler::handle_tick`] with a [`ReconcileInput`] and `now_ms`;
//! [`Reconciler::handle_probe_result`], [`Reconciler::handle_start_failed`] and
//! [`Reconciler::handle_reload_result`]. Outputs: the actions (at most
//! [`ReconcileConfig::actions_per_round_max`] per tick, most urgent first),
//! [`Reconciler::issues`], [`Reconciler::observed`] (what the shell gossips) and
//! [`Reconciler::poll_timeout`] (when to tick again if nothing else happens).
//!
//! The rules (docs/reconcile.md tells the whole story):
//! - **Missing**: a replica placed here with no alive instance starts, unless a start is in flight,
//!   its restart policy ended it, the local runtime cannot run it, its backoff runs, or (exclusive)
//!   the safety rule (`exclusive.rs`, docs/reconcile.md) forbids it. A restarted agent adopts the runtime's instances
//!   first: any alive instance of a replica, at any version, blocks its start.
//! - **Exited or unhealthy**: an unhealthy instance (probe failures past the threshold, outside
//!   the start grace) is stopped; an exit that was not a planned stop is a failure. The first
//!   failure restarts at once (as Kubernetes); from the second consecutive one the restart waits
//!   `backoff_initial`, doubled per further failure up to `backoff_max`; the count resets when
//!   the instance had been healthy for `backoff_reset`. A failed start always waits (at least
//!   `backoff_initial`). `never` does not restart; `on-failure` does not restart a clean exit.
//! - **Outdated**: the reload hook for a live-settings change, else a rolling replacement within
//!   the workload's mesh-wide `max_unavailable` / `max_surge` budget (`update.rs`).
//! - **Orphan**: stop after handoff (normal) or at once (exclusive, deleted, scaled down) (`orphan.rs`).
//! - **Fencing**: a node that has not seen a strict majority of the last known membership for
//!   `self_fence_ms` stops its exclusive instances.
//! - **Fencing tokens**: each start of an exclusive replica carries a token that grows whenever
//!   its ownership moves and stays the same across restarts on one owner (`fence_token.rs`).
//! - **Never mass-stop**: while the view is suspicious (no specs while instances of workloads
//!   never deleted run, no majority,
//!   most instances suddenly placed elsewhere while not draining, or the shell says so), stops on
//!   this node's own authority are held behind one approvable safety issue.
//!
//! **Invariants** (checked by [`Reconciler::check_invariants`] and the property tests): no I/O, no
//! clock, no `HashMap` iteration reaching an output; the same inputs give the same actions; no
//! start for a replica with an alive instance here (except the surge copy of a rolling update);
//! never more actions per round than the bound; no exclusive start while a live peer reports a copy.

mod action;
mod cache;
mod config;
mod data;
mod exclusive;
mod fence_token;
mod health;
mod input;
mod issue;
mod orphan;
mod plan;
mod report;
mod round;
mod start;
mod status;
mod track;
mod update;
mod view;

use std::collections::{BTreeMap, BTreeSet};

pub use action::{Action, StopCause};
pub use config::{ConfigError, ReconcileConfig};
pub use health::{backoff_delay_ms, HealthChange};
pub use input::{
    host_path_refusal, CellCopies, CellHandoff, Membership, ReconcileInput, SpecEntry,
};
pub use issue::{issue_id, ApproveError, Issue, IssueKind, Layer, RestartError};
pub use report::ProbeTarget;
pub use status::InstanceStatus;

// The cells' quorum an exclusive replica needs lives with the cell table that computes it.
pub use crate::cells::CellQuorum;

use crate::instance::ReplicaId;
use cache::SpecCache;
use plan::{Ctx, Plan};
use track::Local;
use view::{MeshTimers, PeerIndex};

/// The reconciler of one node. Pure: time arrives as `now_ms`, and every collection that reaches
/// an output is ordered.
#[derive(Clone, Debug)]
pub struct Reconciler {
    node: String,
    config: ReconcileConfig,
    local: Local,
    cache: SpecCache,
    timers: MeshTimers,
    issues: BTreeMap<String, Issue>,
    approvals: BTreeSet<String>,
    /// Instances an operator asked to restart, by handle, until their stop is sent.
    restarts: BTreeSet<String>,
    /// Replicas placed here at the last tick, with the desired version.
    placed: BTreeMap<ReplicaId, String>,
    /// When this agent first read each peer's copy serving, for the rollouts' settle time.
    serving_seen: view::ServingSeen,
    wake_at_ms: Option<u64>,
    now_ms: u64,
    ticked: bool,
}

impl Reconciler {
    /// A reconciler for `node`. Panics if `config` fails [`ReconcileConfig::validate`] (check
    /// operator-supplied values with it first).
    pub fn new(node: &str, config: ReconcileConfig) -> Reconciler {
        if let Err(e) = config.validate() {
            panic!("invalid reconcile config: {e}");
        }
        Reconciler {
            node: node.to_string(),
            config,
            local: Local::default(),
            cache: SpecCache::default(),
            timers: MeshTimers::default(),
            issues: BTreeMap::new(),
            approvals: BTreeSet::new(),
            restarts: BTreeSet::new(),
            placed: BTreeMap::new(),
            serving_seen: view::ServingSeen::default(),
            wake_at_ms: None,
            now_ms: 0,
            ticked: false,
        }
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The configuration.
    pub fn config(&self) -> &ReconcileConfig {
        &self.config
    }

    /// One round: reads the whole input, updates the reconciler's memory and returns at most
    /// `actions_per_round_max` actions, most urgent first. Call it whenever an input changes and
    /// at [`Reconciler::poll_timeout`]. `now_ms` is monotonic time: it never runs backwards
    /// (the shell feeds a monotonic clock; an earlier `now_ms` than a previous one is a bug in
    /// the caller and panics).
    pub fn handle_tick(&mut self, input: &ReconcileInput, now_ms: u64) -> Vec<Action> {
        let now = self.checked_now(now_ms);
        self.now_ms = now;
        self.ticked = true;
        // A restarted agent believes the member count it knew until it sees a majority of it.
        let counted = input.membership.members_known;
        let floored;
        let input = if self.timers.members_known(counted) > counted {
            let mut copy = input.clone();
            copy.membership.members_known = self.timers.members_known(counted);
            floored = copy;
            &floored
        } else {
            input
        };
        self.timers.observe(&self.node, input, &self.config, now);
        self.timers.settle_members(counted);
        if let Some(why) = self.runtime_problem(input) {
            let plan = Plan {
                issues: vec![plan::RawIssue {
                    kind: IssueKind::RuntimeUnavailable,
                    replica: None,
                    message: format!("{why}; no local action until it is resolved"),
                    held: None,
                }],
                ..Plan::default()
            };
            self.wake_at_ms = None;
            self.set_issues(plan.issues, now);
            return Vec::new();
        }
        self.placed = input
            .owners
            .iter()
            .filter(|(r, n)| *n == &self.node && input.replica_exists(r))
            .map(|(r, _)| (r.clone(), input.specs[&r.workload].version.clone()))
            .collect();
        // Before ingesting, the spec cache also serves the instances about to be adopted.
        let incoming = input.instances.iter().map(|i| i.replica.workload.clone());
        let workloads: BTreeSet<String> = self.relevant_workloads().chain(incoming).collect();
        self.cache.refresh(input, &self.local.instances, &workloads);
        let timeout = self.config.start_report_timeout_ms;
        self.local
            .ingest(input, &self.cache, &self.node, now, timeout);
        let two_way = self.timers.minority_since_ms.is_none();
        fence_token::hold(&mut self.local, &self.placed, two_way);
        let workloads: BTreeSet<String> = self.relevant_workloads().collect();
        self.cache.refresh(input, &self.local.instances, &workloads);
        self.expire_reloads(now);
        let mut plan = self.plan(input, &workloads, now);
        let actions = self.select(&mut plan, now);
        self.wake_at_ms = plan.wake_at_ms;
        self.set_issues(std::mem::take(&mut plan.issues), now);
        self.prune();
        assert!(actions.len() <= self.config.actions_per_round_max);
        actions
    }

    /// `now_ms`, asserted not earlier than the last tick's: the reconciler's time is monotonic,
    /// and time running backwards is a bug in the shell, not a condition to clamp.
    fn checked_now(&self, now_ms: u64) -> u64 {
        assert!(
            now_ms >= self.now_ms,
            "time ran backwards in the reconciler: {now_ms} ms after {} ms; feed a monotonic clock",
            self.now_ms
        );
        now_ms
    }

    /// Workloads with a replica placed here or a tracked instance here.
    fn relevant_workloads(&self) -> impl Iterator<Item = String> + '_ {
        let placed = self.placed.keys().map(|r| r.workload.clone());
        placed.chain(
            self.local
                .instances
                .values()
                .map(|t| t.replica.workload.clone()),
        )
    }

    fn runtime_problem(&self, input: &ReconcileInput) -> Option<String> {
        if let Some(why) = &input.runtime_unavailable {
            return Some(format!("the local runtime is unavailable: {why}"));
        }
        let n = input.instances.len();
        (n > self.config.instances_max).then(|| {
            format!(
                "the runtime lists {n} instances, more than the bound of {}",
                self.config.instances_max
            )
        })
    }

    fn plan(&mut self, input: &ReconcileInput, workloads: &BTreeSet<String>, now: u64) -> Plan {
        let serving_seen = std::cell::RefCell::new(std::mem::take(&mut self.serving_seen));
        let ctx = Ctx {
            node: &self.node,
            config: &self.config,
            input,
            peers: PeerIndex::build(&self.node, input, workloads),
            cache: &self.cache,
            timers: &self.timers,
            serving_seen: &serving_seen,
            approvals: &self.approvals,
            restarts: &self.restarts,
            now_ms: now,
            suspicious: view::suspicious_reasons(
                &self.node,
                input,
                &self.local,
                &self.config,
                &self.timers,
            ),
            fencing_due: self.timers.fencing_due(&self.config, now),
        };
        let mut plan = Plan {
            room: input
                .capacity
                .map(|cap| cap.saturating_sub(&self.local.in_use(input, &self.cache))),
            ..Plan::default()
        };
        for replica in self.placed.keys() {
            let entry = &input.specs[&replica.workload];
            plan::plan_placed(&ctx, &mut self.local, &mut plan, replica, entry);
        }
        for (handle, t) in &self.local.instances {
            if !self.placed.contains_key(&t.replica) {
                orphan::plan_orphan(&ctx, &mut plan, handle, t);
            }
        }
        report::global_issues(&ctx, &self.placed, &mut plan);
        if let Some(minority) = self.timers.minority_since_ms {
            if !ctx.fencing_due {
                plan.wake_at(minority.saturating_add(self.config.self_fence_ms));
            }
        }
        drop(ctx);
        self.serving_seen = serving_seen.into_inner();
        self.serving_seen.end_round();
        plan
    }

    /// When to call [`Reconciler::handle_tick`] next if no input changes: the earliest backoff
    /// expiry, fencing deadline, handoff bound or retry; `Some(now)` when the last round was cut
    /// short by the action bound.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.wake_at_ms
    }

    /// When this node last saw a strict majority of the last known membership. The shell should
    /// persist it (a value a few seconds old is fine: older only fences sooner) and hand it to
    /// [`Reconciler::restore_last_majority`] after an agent restart, so that restarting an agent
    /// cut off from the majority does not postpone its self-fencing.
    pub fn last_majority_ms(&self) -> Option<u64> {
        self.timers.last_majority_ms
    }

    /// Restarts `replica`'s running instance on this node: the next tick stops it (cause
    /// [`StopCause::Restart`], the stop grace of any stop) and, once it is gone, starts a new
    /// one if the replica is still placed here. Returns the handle being restarted. Refused when
    /// no instance of it runs here (pending, starting before it was ever listed, stopping).
    pub fn restart(&mut self, replica: &ReplicaId) -> Result<String, RestartError> {
        let alive = self.local.alive_of(replica);
        let running = alive.iter().rev().find(|(_, t)| {
            t.stop.is_none() && t.phase.may_be_alive() && t.phase != crate::instance::Phase::Pending
        });
        match running {
            Some((handle, _)) => {
                let handle = handle.to_string();
                self.restarts.insert(handle.clone());
                Ok(handle)
            }
            None => Err(RestartError::NotRunning {
                replica: replica.to_string(),
                node: self.node.clone(),
                phase: alive
                    .last()
                    .map(|(_, t)| format!(": it is {}", t.status_phase()))
                    .unwrap_or_default(),
            }),
        }
    }

    /// Since when this node has seen a strict majority of the mesh without a break, if it sees
    /// one now: death verdicts are trusted, and fencing delays counted, from then on.
    pub fn majority_since_ms(&self) -> Option<u64> {
        self.timers.majority_since_ms
    }

    /// Restores [`Reconciler::last_majority_ms`] from before an agent restart; call it before the
    /// first tick. Without it, a restarted agent dates its lack of majority from its first tick.
    pub fn restore_last_majority(&mut self, at_ms: u64) {
        let t = &mut self.timers;
        t.last_majority_ms = Some(t.last_majority_ms.map_or(at_ms, |m| m.max(at_ms)));
    }

    /// How many members the mesh had when this node last saw a strict majority of it. The shell
    /// should persist it when it changes and hand it to [`Reconciler::restore_members_known`]
    /// after an agent restart.
    pub fn members_known_at_majority(&self) -> Option<usize> {
        self.timers.majority_members
    }

    /// Restores [`Reconciler::members_known_at_majority`] from before an agent restart; call it
    /// before the first tick. Until this node sees a strict majority of that many members, a
    /// smaller `members_known` is not believed: an agent restarted while cut off hears only
    /// itself, and must not count itself a majority of one. Once it has seen a majority, the
    /// shell's count is believed again (members that left while it was down no longer count).
    pub fn restore_members_known(&mut self, members: usize) {
        let t = &mut self.timers;
        t.members_floor = Some(t.members_floor.map_or(members, |f| f.max(members)));
    }

    /// Whether [`Reconciler::handle_tick`] has run once. Until then [`Reconciler::observed`] knows
    /// nothing (instances are adopted on the first tick): the shell must not publish it before,
    /// or peers would read "runs nothing" from a node that runs its instances.
    pub fn has_ticked(&self) -> bool {
        self.ticked
    }

    /// The last `now_ms` seen.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "time ran backwards")]
    fn time_running_backwards_is_a_bug_not_a_clamp() {
        let mut r = Reconciler::new("n1", ReconcileConfig::default());
        let input = ReconcileInput::default();
        r.handle_tick(&input, 10_000);
        r.handle_tick(&input, 9_999);
    }

    #[test]
    fn time_standing_still_is_fine() {
        let mut r = Reconciler::new("n1", ReconcileConfig::default());
        let input = ReconcileInput::default();
        r.handle_tick(&input, 10_000);
        r.handle_tick(&input, 10_000);
        assert_eq!(r.now_ms(), 10_000);
    }
}
