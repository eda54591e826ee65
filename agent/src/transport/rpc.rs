//! Request/response RPC over QUIC: one request per bidirectional stream, inside mutual TLS.
//!
//! A request stream carries one [`FrameKind::Request`] frame, finished; the answer is one
//! [`FrameKind::Response`] frame, or a [`FrameKind::Reject`] frame when the server refused the
//! request before its handler saw it (malformed, oversized, too slow). Reads are bounded by
//! [`API_FRAME_MAX_BYTES`] and, together, by the caller's certificate budget
//! ([`AdmissionConfig::request_bytes_per_peer_max`]); concurrent streams per connection by QUIC
//! flow control ([`QuicOptions::bidi_streams_max`]); handshakes and connections, overall, per IP
//! address and per certificate, by [`RpcServerConfig::admission`] ([`crate::transport::admission`]).
//!
//! The request and response types are the caller's: anything `Serialize + DeserializeOwned`.
//! [`RpcClient`] abstracts the calling side so that the simulator can use the in-memory network
//! ([`crate::transport::gossip::mem::MemNetwork`]) instead of QUIC.
//!
//! [`QuicOptions::bidi_streams_max`]: crate::identity::tls::QuicOptions::bidi_streams_max
//! [`AdmissionConfig::request_bytes_per_peer_max`]: crate::transport::admission::AdmissionConfig

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::identity::tls::Peer;
use crate::transport::admission::{
    read_frame, Admission, AdmissionConfig, FrameReadError, PeerSlot, ReadBudget,
    CONNECTION_REFUSED,
};
pub use crate::transport::stats::{TransportStats, TransportStatsSnapshot};
use crate::wire::{
    decode_body_at, decode_frame, encode_frame_at, FrameKind, WireError, API_FRAME_MAX_BYTES,
    LENGTH_PREFIX_BYTES, WIRE_CUR, WIRE_MIN,
};

/// A boxed future, as returned by handlers.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A request handler: gets the decoded request and the authenticated caller (name and role).
pub type Handler<Req, Resp> = Arc<dyn Fn(Req, Peer) -> BoxFuture<Resp> + Send + Sync>;

/// Longest reason string sent in a reject frame.
const REJECT_REASON_MAX_BYTES: usize = 512;
/// QUIC application error code for a stream the server gave up on.
const STREAM_REFUSED: u32 = 1;
/// Most cached client connections; past it, closed ones are pruned and then the cache is cleared.
const CLIENT_CONNECTIONS_MAX: usize = 1024;

/// Why a call failed. A failed call may or may not have reached the handler, except for
/// [`RpcError::Rejected`] (it did not) and [`RpcError::Connect`] (it did not).
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// No connection could be established (unreachable, refused, bad server certificate).
    #[error("connecting to {addr}: {reason}")]
    Connect {
        /// The address dialed.
        addr: SocketAddr,
        /// Why it failed.
        reason: String,
    },
    /// The call did not complete within its timeout.
    #[error(
        "no answer within {}",
        crate::core::spec::format_duration_ms(.0.as_millis() as u64)
    )]
    Timeout(Duration),
    /// The server refused the request before handling it.
    #[error("request rejected by the server: {0}")]
    Rejected(String),
    /// The request or the answer is not a valid frame.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The stream or connection failed mid-call.
    #[error("stream failed: {0}")]
    Stream(String),
}

/// Server-side bounds.
#[derive(Debug, Clone)]
pub struct RpcServerConfig {
    /// What handshakes and connections may hold, overall, per IP address and per certificate.
    pub admission: AdmissionConfig,
    /// Longest time to receive a whole request once its stream is open (waiting for the
    /// certificate's request budget included).
    pub request_read_timeout: Duration,
    /// Longest time to hand an answer to a caller that does not read it.
    pub answer_write_timeout: Duration,
    /// Longest time a handler may take; past it the caller gets a reject.
    pub handler_timeout: Duration,
    /// Tracks authenticated connections so that a revocation closes them (an agent's).
    pub authority: Option<Arc<crate::identity::authority::Authority>>,
}

impl Default for RpcServerConfig {
    fn default() -> Self {
        RpcServerConfig {
            admission: AdmissionConfig::api(),
            request_read_timeout: Duration::from_secs(10),
            answer_write_timeout: Duration::from_secs(10),
            handler_timeout: Duration::from_secs(30),
            authority: None,
        }
    }
}

