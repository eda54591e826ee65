//! Mutual TLS over QUIC: rustls configurations (ring provider, TLS 1.3 only, client certificates
//! required and chained to the cluster CA) and quinn endpoints built from them.
//!
//! TLS proves that a peer belongs to the cluster, not which node it is: callers that care check
//! [`peer_name`] against the node the peer claims to be. A dialer that does not know the name of
//! the node behind an address (gossip dials addresses) connects with [`ANY_MEMBER`] as the server
//! name: the certificate chain is still verified against the CA, only the name check is skipped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{EndpointConfig, IdleTimeout, TransportConfig, VarInt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, ServerName, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

pub use crate::identity::names::{cert_identity, cert_name, Peer, PeerName};
use crate::identity::pki::Identity;

/// ALPN protocol of the gossip endpoint.
pub const ALPN_GOSSIP: &[u8] = b"shoal-gossip/1";
/// ALPN protocol of the API endpoint.
pub const ALPN_API: &[u8] = b"shoal-api/1";
/// Server name to dial with when any member of the cluster may answer: the chain is verified
/// against the CA, the name is not (check [`peer_name`] afterwards where it matters).
pub const ANY_MEMBER: &str = "any-member.shoal.invalid";

/// What went wrong while building TLS or QUIC configuration. Nothing is bound on error.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rustls rejected the identity (key not matching the certificate, unsupported key, ...).
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The CA certificates could not be used as trust roots.
    #[error("cluster CA certificate unusable as a trust root: {0}")]
    Roots(String),
    /// The rustls configuration cannot carry QUIC (no TLS 1.3 initial cipher suite).
    #[error("TLS configuration unusable for QUIC: {0}")]
    Quic(String),
    /// A QUIC transport parameter is out of range.
    #[error("QUIC transport option out of range: {0}")]
    Option(String),
    /// The identity cannot serve here (wrong role, ...).
    #[error("{0}")]
    Identity(String),
    /// The UDP socket could not be bound.
    #[error("binding UDP {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// QUIC transport limits and timers of an endpoint.
#[derive(Debug, Clone)]
pub struct QuicOptions {
    /// A connection silent for this long is closed. Must exceed the longest gap between two
    /// contacts of the same peers (gossip picks peers at random).
    pub idle_timeout: Duration,
    /// Keep-alive ping interval on open connections (`None`: no pings).
    pub keep_alive_interval: Option<Duration>,
    /// Most bidirectional streams a peer may have open at once on one connection.
    pub bidi_streams_max: u32,
    /// Most unidirectional streams a peer may have open at once on one connection.
    pub uni_streams_max: u32,
    /// Most bytes buffered for one stream before the application reads them.
    pub stream_window_bytes: u32,
    /// Most bytes buffered for one connection over all its streams.
    pub connection_window_bytes: u32,
    /// Path MTU discovery (off saves about 5 KB per connection on loopback).
    pub mtu_discovery: bool,
}

impl QuicOptions {
    /// Options for the API endpoint: bidirectional request streams, no uni streams.
    ///
    /// What one connection can make the server hold: its requests' frames, up to the caller's
    /// certificate budget ([`crate::transport::admission::AdmissionConfig::request_bytes_per_peer_max`],
    /// shared by the certificate's connections), plus what waits unread in QUIC's buffers, at
    /// most the 1 MiB connection window; answers, at most 8 streams x the 4 MiB frame limit, for
    /// at most the answer write timeout (docs/operations.md, "Limits before and after the
    /// handshake"). The windows need not hold a whole frame: the server reads as data arrives.
    pub fn api() -> Self {
        QuicOptions {
            idle_timeout: Duration::from_secs(30),
            keep_alive_interval: None,
            bidi_streams_max: 8,
            uni_streams_max: 0,
            stream_window_bytes: 1 << 20,
            connection_window_bytes: 1 << 20,
            mtu_discovery: false,
        }
    }

