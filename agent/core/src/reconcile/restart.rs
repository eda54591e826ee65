//! Planned restarts (`shoal agent --restart-grace`): how long this node holds off taking over
//! the exclusive replicas of a member that stopped to restart, what it acknowledges, and when
//! the member may keep its exclusive instances past the guard's usual lease.
//!
//! A member that stops for a planned restart with grace G announces it in gossip (one notice per
//! identity that stopped) and, once every member it holds live has acknowledged holding it and
//! they are with it a strict majority of the members known ([`extension`]), extends its guard's
//! lease to end G after it announced the restart; otherwise its lease stays the usual one.
//! This node *holds* the member from the first round that saw the notice, at `t`, until `t + G`
//! on its own clock: while held, an exclusive replica the member may run does not start here,
//! and once the hold ended, the fencing delay counts from its end at the earliest. `t` is after
//! the announcement and the lease ends G after it, so the hold ends no earlier than the lease
//! (clocks running at the same rate), and the fencing delay that follows covers the guard's poll,
//! the kill and the clocks' rates over G (docs/reconcile.md, "Planned restarts").
//!
//! A hold is never shortened: not by the member coming back (its new identity may die again
//! before the old lease ends), nor by a later notice. What a member announces is bounded by
//! [`RESTART_GRACE_MS_MAX`]; this node remembers at most [`RESTART_HOLDS_MAX`] notices and holds
//! none beyond them, so it never acknowledges a hold it does not keep.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Longest restart grace an agent may take and a peer honours (5 minutes): past it, an agent that
/// does not come back keeps its exclusive replicas down too long for an upgrade to be worth it.
pub const RESTART_GRACE_MS_MAX: u64 = 5 * 60 * 1000;
/// Most notices a node remembers (holds in force, and ended ones while they are still announced,
/// so they are not learned again). A notice beyond it is neither held nor acknowledged: its agent
/// then keeps the usual lease.
pub const RESTART_HOLDS_MAX: usize = 4096;
/// Most holds a node acknowledges at once in gossip (the newest first); a restart whose
/// acknowledgement is left out keeps the usual lease.
pub const RESTART_ACKS_MAX: usize = 64;

/// A planned restart announced by one identity of a member: it stopped, and its guard keeps its
/// exclusive instances for at most `grace_ms` from the announcement. Also what a node
/// acknowledges holding (with the grace it holds).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RestartNotice {
    /// The member's node name.
    pub node: String,
    /// The gossip generation of the identity that stopped.
    pub generation: u64,
    /// Its grace, in milliseconds.
    pub grace_ms: u64,
}

/// One notice as this node holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Hold {
    /// The grace held (the notice's, at most [`RESTART_GRACE_MS_MAX`]).
    grace_ms: u64,
    /// When this node first saw the notice (its own clock).
    seen_ms: u64,
    /// Whether the last input still carried the notice.
    announced: bool,
}

impl Hold {
    fn end_ms(&self) -> u64 {
        self.seen_ms.saturating_add(self.grace_ms)
    }
}

/// The planned restarts this node holds, by (node, generation).
#[derive(Clone, Debug, Default)]
pub(crate) struct RestartHolds {
    holds: BTreeMap<(String, u64), Hold>,
}

impl RestartHolds {
    /// Takes this tick's notices (`own`: this node's name; its own earlier identities' notices
    /// are not held). A notice seen for the first time is held from `now_ms`; one no longer
    /// announced is forgotten once its hold and the `fencing_delay_ms` after it have passed.
    pub fn observe(
        &mut self,
        own: &str,
        notices: &[RestartNotice],
        fencing_delay_ms: u64,
        now_ms: u64,
    ) {
        for hold in self.holds.values_mut() {
            hold.announced = false;
        }
        for n in notices.iter().filter(|n| n.node != own) {
            let key = (n.node.clone(), n.generation);
            if let Some(hold) = self.holds.get_mut(&key) {
                hold.announced = true;
                continue;
            }
            if self.holds.len() >= RESTART_HOLDS_MAX {
                continue;
            }
            let hold = Hold {
                grace_ms: n.grace_ms.min(RESTART_GRACE_MS_MAX),
                seen_ms: now_ms,
                announced: true,
            };
            self.holds.insert(key, hold);
        }
        self.holds
            .retain(|_, h| h.announced || now_ms < h.end_ms().saturating_add(fencing_delay_ms));
    }

