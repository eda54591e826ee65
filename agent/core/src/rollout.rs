//! A workload's rollout as every agent computes it, and what to do about it.
//!
//! The desired version comes from the store; the copies at it come from gossip (each node's
//! [`InstanceStatus`]es). [`assess`] reads them into an [`Assessment`]: how many replicas
//! serve at the desired version, which have a *failed* copy there, and the phase (in progress,
//! paused, complete, failed). A copy at the desired version has failed when it crash-loops
//! ([`CRASH_LOOP_FAILURES`] consecutive failures of that version on its node: exits, failed
//! health, failed starts) or when it has stayed `starting` (started, never healthy) for the
//! spec's `update.progress_deadline`. The rollout fails when more than `update.failure_threshold`
//! replicas have a failed copy.
//!
//! [`decide`] turns an assessment and what the store says of the rollout (its [`Record`], the
//! history's verdict on the version before) into a [`Decision`]: record that the rollout
//! completed, roll back to the last version whose rollout completed, or record that it failed
//! and stays failed (no such version, `auto_rollback = false`, or the current version is itself
//! an automatic rollback: Shoal never rolls back a rollback). A version recorded complete is never
//! rolled back automatically, whatever fails later: that is an ordinary failure, for restarts.
//!
//! Every agent computes the same assessment from (nearly) the same gossip; the shell lets one
//! writer act, chosen from the live members ([`writer_delay_ms`]), and writes a rollback as a
//! compare-and-set just above the failed version, so that concurrent writers write the same thing
//! and any later apply wins over it (docs/reconcile.md, "Automatic rollback").

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::instance::Phase;
use crate::reconcile::InstanceStatus;
use crate::spec::WorkloadSpec;

/// Consecutive failures of a version on one node that make its copy a crash loop.
pub const CRASH_LOOP_FAILURES: u32 = 3;
/// Failed replicas an assessment lists at most (the count is exact).
pub const FAILED_LISTED_MAX: usize = 8;
/// How long each writer after the first waits behind the one before it, ms: the lowest-named
/// live member acts at once, the next one if the failure is still there this much later, and
/// so on up to [`WRITERS_MAX`] (a frozen member that still looks live must not stall it).
pub const WRITER_STEP_MS: u64 = 5_000;
/// Members that may act on one rollout, at most.
pub const WRITERS_MAX: usize = 3;
/// Longest reason kept in a record or an assessment, bytes.
pub const REASON_BYTES_MAX: usize = 512;

/// Where a rollout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutPhase {
    /// Replicas still to update (or starting at the new version), none failed past the threshold.
    InProgress,
    /// An operator paused it (`shoal rollout pause`).
    Paused,
    /// Every replica serves at the desired version.
    Complete,
    /// More than `failure_threshold` replicas have a failed copy at the desired version.
    Failed,
}

impl RolloutPhase {
    /// The name people read.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutPhase::InProgress => "in progress",
            RolloutPhase::Paused => "paused",
            RolloutPhase::Complete => "complete",
            RolloutPhase::Failed => "failed",
        }
    }
}

/// A replica with a failed copy at the desired version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedReplica {
    /// The replica's index.
    pub replica: u32,
    /// The node its failed copy is on.
    pub node: String,
    /// Why it counts as failed.
    pub why: String,
}

/// One agent's reading of a rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assessment {
    /// The desired version.
    pub version: String,
    /// The phase.
    pub phase: RolloutPhase,
    /// Replicas assessed (in a mesh of cells: the ones placed in this agent's cell).
    pub desired: u32,
    /// Of those, replicas with a serving copy at the desired version.
    pub updated: u32,
    /// Replicas with a failed copy at the desired version (exact count).
    pub failed_count: u32,
    /// The first of them, by index (at most [`FAILED_LISTED_MAX`]).
    pub failed: Vec<FailedReplica>,
}

impl Assessment {
    /// Why the rollout failed, in one line (empty when it has not).
    pub fn reason(&self) -> String {
        if self.failed.is_empty() {
            return String::new();
        }
        let first = &self.failed[0];
        let text = format!(
            "{} of {} replicas failed at the new version (replica {} on {}: {})",
            self.failed_count, self.desired, first.replica, first.node, first.why
        );
        truncate(&text, REASON_BYTES_MAX)
    }
}

