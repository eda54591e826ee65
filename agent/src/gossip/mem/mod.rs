//! An in-memory network for many agents in one process: chitchat's `Transport` and RPC over links
//! that drop (an injected, seeded rng decides), delay, and partition (both ways or one way).
//!
//! All timing goes through tokio's clock (`tokio::time::sleep`), so tests may pause time and
//! advance it. Fault decisions are drawn from the network's rng in the order messages are sent;
//! chitchat's own peer selection uses its thread rng, so a run is reproducible in its faults, not
//! in every gossip choice.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chitchat::transport::{Socket, Transport};
use chitchat::{ChitchatMessage, Serializable};
use rand::{Rng, RngExt, SeedableRng};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use super::canonical;
use crate::rpc::{self, BoxFuture, Handler, RpcClient, RpcError, TransportStats};
use crate::tls::{Peer, PeerName, ANY_MEMBER};

/// Messages queued for one socket before new ones are dropped.
const SOCKET_QUEUE_LEN: usize = 1024;
/// Longest a handler may take on the in-memory network.
const HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

type FrameHandler = Arc<dyn Fn(Vec<u8>, Peer) -> BoxFuture<Vec<u8>> + Send + Sync>;

/// What happened to messages on the network (gossip and RPC alike).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemNetStats {
    /// Messages delivered.
    pub delivered: u64,
    /// Messages dropped by the random loss.
    pub dropped_random: u64,
    /// Messages dropped by a partition or a blocked link.
    pub dropped_partition: u64,
    /// Messages dropped because the receiver's queue was full or nobody listened.
    pub dropped_unreachable: u64,
    /// Gossip bytes sent (chitchat's serialized size).
    pub gossip_bytes: u64,
}

/// A shared in-memory network. Clones share it.
#[derive(Clone)]
pub struct MemNetwork {
    state: Arc<Mutex<NetState>>,
}

struct NetState {
    rng: Box<dyn Rng + Send>,
    drop_probability: f64,
    delay_min: Duration,
    delay_max: Duration,
    /// One-way blocked links (from, to).
    blocked: HashSet<(SocketAddr, SocketAddr)>,
    sockets: HashMap<SocketAddr, (u64, mpsc::Sender<(SocketAddr, ChitchatMessage)>)>,
    rpc_servers: HashMap<SocketAddr, (PeerName, FrameHandler)>,
    next_socket_id: u64,
    stats: MemNetStats,
}

/// The fate of one message.
enum Fate {
    Deliver(Duration),
    Drop,
}

