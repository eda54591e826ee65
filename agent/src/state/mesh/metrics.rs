//! The mesh's metric families: membership, gossip and API transport counters, store entries,
//! clock skew and the writes it refused.

use std::sync::Arc;

use crate::transport::metrics::{Family, Kind};
use crate::transport::rpc::TransportStats;

use super::node::MeshNode;

/// Collects the mesh families from a node and its two transports.
pub async fn mesh_families(
    node: &Arc<MeshNode>,
    gossip: &TransportStats,
    api: &TransportStats,
) -> Vec<Family> {
    let members = node.members().await;
    let auth = node.authority.stats();
    let alive = members.iter().filter(|m| m.alive).count() as f64;
    let suspect = members.iter().filter(|m| m.alive && m.suspect).count() as u64;
    let dead = members.len() as f64 - alive;
    let (probes, health, probe_rejected) = node.probe_stats();
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
                ("state", "suspect", suspect),
            ]),
        },
        Family {
            name: "shoal_probes",
            help: "Member probes this agent started (a member's heartbeat went quiet), those that went indirect, and the last looks (a ping sent as a suspicion ran out with none recent).",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("kind", "direct", probes.probes),
                ("kind", "indirect", probes.indirect),
                ("kind", "last_look", probes.last_looks),
            ]),
        },
        Family {
            name: "shoal_probe_messages_ignored",
            help: "Probe messages ignored, by reason (a non-member, another incarnation, no probe running, relays full, an unreadable frame).",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("reason", "non_member", probes.non_member),
                ("reason", "stale", probes.stale),
                ("reason", "unexpected", probes.unexpected),
                ("reason", "relays_full", probes.relays_dropped),
                ("reason", "malformed", probe_rejected),
            ]),
        },
        Family::single(
            "shoal_probe_stalls",
            "Wakes of the member prober later than its slack: this agent ran late (starved or frozen).",
            Kind::Counter,
            probes.stalls as f64,
        ),
        Family::single(
            "shoal_probe_deaf_seconds",
            "Silence from every member at once that the member prober counted as this agent's own deafness (its links), not as anyone's death.",
            Kind::Counter,
            probes.deaf_ms as f64 / 1000.0,
        ),
        Family::single(
            "shoal_probe_local_health",
            "Local health score (Lifeguard): probe timeouts run this many times longer, plus one.",
            Kind::Gauge,
            f64::from(health),
        ),
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
            name: "shoal_gossip_sent_bytes_by_part",
            help: "Of the gossip bytes sent: chitchat digests (every member's heartbeat and \
                   versions, in each Syn and SynAck), deltas (changed keys), member probes; the \
                   rest is framing. Compressed frames are apportioned by their parts' raw sizes.",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("part", "digest", g.bytes_sent_digest),
                ("part", "delta", g.bytes_sent_delta),
                ("part", "probe", g.bytes_sent_probe),
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
            name: "shoal_gossip_connections_stalled",
            help: "Gossip connections closed and dialed afresh because what they sent went \
                   unanswered for 2 s (a peer back from a one-way cut is heard again at once, \
                   not when QUIC's backed-off probe timer fires).",
            kind: Kind::Counter,
            samples: vec![(Vec::new(), g.connections_stalled as f64)],
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
            name: "shoal_datagrams_dropped",
            help: "UDP datagrams dropped before QUIC parsed them, by reason: unknown_version \
                   (a long header of a QUIC version this agent does not speak, left \
                   unanswered), initial_budget (an Initial over its source address's budget).",
            kind: Kind::Counter,
            samples: [("gossip", &g), ("api", &a)]
                .into_iter()
                .flat_map(|(endpoint, s)| {
                    [
                        ("unknown_version", s.datagrams_dropped_unknown_version),
                        ("initial_budget", s.datagrams_dropped_initial_budget),
                    ]
                    .map(|(reason, n)| {
                        let labels = vec![
                            ("endpoint", endpoint.to_string()),
                            ("reason", reason.to_string()),
                        ];
                        (labels, n as f64)
                    })
                })
                .collect(),
        },
        Family {
            name: "shoal_quic_retries",
            help: "QUIC Retry packets sent to connection attempts from addresses not yet \
                   validated (they hold no state until the client echoes the token).",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("endpoint", "gossip", g.retries_sent),
                ("endpoint", "api", a.retries_sent),
            ]),
        },
        Family {
            name: "shoal_connections_refused",
            help: "Connections refused or dropped before being served, by reason: \
                   handshakes_max and handshakes_per_ip (an attempt at the cap of handshakes \
                   in progress: the oldest was dropped for it, or it was refused with \
                   handshake_make_room off), handshake_timeout (unfinished in \
                   time), connections_max and connections_per_ip (a new connection refused \
                   with established ones at the cap), connections_per_peer (one certificate's \
                   new connection refused: none of its others was left open), \
                   connections_superseded (one certificate's oldest connection closed to make \
                   room for its newest).",
            kind: Kind::Counter,
            samples: [("gossip", &g), ("api", &a)]
                .into_iter()
                .flat_map(|(endpoint, s)| {
                    [
                        ("handshakes_max", s.handshakes_over_max),
                        ("handshakes_per_ip", s.handshakes_over_per_ip),
                        ("handshake_timeout", s.handshakes_timed_out),
                        ("connections_max", s.connections_refused),
                        ("connections_per_ip", s.connections_refused_per_ip),
                        ("connections_per_peer", s.connections_refused_per_peer),
                        ("connections_superseded", s.connections_superseded),
                    ]
                    .map(|(reason, n)| {
                        let labels = vec![
                            ("endpoint", endpoint.to_string()),
                            ("reason", reason.to_string()),
                        ];
                        (labels, n as f64)
                    })
                })
                .collect(),
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
        Family {
            name: "shoal_roles_refused",
            help: "Authenticated connections closed because the certificate carries no role the \
                   endpoint accepts (none, unknown, or a client certificate on gossip).",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("endpoint", "gossip", g.roles_refused),
                ("endpoint", "api", a.roles_refused),
            ]),
        },
        {
            let build = crate::state::mesh::build::this();
            Family {
                name: "shoal_build_info",
                help: "This agent's build: version, commit, the wire versions it speaks and the \
                       store layout it writes (always 1).",
                kind: Kind::Gauge,
                samples: vec![(
                    vec![
                        ("version", build.version),
                        ("commit", build.commit),
                        ("wire_min", build.wire_min.to_string()),
                        ("wire_max", build.wire_max.to_string()),
                        ("layout", build.layout.to_string()),
                    ],
                    1.0,
                )],
            }
        },
        Family::single(
            "shoal_mesh_version",
            "The mesh version recorded now: the wire version every member speaks (never moves back).",
            Kind::Gauge,
            f64::from(node.mesh_version()),
        ),
        Family::single(
            "shoal_requests_unauthorized",
            "API requests refused because the caller's certificate role may not make them.",
            Kind::Counter,
            auth.requests_unauthorized as f64,
        ),
        Family::single(
            "shoal_entries_unverified",
            "Store entries from peers dropped because their proof of origin failed (no or bad \
             signature, a certificate not of the CA, revoked, not a node, or another node's name).",
            Kind::Counter,
            auth.entries_unverified as f64,
        ),
        Family {
            name: "shoal_crls",
            help: "Revocation lists adopted, and refused (not signed by the CA, older than the \
                   one held, malformed).",
            kind: Kind::Counter,
            samples: labelled(vec![
                ("outcome", "adopted", auth.crls_adopted),
                ("outcome", "refused", auth.crls_refused),
            ]),
        },
        Family::single(
            "shoal_connections_revoked",
            "Open connections closed because their peer's certificate was revoked.",
            Kind::Counter,
            auth.connections_revoked as f64,
        ),
        Family {
            name: "shoal_cells",
            help: "Other cells of the mesh by this agent's verdict (up, degraded, down); none \
                   outside a mesh of cells.",
            kind: Kind::Gauge,
            samples: {
                let placing = node.cells.placement_cells().is_some();
                let mut counts = [0u64; 3];
                let own = node.cells.own().to_string();
                for (cell, health) in node.cells.healths() {
                    if placing && cell != own {
                        counts[health as usize] += 1;
                    }
                }
                labelled(vec![
                    ("state", "up", counts[0]),
                    ("state", "degraded", counts[1]),
                    ("state", "down", counts[2]),
                ])
            },
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
