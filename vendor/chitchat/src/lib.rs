#![allow(clippy::type_complexity)]
#![allow(clippy::derive_partial_eq_without_eq)]

pub mod compact;
#[cfg(test)]
mod compact_tests;
mod configuration;
mod delta;
mod digest;
mod failure_detector;
mod fxhash;
mod listener;
mod message;
pub(crate) mod serialize;
mod server;
mod state;
pub mod transport;
mod types;

use std::collections::{BTreeMap, HashSet};
use std::iter::once;
use std::net::SocketAddr;
use std::num::NonZeroUsize;

use delta::Delta;
use failure_detector::FailureDetector;
pub use failure_detector::FailureDetectorConfig;
pub use listener::ListenerHandle;
pub use serialize::{Deserializable, Serializable};
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tracing::{error, info, warn};

pub use self::configuration::{CatchupCallback, ChitchatConfig};
pub use self::state::{ClusterStateSnapshot, NodeState};
use crate::digest::Digest;
pub use crate::message::ChitchatMessage;
// Shoal patch: `ServerTask` and `spawn_chitchat_with` (a spawner for the server's task).
pub use crate::server::{ChitchatHandle, ServerTask, spawn_chitchat, spawn_chitchat_with};
use crate::state::ClusterState;
pub use crate::types::{ChitchatId, DeletionStatus, Heartbeat, Version, VersionedValue};

/// Sets up a tracing subscriber writing to the test harness's captured
/// output, so `cargo test` can display logs on failure.
///
/// Guarded by a `OnceLock` because `tracing::subscriber::set_global_default`
/// can only be called once per process, and all tests in a given test
/// binary run in the same process.
#[cfg(any(test, feature = "testsuite"))]
pub fn setup_tracing_for_tests() {
    use std::sync::OnceLock;

    static TRACING_INIT: OnceLock<()> = OnceLock::new();
    TRACING_INIT.get_or_init(|| {
        let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    });
}

/// Maximum UDP datagram payload size (in bytes).
///
/// Note that 65KB typically won't fit in a single IP packet,
/// so long messages will be sent over several IP fragments of MTU size.
///
/// We pick a large payload size because at the moment because
/// we send the self digest "in full".
/// An Ethernet frame size of 1400B would limit us to 20 nodes
/// or so.
pub(crate) const MAX_UDP_DATAGRAM_PAYLOAD_SIZE: usize = 65_507;

/// Shoal patch: the smallest delta budget (`DeltaSerializer::with_mtu` asserts at least 100).
const MIN_DELTA_MTU: usize = 100;

/// Live peers a gossip round sends Syns to (upstream's `GOSSIP_COUNT` in `server.rs`; Shoal patch:
/// moved here for quiet fanout).
pub const GOSSIP_COUNT: usize = 3;
/// Shoal patch: quiet fanout. Live peers a compact node at rest sends Syns to
/// ([`Chitchat::gossip_fanout`]).
pub const QUIET_GOSSIP_COUNT: usize = 1;
/// Shoal patch: quiet fanout. Rounds in a row with unchanged bucket hashes after which a compact
/// node is at rest (a second at Shoal's 250 ms rounds).
pub const QUIET_ROUNDS: u32 = 4;

/// To prevent dead nodes from being recorded again after deletion,
/// we keep a local memory of the last nodes that were garbage collected.
pub(crate) const GARBAGE_COLLECTED_NODE_HISTORY_SIZE: NonZeroUsize =
    NonZeroUsize::new(5_000).unwrap();

pub struct Chitchat {
    config: ChitchatConfig,
    cluster_state: ClusterState,
    failure_detector: FailureDetector,
    /// Notifies listeners when a change has occurred in the set of live nodes.
    previous_live_nodes: fxhash::FxHashMap<ChitchatId, Version>,
    live_nodes_watcher_tx: watch::Sender<BTreeMap<ChitchatId, NodeState>>,
    live_nodes_watcher_rx: watch::Receiver<BTreeMap<ChitchatId, NodeState>>,
    /// Shoal patch: the live set's ids alone, sorted. The map above clones every live node's
    /// state at each change (a second copy of the cluster state per agent while it is held):
    /// it is built only while someone besides this struct watches it, and marked stale
    /// (`live_states_stale`) otherwise, to be built when a watcher is asked for.
    live_ids_tx: watch::Sender<Vec<ChitchatId>>,
    live_states_stale: std::sync::atomic::AtomicBool,
    /// Shoal patch: compact gossip (`compact`): Syns carry bucket hashes.
    compact: bool,
    /// Shoal patch: quiet fanout ([`Chitchat::gossip_fanout`]): the bucket hashes at the last
    /// round, and how many rounds in a row found them unchanged.
    round_hashes: Option<compact::BucketHashes>,
    rounds_unchanged: u32,
}

impl Chitchat {
    pub fn with_chitchat_id_and_seeds(
        config: ChitchatConfig,
        seed_addrs: watch::Receiver<HashSet<SocketAddr>>,
        initial_key_values: Vec<(String, String)>,
    ) -> Self {
        let failure_detector = FailureDetector::new(config.failure_detector_config.clone());
        let previous_live_nodes = fxhash::FxHashMap::default();
        let (live_nodes_watcher_tx, live_nodes_watcher_rx) = watch::channel(BTreeMap::new());
        let mut chitchat = Chitchat {
            config,
            cluster_state: ClusterState::with_seed_addrs(seed_addrs),
            failure_detector,
            previous_live_nodes,
            live_nodes_watcher_tx,
            live_nodes_watcher_rx,
            live_ids_tx: watch::channel(Vec::new()).0,
            live_states_stale: std::sync::atomic::AtomicBool::new(false),
            compact: false,
            round_hashes: None,
            rounds_unchanged: 0,
        };

        let self_node_state = chitchat.self_node_state();

        // Immediately mark the node as alive to ensure it responds to SYN messages.
        self_node_state.inc_heartbeat();

        // Set initial key/value pairs.
        for (key, value) in initial_key_values {
            self_node_state.set(key, value);
        }
        chitchat
    }

    pub(crate) fn create_syn_message(&self) -> ChitchatMessage {
        let scheduled_for_deletion: HashSet<_> = self.scheduled_for_deletion_nodes().collect();
        if self.compact {
            return ChitchatMessage::SynBuckets {
                cluster_id: self.config.cluster_id.clone(),
                hashes: self
                    .cluster_state
                    .compute_bucket_hashes(&scheduled_for_deletion),
            };
        }
        let digest = self.compute_digest(&scheduled_for_deletion);
        ChitchatMessage::Syn {
            cluster_id: self.config.cluster_id.clone(),
            digest,
        }
    }

    /// Digest contains important information about the list of members in
    /// the cluster.
    fn report_heartbeats_in_digest(&mut self, digest: &Digest) {
        // Shoal patch: one merge of the (sorted) digest with the (sorted) node states instead of
        // one tree search per entry. The outcome is the one of `report_heartbeat` per entry, in
        // the digest's order, for the failure detector and for unknown nodes alike.
        let self_id = self.config.chitchat_id.clone();
        let now = tokio::time::Instant::now();
        let outcomes = self.cluster_state.set_known_heartbeats(digest, &self_id);
        for (chitchat_id, outcome) in outcomes {
            match outcome {
                state::KnownHeartbeat::Updated => {
                    self.failure_detector.report_heartbeat_at(chitchat_id, now)
                }
                state::KnownHeartbeat::Unchanged => {}
                state::KnownHeartbeat::Unknown(heartbeat) => {
                    self.report_heartbeat(chitchat_id, heartbeat)
                }
            }
        }
    }

    fn process_delta(&mut self, delta: Delta) {
        let was_reset_triggered = self.cluster_state.apply_delta(delta);
        // Shoal patch: with external liveness, a node whose first state just arrived is live
        // now, not at the end of the round.
        if self.failure_detector.external_liveness() {
            self.update_node_sets();
        }
        if was_reset_triggered {
            if let Some(catchup_callback) = &self.config.catchup_callback {
                info!("executing catch-up callback");
                catchup_callback();
            }
        }
    }