    /// When the latest hold of `node` ends (it may have ended already: the fencing delay counts
    /// from then at the earliest), if this node holds or held one.
    pub fn end_of(&self, node: &str) -> Option<u64> {
        self.holds
            .range((node.to_string(), 0)..=(node.to_string(), u64::MAX))
            .map(|(_, h)| h.end_ms())
            .max()
    }

    /// The holds in force at `now_ms`, as acknowledged in gossip: the newest first, at most
    /// [`RESTART_ACKS_MAX`], then sorted.
    pub fn in_force(&self, now_ms: u64) -> Vec<RestartNotice> {
        let mut live: Vec<(&(String, u64), &Hold)> = self
            .holds
            .iter()
            .filter(|(_, h)| now_ms < h.end_ms())
            .collect();
        live.sort_by_key(|(_, h)| std::cmp::Reverse(h.seen_ms));
        live.truncate(RESTART_ACKS_MAX);
        let mut out: Vec<RestartNotice> = live
            .into_iter()
            .map(|((node, generation), h)| RestartNotice {
                node: node.clone(),
                generation: *generation,
                grace_ms: h.grace_ms,
            })
            .collect();
        out.sort();
        out
    }

    /// Asserts the bounds.
    pub fn check_invariants(&self) {
        assert!(
            self.holds.len() <= RESTART_HOLDS_MAX,
            "restart holds unbounded"
        );
        for h in self.holds.values() {
            assert!(
                h.grace_ms <= RESTART_GRACE_MS_MAX,
                "restart hold past the bound"
            );
        }
    }
}

