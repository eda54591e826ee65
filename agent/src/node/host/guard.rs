//! The host loop's duties toward the guard process (`crate::node::guard`): renew its lease every round
//! with what is exclusive here, tell the reconciler when no guard can be relied on, and turn what
//! the guard did into events and `self-fenced` issues.

use std::collections::BTreeSet;

use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::{issue_id, Issue, IssueKind, ReconcileInput};

use super::HostLoop;
use crate::node::guard::{lease_grant_ms, Fired};

/// How long an issue about what the guard did stays listed (it reports a past event; `shoal
/// events` keeps the record).
const FIRED_ISSUE_MS: u64 = 10 * 60 * 1000;
/// Most such issues kept at once.
const FIRED_ISSUES_MAX: usize = 256;

/// An issue raised by the shell about the guard, with when it expires (monotonic ms).
pub(super) struct GuardIssue {
    pub issue: Issue,
    pub until_ms: u64,
}

/// The handles of the exclusive instances the runtime lists as possibly alive.
fn guarded_handles(input: &ReconcileInput, exclusive: &BTreeSet<String>) -> BTreeSet<String> {
    input
        .instances
        .iter()
        .filter(|i| i.phase.may_be_alive() && exclusive.contains(&i.replica.workload))
        .map(|i| i.handle.clone())
        .collect()
}

impl HostLoop {
    /// Why exclusive replicas must not start this round, from the guard's state after the last
    /// round (`None` also when this host has no guard: the in-memory agents of tests; the
    /// simulator's agents have an in-memory one, `MemGuard`).
    pub(super) fn guard_unavailable(&self) -> Option<String> {
        let guard = self.host.guard.lock().expect("guard lock");
        guard.as_ref().and_then(|g| g.unavailable())
    }

    /// Renews the guard's lease after the round's tick (so the majority time is this round's),
    /// before its actions run; takes what the guard did.
    pub(super) fn tend_guard(&mut self, issues: &[Issue], now: u64) {
        let host = self.host.clone();
        let fired = {
            let mut guard = host.guard.lock().expect("guard lock");
            let Some(link) = guard.as_mut() else {
                return;
            };
            let handles = guarded_handles(self.shell.input(), &self.exclusive);
            let exempt = issues
                .iter()
                .any(|i| i.kind == IssueKind::ExclusiveUndecided && i.approved);
            let config = &self.host.config.reconcile;
            let seen = self
                .reconciler
                .last_majority_ms()
                .unwrap_or(self.host.started_mono_ms);
            let grant = lease_grant_ms(now, link.lease_ms(), seen, config, exempt);
            link.renew(&self.exclusive, handles, grant);
            link.take_fired()
        };
        for record in fired {
            self.report_fired(&record, now);
        }
        self.guard_issues.retain(|g| g.until_ms > now);
    }

    /// One event per record, and a `self-fenced` issue per instance the guard killed.
    fn report_fired(&mut self, record: &Fired, now: u64) {
        let summary = record.summary();
        tracing::warn!(%summary, "guard report");
        self.host.record("guard", None, summary);
        let node = self.host.node.name.clone();
        for k in &record.killed {
            if self.guard_issues.len() >= FIRED_ISSUES_MAX {
                break;
            }
            let replica = (!k.workload.is_empty()).then(|| ReplicaId::new(&k.workload, k.replica));
            let message = format!(
                "the guard killed this exclusive instance ({}, {}) at {}: {}",
                k.handle,
                k.what,
                shoal_core::hlc::format_utc_ms(record.at_ms),
                record.reason
            );
            let issue = Issue {
                id: issue_id(IssueKind::SelfFenced, replica.as_ref(), &node),
                layer: IssueKind::SelfFenced.layer(),
                kind: IssueKind::SelfFenced,
                replica: replica.clone(),
                node: node.clone(),
                message,
                held: None,
                approved: false,
                since_ms: now,
            };
            self.guard_issues.retain(|g| g.issue.id != issue.id);
            self.guard_issues.push(GuardIssue {
                issue,
                until_ms: now + FIRED_ISSUE_MS,
            });
        }
    }

    /// The current issues about the guard.
    pub(super) fn guard_issues(&self) -> impl Iterator<Item = &Issue> {
        self.guard_issues.iter().map(|g| &g.issue)
    }
}
