//! Accepting UI connections: a TCP listener, TLS with a client certificate of the cluster on a
//! non-loopback address (plain HTTP is allowed on loopback only), one hyper HTTP/1 connection
//! task per connection, at most [`CONNECTIONS_MAX`] at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::identity::authority::Authority;
use crate::identity::names::{cert_identity, Role};
use crate::identity::pki::Identity;

/// Most UI connections served at once; more wait in the kernel's backlog.
pub const CONNECTIONS_MAX: usize = 64;
/// A TLS handshake that takes longer is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A request whose header takes longer to arrive is dropped (slowloris).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// What the UI's TLS is built from: this node's certificate, the cluster CA and the revocations
/// the authority holds when a connection arrives (a revoked client is refused at the next
/// handshake; a renewed node certificate is served after the agent restarts).
#[derive(Clone)]
pub struct UiTls {
    identity: Identity,
    authority: Arc<Authority>,
}

impl UiTls {
    /// TLS from this node's identity, with the authority's revocation list.
    pub fn new(identity: &Identity, authority: Arc<Authority>) -> Self {
        UiTls {
            identity: identity.clone(),
            authority,
        }
    }

    fn server_config(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let crls = self.authority.crl_ders();
        let config = crate::identity::tls::server_config_with(&self.identity, b"http/1.1", &crls)?;
        Ok(Arc::new(config))
    }
}

/// Whether `addr` may serve the UI as asked: plain HTTP only on a loopback address; elsewhere
/// only with TLS (a client certificate of the cluster required).
pub fn check_addr(addr: SocketAddr, tls: bool) -> anyhow::Result<()> {
    if addr.ip().is_loopback() || tls {
        return Ok(());
    }
    anyhow::bail!(
        "--ui {addr}: a non-loopback address needs TLS with a client certificate of the cluster, \
         and no TLS was configured; serve the UI on loopback (--ui 127.0.0.1:{}) and reach it \
         through an SSH tunnel, or give it the node's certificate",
        addr.port()
    )
}

/// A bound UI listener, ready to serve.
pub struct UiListener {
    listener: TcpListener,
    tls: Option<UiTls>,
}

impl UiListener {
    /// Binds `addr`; TLS is used on a non-loopback address (refused without it), never on
    /// loopback.
    pub async fn bind(addr: SocketAddr, tls: Option<UiTls>) -> anyhow::Result<Self> {
        check_addr(addr, tls.is_some())?;
        let tls = tls.filter(|_| !addr.ip().is_loopback());
        if let Some(tls) = &tls {
            tls.server_config()
                .context("building the UI's TLS configuration")?;
        }
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the UI on {addr}"))?;
        Ok(UiListener { listener, tls })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Whether it serves TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }
}

/// Serves the UI on `listener` from `api` until the task is dropped or the API is gone.
pub async fn serve(listener: UiListener, api: super::WeakApi) {
    let live = super::live::Hub::start(api.clone());
    let router = super::routes::router(api, live);
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, from) = match listener.listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "UI accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let router = router.clone();
        let tls = listener.tls.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match tls {
                None => serve_connection(stream, router).await,
                Some(tls) => match handshake(stream, &tls).await {
                    Ok(stream) => serve_connection(stream, router).await,
                    Err(e) => tracing::info!(%from, error = %e, "UI connection refused"),
                },
            }
        });
    }
}

/// The TLS handshake, then the client's role: any client role of the cluster (not a node's).
async fn handshake(
    stream: tokio::net::TcpStream,
    tls: &UiTls,
) -> anyhow::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config()?);
    let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .context("TLS handshake timed out")?
        .context("TLS handshake")?;
    let cert = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .context("no client certificate")?;
    let peer = cert_identity(cert).map_err(|e| anyhow::anyhow!(e))?;
    if peer.role == Role::Node {
        anyhow::bail!("{peer} holds a node certificate; the UI takes client certificates");
    }
    Ok(stream)
}

async fn serve_connection<S>(stream: S, router: axum::Router)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(router);
    let result = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = result {
        tracing::debug!(error = %e, "UI connection ended");
    }
}
