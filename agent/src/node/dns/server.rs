//! The DNS server's tasks: UDP workers over one socket, and a TCP listener with a bounded number
//! of connections, each query length-prefixed and read under a timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use super::answer::{answer, truncated, Outcome, Transport, Zone, QUERY_BYTES_MAX};
use super::limit::{ResponseLimiter, Verdict};
use super::table::EndpointTable;
use super::DnsStats;

/// Where the answers come from: the last table the host loop published.
pub type TableSource = Arc<dyn Fn() -> Arc<EndpointTable> + Send + Sync>;

/// Tasks reading the UDP socket (the machine's cores answer in parallel).
pub const UDP_WORKERS: usize = 2;
/// TCP connections served at once; more are closed at once, counted.
pub const TCP_CONNECTIONS_MAX: usize = 64;
/// How long a TCP connection may sit between queries, or take to take an answer.
pub const TCP_IDLE: Duration = Duration::from_secs(5);
/// Queries answered on one TCP connection before it is closed.
pub const TCP_QUERIES_PER_CONNECTION_MAX: usize = 1024;

/// `shoal agent --dns`.
#[derive(Clone, Debug)]
pub struct DnsConfig {
    /// The UDP and TCP address to serve on.
    pub addr: SocketAddr,
    /// The zone answered (`shoal.` by default).
    pub zone: Zone,
}

/// The running server; its tasks stop when it is dropped.
pub struct DnsServer {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The UDP address actually bound (the port when `addr` asked for 0).
    pub local_addr: SocketAddr,
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl DnsServer {
    /// Binds UDP and TCP on `config.addr` and starts answering from `source`.
    pub async fn start(
        config: DnsConfig,
        source: TableSource,
        stats: Arc<DnsStats>,
    ) -> std::io::Result<DnsServer> {
        Self::start_with(config, source, stats, ResponseLimiter::default()).await
    }

    /// [`DnsServer::start`] with UDP responses limited by `limiter` (tests use small budgets).
    pub async fn start_with(
        config: DnsConfig,
        source: TableSource,
        stats: Arc<DnsStats>,
        limiter: ResponseLimiter,
    ) -> std::io::Result<DnsServer> {
        let udp = Arc::new(UdpSocket::bind(config.addr).await?);
        let local_addr = udp.local_addr()?;
        let tcp = TcpListener::bind(local_addr).await?;
        let zone = Arc::new(config.zone);
        let limiter = Arc::new(Limiter {
            origin: std::time::Instant::now(),
            state: std::sync::Mutex::new(limiter),
        });
        let mut tasks = Vec::new();
        for _ in 0..UDP_WORKERS {
            let (udp, zone, source, stats) =
                (udp.clone(), zone.clone(), source.clone(), stats.clone());
            let limiter = limiter.clone();
            tasks.push(tokio::spawn(serve_udp(udp, zone, source, stats, limiter)));
        }
        tasks.push(tokio::spawn(serve_tcp(tcp, zone, source, stats)));
        Ok(DnsServer { tasks, local_addr })
    }
}

/// The UDP workers' shared response limiter and its clock's origin.
struct Limiter {
    origin: std::time::Instant,
    state: std::sync::Mutex<ResponseLimiter>,
}

impl Limiter {
    /// The verdict on a response of `response_bytes` to `query_bytes` from `from`.
    fn verdict(&self, from: SocketAddr, query_bytes: usize, response_bytes: usize) -> Verdict {
        let now = self.origin.elapsed();
        // A poisoned lock only means another worker panicked mid-update: the buckets stay sane.
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.handle_response(from.ip(), query_bytes, response_bytes, now)
    }
}

async fn serve_udp(
    socket: Arc<UdpSocket>,
    zone: Arc<Zone>,
    source: TableSource,
    stats: Arc<DnsStats>,
    limiter: Arc<Limiter>,
) {
    // One byte more than a query may be: a longer datagram reads as oversized, not cut short.
    let mut buf = vec![0u8; QUERY_BYTES_MAX + 1];
    loop {
        let (len, from) = match socket.recv_from(&mut buf).await {
            Ok(got) => got,
            Err(e) => {
                // ICMP errors of earlier sends surface here on Linux; keep serving.
                tracing::debug!(error = %e, "dns: udp receive failed");
                continue;
            }
        };
        let outcome = answer(&source(), &zone, &buf[..len], Transport::Udp);
        stats.count(Transport::Udp, &outcome);
        if let Outcome::Reply { mut bytes, .. } = outcome {
            if limiter.verdict(from, len, bytes.len()) == Verdict::Slip {
                let Some(cut) = truncated(&bytes) else {
                    continue;
                };
                stats.count_slipped();
                bytes = cut;
            }
            if let Err(e) = socket.send_to(&bytes, from).await {
                tracing::debug!(%from, error = %e, "dns: udp send failed");
            }
        }
    }
}

async fn serve_tcp(
    listener: TcpListener,
    zone: Arc<Zone>,
    source: TableSource,
    stats: Arc<DnsStats>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(TCP_CONNECTIONS_MAX));
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(got) => got,
            Err(e) => {
                tracing::warn!(error = %e, "dns: tcp accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            stats.count_tcp_refused();
            drop(stream);
            continue;
        };
        let (zone, source, stats) = (zone.clone(), source.clone(), stats.clone());
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = serve_connection(stream, &zone, &source, &stats).await {
                tracing::debug!(%from, error = %e, "dns: tcp connection closed");
            }
        });
    }
}

/// Answers length-prefixed queries until the peer closes, idles past [`TCP_IDLE`], sends
/// something that is not a query, or reaches [`TCP_QUERIES_PER_CONNECTION_MAX`].
async fn serve_connection(
    mut stream: TcpStream,
    zone: &Zone,
    source: &TableSource,
    stats: &DnsStats,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; QUERY_BYTES_MAX];
    for _ in 0..TCP_QUERIES_PER_CONNECTION_MAX {
        let mut prefix = [0u8; 2];
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut prefix)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                stats.count_tcp_timeout();
                return Ok(());
            }
        }
        let len = usize::from(u16::from_be_bytes(prefix));
        if len > QUERY_BYTES_MAX {
            // Not read: counted as an oversized query, and the connection goes.
            let outcome = Outcome::Drop(super::Dropped::Oversized);
            stats.count(Transport::Tcp, &outcome);
            return Ok(());
        }
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut buf[..len])).await {
            Ok(read) => read?,
            Err(_) => {
                stats.count_tcp_timeout();
                return Ok(());
            }
        };
        let outcome = answer(&source(), zone, &buf[..len], Transport::Tcp);
        stats.count(Transport::Tcp, &outcome);
        let Outcome::Reply { bytes, .. } = outcome else {
            return Ok(());
        };
        let mut framed = Vec::with_capacity(bytes.len() + 2);
        framed.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        framed.extend_from_slice(&bytes);
        match tokio::time::timeout(TCP_IDLE, stream.write_all(&framed)).await {
            Ok(written) => written?,
            Err(_) => {
                stats.count_tcp_timeout();
                return Ok(());
            }
        }
    }
    Ok(())
}
