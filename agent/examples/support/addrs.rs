//! Free loopback ports for the agents a bench starts.

use std::net::{SocketAddr, TcpListener, UdpSocket};

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

/// `n` distinct free loopback TCP addresses (bound together, then released).
pub fn free_tcp_addrs(n: usize) -> anyhow::Result<Vec<SocketAddr>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<_, _>>()?)
}
