//! The simulated network: chitchat's `Transport` and the agents' RPC over links with per-link
//! loss, delay with jitter, duplication, one-way blocks and paused hosts, timed by tokio's
//! (paused) clock and decided by one seeded ChaCha generator in the order messages are sent.
//!
//! Lean on purpose: gossip messages travel as chitchat values (never serialized, except a copy
//! for a duplicate); RPC frames are the real wire frames, answered by the real handler through
//! [`shoal::rpc::answer_frame`]. Every host is one IPv4 address `10.x.y.z` (node number `i + 1`
//! in the low 24 bits): its gossip port and its API port share it, so faults are per host.
//!
//! Architecture Invariant: every queue is bounded; a full queue drops and counts, as UDP would.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chitchat::transport::{Socket, Transport};
use chitchat::{ChitchatMessage, Deserializable, Serializable};
use rand::{RngExt, SeedableRng};
use serde::de::DeserializeOwned;
use serde::Serialize;
use shoal::rpc::{self, BoxFuture, Handler, RpcClient, RpcError, TransportStats};
use shoal::tls::{Peer, PeerName, ANY_MEMBER};
use tokio::sync::mpsc;

/// Messages queued for one socket before new ones are dropped.
const SOCKET_QUEUE_LEN: usize = 1024;
/// Longest a handler may take.
const HANDLER_TIMEOUT: Duration = Duration::from_secs(30);
/// First retransmission delay of a lost RPC packet (QUIC's probe timeout on a fast network).
const RPC_RETRANSMIT: Duration = Duration::from_millis(200);
/// Losses in a row after which an RPC exchange is given up.
const RPC_ATTEMPTS_MAX: u32 = 6;
/// Gossip port of every host.
pub const GOSSIP_PORT: u16 = 7000;
/// API port of every host.
pub const API_PORT: u16 = 7001;

type FrameHandler = Arc<dyn Fn(Vec<u8>, Peer) -> BoxFuture<Vec<u8>> + Send + Sync>;

/// What can go wrong on a link, besides a block.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkFault {
    /// Probability that a message is lost (gossip: dropped; RPC: sent again after a backoff,
    /// as QUIC would).
    pub loss: f64,
    /// Fixed delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly in `0..=jitter` (reorders messages).
    pub jitter: Duration,
    /// Probability that a message is delivered twice (gossip only; RPC rides a stream).
    pub duplicate: f64,
}

/// Per-host traffic counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostTraffic {
    /// Gossip messages sent.
    pub gossip_messages: u64,
    /// Gossip bytes sent (chitchat's serialized size).
    pub gossip_bytes: u64,
    /// RPC frames sent (requests and answers).
    pub rpc_messages: u64,
    /// RPC bytes sent.
    pub rpc_bytes: u64,
}

/// Network-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NetTotals {
    /// Messages delivered.
    pub delivered: u64,
    /// Lost to random loss.
    pub dropped_loss: u64,
    /// Lost to a block, a partition or a paused host.
    pub dropped_blocked: u64,
    /// Lost because nobody listened or the queue was full.
    pub dropped_unreachable: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
}

/// The host index of an address on this network.
pub fn host_of(addr: SocketAddr) -> Option<u32> {
    match addr.ip().to_canonical() {
        IpAddr::V4(ip) => {
            let [a, b, c, d] = ip.octets();
            (a == 10).then(|| u32::from_be_bytes([0, b, c, d]).wrapping_sub(1))
        }
        IpAddr::V6(_) => None,
    }
}

/// The address of host `index` at `port`.
pub fn host_addr(index: u32, port: u16) -> SocketAddr {
    let [_, b, c, d] = (index + 1).to_be_bytes();
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, b, c, d)), port)
}

/// A shared simulated network. Clones share it.
#[derive(Clone)]
pub struct SimNet {
    state: Arc<Mutex<NetState>>,
}

struct NetState {
    rng: rand::rngs::ChaCha8Rng,
    default_fault: LinkFault,
    link_faults: BTreeMap<(u32, u32), LinkFault>,
    blocked: BTreeSet<(u32, u32)>,
    paused: BTreeSet<u32>,
    sockets: BTreeMap<SocketAddr, (u64, mpsc::Sender<(SocketAddr, ChitchatMessage)>)>,
    rpc_servers: BTreeMap<SocketAddr, (PeerName, FrameHandler)>,
    next_socket_id: u64,
    traffic: Vec<HostTraffic>,
    totals: NetTotals,
}

/// The fate of one message.
enum Fate {
    Deliver { delay: Duration, copies: u8 },
    Drop,
}