/// Serves requests on `endpoint` until it is closed. Each connection's peer must present a
/// certificate with a name and a role (see [`crate::identity::tls::peer`]); the handler gets both.
pub async fn serve<Req, Resp>(
    endpoint: quinn::Endpoint,
    handler: Handler<Req, Resp>,
    config: RpcServerConfig,
    stats: Arc<TransportStats>,
) where
    Req: DeserializeOwned + Send + 'static,
    Resp: Serialize + Send + 'static,
{
    let admission = Admission::new("api", config.admission.clone(), stats.clone());
    while let Some(incoming) = endpoint.accept().await {
        // Decided at once: a Retry, a refusal, or a handshake slot.
        let Some(handshake) = admission.admit(incoming) else {
            continue;
        };
        let (handler, config, stats) = (handler.clone(), config.clone(), stats.clone());
        tokio::spawn(async move {
            let Some((conn, slot)) = handshake.complete().await else {
                return;
            };
            let remote = conn.remote_address();
            let peer = match crate::identity::tls::peer(&conn) {
                Ok(peer) => peer,
                Err(why) => {
                    TransportStats::bump(&stats.roles_refused);
                    tracing::warn!(%remote, %why, "API connection refused: certificate role");
                    conn.close(STREAM_REFUSED.into(), b"certificate carries no known role");
                    return;
                }
            };
            let Some(peer_slot) = slot.admit_peer(peer.name.as_str(), &conn) else {
                conn.close(
                    CONNECTION_REFUSED.into(),
                    b"too many connections of this certificate",
                );
                return;
            };
            if let Some(authority) = &config.authority {
                if !authority.track(&conn) {
                    return;
                }
            }
            serve_connection(conn, peer, peer_slot, handler, config, stats).await;
        });
    }
}

async fn serve_connection<Req, Resp>(
    conn: quinn::Connection,
    peer: Peer,
    peer_slot: PeerSlot,
    handler: Handler<Req, Resp>,
    config: RpcServerConfig,
    stats: Arc<TransportStats>,
) where
    Req: DeserializeOwned + Send + 'static,
    Resp: Serialize + Send + 'static,
{
    // QUIC flow control bounds how many of these streams are open at once.
    while let Ok((send, recv)) = conn.accept_bi().await {
        let (handler, config, stats, peer) =
            (handler.clone(), config.clone(), stats.clone(), peer.clone());
        let budget = peer_slot.budget().cloned();
        tokio::spawn(serve_stream(
            send, recv, peer, budget, handler, config, stats,
        ));
    }
}

async fn serve_stream<Req, Resp>(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    peer: Peer,
    budget: Option<ReadBudget>,
    handler: Handler<Req, Resp>,
    config: RpcServerConfig,
    stats: Arc<TransportStats>,
) where
    Req: DeserializeOwned + Send + 'static,
    Resp: Serialize + Send + 'static,
{
    let read = read_frame(&mut recv, budget.as_ref(), API_FRAME_MAX_BYTES);
    let (bytes, permit) = match tokio::time::timeout(config.request_read_timeout, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(FrameReadError::Stream(err))) => {
            tracing::debug!(%peer, error = %err, "API request stream failed");
            return;
        }
        Ok(Err(err)) => {
            TransportStats::bump(&stats.frames_rejected);
            let _ = recv.stop(STREAM_REFUSED.into());
            return reply_reject(&mut send, &err.to_string()).await;
        }
        Err(_) => {
            TransportStats::bump(&stats.frames_rejected);
            let _ = recv.stop(STREAM_REFUSED.into());
            let _ = send.reset(STREAM_REFUSED.into());
            return;
        }
    };
    let frame = answer_frame(&handler, &bytes, peer, config.handler_timeout, &stats).await;
    stats
        .bytes_received
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    // The request's share of the certificate's budget goes back before the answer waits on a
    // caller that may not read it; that wait is bounded instead.
    drop((bytes, permit));
    stats
        .bytes_sent
        .fetch_add(frame.len() as u64, Ordering::Relaxed);
    let write = write_answer(&mut send, &frame);
    if tokio::time::timeout(config.answer_write_timeout, write)
        .await
        .is_err()
    {
        let _ = send.reset(STREAM_REFUSED.into());
    }
}

