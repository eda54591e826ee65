//! Fencing tokens for exclusive replicas: a number each instance receives (`SHOAL_FENCE_TOKEN`)
//! that grows every time the replica's ownership moves, so that the application can refuse, where
//! its data lives, writes from an older owner. The never-two-copies rule (`exclusive.rs`) and
//! self-fencing keep a deposed owner from running for long; they cannot reach a write it already
//! sent, a process paused past its fencing, or a copy left running by a broken assumption. The
//! token is the storage side's defence against those, and Shoal cannot enforce it by itself.
//!
//! **A new owner** takes 1 + the highest token it knows for the replica, and at least the
//! shell's floor ([`ReconcileInput::fence_token_floor`](super::ReconcileInput::fence_token_floor),
//! the wall clock in the agent). It knows the tokens in its peers' gossip (live or not: the shell
//! keeps the last state of dead and unreachable peers), those it saw there while the replica
//! waited to start here (the exclusive rule waits while a live peer reports a copy, so the copy
//! being stopped elsewhere is seen), and its own records.
//!
//! **The same owner** reuses its token (ownership did not move): a restart after a crash, a
//! failed start retried, a rolling update replacing the instance. The node holds the token from
//! its start, or from an alive instance it lists (an adopted one), for as long as the replica
//! stays placed here and the node keeps a two-way majority. Losing either means the replica may
//! have moved without this node knowing, so its next start takes a new token; a token is reused
//! only while it is higher than any a peer published.
//!
//! What a token does not promise: uniqueness under a split brain (two owners that cannot see each
//! other may compute the same number; preventing two owners is the exclusive rule's job), growth
//! when the mesh forgot every earlier token and the new owner's clock is behind the old one's, or
//! anything at all unless the application compares it.

use std::collections::BTreeMap;

use crate::instance::ReplicaId;

use super::track::{Local, ReplicaState, Tracked};
use super::view::PeerIndex;

/// Keeps each replica's own token: forgotten when the replica is no longer placed here or this
/// node lacks a two-way majority, taken from its alive instances otherwise. Call it every tick,
/// after the runtime's list is ingested.
pub(crate) fn hold(local: &mut Local, placed: &BTreeMap<ReplicaId, String>, two_way: bool) {
    for (replica, state) in local.replicas.iter_mut() {
        if !two_way || !placed.contains_key(replica) {
            state.fence_token = None;
        }
    }
    if !two_way {
        return;
    }
    let alive = local
        .instances
        .values()
        .filter(|t| t.alive() && placed.contains_key(&t.replica));
    for t in alive {
        if let Some(token) = t.fence_token {
            let state = local.replicas.entry(t.replica.clone()).or_default();
            state.fence_token = Some(state.fence_token.map_or(token, |own| own.max(token)));
        }
    }
}

/// Remembers the highest token the peers publish for `replica`, which waits to start here.
pub(crate) fn note_peers(state: &mut ReplicaState, peers: &PeerIndex<'_>, replica: &ReplicaId) {
    let published = peers
        .of(replica)
        .iter()
        .filter_map(|c| c.status.fence_token);
    state.fence_seen = published.fold(state.fence_seen, u64::max);
}

/// The token for a start of `replica` here, after [`note_peers`] this tick.
pub(crate) fn for_start<'a>(
    state: &ReplicaState,
    records: impl IntoIterator<Item = &'a Tracked>,
    replica: &ReplicaId,
    floor: u64,
) -> u64 {
    let here = records
        .into_iter()
        .filter(|t| &t.replica == replica)
        .filter_map(|t| t.fence_token)
        .fold(0, u64::max);
    next(state.fence_token, state.fence_seen, here, floor)
}

/// The token rule: reuse `own` while it is above every token published `elsewhere` and every
/// record `here`; otherwise one more than the highest known, and at least `floor`.
pub(crate) fn next(own: Option<u64>, elsewhere: u64, here: u64, floor: u64) -> u64 {
    match own {
        Some(own) if own > elsewhere && own >= here => own,
        _ => {
            let known = elsewhere.max(here).max(own.unwrap_or(0));
            known.saturating_add(1).max(floor)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::next;

    #[test]
    fn same_owner_reuses_its_token_a_move_takes_a_larger_one() {
        assert_eq!(next(None, 0, 0, 0), 1, "the first token");
        assert_eq!(
            next(Some(7), 3, 7, 1_000),
            7,
            "restart here: same token, floor or not"
        );
        assert_eq!(next(Some(7), 9, 7, 0), 10, "a peer issued 9 meanwhile");
        assert_eq!(
            next(Some(7), 7, 0, 0),
            8,
            "a peer holds the same token: not ours alone"
        );
        assert_eq!(
            next(None, 9, 4, 0),
            10,
            "a new owner goes above what it knows"
        );
        assert_eq!(next(None, 9, 0, 5_000), 5_000, "and at least the floor");
        assert_eq!(next(None, u64::MAX, 0, 0), u64::MAX, "saturates");
    }
}
