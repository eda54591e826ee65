//! An in-memory network for many agents in one process, what the simulator and the paused-time
//! tests run on: chitchat's `Transport` ([`MemTransport`]) and the agents' RPC
//! ([`MemRpcClient`]) over links with loss, delay with jitter, duplication, one-way blocks and
//! paused hosts.
//!
//! Faults are per host: a host is an IP address, and its gossip and API ports share its links.
//! Every host's links follow the default [`LinkFault`] unless one of its own is set.
//!
//! Time and randomness are inputs: every wait goes through tokio's clock (tests and the simulator
//! pause it), and every fault is decided by one ChaCha8 generator seeded by the caller, drawn in
//! the order messages are sent, so a run replays from its seed (chitchat's own peer choices replay
//! only where its entropy is fixed too, as the simulator's binary does).
//!
//! Lean on purpose: gossip messages travel as chitchat values (serialized only for a duplicate);
//! RPC frames are the real wire frames, answered by the real handler through
//! [`crate::transport::rpc::answer_frame`]. A lost gossip message is gone (UDP); a lost RPC packet is sent
//! again after a probe timeout that doubles (QUIC), and the call times out only after
//! [`RPC_ATTEMPTS_MAX`] losses in a row.
//!
//! Architecture Invariant: every queue is bounded; a full queue drops and counts, as UDP would.

mod probe;
mod rpc;
mod socket;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chitchat::ChitchatMessage;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use tokio::sync::mpsc;

pub use rpc::MemRpcClient;
pub use socket::MemTransport;

use crate::identity::tls::{Peer, PeerName};
use crate::transport::rpc::BoxFuture;

/// Messages queued for one socket before new ones are dropped.
const SOCKET_QUEUE_LEN: usize = 1024;
/// First retransmission delay of a lost RPC packet (QUIC's probe timeout on a fast network).
const RPC_RETRANSMIT: Duration = Duration::from_millis(200);
/// Losses in a row after which an RPC exchange is given up.
pub const RPC_ATTEMPTS_MAX: u32 = 6;

type FrameHandler = Arc<dyn Fn(Vec<u8>, Peer) -> BoxFuture<Vec<u8>> + Send + Sync>;

/// What can go wrong on a link, besides a block.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkFault {
    /// Probability that a message is lost (gossip: dropped; RPC: sent again after a backoff,
    /// as QUIC would).
    pub loss: f64,
    /// Fixed delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly in `0..=jitter` at microsecond steps (reorders messages).
    pub jitter: Duration,
    /// Probability that a message is delivered twice (gossip only; RPC rides a stream).
    pub duplicate: f64,
}

/// What one host sent.
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
    /// Member probe messages sent.
    pub probe_messages: u64,
    /// Member probe bytes sent (frames).
    pub probe_bytes: u64,
}

/// What happened to messages on the whole network (gossip and RPC alike).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NetTotals {
    /// Messages delivered.
    pub delivered: u64,
    /// Lost to random loss (for RPC, every lost packet, retransmitted or not).
    pub dropped_loss: u64,
    /// Lost to a block, a partition or a paused host.
    pub dropped_blocked: u64,
    /// Lost because nobody listened or the queue was full.
    pub dropped_unreachable: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
}

/// A shared in-memory network. Clones share it.
#[derive(Clone)]
pub struct MemNetwork {
    state: Arc<Mutex<NetState>>,
}

struct NetState {
    rng: ChaCha8Rng,
    default_fault: LinkFault,
    link_faults: BTreeMap<(IpAddr, IpAddr), LinkFault>,
    /// One-way blocked links (from, to).
    blocked: BTreeSet<(IpAddr, IpAddr)>,
    paused: BTreeSet<IpAddr>,
    sockets: BTreeMap<SocketAddr, (u64, mpsc::Sender<(SocketAddr, ChitchatMessage)>)>,
    rpc_servers: BTreeMap<SocketAddr, (PeerName, FrameHandler)>,
    probe_inboxes: BTreeMap<SocketAddr, mpsc::Sender<super::probe::ProbeIn>>,
    next_socket_id: u64,
    traffic: BTreeMap<IpAddr, HostTraffic>,
    totals: NetTotals,
}

/// What a message is carried by.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Carrier {
    Gossip,
    Rpc,
    /// Member probes: lost, delayed and duplicated as gossip is, counted apart.
    Probe,
}

/// The fate of one message.
enum Fate {
    Deliver { delay: Duration, copies: u8 },
    Drop,
}

/// The host (IP address) of a socket address; an IPv4-mapped IPv6 address is its IPv4 host.
fn host(addr: SocketAddr) -> IpAddr {
    addr.ip().to_canonical()
}