/// Answers one request frame: the handler's response, or a reject when the frame is bad (counted
/// in `frames_rejected`) or the handler overruns `handler_timeout`. Used by the QUIC server and
/// by the in-memory network.
pub async fn answer_frame<Req, Resp>(
    handler: &Handler<Req, Resp>,
    request_frame: &[u8],
    peer: Peer,
    handler_timeout: Duration,
    stats: &TransportStats,
) -> Vec<u8>
where
    Req: DeserializeOwned + Send + 'static,
    Resp: Serialize + Send + 'static,
{
    let (version, request) = match decode_request::<Req>(request_frame) {
        Ok(request) => request,
        Err(err) => {
            TransportStats::bump(&stats.frames_rejected);
            tracing::debug!(%peer, error = %err, "API frame rejected");
            return encode_reject_at(reject_version(request_frame), &err.to_string());
        }
    };
    match tokio::time::timeout(handler_timeout, handler(request, peer)).await {
        Ok(response) => {
            TransportStats::bump(&stats.requests_served);
            encode_response(version, response)
        }
        Err(_) => encode_reject_at(
            version,
            &format!(
                "handler took over {}",
                crate::core::spec::format_duration_ms(handler_timeout.as_millis() as u64)
            ),
        ),
    }
}

/// The version a reject of `frame` goes back in: the frame's own when this build speaks it, the
/// nearest one it speaks otherwise (a newer caller then retries in it, an older one reads a
/// reject whose layout has never changed).
fn reject_version(frame: &[u8]) -> u16 {
    match frame.get(LENGTH_PREFIX_BYTES + 2..LENGTH_PREFIX_BYTES + 4) {
        Some(&[hi, lo]) => u16::from_be_bytes([hi, lo]).clamp(WIRE_MIN, WIRE_CUR),
        _ => WIRE_CUR,
    }
}

/// Decodes a whole request frame: its version (the answer goes back in it) and the request.
pub fn decode_request<Req: DeserializeOwned>(frame: &[u8]) -> Result<(u16, Req), WireError> {
    let frame = decode_frame(frame, API_FRAME_MAX_BYTES)?;
    match frame.kind {
        FrameKind::Request => Ok((
            frame.version,
            decode_body_at::<Req, API_FRAME_MAX_BYTES>(frame.version, frame.body)?,
        )),
        got => Err(WireError::UnexpectedKind { got }),
    }
}

/// Decodes a whole answer frame: a response, or the reason of a reject.
pub fn decode_answer<Resp: DeserializeOwned>(frame: &[u8]) -> Result<Resp, RpcError> {
    let frame = decode_frame(frame, API_FRAME_MAX_BYTES)?;
    match frame.kind {
        FrameKind::Response => Ok(decode_body_at::<Resp, API_FRAME_MAX_BYTES>(
            frame.version,
            frame.body,
        )?),
        FrameKind::Reject => Err(RpcError::Rejected(decode_body_at::<
            String,
            REJECT_REASON_MAX_BYTES,
        >(frame.version, frame.body)?)),
        got => Err(WireError::UnexpectedKind { got }.into()),
    }
}

/// The version of a reject frame older than `sent`, in which the caller may ask again: the
/// server speaks only older versions (a build before this one, during an upgrade).
fn older_reject(answer: &[u8], sent: u16) -> Option<u16> {
    let frame = decode_frame(answer, API_FRAME_MAX_BYTES).ok()?;
    (frame.kind == FrameKind::Reject && frame.version < sent).then_some(frame.version)
}

/// Encodes a reject frame with `reason`, cut to a bounded length, in [`WIRE_CUR`].
pub fn encode_reject(reason: &str) -> Vec<u8> {
    encode_reject_at(WIRE_CUR, reason)
}

/// Encodes a reject frame with `reason`, cut to a bounded length, in wire `version`.
pub fn encode_reject_at(version: u16, reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(REJECT_REASON_MAX_BYTES - 8);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    encode_frame_at(
        version,
        FrameKind::Reject,
        &reason[..end],
        API_FRAME_MAX_BYTES,
    )
    .expect("a short string always fits a frame")
}

fn encode_response<Resp: Serialize>(version: u16, response: Resp) -> Vec<u8> {
    encode_frame_at(version, FrameKind::Response, &response, API_FRAME_MAX_BYTES)
        .unwrap_or_else(|err| encode_reject_at(version, &format!("response not sent: {err}")))
}

async fn reply_reject(send: &mut quinn::SendStream, reason: &str) {
    write_answer(send, &encode_reject(reason)).await;
}

async fn write_answer(send: &mut quinn::SendStream, frame: &[u8]) {
    if send.write_all(frame).await.is_ok() {
        let _ = send.finish();
    }
}

