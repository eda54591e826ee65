//! Rollouts of `update` events, timed from the ground truth: from the update's send to every
//! replica running healthy at the new revision (complete) or, after an automatic rollback, at
//! the revision the mesh restored (rolled back). Revisions are what the runtimes recorded of the
//! spec each instance was started from, never what the agents say.

use serde::Serialize;
use shoal_core::instance::{Phase, ReplicaId};

use super::{Checker, Copies};
use crate::scenario::RolloutOutcome;

/// The state a rollout ends in must hold this long before it counts (a crash-looping revision
/// can run everywhere for a moment).
pub const ROLLOUT_HOLD_MS: u64 = 2_000;

/// An update sent: the rollout to time.
#[derive(Clone, Debug)]
pub struct RolloutStart {
    /// The workload.
    pub workload: String,
    /// The event that sent it, as failure lines name it.
    pub event: String,
    /// The revision it replaces.
    pub from_revision: u64,
    /// Its new revision.
    pub revision: u64,
    /// How it must end, if the scenario says.
    pub expect: Option<RolloutOutcome>,
}

/// One update's rollout, as the report lists it.
#[derive(Clone, Debug, Serialize)]
pub struct Rollout {
    /// The workload.
    pub workload: String,
    /// The event that sent it.
    pub event: String,
    /// The revision it replaced.
    pub from_revision: u64,
    /// Its new revision.
    pub revision: u64,
    /// When the simulator sent it (sim ms).
    pub sent_ms: u64,
    /// How it ended (`unfinished` while it runs).
    pub outcome: RolloutOutcome,
    /// The revision an automatic rollback restored, if one was seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back_to: Option<u64>,
    /// From the send to complete or rolled back (every replica healthy at the revision, held
    /// [`ROLLOUT_HOLD_MS`]; timed to the start of the hold).
    pub rollout_ms: Option<u64>,
    /// How the scenario said it must end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect: Option<RolloutOutcome>,
    /// Since when every replica runs healthy at the target revision (sim ms).
    #[serde(skip)]
    streak_ms: Option<u64>,
    /// Still watched: not ended, or complete (an automatic rollback may still come).
    #[serde(skip)]
    open: bool,
}

impl Rollout {
    /// The revision every replica must reach: the new one, or the one a rollback restored.
    fn target(&self) -> u64 {
        self.rolled_back_to.unwrap_or(self.revision)
    }

    /// What went wrong with it, for the scenario's `expect`.
    pub fn unexpected(&self) -> Option<String> {
        let expect = self.expect?;
        if expect == self.outcome {
            return None;
        }
        let was = match (self.outcome, self.rolled_back_to) {
            (RolloutOutcome::Unfinished, Some(to)) => {
                format!("rolled back to revision {to}, which never ran everywhere")
            }
            (outcome, _) => outcome.as_str().to_string(),
        };
        Some(format!(
            "{}: the rollout of {} revision {} was expected {}, was {was}",
            self.event,
            self.workload,
            self.revision,
            expect.as_str()
        ))
    }
}

impl Checker {
    /// An update was sent at `now`: earlier rollouts of the workload still running are
    /// superseded.
    pub fn rollout_started(&mut self, now: u64, start: RolloutStart) {
        self.rollouts_superseded(now, &start.workload);
        self.rollouts.push(Rollout {
            workload: start.workload,
            event: start.event,
            from_revision: start.from_revision,
            revision: start.revision,
            sent_ms: now,
            outcome: RolloutOutcome::Unfinished,
            rolled_back_to: None,
            rollout_ms: None,
            expect: start.expect,
            streak_ms: None,
            open: true,
        });
    }

    /// Another update or a delete of `workload` was sent: its rollouts still running end
    /// superseded (a complete one stays complete).
    pub fn rollouts_superseded(&mut self, _now: u64, workload: &str) {
        for r in self.rollouts.iter_mut().filter(|r| r.workload == workload) {
            if r.open && r.outcome == RolloutOutcome::Unfinished {
                r.outcome = RolloutOutcome::Superseded;
            }
            r.open = false;
        }
    }

    /// The mesh restored `to` in place of `from` (an automatic rollback): the rollout of `from`
    /// now ends when every replica runs at `to`, even if it looked complete before.
    pub(super) fn rollout_rolled_back(&mut self, workload: &str, from: u64, to: u64) {
        let rollout = self
            .rollouts
            .iter_mut()
            .rev()
            .find(|r| r.workload == workload);
        let Some(r) = rollout.filter(|r| r.revision == from && r.rolled_back_to.is_none()) else {
            return;
        };
        if r.outcome == RolloutOutcome::Superseded {
            return;
        }
        r.rolled_back_to = Some(to);
        r.outcome = RolloutOutcome::Unfinished;
        r.rollout_ms = None;
        r.streak_ms = None;
        r.open = true;
    }

    /// The timeline ended: rollouts not ended stay unfinished.
    pub fn end_rollouts(&mut self) {
        for r in &mut self.rollouts {
            r.open = false;
        }
    }

    /// One sample of every rollout still watched.
    pub(super) fn track_rollouts(&mut self, now: u64, copies: &Copies) {
        for i in 0..self.rollouts.len() {
            if !self.rollouts[i].open {
                continue;
            }
            let w = self.rollouts[i].workload.clone();
            let replicas = self
                .latest
                .get(&w)
                .and_then(|(v, s)| v.as_ref().and(s.as_ref()));
            let Some(replicas) = replicas.map(|s| s.replicas) else {
                continue;
            };
            let r = &mut self.rollouts[i];
            if !all_at(copies, &w, replicas, r.target()) {
                r.streak_ms = None;
                continue;
            }
            let since = *r.streak_ms.get_or_insert(now);
            if now - since < ROLLOUT_HOLD_MS || r.outcome != RolloutOutcome::Unfinished {
                continue;
            }
            r.rollout_ms = Some(since.saturating_sub(r.sent_ms));
            r.outcome = match r.rolled_back_to {
                Some(_) => RolloutOutcome::RolledBack,
                None => RolloutOutcome::Complete,
            };
            // A rolled-back rollout is over; a complete one is watched on, in case the mesh
            // rolls it back after all.
            r.open = r.rolled_back_to.is_none();
        }
    }
}

