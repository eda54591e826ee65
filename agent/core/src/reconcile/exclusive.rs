//! The safety rule for exclusive replicas: never two copies.
//!
//! A new owner starts an exclusive replica only when all of these hold:
//! 1. no live peer reports a copy that may be alive (starting, running, stopping);
//! 2. no live peer with a lower node name claims it too (see claims below);
//! 3. this node sees a strict majority of the last known membership, and a strict majority
//!    confirmed within `heard_window_ms` that they hold it live (two ways: see below);
//! 4. every live peer has published its observed state;
//! 5. every known member that is not live has been confirmed dead for longer than
//!    `fencing_delay_ms`, counted from when it last stopped being live (a member that came back
//!    and went silent again gets the whole delay again) and only from when this node (re)gained
//!    its majority: a verdict reached while this node was itself cut off says nothing about the
//!    peer; and from the last advance of its exclusive lease that gossip carried here
//!    (`Membership::leased_at`), if that is later;
//! 6. its own claim has been published for `exclusive_claim_ms`, counted from when this node last
//!    (re)gained a two-way majority if that is later: a claim published while it could not be
//!    heard reached nobody.
//!
//! In a mesh of several cells, also: 7. no other cell reports a copy that may be alive or claims
//! it with a name that sorts first, and every cell up in this agent's table answered that
//! lately (`ReconcileInput::cell_copies`); 3 includes the cell's quorum of cells
//! (`Membership::cells`); and the claim of (6) lasts `cell_claim_ms`, so that a copy in a cell
//! held down has fenced itself first (docs/reconcile.md, "Exclusive replicas across cells").
//!
//! (1), (2), (5) and (6) resolve by themselves and are waited for. (3), (4) and a member that is
//! unreachable but not confirmed dead are what the mesh cannot decide: after
//! `exclusive_undecided_max_ms` they become an issue held for `shoal approve`, and an approval
//! lifts them (never 1, 2, 5 or 6). Rule 5 ignores what a non-live member last published: it may
//! have started the replica after the last state that reached this node.
//!
//! Why (5) is safe: a member keeps an exclusive replica only while it has a two-way majority:
//! it sees a strict majority, and a strict majority confirmed in a round trip begun at most
//! `heard_window_ms` ago that they hold it live. It stops them once it has lacked that for
//! `self_fence_ms`, with a stop grace of `fence_stop_grace_ms`, and never starts one without it.
//! While this node sees a majority that holds a member dead, the member cannot be heard by a
//! majority (two majorities share a node, which holds it dead and would have said so, or holds
//! it live and whose gossip would carry its heartbeat here), whichever direction its packets
//! are lost in. So it is fenced within `heard_window_ms + self_fence_ms + fence_stop_grace_ms <
//! fencing_delay_ms` of the last confirmation; the surplus covers the failure detectors not
//! agreeing to the millisecond. Gossip carries liveness two ways: heartbeats (until compact
//! gossip, every member's every round) and the exclusive lease, which a member advances every
//! second while a copy of one may be alive on it. The lease is what holds with compact
//! gossip, where this node judges a member by its own probes alone: two halves of a mesh joined
//! only through one member both see a majority, each holds the other half dead, and only the
//! lease relayed by the member between them tells that the far half still runs its replicas.
//!
//! Claims: a node publishes a `pending` entry for every replica placed on it without an alive
//! instance. Two nodes that both believe they own the replica (placement views differ for a
//! moment) see each other's claim before either may start, and only the lower name proceeds.

use super::config::ReconcileConfig;
use super::input::ReconcileInput;
use super::view::{MeshTimers, PeerIndex};
use crate::instance::{Phase, ReplicaId};