/// What the store says became of a rollout: written once by the writer when it completes or
/// fails for good (`shoal:rollout:NAME`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The version it is about.
    pub version: String,
    /// Complete or failed.
    pub outcome: Outcome,
    /// Why, for a failure.
    pub reason: String,
}

/// What became of a version: in its [`Record`] while it is current, in the history once replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Its rollout completed: every replica served at it.
    Complete,
    /// Its rollout failed and stayed failed (nothing to roll back to, or not allowed to).
    Failed,
    /// Its rollout failed and an automatic rollback replaced it.
    RolledBack,
    /// Replaced by an apply before its rollout completed or failed.
    Superseded,
}

impl Outcome {
    /// The name people read.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::Failed => "failed",
            Outcome::RolledBack => "rolled back",
            Outcome::Superseded => "superseded",
        }
    }
}

/// What [`assess`] reads.
#[derive(Clone, Copy, Debug)]
pub struct RolloutInput<'a> {
    /// The desired spec.
    pub spec: &'a WorkloadSpec,
    /// Its store version (raw form, compared for equality).
    pub version: &'a str,
    /// An operator paused the rollout.
    pub paused: bool,
    /// The assessing agent's monotonic clock, ms (the clock of its [`Watch`]).
    pub now_ms: u64,
}

/// Since when the assessing agent has seen each copy `starting` (started, never healthy), on
/// its own clock: a peer's `InstanceStatus::since_ms` is on the peer's monotonic clock and means
/// nothing here. An agent that starts watching late only judges later (never sooner).
#[derive(Clone, Debug, Default)]
pub struct Watch {
    /// (workload, replica, node, handle) -> (version, first seen starting).
    starting: BTreeMap<(String, u32, String, String), (String, u64)>,
    /// The copies seen in the current pass (the rest are forgotten by [`Watch::sweep`]).
    seen: BTreeSet<(String, u32, String, String)>,
}

impl Watch {
    /// How long this agent has seen `copy` on `node` starting at its version, ms.
    fn starting_for(&mut self, node: &str, copy: &InstanceStatus, now_ms: u64) -> u64 {
        let key = (
            copy.replica.workload.clone(),
            copy.replica.replica,
            node.to_string(),
            copy.handle.clone().unwrap_or_default(),
        );
        self.seen.insert(key.clone());
        let held = self
            .starting
            .entry(key)
            .or_insert_with(|| (copy.spec_version.clone(), now_ms));
        if held.0 != copy.spec_version {
            *held = (copy.spec_version.clone(), now_ms);
        }
        now_ms.saturating_sub(held.1)
    }

    /// Forgets the copies not seen starting since the last sweep (healthy, gone, or of a
    /// workload no longer assessed). Call once per pass, after every [`assess`].
    pub fn sweep(&mut self) {
        let seen = std::mem::take(&mut self.seen);
        self.starting.retain(|key, _| seen.contains(key));
    }

    /// Copies watched.
    pub fn len(&self) -> usize {
        self.starting.len()
    }

    /// Nothing watched.
    pub fn is_empty(&self) -> bool {
        self.starting.is_empty()
    }
}

