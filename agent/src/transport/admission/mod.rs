//! Admission of incoming QUIC connections on the API and gossip endpoints: nothing before the
//! handshake costs much.
//!
//! An attempt from an address that has not proved it receives our packets gets a QUIC Retry and
//! holds nothing; a validated one takes a handshake slot (capped overall and per IP address; at
//! a cap the oldest handshake gives way, see [`ledger`]) for at most
//! [`AdmissionConfig::handshake_timeout`]; a finished handshake trades it for an established
//! slot (capped overall and per IP address: refused beyond), and the connection's certificate
//! name for a place among that name's connections ([`ConnectionSlot::admit_peer`]), which also
//! carries the name's budget of request bytes ([`ReadBudget`]). Every refusal and every
//! handshake dropped is counted in [`TransportStats`] under its own counter and logged at debug
//! with the remote address.
//!
//! The counting is [`ledger::Ledger`] (pure); this module executes its answers on quinn and
//! releases slots when the guards it hands out are dropped.

mod budget;
mod config;
pub mod filter;
mod filter_socket;
pub mod ledger;
pub mod refusals;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

pub use budget::{read_frame, FrameReadError, ReadBudget};
pub use config::AdmissionConfig;
pub use filter::FilterConfig;
pub use filter_socket::FilteredSocket;
use ledger::{Cap, HandshakeId, Ledger};
pub use refusals::{LogEvery, RefusalCause, RefusalLog, REFUSAL_LOG_EVERY};

use crate::transport::stats::TransportStats;

/// QUIC application error code when an established connection is refused by a cap.
pub const CONNECTION_REFUSED: u32 = 2;
/// QUIC application close code of a connection that gave way to a newer one of its certificate.
pub const CONNECTION_SUPERSEDED: u32 = 3;

/// The admission state of one endpoint. Shared by its accept loop and the guards it hands out.
pub struct Admission {
    endpoint: &'static str,
    config: AdmissionConfig,
    stats: Arc<TransportStats>,
    state: Mutex<State>,
    /// Refused handshakes are logged at info at most once per cause per [`REFUSAL_LOG_EVERY`].
    refusals_logged: Mutex<RefusalLog>,
}

struct State {
    ledger: Ledger,
    /// How to abandon each handshake in progress (when it must give way).
    abandon: HashMap<HandshakeId, oneshot::Sender<()>>,
    budgets: HashMap<String, ReadBudget>,
    /// Accepted connections by certificate name, oldest first: at the per-certificate cap the
    /// oldest gives way to the new one.
    held: HashMap<String, std::collections::VecDeque<quinn::Connection>>,
}

impl Admission {
    /// Admission for the endpoint named `endpoint` in logs (`api`, `gossip`), counting into
    /// `stats`.
    pub fn new(
        endpoint: &'static str,
        config: AdmissionConfig,
        stats: Arc<TransportStats>,
    ) -> Arc<Self> {
        Arc::new(Admission {
            endpoint,
            state: Mutex::new(State {
                ledger: Ledger::new(config.clone()),
                abandon: HashMap::new(),
                budgets: HashMap::new(),
                held: HashMap::new(),
            }),
            config,
            stats,
            refusals_logged: Mutex::new(RefusalLog::new(REFUSAL_LOG_EVERY)),
        })
    }

    /// Decides on an incoming attempt at once, without waiting (call it from the accept loop): a
    /// Retry to an unvalidated address, a refusal at a cap, or a [`Handshake`] to run in a task.
    pub fn admit(self: &Arc<Self>, incoming: quinn::Incoming) -> Option<Handshake> {
        let remote = incoming.remote_address();
        if self.config.address_validation && !incoming.remote_address_validated() {
            match incoming.retry() {
                Ok(()) => {
                    TransportStats::bump(&self.stats.retries_sent);
                    tracing::trace!(endpoint = self.endpoint, %remote, "address validation asked");
                }
                // Unreachable: an unvalidated attempt may always be retried.
                Err(err) => err.into_incoming().ignore(),
            }
            return None;
        }
        let ip = remote.ip().to_canonical();
        let (abandon_tx, abandoned) = oneshot::channel();
        let verdict = {
            let mut state = self.state.lock().expect("admission lock");
            let verdict = state.ledger.handle_attempt(ip);
            if let Ok(admitted) = &verdict {
                if let Some((dropped, _, _)) = admitted.dropped {
                    // The receiver is gone if that handshake is ending right now.
                    let tx = state
                        .abandon
                        .remove(&dropped)
                        .expect("an abandon per handshake");
                    let _ = tx.send(());
                }
                state.abandon.insert(admitted.id, abandon_tx);
            }
            state.check_invariants();
            verdict
        };
        let admitted = match verdict {
            Ok(admitted) => admitted,
            Err(cap) => {
                self.refused(cap, remote);
                incoming.refuse();
                return None;
            }
        };
        if let Some((_, ip, cap)) = admitted.dropped {
            TransportStats::bump(self.counter(cap));
            let endpoint = self.endpoint;
            tracing::debug!(endpoint, %ip, %cap, "oldest handshake dropped for a new attempt");
        }
        Some(Handshake {
            incoming,
            abandoned,
            slot: HandshakeSlot {
                admission: self.clone(),
                id: admitted.id,
                ip,
                pending: true,
            },
        })
    }

