//! Live updates: one hub task asks the API four times a second while browsers listen, and sends
//! each its changes as server-sent events: `nodes` (a member's liveness or drain moved),
//! `workload` (the watched workload's replicas moved: host, phase, health), `event` (this
//! agent recorded one).
//!
//! Bounded: at most [`CLIENTS_MAX`] clients; each has a queue of [`CLIENT_BUFFER_MESSAGES`]
//! messages of at most [`MESSAGE_BYTES_MAX`] bytes (64 KiB per client). A client whose queue is
//! full is dropped (its browser reconnects and reloads the part it shows); the hub never waits
//! for a client.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::source;
use super::WeakApi;

/// Most browsers following live updates at once; one more is answered 503.
pub const CLIENTS_MAX: usize = 32;
/// Messages queued for one client before it counts as stuck and is dropped.
pub const CLIENT_BUFFER_MESSAGES: usize = 32;
/// Most bytes of one message's data (an event's reason is cut to fit).
pub const MESSAGE_BYTES_MAX: usize = 2048;
/// Most watched workloads whose status one poll asks (in turn when more are watched), so that
/// browsers watching many large workloads cost a bounded number of status reads per second.
pub const WATCHED_PER_POLL_MAX: usize = 4;
/// How often the hub asks while clients listen.
const POLL: Duration = Duration::from_millis(250);

/// One server-sent event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The event name (`nodes`, `workload`, `event`).
    pub kind: &'static str,
    /// Its data: one line of JSON, at most [`MESSAGE_BYTES_MAX`] bytes.
    pub data: String,
}

struct Client {
    id: u64,
    watch: Option<String>,
    tx: mpsc::Sender<Message>,
}

#[derive(Default)]
struct Clients {
    next_id: u64,
    list: Vec<Client>,
    dropped_slow: u64,
}

/// The clients following live updates, and the hub task that feeds them.
pub struct Hub {
    clients: Mutex<Clients>,
}

/// Why a client was not admitted.
#[derive(Debug)]
pub struct Full;

impl Hub {
    /// Starts the hub task over `api` (it ends when the API is gone or the hub dropped).
    pub fn start(api: WeakApi) -> Arc<Hub> {
        let hub = Arc::new(Hub {
            clients: Mutex::new(Clients::default()),
        });
        tokio::spawn(run(Arc::downgrade(&hub), api));
        hub
    }

    /// Admits a client watching `watch` (a workload's name) if any: its queue's receiving end.
    pub fn join(&self, watch: Option<String>) -> Result<mpsc::Receiver<Message>, Full> {
        let mut clients = self.clients.lock().expect("clients lock");
        clients.list.retain(|c| !c.tx.is_closed());
        if clients.list.len() >= CLIENTS_MAX {
            return Err(Full);
        }
        let (tx, rx) = mpsc::channel(CLIENT_BUFFER_MESSAGES);
        clients.next_id += 1;
        let id = clients.next_id;
        clients.list.push(Client { id, watch, tx });
        Ok(rx)
    }

    /// Clients following now, and clients dropped so far for a full queue.
    pub fn counts(&self) -> (usize, u64) {
        let clients = self.clients.lock().expect("clients lock");
        (clients.list.len(), clients.dropped_slow)
    }

