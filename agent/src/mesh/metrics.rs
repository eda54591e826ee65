//! The mesh's metric families: membership, gossip and API transport counters, store entries,
//! clock skew and the writes it refused.

use std::sync::Arc;

use crate::metrics::{Family, Kind};
use crate::rpc::TransportStats;

use super::node::MeshNode;

/// Collects the mesh families from a node and its two transports.
pub async fn mesh_families(
    node: &Arc<MeshNode>,
    gossip: &TransportStats,
    api: &TransportStats,
) -> Vec<Family> {
    let members = node.members().await;
    let alive = members.iter().filter(|m| m.alive).count() as f64;
    let dead = members.len() as f64 - alive;
    let now = (node.clock)();
    let (live, tombstones, newer_refused) = node
        .with_store(move |s| {
            let live = s.list_live().count();
            let newer_refused = s.core().refused_newer_all(now).count();
            (live, s.core().len() - live, newer_refused)
        })
        .await;
    let verdict = node.skew.verdict(&members);
    let (refused_offset, refused_newer) = node.skew.refused();
    let (g, a) = (gossip.snapshot(), api.snapshot());
    let labelled = |pairs: Vec<(&'static str, &'static str, u64)>| {
        pairs
            .into_iter()
            .map(|(k, v, n)| (vec![(k, v.to_string())], n as f64))
            .collect()
    };
    vec![
        Family {
            name: "shoal_members",
            help: "Members of the mesh by failure-detector state, as this agent sees them.",
            kind: Kind::Gauge,
            samples: labelled(vec![
                ("state", "alive", alive as u64),
                ("state", "dead", dead as u64),
            ]),
        },
        Family {
            name: "shoal_gossip_bytes",
            help: "Gossip frame bytes on the wire.",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("direction", "in", g.bytes_received),
                ("direction", "out", g.bytes_sent),
            ]),
        },
        Family {
            name: "shoal_gossip_messages",
            help: "Gossip messages received, sent, and dropped (full queue or unreachable peer).",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("outcome", "received", g.messages_received),
                ("outcome", "sent", g.messages_sent),
                ("outcome", "dropped", g.messages_dropped),
            ]),
        },
        Family {
            name: "shoal_handshakes_refused",
            help: "TLS handshakes refused (no or foreign certificate).",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("endpoint", "gossip", g.handshakes_refused),
                ("endpoint", "api", a.handshakes_refused),
            ]),
        },
        Family {
            name: "shoal_frames_rejected",
            help: "Frames dropped as malformed, oversized or of a wrong version.",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("endpoint", "gossip", g.frames_rejected),
                ("endpoint", "api", a.frames_rejected),
            ]),
        },
        Family::single(
            "shoal_cell_entries_refused",
            "Cell table entries from peers refused (invalid, mismatched, from the future, over the bound).",
            Kind::Counter,
            node.cells.refused_total() as f64,
        ),
        Family {
            name: "shoal_api_bytes",
            help: "API frame bytes on the wire, requests and answers, served and sent: CLI calls, \
                   the store's replication and anti-entropy, and the cell exchange.",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("direction", "in", a.bytes_received),
                ("direction", "out", a.bytes_sent),
            ]),
        },
        Family::single(
            "shoal_api_requests",
            "API requests answered.",
            Kind::Counter,
            a.requests_served as f64,
        ),
        Family {
            name: "shoal_writes_refused",
            help:
                "Applies and deletes refused for clock skew: this agent's clock is more than the \
                   bound from most of its peers' (clock_offset), or the write would lose to a \
                   newer version refused as too far ahead of a clock (newer_version).",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("reason", "clock_offset", refused_offset),
                ("reason", "newer_version", refused_newer),
            ]),
        },
        Family {
            name: "shoal_clock_offset_seconds",
            help: "Median of the sampled peers' wall clocks minus this agent's (positive: this \
                   agent is behind); 0 before any sample.",
            kind: Kind::Gauge,
            samples: vec![(Vec::new(), verdict.offset_ms.unwrap_or(0) as f64 / 1000.0)],
        },
        Family::single(
            "shoal_clock_skewed",
            "1 while this agent refuses writes because its clock disagrees with its peers'.",
            Kind::Gauge,
            f64::from(u8::from(verdict.skewed)),
        ),
        Family::single(
            "shoal_store_newer_refused",
            "Workloads with a newer version this agent refused as too far ahead of its clock.",
            Kind::Gauge,
            newer_refused as f64,
        ),
        Family {
            name: "shoal_store_entries",
            help: "Desired-state store entries.",
            kind: Kind::Gauge,
            samples: labelled(vec![
                ("kind", "live", live as u64),
                ("kind", "tombstone", tombstones as u64),
            ]),
        },
    ]
}
