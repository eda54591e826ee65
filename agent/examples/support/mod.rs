//! Pieces the benchmark examples share: the API client setup, free ports, a median and a
//! percentile.
#![allow(dead_code)] // each example uses its own subset

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;

use shoal::identity::tls::{self, QuicOptions, ALPN_API};
use shoal::transport::rpc::{QuicRpcClient, RpcError, TransportStats};

/// An RPC client with one QUIC connection per agent, presenting a client certificate it issues
/// from the CA in `pki`. Must be called inside the tokio runtime (the endpoint needs it).
pub fn bench_rpc(pki: &Path) -> anyhow::Result<QuicRpcClient> {
    let identity = shoal::identity::pki::load_identity(
        pki,
        "shoal-bench",
        shoal::identity::pki::SelfIssue::As(shoal::identity::pki::Role::Client),
    )?;
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let endpoint = tls::client_endpoint(any, &identity, ALPN_API, &QuicOptions::api())?;
    Ok(QuicRpcClient::new(
        endpoint,
        Arc::new(TransportStats::default()),
    ))
}

/// An answer this example cannot decode means the agents run a binary built from other sources.
pub fn skew_hint(err: RpcError) -> anyhow::Error {
    match err {
        RpcError::Wire(e) => anyhow::anyhow!(
            "{e}: the agents' binary and this example were built from different sources; rebuild \
             both (cargo build --release -p shoal --bin shoal --examples)"
        ),
        other => other.into(),
    }
}

/// The median (the mean of the two middle values for an even count).
pub fn median(values: &[u64]) -> Option<u64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2),
    }
}

/// The `p`th percentile by nearest rank (`p` in 1..=100): the smallest value with at least `p`
/// percent of the values at or below it.
pub fn percentile(values: &[u64], p: u32) -> Option<u64> {
    assert!((1..=100).contains(&p), "a percentile is 1..=100, not {p}");
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * p as usize).div_ceil(100);
    sorted.get(rank.checked_sub(1)?).copied()
}

/// `n` distinct free loopback UDP addresses (bound together, then released).
pub fn free_udp_addrs(n: usize) -> anyhow::Result<Vec<SocketAddr>> {
    let sockets = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(sockets
        .iter()
        .map(|s| s.local_addr())
        .collect::<Result<_, _>>()?)
}
