//! The host loop's part in rollouts: assess each workload's rollout from the round's input
//! (`shoal_core::rollout`), and, on the one member the live set chooses, write what the mesh
//! decided: the record that a rollout completed or failed for good, or an automatic rollback
//! (`MeshNode::roll_back`).
//!
//! At most once a second. A workload whose current version has a record is settled: it is not
//! assessed again until its version changes (a version recorded complete is never rolled back
//! automatically). The writer is the lowest-named live member; the next ones act only if the
//! same decision still stands [`WRITER_STEP_MS`] later each (a frozen member that still looks
//! live must not stall a rollback), and concurrent writers are harmless (the record is the same,
//! the rollback a compare-and-set with the same content). At most one write per workload and
//! [`WRITES_IN_FLIGHT_MAX`] overall are in flight.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::{issue_id, InstanceStatus, Issue, IssueKind};
use shoal_core::rollout::{
    assess, decide, writer_delay_ms, Assessment, Decision, Known, Outcome, Record, RolloutInput,
    RolloutPhase, Watch,
};

use super::{Host, HostLoop};
use crate::state::mesh::history::{self, History};

/// Least time between two assessments, ms (monotonic).
const ASSESS_EVERY_MS: u64 = 1_000;
/// Rollout writes in flight at most.
const WRITES_IN_FLIGHT_MAX: usize = 16;
/// How long the writer keeps the issue that says it rolled a workload back, ms, unless the
/// workload's version moves on first.
const ROLLED_BACK_ISSUE_MS: u64 = 60 * 60 * 1000;
/// Who a rollout write is written for, in its proof of origin and the events.
const WRITER: &str = "auto-rollback";

/// The loop's rollout state.
#[derive(Default)]
pub(super) struct Rollouts {
    last_ms: Option<u64>,
    /// The version and phase each workload waits on a write for, and since when this agent has
    /// seen it (monotonic): the writer delay counts from there.
    waiting: BTreeMap<String, (String, RolloutPhase, u64)>,
    /// Workloads with a write in flight.
    in_flight: Arc<Mutex<BTreeSet<String>>>,
    /// Rollbacks this agent wrote (workload, new version, message), for the loop to raise
    /// their issues.
    written: Arc<Mutex<Vec<(String, String, String)>>>,
    /// The last assessment of each workload not settled.
    assessments: BTreeMap<String, Assessment>,
    /// Since when this agent has seen each copy starting (on its monotonic clock).
    watch: Watch,
    /// Issues this agent raises as the writer: a rollout failed for good, a rollback it wrote.
    issues: BTreeMap<String, RolloutIssue>,
}

struct RolloutIssue {
    issue: Issue,
    /// The workload version it is about: it goes once the version moves.
    version: String,
    /// When it expires (monotonic ms), if it does.
    until_ms: Option<u64>,
}

impl Rollouts {
    /// The last assessments, by workload (settled ones are absent).
    pub fn assessments(&self) -> &BTreeMap<String, Assessment> {
        &self.assessments
    }
}