/// Assesses the rollout of `input.version` over `replicas` (the indices this agent answers for)
/// from `copies`: (node, status) pairs of the workload from live nodes, this one included.
/// `watch` remembers since when each copy has been starting.
pub fn assess<'a>(
    input: RolloutInput<'_>,
    replicas: impl IntoIterator<Item = u32>,
    copies: impl IntoIterator<Item = (&'a str, &'a InstanceStatus)>,
    watch: &mut Watch,
) -> Assessment {
    let deadline_ms = input.spec.update.progress_deadline_ms;
    let replicas: BTreeSet<u32> = replicas.into_iter().collect();
    let mut serving = BTreeSet::new();
    let mut failed: BTreeMap<u32, FailedReplica> = BTreeMap::new();
    for (node, c) in copies {
        if c.spec_version != input.version || !replicas.contains(&c.replica.replica) {
            continue;
        }
        if c.serves() && c.failures < CRASH_LOOP_FAILURES {
            serving.insert(c.replica.replica);
            continue;
        }
        let detail = c.last_error.as_deref().unwrap_or("no detail");
        let starting_for = match c.phase == Phase::Starting {
            true => watch.starting_for(node, c, input.now_ms),
            false => 0,
        };
        let why = if c.failures >= CRASH_LOOP_FAILURES {
            format!("crash loop, {} consecutive failures: {detail}", c.failures)
        } else if c.phase == Phase::Starting && starting_for >= deadline_ms {
            format!(
                "not healthy {} s after its start (progress_deadline): {detail}",
                starting_for / 1000
            )
        } else {
            continue;
        };
        failed
            .entry(c.replica.replica)
            .or_insert_with(|| FailedReplica {
                replica: c.replica.replica,
                node: node.to_string(),
                why: truncate(&why, REASON_BYTES_MAX),
            });
    }
    // A replica that serves at the new version somewhere is not failed, whatever else it runs.
    failed.retain(|r, _| !serving.contains(r));
    let desired = replicas.len() as u32;
    let updated = serving.len() as u32;
    let failed_count = failed.len() as u32;
    let phase = if input.paused {
        RolloutPhase::Paused
    } else if failed_count > input.spec.update.failure_threshold {
        RolloutPhase::Failed
    } else if updated == desired {
        RolloutPhase::Complete
    } else {
        RolloutPhase::InProgress
    };
    Assessment {
        version: input.version.to_string(),
        phase,
        desired,
        updated,
        failed_count,
        failed: failed.into_values().take(FAILED_LISTED_MAX).collect(),
    }
}

/// What the store says around the current version, for [`decide`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Known<'a> {
    /// The rollout's record, if one was written (for any version).
    pub record: Option<&'a Record>,
    /// The current version was written by an automatic rollback (the history's newest past
    /// version is recorded rolled back).
    pub current_is_rollback: bool,
    /// The newest past version whose rollout completed, if the history holds one.
    pub last_complete: Option<&'a str>,
}

/// What the writer is to do about a rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing (in progress, paused, or already recorded).
    Nothing,
    /// Write the record: the rollout completed, or failed for good (with why).
    Record(Record),
    /// Write the content of past version `to` again, as the version just above the failed one.
    RollBack {
        /// The failed version.
        from: String,
        /// The past version whose content comes back.
        to: String,
        /// Why.
        reason: String,
    },
}

/// Decides what to do about `assessment` given what the store knows and whether the spec allows
/// automatic rollback.
pub fn decide(assessment: &Assessment, auto_rollback: bool, known: Known<'_>) -> Decision {
    let recorded = known
        .record
        .filter(|r| r.version == assessment.version)
        .map(|r| r.outcome);
    if recorded.is_some() {
        // Recorded complete: never rolled back automatically. Recorded failed: for an operator.
        return Decision::Nothing;
    }
    match assessment.phase {
        RolloutPhase::InProgress | RolloutPhase::Paused => Decision::Nothing,
        RolloutPhase::Complete => Decision::Record(Record {
            version: assessment.version.clone(),
            outcome: Outcome::Complete,
            reason: String::new(),
        }),
        RolloutPhase::Failed => {
            let reason = assessment.reason();
            let stays = |why: &str| {
                Decision::Record(Record {
                    version: assessment.version.clone(),
                    outcome: Outcome::Failed,
                    reason: truncate(&format!("{reason}; {why}"), REASON_BYTES_MAX),
                })
            };
            if !auto_rollback {
                return stays("auto_rollback is off: roll back with `shoal rollout undo`");
            }
            if known.current_is_rollback {
                return stays(
                    "it is itself an automatic rollback, which is never rolled back again",
                );
            }
            match known.last_complete {
                Some(to) => Decision::RollBack {
                    from: assessment.version.clone(),
                    to: to.to_string(),
                    reason,
                },
                None => stays("no earlier version completed its rollout to go back to"),
            }
        }
    }
}