impl MemNetwork {
    /// A lossless, instant network whose random decisions come from a `StdRng` seeded by `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_rng(rand::rngs::StdRng::seed_from_u64(seed))
    }

    /// A lossless, instant network whose random decisions come from `rng`.
    pub fn with_rng(rng: impl Rng + Send + 'static) -> Self {
        MemNetwork {
            state: Arc::new(Mutex::new(NetState {
                rng: Box::new(rng),
                drop_probability: 0.0,
                delay_min: Duration::ZERO,
                delay_max: Duration::ZERO,
                blocked: HashSet::new(),
                sockets: HashMap::new(),
                rpc_servers: HashMap::new(),
                next_socket_id: 0,
                stats: MemNetStats::default(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, NetState> {
        self.state.lock().expect("mem network lock")
    }

    /// A chitchat transport on this network.
    pub fn transport(&self) -> MemTransport {
        MemTransport { net: self.clone() }
    }

    /// Drops each message with probability `p` (clamped to 0..=1).
    pub fn set_drop_probability(&self, p: f64) {
        self.state().drop_probability = p.clamp(0.0, 1.0);
    }

    /// Delays each message by a uniform duration in `min..=max`.
    pub fn set_delay(&self, min: Duration, max: Duration) {
        let mut state = self.state();
        state.delay_min = min.min(max);
        state.delay_max = max.max(min);
    }

    /// Blocks the link from `from` to `to` (one way).
    pub fn block(&self, from: SocketAddr, to: SocketAddr) {
        self.state()
            .blocked
            .insert((canonical(from), canonical(to)));
    }

    /// Unblocks the link from `from` to `to`.
    pub fn unblock(&self, from: SocketAddr, to: SocketAddr) {
        self.state()
            .blocked
            .remove(&(canonical(from), canonical(to)));
    }

    /// Cuts every link between `side_a` and `side_b`, both ways.
    pub fn partition(&self, side_a: &[SocketAddr], side_b: &[SocketAddr]) {
        let mut state = self.state();
        for a in side_a {
            for b in side_b {
                state.blocked.insert((canonical(*a), canonical(*b)));
                state.blocked.insert((canonical(*b), canonical(*a)));
            }
        }
    }

    /// Restores every link (random loss and delay stay as set).
    pub fn heal(&self) {
        self.state().blocked.clear();
    }

    /// What happened to messages so far.
    pub fn stats(&self) -> MemNetStats {
        self.state().stats
    }

    fn fate(&self, from: SocketAddr, to: SocketAddr) -> Fate {
        let mut state = self.state();
        let state = &mut *state;
        if state.blocked.contains(&(from, to)) {
            state.stats.dropped_partition += 1;
            return Fate::Drop;
        }
        if state.drop_probability > 0.0 && state.rng.random::<f64>() < state.drop_probability {
            state.stats.dropped_random += 1;
            return Fate::Drop;
        }
        let delay = if state.delay_max > state.delay_min {
            let span = (state.delay_max - state.delay_min).as_nanos() as u64;
            state.delay_min + Duration::from_nanos(state.rng.random_range(0..=span))
        } else {
            state.delay_min
        };
        Fate::Deliver(delay)
    }

    fn deliver_gossip(&self, from: SocketAddr, to: SocketAddr, msg: ChitchatMessage) {
        let mut state = self.state();
        let queued = state
            .sockets
            .get(&to)
            .map(|(_, tx)| tx.try_send((from, msg)).is_ok());
        if queued == Some(true) {
            state.stats.delivered += 1;
        } else {
            state.stats.dropped_unreachable += 1;
        }
    }

    /// Serves typed RPC at `addr` as the node named `name`; returns the server's counters
    /// (`frames_rejected`, `requests_served`).
    pub fn serve_rpc<Req, Resp>(
        &self,
        addr: SocketAddr,
        name: PeerName,
        handler: Handler<Req, Resp>,
    ) -> Arc<TransportStats>
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
    {
        let stats = Arc::new(TransportStats::default());
        let server_stats = stats.clone();
        let frame_handler: FrameHandler = Arc::new(move |frame, peer| {
            let (handler, stats) = (handler.clone(), server_stats.clone());
            Box::pin(async move {
                rpc::answer_frame(&handler, &frame, peer, HANDLER_TIMEOUT, &stats).await
            })
        });
        self.state()
            .rpc_servers
            .insert(canonical(addr), (name, frame_handler));
        stats
    }

    /// Stops serving RPC at `addr` (the node crashed or left).
    pub fn stop_rpc(&self, addr: SocketAddr) {
        self.state().rpc_servers.remove(&canonical(addr));
    }

    /// An RPC client calling from `addr` as `name` (a node, or a client in tests).
    pub fn rpc_client(&self, addr: SocketAddr, name: Peer) -> MemRpcClient {
        MemRpcClient {
            net: self.clone(),
            addr: canonical(addr),
            name,
        }
    }
}

/// chitchat's `Transport` on a [`MemNetwork`].
pub struct MemTransport {
    net: MemNetwork,
}

#[async_trait::async_trait]
impl Transport for MemTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let addr = canonical(listen_addr);
        let (tx, rx) = mpsc::channel(SOCKET_QUEUE_LEN);
        let mut state = self.net.state();
        if state
            .sockets
            .get(&addr)
            .is_some_and(|(_, tx)| !tx.is_closed())
        {
            anyhow::bail!("{addr} is already bound on the in-memory network");
        }
        state.next_socket_id += 1;
        let id = state.next_socket_id;
        state.sockets.insert(addr, (id, tx));
        Ok(Box::new(MemSocket {
            net: self.net.clone(),
            addr,
            id,
            rx,
        }))
    }
}

struct MemSocket {
    net: MemNetwork,
    addr: SocketAddr,
    id: u64,
    rx: mpsc::Receiver<(SocketAddr, ChitchatMessage)>,
}

impl Drop for MemSocket {
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

#[async_trait::async_trait]
impl Socket for MemSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        let to = canonical(to);
        self.net.state().stats.gossip_bytes += msg.serialized_len() as u64;
        match self.net.fate(self.addr, to) {
            Fate::Drop => {}
            Fate::Deliver(delay) if delay.is_zero() => self.net.deliver_gossip(self.addr, to, msg),
            Fate::Deliver(delay) => {
                let (net, from) = (self.net.clone(), self.addr);
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    net.deliver_gossip(from, to, msg);
                });
            }
        }
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        self.rx
            .recv()
            .await
            .ok_or_else(|| anyhow::anyhow!("in-memory socket closed"))
    }
}

/// RPC calls over a [`MemNetwork`], subject to its loss, delay and partitions in both directions.
/// A lost request or answer surfaces as a timeout, as it would over QUIC.
pub struct MemRpcClient {
    net: MemNetwork,
    addr: SocketAddr,
    name: Peer,
}

#[async_trait::async_trait]
impl RpcClient for MemRpcClient {
    async fn call_frame(
        &self,
        addr: SocketAddr,
        server_name: &str,
        request_frame: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, RpcError> {
        let to = canonical(addr);
        let server = self.net.state().rpc_servers.get(&to).cloned();
        let Some((name, handler)) = server else {
            return Err(RpcError::Connect {
                addr,
                reason: "nobody serves RPC at this address".into(),
            });
        };
        if server_name != ANY_MEMBER && server_name != name.as_str() {
            return Err(RpcError::Connect {
                addr,
                reason: format!("certificate is for {name}, not {server_name}"),
            });
        }
        let exchange = async {
            let Fate::Deliver(there) = self.net.fate(self.addr, to) else {
                return std::future::pending().await;
            };
            tokio::time::sleep(there).await;
            let answer = handler(request_frame, self.name.clone()).await;
            let Fate::Deliver(back) = self.net.fate(to, self.addr) else {
                return std::future::pending().await;
            };
            tokio::time::sleep(back).await;
            self.net.state().stats.delivered += 2;
            answer
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| RpcError::Timeout(timeout))
    }
}
