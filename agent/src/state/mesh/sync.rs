//! Anti-entropy: every round, publish this node's digest summary in gossip; pull the differing
//! buckets from a live peer whose summary differs. Both sides do it, so both converge. Also keeps
//! the peer list on disk fresh (for rejoining without --seed), purges old tombstones, and runs
//! the clock-skew round ([`super::skew`]). A part over its node: the node does not hold it.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use shoal_core::store::Digest;

use super::node::MeshNode;
use super::record::DIGEST_KEY;
use super::view::STALE_KEY;
use crate::transport::rpc;
use crate::wire::api::{Request, Response};

/// Time between anti-entropy rounds.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(300);
/// Peers pulled from per round at most.
pub const SYNC_PEERS_PER_ROUND: usize = 2;
/// Pages pulled from one peer per round at most.
pub const SYNC_PAGES_PER_PEER_MAX: usize = 64;
/// Longest wait for one sync call.
pub const SYNC_CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// Rounds between saves of the peer list and tombstone purges.
const HOUSEKEEPING_EVERY_ROUNDS: u64 = 50;

/// Hex encoding for chitchat values (which are strings).
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The anti-entropy part of one agent: a task over its node.
pub struct AntiEntropy {
    node: Arc<MeshNode>,
    round: u64,
    /// The peer list last saved to the store.
    saved_peers: Vec<SocketAddr>,
}

impl AntiEntropy {
    /// Anti-entropy for `node`, no round run yet.
    pub fn new(node: Arc<MeshNode>) -> Self {
        AntiEntropy {
            node,
            round: 0,
            saved_peers: Vec::new(),
        }
    }

    /// Runs anti-entropy forever (cancel the task to stop it).
    pub async fn run(mut self) {
        loop {
            tokio::time::sleep(SYNC_INTERVAL).await;
            self.round().await;
        }
    }

    /// One round: publish the summary, pull from peers that differ (and now and then, the
    /// housekeeping).
    pub async fn round(&mut self) {
        self.round += 1;
        let round = self.round;
        self.sync_round(round).await;
        if round % HOUSEKEEPING_EVERY_ROUNDS == 1 {
            let mut saved = std::mem::take(&mut self.saved_peers);
            self.housekeeping(&mut saved).await;
            self.saved_peers = saved;
        }
    }

    async fn sync_round(&self, round: u64) {
        let node = &self.node;
        if node.stale.load(Ordering::Relaxed) && !self.resync_if_possible().await {
            return;
        }
        let mine = node.with_store(|s| s.digest()).await;
        let summary = to_hex(&mine.summary().encode());
        {
            let chitchat = node.gossip.chitchat();
            let mut guard = chitchat.lock().await;
            if guard.self_node_state().get(DIGEST_KEY) != Some(summary.as_str()) {
                guard.self_node_state().set(DIGEST_KEY, &summary);
            }
        }
        let members = node.members().await;
        node.skew.sample_round(round, &members).await;
        let issue = current_issue(node, &members).await;
        publish_issue(node, issue.as_ref()).await;
        let differing: Vec<(String, SocketAddr)> = members
            .iter()
            .filter(|m| m.alive && m.name != node.name)
            .filter(|m| m.digest.as_deref().is_some_and(|d| d != summary))
            .filter_map(|m| m.record.as_ref().map(|r| (m.name.clone(), r.api_addr)))
            .collect();
        if differing.is_empty() {
            let has_peer = members
                .iter()
                .any(|m| m.alive && m.name != node.name && m.digest.is_some());
            if has_peer {
                node.synced_once.store(true, Ordering::Relaxed);
            }
            // Recorded now and then, not every round: each write is an fsync.
            if has_peer && round.is_multiple_of(HOUSEKEEPING_EVERY_ROUNDS) {
                let now = (node.clock)();
                let _ = node.with_store(move |s| s.mark_synced(now)).await;
            }
            return;
        }
        // Rotate through the differing peers so one slow peer does not starve the others.
        let start = (round as usize) % differing.len();
        for i in 0..differing.len().min(SYNC_PEERS_PER_ROUND) {
            let (peer, addr) = &differing[(start + i) % differing.len()];
            if let Err(e) = pull_from(&self.node, peer, *addr, &mine).await {
                tracing::debug!(%peer, error = %e, "anti-entropy pull failed");
            }
        }
    }

