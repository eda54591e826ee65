//! The reconciler's outputs besides actions (issues, approvals, observed state), the inputs that
//! arrive between ticks (probe, start and reload results), and its invariants.

use std::collections::{BTreeMap, BTreeSet};

use super::health::{truncate, HealthChange, DETAIL_BYTES_MAX};
use super::issue::{issue_id, ApproveError, Issue, IssueKind};
use super::plan::{Ctx, Plan, RawIssue};
use super::status::InstanceStatus;
use super::Reconciler;
use crate::instance::{Phase, ReplicaId};
use crate::spec::HealthCheck;

/// An instance to probe and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The runtime handle.
    pub handle: String,
    /// The replica it runs.
    pub replica: ReplicaId,
    /// The probe and its timing.
    pub check: HealthCheck,
}

/// Node-wide issues: self-fencing, and the suspicious view holding stops.
pub(crate) fn global_issues(ctx: &Ctx<'_>, placed: &BTreeMap<ReplicaId, String>, plan: &mut Plan) {
    let m = &ctx.input.membership;
    let has_exclusive = placed.keys().any(|r| {
        ctx.input
            .spec(&r.workload)
            .is_some_and(|e| e.spec.placement.exclusive)
    });
    if ctx.fencing_due && (plan.fenced > 0 || has_exclusive) {
        let msg = format!(
            "sees {} of {} known members (no strict majority) for {} ms or more: exclusive replicas stopped here",
            m.live_count(ctx.node),
            m.members_known,
            ctx.config.self_fence_ms
        );
        plan.issue(IssueKind::SelfFenced, None, msg);
    }
    if !ctx.suspicious.is_empty() && plan.unilateral > 0 {
        let why = ctx.suspicious.join("; ");
        let msg = format!(
            "{} stops or removals on this node's own authority wait: {why}; `shoal approve` lets them proceed",
            plan.unilateral
        );
        plan.held(IssueKind::SuspiciousView, None, msg, why);
    }
}

impl Reconciler {
    /// Replaces the current issues, keeping each one's `since_ms` and approval while it lasts.
    pub(crate) fn set_issues(&mut self, raw: Vec<RawIssue>, now: u64) {
        let mut next: BTreeMap<String, Issue> = BTreeMap::new();
        for r in raw {
            let id = issue_id(r.kind, r.replica.as_ref(), &self.node);
            if next.contains_key(&id) {
                continue;
            }
            let since_ms = self.issues.get(&id).map_or(now, |i| i.since_ms);
            let approved = r.held.is_some() && self.approvals.contains(&id);
            let issue = Issue {
                id: id.clone(),
                layer: r.kind.layer(),
                kind: r.kind,
                replica: r.replica,
                node: self.node.clone(),
                message: r.message,
                held: if approved { None } else { r.held },
                approved,
                since_ms,
            };
            next.insert(id, issue);
        }
        self.approvals
            .retain(|id| next.get(id).is_some_and(|i| i.approved));
        self.issues = next;
    }

    /// The current issues, ordered by id.
    pub fn issues(&self) -> Vec<Issue> {
        self.issues.values().cloned().collect()
    }

    /// Approves a held issue: from the next tick the reconciler proceeds with it, for as long as
    /// the issue lasts (a new occurrence after it resolves needs a new approval). Approving an
    /// approved issue again is a no-op.
    pub fn approve(&mut self, issue_id: &str) -> Result<(), ApproveError> {
        let issue = self
            .issues
            .get_mut(issue_id)
            .ok_or_else(|| ApproveError::Unknown(issue_id.to_string()))?;
        if issue.held.is_none() && !issue.approved {
            return Err(ApproveError::NotHeld(issue_id.to_string()));
        }
        issue.held = None;
        issue.approved = true;
        self.approvals.insert(issue_id.to_string());
        Ok(())
    }

