//! The simulated network: the agent's in-memory network ([`shoal::transport::gossip::mem`]) addressed by
//! host number. Every host is one IPv4 address `10.x.y.z` (host index `i + 1` in the low 24
//! bits): its gossip port and its API port share it, so faults are per host, as the network's are.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use shoal::identity::tls::{Peer, PeerName};
use shoal::transport::gossip::mem::{MemNetwork, MemRpcClient, MemTransport};
use shoal::transport::rpc::Handler;

pub use shoal::transport::gossip::mem::{HostTraffic, LinkFault, NetTotals};

/// Gossip port of every host.
pub const GOSSIP_PORT: u16 = 7000;
/// API port of every host.
pub const API_PORT: u16 = 7001;

/// The address of host `index` at `port`.
pub fn host_addr(index: u32, port: u16) -> SocketAddr {
    SocketAddr::new(host_ip(index), port)
}

fn host_ip(index: u32) -> IpAddr {
    let [_, b, c, d] = (index + 1).to_be_bytes();
    IpAddr::V4(Ipv4Addr::new(10, b, c, d))
}

/// A shared simulated network of `hosts` hosts. Clones share it.
#[derive(Clone)]
pub struct SimNet {
    net: MemNetwork,
    hosts: u32,
}

impl SimNet {
    /// A lossless, instant network for `hosts` hosts, its decisions drawn from `seed`.
    pub fn new(seed: u64, hosts: u32) -> Self {
        SimNet {
            net: MemNetwork::new(seed),
            hosts,
        }
    }

    /// A chitchat transport on this network.
    pub fn transport(&self) -> MemTransport {
        self.net.transport()
    }

    /// The member probe channel of the agent gossiping on `addr`.
    pub fn probe_channel(&self, addr: SocketAddr) -> shoal::transport::gossip::probe::ProbeChannel {
        self.net.probe_channel(addr)
    }

    /// Sets the fault of every link without a fault of its own.
    pub fn set_default_fault(&self, fault: LinkFault) {
        self.net.set_default_fault(fault);
    }

    /// Sets (or with `None` clears) the fault of the link `from -> to`.
    pub fn set_link_fault(&self, from: u32, to: u32, fault: Option<LinkFault>) {
        self.net.set_link_fault(host_ip(from), host_ip(to), fault);
    }

    /// Replaces every block with `links` (the union of the partitions in force).
    pub fn set_blocked_links(&self, links: BTreeSet<(u32, u32)>) {
        let links = links.into_iter().map(|(a, b)| (host_ip(a), host_ip(b)));
        self.net.set_blocked_links(links.collect());
    }

    /// Whether any link is blocked.
    pub fn any_blocked(&self) -> bool {
        self.net.any_blocked()
    }

    /// Pauses (or resumes) a host: nothing leaves or reaches it while paused.
    pub fn set_paused(&self, host: u32, paused: bool) {
        self.net.set_paused(host_ip(host), paused);
    }

    /// Per-host traffic so far, by host index.
    pub fn traffic(&self) -> Vec<HostTraffic> {
        (0..self.hosts)
            .map(|h| self.net.traffic(host_ip(h)))
            .collect()
    }

    /// Network-wide counters so far.
    pub fn totals(&self) -> NetTotals {
        self.net.totals()
    }

    /// Serves the typed RPC `handler` at `addr` as the node named `name`.
    pub fn serve_rpc<Req, Resp>(
        &self,
        addr: SocketAddr,
        name: PeerName,
        handler: Handler<Req, Resp>,
    ) where
        Req: serde::de::DeserializeOwned + Send + 'static,
        Resp: serde::Serialize + Send + 'static,
    {
        self.net.serve_rpc(addr, name, handler);
    }

    /// Stops serving RPC at `addr` (its host crashed).
    pub fn stop_rpc(&self, addr: SocketAddr) {
        self.net.stop_rpc(addr);
    }

    /// An RPC client calling from `addr` as the node named `name`.
    pub fn rpc_client(&self, addr: SocketAddr, name: Peer) -> MemRpcClient {
        self.net.rpc_client(addr, name)
    }
}