    pub(crate) fn process_message(&mut self, msg: ChitchatMessage) -> Option<ChitchatMessage> {
        self.update_self_heartbeat();

        match msg {
            ChitchatMessage::Syn { cluster_id, digest } => {
                if cluster_id != self.cluster_id() {
                    warn!(
                        our_cluster_id=%self.cluster_id(),
                        their_cluster_id=%cluster_id,
                        "received SYN message addressed to a different cluster"
                    );
                    return Some(ChitchatMessage::BadCluster);
                }
                self.report_heartbeats_in_digest(&digest);
                let scheduled_for_deletion: HashSet<_> =
                    self.scheduled_for_deletion_nodes().collect();
                let self_digest = self.compute_digest(&scheduled_for_deletion);
                // Shoal patch: the own digest can outgrow a datagram (a domain of more than about
                // 1,300 nodes, or a peer's digest naming that many): keep a minimal delta budget
                // (the serializer's floor) instead of overflowing, which panicked in a debug
                // build and asked for an unbounded reply in a release one.
                let delta_mtu = MAX_UDP_DATAGRAM_PAYLOAD_SIZE
                    .saturating_sub(1 + self_digest.serialized_len())
                    .max(MIN_DELTA_MTU);
                let delta = self.cluster_state.compute_partial_delta_respecting_mtu(
                    &digest,
                    delta_mtu,
                    &scheduled_for_deletion,
                );
                Some(ChitchatMessage::SynAck {
                    digest: self_digest,
                    delta,
                })
            }
            ChitchatMessage::SynAck { digest, delta } => {
                self.report_heartbeats_in_digest(&digest);
                self.process_delta(delta);
                let scheduled_for_deletion =
                    self.scheduled_for_deletion_nodes().collect::<HashSet<_>>();
                let delta = self.cluster_state.compute_partial_delta_respecting_mtu(
                    &digest,
                    MAX_UDP_DATAGRAM_PAYLOAD_SIZE - 1,
                    &scheduled_for_deletion,
                );
                Some(ChitchatMessage::Ack { delta })
            }
            ChitchatMessage::Ack { delta } => {
                self.process_delta(delta);
                None
            }
            // Shoal patch: compact gossip (`compact`). Answered whatever this node's own mode:
            // every build that sends them understands them.
            ChitchatMessage::SynBuckets { cluster_id, hashes } => {
                if cluster_id != self.cluster_id() {
                    warn!(
                        our_cluster_id=%self.cluster_id(),
                        their_cluster_id=%cluster_id,
                        "received SYN message addressed to a different cluster"
                    );
                    return Some(ChitchatMessage::BadCluster);
                }
                let scheduled_for_deletion: HashSet<_> =
                    self.scheduled_for_deletion_nodes().collect();
                let mine = self
                    .cluster_state
                    .compute_bucket_hashes(&scheduled_for_deletion);
                let mask = mine.mismatched(&hashes);
                if mask == 0 {
                    return None;
                }
                let digest = self
                    .cluster_state
                    .compute_digest_scoped(&scheduled_for_deletion, Some(mask));
                Some(ChitchatMessage::BucketDigest { mask, digest })
            }
            ChitchatMessage::BucketDigest { mask, digest } => {
                self.report_heartbeats_in_digest(&digest);
                let scheduled_for_deletion: HashSet<_> =
                    self.scheduled_for_deletion_nodes().collect();
                let self_digest = self
                    .cluster_state
                    .compute_digest_scoped(&scheduled_for_deletion, Some(mask));
                let delta_mtu = MAX_UDP_DATAGRAM_PAYLOAD_SIZE
                    .saturating_sub(1 + 4 + self_digest.serialized_len())
                    .max(MIN_DELTA_MTU);
                let delta = self.cluster_state.compute_partial_delta_scoped(
                    &digest,
                    delta_mtu,
                    &scheduled_for_deletion,
                    Some(mask),
                );
                Some(ChitchatMessage::BucketSynAck {
                    mask,
                    digest: self_digest,
                    delta,
                })
            }
            ChitchatMessage::BucketSynAck {
                mask,
                digest,
                delta,
            } => {
                self.report_heartbeats_in_digest(&digest);
                self.process_delta(delta);
                let scheduled_for_deletion: HashSet<_> =
                    self.scheduled_for_deletion_nodes().collect();
                let delta = self.cluster_state.compute_partial_delta_scoped(
                    &digest,
                    MAX_UDP_DATAGRAM_PAYLOAD_SIZE - 1,
                    &scheduled_for_deletion,
                    Some(mask),
                );
                Some(ChitchatMessage::Ack { delta })
            }
            ChitchatMessage::BadCluster => {
                warn!("message rejected by peer: wrong cluster");
                None
            }
            #[cfg(test)]
            ChitchatMessage::PanicForTest => {
                panic!("panic message received");
            }
        }
    }

    fn gc_keys_marked_for_deletion(&mut self) {
        self.cluster_state
            .gc_keys_marked_for_deletion(self.config.marked_for_deletion_grace_period);
    }

    /// Reports heartbeats to the failure detector for nodes in the delta for which we received an
    /// update.
    fn report_heartbeat(&mut self, chitchat_id: &ChitchatId, heartbeat: Heartbeat) {
        if chitchat_id == self.self_chitchat_id() {
            return;
        }

        let should_init_if_absent = self
            .cluster_state
            .last_heartbeat_if_deleted(chitchat_id)
            .map(|last_heartbeat| last_heartbeat < heartbeat)
            .unwrap_or(true);

        let node_state = if should_init_if_absent {
            self.cluster_state.node_state_mut_or_init(chitchat_id)
        } else if let Some(node_state) = self.cluster_state.node_state_mut(chitchat_id) {
            node_state
        } else {
            return;
        };

        let has_state = node_state.max_version() > 0;
        if node_state.try_set_heartbeat(heartbeat) {
            self.failure_detector.report_heartbeat(chitchat_id);
        }
        // Shoal patch: with external liveness a node is live from when its state is first
        // known, not from the end of the next gossip round.
        if self.failure_detector.external_liveness() {
            let now = tokio::time::Instant::now();
            let _ = self
                .failure_detector
                .update_node_liveness_at(chitchat_id, now, has_state);
        }
    }