    /// This node's instances, plus one entry without a handle for each replica placed here with no
    /// alive instance (`pending`, or `starting` once its start is sent), ordered by replica then
    /// handle: what the shell gossips (only after the first tick) and `shoal status` prints.
    pub fn observed(&self) -> Vec<InstanceStatus> {
        let mut out = Vec::new();
        for (handle, t) in &self.local.instances {
            let state = self.local.replicas.get(&t.replica);
            let exit_error = state
                .and_then(|s| s.last_exit.as_ref())
                .and_then(|e| e.error.clone());
            let last_error = t
                .error
                .clone()
                .or_else(|| t.health.detail.clone())
                .or_else(|| if t.alive() { None } else { exit_error });
            out.push(InstanceStatus {
                replica: t.replica.clone(),
                handle: Some(handle.clone()),
                phase: t.status_phase(),
                healthy: t.serves(),
                restarts: state.map_or(0, |s| s.restarts),
                spec_version: t.version.clone(),
                since_ms: t.phase_since_ms,
                exit_code: t.exit_code,
                last_error: last_error.map(|e| truncate(&e, DETAIL_BYTES_MAX)),
                fence_token: t.fence_token,
                failures: state.map_or(0, |s| s.failures_of(&t.version)),
                ports: t.ports.clone(),
                pull: None,
                waits_for_data: false,
            });
        }
        // Claims: a replica placed here without an alive instance (pending), or a start sent and
        // not listed yet (starting: it may be alive).
        let alive: BTreeSet<&ReplicaId> = self
            .local
            .instances
            .values()
            .filter(|t| t.alive())
            .map(|t| &t.replica)
            .collect();
        for (replica, state) in &self.local.replicas {
            let placed = self.placed.get(replica);
            if alive.contains(replica) || (placed.is_none() && state.pending_start.is_none()) {
                continue;
            }
            // A start in flight publishes its token: peers learn it even if no instance is ever
            // listed.
            let (phase, version, fence_token, pull) = match (&state.pending_start, placed) {
                (Some(p), _) if p.pull.is_some() => (
                    Phase::Pulling,
                    p.version.clone(),
                    p.fence_token,
                    p.pull.clone(),
                ),
                (Some(p), _) => (Phase::Starting, p.version.clone(), p.fence_token, None),
                (None, Some(v)) => (Phase::Pending, v.clone(), None, None),
                (None, None) => continue,
            };
            let exit = state.last_exit.as_ref();
            let failures = state.failures_of(&version);
            out.push(InstanceStatus {
                replica: replica.clone(),
                handle: None,
                phase,
                healthy: false,
                restarts: state.restarts,
                spec_version: version,
                since_ms: state.pending_since_ms.unwrap_or(self.now_ms),
                exit_code: exit.and_then(|e| e.code),
                last_error: exit.and_then(|e| e.error.clone()),
                failures,
                fence_token,
                ports: BTreeMap::new(),
                pull,
                waits_for_data: phase == Phase::Pending && state.data_wait_since_ms.is_some(),
            });
        }
        out.sort_by(|a, b| {
            a.replica
                .cmp(&b.replica)
                .then_with(|| a.handle.cmp(&b.handle))
        });
        out
    }

    /// Feeds one probe result for the instance `handle`. The shell runs the probes of
    /// [`Reconciler::probe_targets`] at their interval, each bounded by its timeout (a timeout is
    /// a failure). Results for unknown, exited or stopping instances are ignored.
    pub fn handle_probe_result(
        &mut self,
        handle: &str,
        ok: bool,
        detail: &str,
        now_ms: u64,
    ) -> HealthChange {
        let now = self.checked_now(now_ms);
        let Some(t) = self.local.instances.get_mut(handle) else {
            return HealthChange::Ignored;
        };
        if !t.alive() || t.stop.is_some() {
            return HealthChange::Ignored;
        }
        let spec = self.cache.for_instance(&t.replica, &t.version);
        let Some(check) = spec.and_then(|s| s.health.as_ref()) else {
            return HealthChange::Ignored;
        };
        t.probed = true;
        t.health.record(check, ok, detail, t.started_at_ms, now)
    }