    /// A slot for a connection this endpoint dials; `None` (counted as a dial failure by the
    /// caller) at [`AdmissionConfig::connections_max`].
    pub fn dial_slot(self: &Arc<Self>) -> Option<ConnectionSlot> {
        self.with_ledger(|l| l.handle_dial()).ok()?;
        Some(ConnectionSlot {
            admission: self.clone(),
            remote: None,
        })
    }

    /// Handshakes in progress and established connections, now.
    pub fn in_use(&self) -> (usize, usize) {
        self.with_ledger(|l| (l.handshakes(), l.connections()))
    }

    fn with_ledger<T>(&self, f: impl FnOnce(&mut Ledger) -> T) -> T {
        let mut state = self.state.lock().expect("admission lock");
        let out = f(&mut state.ledger);
        state.check_invariants();
        out
    }

    /// The counter of attempts that met `cap`.
    fn counter(&self, cap: Cap) -> &std::sync::atomic::AtomicU64 {
        let s = &self.stats;
        match cap {
            Cap::HandshakesMax => &s.handshakes_over_max,
            Cap::HandshakesPerIp => &s.handshakes_over_per_ip,
            Cap::ConnectionsMax => &s.connections_refused,
            Cap::ConnectionsPerIp => &s.connections_refused_per_ip,
            Cap::ConnectionsPerPeer => &s.connections_refused_per_peer,
        }
    }

    /// Counts and logs a connection from `remote` refused at `cap`.
    fn refused(&self, cap: Cap, remote: SocketAddr) {
        TransportStats::bump(self.counter(cap));
        let endpoint = self.endpoint;
        tracing::debug!(endpoint, %remote, %cap, "connection refused");
    }
}

impl State {
    fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            self.ledger.check_invariants();
            assert_eq!(self.abandon.len(), self.ledger.handshakes());
        }
    }
}

impl Admission {
    /// Logs a refused handshake: at info once per cause per [`REFUSAL_LOG_EVERY`] (with how
    /// many of that cause were not since), else at debug.
    fn log_refusal(&self, remote: SocketAddr, error: &dyn std::fmt::Display) {
        let now = tokio::time::Instant::now();
        let error = error.to_string();
        let cause = RefusalCause::of(&error);
        let admitted = self
            .refusals_logged
            .lock()
            .expect("log limit lock")
            .admit(cause, now);
        let endpoint = self.endpoint;
        match admitted {
            Some(not_logged) => tracing::info!(
                endpoint,
                %remote,
                %cause,
                %error,
                not_logged_since = not_logged,
                "handshake refused"
            ),
            None => tracing::debug!(endpoint, %remote, %cause, %error, "handshake refused"),
        }
    }
}

/// A validated attempt holding a handshake slot; run [`Self::complete`] in its own task.
pub struct Handshake {
    incoming: quinn::Incoming,
    /// Fires when the handshake must give way to a newer one.
    abandoned: oneshot::Receiver<()>,
    slot: HandshakeSlot,
}

impl Handshake {
    /// Runs the handshake for at most the handshake timeout. `None` when it failed (counted in
    /// `handshakes_refused`), timed out (`handshakes_timed_out`), gave way to a newer one
    /// (counted when it was dropped) or finished over an established-connection cap (refused
    /// and counted).
    pub async fn complete(self) -> Option<(quinn::Connection, ConnectionSlot)> {
        let Handshake {
            incoming,
            abandoned,
            mut slot,
        } = self;
        let admission = slot.admission.clone();
        let (endpoint, stats) = (admission.endpoint, &admission.stats);
        let remote = incoming.remote_address();
        let connecting = match incoming.accept() {
            Ok(connecting) => connecting,
            Err(err) => {
                TransportStats::bump(&stats.handshakes_refused);
                admission.log_refusal(remote, &err);
                return None;
            }
        };
        // Dropping an unfinished handshake closes its connection.
        let timeout = admission.config.handshake_timeout;
        let conn = tokio::select! {
            outcome = tokio::time::timeout(timeout, connecting) => match outcome {
                Ok(Ok(conn)) => conn,
                Ok(Err(err)) => {
                    TransportStats::bump(&stats.handshakes_refused);
                    admission.log_refusal(remote, &err);
                    return None;
                }
                Err(_) => {
                    TransportStats::bump(&stats.handshakes_timed_out);
                    tracing::debug!(endpoint, %remote, "handshake timed out");
                    return None;
                }
            },
            _ = abandoned => return None,
        };
        slot.pending = false;
        let (id, ip) = (slot.id, slot.ip);
        let verdict = {
            let mut state = admission.state.lock().expect("admission lock");
            state.abandon.remove(&id);
            let verdict = state.ledger.handle_handshake_end(id, ip, true);
            state.check_invariants();
            verdict
        };
        match verdict {
            Ok(()) => Some((
                conn,
                ConnectionSlot {
                    admission: admission.clone(),
                    remote: Some(remote),
                },
            )),
            Err(cap) => {
                admission.refused(cap, remote);
                conn.close(CONNECTION_REFUSED.into(), cap.as_str().as_bytes());
                None
            }
        }
    }
}