/// The calling side of RPC, implemented over QUIC ([`QuicRpcClient`]) and in memory
/// ([`crate::transport::gossip::mem::MemRpcClient`]).
#[async_trait::async_trait]
pub trait RpcClient: Send + Sync {
    /// Sends one encoded request frame to `addr` (whose certificate must be named `server_name`,
    /// or [`crate::identity::tls::ANY_MEMBER`]) and returns the answer frame, within `timeout`.
    async fn call_frame(
        &self,
        addr: SocketAddr,
        server_name: &str,
        request_frame: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, RpcError>;

    /// The wire version requests go out in: an agent's, the mesh version; a one-off caller's,
    /// [`WIRE_CUR`].
    fn wire_version(&self) -> u16 {
        WIRE_CUR
    }
}

/// Calls `addr` with `req` through any [`RpcClient`] and decodes the typed response. The request
/// goes in the client's [`RpcClient::wire_version`]; when the server rejects it in an older
/// version (it speaks nothing newer), it is sent once more in that version. A request that the
/// older version cannot carry fails with the encoding error, which says so.
pub async fn call_with<C, Req, Resp>(
    client: &C,
    addr: SocketAddr,
    server_name: &str,
    req: &Req,
    timeout: Duration,
) -> Result<Resp, RpcError>
where
    C: RpcClient + ?Sized,
    Req: Serialize,
    Resp: DeserializeOwned,
{
    let version = client.wire_version();
    let frame = encode_frame_at(version, FrameKind::Request, req, API_FRAME_MAX_BYTES)?;
    let answer = client.call_frame(addr, server_name, frame, timeout).await?;
    if let Some(older) = older_reject(&answer, version) {
        let frame = encode_frame_at(older, FrameKind::Request, req, API_FRAME_MAX_BYTES)?;
        let answer = client.call_frame(addr, server_name, frame, timeout).await?;
        return decode_answer(&answer);
    }
    decode_answer(&answer)
}

/// One call on a fresh connection from `endpoint` (the CLI's case). Agents use [`QuicRpcClient`].
pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    server_name: &str,
    req: &Req,
    timeout: Duration,
) -> Result<Resp, RpcError> {
    let client = QuicRpcClient::new(endpoint.clone(), Arc::new(TransportStats::default()));
    call_with(&client, addr, server_name, req, timeout).await
}

/// An RPC client over a quinn endpoint that keeps one connection per (address, server name).
pub struct QuicRpcClient {
    endpoint: quinn::Endpoint,
    connections: Mutex<HashMap<(SocketAddr, String), quinn::Connection>>,
    stats: Arc<TransportStats>,
    /// Closes the cached connections to a server whose certificate gets revoked (an agent's).
    authority: Option<Arc<crate::identity::authority::Authority>>,
    /// The version requests go out in (an agent's: the mesh version, moved by its upgrade task).
    wire: Arc<std::sync::atomic::AtomicU16>,
}

impl QuicRpcClient {
    /// A client dialing from `endpoint` (which must have a default client configuration, as
    /// [`crate::identity::tls::bind_endpoint`] and [`crate::identity::tls::client_endpoint`] set).
    pub fn new(endpoint: quinn::Endpoint, stats: Arc<TransportStats>) -> Self {
        QuicRpcClient {
            endpoint,
            connections: Mutex::new(HashMap::new()),
            stats,
            authority: None,
            wire: Arc::new(std::sync::atomic::AtomicU16::new(WIRE_CUR)),
        }
    }

    /// The same client, sending in the version `wire` holds (shared with the agent's gossip and
    /// upgrade task).
    pub fn with_wire(mut self, wire: Arc<std::sync::atomic::AtomicU16>) -> Self {
        self.wire = wire;
        self
    }

    /// The same client, its connections tracked by `authority`: a revocation closes the cached
    /// connections to the revoked server (new dials are refused by the TLS verifier).
    pub fn with_authority(mut self, authority: Arc<crate::identity::authority::Authority>) -> Self {
        self.authority = Some(authority);
        self
    }

    /// Calls `addr` with `req` and decodes the typed response.
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: SocketAddr,
        server_name: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, RpcError> {
        call_with(self, addr, server_name, req, timeout).await
    }

    /// Connects to `addr` (or finds the connection cached) within `within`, apart from any call's
    /// timeout, so a caller can tell "nothing answers there" from "slow to answer". Later calls
    /// to `addr` reuse the connection. [`RpcError::Timeout`] when no handshake finished in time.
    pub async fn connect_within(
        &self,
        addr: SocketAddr,
        server_name: &str,
        within: Duration,
    ) -> Result<(), RpcError> {
        match tokio::time::timeout(within, self.connect(addr, server_name)).await {
            Ok(connected) => connected.map(|_| ()),
            Err(_) => Err(RpcError::Timeout(within)),
        }
    }

