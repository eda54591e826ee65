//! chitchat's `Transport` over QUIC with mutual TLS.
//!
//! One quinn endpoint, bound on the gossip address, both accepts and dials, so the remote address
//! of any connection is the peer's gossip address, which is where chitchat addresses its replies.
//! - `send()` never waits on the network: it puts the message in a small bounded queue per peer
//!   (dropped and counted when full, as UDP would) served by a writer task;
//! - the writer task reuses the cached connection to its peer (dialed or accepted) or dials one
//!   (with a timeout and exponential backoff), writes each message on a unidirectional stream and
//!   finishes it; it exits after a quiet spell, so peers contacted once do not keep a task;
//! - a cached connection that sent and heard nothing back for
//!   [`QuicGossipConfig::stall_after`] is closed and dialed afresh ([`Answers`]): after a one-way
//!   partition heals, QUIC's loss recovery on the old one waits out a probe timeout that doubled
//!   through every second of the cut (up to tens of seconds), a new handshake one round trip;
//! - a reader task per connection reads each stream with a size bound and a timeout, and feeds
//!   `recv()` through a bounded channel (chitchat cancels `recv()` on every tick, so it must only
//!   ever wait on a channel).
//!
//! Incoming connections pass [`crate::transport::admission`] (address validation, handshake and connection
//! caps overall, per IP address and per certificate) as on the API endpoint.
//!
//! Frames larger than [`QuicGossipConfig::compress_min_bytes`] are zstd-compressed (the Syn digest
//! grows with the node count and is not compressed by chitchat).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chitchat::transport::{Socket, Transport};
use chitchat::{ChitchatMessage, Deserializable, Serializable};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::canonical;
use super::directory::{self, Lookup};
use super::probe::{self, ProbeChannel, ProbeIn, ProbeLink};
use crate::identity::authority::Authority;
use crate::identity::pki::{Identity, Role};
use crate::identity::tls::{self, PeerName, QuicOptions, ALPN_GOSSIP, ANY_MEMBER};
use crate::transport::admission::{Admission, AdmissionConfig, ConnectionSlot, CONNECTION_REFUSED};
use crate::transport::rpc::TransportStats;
use crate::wire::{self, FrameKind, WireError, GOSSIP_FRAME_MAX_BYTES, LENGTH_PREFIX_BYTES};

/// Bounds and timers of the QUIC gossip transport.
#[derive(Debug, Clone)]
pub struct QuicGossipConfig {
    /// Messages queued per peer before new ones are dropped.
    pub peer_queue_len: usize,
    /// Most peers with a writer task at once; messages to further peers are dropped.
    pub peers_max: usize,
    /// What handshakes and connections may hold, overall, per IP address and per certificate
    /// (its `connections_max` counts accepted and dialed connections).
    pub admission: AdmissionConfig,
    /// Messages received but not yet taken by chitchat before new ones are dropped.
    pub inbound_queue_len: usize,
    /// Longest wait for a connection to a peer.
    pub dial_timeout: Duration,
    /// First wait after a failed dial before dialing that peer again.
    pub backoff_min: Duration,
    /// Longest wait between dials to a failing peer.
    pub backoff_max: Duration,
    /// A writer task with nothing to send for this long exits.
    pub writer_idle_exit: Duration,
    /// Longest time to write, or to read, one message stream.
    pub stream_timeout: Duration,
    /// A cached connection that has sent and received nothing back for this long is stalled:
    /// closed, counted, and dialed afresh by the next message ([`Answers`]). Far above a round
    /// trip and an ack delay (a live peer acknowledges every packet that asks for it), and
    /// above the longest freeze tolerated (0.9 s), under the dial timeout's pace.
    pub stall_after: Duration,
    /// Frames at least this large are zstd-compressed (`None`: never).
    pub compress_min_bytes: Option<usize>,
    /// QUIC limits and timers.
    pub quic: QuicOptions,
    /// The wire version frames go out in: an agent's mesh version, shared with its RPC client
    /// and moved by its upgrade task (every member speaks it). Chitchat's bytes are the same in
    /// every version; the header is what an older build checks.
    pub wire: Arc<std::sync::atomic::AtomicU16>,
}

