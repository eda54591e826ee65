//! This node's reading of the mesh: membership timers (since when a peer is dead or unreachable,
//! since when this node lacks a majority), the peers' copies of the replicas that concern it, a
//! workload's availability for rolling updates, and whether the whole view is suspicious.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};

use crate::instance::ReplicaId;

use super::config::ReconcileConfig;
use super::input::ReconcileInput;
use super::plan::Ctx;
use super::status::InstanceStatus;
use super::track::Local;

/// Membership facts that need memory: the reconciler dates them itself, on its own clock.
#[derive(Clone, Debug, Default)]
pub(crate) struct MeshTimers {
    /// Since when this node has lacked a two-way majority: seeing a strict majority of the last
    /// known membership and being heard by one.
    pub minority_since_ms: Option<u64>,
    /// When this node last had a two-way majority (restored across agent restarts by the shell,
    /// so that a restart does not reset the self-fencing clock).
    pub last_majority_ms: Option<u64>,
    /// Since when this node has had a two-way majority without interruption. Its claims count
    /// only from then: one published while its packets were lost reached nobody.
    pub two_way_since_ms: Option<u64>,
    /// Since when this node has seen a strict majority without interruption. A peer's death is
    /// only trusted from then on: a verdict reached while this node was itself cut off says
    /// nothing about the peer.
    pub majority_since_ms: Option<u64>,
    /// Since when each peer has been confirmed dead (as first seen by this node), counted from
    /// when it last stopped being live.
    pub dead_since: BTreeMap<String, u64>,
    /// Since when each peer with published state has been neither live nor confirmed dead.
    pub unreachable_since: BTreeMap<String, u64>,
    /// When each peer last came back (live again after being confirmed dead or unreachable),
    /// kept for [`RETURN_WINDOW_MS`]: replicas moving back to it are a handback, not a sign that
    /// this node's view went wrong.
    pub returned_at: BTreeMap<String, u64>,
    /// The member count a restarted agent knew when it last saw a majority (restored by the
    /// shell): until this node sees a strict majority of it, fewer known members are not
    /// believed. An agent restarted while cut off hears only itself and would otherwise count
    /// a majority of one.
    pub members_floor: Option<usize>,
    /// The member count (as the shell counted it) at the last tick with a strict majority: what
    /// the shell persists for [`MeshTimers::members_floor`].
    pub majority_members: Option<usize>,
}

/// How long after a peer came back moves of replicas to it are taken for a handback (ms).
pub(crate) const RETURN_WINDOW_MS: u64 = 60_000;

impl MeshTimers {
    /// Updates the timers from this tick's membership.
    pub fn observe(
        &mut self,
        node: &str,
        input: &ReconcileInput,
        config: &ReconcileConfig,
        now_ms: u64,
    ) {
        let m = &input.membership;
        // Death verdicts are trusted while this node sees a majority (it receives the mesh's
        // gossip); keeping and starting exclusive replicas also needs the mesh to hear it.
        if m.has_majority(node) {
            self.majority_since_ms.get_or_insert(now_ms);
        } else {
            self.majority_since_ms = None;
        }
        if m.has_two_way_majority(node, now_ms, config.heard_window_ms) {
            self.minority_since_ms = None;
            self.last_majority_ms = Some(now_ms);
            self.two_way_since_ms.get_or_insert(now_ms);
        } else {
            self.two_way_since_ms = None;
            if self.minority_since_ms.is_none() {
                self.minority_since_ms = Some(self.last_majority_ms.unwrap_or(now_ms).min(now_ms));
            }
        }
        for n in &m.live {
            if self.dead_since.contains_key(n) || self.unreachable_since.contains_key(n) {
                self.returned_at.insert(n.clone(), now_ms);
            }
        }
        self.returned_at
            .retain(|_, at| now_ms < at.saturating_add(RETURN_WINDOW_MS));
        // A member live now is not dead, whatever the dead set says: a death counts from when
        // the member last stopped being live. The shell's dead set may still name a member that
        // came back (chitchat keeps a restarted agent's earlier identity dead for an hour); dated
        // from that old death, the fencing delay had long passed when the member's new identity
        // went silent, and a peer started its exclusive replica one claim delay later, before the
        // member had fenced itself (`scenarios/regress/restart-then-one-way-exclusive.toml`).
        self.dead_since
            .retain(|n, _| m.dead.contains(n) && !m.live.contains(n));
        for n in m.dead.iter().filter(|n| !m.live.contains(*n)) {
            if !self.dead_since.contains_key(n) {
                self.dead_since.insert(n.clone(), now_ms);
            }
        }
        // Every tick reads every peer: walk the sorted peers, live and dead sets together rather
        // than searching the sets once per peer.
        let unreachable = unreachable_peers(node, input);
        self.unreachable_since
            .retain(|n, _| unreachable.binary_search(&n.as_str()).is_ok());
        for n in unreachable {
            if !self.unreachable_since.contains_key(n) {
                self.unreachable_since.insert(n.to_string(), now_ms);
            }
        }
    }