    /// Options for the gossip endpoint: one uni stream per message, and one bidirectional stream
    /// at a time for a directory ask. A connection's reader takes one stream at a time, so it
    /// holds at most one 1 MiB frame plus the 2 MiB connection window of unread streams.
    pub fn gossip() -> Self {
        QuicOptions {
            idle_timeout: Duration::from_secs(60),
            keep_alive_interval: Some(Duration::from_secs(10)),
            bidi_streams_max: 1, // the directory (crate::transport::gossip::directory), one ask at a time
            uni_streams_max: 32,
            stream_window_bytes: 1 << 20,
            connection_window_bytes: 2 << 20,
            mtu_discovery: false,
        }
    }

    fn transport_config(&self) -> Result<Arc<TransportConfig>, TlsError> {
        let mut transport = TransportConfig::default();
        let idle = IdleTimeout::try_from(self.idle_timeout)
            .map_err(|e| TlsError::Option(format!("idle_timeout: {e}")))?;
        transport
            .max_idle_timeout(Some(idle))
            .keep_alive_interval(self.keep_alive_interval)
            .max_concurrent_bidi_streams(VarInt::from_u32(self.bidi_streams_max))
            .max_concurrent_uni_streams(VarInt::from_u32(self.uni_streams_max))
            .stream_receive_window(VarInt::from_u32(self.stream_window_bytes))
            .receive_window(VarInt::from_u32(self.connection_window_bytes))
            .send_window(u64::from(self.connection_window_bytes));
        if !self.mtu_discovery {
            transport.mtu_discovery_config(None);
        }
        Ok(Arc::new(transport))
    }
}

/// The crypto provider used everywhere: ring, passed explicitly so that no process-wide default
/// is needed (and no panic if another provider is compiled in).
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(identity: &Identity) -> Result<Arc<RootCertStore>, TlsError> {
    roots_of(&identity.ca_certs)
}

fn roots_of(ca_certs: &[CertificateDer<'static>]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for ca in ca_certs {
        roots
            .add(ca.clone())
            .map_err(|e| TlsError::Roots(e.to_string()))?;
    }
    Ok(Arc::new(roots))
}