impl Default for QuicGossipConfig {
    fn default() -> Self {
        QuicGossipConfig {
            peer_queue_len: 16,
            peers_max: 4096,
            admission: AdmissionConfig::gossip(),
            inbound_queue_len: 1024,
            dial_timeout: Duration::from_secs(2),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
            writer_idle_exit: Duration::from_secs(30),
            stream_timeout: Duration::from_secs(5),
            stall_after: Duration::from_secs(2),
            compress_min_bytes: Some(256),
            quic: QuicOptions::gossip(),
            wire: Arc::new(std::sync::atomic::AtomicU16::new(wire::WIRE_CUR)),
        }
    }
}

/// A chitchat `Transport` over QUIC with mutual TLS. Keep a clone to read its counters and the
/// authenticated names of connected peers.
#[derive(Clone)]
pub struct QuicTransport {
    identity: Arc<Identity>,
    config: QuicGossipConfig,
    stats: Arc<TransportStats>,
    peer_names: Arc<Mutex<HashMap<SocketAddr, PeerName>>>,
    directory: Arc<std::sync::OnceLock<Lookup>>,
    authority: Arc<std::sync::OnceLock<Arc<Authority>>>,
    probes: Arc<ProbeSide>,
}

/// Probe frames on this endpoint ([`super::probe`]): where received ones go, and the open
/// endpoint sends go through.
struct ProbeSide {
    inbox: std::sync::OnceLock<mpsc::Sender<ProbeIn>>,
    shared: Mutex<std::sync::Weak<Shared>>,
    in_flight: Arc<tokio::sync::Semaphore>,
}

/// Probe sends under way at once; past it they are dropped and counted (as UDP would).
const PROBES_IN_FLIGHT_MAX: usize = 64;

struct QuicProbeLink {
    side: Arc<ProbeSide>,
}