    /// The member count to believe this tick: the shell's, or the restored floor while this node
    /// has not seen a strict majority of it since its restart.
    pub fn members_known(&self, counted: usize) -> usize {
        self.members_floor.map_or(counted, |f| f.max(counted))
    }

    /// After [`MeshTimers::observe`]: remembers the count at a majority, and drops the floor once
    /// a majority of it was seen (from then on, the shell's count is the mesh's).
    pub fn settle_members(&mut self, counted: usize) {
        if self.majority_since_ms.is_some() {
            self.members_floor = None;
            self.majority_members = Some(counted);
        }
    }

    /// When the fencing delay for a peer confirmed dead ends: counted from its death or from when
    /// this node regained a majority, whichever is later.
    pub fn fenced_at(&self, dead_ms: u64, config: &ReconcileConfig, now_ms: u64) -> u64 {
        let trusted_from = dead_ms.max(self.majority_since_ms.unwrap_or(now_ms));
        trusted_from.saturating_add(config.fencing_delay_ms)
    }

    /// Whether this node has lacked a majority for the self-fencing timeout.
    pub fn fencing_due(&self, config: &ReconcileConfig, now_ms: u64) -> bool {
        self.minority_since_ms
            .is_some_and(|t| now_ms >= t.saturating_add(config.self_fence_ms))
    }
}

/// The peers with published state that are neither live nor confirmed dead (this node aside),
/// in name order: one merge over the three sorted collections.
fn unreachable_peers<'a>(node: &str, input: &'a ReconcileInput) -> Vec<&'a str> {
    let m = &input.membership;
    let (mut live, mut dead) = (m.live.iter().peekable(), m.dead.iter().peekable());
    let mut out = Vec::new();
    for n in input.peers.keys() {
        while live.next_if(|l| *l < n).is_some() {}
        while dead.next_if(|d| *d < n).is_some() {}
        let known = live.peek() == Some(&n) || dead.peek() == Some(&n);
        if !known && n != node {
            out.push(n.as_str());
        }
    }
    out
}

/// A peer's copy of a replica, from gossip.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerCopy<'a> {
    pub node: &'a str,
    pub status: &'a InstanceStatus,
}

/// The peers' copies of the replicas of the workloads that concern this node (placed here or
/// running here), indexed on first use in a tick (most ticks never ask). This node's own entry is
/// left out.
pub(crate) struct PeerIndex<'a> {
    node: &'a str,
    input: &'a ReconcileInput,
    workloads: &'a BTreeSet<String>,
    copies: OnceCell<BTreeMap<&'a ReplicaId, Vec<PeerCopy<'a>>>>,
}

impl<'a> PeerIndex<'a> {
    /// An index of the peers' state for these workloads, built when first read.
    pub fn build(
        node: &'a str,
        input: &'a ReconcileInput,
        workloads: &'a BTreeSet<String>,
    ) -> Self {
        PeerIndex {
            node,
            input,
            workloads,
            copies: OnceCell::new(),
        }
    }

    fn index(&self) -> BTreeMap<&'a ReplicaId, Vec<PeerCopy<'a>>> {
        let mut copies: BTreeMap<&'a ReplicaId, Vec<PeerCopy<'a>>> = BTreeMap::new();
        let (node, workloads) = (self.node, self.workloads);
        for (peer, statuses) in self.input.peers.iter().filter(|(n, _)| n.as_str() != node) {
            for status in statuses
                .iter()
                .filter(|s| workloads.contains(&s.replica.workload))
            {
                copies
                    .entry(&status.replica)
                    .or_default()
                    .push(PeerCopy { node: peer, status });
            }
        }
        copies
    }