    /// The instances to probe, with their checks: every alive instance not being stopped whose
    /// spec (the version it runs) has a health check. The shell probes each at `interval_ms`,
    /// bounded by `timeout_ms`, and feeds [`Reconciler::handle_probe_result`].
    pub fn probe_targets(&self) -> Vec<ProbeTarget> {
        self.local
            .instances
            .iter()
            .filter(|(_, t)| t.alive() && t.stop.is_none())
            .filter_map(|(h, t)| {
                let check = self
                    .cache
                    .for_instance(&t.replica, &t.version)?
                    .health
                    .clone()?;
                Some(ProbeTarget {
                    handle: h.clone(),
                    replica: t.replica.clone(),
                    check,
                })
            })
            .collect()
    }

    /// Reports a start the runtime refused before any instance existed (image missing, command
    /// not found, engine unreachable): a failure with backoff and a runtime issue.
    pub fn handle_start_failed(&mut self, replica: &ReplicaId, error: &str, now_ms: u64) {
        let now = self.checked_now(now_ms);
        let policy = self
            .cache
            .desired(&replica.workload)
            .map(|s| s.restart)
            .unwrap_or_default();
        self.local.record_start_failure(replica, error, policy, now);
    }

    /// Reports the outcome of an [`super::Action::Reload`]. Returns false when no reload of that
    /// instance was in flight (the result is ignored).
    pub fn handle_reload_result(
        &mut self,
        handle: &str,
        ok: bool,
        detail: &str,
        now_ms: u64,
    ) -> bool {
        let now = self.checked_now(now_ms);
        let retry_ms = self.config.reload_retry_ms;
        let Some(t) = self.local.instances.get_mut(handle) else {
            return false;
        };
        let Some(reload) = t.reload.as_mut().filter(|r| r.in_flight) else {
            return false;
        };
        if ok {
            t.version = reload.target.clone();
            t.reload = None;
        } else {
            reload.in_flight = false;
            reload.attempts = reload.attempts.saturating_add(1);
            reload.retry_at_ms = now.saturating_add(retry_ms);
            reload.last_error = Some(truncate(detail, DETAIL_BYTES_MAX));
        }
        true
    }

    /// Asserts the reconciler's invariants; the simulator calls it after every step. Panics on a
    /// programming error, never on anything the world can do.
    pub fn check_invariants(&self) {
        assert!(self.config.validate().is_ok(), "config became invalid");
        for (id, issue) in &self.issues {
            assert_eq!(id, &issue.id);
            assert_eq!(
                id,
                &issue_id(issue.kind, issue.replica.as_ref(), &self.node),
                "issue id unstable"
            );
            assert_eq!(issue.layer, issue.kind.layer());
            assert!(
                !(issue.approved && issue.held.is_some()),
                "approved issue still held: {id}"
            );
        }
        for id in &self.approvals {
            assert!(
                self.issues.get(id).is_some_and(|i| i.approved),
                "approval without its issue: {id}"
            );
        }
        assert!(self.local.instances.len() <= self.config.instances_max);
        for (r, state) in &self.local.replicas {
            assert!(
                state.fence_token.is_none() || self.placed.contains_key(r),
                "{r} holds a fencing token although it is not placed here"
            );
            if let Some(p) = &state.pending_start {
                let listed = self.local.instances.values().any(|t| {
                    &t.replica == r
                        && t.alive()
                        && t.version == p.version
                        && t.started_at_ms >= p.at_ms
                });
                assert!(
                    !listed,
                    "start of {r} still pending although its instance is listed"
                );
            }
        }
        let observed = self.observed();
        let mut seen = BTreeSet::new();
        for s in &observed {
            assert!(
                seen.insert((s.replica.clone(), s.handle.clone())),
                "observed twice: {}",
                s.replica
            );
            assert!(
                !(s.healthy && s.phase != Phase::Running),
                "healthy but {}",
                s.phase
            );
        }
        let bound = self.placed.len() + 2 * self.local.instances.len();
        assert!(
            self.cache.len() <= bound,
            "spec cache unbounded: {}",
            self.cache.len()
        );
    }
}