impl ProbeLink for QuicProbeLink {
    fn send(&self, to: SocketAddr, frame: Vec<u8>) {
        let Some(shared) = self.side.shared.lock().expect("probe lock").upgrade() else {
            return;
        };
        let Ok(permit) = self.side.in_flight.clone().try_acquire_owned() else {
            TransportStats::bump(&shared.stats.messages_dropped);
            return;
        };
        let to = canonical(to);
        tokio::spawn(async move {
            let _permit = permit;
            let write = async {
                let conn = connection_to(&shared, to).await?;
                let mut stream = conn.open_uni().await.ok()?;
                stream.write_all(&frame).await.ok()?;
                stream.finish().ok()
            };
            match tokio::time::timeout(shared.config.stream_timeout, write).await {
                Ok(Some(())) => {
                    TransportStats::bump(&shared.stats.messages_sent);
                    for counter in [&shared.stats.bytes_sent, &shared.stats.bytes_sent_probe] {
                        counter.fetch_add(frame.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                _ => TransportStats::bump(&shared.stats.messages_dropped),
            }
        });
    }
}

impl QuicTransport {
    /// A transport presenting `identity`; nothing is bound until chitchat opens it.
    pub fn new(identity: Identity, config: QuicGossipConfig) -> Self {
        QuicTransport {
            identity: Arc::new(identity),
            config,
            stats: Arc::new(TransportStats::default()),
            peer_names: Arc::default(),
            directory: Arc::default(),
            authority: Arc::default(),
            probes: Arc::new(ProbeSide {
                inbox: std::sync::OnceLock::new(),
                shared: Mutex::new(std::sync::Weak::new()),
                in_flight: Arc::new(tokio::sync::Semaphore::new(PROBES_IN_FLIGHT_MAX)),
            }),
        }
    }

    /// The channel member probes travel on ([`super::probe`]): frames of kind `Probe` received
    /// on this endpoint go to its inbox instead of chitchat. Take it once, before chitchat opens
    /// the transport; a second call returns `None`.
    pub fn probe_channel(&self) -> Option<ProbeChannel> {
        let (tx, inbox) = mpsc::channel(probe::PROBE_INBOX_LEN);
        self.probes.inbox.set(tx).ok()?;
        Some(ProbeChannel {
            link: Arc::new(QuicProbeLink {
                side: self.probes.clone(),
            }),
            inbox,
        })
    }

    /// Has `authority` keep the endpoint's TLS configuration current (renewals, revocations) and
    /// close the connections of revoked certificates. Set before chitchat opens the transport.
    pub fn set_authority(&self, authority: Arc<Authority>) {
        let _ = self.authority.set(authority);
    }

    /// How this endpoint's directory answers agents joining through it from another cell
    /// ([`super::directory`]); until set, directory streams are refused.
    pub fn set_directory(&self, lookup: Lookup) {
        let _ = self.directory.set(lookup);
    }

    /// The transport's counters.
    pub fn stats(&self) -> Arc<TransportStats> {
        self.stats.clone()
    }

    /// Certificate names of the peers connected now, by gossip address: lets the agent check that
    /// the node advertising an address holds the certificate of that node's name.
    pub fn peer_names(&self) -> HashMap<SocketAddr, PeerName> {
        self.peer_names.lock().expect("peer names lock").clone()
    }
}

#[async_trait::async_trait]
impl Transport for QuicTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let stats = self.stats.clone();
        let filter = move |socket| {
            let config = crate::transport::admission::FilterConfig::default();
            crate::transport::admission::FilteredSocket::wrap(socket, config, stats.clone())
        };
        let (id, quic) = (&self.identity, &self.config.quic);
        let endpoint = tls::bind_endpoint_wrapped(listen_addr, id, ALPN_GOSSIP, quic, &filter)
            .with_context(|| format!("opening the gossip endpoint on {listen_addr}"))?;
        let (inbound_tx, inbound_rx) = mpsc::channel(self.config.inbound_queue_len);
        let authority = self.authority.get().cloned();
        if let Some(authority) = &authority {
            let (id, quic) = (&self.identity, &self.config.quic);
            authority.follow(tls::LiveEndpoint::new(
                endpoint.clone(),
                id,
                ALPN_GOSSIP,
                quic,
                true,
            ));
        }
        let shared = Arc::new(Shared {
            authority,
            endpoint,
            config: self.config.clone(),
            stats: self.stats.clone(),
            connections: Mutex::default(),
            answers: Mutex::default(),
            peer_names: self.peer_names.clone(),
            admission: Admission::new("gossip", self.config.admission.clone(), self.stats.clone()),
            inbound_tx,
            directory: self.directory.clone(),
            probes: self.probes.clone(),
        });
        *self.probes.shared.lock().expect("probe lock") = Arc::downgrade(&shared);
        let accept_task = tokio::spawn(accept_loop(shared.clone()));
        Ok(Box::new(QuicSocket {
            shared,
            writers: HashMap::new(),
            inbound_rx,
            accept_task,
        }))
    }
}

/// State shared by the socket and its tasks.
struct Shared {
    /// Tracks connections for revocation (absent in tests that build a bare transport).
    authority: Option<Arc<Authority>>,
    endpoint: quinn::Endpoint,
    config: QuicGossipConfig,
    stats: Arc<TransportStats>,
    /// The connection writers use per peer gossip address: the latest established either way.
    connections: Mutex<HashMap<SocketAddr, quinn::Connection>>,
    /// What each cached connection last heard ([`Answers`]); an entry goes with its connection.
    answers: Mutex<HashMap<SocketAddr, Answers>>,
    peer_names: Arc<Mutex<HashMap<SocketAddr, PeerName>>>,
    admission: Arc<Admission>,
    inbound_tx: mpsc::Sender<(SocketAddr, ChitchatMessage)>,
    directory: Arc<std::sync::OnceLock<Lookup>>,
    probes: Arc<ProbeSide>,
}

struct QuicSocket {
    shared: Arc<Shared>,
    writers: HashMap<SocketAddr, mpsc::Sender<ChitchatMessage>>,
    inbound_rx: mpsc::Receiver<(SocketAddr, ChitchatMessage)>,
    accept_task: JoinHandle<()>,
}

impl Drop for QuicSocket {
    fn drop(&mut self) {
        self.accept_task.abort();
        self.shared.endpoint.close(0u32.into(), b"gossip closed");
    }
}

#[async_trait::async_trait]
impl Socket for QuicSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        let to = canonical(to);
        let msg = match self.writers.get(&to) {
            None => msg,
            Some(tx) => match tx.try_send(msg) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    TransportStats::bump(&self.shared.stats.messages_dropped);
                    return Ok(());
                }
                Err(mpsc::error::TrySendError::Closed(msg)) => {
                    self.writers.remove(&to);
                    msg
                }
            },
        };
        if self.writers.len() >= self.shared.config.peers_max {
            self.writers.retain(|_, tx| !tx.is_closed());
            if self.writers.len() >= self.shared.config.peers_max {
                TransportStats::bump(&self.shared.stats.messages_dropped);
                return Ok(());
            }
        }
        let (tx, rx) = mpsc::channel(self.shared.config.peer_queue_len);
        tx.try_send(msg).expect("a new channel has room");
        tokio::spawn(run_writer(self.shared.clone(), to, rx));
        self.writers.insert(to, tx);
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        // Cancel-safe: only a channel receive is awaited.
        self.inbound_rx
            .recv()
            .await
            .context("gossip endpoint closed")
    }
}