    /// Every peer copy of a replica, by node name.
    pub fn of(&self, replica: &ReplicaId) -> &[PeerCopy<'a>] {
        let copies = self.copies.get_or_init(|| self.index());
        copies.get(replica).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// When this agent first saw each peer's copy serving, by node and handle, for the copies a
/// rollout's budget read in the last round. A rollout counts a copy at the new version only once
/// it has served for `update_settle_ms`; a peer's own clock is not comparable with this one, so
/// for a peer's copy the time counts from when this agent first read it serving. A copy not read
/// in a round (no longer serving, or no rollout here asks) is forgotten, so its time starts over.
#[derive(Clone, Debug, Default)]
pub(crate) struct ServingSeen {
    first: BTreeMap<(String, String), u64>,
    read: BTreeSet<(String, String)>,
}

impl ServingSeen {
    /// When this agent first saw `handle` on `node` serving (now, the first time it is asked).
    pub fn since(&mut self, node: &str, handle: &str, now_ms: u64) -> u64 {
        let key = (node.to_string(), handle.to_string());
        let since = *self.first.entry(key.clone()).or_insert(now_ms);
        self.read.insert(key);
        since
    }

    /// Ends a round: forgets the copies not read in it.
    pub fn end_round(&mut self) {
        let read = std::mem::take(&mut self.read);
        self.first.retain(|k, _| read.contains(k));
    }

    /// How many copies are remembered (bounded by the copies one round reads).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.first.len()
    }
}

/// A workload's availability across the mesh, as this node sees it: the input to the rolling
/// update's budget. Every agent computes it from (nearly) the same gossip, so every agent picks
/// the same replicas to update next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Availability {
    /// Replicas with no serving copy at all, or whose only serving copies are at the desired
    /// version and have not yet served for the settle time.
    pub down: u32,
    /// Replicas with a serving old copy and an unready desired copy (a surge in progress).
    pub surging: u32,
    /// Replicas with a serving copy, none at the desired version, and no surge: the queue of the
    /// update, by index.
    pub queue: Vec<u32>,
    /// Replicas with a copy at the desired version that has served for the settle time.
    pub current: Vec<u32>,
    /// When the earliest copy at the desired version that serves but has not settled will have
    /// (the round to wake for).
    pub settles_at: Option<u64>,
}

/// One copy of a replica as the update budget reads it.
#[derive(Clone, Copy)]
struct ReadCopy {
    current: bool,
    serves: bool,
    alive: bool,
    /// Serving since (this agent's clock), when it serves.
    since: u64,
}

impl Availability {
    /// Computes the availability of `workload` (replicas `0..replicas`) at `desired` version. A
    /// copy at `desired` counts as serving it once it has served for `update_settle_ms`: a local
    /// copy from its own healthy-since, a peer's from when this agent first read it serving.
    pub fn of(
        workload: &str,
        replicas: u32,
        desired: &str,
        local: &Local,
        ctx: &Ctx<'_>,
    ) -> Availability {
        let (now, settle) = (ctx.now_ms, ctx.config.update_settle_ms);
        let mut seen = ctx.serving_seen.borrow_mut();
        let mut out = Availability::default();
        for index in 0..replicas {
            let replica = ReplicaId::new(workload, index);
            let mut copies: Vec<ReadCopy> = Vec::new();
            for (_, t) in local.alive_of(&replica) {
                let serves = t.serves();
                copies.push(ReadCopy {
                    current: t.version == desired,
                    serves,
                    alive: t.stop.is_none(),
                    since: t.health.healthy_since().unwrap_or(now).min(now),
                });
            }
            for c in ctx.peers.of(&replica) {
                if ctx.input.membership.live.contains(c.node) && c.status.may_be_alive() {
                    let current = c.status.spec_version == desired;
                    let serves = c.status.serves();
                    let since = match (current && serves, c.status.handle.as_deref()) {
                        (true, Some(handle)) => seen.since(c.node, handle, now),
                        _ => now,
                    };
                    copies.push(ReadCopy {
                        current,
                        serves,
                        alive: true,
                        since,
                    });
                }
            }
            let settled = |c: &ReadCopy| now >= c.since.saturating_add(settle);
            let healthy_current = copies.iter().any(|c| c.current && c.serves && settled(c));
            let healthy_old = copies.iter().any(|c| !c.current && c.serves);
            let unready_current = copies
                .iter()
                .any(|c| c.current && c.alive && !(c.serves && settled(c)));
            for c in copies
                .iter()
                .filter(|c| c.current && c.serves && !settled(c))
            {
                let at = c.since.saturating_add(settle);
                out.settles_at = Some(out.settles_at.map_or(at, |w: u64| w.min(at)));
            }
            if healthy_current {
                out.current.push(index);
            } else if !healthy_old {
                out.down += 1;
            } else if unready_current {
                out.surging += 1;
            } else {
                out.queue.push(index);
            }
        }
        out
    }
}