impl HostLoop {
    /// Assesses the rollouts and starts the writes this agent is to make (at most once a
    /// second), after the round's actions.
    pub(super) fn tend_rollouts(&mut self, observed: &[InstanceStatus], now: u64) {
        if self
            .rollouts
            .last_ms
            .is_some_and(|t| now < t + ASSESS_EVERY_MS)
        {
            return;
        }
        self.rollouts.last_ms = Some(now);
        self.tend_rollout_issues(now);
        let me = self.host.node.name.as_str();
        let input = self.shell.input();
        let records = self.shell.records();
        let live = &input.membership.live;
        let delay = writer_delay_ms(me, live.iter().map(String::as_str).chain([me]));
        // Settled: the current version has a record. Everything else is assessed.
        let open: Vec<&String> = input
            .specs
            .iter()
            .filter(|(name, e)| records.get(*name).is_none_or(|r| r.version != e.version))
            .map(|(name, _)| name)
            .collect();
        if open.is_empty() {
            // Every rollout settled: no walk over the mesh's instances.
            self.rollouts.assessments.clear();
            self.rollouts.waiting.clear();
            self.rollouts.watch = Watch::default();
            return;
        }
        let mut copies: BTreeMap<&str, Vec<(&str, &InstanceStatus)>> = BTreeMap::new();
        for name in &open {
            copies.insert(name.as_str(), Vec::new());
        }
        let own = observed.iter().map(|s| (me, s));
        let peers = input
            .peers
            .iter()
            .filter(|(node, _)| live.contains(*node) && node.as_str() != me)
            .flat_map(|(node, list)| list.iter().map(move |s| (node.as_str(), s)));
        for (node, s) in own.chain(peers) {
            if let Some(list) = copies.get_mut(s.replica.workload.as_str()) {
                list.push((node, s));
            }
        }
        let mut assessments = BTreeMap::new();
        for name in open {
            let entry = &input.specs[name];
            let replicas = input
                .owners
                .range(ReplicaId::new(name, 0)..=ReplicaId::new(name, u32::MAX))
                .map(|(r, _)| r.replica);
            let rollout = RolloutInput {
                spec: &entry.spec,
                version: &entry.version,
                paused: entry.paused,
                now_ms: now,
            };
            let list = copies.remove(name.as_str()).unwrap_or_default();
            let watch = &mut self.rollouts.watch;
            assessments.insert(name.clone(), assess(rollout, replicas, list, watch));
        }
        self.rollouts.watch.sweep();
        self.rollouts.assessments = assessments;
        let Some(delay) = delay else {
            self.rollouts.waiting.clear();
            return;
        };
        let mut due = Vec::new();
        for (name, a) in &self.rollouts.assessments {
            // Something to write (the history is read only then, by the write itself).
            let known = Known {
                record: records.get(name),
                ..Known::default()
            };
            if decide(a, true, known) == Decision::Nothing {
                self.rollouts.waiting.remove(name);
                continue;
            }
            let since = match self.rollouts.waiting.get(name) {
                Some((version, phase, since)) if *version == a.version && *phase == a.phase => {
                    *since
                }
                _ => {
                    let waiting = (a.version.clone(), a.phase, now);
                    self.rollouts.waiting.insert(name.clone(), waiting);
                    now
                }
            };
            if now >= since + delay {
                due.push(name.clone());
            }
        }
        let names: BTreeSet<&String> = self.rollouts.assessments.keys().collect();
        self.rollouts.waiting.retain(|name, _| names.contains(name));
        for name in due {
            self.start_rollout_write(name, delay == 0);
        }
    }

    /// Starts the write for `name`'s rollout (unless one is in flight or too many are).
    fn start_rollout_write(&mut self, name: String, first: bool) {
        {
            let mut in_flight = self.rollouts.in_flight.lock().expect("in-flight lock");
            if in_flight.contains(&name) || in_flight.len() >= WRITES_IN_FLIGHT_MAX {
                return;
            }
            in_flight.insert(name.clone());
        }
        let Some(assessment) = self.rollouts.assessments.get(&name).cloned() else {
            return;
        };
        let entry = self.shell.input().specs.get(&name).cloned();
        let record = self.shell.records().get(&name).cloned();
        let (host, in_flight) = (self.host.clone(), self.rollouts.in_flight.clone());
        let written = self.rollouts.written.clone();
        let wake = self.host.wake_handle();
        self.host.node.spawn(async move {
            if let Some(entry) = entry {
                let auto = entry.spec.update.auto_rollback;
                let done = write_decision(&host, &name, &assessment, auto, record, first).await;
                if let Some((version, message)) = done {
                    written
                        .lock()
                        .expect("written lock")
                        .push((name.clone(), version, message));
                }
            }
            in_flight.lock().expect("in-flight lock").remove(&name);
            wake();
        });
    }

    /// Drops the rollout issues whose version moved on or that expired, and raises the one of
    /// each workload whose rollout is recorded failed (on the writer only).
    fn tend_rollout_issues(&mut self, now: u64) {
        let written = std::mem::take(&mut *self.rollouts.written.lock().expect("written lock"));
        for (name, version, message) in written {
            self.note_rollback(&name, version, message, now);
        }
        let input = self.shell.input();
        let records = self.shell.records();
        let me = self.host.node.name.clone();
        let is_writer = writer_delay_ms(
            &me,
            input
                .membership
                .live
                .iter()
                .map(String::as_str)
                .chain([me.as_str()]),
        ) == Some(0);
        let issues = &mut self.rollouts.issues;
        issues.retain(|name, i| {
            is_writer
                && input
                    .specs
                    .get(name)
                    .is_some_and(|e| e.version == i.version)
                && i.until_ms.is_none_or(|t| now < t)
        });
        if !is_writer {
            return;
        }
        for (name, record) in records {
            let current = input
                .specs
                .get(name)
                .is_some_and(|e| e.version == record.version);
            if !current || record.outcome != Outcome::Failed || issues.contains_key(name) {
                continue;
            }
            let message = format!(
                "the rollout of version {} failed and stays failed: {}",
                shoal_core::hlc::format_version(&record.version),
                record.reason
            );
            let issue = rollout_issue(IssueKind::RolloutFailed, name, &me, message, now);
            issues.insert(
                name.clone(),
                RolloutIssue {
                    issue,
                    version: record.version.clone(),
                    until_ms: None,
                },
            );
        }
    }