async fn accept_loop(shared: Arc<Shared>) {
    while let Some(incoming) = shared.endpoint.accept().await {
        // Decided at once: a Retry, a refusal, or a handshake slot.
        let Some(handshake) = shared.admission.admit(incoming) else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            if let Some((conn, slot)) = handshake.complete().await {
                run_reader(shared, conn, slot).await;
            }
        });
    }
}

/// Registers `conn` and reads its streams until it closes.
async fn run_reader(shared: Arc<Shared>, conn: quinn::Connection, slot: ConnectionSlot) {
    let peer = canonical(conn.remote_address());
    // Gossip is between agents: only node certificates, dialed or accepted.
    let name = match tls::peer(&conn) {
        Ok(p) if p.role == Role::Node => p.name,
        refused => {
            TransportStats::bump(&shared.stats.roles_refused);
            let why = match refused {
                Ok(p) => format!("{p} is not a node certificate"),
                Err(why) => why,
            };
            tracing::warn!(%peer, %why, "gossip connection refused: certificate role");
            conn.close(1u32.into(), b"gossip takes node certificates only");
            return;
        }
    };
    let Some(_peer_slot) = slot.admit_peer(name.as_str(), &conn) else {
        conn.close(
            CONNECTION_REFUSED.into(),
            b"too many connections of this certificate",
        );
        return;
    };
    if let Some(authority) = &shared.authority {
        if !authority.track(&conn) {
            return;
        }
    }
    shared
        .connections
        .lock()
        .expect("lock")
        .insert(peer, conn.clone());
    let cert_name = name.as_str().to_string();
    shared.peer_names.lock().expect("lock").insert(peer, name);
    let limit = LENGTH_PREFIX_BYTES + GOSSIP_FRAME_MAX_BYTES;
    loop {
        let mut stream = tokio::select! {
            uni = conn.accept_uni() => match uni {
                Ok(stream) => stream,
                Err(_) => break,
            },
            bi = conn.accept_bi() => match bi {
                Ok((send, recv)) => {
                    answer_directory(&shared, peer, send, recv).await;
                    continue;
                }
                Err(_) => break,
            },
        };
        let read = tokio::time::timeout(shared.config.stream_timeout, stream.read_to_end(limit));
        let frame = match read.await {
            Ok(Ok(frame)) => frame,
            Ok(Err(_)) | Err(_) => {
                TransportStats::bump(&shared.stats.frames_rejected);
                let _ = stream.stop(1u32.into());
                continue;
            }
        };
        let stats = &shared.stats;
        stats
            .bytes_received
            .fetch_add(frame.len() as u64, std::sync::atomic::Ordering::Relaxed);
        if probe::is_probe(&frame) {
            let routed = shared.probes.inbox.get().is_some_and(|tx| {
                tx.try_send(ProbeIn {
                    from: peer,
                    name: Some(cert_name.clone()),
                    frame,
                })
                .is_ok()
            });
            if !routed {
                TransportStats::bump(&stats.messages_dropped);
            }
            continue;
        }
        match decode_gossip(&frame) {
            Ok(msg) => {
                TransportStats::bump(&stats.messages_received);
                if shared.inbound_tx.try_send((peer, msg)).is_err() {
                    TransportStats::bump(&stats.messages_dropped);
                }
            }
            Err(err) => {
                TransportStats::bump(&stats.frames_rejected);
                tracing::debug!(%peer, error = %err, "gossip frame rejected");
            }
        }
    }
    forget_connection(&shared, peer, &conn);
}

