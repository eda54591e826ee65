//! Transport counters: what an endpoint's tasks counted (handshakes, connections, frames,
//! messages, bytes), shared by the RPC server, the gossip transport and admission.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Transport counters, shared by the tasks of an endpoint. Monotonic; read with [`Self::snapshot`].
#[derive(Debug, Default)]
pub struct TransportStats {
    /// Incoming connections whose TLS handshake failed (no or bad client certificate, wrong
    /// ALPN, no name in the certificate, ...).
    pub handshakes_refused: AtomicU64,
    /// Authenticated connections closed because the certificate carries no role this endpoint
    /// accepts (none, an unknown one, or a client certificate on the gossip endpoint).
    pub roles_refused: AtomicU64,
    /// Requests refused because the caller's role may not make them (API).
    pub requests_unauthorized: AtomicU64,
    /// Incoming connections refused because the endpoint was at its connection limit
    /// ([`AdmissionConfig::connections_max`]).
    pub connections_refused: AtomicU64,
    /// QUIC Retry packets sent: attempts from addresses not yet validated, which hold nothing
    /// until the client echoes the token ([`AdmissionConfig::address_validation`]).
    pub retries_sent: AtomicU64,
    /// Handshakes dropped unfinished after [`AdmissionConfig::handshake_timeout`].
    pub handshakes_timed_out: AtomicU64,
    /// Attempts that found [`AdmissionConfig::handshakes_max`] handshakes in progress: the
    /// oldest was dropped for each ([`AdmissionConfig::handshake_make_room`]; off: the attempt
    /// was refused).
    pub handshakes_over_max: AtomicU64,
    /// Attempts from an address with [`AdmissionConfig::handshakes_per_ip_max`] handshakes in
    /// progress: the address's oldest was dropped for each (or the attempt refused, as above).
    pub handshakes_over_per_ip: AtomicU64,
    /// Connections refused at [`AdmissionConfig::connections_per_ip_max`] from one IP address.
    pub connections_refused_per_ip: AtomicU64,
    /// Authenticated connections closed at [`AdmissionConfig::connections_per_peer_max`] of the
    /// same certificate name.
    pub connections_refused_per_peer: AtomicU64,
    /// Connections closed to make room for a newer one of the same certificate (at its cap).
    pub connections_superseded: AtomicU64,
    /// Gossip connections closed because what they sent went unanswered for a while, to be
    /// dialed afresh (`quic::Answers`).
    pub connections_stalled: AtomicU64,
    /// Datagrams dropped before quinn: long headers of a QUIC version this endpoint does not
    /// speak (see [`crate::transport::admission::filter`]).
    pub datagrams_dropped_unknown_version: AtomicU64,
    /// Datagrams dropped before quinn: Initials over their source's budget.
    pub datagrams_dropped_initial_budget: AtomicU64,
    /// Frames dropped as malformed, oversized, of a bad version or kind, or read too slowly.
    pub frames_rejected: AtomicU64,
    /// Requests answered by the handler (RPC server).
    pub requests_served: AtomicU64,
    /// Outgoing connection attempts that failed (timeout, refused, bad server certificate).
    pub dials_failed: AtomicU64,
    /// Messages written to the network (gossip).
    pub messages_sent: AtomicU64,
    /// Messages received and handed on (gossip).
    pub messages_received: AtomicU64,
    /// Messages dropped because a bounded queue was full or a peer was unreachable (gossip).
    pub messages_dropped: AtomicU64,
    /// Frame bytes written, prefix included (gossip; on the API endpoint, requests sent and
    /// answers served).
    pub bytes_sent: AtomicU64,
    /// Frame bytes received, prefix included (gossip; on the API endpoint, requests served and
    /// answers received).
    pub bytes_received: AtomicU64,
    /// Of `bytes_sent` (gossip): the share of chitchat digests (every member's heartbeat and
    /// versions, in each Syn and SynAck), apportioned by the uncompressed sizes of a frame's parts.
    pub bytes_sent_digest: AtomicU64,
    /// Of `bytes_sent` (gossip): the share of chitchat deltas (changed key-values).
    pub bytes_sent_delta: AtomicU64,
    /// Of `bytes_sent` (gossip): member probe frames.
    pub bytes_sent_probe: AtomicU64,
}

/// A point-in-time copy of [`TransportStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[allow(missing_docs)] // Same fields as TransportStats.
pub struct TransportStatsSnapshot {
    pub handshakes_refused: u64,
    pub roles_refused: u64,
    pub requests_unauthorized: u64,
    pub connections_refused: u64,
    pub retries_sent: u64,
    pub handshakes_timed_out: u64,
    pub handshakes_over_max: u64,
    pub handshakes_over_per_ip: u64,
    pub connections_refused_per_ip: u64,
    pub connections_refused_per_peer: u64,
    pub connections_superseded: u64,
    pub connections_stalled: u64,
    pub datagrams_dropped_unknown_version: u64,
    pub datagrams_dropped_initial_budget: u64,
    pub frames_rejected: u64,
    pub requests_served: u64,
    pub dials_failed: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub messages_dropped: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub bytes_sent_digest: u64,
    pub bytes_sent_delta: u64,
    pub bytes_sent_probe: u64,
}

impl TransportStats {
    /// Reads every counter.
    pub fn snapshot(&self) -> TransportStatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TransportStatsSnapshot {
            handshakes_refused: get(&self.handshakes_refused),
            roles_refused: get(&self.roles_refused),
            requests_unauthorized: get(&self.requests_unauthorized),
            connections_refused: get(&self.connections_refused),
            retries_sent: get(&self.retries_sent),
            handshakes_timed_out: get(&self.handshakes_timed_out),
            handshakes_over_max: get(&self.handshakes_over_max),
            handshakes_over_per_ip: get(&self.handshakes_over_per_ip),
            connections_refused_per_ip: get(&self.connections_refused_per_ip),
            connections_refused_per_peer: get(&self.connections_refused_per_peer),
            connections_superseded: get(&self.connections_superseded),
            connections_stalled: get(&self.connections_stalled),
            datagrams_dropped_unknown_version: get(&self.datagrams_dropped_unknown_version),
            datagrams_dropped_initial_budget: get(&self.datagrams_dropped_initial_budget),
            frames_rejected: get(&self.frames_rejected),
            requests_served: get(&self.requests_served),
            dials_failed: get(&self.dials_failed),
            messages_sent: get(&self.messages_sent),
            messages_received: get(&self.messages_received),
            messages_dropped: get(&self.messages_dropped),
            bytes_sent: get(&self.bytes_sent),
            bytes_received: get(&self.bytes_received),
            bytes_sent_digest: get(&self.bytes_sent_digest),
            bytes_sent_delta: get(&self.bytes_sent_delta),
            bytes_sent_probe: get(&self.bytes_sent_probe),
        }
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
