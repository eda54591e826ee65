//! chitchat's `Transport` on a [`MemNetwork`]: one bounded queue per bound address.

use std::net::SocketAddr;

use chitchat::transport::{Socket, Transport};
use chitchat::{ChitchatMessage, Deserializable, Serializable};
use tokio::sync::mpsc;

use super::{Carrier, Fate, MemNetwork, SOCKET_QUEUE_LEN};
use crate::transport::gossip::canonical;

impl MemNetwork {
    /// A chitchat transport on this network.
    pub fn transport(&self) -> MemTransport {
        MemTransport { net: self.clone() }
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

/// A second copy of a message, through its own wire form.
fn copy_of(msg: &ChitchatMessage) -> Option<ChitchatMessage> {
    let mut buf = Vec::with_capacity(msg.serialized_len());
    msg.serialize(&mut buf);
    ChitchatMessage::deserialize(&mut buf.as_slice()).ok()
}

#[async_trait::async_trait]
impl Socket for MemSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        let to = canonical(to);
        let bytes = msg.serialized_len();
        let Fate::Deliver { delay, copies } = self.net.fate(self.addr, to, bytes, Carrier::Gossip)
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
            .ok_or_else(|| anyhow::anyhow!("in-memory socket closed"))
    }
}
