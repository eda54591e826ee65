//! Free loopback ports for the agents a bench starts.

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};

/// `n` distinct free loopback UDP addresses (bound together, then released).
pub fn free_udp_addrs(n: usize) -> anyhow::Result<Vec<SocketAddr>> {
    free_addrs(n, || UdpSocket::bind("127.0.0.1:0"), UdpSocket::local_addr)
}

/// `n` distinct free loopback TCP addresses (bound together, then released).
pub fn free_tcp_addrs(n: usize) -> anyhow::Result<Vec<SocketAddr>> {
    free_addrs(
        n,
        || TcpListener::bind("127.0.0.1:0"),
        TcpListener::local_addr,
    )
}

/// The addresses of `n` sockets from `bind`, all held until every address is known, so that no
/// two are the same.
fn free_addrs<S>(
    n: usize,
    bind: impl Fn() -> io::Result<S>,
    addr: impl Fn(&S) -> io::Result<SocketAddr>,
) -> anyhow::Result<Vec<SocketAddr>> {
    let sockets = (0..n).map(|_| bind()).collect::<io::Result<Vec<_>>>()?;
    Ok(sockets.iter().map(addr).collect::<io::Result<_>>()?)
}
