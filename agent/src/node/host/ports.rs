//! Named ports on this host: the shell around [`PortBook`] (`shoal_core::ports`). A start takes
//! its ports from the book before the runtime sees it, each checked free on the host by binding
//! it (TCP and UDP, on every address); the runtime's list each round tells the book what still
//! holds ports, adopted instances included. Fixed numbers are not in the book: each start checks
//! them free on the host, for their protocol.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use shoal_core::instance::{ReplicaId, RuntimeInstance};
use shoal_core::ports::{Listed, PortBook, PortError};
use shoal_core::spec::{Protocol, WorkloadSpec};

use super::Host;

/// The ports of one start, and its ticket in the book (`None`: nothing was allocated).
pub(crate) struct StartPorts {
    pub ports: BTreeMap<String, u16>,
    pub ticket: Option<u64>,
}

impl Host {
    /// The address this host advertises, handed to instances as `SHOAL_ADDR`: the IP of its
    /// API address, or of its gossip address when the API is bound to an unspecified one.
    pub fn advertised_addr(&self) -> IpAddr {
        let gossip = self.node.gossip().chitchat_id().gossip_advertise_addr.ip();
        let api = self.node.record().map(|r| r.api_addr.ip());
        api.into_iter()
            .chain([gossip])
            .find(|ip| !ip.is_unspecified())
            .unwrap_or(gossip)
    }

    /// The host port of every named port of `spec` for a start of `replica`: fixed ones as the
    /// spec says, the others allocated from the book.
    pub(crate) fn allocate_ports(
        &self,
        replica: &ReplicaId,
        spec: &WorkloadSpec,
    ) -> Result<StartPorts, PortError> {
        let v6 = self.advertised_addr().is_ipv6();
        // A fixed number is checked, not allocated: the start fails with a reason an operator
        // can act on instead of a process that cannot bind (or an engine error) in a loop.
        if let Some((port, protocol)) = spec
            .fixed_host_ports()
            .into_iter()
            .find(|&(port, protocol)| fixed_in_use(port, protocol, v6))
        {
            return Err(PortError::FixedInUse {
                port,
                protocol: protocol.as_str(),
                replica: replica.to_string(),
            });
        }
        let mut ports: BTreeMap<String, u16> = spec
            .named_ports()
            .into_iter()
            .filter_map(|p| Some((p.name.to_string(), p.fixed?)))
            .collect();
        let wanted = spec.ports_to_allocate();
        if wanted.is_empty() {
            return Ok(StartPorts {
                ports,
                ticket: None,
            });
        }
        let mut book = self.ports.lock().expect("ports lock");
        let (allocated, ticket) = book.allocate(replica, &wanted, &mut |p| in_use(p, v6))?;
        if cfg!(debug_assertions) {
            book.check_invariants();
        }
        ports.extend(allocated);
        Ok(StartPorts {
            ports,
            ticket: Some(ticket),
        })
    }

    /// The book, for a start's task to report its outcome to ([`start_done`]).
    pub(crate) fn port_book(&self) -> Arc<Mutex<PortBook>> {
        self.ports.clone()
    }

    /// What the runtime listed: the ports of alive instances stay held, the others are freed.
    pub(crate) fn hold_listed_ports(&self, instances: &[RuntimeInstance]) {
        let listed: Vec<Listed<'_>> = instances
            .iter()
            .map(|i| Listed {
                handle: &i.handle,
                replica: &i.replica,
                alive: i.phase.may_be_alive(),
                ports: &i.ports,
            })
            .collect();
        self.ports
            .lock()
            .expect("ports lock")
            .handle_listed(&listed);
    }
}

/// A start finished: its ports now belong to instance `handle` (`None`: it failed, the ports
/// are free again).
pub(crate) fn start_done(book: &Mutex<PortBook>, ticket: Option<u64>, handle: Option<&str>) {
    let Some(ticket) = ticket else { return };
    let mut book = book.lock().expect("ports lock");
    match handle {
        Some(handle) => book.handle_started(ticket, handle),
        None => book.handle_start_failed(ticket),
    }
}

/// Whether some socket on this host holds `port`: it cannot be bound on the unspecified
/// address, for TCP or for UDP (`[::]` too on an IPv6 host).
fn in_use(port: u16, v6: bool) -> bool {
    unspecified(port, v6).any(|addr| {
        std::net::TcpListener::bind(addr).is_err() || std::net::UdpSocket::bind(addr).is_err()
    })
}

/// Whether some socket on this host holds `port` for `protocol` (std's listener binds with
/// SO_REUSEADDR, so connections of a stopped instance in TIME_WAIT do not count).
fn fixed_in_use(port: u16, protocol: Protocol, v6: bool) -> bool {
    unspecified(port, v6).any(|addr| {
        let bound = match protocol {
            Protocol::Tcp => std::net::TcpListener::bind(addr).map(drop),
            Protocol::Udp => std::net::UdpSocket::bind(addr).map(drop),
        };
        // Only "in use" counts: an agent without the right to bind a low port may still run a
        // container whose engine publishes it.
        bound.is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
    })
}

/// `port` on the unspecified address: IPv4's, and IPv6's too on an IPv6 host.
fn unspecified(port: u16, v6: bool) -> impl Iterator<Item = SocketAddr> {
    let v6 = v6.then_some(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
    std::iter::once(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        .chain(v6)
        .map(move |ip| SocketAddr::new(ip, port))
}

/// A fresh book over `range`.
pub(crate) fn book(range: shoal_core::ports::PortRange) -> Arc<Mutex<PortBook>> {
    Arc::new(Mutex::new(PortBook::new(range)))
}