    /// The workloads watched now, each once.
    fn watched(&self) -> Vec<String> {
        let clients = self.clients.lock().expect("clients lock");
        let mut names: Vec<String> = clients
            .list
            .iter()
            .filter_map(|c| c.watch.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Sends `message` to every client (`to` = the watchers of that workload only), never
    /// waiting: a full queue drops its client, a closed one is forgotten.
    fn send(&self, message: &Message, to: Option<&str>) {
        let mut clients = self.clients.lock().expect("clients lock");
        let mut slow = Vec::new();
        clients.list.retain(|c| {
            if to.is_some() && c.watch.as_deref() != to {
                return !c.tx.is_closed();
            }
            match c.tx.try_send(message.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    slow.push(c.id);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        clients.dropped_slow += slow.len() as u64;
        for id in slow {
            tracing::info!(
                client = id,
                bound = CLIENT_BUFFER_MESSAGES,
                "UI live client dropped: it did not keep up"
            );
        }
    }

    fn is_idle(&self) -> bool {
        let mut clients = self.clients.lock().expect("clients lock");
        clients.list.retain(|c| !c.tx.is_closed());
        clients.list.is_empty()
    }
}

/// What the hub last saw, to send only changes.
#[derive(Default)]
struct Seen {
    nodes: Option<u64>,
    events_after: Option<u64>,
    workloads: BTreeMap<String, u64>,
    /// Where the next poll starts among the watched workloads.
    turn: usize,
}

async fn run(hub: std::sync::Weak<Hub>, api: WeakApi) {
    let mut seen = Seen::default();
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(hub) = hub.upgrade() else { return };
        if api.strong_count() == 0 {
            return;
        }
        if hub.is_idle() {
            // Nobody listens: start afresh when someone does (their page is current).
            seen = Seen::default();
            continue;
        }
        poll_once(&hub, &api, &mut seen).await;
    }
}

async fn poll_once(hub: &Hub, api: &WeakApi, seen: &mut Seen) {
    if let Ok(nodes) = source::nodes(api).await {
        let states: Vec<(String, bool, bool)> = nodes
            .iter()
            .map(|n| (n.name.clone(), n.alive, n.draining))
            .collect();
        let digest = digest(&states);
        if seen.nodes.is_some_and(|d| d != digest) {
            let data = serde_json::json!(states
                .iter()
                .take(64)
                .map(|(name, alive, draining)| serde_json::json!({"name": name, "alive": alive, "draining": draining}))
                .collect::<Vec<_>>())
            .to_string();
            hub.send(
                &Message {
                    kind: "nodes",
                    data: cut(data),
                },
                None,
            );
        }
        seen.nodes = Some(digest);
    }
    match seen.events_after {
        None => {
            // The newest seq: the pages already show what came before.
            if let Ok(events) = source::events(api, 0, crate::wire::api::PAGE_ITEMS_MAX).await {
                seen.events_after = Some(events.last().map_or(0, |e| e.seq));
            }
        }
        Some(after) => {
            if let Ok(events) = source::events(api, after, CLIENT_BUFFER_MESSAGES as u32 / 2).await
            {
                for e in &events {
                    let mut reason = e.reason.clone();
                    reason.truncate(reason.floor_char_boundary(MESSAGE_BYTES_MAX / 2));
                    let data = serde_json::json!({
                        "seq": e.seq, "at_ms": e.at_ms, "node": e.node, "kind": e.kind,
                        "replica": e.replica, "reason": reason,
                    })
                    .to_string();
                    hub.send(
                        &Message {
                            kind: "event",
                            data: cut(data),
                        },
                        None,
                    );
                }
                if let Some(last) = events.last() {
                    seen.events_after = Some(last.seq);
                }
            }
        }
    }
    let watched = hub.watched();
    seen.workloads.retain(|name, _| watched.contains(name));
    let start = seen.turn % watched.len().max(1);
    seen.turn = seen.turn.wrapping_add(WATCHED_PER_POLL_MAX);
    let this_turn: Vec<String> = watched
        .iter()
        .cycle()
        .skip(start)
        .take(WATCHED_PER_POLL_MAX.min(watched.len()))
        .cloned()
        .collect();
    for name in this_turn {
        let Ok(status) = source::status(api, &name, source::REPLICAS_SHOWN_MAX).await else {
            continue;
        };
        let states: Vec<_> = status
            .instances
            .iter()
            .map(|i| (i.replica, i.node.clone(), i.phase.clone(), i.healthy))
            .collect();
        let digest = digest(&(status.version.clone(), states));
        let before = seen.workloads.insert(name.clone(), digest);
        if before.is_some_and(|d| d != digest) {
            let data = serde_json::json!({"workload": name}).to_string();
            hub.send(
                &Message {
                    kind: "workload",
                    data: cut(data),
                },
                Some(&name),
            );
        }
    }
}

fn digest<T: std::fmt::Debug>(value: &T) -> u64 {
    xxhash_rust::xxh3::xxh3_64(format!("{value:?}").as_bytes())
}

/// A message's data within [`MESSAGE_BYTES_MAX`] (JSON cut this far is still one line; the
/// client ignores what it cannot parse).
fn cut(mut data: String) -> String {
    data.truncate(data.floor_char_boundary(MESSAGE_BYTES_MAX));
    data
}