    fn cached(&self, key: &(SocketAddr, String)) -> Option<quinn::Connection> {
        let cache = self.connections.lock().expect("connection cache lock");
        cache
            .get(key)
            .filter(|c| c.close_reason().is_none())
            .cloned()
    }

    async fn connect(
        &self,
        addr: SocketAddr,
        server_name: &str,
    ) -> Result<quinn::Connection, RpcError> {
        let key = (addr, server_name.to_string());
        if let Some(conn) = self.cached(&key) {
            return Ok(conn);
        }
        let connect_err = |reason: String| RpcError::Connect { addr, reason };
        let conn = match self.endpoint.connect(addr, server_name) {
            Ok(connecting) => connecting.await,
            Err(err) => return Err(connect_err(err.to_string())),
        };
        let conn = conn.map_err(|err| {
            TransportStats::bump(&self.stats.dials_failed);
            connect_err(err.to_string())
        })?;
        if let Some(authority) = &self.authority {
            if !authority.track(&conn) {
                return Err(connect_err("the server's certificate is revoked".into()));
            }
        }
        let mut cache = self.connections.lock().expect("connection cache lock");
        if cache.len() >= CLIENT_CONNECTIONS_MAX {
            cache.retain(|_, c| c.close_reason().is_none());
            if cache.len() >= CLIENT_CONNECTIONS_MAX {
                cache.clear();
            }
        }
        cache.insert(key, conn.clone());
        Ok(conn)
    }

    async fn exchange(
        &self,
        (mut send, mut recv): (quinn::SendStream, quinn::RecvStream),
        frame: &[u8],
    ) -> Result<Vec<u8>, RpcError> {
        let stream_err = |e: &dyn std::fmt::Display| RpcError::Stream(e.to_string());
        send.write_all(frame).await.map_err(|e| stream_err(&e))?;
        send.finish().map_err(|e| stream_err(&e))?;
        let stats = &self.stats;
        stats
            .bytes_sent
            .fetch_add(frame.len() as u64, Ordering::Relaxed);
        match recv
            .read_to_end(LENGTH_PREFIX_BYTES + API_FRAME_MAX_BYTES)
            .await
        {
            Ok(answer) => {
                stats
                    .bytes_received
                    .fetch_add(answer.len() as u64, Ordering::Relaxed);
                Ok(answer)
            }
            Err(quinn::ReadToEndError::TooLong) => Err(WireError::TooLarge {
                len: API_FRAME_MAX_BYTES + 1,
                max: API_FRAME_MAX_BYTES,
            }
            .into()),
            Err(err) => Err(stream_err(&err)),
        }
    }
}

#[async_trait::async_trait]
impl RpcClient for QuicRpcClient {
    async fn call_frame(
        &self,
        addr: SocketAddr,
        server_name: &str,
        request_frame: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, RpcError> {
        let attempt = async {
            let conn = self.connect(addr, server_name).await?;
            let (conn, streams) = match conn.open_bi().await {
                Ok(streams) => (conn, streams),
                // A cached connection may have died since. The server has not seen the request
                // when no stream could be opened, so one retry on a new connection is safe.
                Err(_) => {
                    self.connections
                        .lock()
                        .expect("connection cache lock")
                        .remove(&(addr, server_name.to_string()));
                    let conn = self.connect(addr, server_name).await?;
                    let streams = conn
                        .open_bi()
                        .await
                        .map_err(|e| RpcError::Stream(e.to_string()))?;
                    (conn, streams)
                }
            };
            match self.exchange(streams, &request_frame).await {
                // Why the connection went: a server that refused this caller's certificate
                // (revoked, expired, another CA) closes it with a TLS alert after the handshake
                // looked done from here, so the stream only says "connection lost".
                Err(RpcError::Stream(what)) => Err(RpcError::Stream(match conn.close_reason() {
                    Some(why) => format!("{what} ({why})"),
                    None => what,
                })),
                other => other,
            }
        };
        tokio::time::timeout(timeout, attempt)
            .await
            .map_err(|_| RpcError::Timeout(timeout))?
    }

    fn wire_version(&self) -> u16 {
        self.wire.load(Ordering::Relaxed)
    }
}