impl MemNetwork {
    /// A lossless, instant network whose decisions are drawn from a ChaCha8 generator seeded by
    /// `seed`.
    pub fn new(seed: u64) -> Self {
        MemNetwork {
            state: Arc::new(Mutex::new(NetState {
                rng: ChaCha8Rng::seed_from_u64(seed),
                default_fault: LinkFault::default(),
                link_faults: BTreeMap::new(),
                blocked: BTreeSet::new(),
                paused: BTreeSet::new(),
                sockets: BTreeMap::new(),
                rpc_servers: BTreeMap::new(),
                probe_inboxes: BTreeMap::new(),
                next_socket_id: 0,
                traffic: BTreeMap::new(),
                totals: NetTotals::default(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, NetState> {
        self.state.lock().expect("mem network lock")
    }

    /// Sets the fault of every link without a fault of its own.
    pub fn set_default_fault(&self, fault: LinkFault) {
        self.state().default_fault = fault;
    }

    /// Sets (or with `None` clears) the fault of the link `from -> to`.
    pub fn set_link_fault(&self, from: IpAddr, to: IpAddr, fault: Option<LinkFault>) {
        let mut state = self.state();
        match fault {
            Some(f) => state.link_faults.insert((from, to), f),
            None => state.link_faults.remove(&(from, to)),
        };
    }

    /// Blocks (or unblocks) the link `from -> to`, one way.
    pub fn set_blocked(&self, from: IpAddr, to: IpAddr, blocked: bool) {
        let mut state = self.state();
        if blocked {
            state.blocked.insert((from, to));
        } else {
            state.blocked.remove(&(from, to));
        }
    }

    /// Replaces every block with `links` (the union of the partitions in force).
    pub fn set_blocked_links(&self, links: BTreeSet<(IpAddr, IpAddr)>) {
        self.state().blocked = links;
    }

    /// Cuts every link between the hosts `side_a` and the hosts `side_b`, both ways.
    pub fn partition(&self, side_a: &[IpAddr], side_b: &[IpAddr]) {
        let mut state = self.state();
        for a in side_a {
            for b in side_b {
                state.blocked.insert((*a, *b));
                state.blocked.insert((*b, *a));
            }
        }
    }

    /// Removes every block (partitions heal; link faults and pauses stay).
    pub fn heal(&self) {
        self.state().blocked.clear();
    }

    /// Whether any link is blocked.
    pub fn any_blocked(&self) -> bool {
        !self.state().blocked.is_empty()
    }

    /// Pauses (or resumes) a host: nothing leaves or reaches it while paused.
    pub fn set_paused(&self, host: IpAddr, paused: bool) {
        let mut state = self.state();
        if paused {
            state.paused.insert(host);
        } else {
            state.paused.remove(&host);
        }
    }

    /// What `host` sent so far.
    pub fn traffic(&self, host: IpAddr) -> HostTraffic {
        self.state().traffic.get(&host).copied().unwrap_or_default()
    }

    /// What happened to messages so far.
    pub fn totals(&self) -> NetTotals {
        self.state().totals
    }

    /// Decides what happens to a message of `bytes` from `from` to `to`, and counts it.
    fn fate(&self, from: SocketAddr, to: SocketAddr, bytes: usize, carrier: Carrier) -> Fate {
        let mut state = self.state();
        let state = &mut *state;
        let (a, b) = (host(from), host(to));
        let sent = state.traffic.entry(a).or_default();
        match carrier {
            Carrier::Gossip => {
                sent.gossip_messages += 1;
                sent.gossip_bytes += bytes as u64;
            }
            Carrier::Rpc => {
                sent.rpc_messages += 1;
                sent.rpc_bytes += bytes as u64;
            }
            Carrier::Probe => {
                sent.probe_messages += 1;
                sent.probe_bytes += bytes as u64;
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
        match carrier {
            Carrier::Gossip | Carrier::Probe => {
                if fault.loss > 0.0 && state.rng.random::<f64>() < fault.loss {
                    state.totals.dropped_loss += 1;
                    return Fate::Drop;
                }
            }
            Carrier::Rpc => match retransmit_delay(&mut state.rng, fault.loss, &mut state.totals) {
                Some(extra) => delay += extra,
                None => return Fate::Drop,
            },
        }
        if !fault.jitter.is_zero() {
            let span = fault.jitter.as_micros() as u64;
            delay += Duration::from_micros(state.rng.random_range(0..=span));
        }
        let duplicated = carrier != Carrier::Rpc
            && fault.duplicate > 0.0
            && state.rng.random::<f64>() < fault.duplicate;
        if duplicated {
            state.totals.duplicated += 1;
        }
        let copies = if duplicated { 2 } else { 1 };
        Fate::Deliver { delay, copies }
    }
}

/// The extra delay of an RPC message on a link that loses packets with probability `loss`: each
/// loss costs a probe timeout, doubled after each. `None` after [`RPC_ATTEMPTS_MAX`] losses in a
/// row (the exchange is given up).
fn retransmit_delay(rng: &mut ChaCha8Rng, loss: f64, totals: &mut NetTotals) -> Option<Duration> {
    let mut extra = Duration::ZERO;
    if loss <= 0.0 {
        return Some(extra);
    }
    let mut probe_timeout = RPC_RETRANSMIT;
    for _ in 0..RPC_ATTEMPTS_MAX {
        if rng.random::<f64>() >= loss {
            return Some(extra);
        }
        totals.dropped_loss += 1;
        extra += probe_timeout;
        probe_timeout *= 2;
    }
    None
}