/// Every replica below `replicas` has a running copy at `revision`, and every alive copy of the
/// workload is at it.
fn all_at(copies: &Copies, workload: &str, replicas: u32, revision: u64) -> bool {
    let first = ReplicaId::new(workload, 0);
    let of_workload = copies
        .range(first..)
        .take_while(|(r, _)| r.workload == workload);
    let mut healthy = 0;
    for (r, list) in of_workload {
        if list.iter().any(|c| c.revision != revision) {
            return false;
        }
        let running = list.iter().any(|c| c.phase == Phase::Running);
        healthy += u32::from(r.replica < replicas && running);
    }
    healthy == replicas
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::truth::Copy;
    use shoal_core::spec::WorkloadSpec;

    fn spec(replicas: u32) -> WorkloadSpec {
        let text = format!(
            "name = \"web\"\nreplicas = {replicas}\n[process]\ncommand = [\"web\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
        );
        WorkloadSpec::from_toml_str(&text, "test.toml").unwrap()
    }

    /// Two replicas of web, at these revisions (running).
    fn copies(revisions: &[u64]) -> Copies {
        let copy = |revision| Copy {
            handle: String::new(),
            host: 0,
            phase: Phase::Running,
            ready_ms: 0,
            version: String::new(),
            revision,
            exclusive: false,
        };
        (revisions.iter().enumerate())
            .map(|(i, &r)| (ReplicaId::new("web", i as u32), vec![copy(r)]))
            .collect()
    }

    fn started(c: &mut Checker, now: u64, revision: u64, expect: RolloutOutcome) {
        let start = RolloutStart {
            workload: "web".into(),
            event: format!("update at {now}"),
            from_revision: revision - 1,
            revision,
            expect: Some(expect),
        };
        c.rollout_started(now, start);
    }

    #[test]
    fn a_rollout_completes_once_every_replica_held_the_new_revision() {
        let mut c = Checker::default();
        c.acknowledged(0, "web", Some("v1".into()), Some(spec(2)));
        started(&mut c, 1_000, 1, RolloutOutcome::Complete);
        c.track_rollouts(1_500, &copies(&[1, 0]));
        // Every replica at 1 from 2 s, but not for the hold yet at 3.9 s.
        for t in [2_000, 3_000, 3_900] {
            c.track_rollouts(t, &copies(&[1, 1]));
        }
        assert_eq!(c.rollouts[0].outcome, RolloutOutcome::Unfinished);
        c.track_rollouts(4_000, &copies(&[1, 1]));
        assert_eq!(c.rollouts[0].outcome, RolloutOutcome::Complete);
        assert_eq!(c.rollouts[0].rollout_ms, Some(1_000));
        assert_eq!(c.rollouts[0].unexpected(), None);
    }

    #[test]
    fn a_rollout_rolled_back_ends_at_the_restored_revision_and_only_then() {
        let mut c = Checker::default();
        c.acknowledged(0, "web", Some("v2".into()), Some(spec(2)));
        started(&mut c, 10_000, 2, RolloutOutcome::RolledBack);
        // The bad revision runs everywhere for a moment (a crash loop between two crashes).
        for t in [11_000, 12_000, 13_000] {
            c.track_rollouts(t, &copies(&[2, 2]));
        }
        assert_eq!(c.rollouts[0].outcome, RolloutOutcome::Complete);
        c.rollout_rolled_back("web", 2, 1);
        assert_eq!(c.rollouts[0].outcome, RolloutOutcome::Unfinished);
        let unexpected = c.rollouts[0].unexpected().unwrap();
        assert!(unexpected.contains("was rolled back to revision 1, which never ran"));
        c.track_rollouts(14_000, &copies(&[1, 2]));
        for t in [15_000, 16_000, 17_000] {
            c.track_rollouts(t, &copies(&[1, 1]));
        }
        assert_eq!(c.rollouts[0].outcome, RolloutOutcome::RolledBack);
        assert_eq!(c.rollouts[0].rollout_ms, Some(5_000));
        assert_eq!(c.rollouts[0].unexpected(), None);
    }

    #[test]
    fn a_rollout_not_rolled_back_fails_its_expectation() {
        let mut c = Checker::default();
        c.acknowledged(0, "web", Some("v2".into()), Some(spec(2)));
        started(&mut c, 10_000, 2, RolloutOutcome::RolledBack);
        c.track_rollouts(11_000, &copies(&[2, 1]));
        c.end_rollouts();
        let why = c.rollouts[0].unexpected().expect("a failure");
        assert_eq!(
            why,
            "update at 10000: the rollout of web revision 2 was expected rolled-back, was \
             unfinished"
        );
        // A second update supersedes a first one still running.
        let mut c = Checker::default();
        started(&mut c, 1_000, 1, RolloutOutcome::Complete);
        started(&mut c, 2_000, 2, RolloutOutcome::Complete);
        assert_eq!(c.rollouts[0].outcome, RolloutOutcome::Superseded);
        assert!(c.rollouts[0].unexpected().is_some());
    }
}