impl SimNet {
    /// A lossless, instant network for `hosts` hosts, its decisions drawn from `seed`.
    pub fn new(seed: u64, hosts: u32) -> Self {
        SimNet {
            state: Arc::new(Mutex::new(NetState {
                rng: rand::rngs::ChaCha8Rng::seed_from_u64(seed),
                default_fault: LinkFault::default(),
                link_faults: BTreeMap::new(),
                blocked: BTreeSet::new(),
                paused: BTreeSet::new(),
                sockets: BTreeMap::new(),
                rpc_servers: BTreeMap::new(),
                next_socket_id: 0,
                traffic: vec![HostTraffic::default(); hosts as usize],
                totals: NetTotals::default(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, NetState> {
        self.state.lock().expect("sim network lock")
    }

    /// A chitchat transport on this network.
    pub fn transport(&self) -> SimTransport {
        SimTransport { net: self.clone() }
    }

    /// Sets the fault of every link without a fault of its own.
    pub fn set_default_fault(&self, fault: LinkFault) {
        self.state().default_fault = fault;
    }

    /// Sets (or with `None` clears) the fault of the link `from -> to`.
    pub fn set_link_fault(&self, from: u32, to: u32, fault: Option<LinkFault>) {
        let mut state = self.state();
        match fault {
            Some(f) => state.link_faults.insert((from, to), f),
            None => state.link_faults.remove(&(from, to)),
        };
    }

    /// Blocks (or unblocks) the link `from -> to`.
    pub fn set_blocked(&self, from: u32, to: u32, blocked: bool) {
        let mut state = self.state();
        if blocked {
            state.blocked.insert((from, to));
        } else {
            state.blocked.remove(&(from, to));
        }
    }

    /// Replaces every block with `links` (the union of the partitions in force).
    pub fn set_blocked_links(&self, links: BTreeSet<(u32, u32)>) {
        self.state().blocked = links;
    }

    /// Every link with a fault of its own.
    pub fn faulted_links(&self) -> Vec<(u32, u32)> {
        self.state().link_faults.keys().copied().collect()
    }

    /// Removes every block (partitions heal; link faults and pauses stay).
    pub fn heal(&self) {
        self.state().blocked.clear();
    }

    /// Whether any link is blocked.
    pub fn any_blocked(&self) -> bool {
        !self.state().blocked.is_empty()
    }

    /// Whether `from -> to` is blocked.
    pub fn is_blocked(&self, from: u32, to: u32) -> bool {
        self.state().blocked.contains(&(from, to))
    }

    /// Pauses (or resumes) a host: nothing leaves or reaches it while paused.
    pub fn set_paused(&self, host: u32, paused: bool) {
        let mut state = self.state();
        if paused {
            state.paused.insert(host);
        } else {
            state.paused.remove(&host);
        }
    }

    /// Per-host traffic so far.
    pub fn traffic(&self) -> Vec<HostTraffic> {
        self.state().traffic.clone()
    }

    /// Network-wide counters so far.
    pub fn totals(&self) -> NetTotals {
        self.state().totals
    }

    fn fate(&self, from: SocketAddr, to: SocketAddr, bytes: usize, gossip: bool) -> Fate {
        let mut state = self.state();
        let state = &mut *state;
        let (Some(a), Some(b)) = (host_of(from), host_of(to)) else {
            state.totals.dropped_unreachable += 1;
            return Fate::Drop;
        };
        if let Some(t) = state.traffic.get_mut(a as usize) {
            if gossip {
                t.gossip_messages += 1;
                t.gossip_bytes += bytes as u64;
            } else {
                t.rpc_messages += 1;
                t.rpc_bytes += bytes as u64;
            }
        }
        if state.blocked.contains(&(a, b)) || state.paused.contains(&a) || state.paused.contains(&b)
        {
            state.totals.dropped_blocked += 1;
            return Fate::Drop;
        }
        let fault = *state
            .link_faults
            .get(&(a, b))
            .unwrap_or(&state.default_fault);
        let mut delay = fault.delay;
        if gossip && fault.loss > 0.0 && state.rng.random::<f64>() < fault.loss {
            state.totals.dropped_loss += 1;
            return Fate::Drop;
        }
        // RPC rides a QUIC stream: a lost packet is sent again after a probe timeout that
        // doubles, and the call fails only after several losses in a row.
        let mut rto = RPC_RETRANSMIT;
        for _ in 0..RPC_ATTEMPTS_MAX {
            if gossip || fault.loss <= 0.0 || state.rng.random::<f64>() >= fault.loss {
                break;
            }
            state.totals.dropped_loss += 1;
            delay += rto;
            rto *= 2;
        }
        if rto >= RPC_RETRANSMIT * (1 << RPC_ATTEMPTS_MAX) {
            return Fate::Drop;
        }
        if !fault.jitter.is_zero() {
            let span = fault.jitter.as_micros() as u64;
            delay += Duration::from_micros(state.rng.random_range(0..=span));
        }
        let copies =
            if gossip && fault.duplicate > 0.0 && state.rng.random::<f64>() < fault.duplicate {
                state.totals.duplicated += 1;
                2
            } else {
                1
            };
        Fate::Deliver { delay, copies }
    }

    fn deliver_gossip(&self, from: SocketAddr, to: SocketAddr, msg: ChitchatMessage) {
        let mut state = self.state();
        let queued = state
            .sockets
            .get(&to)
            .map(|(_, tx)| tx.try_send((from, msg)).is_ok());
        if queued == Some(true) {
            state.totals.delivered += 1;
        } else {
            state.totals.dropped_unreachable += 1;
        }
    }

    /// Serves the typed RPC `handler` at `addr` as the node named `name`.
    pub fn serve_rpc<Req, Resp>(
        &self,
        addr: SocketAddr,
        name: PeerName,
        handler: Handler<Req, Resp>,
    ) where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
    {
        let stats = Arc::new(TransportStats::default());
        let frame_handler: FrameHandler = Arc::new(move |frame, peer| {
            let (handler, stats) = (handler.clone(), stats.clone());
            Box::pin(async move {
                rpc::answer_frame(&handler, &frame, peer, HANDLER_TIMEOUT, &stats).await
            })
        });
        self.state().rpc_servers.insert(addr, (name, frame_handler));
    }

    /// Stops serving RPC at `addr` (its host crashed).
    pub fn stop_rpc(&self, addr: SocketAddr) {
        self.state().rpc_servers.remove(&addr);
    }

    /// An RPC client calling from `addr` as the node named `name`.
    pub fn rpc_client(&self, addr: SocketAddr, name: Peer) -> SimRpcClient {
        SimRpcClient {
            net: self.clone(),
            addr,
            name,
        }
    }
}

/// chitchat's `Transport` on a [`SimNet`].
pub struct SimTransport {
    net: SimNet,
}

#[async_trait::async_trait]
impl Transport for SimTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let (tx, rx) = mpsc::channel(SOCKET_QUEUE_LEN);
        let mut state = self.net.state();
        if state
            .sockets
            .get(&listen_addr)
            .is_some_and(|(_, tx)| !tx.is_closed())
        {
            anyhow::bail!("{listen_addr} is already bound on the simulated network");
        }
        state.next_socket_id += 1;
        let id = state.next_socket_id;
        state.sockets.insert(listen_addr, (id, tx));
        Ok(Box::new(SimSocket {
            net: self.net.clone(),
            addr: listen_addr,
            id,
            rx,
        }))
    }
}

struct SimSocket {
    net: SimNet,
    addr: SocketAddr,
    id: u64,
    rx: mpsc::Receiver<(SocketAddr, ChitchatMessage)>,
}

impl Drop for SimSocket {
    fn drop(&mut self) {
        let mut state = self.net.state();
        if state
            .sockets
            .get(&self.addr)
            .is_some_and(|(id, _)| *id == self.id)
        {
            state.sockets.remove(&self.addr);
        }
    }
}

/// A second copy of a message, through its own wire form.
fn copy_of(msg: &ChitchatMessage) -> Option<ChitchatMessage> {
    let mut buf = Vec::with_capacity(msg.serialized_len());
    msg.serialize(&mut buf);
    ChitchatMessage::deserialize(&mut buf.as_slice()).ok()
}

#[async_trait::async_trait]
impl Socket for SimSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        let Fate::Deliver { delay, copies } =
            self.net.fate(self.addr, to, msg.serialized_len(), true)
        else {
            return Ok(());
        };
        let extra = if copies > 1 { copy_of(&msg) } else { None };
        for m in std::iter::once(msg).chain(extra) {
            if delay.is_zero() {
                self.net.deliver_gossip(self.addr, to, m);
            } else {
                let (net, from) = (self.net.clone(), self.addr);
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    net.deliver_gossip(from, to, m);
                });
            }
        }
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        self.rx
            .recv()
            .await
            .ok_or_else(|| anyhow::anyhow!("simulated socket closed"))
    }
}