/// Answers one directory stream (served one at a time per connection: it bounds the work one
/// peer can ask for); refused and counted when no directory is set or the ask is bad.
async fn answer_directory(
    shared: &Shared,
    peer: SocketAddr,
    send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) {
    let Some(lookup) = shared.directory.get() else {
        TransportStats::bump(&shared.stats.frames_rejected);
        let _ = recv.stop(1u32.into());
        return;
    };
    if let Err(why) = directory::serve(lookup, send, recv, shared.config.stream_timeout).await {
        TransportStats::bump(&shared.stats.frames_rejected);
        tracing::debug!(%peer, %why, "directory ask refused");
    }
}

fn forget_connection(shared: &Shared, peer: SocketAddr, conn: &quinn::Connection) {
    let mut connections = shared.connections.lock().expect("lock");
    if connections.get(&peer).map(|c| c.stable_id()) == Some(conn.stable_id()) {
        connections.remove(&peer);
        shared.peer_names.lock().expect("lock").remove(&peer);
        shared.answers.lock().expect("lock").remove(&peer);
    }
}

/// What a cached connection last heard, to tell one that stalled: it sent (data, or a
/// keep-alive) and received nothing back, not even an acknowledgement, for
/// [`QuicGossipConfig::stall_after`]. Looked at before each message goes out on it.
///
/// Why: a peer cut off one way for a while (its packets lost, say) leaves the connection open
/// on both sides, QUIC's probe timeout doubling on every unanswered probe (quinn: up to 2^16
/// times). When the cut heals, the side that went unanswered sends again only when its next
/// probe is due, up to as long again as the cut lasted: a 20 s cut kept a healed member dead to
/// its peers for up to 15 s more (`netns_exclusive`). A fresh connection needs one round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answers {
    /// The connection's [`quinn::Connection::stable_id`]: a new connection starts afresh.
    id: usize,
    /// Datagrams received and sent when a datagram was last seen received.
    rx: u64,
    tx: u64,
    /// When a datagram sent after the last one received was first seen, if any.
    waiting_since: Option<Instant>,
}

impl Answers {
    /// A connection first looked at now, with these datagram counts.
    pub fn new(id: usize, rx: u64, tx: u64) -> Self {
        Answers {
            id,
            rx,
            tx,
            waiting_since: None,
        }
    }

    /// Updates with connection `id`'s datagram counts read `now`: whether it has stalled.
    /// Pure; the counts only grow on one connection.
    pub fn stalled(&mut self, id: usize, rx: u64, tx: u64, now: Instant, after: Duration) -> bool {
        if id != self.id || rx != self.rx {
            *self = Answers::new(id, rx, tx);
            return false;
        }
        if tx == self.tx {
            return false;
        }
        let since = *self.waiting_since.get_or_insert(now);
        now.saturating_duration_since(since) >= after
    }
}

/// Whether the cached `conn` to `peer` has stalled ([`Answers`]).
fn stalled(shared: &Shared, peer: SocketAddr, conn: &quinn::Connection) -> bool {
    let stats = conn.stats();
    let (id, rx, tx) = (
        conn.stable_id(),
        stats.udp_rx.datagrams,
        stats.udp_tx.datagrams,
    );
    let mut answers = shared.answers.lock().expect("lock");
    let entry = answers
        .entry(peer)
        .or_insert_with(|| Answers::new(id, rx, tx));
    entry.stalled(id, rx, tx, Instant::now(), shared.config.stall_after)
}

