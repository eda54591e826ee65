//! Membership gossip: chitchat 0.11.2 configuration, and the networks it runs on.
//!
//! chitchat reaches the network only through its `Transport`/`Socket` traits. Two implementations:
//! - [`quic::QuicTransport`]: one quinn endpoint on the gossip address, mutual TLS, one
//!   unidirectional stream per message (what agents use);
//! - [`mem::MemNetwork`]: in-process links between hosts that lose, delay, reorder, duplicate,
//!   block one way and pause, decided by a seeded rng and timed by tokio's clock (what the
//!   simulator and paused-time tests use). It also carries RPC ([`mem::MemRpcClient`]), so store
//!   sync runs over the same faulty links as gossip.
//!
//! chitchat 0.11.2 is pinned because its message type implements the public `Serializable` /
//! `Deserializable` traits; from 0.12 on, a transport outside the crate cannot serialize messages.
//!
//! Architecture Invariant: `Socket::send` never waits on the network. Every queue here is bounded;
//! a full queue drops the message and counts it, as a UDP socket would.

use std::net::SocketAddr;
use std::time::Duration;

use chitchat::{ChitchatConfig, ChitchatId, FailureDetectorConfig};

pub mod directory;
pub mod mem;
pub mod probe;
pub mod quic;

/// Failure detection and gossip timing. [`Default`]: 250 ms gossip, phi 7, a 100-sample window,
/// `initial_interval` equal to the gossip interval. Measured (tests/transport_gossip.rs,
/// `--ignored`): over QUIC on loopback, every survivor declares a killed node dead after
/// 1.4-1.9 s at 20 nodes and 1.7 s at 50; on the in-memory network with 10% UDP-like loss over
/// 10 minutes, no live node is declared dead at 20 or 50 nodes (phi 6 gave 5 such verdicts at 50).
#[derive(Debug, Clone)]
pub struct GossipTuning {
    /// Time between two gossip rounds (each round contacts up to 3 live peers; in compact gossip
    /// one, once this node's bucket hashes have not moved for 4 rounds: chitchat's quiet fanout).
    pub gossip_interval: Duration,
    /// Phi above which a peer is declared dead (lower: faster, more false positives; 3 was too low).
    pub phi_threshold: f64,
    /// Heartbeat intervals kept per peer (8 bytes each).
    pub sampling_window_size: usize,
    /// Heartbeat intervals longer than this are left out of the statistics.
    pub max_interval: Duration,
    /// Interval assumed for a peer before any sample (chitchat's 5 s default made a restarted
    /// observer take 20-29 s to declare a node dead).
    pub initial_interval: Duration,
    /// A dead node's keys stop spreading after half of this and are deleted after all of it.
    pub dead_node_grace_period: Duration,
    /// Deleted keys (tombstones) are kept this long so every peer sees the deletion.
    pub marked_for_deletion_grace_period: Duration,
}

impl Default for GossipTuning {
    fn default() -> Self {
        let gossip_interval = Duration::from_millis(250);
        GossipTuning {
            gossip_interval,
            phi_threshold: 7.0,
            sampling_window_size: 100,
            max_interval: Duration::from_secs(10),
            initial_interval: gossip_interval,
            dead_node_grace_period: Duration::from_secs(60 * 60),
            marked_for_deletion_grace_period: Duration::from_secs(60 * 60),
        }
    }
}

/// A chitchat configuration with [`GossipTuning::default`]. `addr` is both the listen and the
/// advertised address (they must be equal: peers' replies are addressed to where a message came
/// from). `generation` must grow on every restart of the node.
pub fn chitchat_config(
    node_id: &str,
    generation: u64,
    addr: SocketAddr,
    seeds: &[SocketAddr],
    cluster_id: &str,
) -> ChitchatConfig {
    chitchat_config_tuned(
        node_id,
        generation,
        addr,
        seeds,
        cluster_id,
        &GossipTuning::default(),
    )
}

/// [`chitchat_config`] with explicit tuning.
pub fn chitchat_config_tuned(
    node_id: &str,
    generation: u64,
    addr: SocketAddr,
    seeds: &[SocketAddr],
    cluster_id: &str,
    tuning: &GossipTuning,
) -> ChitchatConfig {
    let addr = canonical(addr);
    ChitchatConfig {
        chitchat_id: ChitchatId::new(node_id, generation, addr),
        cluster_id: cluster_id.to_string(),
        gossip_interval: tuning.gossip_interval,
        listen_addr: addr,
        seed_nodes: seeds
            .iter()
            .map(|seed| canonical(*seed))
            .filter(|seed| *seed != addr)
            .map(|seed| seed.to_string())
            .collect(),
        failure_detector_config: FailureDetectorConfig {
            phi_threshold: tuning.phi_threshold,
            sampling_window_size: tuning.sampling_window_size,
            max_interval: tuning.max_interval,
            initial_interval: tuning.initial_interval,
            dead_node_grace_period: tuning.dead_node_grace_period,
        },
        marked_for_deletion_grace_period: tuning.marked_for_deletion_grace_period,
        catchup_callback: None,
        extra_liveness_predicate: None,
    }
}

/// The canonical form of an address: IPv4-mapped IPv6 (`::ffff:a.b.c.d`, what a socket bound on
/// `[::]` reports for IPv4 peers) becomes plain IPv4, so one peer has one address.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_addresses_are_canonicalised_and_self_is_not_a_seed() {
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:7000".parse().unwrap();
        assert_eq!(canonical(mapped), "10.0.0.1:7000".parse().unwrap());
        let me: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        let other: SocketAddr = "10.0.0.2:7000".parse().unwrap();
        let config = chitchat_config("n1", 1, mapped, &[me, other], "c");
        assert_eq!(config.seed_nodes, vec!["10.0.0.2:7000".to_string()]);
        assert_eq!(config.listen_addr, me);
        assert_eq!(
            config.failure_detector_config.initial_interval,
            config.gossip_interval
        );
    }
}