    /// Marks the node as dead or alive depending on the new phi values and updates the live nodes
    /// watcher accordingly.
    pub(crate) fn update_nodes_liveness(&mut self) {
        // Shoal patch: one reading of the clock for every node of the round, and the live set
        // compared with the previous one in the same pass (it is the same on almost every
        // round), before any new map is built.
        let now = tokio::time::Instant::now();
        let self_id = &self.config.chitchat_id;
        let (mut same, mut count) = (true, 0usize);
        for (chitchat_id, node_state) in self.cluster_state.node_states() {
            let alive = chitchat_id == self_id
                || self.failure_detector.update_node_liveness_at(
                    chitchat_id,
                    now,
                    node_state.max_version() > 0,
                );
            if alive {
                count += 1;
                same &=
                    self.previous_live_nodes.get(chitchat_id) == Some(&node_state.max_version());
            }
        }
        // A live id without a node state (not expected) takes the original path and its warning.
        let every_live_has_state = count == self.failure_detector.live_nodes_len() + 1;
        let unchanged = every_live_has_state && same && count == self.previous_live_nodes.len();
        if !unchanged {
            let current_live_nodes = self
                .live_nodes()
                .flat_map(|chitchat_id| {
                    if let Some(node_state) = self.node_state(chitchat_id) {
                        return Some((chitchat_id.clone(), node_state.max_version()));
                    }
                    warn!("node state for {chitchat_id:?} is absent");
                    None
                })
                .collect::<fxhash::FxHashMap<_, _>>();

            if self.previous_live_nodes != current_live_nodes {
                self.previous_live_nodes = current_live_nodes;
                let mut ids: Vec<ChitchatId> =
                    self.live_passing().map(|(id, _)| id.clone()).collect();
                ids.sort_unstable();
                self.live_ids_tx.send_if_modified(|held| {
                    let moved = *held != ids;
                    if moved {
                        *held = ids;
                    }
                    moved
                });
                if self.live_nodes_watcher_tx.receiver_count() > 1 {
                    self.send_live_states();
                } else {
                    self.live_states_stale
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        // Perform garbage collection.
        let garbage_collected_nodes = self.failure_detector.garbage_collect();
        for chitchat_id in &garbage_collected_nodes {
            if chitchat_id != self.self_chitchat_id() {
                self.cluster_state.remove_node(chitchat_id);
            } else {
                error!("self node was marked dead, please report");
            }
        }
    }

    pub fn node_states(&self) -> &BTreeMap<ChitchatId, NodeState> {
        self.cluster_state.node_states()
    }

    /// Shoal patch: compact gossip. On, this node's Syns carry one hash per bucket of node ids
    /// instead of every node's digest, and a peer answers only the buckets that differ
    /// (`compact`). Heartbeats then no longer spread every round: pair it with
    /// [`Self::set_external_liveness`]. Either mode answers both kinds of Syn.
    pub fn set_compact(&mut self, on: bool) {
        self.compact = on;
    }

    /// Shoal patch: quiet fanout. How many live peers this round's Syns go to, called once per
    /// round. Not compact, [`GOSSIP_COUNT`] as published. Compact, [`GOSSIP_COUNT`] while this
    /// node's bucket hashes moved within the last [`QUIET_ROUNDS`] rounds (it wrote, or learned,
    /// something: it pushes it to as many peers as before), [`QUIET_GOSSIP_COUNT`] once they
    /// have not: at rest a Syn whose hashes match is answered by nothing, so the extra peers cost
    /// a message and an acknowledgement each and tell nothing, while the one peer still asked
    /// each round pulls what a busy peer has.
    pub fn gossip_fanout(&mut self) -> usize {
        if !self.compact {
            self.round_hashes = None;
            self.rounds_unchanged = 0;
            return GOSSIP_COUNT;
        }
        let scheduled_for_deletion: HashSet<_> = self.scheduled_for_deletion_nodes().collect();
        let hashes = self
            .cluster_state
            .compute_bucket_hashes(&scheduled_for_deletion);
        if self.round_hashes == Some(hashes) {
            self.rounds_unchanged = self.rounds_unchanged.saturating_add(1);
        } else {
            self.round_hashes = Some(hashes);
            self.rounds_unchanged = 0;
        }
        if self.rounds_unchanged >= QUIET_ROUNDS {
            QUIET_GOSSIP_COUNT
        } else {
            GOSSIP_COUNT
        }
    }

    /// Shoal patch: whether this node's Syns are compact.
    pub fn is_compact(&self) -> bool {
        self.compact
    }

    /// Shoal patch: whether liveness is told from outside ([`Self::report_liveness`]) instead
    /// of by the phi accrual detector over heartbeats. On, every node is live until reported
    /// dead; dead nodes are forgotten after `dead_node_grace_period` as before. Off again, the
    /// reports are forgotten and heartbeats decide.
    pub fn set_external_liveness(&mut self, on: bool) {
        self.failure_detector.set_external_liveness(on);
        self.update_node_sets();
    }

    /// Shoal patch: with external liveness, reports `chitchat_id` alive or dead. The live and
    /// dead sets change at once; the live-nodes watcher hears of it after the next gossip
    /// round. Without external liveness, a no-op.
    pub fn report_liveness(&mut self, chitchat_id: &ChitchatId, alive: bool) {
        if chitchat_id == self.self_chitchat_id()
            || !self.failure_detector.external_liveness()
            || self.node_state(chitchat_id).is_none()
        {
            return;
        }
        self.failure_detector.report_liveness(chitchat_id, alive);
        let now = tokio::time::Instant::now();
        let has_state = self
            .node_state(chitchat_id)
            .is_some_and(|state| state.max_version() > 0);
        let _ = self
            .failure_detector
            .update_node_liveness_at(chitchat_id, now, has_state);
    }

    /// Shoal patch: the failure detector's live and dead sets brought up to date for every
    /// node, without notifying the watcher or collecting garbage.
    fn update_node_sets(&mut self) {
        let now = tokio::time::Instant::now();
        let self_id = &self.config.chitchat_id;
        for (chitchat_id, node_state) in self.cluster_state.node_states() {
            if chitchat_id != self_id {
                let _ = self.failure_detector.update_node_liveness_at(
                    chitchat_id,
                    now,
                    node_state.max_version() > 0,
                );
            }
        }
    }

    pub fn node_state(&self, chitchat_id: &ChitchatId) -> Option<&NodeState> {
        self.cluster_state.node_state(chitchat_id)
    }

    pub fn self_node_state(&mut self) -> &mut NodeState {
        self.cluster_state
            .self_state_mut(&self.config.chitchat_id)
    }

    /// Returns the set of nodes considered alive by the failure detector. It includes the
    /// current node (also called "self node"), which is always considered alive.
    pub fn live_nodes(&self) -> impl Iterator<Item = &ChitchatId> {
        once(self.self_chitchat_id()).chain(self.failure_detector.live_nodes())
    }

    /// Shoal patch: a number that moves whenever another node's state (its key-values, versions
    /// or heartbeat) or its liveness may have changed, or a node state came or went; this
    /// node's own writes do not move it. A reader that saw the same stamp may skip reading
    /// [`Self::node_states`] and [`Self::is_live`] again.
    pub fn state_stamp(&self) -> u64 {
        self.cluster_state
            .stamp()
            .wrapping_add(self.failure_detector.moves())
    }

    /// Shoal patch: whether `chitchat_id` is among [`Self::live_nodes`], without walking them.
    pub fn is_live(&self, chitchat_id: &ChitchatId) -> bool {
        *chitchat_id == self.config.chitchat_id || self.failure_detector.is_live(chitchat_id)
    }

    /// Returns a watch stream for monitoring changes in the cluster.
    ///
    /// The stream will emit a new value whenever a node:
    /// - joins the cluster
    /// - leaves the cluster
    /// - updates its max version
    ///
    /// Heartbeats are not notified.
    pub fn live_nodes_watch_stream(&self) -> WatchStream<BTreeMap<ChitchatId, NodeState>> {
        WatchStream::new(self.live_nodes_watcher())
    }

    pub fn live_nodes_watcher(&self) -> watch::Receiver<BTreeMap<ChitchatId, NodeState>> {
        if self
            .live_states_stale
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            self.send_live_states();
        }
        self.live_nodes_watcher_rx.clone()
    }

    /// Shoal patch: the ids of the live nodes (as [`Chitchat::live_nodes_watcher`] has them,
    /// sorted), without their states; sent when the set changes.
    pub fn live_node_ids_watcher(&self) -> watch::Receiver<Vec<ChitchatId>> {
        self.live_ids_tx.subscribe()
    }

    /// Shoal patch: the live nodes that pass the extra liveness predicate, with their states,
    /// as the states watcher carries them.
    fn live_states(&self) -> BTreeMap<ChitchatId, NodeState> {
        self.live_passing()
            .map(|(id, state)| (id.clone(), state.clone()))
            .collect()
    }

    /// Shoal patch: the live nodes that pass the extra liveness predicate, unordered.
    fn live_passing(&self) -> impl Iterator<Item = (&ChitchatId, &NodeState)> {
        self.previous_live_nodes.keys().filter_map(|chitchat_id| {
            let node_state = self.node_state(chitchat_id)?;
            if let Some(liveness_extra_predicate) = &self.config.extra_liveness_predicate {
                if !liveness_extra_predicate(node_state) {
                    return None;
                }
            }
            Some((chitchat_id, node_state))
        })
    }

    fn send_live_states(&self) {
        if self.live_nodes_watcher_tx.send(self.live_states()).is_err() {
            error!(current_node = ?self.self_chitchat_id(), "error while reporting membership change event.")
        }
    }

    /// Returns the set of nodes considered dead by the failure detector.
    pub fn dead_nodes(&self) -> impl Iterator<Item = &ChitchatId> {
        self.failure_detector.dead_nodes()
    }

    /// Returns the set of nodes considered dead by the failure detector.
    pub fn scheduled_for_deletion_nodes(&self) -> impl Iterator<Item = &ChitchatId> {
        self.failure_detector.scheduled_for_deletion_nodes()
    }

    /// Returns the set of seed nodes.
    pub fn seed_nodes(&self) -> HashSet<SocketAddr> {
        self.cluster_state.seed_addrs()
    }

    pub fn cluster_id(&self) -> &str {
        &self.config.cluster_id
    }

    /// Returns the current node's Chitchat ID.
    pub fn self_chitchat_id(&self) -> &ChitchatId {
        &self.config.chitchat_id
    }

    /// Returns a serializable snapshot of the cluster state.
    pub fn state_snapshot(&self) -> ClusterStateSnapshot {
        ClusterStateSnapshot::from(&self.cluster_state)
    }

    /// Fast forward the entire node state.
    ///
    /// This method is meant to be called as a follow up to a
    /// [`ChitchatConfig::catchup_callback`], to communicate back the caught up
    /// state to Chitchat.
    ///
    /// Updated key-values will see their listeners called. The order of calls
    /// is arbitrary.
    ///
    /// Existing key-values that are not present in `key_values` will be deleted
    /// (not marked with a tombstone).
    ///
    /// A node state that doesn't exist will be created, except if it was
    /// recently deleted and garbage collected. We leave the responsibility of
    /// forcing the garbage collected node's recreation to the regular chitchat
    /// heartbeat protocol.
    pub fn reset_node_state_if_update(
        &mut self,
        chitchat_id: &ChitchatId,
        key_values: impl Iterator<Item = (String, VersionedValue)>,
        max_version: Version,
        last_gc_version: Version,
    ) {
        let should_init_if_absent = self
            .cluster_state
            .last_heartbeat_if_deleted(chitchat_id)
            .is_none();

        let node_state = if should_init_if_absent {
            self.cluster_state.node_state_mut_or_init(chitchat_id)
        } else if let Some(node_state) = self.cluster_state.node_state_mut(chitchat_id) {
            node_state
        } else {
            info!("skip reset_node_state because the node was recently garbage collected");
            return;
        };

        let monotonic_property_before: (Version, Version) = node_state.monotonic_property();
        let monotonic_property_if_we_applied_reset_state: (Version, Version) =
            (last_gc_version, max_version);

        if monotonic_property_before >= monotonic_property_if_we_applied_reset_state {
            // If we reach this point, we had a race condition and went through a reset via chitchat
            // gossip.
            // Now we are trying to reset our state via grpc gossip, but the new state is already
            // be out of date.
            warn!(
                node_max_version = node_state.max_version(),
                node_last_gc_version = node_state.last_gc_version(),
                delta_max_version = max_version,
                delta_last_gc_version = last_gc_version,
                "attempted to reset node with an obsolete state (rare race condition)"
            );
            return;
        }

        // We make sure that the node is listed in the failure detector,
        // so that we won't forget to GC the state.
        //
        // We don't report the heartbeat however, to make sure that we
        // avoid identifying resetted node as alive.
        self.failure_detector
            .get_or_create_sampling_window(chitchat_id);

        node_state.set_max_version(max_version);

        // We don't want to call listeners for keys that are already up to date so we must do this
        // dance instead of clearing the node state and then setting the new values.
        let mut previous_keys: HashSet<String> = node_state
            .key_values_including_deleted()
            .map(|(key, _)| key.to_string())
            .collect();
        for (key, value) in key_values {
            previous_keys.remove(&key);
            node_state.set_versioned_value(key, value)
        }
        for key in previous_keys {
            node_state.remove_key_value_internal(&key);
        }
        node_state.set_last_gc_version(last_gc_version);

        let monotonic_property_after = node_state.monotonic_property();

        assert!(monotonic_property_after > monotonic_property_before);
    }

    pub(crate) fn update_self_heartbeat(&mut self) {
        self.self_node_state().inc_heartbeat();
    }

    pub(crate) fn cluster_state(&self) -> &ClusterState {
        &self.cluster_state
    }

    /// Computes the node's digest.
    fn compute_digest(&self, scheduled_for_deletion_nodes: &HashSet<&ChitchatId>) -> Digest {
        self.cluster_state
            .compute_digest(scheduled_for_deletion_nodes)
    }

    /// Subscribes a callback that will be called every time a key matching the supplied prefix
    /// is inserted or updated.
    ///
    /// Disclaimer:
    /// The callback is required to be as light as possible.
    /// In particular,
    /// - it should not access the cluster state (as it is locked at the moment of the execution of
    ///   the callback.
    /// - it should be fast: the callback is executed in an async context.
    ///
    /// The callback is called with a [`KeyChangeEvent`] that contains the key stripped of the
    /// prefix, the new value and the node that owns this key/value.
    ///
    /// Deleted keys are not notified.
    #[must_use]
    pub fn subscribe_event(
        &self,
        key_prefix: impl ToString,
        callback: impl Fn(KeyChangeEvent) + 'static + Send + Sync,
    ) -> ListenerHandle {
        self.cluster_state()
            .listeners
            .subscribe_event(key_prefix, callback)
    }
}

#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct KeyChangeEvent<'a> {
    /// The matching key without the prefix used to subscribe to the event.
    pub key: &'a str,
    /// The new value.
    pub value: &'a str,
    /// The node for which the event was triggered.
    pub node: &'a ChitchatId,
}

impl KeyChangeEvent<'_> {
    fn strip_key_prefix(&self, prefix: &str) -> Option<KeyChangeEvent<'_>> {
        let key_without_prefix = self.key.strip_prefix(prefix)?;
        Some(KeyChangeEvent {
            key: key_without_prefix,
            value: self.value,
            node: self.node,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::ops::{Add, RangeInclusive};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use rand::RngExt;
    use rand::distr::Alphanumeric;
    use tokio::sync::Mutex;
    use tokio::time;
    use tokio_stream::StreamExt;

    use super::*;
    use crate::server::{ChitchatHandle, spawn_chitchat};
    use crate::transport::{ChannelTransport, Transport};

    const DEAD_NODE_GRACE_PERIOD: Duration = Duration::from_secs(20);

    fn run_chitchat_handshake(initiating_node: &mut Chitchat, peer_node: &mut Chitchat) {
        let syn_message = initiating_node.create_syn_message();
        let syn_ack_message = peer_node.process_message(syn_message).unwrap();
        let ack_message = initiating_node.process_message(syn_ack_message).unwrap();
        assert!(peer_node.process_message(ack_message).is_none());
    }

    /// Checks that all of the non-deleted key-values pairs are the same in
    /// lhs and rhs.
    ///
    /// This does NOT check for deleted KVs.
    #[track_caller]
    fn assert_cluster_state_eq(lhs: &NodeState, rhs: &NodeState) {
        assert_eq!(lhs.num_key_values(), rhs.num_key_values());
        for (key, value) in lhs.key_values() {
            assert_eq!(rhs.get(key), Some(value));
        }
    }

    #[track_caller]
    fn assert_nodes_sync(nodes: &[&Chitchat]) {
        let first_node_states = nodes[0].cluster_state.node_states();
        for other_node in nodes.iter().skip(1) {
            let node_states = other_node.cluster_state.node_states();
            assert_eq!(first_node_states.len(), node_states.len());
            for (key, value) in first_node_states {
                assert_cluster_state_eq(value, node_states.get(key).unwrap());
            }
        }
    }

    async fn start_node_with_config(
        transport: &dyn Transport,
        config: ChitchatConfig,
    ) -> ChitchatHandle {
        let initial_kvs: Vec<(String, String)> = Vec::new();
        spawn_chitchat(config, initial_kvs, transport)
            .await
            .unwrap()
    }

    async fn start_node(
        chitchat_id: ChitchatId,
        seeds: &[String],
        transport: &dyn Transport,
    ) -> ChitchatHandle {
        let config = ChitchatConfig {
            chitchat_id: chitchat_id.clone(),
            cluster_id: "default-cluster".to_string(),
            gossip_interval: Duration::from_millis(100),
            listen_addr: chitchat_id.gossip_advertise_addr,
            seed_nodes: seeds.to_vec(),
            failure_detector_config: FailureDetectorConfig {
                dead_node_grace_period: DEAD_NODE_GRACE_PERIOD,
                phi_threshold: 5.0,
                initial_interval: Duration::from_millis(100),
                ..Default::default()
            },
            marked_for_deletion_grace_period: Duration::from_secs(3_600),
            catchup_callback: None,
            extra_liveness_predicate: None,
        };
        start_node_with_config(transport, config).await
    }

    async fn setup_nodes(
        port_range: RangeInclusive<u16>,
        transport: &dyn Transport,
    ) -> Vec<ChitchatHandle> {
        let chitchat_ids: Vec<ChitchatId> = port_range.map(ChitchatId::for_local_test).collect();
        let node_without_seed = start_node(chitchat_ids[0].clone(), &[], transport).await;
        let mut chitchat_handlers: Vec<ChitchatHandle> = vec![node_without_seed];
        for chitchat_id in &chitchat_ids[1..] {
            let seeds = chitchat_ids
                .iter()
                .filter(|&peer_id| peer_id != chitchat_id)
                .map(|peer_id| peer_id.gossip_advertise_addr.to_string())
                .collect::<Vec<_>>();
            chitchat_handlers.push(start_node(chitchat_id.clone(), &seeds, transport).await);
        }
        chitchat_handlers
    }

    async fn shutdown_nodes(nodes: Vec<ChitchatHandle>) -> anyhow::Result<()> {
        for node in nodes {
            node.shutdown().await?;
        }
        Ok(())
    }

    async fn wait_for_chitchat_state(
        chitchat: Arc<Mutex<Chitchat>>,
        expected_nodes: &[ChitchatId],
    ) {
        let expected_nodes = expected_nodes.iter().collect::<HashSet<_>>();
        let mut live_nodes_watcher =
            chitchat
                .lock()
                .await
                .live_nodes_watch_stream()
                .skip_while(|live_nodes| {
                    if live_nodes.len() != expected_nodes.len() {
                        return true;
                    }
                    let live_nodes = live_nodes.keys().collect::<HashSet<_>>();
                    live_nodes != expected_nodes
                });
        tokio::time::timeout(Duration::from_secs(60), async move {
            live_nodes_watcher.next().await.unwrap();
        })
        .await
        .unwrap();
    }

    #[test]
    fn test_chitchat_handshake() {
        let node_config1 = ChitchatConfig::for_test(10_001);
        let empty_seeds = watch::channel(Default::default()).1;
        let mut node1 = Chitchat::with_chitchat_id_and_seeds(
            node_config1,
            empty_seeds.clone(),
            vec![
                ("key1a".to_string(), "1".to_string()),
                ("key2a".to_string(), "2".to_string()),
            ],
        );
        let node_config2 = ChitchatConfig::for_test(10_002);
        let mut node2 = Chitchat::with_chitchat_id_and_seeds(
            node_config2,
            empty_seeds,
            vec![
                ("key1b".to_string(), "1".to_string()),
                ("key2b".to_string(), "2".to_string()),
            ],
        );
        run_chitchat_handshake(&mut node1, &mut node2);
        assert_nodes_sync(&[&node1, &node2]);
        // useless handshake
        run_chitchat_handshake(&mut node1, &mut node2);
        assert_nodes_sync(&[&node1, &node2]);
        {
            let state1 = node1.self_node_state();
            state1.set("key1a", "3");
            state1.set("key1c", "4");
        }
        run_chitchat_handshake(&mut node1, &mut node2);
        assert_nodes_sync(&[&node1, &node2]);
    }

    #[test]
    fn test_chitchat_dead_node_liveness() {
        let node_config1 = ChitchatConfig::for_test(10_001);
        let empty_seeds = watch::channel(Default::default()).1;
        let mut node1 =
            Chitchat::with_chitchat_id_and_seeds(node_config1, empty_seeds.clone(), Vec::new());
        let chitchat_id = ChitchatId::for_local_test(10u16);
        node1.reset_node_state_if_update(&chitchat_id, std::iter::empty(), 10_000, 10u64);
        node1.report_heartbeat(&chitchat_id, Heartbeat(10_000u64));
        node1.report_heartbeat(&chitchat_id, Heartbeat(10_000u64));
        node1.update_nodes_liveness();
        let live_nodes: HashSet<&ChitchatId> = node1.live_nodes().collect();
        assert_eq!(live_nodes.len(), 1);
    }

    #[tokio::test]
    async fn test_chitchat_no_need_to_reset_if_last_gc_version_is_higher() {
        // This test checks what happens if a node is trailing behind too much,
        // needs a reset, and a single delta would:
        // - not increase its max version after reset.
        // - not even bring the state to a max_version >= last_gc_version
        setup_tracing_for_tests();
        tokio::time::pause();
        let node_config1 = ChitchatConfig::for_test(10_001);
        let empty_seeds = watch::channel(Default::default()).1;
        let mut node1 =
            Chitchat::with_chitchat_id_and_seeds(node_config1, empty_seeds.clone(), vec![]);
        let node_config2 = ChitchatConfig::for_test(10_002);
        let mut node2 = Chitchat::with_chitchat_id_and_seeds(node_config2, empty_seeds, vec![]);
        // Because of compression, we need a lot of keys to reach the MTU.
        for i in 0..20_000 {
            let key = format!("k{}", i);
            node1.self_node_state().set(&key, "first_value");
        }
        for _ in 0..2 {
            run_chitchat_handshake(&mut node1, &mut node2);
        }

        assert_nodes_sync(&[&node1, &node2]);

        node1.self_node_state().delete("k1");

        // Advance time before triggering the GC of that deleted key
        tokio::time::advance(Duration::from_secs(3_600 * 3)).await;
        node1.gc_keys_marked_for_deletion();

        for _ in 0..2 {
            run_chitchat_handshake(&mut node1, &mut node2);
        }

        assert_nodes_sync(&[&node1, &node2]);
    }

    #[tokio::test]
    async fn test_live_node_channel() {
        let transport = ChannelTransport::with_mtu(MAX_UDP_DATAGRAM_PAYLOAD_SIZE);
        let nodes = setup_nodes(20001..=20005, &transport).await;
        let node2 = nodes.get(1).unwrap();
        let mut live_nodes_stream = node2.chitchat().lock().await.live_nodes_watch_stream();
        let live_members = loop {
            let live_nodes = live_nodes_stream.next().await.unwrap();
            if live_nodes.len() == 5 {
                break live_nodes;
            }
        };
        for node in &nodes {
            assert!(live_members.contains_key(node.chitchat_id()));
        }
        shutdown_nodes(nodes).await.unwrap();
    }

    #[tokio::test]
    async fn test_live_node_channel_with_extra_predicate() {
        let transport = ChannelTransport::with_mtu(MAX_UDP_DATAGRAM_PAYLOAD_SIZE);
        let chitchat_ids: Vec<ChitchatId> = (1..=3).map(ChitchatId::for_local_test).collect();
        let make_config = |chitchat_id: &ChitchatId| ChitchatConfig {
            chitchat_id: chitchat_id.clone(),
            cluster_id: "default-cluster".to_string(),
            gossip_interval: Duration::from_millis(100),
            listen_addr: chitchat_id.gossip_advertise_addr,
            seed_nodes: vec![chitchat_ids[0].gossip_advertise_addr.to_string()],
            failure_detector_config: FailureDetectorConfig {
                dead_node_grace_period: DEAD_NODE_GRACE_PERIOD,
                phi_threshold: 5.0,
                initial_interval: Duration::from_millis(100),
                ..Default::default()
            },
            marked_for_deletion_grace_period: Duration::from_secs(3_600),
            catchup_callback: None,
            extra_liveness_predicate: Some(Box::new(|node_state| {
                node_state.get("READY") == Some("true")
            })),
        };
        let mut nodes = Vec::new();
        for chitchat_id in &chitchat_ids {
            let config = make_config(chitchat_id);
            let chitchat_handle = start_node_with_config(&transport, config).await;
            nodes.push(chitchat_handle);
        }

        let mut num_live_nodes = 0;
        assert!(
            tokio::time::timeout(Duration::from_secs(1), async {
                let mut live_nodes_stream =
                    nodes[2].chitchat().lock().await.live_nodes_watch_stream();
                loop {
                    let live_nodes = live_nodes_stream.next().await.unwrap();
                    num_live_nodes = live_nodes.len();
                    if live_nodes.len() == 3 {
                        break live_nodes;
                    }
                }
            })
            .await
            .is_err()
        );
        assert_eq!(num_live_nodes, 0);

        nodes[0]
            .chitchat()
            .lock()
            .await
            .self_node_state()
            .set("READY", "true");
        nodes[1]
            .chitchat()
            .lock()
            .await
            .self_node_state()
            .set("READY", "true");
        nodes[2]
            .chitchat()
            .lock()
            .await
            .self_node_state()
            .set("READY", "true");

        let mut live_nodes_stream = nodes[2].chitchat().lock().await.live_nodes_watch_stream();
        let live_members = loop {
            let live_nodes = live_nodes_stream.next().await.unwrap();
            if live_nodes.len() == 3 {
                break live_nodes;
            }
        };
        for node in &nodes {
            assert!(live_members.contains_key(node.chitchat_id()));
        }

        nodes[0]
            .chitchat()
            .lock()
            .await
            .self_node_state()
            .delete("READY");

        let live_members = loop {
            let live_nodes = live_nodes_stream.next().await.unwrap();
            if live_nodes.len() == 2 {
                break live_nodes;
            }
        };
        assert!(live_members.contains_key(&chitchat_ids[1]));
        assert!(live_members.contains_key(&chitchat_ids[2]));

        nodes[1]
            .chitchat()
            .lock()
            .await
            .self_node_state()
            .set("READY", "false");

        let live_members = loop {
            let live_nodes = live_nodes_stream.next().await.unwrap();
            if live_nodes.len() == 1 {
                break live_nodes;
            }
        };

        assert!(live_members.contains_key(&chitchat_ids[2]));

        shutdown_nodes(nodes).await.unwrap();
    }

    #[tokio::test]
    async fn test_multiple_nodes() -> anyhow::Result<()> {
        let transport = ChannelTransport::with_mtu(MAX_UDP_DATAGRAM_PAYLOAD_SIZE);
        let nodes = setup_nodes(20001..=20005, &transport).await;

        let node2 = nodes.get(1).unwrap();
        assert_eq!(node2.chitchat_id().advertise_port(), 20002);
        wait_for_chitchat_state(
            node2.chitchat(),
            &[
                ChitchatId::for_local_test(20001),
                ChitchatId::for_local_test(20002),
                ChitchatId::for_local_test(20003),
                ChitchatId::for_local_test(20004),
                ChitchatId::for_local_test(20005),
            ],
        )
        .await;

        shutdown_nodes(nodes).await?;
        Ok(())
    }

    #[tokio::test]
    async fn test_node_goes_from_live_to_down_to_live() -> anyhow::Result<()> {
        let transport = ChannelTransport::with_mtu(MAX_UDP_DATAGRAM_PAYLOAD_SIZE);
        let mut nodes = setup_nodes(30001..=30006, &transport).await;
        wait_for_chitchat_state(
            nodes[0].chitchat(),
            &[
                ChitchatId::for_local_test(30001),
                ChitchatId::for_local_test(30002),
                ChitchatId::for_local_test(30003),
                ChitchatId::for_local_test(30004),
                ChitchatId::for_local_test(30005),
                ChitchatId::for_local_test(30006),
            ],
        )
        .await;

        // Take node 3 down.
        let node3 = nodes.remove(2);
        assert_eq!(node3.chitchat_id().advertise_port(), 30003);
        node3.shutdown().await.unwrap();

        let node2 = nodes.get(1).unwrap();
        assert_eq!(node2.chitchat_id().advertise_port(), 30002);
        wait_for_chitchat_state(
            node2.chitchat(),
            &[
                ChitchatId::for_local_test(30001),
                ChitchatId::for_local_test(30002),
                ChitchatId::for_local_test(30004),
                ChitchatId::for_local_test(30005),
                ChitchatId::for_local_test(30006),
            ],
        )
        .await;

        // Restart node 3.
        let node_3 = ChitchatId::for_local_test(30003);
        nodes.push(
            start_node(
                node_3,
                &[ChitchatId::for_local_test(30_001)
                    .gossip_advertise_addr
                    .to_string()],
                &transport,
            )
            .await,
        );
        wait_for_chitchat_state(
            nodes[0].chitchat(),
            &[
                ChitchatId::for_local_test(30001),
                ChitchatId::for_local_test(30002),
                ChitchatId::for_local_test(30003),
                ChitchatId::for_local_test(30004),
                ChitchatId::for_local_test(30005),
                ChitchatId::for_local_test(30006),
            ],
        )
        .await;

        shutdown_nodes(nodes).await?;
        Ok(())
    }

    #[tokio::test]
    async fn test_dead_node_kvs_are_gossiped_too_when_node_joins() -> anyhow::Result<()> {
        let transport = ChannelTransport::with_mtu(MAX_UDP_DATAGRAM_PAYLOAD_SIZE);
        // starting 2 nodes.
        let mut nodes = setup_nodes(40001..=40002, &transport).await;

        // Let's add a key to node1.
        let node1_id = {
            let node1 = nodes.first().unwrap();
            let node1_chitchat = node1.chitchat();
            node1_chitchat
                .lock()
                .await
                .self_node_state()
                .set("test_key", "test_val");
            node1.chitchat_id().clone()
        };

        {
            let node2 = nodes.get(1).unwrap();
            assert_eq!(node2.chitchat_id().advertise_port(), 40002);
            wait_for_chitchat_state(
                node2.chitchat(),
                &[
                    ChitchatId::for_local_test(40001),
                    ChitchatId::for_local_test(40002),
                ],
            )
            .await;
            let node2_chitchat = node2.chitchat();
            // We have received node1's key
            let value = node2_chitchat
                .lock()
                .await
                .node_state(&node1_id)
                .unwrap()
                .get("test_key")
                .unwrap()
                .to_string();
            assert_eq!(&value, "test_val");
        }

        // Take node 1 down.
        let node1 = nodes.remove(0);
        assert_eq!(node1.chitchat_id().advertise_port(), 40_001);
        node1.shutdown().await.unwrap();

        // Node 2 has detected that node 1 is missing.
        let node_id2 = {
            let node2 = nodes.first().unwrap();
            assert_eq!(node2.chitchat_id().advertise_port(), 40_002);
            wait_for_chitchat_state(node2.chitchat(), &[ChitchatId::for_local_test(40_002)]).await;
            node2.chitchat_id().clone()
        };

        // Restart node at localhost:40001 with new name
        let mut new_config = ChitchatConfig::for_test(40_001);
        new_config.chitchat_id.node_id = Arc::from("new_node");
        let new_chitchat_id = new_config.chitchat_id.clone();
        let seed_addr = ChitchatId::for_local_test(40_002).gossip_advertise_addr;
        new_config.seed_nodes = vec![seed_addr.to_string()];
        let new_node_chitchat_handle = spawn_chitchat(new_config, Vec::new(), &transport)
            .await
            .unwrap();
        let new_node_chitchat = new_node_chitchat_handle.chitchat();
        wait_for_chitchat_state(
            new_node_chitchat.clone(),
            &[new_chitchat_id.clone(), node_id2.clone()],
        )
        .await;

        {
            let new_node_chitchat_guard = new_node_chitchat.lock().await;
            let test_val = new_node_chitchat_guard
                .node_state(&node1_id)
                .unwrap()
                .get("test_key")
                .unwrap();
            assert_eq!(test_val, "test_val");

            // Let's check that node1 is seen as dead.
            let dead_nodes: HashSet<&ChitchatId> = new_node_chitchat_guard.dead_nodes().collect();
            assert_eq!(dead_nodes.len(), 1);
            assert!(dead_nodes.contains(&node1_id));
        }

        nodes.push(new_node_chitchat_handle);
        shutdown_nodes(nodes).await?;
        Ok(())
    }

    #[tokio::test]
    async fn test_network_partition_nodes() -> anyhow::Result<()> {
        let transport = ChannelTransport::with_mtu(MAX_UDP_DATAGRAM_PAYLOAD_SIZE);
        let port_range = 11_001u16..=11_006;
        let nodes = setup_nodes(port_range.clone(), &transport).await;

        // Check nodes know each other.
        for node in &nodes {
            let expected_peers: Vec<ChitchatId> = port_range
                .clone()
                .map(ChitchatId::for_local_test)
                .collect::<Vec<_>>();
            wait_for_chitchat_state(node.chitchat(), &expected_peers).await;
        }
        shutdown_nodes(nodes).await?;
        Ok(())
    }

    #[tokio::test]
    async fn test_dead_node_garbage_collection() -> anyhow::Result<()> {
        let transport = ChannelTransport::with_mtu(MAX_UDP_DATAGRAM_PAYLOAD_SIZE);
        let mut nodes = setup_nodes(60001..=60006, &transport).await;
        let node2 = nodes.get(1).unwrap();
        assert_eq!(node2.chitchat_id().advertise_port(), 60002);
        wait_for_chitchat_state(
            node2.chitchat(),
            &[
                ChitchatId::for_local_test(60_001),
                ChitchatId::for_local_test(60_002),
                ChitchatId::for_local_test(60_003),
                ChitchatId::for_local_test(60_004),
                ChitchatId::for_local_test(60_005),
                ChitchatId::for_local_test(60_006),
            ],
        )
        .await;

        // Take node 3 down.
        let node3 = nodes.remove(2);
        assert_eq!(node3.chitchat_id().advertise_port(), 60003);
        node3.shutdown().await.unwrap();

        let node2 = nodes.get(1).unwrap();
        assert_eq!(node2.chitchat_id().advertise_port(), 60002);
        wait_for_chitchat_state(
            node2.chitchat(),
            &[
                ChitchatId::for_local_test(60_001),
                ChitchatId::for_local_test(60_002),
                ChitchatId::for_local_test(60_004),
                ChitchatId::for_local_test(60_005),
                ChitchatId::for_local_test(60_006),
            ],
        )
        .await;

        // Dead node should still be known to the cluster.
        let dead_chitchat_id = ChitchatId::for_local_test(60003);
        for node in &nodes {
            assert!(
                node.chitchat()
                    .lock()
                    .await
                    .node_state(&dead_chitchat_id)
                    .is_some()
            );
        }

        // Wait a bit more than `dead_node_grace_period` since all nodes will not
        // notice cluster change at the same time.
        let wait_for = DEAD_NODE_GRACE_PERIOD.add(Duration::from_secs(5));
        time::sleep(wait_for).await;

        // Dead node should no longer be known to the cluster.
        for node in &nodes {
            assert!(
                node.chitchat()
                    .lock()
                    .await
                    .node_state(&dead_chitchat_id)
                    .is_none()
            );
        }

        shutdown_nodes(nodes).await?;
        Ok(())
    }

    #[test]
    fn test_chitchat_listener() {
        let node_config1 = ChitchatConfig::for_test(10_001);
        let empty_seeds = watch::channel(Default::default()).1;
        let mut node1 = Chitchat::with_chitchat_id_and_seeds(
            node_config1,
            empty_seeds.clone(),
            vec![("self1:suffix1".to_string(), "hello1".to_string())],
        );
        let counter_self_key: Arc<AtomicUsize> = Default::default();
        let counter_other_key: Arc<AtomicUsize> = Default::default();

        let counter_self_key_clone = counter_self_key.clone();
        node1
            .subscribe_event("self1:", move |evt| {
                assert_eq!(evt.key, "suffix1");
                assert_eq!(evt.value, "updated");
                counter_self_key_clone.fetch_add(1, Ordering::SeqCst);
            })
            .forever();
        let counter_other_key_clone = counter_other_key.clone();
        node1
            .subscribe_event("other:", move |evt| {
                assert_eq!(evt.key, "suffix");
                assert_eq!(evt.value, "hello");
                counter_other_key_clone.fetch_add(1, Ordering::SeqCst);
            })
            .forever();

        let counter_self_key_clone = counter_self_key.clone();
        node1
            .subscribe_event("self2:", move |evt| {
                assert_eq!(evt.key, "suffix2");
                assert_eq!(evt.value, "hello2");
                counter_self_key_clone.fetch_add(1, Ordering::SeqCst);
            })
            .forever();

        let node_config2 = ChitchatConfig::for_test(10_002);
        let mut node2 = Chitchat::with_chitchat_id_and_seeds(
            node_config2,
            empty_seeds,
            vec![("other:suffix".to_string(), "hello".to_string())],
        );

        assert_eq!(counter_self_key.load(Ordering::SeqCst), 0);
        assert_eq!(counter_other_key.load(Ordering::SeqCst), 0);

        run_chitchat_handshake(&mut node1, &mut node2);
        assert_nodes_sync(&[&node1, &node2]);

        assert_eq!(counter_self_key.load(Ordering::SeqCst), 0);
        assert_eq!(counter_other_key.load(Ordering::SeqCst), 1);

        // useless handshake
        run_chitchat_handshake(&mut node1, &mut node2);

        assert_eq!(counter_self_key.load(Ordering::SeqCst), 0);
        assert_eq!(counter_other_key.load(Ordering::SeqCst), 1);

        node1.self_node_state().set("self2:suffix2", "hello2");
        assert_eq!(counter_self_key.load(Ordering::SeqCst), 1);
        assert_eq!(counter_other_key.load(Ordering::SeqCst), 1);

        run_chitchat_handshake(&mut node1, &mut node2);

        assert_eq!(counter_self_key.load(Ordering::SeqCst), 1);
        assert_eq!(counter_other_key.load(Ordering::SeqCst), 1);

        node1.self_node_state().set("self1:suffix1", "updated");
        assert_eq!(counter_self_key.load(Ordering::SeqCst), 2);

        node1.self_node_state().delete("self1:suffix1");
        node2.self_node_state().delete("other:suffix");

        run_chitchat_handshake(&mut node1, &mut node2);

        assert_eq!(counter_self_key.load(Ordering::SeqCst), 2);
        assert_eq!(counter_other_key.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn test_maybe_trigger_catchup_callback() {
        let catchup_callback_counter = Arc::new(AtomicUsize::new(0));
        let catchup_callback_counter_clone = catchup_callback_counter.clone();

        let mut config = ChitchatConfig::for_test(10_001);
        config.catchup_callback = Some(Box::new(move || {
            catchup_callback_counter_clone.fetch_add(1, Ordering::Release);
        }));
        let (_seed_addrs_rx, seed_addrs_tx) = watch::channel(Default::default());

        let cluster_id = config.cluster_id.clone();
        let mut node: Chitchat =
            Chitchat::with_chitchat_id_and_seeds(config, seed_addrs_tx, Vec::new());

        // We dismiss delta about nodes we don't know about yet.
        // Let's add our peer to be able to run this test.
        let mut digest = Digest::default();
        let peer_id = ChitchatId::for_local_test(10_002);
        digest.add_node(peer_id, Heartbeat::default(), 10, 30);
        let _ = node.process_message(ChitchatMessage::Syn { cluster_id, digest });

        let delta = Delta::default();
        node.process_delta(delta);

        let mut delta = Delta::default();
        let chitchat_id = ChitchatId::for_local_test(10_002);
        delta.add_node(
            chitchat_id.clone(),
            1000u64, // last gc version
            0u64,
        );
        delta.add_kv(&chitchat_id, "key", "value", 1, false);
        node.process_delta(delta);

        assert_eq!(catchup_callback_counter.load(Ordering::Acquire), 1);
    }

    #[tokio::test]
    async fn test_reset_node_state() {
        let config = ChitchatConfig::for_test(10_001);
        let (_seed_addrs_rx, seed_addrs_tx) = watch::channel(Default::default());
        let mut node = Chitchat::with_chitchat_id_and_seeds(config, seed_addrs_tx, Vec::new());

        let chitchat_id = ChitchatId::for_local_test(10_002);
        node.reset_node_state_if_update(
            &chitchat_id,
            [(
                "foo".to_string(),
                VersionedValue::new("bar".to_string(), 1, false),
            )]
            .into_iter(),
            1,
            1337,
        );
        node.failure_detector.contains_node(&chitchat_id);

        let node_state = node.cluster_state.node_state(&chitchat_id).unwrap();
        assert_eq!(node_state.num_key_values(), 1);
        assert_eq!(node_state.get("foo"), Some("bar"));
        assert_eq!(node_state.max_version(), 1);
        assert_eq!(node_state.last_gc_version(), 1337);

        let chitchat_id = ChitchatId::for_local_test(10_003);
        let node_state = node.cluster_state.node_state_mut_or_init(&chitchat_id);
        node_state.set("foo", "bar");
        node_state.set("qux", "baz");
        node_state.set("toto", "titi");

        node.reset_node_state_if_update(
            &chitchat_id,
            [
                (
                    "qux".to_string(),
                    VersionedValue::new("baz".to_string(), 2, false),
                ),
                (
                    "toto".to_string(),
                    VersionedValue::new("tutu".to_string(), 4, false),
                ),
            ]
            .into_iter(),
            4,
            1337,
        );
        let node_state = node.cluster_state.node_state(&chitchat_id).unwrap();
        assert_eq!(node_state.num_key_values(), 2);
        assert_eq!(node_state.get("qux"), Some("baz"));
        assert_eq!(node_state.get("toto"), Some("tutu"));
        assert_eq!(node_state.max_version(), 4);
        assert_eq!(node_state.last_gc_version(), 1337);

        let chitchat_id = ChitchatId::for_local_test(10_004);
        let node_state = node.cluster_state.node_state_mut_or_init(&chitchat_id);
        node_state.set("foo", "bar");
        node_state.set("qux", "baz");
        node_state.set("toto", "titi");
        node.reset_node_state_if_update(
            &chitchat_id,
            [
                (
                    "foo".to_string(),
                    VersionedValue::new("bar".to_string(), 1, false),
                ),
                (
                    "qux".to_string(),
                    VersionedValue::new("baz".to_string(), 2, false),
                ),
            ]
            .into_iter(),
            2,
            1337,
        );
        let node_state = node.cluster_state.node_state(&chitchat_id).unwrap();
        assert_eq!(node_state.num_key_values(), 2);
        assert_eq!(node_state.get("foo"), Some("bar"));
        assert_eq!(node_state.get("qux"), Some("baz"));
        assert_eq!(node_state.max_version(), 2);
        assert_eq!(node_state.last_gc_version(), 1337);
    }

    // grpc/catchup path: between the time the catchup grpc is issued and the time it returns,
    // this node received a gossip-driven reset that advanced its `last_gc_version`
    // ahead of the (now stale) catchup source. The source has newer data
    // (`max_version` 120 > our 100) but an older GC horizon
    // (`last_gc_version` 80 < our 100).
    //
    // The reset must be rejected.
    #[tokio::test]
    async fn test_reset_node_state_does_not_regress_last_gc_version_reproduces_194() {
        let config = ChitchatConfig::for_test(10_010);
        let (_seed_addrs_rx, seed_addrs_tx) = watch::channel(Default::default());
        let mut node = Chitchat::with_chitchat_id_and_seeds(config, seed_addrs_tx, Vec::new());

        let chitchat_id = ChitchatId::for_local_test(10_011);
        let node_state = node.cluster_state.node_state_mut_or_init(&chitchat_id);
        node_state.set_max_version(100);
        node_state.set_last_gc_version(100);
        node.reset_node_state_if_update(
            &chitchat_id,
            [(
                "a".to_string(),
                VersionedValue::new("v".to_string(), 120, false),
            )]
            .into_iter(),
            120,
            80,
        );

        // The obsolete-gc snapshot is rejected and the node is left untouched.
        let node_state = node.cluster_state.node_state(&chitchat_id).unwrap();
        assert_eq!(node_state.max_version(), 100);
        assert_eq!(node_state.last_gc_version(), 100);
        assert_eq!(node_state.get("a"), None);
    }

    // Regression test: the catchup path must adopt the snapshot's `max_version`,
    // even when no live key-value reaches it.
    //
    // A node's `max_version` reflects the highest version among its key-values
    // *including tombstones*. Once tombstones past the grace period are GC'd,
    // `max_version` can exceed the highest *present* key-value version. So a
    // catchup snapshot can legitimately report `max_version` 100 while its
    // highest live key-value is only at version 50 (versions 51..100 were
    // deletions GC'd at the source).
    #[tokio::test]
    async fn test_reset_node_state_adopts_snapshot_max_version_reproduces_194() {
        let config = ChitchatConfig::for_test(10_012);
        let (_seed_addrs_rx, seed_addrs_tx) = watch::channel(Default::default());
        let mut node = Chitchat::with_chitchat_id_and_seeds(config, seed_addrs_tx, Vec::new());

        let chitchat_id = ChitchatId::for_local_test(10_013);
        let node_state = node.cluster_state.node_state_mut_or_init(&chitchat_id);
        node_state.set_versioned_value(
            "old".to_string(),
            VersionedValue::new("x".to_string(), 50, false),
        );
        node_state.set_last_gc_version(10);
        assert_eq!(node_state.max_version(), 50);

        node.reset_node_state_if_update(
            &chitchat_id,
            [(
                "a".to_string(),
                VersionedValue::new("v".to_string(), 50, false),
            )]
            .into_iter(),
            100,
            10,
        );

        let node_state = node.cluster_state.node_state(&chitchat_id).unwrap();
        assert_eq!(node_state.max_version(), 100);
        assert_eq!(node_state.last_gc_version(), 10);
        assert_eq!(node_state.get("a"), Some("v"));
        assert_eq!(node_state.get("old"), None);
    }

    #[tokio::test]
    async fn test_reset_garbage_collected_node_state() {
        tokio::time::pause();
        let mut config = ChitchatConfig::for_test(10_006);
        config.failure_detector_config.dead_node_grace_period = Duration::from_secs(4);
        let (_seed_addrs_rx, seed_addrs_tx) = watch::channel(Default::default());
        let mut node = Chitchat::with_chitchat_id_and_seeds(config, seed_addrs_tx, Vec::new());

        let chitchat_id = ChitchatId::for_local_test(10_007);
        let node_state = node.cluster_state.node_state_mut_or_init(&chitchat_id);
        node_state.set("foo", "bar");
        node_state.set("qux", "baz");
        node_state.set("toto", "titi");

        node.report_heartbeat(&chitchat_id, Heartbeat(1));
        tokio::time::advance(Duration::from_millis(50)).await;
        node.report_heartbeat(&chitchat_id, Heartbeat(2));
        tokio::time::advance(Duration::from_millis(50)).await;
        node.report_heartbeat(&chitchat_id, Heartbeat(3));
        node.update_nodes_liveness();
        assert!(
            node.live_nodes()
                .collect::<Vec<_>>()
                .contains(&&chitchat_id)
        );
        assert!(node.cluster_state.node_state(&chitchat_id).is_some());

        tokio::time::advance(Duration::from_secs(60)).await;
        node.update_nodes_liveness();
        assert!(
            node.dead_nodes()
                .collect::<Vec<_>>()
                .contains(&&chitchat_id)
        );
        assert!(node.cluster_state.node_state(&chitchat_id).is_some());

        tokio::time::advance(Duration::from_secs(5)).await;
        node.update_nodes_liveness();
        assert!(node.cluster_state.node_state(&chitchat_id).is_none());

        // resetting GCed node should not bring it back
        node.reset_node_state_if_update(
            &chitchat_id,
            [(
                "foo".to_string(),
                VersionedValue::new("bar".to_string(), 1, false),
            )]
            .into_iter(),
            2,
            1337,
        );
        assert!(node.cluster_state.node_state(&chitchat_id).is_none());
    }

    // There was a bug in process_message:
    // When node_states is large and the node receives a SYN with an empty digest,
    // the MTU delta was incorrectly computed based on the received empty digest,
    // whereas it should have used self_digest instead.
    //
    #[tokio::test]
    async fn test_process_syn() {
        // Prepare node
        let config = ChitchatConfig::for_test(10_006);

        fn id(i: usize) -> ChitchatId {
            ChitchatId {
                node_id: Arc::from("a".repeat(1000).as_str()),
                generation_id: i as u64,
                gossip_advertise_addr: SocketAddr::from(([127, 0, 0, 1], 10000u16 + i as u16)),
            }
        }

        fn random_string(len: usize) -> String {
            rand::rng()
                .sample_iter(&Alphanumeric)
                .take(len)
                .map(char::from)
                .collect()
        }

        let (_seed_addrs_rx, seed_addrs_tx) = watch::channel(Default::default());

        let mut node = Chitchat::with_chitchat_id_and_seeds(config, seed_addrs_tx, Vec::new());

        // Add node states that form the digest with a serialized size close to the maximum MTU.

        let mut digest = Digest::default();
        let mut delta = Delta::default();
        for i in 0..55 {
            digest.add_node(id(i), Heartbeat(1), 0, 0);
            delta.add_node(id(i), 0, 0);
            delta.add_kv(&id(i), "key", &random_string(1000), 1, false);
        }
        node.report_heartbeats_in_digest(&digest);
        node.process_delta(delta);

        // Process a SYN message with an empty foreign digest

        let ack = node
            .process_message(ChitchatMessage::Syn {
                cluster_id: node.config.cluster_id.clone(),
                digest: Digest::default(),
            })
            .unwrap();

        // Verify that the serialized reply fits within the max MTU.

        let mut buf = Vec::new();
        ack.serialize(&mut buf);
        assert!(buf.len() < MAX_UDP_DATAGRAM_PAYLOAD_SIZE);
        let ChitchatMessage::SynAck { delta, .. } = ack else {
            panic!("Expected SynAck, got {:?}", ack);
        };
        assert_eq!(delta.node_deltas.len(), 4);
    }
}