/// Whether an agent stopping for a planned restart may extend its guard's lease to its grace:
/// `Ok` when every member it holds live (`live`, itself aside) acknowledged holding this restart
/// (`acked`: the members whose published holds name its stopping identity with at least the
/// grace), and the members that acknowledged, with itself, are a strict majority of
/// `members_known`. `Err` says what is missing; the agent then keeps the usual lease.
///
/// Why both: a member that holds the restart waits out the extended lease; one that does not
/// sees a crash and waits only the fencing delay, which the usual lease is within. So every
/// member that may take the replica over must hold it first. One the agent holds live
/// acknowledged. One it does not hold live (cut off, or gone) takes nothing over before it sees
/// a strict majority again, and then waits the fencing delay from that moment; that majority
/// (the agent not in it) shares a member with the acknowledging one, which holds the
/// announcement and gossips it on (chitchat spreads a stopped member's keys for as long as it
/// remembers the member), seconds into that delay.
pub fn extension(
    me: &str,
    live: &BTreeSet<String>,
    acked: &BTreeSet<String>,
    members_known: usize,
) -> Result<(), String> {
    let missing: Vec<&str> = live
        .iter()
        .map(String::as_str)
        .filter(|n| *n != me && !acked.contains(*n))
        .collect();
    if !missing.is_empty() {
        let shown = missing
            .iter()
            .take(8)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        let more = missing.len().saturating_sub(8);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        return Err(format!(
            "{} live member(s) did not acknowledge the restart: {shown}{more}",
            missing.len()
        ));
    }
    let with_me = acked.iter().filter(|n| n.as_str() != me).count() + 1;
    if 2 * with_me <= members_known {
        return Err(format!(
            "{with_me} of the {members_known} known members (this one included) hold the \
             restart, no strict majority"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(node: &str, generation: u64, grace_ms: u64) -> RestartNotice {
        RestartNotice {
            node: node.into(),
            generation,
            grace_ms,
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_hold_counts_from_when_it_was_first_seen_and_is_never_shortened() {
        let mut holds = RestartHolds::default();
        holds.observe("n1", &[notice("n2", 7, 30_000)], 20_000, 1_000);
        assert_eq!(holds.end_of("n2"), Some(31_000));
        // Seen again later: still from the first sight.
        holds.observe("n1", &[notice("n2", 7, 30_000)], 20_000, 5_000);
        assert_eq!(holds.end_of("n2"), Some(31_000));
        // A later restart of the same member (a new identity) ends later: the latest counts.
        let both = [notice("n2", 7, 30_000), notice("n2", 9, 30_000)];
        holds.observe("n1", &both, 20_000, 10_000);
        assert_eq!(holds.end_of("n2"), Some(40_000));
        // Gone from gossip: kept until its end and the fencing delay after it.
        holds.observe("n1", &[], 20_000, 59_999);
        assert_eq!(holds.end_of("n2"), Some(40_000));
        holds.observe("n1", &[], 20_000, 60_000);
        assert_eq!(holds.end_of("n2"), None);
    }

    #[test]
    fn a_grace_past_the_bound_is_held_to_the_bound_and_its_own_notices_not_at_all() {
        let mut holds = RestartHolds::default();
        let notices = [notice("n2", 1, u64::MAX), notice("n1", 1, 30_000)];
        holds.observe("n1", &notices, 20_000, 0);
        assert_eq!(holds.end_of("n2"), Some(RESTART_GRACE_MS_MAX));
        assert_eq!(holds.end_of("n1"), None);
        assert_eq!(
            holds.in_force(0),
            vec![notice("n2", 1, RESTART_GRACE_MS_MAX)]
        );
        holds.check_invariants();
    }

    #[test]
    fn acknowledgements_are_the_holds_in_force_newest_first_within_the_bound() {
        let mut holds = RestartHolds::default();
        holds.observe("me", &[notice("a", 1, 10_000)], 20_000, 0);
        assert_eq!(holds.in_force(9_999), vec![notice("a", 1, 10_000)]);
        assert!(holds.in_force(10_000).is_empty(), "ended");
        let many: Vec<RestartNotice> = (0..RESTART_ACKS_MAX as u64 + 5)
            .map(|i| notice(&format!("m{i:03}"), i, 60_000))
            .collect();
        for (i, n) in many.iter().enumerate() {
            holds.observe("me", &many[..=i], 20_000, 100 + i as u64);
            assert!(holds.end_of(&n.node).is_some());
        }
        let acked = holds.in_force(1_000);
        assert_eq!(acked.len(), RESTART_ACKS_MAX);
        assert!(
            acked.iter().all(|n| n.generation >= 5),
            "the newest are kept"
        );
    }

    #[test]
    fn past_the_memory_bound_a_notice_is_neither_held_nor_acknowledged() {
        let mut holds = RestartHolds::default();
        let many: Vec<RestartNotice> = (0..RESTART_HOLDS_MAX as u64 + 1)
            .map(|i| notice(&format!("m{i:05}"), 1, 60_000))
            .collect();
        holds.observe("me", &many, 20_000, 0);
        let last = many.last().unwrap();
        assert_eq!(holds.end_of(&last.node), None);
        assert!(!holds.in_force(0).contains(last));
        holds.check_invariants();
    }

    #[test]
    fn the_lease_is_extended_only_when_every_live_member_holds_the_restart_and_a_majority_does() {
        let live = set(&["n1", "n2", "n3"]);
        assert_eq!(extension("n1", &live, &set(&["n2", "n3"]), 3), Ok(()));
        let err = extension("n1", &live, &set(&["n2"]), 3).unwrap_err();
        assert!(err.contains("n3"), "{err}");
        // n3 is not live here (cut off): two of three hold it, a majority.
        assert_eq!(
            extension("n1", &set(&["n1", "n2"]), &set(&["n2"]), 3),
            Ok(())
        );
        // Alone of three, or two of four: no strict majority.
        assert!(extension("n1", &set(&["n1"]), &set(&[]), 3).is_err());
        assert!(extension("n1", &set(&["n1", "n2"]), &set(&["n2"]), 4).is_err());
        // A mesh of one: nobody could take it over, the agent itself is the majority.
        assert_eq!(extension("n1", &set(&["n1"]), &set(&[]), 1), Ok(()));
    }
}