/// A verifier of client certificates: chained to `ca_certs`, not revoked by `crls`.
pub fn client_verifier(
    ca_certs: &[CertificateDer<'static>],
    crls: &[CertificateRevocationListDer<'static>],
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let webpki =
        WebPkiClientVerifier::builder_with_provider(roots_of(ca_certs)?, crypto_provider())
            .with_crls(crls.iter().cloned())
            .only_check_end_entity_revocation()
            .allow_unknown_revocation_status()
            .build()
            .map_err(|e| TlsError::Roots(e.to_string()))?;
    Ok(Arc::new(ClusterClientVerifier { webpki }))
}

/// Verifies client chains with webpki, and says "unknown CA" for a certificate of another CA.
///
/// Every Shoal CA has the same name, so webpki takes another mesh's CA for ours, finds that the
/// signature does not verify and reports `BadSignature`, which rustls sends as the alert
/// `decrypt_error`: the refused client could not tell that from a broken key. A chain whose
/// signature does not verify under our CA was not issued by it: `unknown_ca` (48), which the
/// CLI turns into "issued by another CA". Expired (`certificate_expired`, 45) and revoked
/// (`certificate_revoked`, 44) pass through as rustls maps them.
#[derive(Debug)]
struct ClusterClientVerifier {
    webpki: Arc<dyn ClientCertVerifier>,
}

/// The refusal the client is told for `error`, a verdict on its chain (see
/// [`ClusterClientVerifier`]).
fn chain_refusal(error: rustls::Error) -> rustls::Error {
    use rustls::CertificateError::{BadSignature, UnknownIssuer};
    match error {
        #[allow(deprecated)]
        rustls::Error::InvalidCertificate(BadSignature) => {
            rustls::Error::InvalidCertificate(UnknownIssuer)
        }
        other => other,
    }
}

impl ClientCertVerifier for ClusterClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.webpki.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.webpki.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        self.webpki
            .verify_client_cert(end_entity, intermediates, now)
            .map_err(chain_refusal)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// A TLS 1.3 server configuration that requires a client certificate chained to the cluster CA.
pub fn server_config(identity: &Identity, alpn: &[u8]) -> Result<rustls::ServerConfig, TlsError> {
    server_config_with(identity, alpn, &[])
}

/// [`server_config`], refusing the client certificates `crls` revoke.
pub fn server_config_with(
    identity: &Identity,
    alpn: &[u8],
    crls: &[CertificateRevocationListDer<'static>],
) -> Result<rustls::ServerConfig, TlsError> {
    let provider = crypto_provider();
    let verifier = client_verifier(&identity.ca_certs, crls)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.cert_chain.clone(), identity.key.clone_key())?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

/// A TLS 1.3 client configuration presenting `identity` and verifying the server against the
/// cluster CA (by name, unless the server name is [`ANY_MEMBER`]).
pub fn client_config(identity: &Identity, alpn: &[u8]) -> Result<rustls::ClientConfig, TlsError> {
    client_config_with(identity, alpn, &[])
}

/// [`client_config`], refusing the server certificates `crls` revoke.
pub fn client_config_with(
    identity: &Identity,
    alpn: &[u8],
    crls: &[CertificateRevocationListDer<'static>],
) -> Result<rustls::ClientConfig, TlsError> {
    let provider = crypto_provider();
    let webpki = WebPkiServerVerifier::builder_with_provider(roots(identity)?, provider.clone())
        .with_crls(crls.iter().cloned())
        .only_check_end_entity_revocation()
        .allow_unknown_revocation_status()
        .build()
        .map_err(|e| TlsError::Roots(e.to_string()))?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ClusterServerVerifier { webpki }))
        .with_client_auth_cert(identity.cert_chain.clone(), identity.key.clone_key())?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

/// Verifies the server's chain with webpki against the cluster CA; checks the name unless the
/// caller dialed [`ANY_MEMBER`], in which case the certificate's own name is used for the check.
#[derive(Debug)]
struct ClusterServerVerifier {
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ClusterServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let any = matches!(server_name, ServerName::DnsName(n) if n.as_ref() == ANY_MEMBER);
        if !any {
            let v = &self.webpki;
            return v.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            );
        }
        let own_name = cert_name(end_entity)
            .and_then(|n| ServerName::try_from(n).ok())
            .ok_or(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            ))?;
        self.webpki
            .verify_server_cert(end_entity, intermediates, &own_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// The end-entity certificate a connection's peer presented.
pub fn peer_cert(conn: &quinn::Connection) -> Option<CertificateDer<'static>> {
    let identity = conn.peer_identity()?;
    let certs = identity.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    certs.first().cloned()
}

/// The authenticated name and role of the peer of an established connection, or why its
/// certificate is not accepted (see [`cert_identity`]).
pub fn peer(conn: &quinn::Connection) -> Result<Peer, String> {
    cert_identity(&peer_cert(conn).ok_or("no peer certificate")?)
}

/// The authenticated name of the peer of an established connection (its certificate's name).
pub fn peer_name(conn: &quinn::Connection) -> Option<PeerName> {
    cert_name(&peer_cert(conn)?).map(PeerName)
}

/// A quinn endpoint configuration whose stateless-reset key and connection-id key are derived
/// from the node's private key, so that they survive restarts: a restarted node can then reset
/// its peers' stale connections at once instead of letting writes vanish until they time out.
/// The ALPN is mixed in so that each of a node's endpoints has its own keys.
pub fn endpoint_config(identity: &Identity, alpn: &[u8]) -> EndpointConfig {
    use ring::hkdf;
    let prk =
        hkdf::Salt::new(hkdf::HKDF_SHA256, b"shoal-quic-keys/1").extract(identity.key.secret_der());
    let derive = |label: &[u8]| {
        let mut out = [0u8; 32];
        let labels = [alpn, label];
        // Both calls only fail for output lengths over 255 * 32 bytes.
        let okm = prk.expand(&labels, hkdf::HKDF_SHA256).expect("hkdf expand");
        okm.fill(&mut out).expect("hkdf fill");
        out
    };
    let reset = derive(b"stateless-reset");
    let cid = derive(b"connection-id");
    let cid_key = u64::from_le_bytes(cid[..8].try_into().expect("8 bytes"));
    let mut config = EndpointConfig::new(Arc::new(ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        &reset,
    )));
    config.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    config
}

/// quinn server configuration for `identity` and `alpn` with `options`.
pub fn quic_server_config(
    identity: &Identity,
    alpn: &[u8],
    options: &QuicOptions,
) -> Result<quinn::ServerConfig, TlsError> {
    quic_server_config_with(identity, alpn, options, &[])
}

fn quic_server_config_with(
    identity: &Identity,
    alpn: &[u8],
    options: &QuicOptions,
    crls: &[CertificateRevocationListDer<'static>],
) -> Result<quinn::ServerConfig, TlsError> {
    let crypto = QuicServerConfig::try_from(server_config_with(identity, alpn, crls)?)
        .map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut config = quinn::ServerConfig::new(Arc::new(crypto), retry_token_key());
    config.transport_config(options.transport_config()?);
    // An attempt waits in quinn's queue only until the accept loop decides on it, at once
    // (crate::transport::admission): a few datagrams each. quinn's defaults (65,536 attempts, 10 MiB each,
    // 100 MiB in all) are sized for servers that await something before deciding.
    config
        .max_incoming(INCOMING_MAX)
        .incoming_buffer_size(INCOMING_BUFFER_BYTES)
        .incoming_buffer_size_total(INCOMING_BUFFER_TOTAL_BYTES);
    Ok(config)
}

/// The key that seals and opens this process's QUIC Retry tokens: one for the life of the
/// process, whatever server configuration an endpoint is given.
///
/// quinn's `ServerConfig::with_crypto` draws a new key per configuration. An endpoint that
/// validates addresses ([`crate::transport::admission`]) and is given a new configuration (a
/// renewed certificate, a new revocation list: [`LiveEndpoint::refresh`]) between the Retry it
/// sent and the client's answer would then not open the token: it sees an unvalidated attempt and
/// sends a second Retry, which a client must ignore (RFC 9000 17.2.5.2), so the client waits out
/// its whole idle timeout (30 s on the API) and fails. A token binds the client's address and
/// lives 15 s, so sharing the key between a process's endpoints opens nothing new.
fn retry_token_key() -> Arc<dyn quinn::crypto::HandshakeTokenKey> {
    static KEY: std::sync::OnceLock<Arc<ring::hkdf::Prk>> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let mut master = [0u8; 64];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut master)
            .expect("the system's random source");
        Arc::new(ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(&master))
    })
    .clone()
}