/// How long after this agent first saw a decision it acts on it: `Some(0)` for the lowest-named
/// live member, [`WRITER_STEP_MS`] more for each member before it, `None` past [`WRITERS_MAX`]
/// (or when this node is not live in its own view).
pub fn writer_delay_ms<'a>(me: &str, live: impl IntoIterator<Item = &'a str>) -> Option<u64> {
    let mut live: Vec<&str> = live.into_iter().collect();
    live.sort_unstable();
    live.dedup();
    let rank = live.iter().position(|n| *n == me)?;
    (rank < WRITERS_MAX).then_some(rank as u64 * WRITER_STEP_MS)
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::ReplicaId;

    fn spec(replicas: u32, failure_threshold: u32) -> WorkloadSpec {
        let text = format!(
            "name = \"web\"\nreplicas = {replicas}\n[process]\ncommand = [\"web\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\
             [update]\nprogress_deadline = \"30s\"\nfailure_threshold = {failure_threshold}\n"
        );
        WorkloadSpec::from_toml_str(&text, "web.toml").unwrap()
    }

    fn copy(replica: u32, version: &str, phase: Phase, healthy: bool) -> InstanceStatus {
        InstanceStatus {
            replica: ReplicaId::new("web", replica),
            handle: Some(format!("h{replica}")),
            phase,
            healthy,
            restarts: 0,
            spec_version: version.into(),
            since_ms: 100_000,
            exit_code: None,
            last_error: Some("exited with code 1".into()),
            fence_token: None,
            failures: 0,
            ports: Default::default(),
            pull: None,
            waits_for_data: false,
        }
    }

    fn run(spec: &WorkloadSpec, now_ms: u64, copies: &[InstanceStatus]) -> Assessment {
        watched(spec, now_ms, copies, &mut Watch::default())
    }

    fn watched(
        spec: &WorkloadSpec,
        now_ms: u64,
        copies: &[InstanceStatus],
        watch: &mut Watch,
    ) -> Assessment {
        let input = RolloutInput {
            spec,
            version: "v2",
            paused: false,
            now_ms,
        };
        let a = assess(
            input,
            0..spec.replicas,
            copies.iter().map(|c| ("n1", c)),
            watch,
        );
        watch.sweep();
        a
    }

    #[test]
    fn phases_follow_the_copies() {
        let s = spec(3, 0);
        let healthy = |r| copy(r, "v2", Phase::Running, true);
        let old = |r| copy(r, "v1", Phase::Running, true);
        let a = run(&s, 100_000, &[healthy(0), old(1), old(2)]);
        assert_eq!(
            (a.phase, a.updated, a.failed_count),
            (RolloutPhase::InProgress, 1, 0)
        );
        let a = run(&s, 100_000, &[healthy(0), healthy(1), healthy(2)]);
        assert_eq!(a.phase, RolloutPhase::Complete);
        // A crash loop at the new version fails it; the same failures at the old one do not.
        let mut looping = copy(1, "v2", Phase::Exited, false);
        looping.failures = CRASH_LOOP_FAILURES;
        let a = run(&s, 100_000, &[healthy(0), looping.clone(), old(2)]);
        assert_eq!(a.phase, RolloutPhase::Failed);
        assert_eq!(a.failed[0].replica, 1);
        assert!(a.reason().contains("crash loop"), "{}", a.reason());
        looping.spec_version = "v1".into();
        let a = run(&s, 100_000, &[healthy(0), looping, old(2)]);
        assert_eq!(a.phase, RolloutPhase::InProgress);
        // Two failures are not yet a loop; a copy briefly up between exits is not serving.
        let mut flapping = copy(1, "v2", Phase::Running, true);
        flapping.failures = CRASH_LOOP_FAILURES - 1;
        assert_eq!(run(&s, 100_000, &[flapping.clone()]).failed_count, 0);
        flapping.failures = CRASH_LOOP_FAILURES;
        assert_eq!(run(&s, 100_000, &[flapping]).failed_count, 1);
    }

    #[test]
    fn the_deadline_counts_from_when_this_agent_first_saw_the_copy_starting() {
        let s = spec(2, 0);
        let mut starting = copy(0, "v2", Phase::Starting, false);
        // The peer's own clock (since_ms) means nothing here: only this agent's watch counts.
        starting.since_ms = 0;
        let one = std::slice::from_ref(&starting);
        let mut watch = Watch::default();
        assert_eq!(watched(&s, 5_000, one, &mut watch).failed_count, 0);
        assert_eq!(watched(&s, 5_000 + 29_999, one, &mut watch).failed_count, 0);
        let a = watched(&s, 5_000 + 30_000, one, &mut watch);
        assert_eq!(a.phase, RolloutPhase::Failed);
        assert!(a.reason().contains("progress_deadline"), "{}", a.reason());
        // Once healthy, it is forgotten: starting again later counts from then.
        let healthy = copy(0, "v2", Phase::Running, true);
        watched(&s, 40_000, std::slice::from_ref(&healthy), &mut watch);
        assert!(watch.is_empty());
        assert_eq!(watched(&s, 50_000, one, &mut watch).failed_count, 0);
        assert_eq!(watch.len(), 1);
        // Waiting for room or a turn (pending) is not the version's fault.
        let pending = copy(0, "v2", Phase::Pending, false);
        assert_eq!(run(&s, 10_000_000, &[pending]).failed_count, 0);
    }

    #[test]
    fn the_threshold_and_pause_and_other_replicas() {
        let s = spec(4, 1);
        let mut a = copy(0, "v2", Phase::Exited, false);
        a.failures = 5;
        let mut b = a.clone();
        b.replica.replica = 1;
        assert_eq!(run(&s, 0, &[a.clone()]).phase, RolloutPhase::InProgress);
        assert_eq!(
            run(&s, 0, &[a.clone(), b.clone()]).phase,
            RolloutPhase::Failed
        );
        // The same replica failing on two nodes counts once; a replica not assessed not at all.
        let mut c = a.clone();
        c.handle = Some("other".into());
        assert_eq!(run(&s, 0, &[a.clone(), c]).failed_count, 1);
        let mut outside = a.clone();
        outside.replica.replica = 9;
        assert_eq!(run(&s, 0, &[outside]).failed_count, 0);
        let paused = RolloutInput {
            spec: &s,
            version: "v2",
            paused: true,
            now_ms: 0,
        };
        let copies = [a, b];
        let watch = &mut Watch::default();
        let got = assess(paused, 0..4, copies.iter().map(|c| ("n1", c)), watch);
        assert_eq!(got.phase, RolloutPhase::Paused);
        assert_eq!(got.failed_count, 2);
    }

    #[test]
    fn decisions() {
        let s = spec(2, 0);
        let mut looping = copy(0, "v2", Phase::Exited, false);
        looping.failures = 4;
        let failed = run(&s, 0, &[looping]);
        let complete = run(
            &s,
            0,
            &[
                copy(0, "v2", Phase::Running, true),
                copy(1, "v2", Phase::Running, true),
            ],
        );
        let back = Known {
            last_complete: Some("v1"),
            ..Known::default()
        };
        assert_eq!(
            decide(&failed, true, back),
            Decision::RollBack {
                from: "v2".into(),
                to: "v1".into(),
                reason: failed.reason()
            }
        );
        let stays = |d: Decision, why: &str| match d {
            Decision::Record(r) => {
                assert_eq!(r.outcome, Outcome::Failed);
                assert!(r.reason.contains(why), "{}", r.reason);
            }
            other => panic!("{other:?}"),
        };
        stays(decide(&failed, false, back), "auto_rollback is off");
        let again = Known {
            current_is_rollback: true,
            ..back
        };
        stays(decide(&failed, true, again), "never rolled back again");
        stays(
            decide(&failed, true, Known::default()),
            "no earlier version",
        );
        let Decision::Record(done) = decide(&complete, true, back) else {
            panic!("a complete rollout is recorded");
        };
        assert_eq!(done.outcome, Outcome::Complete);
        // Once recorded (complete or failed), nothing more: a recorded version never rolls back.
        let known = Known {
            record: Some(&done),
            ..back
        };
        assert_eq!(decide(&complete, true, known), Decision::Nothing);
        let recorded_v2 = Record {
            version: "v2".into(),
            ..done.clone()
        };
        let known = Known {
            record: Some(&recorded_v2),
            ..back
        };
        assert_eq!(decide(&failed, true, known), Decision::Nothing);
    }

    #[test]
    fn writers_in_name_order() {
        let live = ["n3", "n1", "n2", "n4"];
        assert_eq!(writer_delay_ms("n1", live), Some(0));
        assert_eq!(writer_delay_ms("n3", live), Some(2 * WRITER_STEP_MS));
        assert_eq!(writer_delay_ms("n4", live), None);
        assert_eq!(writer_delay_ms("n9", live), None);
    }
}