/// RPC over a [`SimNet`]: a lost request or answer surfaces as a timeout, as over QUIC.
pub struct SimRpcClient {
    net: SimNet,
    addr: SocketAddr,
    name: Peer,
}

#[async_trait::async_trait]
impl RpcClient for SimRpcClient {
    async fn call_frame(
        &self,
        addr: SocketAddr,
        server_name: &str,
        request_frame: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, RpcError> {
        let server = self.net.state().rpc_servers.get(&addr).cloned();
        let Some((name, handler)) = server else {
            return Err(RpcError::Connect {
                addr,
                reason: "nobody serves RPC here".into(),
            });
        };
        if server_name != ANY_MEMBER && server_name != name.as_str() {
            let reason = format!("certificate is for {name}, not {server_name}");
            return Err(RpcError::Connect { addr, reason });
        }
        let exchange = async {
            let len = request_frame.len();
            let Fate::Deliver { delay, .. } = self.net.fate(self.addr, addr, len, false) else {
                return std::future::pending().await;
            };
            tokio::time::sleep(delay).await;
            let answer = handler(request_frame, self.name.clone()).await;
            let Fate::Deliver { delay, .. } = self.net.fate(addr, self.addr, answer.len(), false)
            else {
                return std::future::pending().await;
            };
            tokio::time::sleep(delay).await;
            self.net.state().totals.delivered += 2;
            answer
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| RpcError::Timeout(timeout))
    }
}