/// Most connection attempts waiting for the accept loop; further ones are refused by quinn.
const INCOMING_MAX: usize = 1024;
/// Datagrams buffered per waiting attempt after its first one.
const INCOMING_BUFFER_BYTES: u64 = 16 << 10;
/// Datagrams buffered for all waiting attempts together.
const INCOMING_BUFFER_TOTAL_BYTES: u64 = 1 << 20;

/// quinn client configuration for `identity` and `alpn` with `options`.
pub fn quic_client_config(
    identity: &Identity,
    alpn: &[u8],
    options: &QuicOptions,
) -> Result<quinn::ClientConfig, TlsError> {
    quic_client_config_with(identity, alpn, options, &[])
}

fn quic_client_config_with(
    identity: &Identity,
    alpn: &[u8],
    options: &QuicOptions,
    crls: &[CertificateRevocationListDer<'static>],
) -> Result<quinn::ClientConfig, TlsError> {
    let crypto = QuicClientConfig::try_from(client_config_with(identity, alpn, crls)?)
        .map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(options.transport_config()?);
    Ok(config)
}

/// An endpoint whose TLS configuration an agent keeps current (a renewed certificate, a new
/// revocation list): see [`crate::identity::authority::Authority::follow`].
pub struct LiveEndpoint {
    endpoint: quinn::Endpoint,
    identity: Identity,
    alpn: Vec<u8>,
    options: QuicOptions,
    /// The endpoint accepts connections (else it only dials).
    serves: bool,
}

impl LiveEndpoint {
    /// Follows `endpoint`, bound with `identity`, `alpn` and `options`.
    pub fn new(
        endpoint: quinn::Endpoint,
        identity: &Identity,
        alpn: &[u8],
        options: &QuicOptions,
        serves: bool,
    ) -> Self {
        LiveEndpoint {
            endpoint,
            identity: identity.clone(),
            alpn: alpn.to_vec(),
            options: options.clone(),
            serves,
        }
    }

    /// Rebuilds the endpoint's server and client configurations with `identity` (when given:
    /// a renewed certificate) and `crls`. New connections use them; open ones keep theirs (the
    /// caller closes those of revoked certificates).
    pub fn refresh(
        &mut self,
        identity: Option<&Identity>,
        crls: &[CertificateRevocationListDer<'static>],
    ) -> Result<(), TlsError> {
        if let Some(identity) = identity {
            self.identity = identity.clone();
        }
        let (id, alpn, options) = (&self.identity, &self.alpn, &self.options);
        if self.serves {
            let server = quic_server_config_with(id, alpn, options, crls)?;
            self.endpoint.set_server_config(Some(server));
        }
        let client = quic_client_config_with(id, alpn, options, crls)?;
        self.endpoint.set_default_client_config(client);
        Ok(())
    }
}

/// Binds one endpoint on `addr` that both accepts (mutual TLS, `alpn`) and dials (the same
/// identity and `alpn` as its default client configuration).
pub fn bind_endpoint(
    addr: SocketAddr,
    identity: &Identity,
    alpn: &[u8],
    options: &QuicOptions,
) -> Result<quinn::Endpoint, TlsError> {
    let server = quic_server_config(identity, alpn, options)?;
    bind(addr, identity, alpn, options, Some(server), &|socket| {
        socket
    })
}

/// What wraps a serving endpoint's UDP socket before quinn reads it (a filter of datagrams, in
/// the transport layer).
pub type WrapSocket<'a> =
    &'a dyn Fn(Arc<dyn quinn::AsyncUdpSocket>) -> Arc<dyn quinn::AsyncUdpSocket>;

/// [`bind_endpoint`], quinn reading the socket through `wrap`.
pub fn bind_endpoint_wrapped(
    addr: SocketAddr,
    identity: &Identity,
    alpn: &[u8],
    options: &QuicOptions,
    wrap: WrapSocket<'_>,
) -> Result<quinn::Endpoint, TlsError> {
    let server = quic_server_config(identity, alpn, options)?;
    bind(addr, identity, alpn, options, Some(server), wrap)
}

/// Binds a dial-only endpoint on an ephemeral port of the same family as `peer` (for the CLI).
pub fn client_endpoint(
    peer: SocketAddr,
    identity: &Identity,
    alpn: &[u8],
    options: &QuicOptions,
) -> Result<quinn::Endpoint, TlsError> {
    let any: SocketAddr = if peer.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    bind(any, identity, alpn, options, None, &|socket| socket)
}

fn bind(
    addr: SocketAddr,
    identity: &Identity,
    alpn: &[u8],
    options: &QuicOptions,
    server: Option<quinn::ServerConfig>,
    wrap: WrapSocket<'_>,
) -> Result<quinn::Endpoint, TlsError> {
    let client = quic_client_config(identity, alpn, options)?;
    let socket =
        std::net::UdpSocket::bind(addr).map_err(|source| TlsError::Bind { addr, source })?;
    if server.is_some() {
        let (receive, send) = enlarge_buffers(&socket);
        let endpoint = String::from_utf8_lossy(alpn);
        tracing::info!(%addr, %endpoint, receive_bytes = receive, send_bytes = send,
            asked_bytes = UDP_BUFFER_BYTES, "UDP socket buffers");
        let counter = if alpn == ALPN_API {
            &API_RECEIVE_BUFFER_BYTES
        } else {
            &GOSSIP_RECEIVE_BUFFER_BYTES
        };
        counter.store(receive as u64, Relaxed);
    }
    let runtime = Arc::new(quinn::TokioRuntime);
    let socket = quinn::Runtime::wrap_udp_socket(&*runtime, socket)
        .map_err(|source| TlsError::Bind { addr, source })?;
    let mut endpoint = quinn::Endpoint::new_with_abstract_socket(
        endpoint_config(identity, alpn),
        server,
        wrap(socket),
        runtime,
    )
    .map_err(|source| TlsError::Bind { addr, source })?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// Receive and send buffer asked for on a serving endpoint's UDP socket. The kernel default
/// (about 208 KiB: some 90 datagrams of 1,200 bytes, each taking about 2.3 KB of it) overflowed
/// in the bursts of a flood of 300 junk senders and lost handshake packets (issue 29); 2 MiB
/// holds some 1,800. Not more: under a flood the agent cannot keep up with, the buffer stays full
/// and every legitimate packet waits behind it (8 MiB made a debug agent's handshakes take over
/// 5 s where 208 KiB lost some and answered the rest; docs/measurements.md).
pub const UDP_BUFFER_BYTES: usize = 2 << 20;

static API_RECEIVE_BUFFER_BYTES: AtomicU64 = AtomicU64::new(0);
static GOSSIP_RECEIVE_BUFFER_BYTES: AtomicU64 = AtomicU64::new(0);

/// The receive buffer the kernel gave the last API and gossip endpoints bound in this process
/// (bytes as the kernel reports them, which on Linux is twice what it accounts; 0 before one is
/// bound), for `/metrics`.
pub fn udp_receive_buffer_bytes() -> (u64, u64) {
    (
        API_RECEIVE_BUFFER_BYTES.load(Relaxed),
        GOSSIP_RECEIVE_BUFFER_BYTES.load(Relaxed),
    )
}

/// Asks for [`UDP_BUFFER_BYTES`] both ways: past `net.core.rmem_max`/`wmem_max` with the FORCE
/// options when the process may (root, CAP_NET_ADMIN), else up to those maxima. Returns what
/// the kernel reports it got (receive, send); a failure leaves the default, which still works.
fn enlarge_buffers(socket: &std::net::UdpSocket) -> (usize, usize) {
    use rustix::net::sockopt;
    if sockopt::set_socket_recv_buffer_size_force(socket, UDP_BUFFER_BYTES).is_err() {
        let _ = sockopt::set_socket_recv_buffer_size(socket, UDP_BUFFER_BYTES);
    }
    if sockopt::set_socket_send_buffer_size_force(socket, UDP_BUFFER_BYTES).is_err() {
        let _ = sockopt::set_socket_send_buffer_size(socket, UDP_BUFFER_BYTES);
    }
    (
        sockopt::socket_recv_buffer_size(socket).unwrap_or(0),
        sockopt::socket_send_buffer_size(socket).unwrap_or(0),
    )
}

#[cfg(test)]
mod buffer_tests {
    #[test]
    fn serving_sockets_get_more_than_the_default_buffers() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let default = rustix::net::sockopt::socket_recv_buffer_size(&socket).unwrap();
        let (receive, send) = super::enlarge_buffers(&socket);
        // FORCE (root with CAP_NET_ADMIN) gets the whole size; otherwise the kernel caps it at
        // net.core.rmem_max. Linux reports twice what it was asked.
        let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let floor = 2 * rmem_max.min(super::UDP_BUFFER_BYTES);
        assert!(
            receive >= floor.max(default),
            "{receive}: default {default}, rmem_max {rmem_max}"
        );
        assert!(receive <= 2 * super::UDP_BUFFER_BYTES, "{receive}");
        assert!(send > 0);
    }
}

#[cfg(test)]
mod verifier_tests {
    use rustls::pki_types::UnixTime;
    use rustls::CertificateError;

    use crate::identity::pki::{self, IssueOptions, Role, SelfIssue};

    /// A client certificate of another mesh's CA (the same CA name, another key) is refused as
    /// of an unknown CA, not as a bad signature.
    #[test]
    fn a_certificate_of_another_ca_is_of_an_unknown_ca() {
        let ours = tempfile::tempdir().unwrap();
        let theirs = tempfile::tempdir().unwrap();
        pki::init(ours.path()).unwrap();
        pki::init(theirs.path()).unwrap();
        pki::issue(theirs.path(), "eve", &IssueOptions::new(Role::Client)).unwrap();
        pki::issue(ours.path(), "alice", &IssueOptions::new(Role::Client)).unwrap();
        let us = pki::load_identity(ours.path(), "alice", SelfIssue::No).unwrap();
        let eve = pki::load_identity(theirs.path(), "eve", SelfIssue::No).unwrap();
        let verifier = super::client_verifier(&us.ca_certs, &[]).unwrap();
        let now = UnixTime::now();
        assert!(verifier
            .verify_client_cert(&us.cert_chain[0], &[], now)
            .is_ok());
        let refused = verifier
            .verify_client_cert(&eve.cert_chain[0], &[], now)
            .unwrap_err();
        assert_eq!(
            refused,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        );
        // Past its end, a certificate of ours is expired (certificate_expired), not unknown.
        let later = UnixTime::since_unix_epoch(std::time::Duration::from_secs(4_000_000_000));
        let expired = verifier
            .verify_client_cert(&us.cert_chain[0], &[], later)
            .unwrap_err();
        let rustls::Error::InvalidCertificate(why) = expired else {
            panic!("{expired:?}");
        };
        assert_eq!(
            rustls::AlertDescription::from(why),
            rustls::AlertDescription::CertificateExpired
        );
    }
}

#[cfg(test)]
mod retry_tests {
    use std::time::Duration;

    use super::{bind_endpoint, client_endpoint, LiveEndpoint, QuicOptions, ALPN_API, ANY_MEMBER};
    use crate::identity::pki::{self, IssueOptions, Role, SelfIssue};

    /// A client that got a Retry before its server was given a new configuration (a renewed
    /// certificate, a new revocation list) answers with a token the server still opens: its
    /// attempt is validated and the handshake completes. (With a key per configuration the server
    /// saw an unvalidated attempt, sent a second Retry the client must ignore, and the client
    /// waited out its idle timeout: CI's `authority_agents` failure.)
    #[tokio::test]
    async fn a_retry_token_sent_before_a_refresh_is_opened_after_it() {
        let dir = tempfile::tempdir().unwrap();
        pki::init(dir.path()).unwrap();
        pki::issue(dir.path(), "n1", &IssueOptions::new(Role::Node)).unwrap();
        pki::issue(dir.path(), "alice", &IssueOptions::new(Role::Client)).unwrap();
        let server_id = pki::load_identity(dir.path(), "n1", SelfIssue::No).unwrap();
        let client_id = pki::load_identity(dir.path(), "alice", SelfIssue::No).unwrap();
        let options = QuicOptions::api();
        let server = bind_endpoint(
            "127.0.0.1:0".parse().unwrap(),
            &server_id,
            ALPN_API,
            &options,
        )
        .unwrap();
        let addr = server.local_addr().unwrap();
        let mut live = LiveEndpoint::new(server.clone(), &server_id, ALPN_API, &options, true);
        let client = client_endpoint(addr, &client_id, ALPN_API, &options).unwrap();
        let dialing = tokio::spawn(async move {
            let connecting = client.connect(addr, ANY_MEMBER).unwrap();
            tokio::time::timeout(Duration::from_secs(20), connecting).await
        });
        let wait = Duration::from_secs(10);
        let first = tokio::time::timeout(wait, server.accept())
            .await
            .expect("a first attempt")
            .unwrap();
        assert!(!first.remote_address_validated());
        let renewed = pki::renew(dir.path(), "n1", None).unwrap();
        assert!(renewed.cert.exists());
        let server_id = pki::load_identity(dir.path(), "n1", SelfIssue::No).unwrap();
        live.refresh(Some(&server_id), &[]).unwrap();
        first.retry().unwrap();
        let second = tokio::time::timeout(wait, server.accept())
            .await
            .expect("the client's answer to the Retry")
            .unwrap();
        assert!(
            second.remote_address_validated(),
            "the Retry token sealed before the refresh does not open after it"
        );
        let accepted = tokio::time::timeout(wait, second.accept().unwrap())
            .await
            .expect("the server's side of the handshake")
            .unwrap();
        let dialed = dialing
            .await
            .unwrap()
            .expect("the client's handshake in time")
            .unwrap();
        assert_eq!(
            super::peer_cert(&dialed).unwrap().to_vec(),
            server_id.cert_chain[0].to_vec(),
            "the client sees the renewed certificate"
        );
        accepted.close(0u32.into(), b"done");
    }
}
