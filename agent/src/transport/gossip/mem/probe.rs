//! Member probes on a [`MemNetwork`]: frames on the same faulty links as gossip.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{Carrier, Fate, MemNetwork};
use crate::transport::gossip::canonical;
use crate::transport::gossip::probe::{ProbeChannel, ProbeIn, ProbeLink, PROBE_INBOX_LEN};

impl MemNetwork {
    /// The probe channel of the agent whose gossip address is `addr` (a second call for one
    /// address replaces the first's inbox: an agent restarted on its address).
    pub fn probe_channel(&self, addr: SocketAddr) -> ProbeChannel {
        let addr = canonical(addr);
        let (tx, inbox) = mpsc::channel(PROBE_INBOX_LEN);
        self.state().probe_inboxes.insert(addr, tx);
        ProbeChannel {
            link: Arc::new(MemProbeLink {
                net: self.clone(),
                from: addr,
            }),
            inbox,
        }
    }

    fn deliver_probe(&self, from: SocketAddr, to: SocketAddr, frame: Vec<u8>) {
        let mut state = self.state();
        let queued = state.probe_inboxes.get(&to).map(|tx| {
            tx.try_send(ProbeIn {
                from,
                name: None,
                frame,
            })
            .is_ok()
        });
        if queued == Some(true) {
            state.totals.delivered += 1;
        } else {
            state.totals.dropped_unreachable += 1;
        }
    }
}

struct MemProbeLink {
    net: MemNetwork,
    from: SocketAddr,
}

impl ProbeLink for MemProbeLink {
    fn send(&self, to: SocketAddr, frame: Vec<u8>) {
        let to = canonical(to);
        let Fate::Deliver { delay, copies } =
            self.net.fate(self.from, to, frame.len(), Carrier::Probe)
        else {
            return;
        };
        for _ in 0..copies {
            let (net, from, frame) = (self.net.clone(), self.from, frame.clone());
            if delay.is_zero() {
                net.deliver_probe(from, to, frame);
            } else {
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    net.deliver_probe(from, to, frame);
                });
            }
        }
    }
}
