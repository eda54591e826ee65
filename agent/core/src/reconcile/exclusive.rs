//! The safety rule for exclusive replicas: never two copies.
//!
//! A new owner starts an exclusive replica only when (1) no live peer reports a copy that may be
//! alive, (2) it sees a strict majority of the last known membership, (3) every live peer has
//! published its observed state, and (4) every copy last reported by a peer that is no longer live
//! belongs to a peer confirmed dead at least `fencing_delay_ms` ago. (1) and (4) resolve by
//! themselves and are waited for; (2), (3) and a copy on a peer that is unreachable but not
//! confirmed dead are what the mesh cannot decide, and become a held issue after
//! `exclusive_undecided_max_ms`. Approval lifts (2), (3) and the unreachable copy, never (1) or
//! the fencing delay.
//!
//! Why the delay is safe: an owner cut off from the majority stops its exclusive replicas once it
//! has lacked a majority for `self_fence_ms`, with a stop grace of `fence_stop_grace_ms`. The new
//! owner waits `fencing_delay_ms > self_fence_ms + fence_stop_grace_ms` after its own failure
//! detector confirmed the old owner dead; the surplus covers the two detectors' disagreement.

use super::config::ReconcileConfig;
use super::input::ReconcileInput;
use super::view::{MeshTimers, PeerIndex};
use crate::instance::ReplicaId;

/// Whether an exclusive replica may start here now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Guard {
    /// No copy can be alive elsewhere: start.
    Clear,
    /// Wait for something that resolves by itself (a copy stopping, the fencing delay).
    Wait {
        /// What it waits for.
        reason: String,
        /// When to look again, if known.
        until_ms: Option<u64>,
    },
    /// The mesh cannot decide safely; an operator may approve after the bound.
    Uncertain {
        /// Every reason, in a stable order.
        reasons: Vec<String>,
    },
}

/// Evaluates the start rule for `replica` on `node`.
pub(crate) fn start_guard(
    node: &str,
    replica: &ReplicaId,
    input: &ReconcileInput,
    peers: &PeerIndex<'_>,
    timers: &MeshTimers,
    config: &ReconcileConfig,
    now_ms: u64,
) -> Guard {
    let m = &input.membership;
    let copies: Vec<_> = peers
        .of(replica)
        .iter()
        .filter(|c| c.status.may_be_alive())
        .collect();
    if let Some(c) = copies.iter().find(|c| m.live.contains(c.node)) {
        return Guard::Wait {
            reason: format!(
                "a copy on {} is {}; waiting for it to stop",
                c.node, c.status.phase
            ),
            until_ms: None,
        };
    }
    let majority = m.has_majority(node);
    let mut uncertain = Vec::new();
    if !majority {
        uncertain.push(format!(
            "sees {} of {} known members, no strict majority",
            m.live_count(node),
            m.members_known
        ));
    }
    for peer in m
        .live
        .iter()
        .filter(|n| n.as_str() != node && !input.peers.contains_key(*n))
    {
        uncertain.push(format!(
            "live peer {peer} has published no observed state yet"
        ));
    }
    let mut wait: Option<(String, u64)> = None;
    for c in &copies {
        match timers.dead_since.get(c.node) {
            Some(&dead_ms) if majority => {
                let until = dead_ms.saturating_add(config.fencing_delay_ms);
                if now_ms < until && wait.as_ref().is_none_or(|(_, u)| until > *u) {
                    wait = Some((
                        format!(
                            "{} last reported a copy and was confirmed dead at {dead_ms}; fencing delay until {until}",
                            c.node
                        ),
                        until,
                    ));
                }
            }
            Some(_) => {} // dead but no majority: already uncertain.
            None => uncertain.push(format!(
                "{} last reported a copy ({}) and is unreachable but not confirmed dead",
                c.node, c.status.phase
            )),
        }
    }
    if let Some((reason, until)) = wait {
        return Guard::Wait {
            reason,
            until_ms: Some(until),
        };
    }
    if uncertain.is_empty() {
        Guard::Clear
    } else {
        Guard::Uncertain { reasons: uncertain }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::instance::Phase;
    use crate::reconcile::input::Membership;
    use crate::reconcile::status::InstanceStatus;

    fn status(phase: Phase) -> InstanceStatus {
        InstanceStatus {
            replica: ReplicaId::new("db", 0),
            handle: Some("h".into()),
            phase,
            healthy: phase == Phase::Running,
            restarts: 0,
            spec_version: "v1".into(),
            since_ms: 0,
            exit_code: None,
            last_error: None,
        }
    }

    fn input(
        live: &[&str],
        dead: &[&str],
        known: usize,
        copy_on: &str,
        phase: Phase,
    ) -> ReconcileInput {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let mut peers = BTreeMap::new();
        for n in live.iter().chain(dead) {
            peers.insert(n.to_string(), Vec::new());
        }
        peers.insert(copy_on.to_string(), vec![status(phase)]);
        ReconcileInput {
            peers,
            membership: Membership {
                live: set(live),
                dead: set(dead),
                members_known: known,
            },
            ..ReconcileInput::default()
        }
    }

    fn guard(input: &ReconcileInput, timers: &MeshTimers, now: u64) -> Guard {
        let workloads = BTreeSet::from(["db".to_string()]);
        let peers = PeerIndex::build("n1", input, &workloads);
        let config = ReconcileConfig::default();
        start_guard(
            "n1",
            &ReplicaId::new("db", 0),
            input,
            &peers,
            timers,
            &config,
            now,
        )
    }

    #[test]
    fn live_copy_waits_dead_copy_waits_for_fencing_then_clears() {
        let live = input(&["n1", "n2", "n3"], &[], 3, "n2", Phase::Running);
        assert!(matches!(
            guard(&live, &MeshTimers::default(), 0),
            Guard::Wait { until_ms: None, .. }
        ));
        let exited = input(&["n1", "n2", "n3"], &[], 3, "n2", Phase::Exited);
        assert_eq!(guard(&exited, &MeshTimers::default(), 0), Guard::Clear);

        let dead = input(&["n1", "n3"], &["n2"], 3, "n2", Phase::Running);
        let mut timers = MeshTimers::default();
        timers.observe("n1", &dead, 1_000);
        assert!(matches!(
            guard(&dead, &timers, 1_000),
            Guard::Wait {
                until_ms: Some(21_000),
                ..
            }
        ));
        assert_eq!(guard(&dead, &timers, 21_000), Guard::Clear);
    }

    #[test]
    fn unreachable_or_minority_is_uncertain() {
        let unreachable = input(&["n1", "n3"], &[], 3, "n2", Phase::Running);
        assert!(matches!(
            guard(&unreachable, &MeshTimers::default(), 0),
            Guard::Uncertain { .. }
        ));
        let minority = input(&["n1"], &["n2"], 3, "n2", Phase::Running);
        let mut timers = MeshTimers::default();
        timers.observe("n1", &minority, 0);
        assert!(matches!(
            guard(&minority, &timers, 100_000),
            Guard::Uncertain { .. }
        ));
    }
}