/// A handshake slot; freed on drop unless the handshake became a connection.
struct HandshakeSlot {
    admission: Arc<Admission>,
    id: HandshakeId,
    ip: IpAddr,
    pending: bool,
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        if self.pending {
            let mut state = self.admission.state.lock().expect("admission lock");
            state.abandon.remove(&self.id);
            let _ = state.ledger.handle_handshake_end(self.id, self.ip, false);
            state.check_invariants();
        }
    }
}

/// An established connection's slot (accepted or dialed); freed on drop.
pub struct ConnectionSlot {
    admission: Arc<Admission>,
    /// The remote address of an accepted connection; `None` for a dialed one.
    remote: Option<SocketAddr>,
}

impl ConnectionSlot {
    /// Counts `conn` among the connections of certificate `name`. An accepted connection past
    /// [`AdmissionConfig::connections_per_peer_max`] takes the place of the oldest one of that
    /// certificate, which is closed with [`CONNECTION_SUPERSEDED`] and counted: a peer that
    /// comes back from a partition must not be locked out by its own dead connections, which
    /// the agent holds until their idle timeout. `None` (counted and logged; the caller closes
    /// the connection with [`CONNECTION_REFUSED`]) only when none of the others is left open.
    pub fn admit_peer(self, name: &str, conn: &quinn::Connection) -> Option<PeerSlot> {
        let admission = self.admission.clone();
        let mut state = admission.state.lock().expect("admission lock");
        let accepted = self.remote.is_some();
        if let Err(cap) = state.ledger.handle_peer(name, accepted) {
            let oldest = state.held.get_mut(name).and_then(|held| {
                held.retain(|c| c.close_reason().is_none());
                held.pop_front()
            });
            let Some(oldest) = oldest else {
                drop(state);
                let remote = self.remote.expect("only accepted connections are refused");
                admission.refused(cap, remote);
                return None;
            };
            oldest.close(
                CONNECTION_SUPERSEDED.into(),
                b"superseded by a newer connection of this certificate",
            );
            state.ledger.handle_peer_superseding(name);
            admission
                .stats
                .connections_superseded
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(
                endpoint = admission.endpoint,
                name,
                old = %oldest.remote_address(),
                new = %conn.remote_address(),
                "a connection gave way to a newer one of the same certificate"
            );
        }
        if accepted {
            state
                .held
                .entry(name.to_string())
                .or_default()
                .push_back(conn.clone());
        }
        let budget = admission.config.request_bytes_per_peer_max.map(|bytes| {
            state
                .budgets
                .entry(name.to_string())
                .or_insert_with(|| ReadBudget::new(bytes))
                .clone()
        });
        drop(state);
        Some(PeerSlot {
            connection: self,
            name: name.to_string(),
            id: conn.stable_id(),
            budget,
        })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let ip = self.remote.map(|r| r.ip().to_canonical());
        self.admission.with_ledger(|l| l.handle_connection_end(ip));
    }
}

/// An established connection counted under its certificate name; freed on drop.
pub struct PeerSlot {
    connection: ConnectionSlot,
    name: String,
    /// The connection's `stable_id`, to forget it among the certificate's held ones.
    id: usize,
    budget: Option<ReadBudget>,
}

impl PeerSlot {
    /// The request-byte budget shared by this name's connections, if the endpoint has one.
    pub fn budget(&self) -> Option<&ReadBudget> {
        self.budget.as_ref()
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut state = self.connection.admission.state.lock().expect("lock");
        if let Some(held) = state.held.get_mut(&self.name) {
            held.retain(|c| c.stable_id() != self.id);
            if held.is_empty() {
                state.held.remove(&self.name);
            }
        }
        if state.ledger.handle_peer_end(&self.name) == 0 {
            state.budgets.remove(&self.name);
        }
    }
}