/// The application close code of a connection closed as stalled ([`Answers`]): the peer, if it
/// hears it, dials afresh too (it is not a refusal).
const STALLED: u32 = 2;

/// Sends queued messages to `peer` until the queue closes or stays empty for a while.
async fn run_writer(
    shared: Arc<Shared>,
    peer: SocketAddr,
    mut rx: mpsc::Receiver<ChitchatMessage>,
) {
    let config = &shared.config;
    let mut backoff = Duration::ZERO;
    let mut retry_at: Option<Instant> = None;
    let mut last: Option<quinn::Connection> = None;
    while let Ok(Some(msg)) = tokio::time::timeout(config.writer_idle_exit, rx.recv()).await {
        // A dial succeeds before the server has checked our certificate: a peer that refuses us
        // closes the connection right after. Back off instead of re-dialing on every message.
        if last.as_ref().is_some_and(refused_us) {
            last = None;
            TransportStats::bump(&shared.stats.dials_failed);
            backoff = (backoff * 2).clamp(config.backoff_min, config.backoff_max);
            retry_at = Some(Instant::now() + backoff);
        }
        if retry_at.is_some_and(|at| Instant::now() < at) {
            TransportStats::bump(&shared.stats.messages_dropped);
            continue;
        }
        let conn = connection_to(&shared, peer).await;
        let sent = match &conn {
            Some(conn) => send_message(&shared, conn, &msg).await,
            None => false,
        };
        if sent {
            // Healthy once a second message goes out on a connection that was not refused.
            let stable_id = |c: &quinn::Connection| c.stable_id();
            if last.as_ref().map(stable_id) == conn.as_ref().map(stable_id) {
                backoff = Duration::ZERO;
            }
            last = conn;
            retry_at = None;
        } else {
            TransportStats::bump(&shared.stats.messages_dropped);
            backoff = (backoff * 2).clamp(config.backoff_min, config.backoff_max);
            retry_at = Some(Instant::now() + backoff);
        }
    }
}

/// Whether the peer closed `conn` at the transport level (a refused certificate, a protocol
/// error), as opposed to an idle timeout, a reset after a restart or an orderly close.
fn refused_us(conn: &quinn::Connection) -> bool {
    matches!(
        conn.close_reason(),
        Some(
            quinn::ConnectionError::ConnectionClosed(_) | quinn::ConnectionError::TransportError(_)
        )
    )
}

/// The cached connection to `peer`, or a new one. A new one also gets a reader: peers reply on
/// the connection they were reached on.
async fn connection_to(shared: &Arc<Shared>, peer: SocketAddr) -> Option<quinn::Connection> {
    let cached = shared.connections.lock().expect("lock").get(&peer).cloned();
    if let Some(conn) = cached.filter(|c| c.close_reason().is_none()) {
        if !stalled(shared, peer, &conn) {
            return Some(conn);
        }
        TransportStats::bump(&shared.stats.connections_stalled);
        tracing::debug!(%peer, "gossip connection stalled: dialing afresh");
        conn.close(STALLED.into(), b"stalled: nothing heard back");
        forget_connection(shared, peer, &conn);
    }
    let slot = shared.admission.dial_slot()?;
    let dial = async { shared.endpoint.connect(peer, ANY_MEMBER).ok()?.await.ok() };
    match tokio::time::timeout(shared.config.dial_timeout, dial).await {
        Ok(Some(conn)) => {
            tokio::spawn(run_reader(shared.clone(), conn.clone(), slot));
            Some(conn)
        }
        _ => {
            TransportStats::bump(&shared.stats.dials_failed);
            None
        }
    }
}

