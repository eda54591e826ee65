//! Evidence that this node is heard. An owner of exclusive replicas keeps them only while a
//! strict majority confirms, in a round trip, that its failure detector holds the owner live
//! (`Request::Hears`): seeing a majority is not enough under a one-way partition, where this
//! node receives everyone's gossip while its own is lost and the others declare it dead. The
//! reconciler reads the confirmations (`Membership::heard_at`) and fences on their absence.
//!
//! Asked only while this node owns or runs an exclusive replica (every live peer) or hands a
//! replica off (only the new owners: the reconciler's handoff confirmation reads theirs alone),
//! once per [`ASK_INTERVAL`], [`ASKS_AT_ONCE_MAX`] at a time, each bounded by [`ASK_TIMEOUT`]. A
//! confirmation is dated when its request was sent, so it never looks fresher than it is.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::clock::MonoClock;
use crate::state::mesh::node::MeshNode;
use crate::state::mesh::view;
use crate::transport::rpc;
use crate::wire::api::{Request, Response};

/// Time between two rounds of questions.
pub const ASK_INTERVAL: Duration = Duration::from_millis(1_000);
/// Longest wait for one answer.
pub const ASK_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Questions in flight at once at most.
pub const ASKS_AT_ONCE_MAX: usize = 32;

/// The confirmations gathered so far, and whether to gather them.
#[derive(Default)]
pub struct Heard {
    at: Mutex<BTreeMap<String, u64>>,
    active: AtomicBool,
    /// A copy of an exclusive replica may be alive here: the lease advances.
    leasing: AtomicBool,
    /// Whom to ask: every live peer (`None`), or only these live peers (the new owners of the
    /// replicas handing off to them: a handoff waits for its new owner's answer alone).
    only: Mutex<Option<BTreeSet<String>>>,
    wake: Notify,
}

impl Heard {
    /// Per peer, when (monotonic ms) the latest confirming round trip began.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.at.lock().expect("heard lock").clone()
    }

    /// Starts or stops asking; starting asks at once.
    pub fn set_active(&self, active: bool) {
        if active && !self.active.swap(true, Ordering::Relaxed) {
            self.wake.notify_one();
        } else if !active {
            self.active.store(false, Ordering::Relaxed);
        }
    }

    /// Asks every live peer (`None`: the majority rule of an exclusive replica counts them
    /// all), or only these.
    pub fn set_asked(&self, only: Option<BTreeSet<String>>) {
        *self.only.lock().expect("heard lock") = only;
    }

    /// Whether a copy of an exclusive replica may be alive here (starting, running, stopping):
    /// while it is, and asking, each round advances the exclusive lease.
    pub fn set_leasing(&self, leasing: bool) {
        self.leasing.store(leasing, Ordering::Relaxed);
    }

    /// Whether it is asking.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    fn record(&self, peer: String, sent_ms: u64) {
        let mut at = self.at.lock().expect("heard lock");
        let entry = at.entry(peer).or_insert(sent_ms);
        *entry = (*entry).max(sent_ms);
    }
}

/// Asks the live peers, round after round, while active (abort the task to stop it), and
/// advances this node's exclusive lease ([`view::LEASE_KEY`]) each round: the peers that cannot
/// reach this node learn from it, relayed by gossip, that it may still run exclusive replicas.
pub async fn run(node: Arc<MeshNode>, heard: Arc<Heard>, mono: MonoClock) {
    let mut lease: u64 = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(ASK_INTERVAL) => {}
            _ = heard.wake.notified() => {}
        }
        if !heard.is_active() {
            continue;
        }
        if heard.leasing.load(Ordering::Relaxed) {
            lease += 1;
            let chitchat = node.gossip().chitchat();
            let mut guard = chitchat.lock().await;
            guard
                .self_node_state()
                .set(view::LEASE_KEY, lease.to_string());
        }
        let members = node.members().await;
        let mut peers = view::live_peer_apis(&members, &node.name);
        if let Some(only) = heard.only.lock().expect("heard lock").as_ref() {
            peers.retain(|(peer, _)| only.contains(peer));
        }
        // Forget peers that left the membership: the map stays bounded by it.
        heard
            .at
            .lock()
            .expect("heard lock")
            .retain(|name, _| members.iter().any(|m| &m.name == name));
        for chunk in peers.chunks(ASKS_AT_ONCE_MAX) {
            let asks = chunk.iter().map(|(peer, addr)| {
                let (node, heard, sent_ms) = (&node, &heard, mono());
                async move {
                    let answer: Result<Response, _> = rpc::call_with(
                        node.rpc.as_ref(),
                        *addr,
                        peer,
                        &Request::Hears,
                        ASK_TIMEOUT,
                    )
                    .await;
                    if let Ok(Response::Hears { live: true }) = answer {
                        heard.record(peer.clone(), sent_ms);
                    }
                }
            });
            futures_util::future::join_all(asks).await;
        }
    }
}
