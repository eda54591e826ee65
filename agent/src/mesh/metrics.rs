//! The mesh's metric families: membership, gossip and API transport counters, store entries.

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
    let (live, tombstones) = node
        .with_store(|s| {
            let live = s.list_live().count();
            (live, s.core().len() - live)
        })
        .await;
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
            "shoal_api_requests",
            "API requests answered.",
            Kind::Counter,
            a.requests_served as f64,
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