    /// The current rollout issues.
    pub(super) fn rollout_issues(&self) -> impl Iterator<Item = &Issue> {
        self.rollouts.issues.values().map(|i| &i.issue)
    }

    /// Records that this agent rolled `name` back to `version`: the issue stays while the
    /// workload runs that version (an hour at most).
    fn note_rollback(&mut self, name: &str, version: String, message: String, now: u64) {
        let me = self.host.node.name.clone();
        let issue = rollout_issue(IssueKind::RolledBack, name, &me, message, now);
        self.rollouts.issues.insert(
            name.to_string(),
            RolloutIssue {
                issue,
                version,
                until_ms: Some(now + ROLLED_BACK_ISSUE_MS),
            },
        );
    }
}

fn rollout_issue(kind: IssueKind, name: &str, node: &str, message: String, since_ms: u64) -> Issue {
    Issue {
        id: issue_id(kind, Some(&ReplicaId::new(name, 0)), node),
        layer: kind.layer(),
        kind,
        replica: None,
        node: node.to_string(),
        message: format!("{name}: {message}"),
        held: None,
        approved: false,
        since_ms,
    }
}

/// Reads what the decision needs from the store and writes it. Returns the new version and the
/// message of a rollback it wrote.
async fn write_decision(
    host: &Arc<Host>,
    name: &str,
    assessment: &Assessment,
    auto_rollback: bool,
    record: Option<Record>,
    first: bool,
) -> Option<(String, String)> {
    let node = host.node.clone();
    let key = history::store_name(name);
    let held = node
        .with_store(move |s| History::decode(s.get(&key).and_then(|e| e.body.live())))
        .await;
    let known = Known {
        record: record.as_ref(),
        current_is_rollback: held.current_is_rollback(),
        last_complete: held.last_complete().map(|p| p.version.as_str()),
    };
    let by = format!("{WRITER} ({})", node.name);
    match decide(assessment, auto_rollback, known) {
        Decision::Nothing => None,
        Decision::Record(record) => {
            let body = history::encode_record(&record);
            let stored = node
                .clone()
                .store_reserved(history::rollout_name(name), body, by)
                .await;
            match (stored, record.outcome) {
                (Err(e), _) => {
                    tracing::warn!(error = %e.message, name, "rollout record not written")
                }
                (Ok(_), Outcome::Complete) => host.record(
                    "rollout-complete",
                    Some(name.to_string()),
                    format!(
                        "every replica serves at version {}",
                        shoal_core::hlc::format_version(&record.version)
                    ),
                ),
                (Ok(_), _) => host.record(
                    "rollout-failed",
                    Some(name.to_string()),
                    record.reason.clone(),
                ),
            }
            None
        }
        Decision::RollBack { from, to, reason } => {
            let written = node
                .clone()
                .roll_back(
                    name.to_string(),
                    from.clone(),
                    to.clone(),
                    reason.clone(),
                    by,
                )
                .await;
            match written {
                Ok(Some(done)) => {
                    let message = format!(
                        "rolled back from version {} to the content of version {} (now version {}{}): {reason}",
                        shoal_core::hlc::format_version(&from),
                        shoal_core::hlc::format_version(&to),
                        done.entry.version,
                        if first { "" } else { ", written by a later writer: the first did not act" }
                    );
                    tracing::warn!(name, %message, "automatic rollback");
                    host.record("rollback", Some(name.to_string()), message.clone());
                    Some((done.entry.version.to_string(), message))
                }
                Ok(None) => {
                    tracing::info!(name, "rollback not written: the version moved first");
                    None
                }
                Err(e) => {
                    tracing::warn!(error = %e.message, name, "rollback not written");
                    None
                }
            }
        }
    }
}