    /// A stale node drops its entries once a live peer that is not stale can give it the
    /// current state; while every node is stale (the whole mesh was down), everyone keeps theirs.
    /// Returns true when the node is no longer stale.
    async fn resync_if_possible(&self) -> bool {
        let node = &self.node;
        let members = node.members().await;
        let fresh_peer = members
            .iter()
            .any(|m| m.alive && m.name != node.name && !m.stale && m.digest.is_some());
        if !fresh_peer {
            return false;
        }
        match node.with_store(|s| s.discard_all()).await {
            Ok(dropped) => {
                tracing::warn!(dropped, "stale store discarded: resynchronizing from peers");
                node.stale.store(false, Ordering::Relaxed);
                let chitchat = node.gossip.chitchat();
                chitchat.lock().await.self_node_state().delete(STALE_KEY);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "discarding the stale store failed");
                false
            }
        }
    }

    async fn housekeeping(&self, saved: &mut Vec<SocketAddr>) {
        let node = &self.node;
        let members = node.members().await;
        let mut peers: Vec<SocketAddr> = members
            .iter()
            .filter(|m| m.alive && m.name != node.name)
            .map(|m| m.id.gossip_advertise_addr)
            .collect();
        peers.sort();
        peers.truncate(crate::state::store_db::PEERS_MAX);
        if !peers.is_empty() && peers != *saved {
            let to_save = peers.clone();
            match node.with_store(move |s| s.peers_save(&to_save)).await {
                Ok(()) => *saved = peers,
                Err(e) => tracing::warn!(error = %e, "saving the peer list failed"),
            }
        }
        let now = (node.clock)();
        match node.with_store(move |s| s.gc(now)).await {
            Ok(purged) if !purged.is_empty() => tracing::info!(?purged, "purged old tombstones"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "tombstone purge failed"),
        }
    }
}

/// Pulls from `peer` the entries of the buckets where its digest differs from `mine`.
pub(crate) async fn pull_from(
    node: &MeshNode,
    peer: &str,
    addr: SocketAddr,
    mine: &Digest,
) -> Result<(), String> {
    let answer: Response = rpc::call_with(
        node.rpc.as_ref(),
        addr,
        peer,
        &Request::Digest,
        SYNC_CALL_TIMEOUT,
    )
    .await
    .map_err(|e| e.to_string())?;
    let Response::Digest(bytes) = answer else {
        return Err(format!("unexpected answer to Digest: {answer:?}"));
    };
    let theirs = Digest::decode(&bytes).map_err(|e| e.to_string())?;
    let buckets = mine.diff_buckets(&theirs);
    if buckets.is_empty() {
        return Ok(());
    }
    let mut after = None;
    for _ in 0..SYNC_PAGES_PER_PEER_MAX {
        let req = Request::Pull {
            buckets: buckets.clone(),
            after: after.take(),
        };
        let answer: Response =
            rpc::call_with(node.rpc.as_ref(), addr, peer, &req, SYNC_CALL_TIMEOUT)
                .await
                .map_err(|e| e.to_string())?;
        let Response::Entries {
            entries,
            next_after,
        } = answer
        else {
            return Err(format!("unexpected answer to Pull: {answer:?}"));
        };
        let now = (node.clock)();
        // Entries whose proof of origin fails are dropped here (and counted), not merged.
        let entries = node.authority.verified(entries, peer);
        let outcome = node
            .with_store(move |s| s.merge_remote(entries, now))
            .await
            .map_err(|e| e.to_string())?;
        if !outcome.changed.is_empty() {
            tracing::info!(%peer, changed = ?outcome.changed, "anti-entropy caught up");
        }
        for rejected in outcome.rejected {
            tracing::warn!(%peer, ?rejected, "pulled entry refused");
        }
        match next_after {
            Some(next) => after = Some(next),
            None => return Ok(()),
        }
    }
    Ok(())
}

/// `node`'s clock-skew issue now (reads the store's refusals).
pub(crate) async fn current_issue(
    node: &MeshNode,
    members: &[super::view::Member],
) -> Option<shoal_core::reconcile::Issue> {
    let now = (node.clock)();
    let refused: Vec<(String, String, u64)> = node
        .with_store(move |s| {
            s.core()
                .refused_newer_all(now)
                .map(|(n, v)| (n.to_owned(), v.human(), v.hlc.wall_ms))
                .collect()
        })
        .await;
    node.skew.issue(members, now, &refused)
}

/// Publishes `issue` under [`CLOCK_ISSUE_KEY`](super::skew::CLOCK_ISSUE_KEY) in `node`'s gossip state, or clears the key.
pub(crate) async fn publish_issue(node: &MeshNode, issue: Option<&shoal_core::reconcile::Issue>) {
    let text = issue.map(|i| serde_json::to_string(&[i]).unwrap_or_default());
    let chitchat = node.gossip.chitchat();
    let mut guard = chitchat.lock().await;
    let state = guard.self_node_state();
    match text {
        Some(text) if state.get(super::skew::CLOCK_ISSUE_KEY) != Some(text.as_str()) => {
            state.set(super::skew::CLOCK_ISSUE_KEY, &text);
        }
        None if state.get(super::skew::CLOCK_ISSUE_KEY).is_some() => {
            state.delete(super::skew::CLOCK_ISSUE_KEY)
        }
        _ => {}
    }
}