/// Why this node's view cannot be trusted to stop instances on its own authority, if it cannot:
/// the shell says so; no spec at all while instances run; no strict majority of the last known
/// membership; or most of what runs here is suddenly placed elsewhere while not draining.
pub(crate) fn suspicious_reasons(
    node: &str,
    input: &ReconcileInput,
    local: &Local,
    config: &ReconcileConfig,
    timers: &MeshTimers,
) -> Vec<String> {
    let mut reasons = Vec::new();
    if let Some(why) = &input.view_suspect {
        reasons.push(why.clone());
    }
    let alive: Vec<&ReplicaId> = local
        .instances
        .values()
        .filter(|t| t.alive())
        .map(|t| &t.replica)
        .collect();
    let unexplained = alive
        .iter()
        .filter(|r| !input.deleted.contains(&r.workload))
        .count();
    if input.specs.is_empty() && unexplained > 0 {
        reasons.push(format!(
            "no workload specs at all while {unexplained} instances of workloads never deleted \
             run here"
        ));
    }
    let m = &input.membership;
    if !m.has_majority(node) {
        reasons.push(format!(
            "sees {} of {} known members, no strict majority",
            m.live_count(node),
            m.members_known
        ));
    }
    let orphans = alive
        .iter()
        .filter(|r| unexplained_move(node, input, timers, r))
        .count();
    if !input.draining && orphans >= config.mass_stop_min && 2 * orphans > alive.len() {
        reasons.push(format!(
            "{orphans} of the {} instances running here are no longer placed here",
            alive.len()
        ));
    }
    reasons
}

/// Whether a replica running here counts as moved elsewhere for the mass-stop guard: it is still
/// desired (a deleted workload or a replica scaled away is no longer wanted anywhere: its stop
/// is the operator's decision, not a move), it is not placed here, and the move is not a
/// handback to a peer that just came back and claims it (after a partition heals or a host
/// restarts, what was taken over while it was away goes back: a membership change explains it),
/// nor a move to another cell that reports its copy serving.
fn unexplained_move(
    node: &str,
    input: &ReconcileInput,
    timers: &MeshTimers,
    r: &ReplicaId,
) -> bool {
    if !input.replica_exists(r) {
        return false;
    }
    let Some(owner) = input.owners.get(r) else {
        // Moved to another cell: explained once that cell reports its copy serving.
        return !input.moved_to_cells.get(r).is_some_and(|m| m.serving);
    };
    if owner == node {
        return false;
    }
    let handback = timers.returned_at.contains_key(owner)
        && input.membership.live.contains(owner)
        && input
            .peers
            .get(owner)
            .is_some_and(|list| list.iter().any(|s| &s.replica == r));
    !handback
}

#[cfg(test)]
mod tests {
    use super::ServingSeen;

    #[test]
    fn a_copy_read_every_round_keeps_its_first_time_and_one_missed_round_starts_it_over() {
        let mut seen = ServingSeen::default();
        assert_eq!(seen.since("n2", "h1", 1_000), 1_000);
        seen.end_round();
        assert_eq!(
            seen.since("n2", "h1", 1_500),
            1_000,
            "still serving: its first time"
        );
        assert_eq!(
            seen.since("n3", "h1", 1_500),
            1_500,
            "keyed by node and handle"
        );
        seen.end_round();
        assert_eq!(seen.since("n3", "h1", 2_000), 1_500);
        seen.end_round(); // n2/h1 was not read: it stopped serving, or nothing asks
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen.since("n2", "h1", 2_500),
            2_500,
            "read again: its time starts over"
        );
    }
}