/// Writes `msg` on a new unidirectional stream of `conn`. False if it could not be handed to QUIC
/// (the connection is then forgotten so the next message dials afresh).
async fn send_message(shared: &Shared, conn: &quinn::Connection, msg: &ChitchatMessage) -> bool {
    let version = shared
        .config
        .wire
        .load(std::sync::atomic::Ordering::Relaxed);
    let frame = match encode_gossip_at(version, msg, shared.config.compress_min_bytes) {
        Ok(frame) => frame,
        Err(err) => {
            tracing::warn!(error = %err, "gossip message not sent");
            return false;
        }
    };
    let write = async {
        let mut stream = conn.open_uni().await.ok()?;
        stream.write_all(&frame).await.ok()?;
        stream.finish().ok()
    };
    match tokio::time::timeout(shared.config.stream_timeout, write).await {
        Ok(Some(())) => {
            TransportStats::bump(&shared.stats.messages_sent);
            let stats = &shared.stats;
            stats
                .bytes_sent
                .fetch_add(frame.len() as u64, std::sync::atomic::Ordering::Relaxed);
            count_parts(stats, msg, frame.len());
            true
        }
        _ => {
            forget_connection(shared, canonical(conn.remote_address()), conn);
            false
        }
    }
}

/// Counts a sent frame's digest and delta shares ([`TransportStats::bytes_sent_digest`]), each
/// its part of the message's uncompressed size times the frame's length.
fn count_parts(stats: &TransportStats, msg: &ChitchatMessage, frame_len: usize) {
    let (digest, delta) = match msg {
        ChitchatMessage::Syn { digest, .. } => (digest.serialized_len(), 0),
        ChitchatMessage::SynAck { digest, delta } => {
            (digest.serialized_len(), delta.serialized_len())
        }
        ChitchatMessage::Ack { delta } => (0, delta.serialized_len()),
        // Compact gossip: the bucket hashes stand for the digest.
        ChitchatMessage::SynBuckets { hashes, .. } => (hashes.serialized_len(), 0),
        ChitchatMessage::BucketDigest { digest, .. } => (digest.serialized_len(), 0),
        ChitchatMessage::BucketSynAck { digest, delta, .. } => {
            (digest.serialized_len(), delta.serialized_len())
        }
        _ => (0, 0),
    };
    let raw = msg.serialized_len().max(1) as u64;
    let share = |part: usize| (frame_len as u64).saturating_mul(part as u64) / raw;
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    stats.bytes_sent_digest.fetch_add(share(digest), relaxed);
    stats.bytes_sent_delta.fetch_add(share(delta), relaxed);
}

/// Encodes a chitchat message as a gossip frame in [`wire::WIRE_CUR`], zstd-compressed from
/// `compress_min_bytes` on.
pub fn encode_gossip(
    msg: &ChitchatMessage,
    compress_min_bytes: Option<usize>,
) -> Result<Vec<u8>, WireError> {
    encode_gossip_at(wire::WIRE_CUR, msg, compress_min_bytes)
}

/// Encodes a chitchat message as a gossip frame of wire `version`, zstd-compressed from
/// `compress_min_bytes` on.
pub fn encode_gossip_at(
    version: u16,
    msg: &ChitchatMessage,
    compress_min_bytes: Option<usize>,
) -> Result<Vec<u8>, WireError> {
    let raw = msg.serialize_to_vec();
    if compress_min_bytes.is_some_and(|min| raw.len() >= min) {
        if let Ok(packed) = zstd::bulk::compress(&raw, 1) {
            if packed.len() < raw.len() {
                return wire::encode_raw_frame_at(
                    version,
                    FrameKind::GossipZstd,
                    &packed,
                    GOSSIP_FRAME_MAX_BYTES,
                );
            }
        }
    }
    wire::encode_raw_frame_at(version, FrameKind::Gossip, &raw, GOSSIP_FRAME_MAX_BYTES)
}

/// Decodes a gossip frame (prefix included) of any version this build speaks into a chitchat
/// message.
pub fn decode_gossip(frame: &[u8]) -> Result<ChitchatMessage, WireError> {
    let wire::Frame { kind, body, .. } = wire::decode_frame(frame, GOSSIP_FRAME_MAX_BYTES)?;
    let unpacked;
    let mut raw = match kind {
        FrameKind::Gossip => body,
        FrameKind::GossipZstd => {
            unpacked = decompress_bounded(body)?;
            &unpacked[..]
        }
        got => return Err(WireError::UnexpectedKind { got }),
    };
    let msg =
        ChitchatMessage::deserialize(&mut raw).map_err(|e| WireError::Malformed(e.to_string()))?;
    if !raw.is_empty() {
        return Err(WireError::Trailing { extra: raw.len() });
    }
    Ok(msg)
}