/// Whether an exclusive replica may start here now (rules 1 to 5; the claim delay is the
/// caller's).
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
    let live_copies = peers.of(replica).iter().filter(|c| m.live.contains(c.node));
    for c in live_copies {
        let s = c.status;
        if s.may_be_alive() {
            let reason = format!(
                "a copy on {} is {}; waiting for it to stop",
                c.node, s.phase
            );
            return Guard::Wait {
                reason,
                until_ms: None,
            };
        }
        if c.node < node && s.handle.is_none() && s.phase == Phase::Pending {
            let reason = format!(
                "{} also claims it (placement views differ); the lower node name goes first",
                c.node
            );
            return Guard::Wait {
                reason,
                until_ms: None,
            };
        }
    }
    if let Some(guard) = across_cells(replica, input) {
        return guard;
    }
    let majority = m.has_majority(node);
    let mut uncertain = Vec::new();
    if !majority {
        let (live, known) = (m.live_count(node), m.members_known);
        uncertain.push(format!(
            "sees {live} of {known} known members, no strict majority"
        ));
    } else if let Some(why) = m.cells.as_ref().and_then(|c| c.why_not()) {
        uncertain.push(why);
    } else if !m.heard_by_majority(node, now_ms, config.heard_window_ms) {
        let known = m.members_known.max(m.live_count(node));
        uncertain.push(format!(
            "no strict majority of the {known} known members confirmed in the last {} ms that \
             they hear this node (a one-way partition looks like this)",
            config.heard_window_ms
        ));
    }
    let silent = m
        .live
        .iter()
        .filter(|n| n.as_str() != node && !input.peers.contains_key(*n));
    for peer in silent {
        uncertain.push(format!(
            "live peer {peer} has published no observed state yet"
        ));
    }
    let mut wait: Option<(String, u64)> = None;
    for n in not_live(node, input) {
        let reported = peers
            .of(replica)
            .iter()
            .any(|c| c.node == n && c.status.may_be_alive());
        let what = if reported {
            " (it last reported a copy)"
        } else {
            ""
        };
        match timers.dead_since.get(n) {
            Some(&dead_ms) if majority => {
                // Its lease advanced after its death here: a member that hears it relayed that
                // it still ran exclusive replicas, so the fencing delay counts from then.
                let leased = m.leased_at.get(n).copied().filter(|&at| at > dead_ms);
                let until = timers.fenced_at(leased.unwrap_or(dead_ms), config, now_ms);
                if now_ms < until && wait.as_ref().is_none_or(|(_, u)| until > *u) {
                    let why = match leased {
                        Some(at) => format!(
                            "{n} is dead here{what} but gossip relayed its exclusive lease at \
                             {at}; fencing delay until {until}"
                        ),
                        None => {
                            format!("{n} was confirmed dead{what}; fencing delay until {until}")
                        }
                    };
                    wait = Some((why, until));
                }
            }
            Some(_) => {} // Dead, but without a majority the verdict is not trusted (above).
            None => uncertain.push(format!("{n} is unreachable but not confirmed dead{what}")),
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

/// The rule across cells (a mesh of several cells only): no other cell reports a copy that may
/// be alive or claims the replica with a name that sorts first, and every cell that is up has
/// answered lately. `None`: nothing to wait for (or a mesh of one cell).
fn across_cells(replica: &ReplicaId, input: &ReconcileInput) -> Option<Guard> {
    input.membership.cells.as_ref()?;
    let wait = |reason: String| {
        Some(Guard::Wait {
            reason,
            until_ms: None,
        })
    };
    let Some(copies) = input.cell_copies.get(replica) else {
        return wait("the other cells have not been asked whether they run a copy yet".to_string());
    };
    if let Some(cell) = copies.alive_in.first() {
        return wait(format!(
            "cell {cell} reports a copy that may be alive; waiting for it to stop"
        ));
    }
    if let Some(cell) = copies.claimed_by.first() {
        return wait(format!(
            "cell {cell} also claims it (the cells' views differ); the lower cell name goes first"
        ));
    }
    if !copies.unanswered.is_empty() {
        return wait(format!(
            "cells {} have not said lately whether they run a copy",
            copies.unanswered.join(", ")
        ));
    }
    None
}

/// Known members other than `node` that are not live: dead, unreachable, or peers with published
/// state in neither set. Sorted, each once.
fn not_live<'a>(node: &str, input: &'a ReconcileInput) -> Vec<&'a str> {
    let m = &input.membership;
    let mut out: Vec<&str> = m
        .dead
        .iter()
        .chain(&m.unreachable)
        .chain(input.peers.keys())
        .map(String::as_str)
        .filter(|n| *n != node && !m.live.contains(*n))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::instance::Phase;
    use crate::reconcile::input::Membership;
    use crate::reconcile::status::InstanceStatus;

    fn status(phase: Phase) -> InstanceStatus {
        InstanceStatus::new(ReplicaId::new("db", 0), Some("h".into()), phase, "v1")
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
                unreachable: BTreeSet::new(),
                members_known: known,
                heard_at: BTreeMap::new(),
                leased_at: BTreeMap::new(),
                cells: None,
            },
            ..ReconcileInput::default()
        }
    }

    /// `input` with every live peer confirming at `now` that it hears n1.
    fn heard(input: &ReconcileInput, now: u64) -> ReconcileInput {
        let mut input = input.clone();
        let live: Vec<String> = input.membership.live.iter().cloned().collect();
        input.membership.heard_at = live.into_iter().map(|n| (n, now)).collect();
        input
    }

    fn observe(timers: &mut MeshTimers, input: &ReconcileInput, now: u64) {
        timers.observe("n1", &heard(input, now), &ReconcileConfig::default(), now);
    }

    fn guard(input: &ReconcileInput, timers: &MeshTimers, now: u64) -> Guard {
        guard_unheard(&heard(input, now), timers, now)
    }

    fn guard_unheard(input: &ReconcileInput, timers: &MeshTimers, now: u64) -> Guard {
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
        observe(&mut timers, &dead, 1_000);
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
    fn any_dead_member_is_fenced_whatever_it_last_published() {
        let dead = input(&["n1", "n3"], &["n2"], 3, "n3", Phase::Exited);
        let mut timers = MeshTimers::default();
        observe(&mut timers, &dead, 1_000);
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
    fn a_dead_member_whose_lease_gossip_relays_is_fenced_from_its_last_lease() {
        // n2 is dead here, but a member that still hears it relays its exclusive lease: it may
        // keep its copy, so the fencing delay counts from the last lease seen, not the death.
        let mut dead = input(&["n1", "n3"], &["n2"], 3, "n2", Phase::Running);
        let mut timers = MeshTimers::default();
        observe(&mut timers, &dead, 1_000);
        for lease in [500, 8_000, 15_000] {
            dead.membership.leased_at.insert("n2".into(), lease);
            let until = 1_000.max(lease) + 20_000;
            let Guard::Wait {
                reason,
                until_ms: Some(at),
            } = guard(&dead, &timers, 20_999)
            else {
                panic!("lease at {lease}: the start must wait");
            };
            assert_eq!(at, until, "lease at {lease}: {reason}");
            assert_eq!(reason.contains("relayed"), lease > 1_000, "{reason}");
            assert_eq!(guard(&dead, &timers, until), Guard::Clear, "lease {lease}");
        }
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
        observe(&mut timers, &minority, 0);
        assert!(matches!(
            guard(&minority, &timers, 100_000),
            Guard::Uncertain { .. }
        ));
    }

    #[test]
    fn seeing_a_majority_without_being_heard_is_uncertain() {
        // A one-way partition: n1 sees everyone live, nobody confirms hearing it.
        let all_live = input(&["n1", "n2", "n3"], &[], 3, "n2", Phase::Exited);
        let Guard::Uncertain { reasons } = guard_unheard(&all_live, &MeshTimers::default(), 5_000)
        else {
            panic!("an unheard node must not start an exclusive replica");
        };
        assert!(reasons[0].contains("hear this node"), "{reasons:?}");
        // Confirmations older than the window do not count either.
        let mut stale = heard(&all_live, 1_000);
        stale.membership.heard_at.remove("n1");
        assert!(matches!(
            guard_unheard(&stale, &MeshTimers::default(), 5_000),
            Guard::Uncertain { .. }
        ));
        assert_eq!(
            guard(&all_live, &MeshTimers::default(), 5_000),
            Guard::Clear
        );
    }
}