/// Decompresses a zstd frame whose declared size is within the gossip frame limit.
fn decompress_bounded(packed: &[u8]) -> Result<Vec<u8>, WireError> {
    let declared = zstd::zstd_safe::get_frame_content_size(packed)
        .ok()
        .flatten()
        .ok_or_else(|| WireError::Malformed("zstd frame without a content size".into()))?;
    let max = GOSSIP_FRAME_MAX_BYTES;
    let len = usize::try_from(declared)
        .ok()
        .filter(|len| *len <= max)
        .ok_or(WireError::TooLarge {
            len: usize::try_from(declared).unwrap_or(usize::MAX),
            max,
        })?;
    let unpacked =
        zstd::bulk::decompress(packed, len).map_err(|e| WireError::Malformed(e.to_string()))?;
    if unpacked.len() != len {
        return Err(WireError::Malformed("zstd content size mismatch".into()));
    }
    Ok(unpacked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn syn(cluster_id: &str) -> ChitchatMessage {
        // A Syn with an empty digest, built through chitchat's own serialization.
        let mut bytes = vec![];
        45_139u16.serialize(&mut bytes); // chitchat's magic number
        0u8.serialize(&mut bytes); // protocol version
        0u8.serialize(&mut bytes); // Syn
        0u16.serialize(&mut bytes); // no digest entries
        cluster_id.to_string().serialize(&mut bytes);
        ChitchatMessage::deserialize(&mut &bytes[..]).unwrap()
    }

    #[test]
    fn gossip_frames_round_trip_compressed_or_not() {
        for cluster in ["c", &"x".repeat(5000)] {
            let msg = syn(cluster);
            for compress in [None, Some(16)] {
                let frame = encode_gossip(&msg, compress).unwrap();
                assert_eq!(decode_gossip(&frame).unwrap(), msg);
            }
        }
        let packed = encode_gossip(&syn(&"x".repeat(5000)), Some(16)).unwrap();
        assert!(packed.len() < 200, "{}", packed.len());
    }

    #[test]
    fn a_connection_stalls_only_when_what_it_sent_goes_unanswered() {
        let after = Duration::from_secs(2);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut a = Answers::new(1, 10, 10);
        // Idle: nothing sent since the last answer, however long.
        assert!(!a.stalled(1, 10, 10, at(60_000), after));
        // Sent, unanswered: the wait counts from when the send was first seen.
        assert!(!a.stalled(1, 10, 12, at(61_000), after));
        assert!(!a.stalled(1, 10, 14, at(62_900), after));
        assert!(a.stalled(1, 10, 14, at(63_000), after));
        // An answer ends the wait.
        assert!(!a.stalled(1, 11, 14, at(64_000), after));
        assert!(!a.stalled(1, 11, 15, at(64_100), after));
        assert!(!a.stalled(1, 12, 15, at(67_000), after));
        // A new connection starts afresh, whatever the old one waited.
        let mut b = Answers::new(1, 10, 10);
        assert!(!b.stalled(1, 10, 11, at(0), after));
        assert!(!b.stalled(2, 0, 1, at(5_000), after));
        assert!(!b.stalled(2, 0, 3, at(6_000), after));
        assert!(b.stalled(2, 0, 3, at(8_000), after));
    }

    proptest! {
        #[test]
        fn arbitrary_gossip_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..1024), zstd in any::<bool>()) {
            let kind = if zstd { FrameKind::GossipZstd } else { FrameKind::Gossip };
            let frame = wire::encode_raw_frame(kind, &body, GOSSIP_FRAME_MAX_BYTES).unwrap();
            let _ = decode_gossip(&frame);
        }
    }
}
