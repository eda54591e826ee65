//! The cell exchange: a task over one agent's node (the node does not hold it). See the module
//! above for what envoys and members do each round.

use std::net::SocketAddr;
use std::sync::Arc;

use shoal_core::cells::{CellRule, CellSummary, CELL_CONTACTS_MAX, CELL_PROBED_MIN};

use crate::identity::tls::ANY_MEMBER;
use crate::state::cells::{
    contact_text, member_contact_text, parse_contact, CELLS_CALL_TIMEOUT, CELLS_EXCHANGE_TIMEOUT,
    CELLS_INTERVAL, CELLS_QUICK_INTERVAL, CELL_PEERS_PER_ROUND, CELL_PROBES_PER_ROUND_MAX,
    CELL_PROBE_TIMEOUT, ENVOYS_PER_CELL, NEWS_CELLS_MAX, NEWS_MEMBERS_MAX,
};
use crate::state::mesh::node::MeshNode;
use crate::state::mesh::sync::{pull_from, to_hex};
use crate::state::mesh::view::{self, Member};
use crate::transport::rpc;
use crate::wire::api::{Request, Response};

/// A peer to exchange with: its certificate's name (or [`ANY_MEMBER`]) and API address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Peer {
    name: String,
    addr: SocketAddr,
}

/// The envoys of `cell` among `members`: its live members with a record, ranked by a hash of the
/// cell and their name (the same ranking on every member), the first [`ENVOYS_PER_CELL`].
pub fn envoys(cell: &str, members: &[Member]) -> Vec<(String, SocketAddr, SocketAddr)> {
    ranked(cell, members, ENVOYS_PER_CELL)
}

/// The first `n` of `cell`'s live members with a record, in the envoys' ranking.
fn ranked(cell: &str, members: &[Member], n: usize) -> Vec<(String, SocketAddr, SocketAddr)> {
    let mut ranked: Vec<(u64, String, SocketAddr, SocketAddr)> = members
        .iter()
        .filter(|m| m.alive)
        .filter_map(|m| {
            let r = m.record.as_ref()?;
            let key = format!("{cell}/{}", m.name);
            Some((
                xxhash_rust::xxh3::xxh3_64(key.as_bytes()),
                m.name.clone(),
                r.api_addr,
                m.id.gossip_advertise_addr,
            ))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    ranked
        .into_iter()
        .take(n)
        .map(|(_, name, api, gossip)| (name, api, gossip))
        .collect()
}

/// What `members` (this agent's cell, live or not) add up to by their records.
fn own_bound(members: &[Member]) -> shoal_core::cells::OwnBound {
    let mut bound = shoal_core::cells::OwnBound::default();
    for r in members.iter().filter_map(|m| m.record.as_ref()) {
        let capacity = shoal_core::Resources::new(r.cpu_millis, r.memory_bytes);
        bound.members += 1;
        bound.capacity = bound.capacity.saturating_add(&capacity);
        bound.largest = shoal_core::Resources::new(
            bound.largest.cpu_millis.max(capacity.cpu_millis),
            bound.largest.memory_bytes.max(capacity.memory_bytes),
        );
    }
    bound
}

/// An envoy that knows other cells still asks every seed every this many rounds (beside its
/// peers of the round). A seed's cell
/// may have published nothing yet when this cell first asked it, and then learned of no other
/// cell either (its agents joined through their own cell, so they have no seeds): without these
/// asks, that cell and the rest of the mesh would never meet (found in the simulator: 100 hosts
/// in 3 cells, the seed's cell never received a spec applied elsewhere).
const SEEDS_EVERY_ROUNDS: u64 = 10;

/// The exchange task of one agent.
pub struct CellExchange {
    node: Arc<MeshNode>,
    round: u64,
    /// The summary this agent published last (whether its `sees` is out of date), shared with
    /// the quick looks between rounds.
    published: Arc<std::sync::Mutex<Option<CellSummary>>>,
    /// The cell each seed said it is in (at most the seeds' bound, 16).
    seed_cells: std::collections::BTreeMap<SocketAddr, String>,
}

impl CellExchange {
    /// The exchange of `node`, no round run yet.
    pub fn new(node: Arc<MeshNode>) -> Self {
        CellExchange {
            node,
            round: 0,
            published: Arc::default(),
            seed_cells: Default::default(),
        }
    }

    /// Runs forever (cancel the task to stop it): the rounds, and beside them the quick looks
    /// while a cell is in question ([`quick`]), in the same task.
    pub async fn run(mut self) {
        let quick = quick(self.node.clone(), self.published.clone());
        let rounds = async move {
            // A round every CELLS_INTERVAL, or as soon as the last one ended when it took
            // longer (its calls' timeouts): a cell's stamps must keep growing at the interval.
            let mut every = tokio::time::interval_at(
                tokio::time::Instant::now() + CELLS_INTERVAL,
                CELLS_INTERVAL,
            );
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                self.round().await;
            }
        };
        futures_util::future::join(rounds, quick).await;
    }

    /// One round: an envoy publishes and exchanges, a member pulls from an envoy.
    pub async fn round(&mut self) {
        self.round += 1;
        let node = self.node.clone();
        let cells = &node.cells;
        let members = node.members().await;
        cells.set_own_bound(own_bound(&members));
        let rule = CellRule::at_mesh_version(node.mesh_version());
        cells.set_rule(rule);
        let envoys = envoys(cells.own(), &members);
        let me = envoys.iter().any(|(name, _, _)| *name == node.name);
        if me {
            let contacts = contacts(cells.own(), &members, &envoys, rule);
            publish(&node, &self.published, &members, &contacts);
            let peers = self.envoy_peers(&envoys);
            let n = peers.len();
            // Every envoy walks the same sorted list, each from its own place (a hash of its
            // name): walked in step, every envoy of the mesh would call the same two peers in a
            // round, and a spec would cross cells only when the walk reached a cell that held it
            // (18 s at 20 cells in the simulator, growing with the cells).
            let start = xxhash_rust::xxh3::xxh3_64(node.name.as_bytes()) as usize;
            let mut calls: Vec<Peer> = (0..n.min(CELL_PEERS_PER_ROUND))
                .map(|k| {
                    let at = start.wrapping_add(self.round as usize * CELL_PEERS_PER_ROUND + k);
                    peers[at % n].clone()
                })
                .collect();
            let mut seeds_asked = Vec::new();
            if cells.multi() {
                let every = self.round.is_multiple_of(SEEDS_EVERY_ROUNDS);
                for addr in cells.seeds() {
                    // A seed whose cell this agent does not hold yet is asked every round.
                    let known = self
                        .seed_cells
                        .get(&addr)
                        .is_some_and(|cell| cells.summary(cell).is_some());
                    if every || !known {
                        seeds_asked.push(addr);
                        calls.push(Peer {
                            name: ANY_MEMBER.to_string(),
                            addr,
                        });
                    }
                }
            }
            // All at once, with the probes of stale cells: a peer that does not answer costs
            // the round its timeout once, not once per peer (stamps must keep crossing the mesh
            // well within CELL_STALE_MS).
            let sees = cells.sees();
            let (answers, moved) = futures_util::future::join(
                futures_util::future::join_all(calls.iter().map(|p| exchange(&node, p, true))),
                probe_stale_cells(&node, rule),
            )
            .await;
            if cells.sees() != sees || !moved.is_empty() {
                // What the probes found goes out now, not a round later.
                publish(&node, &self.published, &members, &contacts);
                push_news(&node, &members, &envoys, &moved).await;
            }
            let from_seeds = answers.into_iter().skip(calls.len() - seeds_asked.len());
            for (addr, cell) in seeds_asked.into_iter().zip(from_seeds) {
                if let Some(cell) = cell {
                    self.seed_cells.insert(addr, cell);
                }
            }
        } else if !envoys.is_empty() {
            let (name, addr, _) = &envoys[self.round as usize % envoys.len()];
            let peer = Peer {
                name: name.clone(),
                addr: *addr,
            };
            exchange(&node, &peer, false).await;
        } else {
            // No envoy known yet (the cell is forming): ask the seeds.
            for addr in cells.seeds() {
                let peer = Peer {
                    name: ANY_MEMBER.to_string(),
                    addr,
                };
                exchange(&node, &peer, false).await;
            }
        }
        ask_copies(&node, self.round).await;
    }
}

/// The contacts an envoy publishes: its cell's envoys, then (evidence rule) members past them
/// for other cells' envoys to probe: a cell is held down only when several of its members fail
/// to answer, not only its envoys.
fn contacts(
    own: &str,
    members: &[Member],
    envoys: &[(String, SocketAddr, SocketAddr)],
    rule: CellRule,
) -> Vec<String> {
    let mut contacts: Vec<String> = envoys
        .iter()
        .map(|(name, api, gossip)| contact_text(name, *api, *gossip))
        .collect();
    if rule == CellRule::Evidence {
        let more = ranked(own, members, CELL_CONTACTS_MAX);
        contacts.extend(
            more.iter()
                .skip(envoys.len())
                .map(|(name, api, gossip)| member_contact_text(name, *api, *gossip)),
        );
    }
    contacts
}

/// Between rounds, while another cell is in question (`CellState::in_question`: late past
/// `CELL_PROBE_MS`, not yet held down), every [`CELLS_QUICK_INTERVAL`], an envoy probes the late
/// cells its table says to probe now (the round would wait up to a whole interval), and when
/// that, or time, changes what it holds up (probes that failed while a cell was late count once
/// it is stale) or what its table holds down, publishes and pushes the news ([`push_news`]).
/// Nothing while no cell is in question.
/// Members do not pull between rounds: their envoys tell them what moved ([`tell_members`],
/// woken by [`MeshNode::merge_cells`]), downs and returns alike (members that learned downs
/// sooner than returns finished moves a return undid: `sim/tests/cells.rs`,
/// `a_cell_cut_off_briefly_...`, saw healthy copies stopped and started again).
async fn quick(node: Arc<MeshNode>, published: Arc<std::sync::Mutex<Option<CellSummary>>>) {
    let mut every = tokio::time::interval(CELLS_QUICK_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The cells held up at the last quick look while one was in question.
    let mut last_up: Option<Vec<String>> = None;
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = node.cell_news.notified() => {
                let moved = node.take_cells_moved();
                if !moved.is_empty() {
                    tell_members(&node, &moved).await;
                }
                continue;
            }
        }
        if !node.cells.in_question() {
            last_up = None;
            continue;
        }
        let members = node.members().await;
        let own = node.cells.own().to_string();
        let envoys = envoys(&own, &members);
        if !envoys.iter().any(|(name, _, _)| *name == node.name) {
            continue;
        }
        let rule = node.cells.rule();
        let mut moved = probe_stale_cells(&node, rule).await;
        // Time alone moves what this envoy holds up too: failures of probes sent while a cell
        // was only late count once it is stale (`CELL_PROBE_MS`), so it leaves `sees` with no
        // probe at that moment; and what its table holds down can follow.
        let up = node.cells.up_cells();
        if let Some(before) = &last_up {
            for cell in moved_between(before, &up) {
                if !moved.contains(&cell) {
                    moved.push(cell);
                }
            }
        }
        last_up = Some(up);
        let sees_published = published
            .lock()
            .expect("published lock")
            .as_ref()
            .map(|s| s.sees.clone());
        if sees_published.is_some_and(|p| p != node.cells.sees()) || !moved.is_empty() {
            let contacts = contacts(&own, &members, &envoys, rule);
            publish(&node, &published, &members, &contacts);
            push_news(&node, &members, &envoys, &moved).await;
        }
    }
}

/// An envoy whose probes just changed what its cell holds up pushes its new summary at once,
/// all at once with the exchange timeout: to one envoy of each of up to [`NEWS_CELLS_MAX`]
/// other cells it holds up (from a place of its own in the sorted list, so that a cell's envoys
/// reach different cells) and to up to [`NEWS_MEMBERS_MAX`] members of its own cell, these with
/// the evidence of the cells `moved` down or up ([`evidence`]). A cell is held down on the
/// evidence of two observer cells, and each hop of that evidence (a probe, the other cells'
/// envoys, their members) would otherwise wait for a round. Failures are only logged: the
/// rounds carry the same summaries.
async fn push_news(
    node: &MeshNode,
    members: &[Member],
    envoys: &[(String, SocketAddr, SocketAddr)],
    moved: &[String],
) {
    let cells = &node.cells;
    let Some(entry) = cells.entry(cells.own()) else {
        return;
    };
    futures_util::future::join(
        push_to(node, &other_cells(node), vec![entry]),
        push_to(
            node,
            &own_members(node, members, envoys),
            evidence(node, moved),
        ),
    )
    .await;
}

/// An envoy tells the members of its cell about cells its table just moved down or up on news
/// from other cells ([`MeshNode::merge_cells`]), with the evidence ([`evidence`]): they would
/// otherwise learn it at their next pull, up to a round later. Up matters as much as down: a
/// member that holds a returned cell down a round longer finishes a move the return undoes
/// (the handoff stops a healthy copy, then starts it again).
async fn tell_members(node: &MeshNode, moved: &[String]) {
    let members = node.members().await;
    let envoys = envoys(node.cells.own(), &members);
    if !envoys.iter().any(|(name, _, _)| *name == node.name) {
        return;
    }
    let entries = evidence(node, moved);
    push_to(node, &own_members(node, &members, &envoys), entries).await;
}

/// Most other cells' summaries sent as the evidence of a cell held down ([`evidence`]).
const EVIDENCE_CELLS_MAX: usize = 8;

/// This agent's cell's entry, each cell of `moved` held up here (its own summary, with the
/// stamp that brought it back), and for those held down the entries of up to
/// [`EVIDENCE_CELLS_MAX`] other cells whose summaries leave one of them out of what they hold
/// up: what a member needs to judge those cells as this agent does (its table judges them
/// itself).
fn evidence(node: &MeshNode, moved: &[String]) -> Vec<shoal_core::cells::CellEntry> {
    let cells = &node.cells;
    let own = cells.own();
    let up = cells.up_cells();
    let (back, down): (Vec<&String>, Vec<&String>) = moved.iter().partition(|c| up.contains(c));
    let mut names: Vec<String> = std::iter::once(own.to_string())
        .chain(back.into_iter().cloned())
        .collect();
    if !down.is_empty() {
        let mut observers = 0;
        for view in cells.list() {
            let c = &view.summary;
            if observers >= EVIDENCE_CELLS_MAX {
                break;
            }
            let against = down
                .iter()
                .any(|d| **d != c.cell && !c.sees.iter().any(|s| s == *d));
            if !view.own && against && !names.contains(&c.cell) {
                names.push(c.cell.clone());
                observers += 1;
            }
        }
    }
    names.iter().filter_map(|n| cells.entry(n)).collect()
}

/// One envoy contact of each of up to [`NEWS_CELLS_MAX`] other cells held and not unreached
/// here, from a place of this agent's own in the sorted list.
fn other_cells(node: &MeshNode) -> Vec<Peer> {
    let cells = &node.cells;
    let mut others: Vec<Peer> = cells
        .list()
        .into_iter()
        .filter(|c| !c.own && !cells.unreached(&c.summary.cell))
        .filter_map(|c| {
            let contact = c
                .summary
                .contacts
                .iter()
                .filter_map(|t| parse_contact(t))
                .find(|t| t.envoy)?;
            Some(Peer {
                name: contact.name,
                addr: contact.api,
            })
        })
        .collect();
    rotate_own(node, &mut others);
    others.truncate(NEWS_CELLS_MAX);
    others
}

/// Up to [`NEWS_MEMBERS_MAX`] live members of this agent's cell other than its envoys, from a
/// place of this agent's own.
fn own_members(
    node: &MeshNode,
    members: &[Member],
    envoys: &[(String, SocketAddr, SocketAddr)],
) -> Vec<Peer> {
    let mut own: Vec<Peer> = members
        .iter()
        .filter(|m| m.alive && m.name != node.name && !envoys.iter().any(|e| e.0 == m.name))
        .filter_map(|m| {
            Some(Peer {
                name: m.name.clone(),
                addr: m.record.as_ref()?.api_addr,
            })
        })
        .collect();
    rotate_own(node, &mut own);
    own.truncate(NEWS_MEMBERS_MAX);
    own
}

/// Rotates `peers` to start at a place of this agent's own (a hash of its name).
fn rotate_own(node: &MeshNode, peers: &mut [Peer]) {
    if !peers.is_empty() {
        let at = xxhash_rust::xxh3::xxh3_64(node.name.as_bytes()) as usize % peers.len();
        peers.rotate_left(at);
    }
}

/// Pushes `entries` to every one of `peers`, all at once, each given the exchange timeout.
async fn push_to(node: &MeshNode, peers: &[Peer], entries: Vec<shoal_core::cells::CellEntry>) {
    if entries.is_empty() {
        return;
    }
    let push = Request::CellsPush { entries };
    let calls = peers.iter().map(|peer| {
        let push = &push;
        async move {
            let answer: Result<Response, _> = rpc::call_with(
                node.rpc.as_ref(),
                peer.addr,
                &peer.name,
                push,
                CELLS_EXCHANGE_TIMEOUT,
            )
            .await;
            if let Err(e) = answer {
                tracing::debug!(peer = %peer.name, error = %e, "cell news push failed");
            }
        }
    });
    futures_util::future::join_all(calls).await;
}

/// Publishes this cell's summary from the membership and the host loop's last placement.
/// What the members can run goes out only under placement algorithm 9 and later, the first
/// whose cell level reads it: below, the summary is what builds before published.
fn publish(
    node: &MeshNode,
    published: &std::sync::Mutex<Option<CellSummary>>,
    members: &[Member],
    contacts: &[String],
) {
    let mut published = published.lock().expect("published lock");
    let terms = node.placement_terms();
    let mut nodes = view::placement_nodes(members, &node.caps(), (node.clock)(), terms);
    if terms.1 < 9 {
        for n in &mut nodes {
            n.caps = None;
        }
    }
    let summary = node
        .cells
        .summarize_own(contacts, &nodes, published.as_ref());
    *published = Some(summary.clone());
    node.cells.publish(summary, (node.clock)());
}

impl CellExchange {
    /// Whom an envoy exchanges with: the other envoys of its cell, the contacts of every other
    /// cell it knows, and the seeds while it knows no other cell; sorted, without itself.
    fn envoy_peers(&self, envoys: &[(String, SocketAddr, SocketAddr)]) -> Vec<Peer> {
        let node = &self.node;
        let mut peers: Vec<Peer> = envoys
            .iter()
            .filter(|(name, _, _)| *name != node.name)
            .map(|(name, addr, _)| Peer {
                name: name.clone(),
                addr: *addr,
            })
            .collect();
        for cell in node.cells.list() {
            // A cell this agent's probes call unreached (mesh version 14) is not called: its
            // contacts would only cost the round their timeouts. Its probes go on every
            // CELL_REPROBE_MS, and one answered brings its news and the exchanges back.
            if cell.own || node.cells.unreached(&cell.summary.cell) {
                continue;
            }
            peers.extend(cell.summary.contacts.iter().filter_map(|c| {
                let c = parse_contact(c).filter(|c| c.envoy)?;
                Some(Peer {
                    name: c.name,
                    addr: c.api,
                })
            }));
        }
        if !node.cells.multi() {
            peers.extend(node.cells.seeds().into_iter().map(|addr| Peer {
                name: ANY_MEMBER.to_string(),
                addr,
            }));
        }
        peers.sort();
        peers.dedup();
        peers
    }
}

/// Pulls what `peer` holds that is newer; an envoy pushes back what the peer lacks and, when
/// the peer is of another cell and its store differs, pulls the differing entries. Returns the
/// peer's cell when it answered.
async fn exchange(node: &MeshNode, peer: &Peer, envoy: bool) -> Option<String> {
    let req = Request::Cells {
        cell: node.cells.own().to_string(),
        known: node.cells.known(),
    };
    let answer: Result<Response, _> = rpc::call_with(
        node.rpc.as_ref(),
        peer.addr,
        &peer.name,
        &req,
        CELLS_EXCHANGE_TIMEOUT,
    )
    .await;
    let (cell, entries, known, store) = match answer {
        Ok(Response::Cells {
            cell,
            entries,
            known,
            store,
        }) => (cell, entries, known, store),
        other => {
            tracing::debug!(peer = %peer.name, addr = %peer.addr, answer = ?other, "cell exchange failed");
            return None;
        }
    };
    node.merge_cells(entries, &peer.name);
    node.cells.table_pulled();
    if !envoy {
        return Some(cell);
    }
    let lacking = node.cells.newer_than(&known);
    if !lacking.is_empty() {
        let push = Request::CellsPush { entries: lacking };
        let answer: Result<Response, _> = rpc::call_with(
            node.rpc.as_ref(),
            peer.addr,
            &peer.name,
            &push,
            CELLS_CALL_TIMEOUT,
        )
        .await;
        if let Err(e) = answer {
            tracing::debug!(peer = %peer.name, error = %e, "cell push failed");
        }
    }
    if cell != node.cells.own() {
        let mine = node.with_store(|s| s.digest()).await;
        if to_hex(&mine.summary().encode()) != store {
            if let Err(e) = pull_from(node, &peer.name, peer.addr, &mine).await {
                tracing::debug!(peer = %peer.name, error = %e, "cross-cell pull failed");
            }
        }
    }
    Some(cell)
}

/// An envoy's probes of the stale cells' members (mesh version 14): a cell exchange call to
/// [`CELL_PROBED_MIN`] listed contacts of each, all at once, each given
/// [`CELL_PROBE_TIMEOUT`], at most [`CELL_PROBES_PER_ROUND_MAX`] a round. A member of the cell
/// that answers vouches for it (and what it holds newer is taken); a call that fails or is
/// answered by an agent of another cell counts against it. What the probes found decides
/// whether this envoy's next summary lists the cell among those it holds up
/// (`CellTable::sees`).
async fn probe_stale_cells(node: &MeshNode, rule: CellRule) -> Vec<String> {
    if rule != CellRule::Evidence {
        return Vec::new();
    }
    let cells = &node.cells;
    let mut calls = Vec::new();
    for (cell, contacts) in cells.to_probe(CELL_PROBED_MIN) {
        for contact in contacts {
            if calls.len() >= CELL_PROBES_PER_ROUND_MAX {
                break;
            }
            calls.push((cell.clone(), contact));
        }
    }
    if calls.is_empty() {
        return Vec::new();
    }
    let req = Request::Cells {
        cell: cells.own().to_string(),
        known: cells.known(),
    };
    let probes = calls.iter().map(|(cell, contact)| {
        let req = &req;
        async move {
            let c = parse_contact(contact)?;
            let answer: Result<Response, _> =
                rpc::call_with(node.rpc.as_ref(), c.api, &c.name, req, CELL_PROBE_TIMEOUT).await;
            match answer {
                Ok(Response::Cells {
                    cell: theirs,
                    entries,
                    ..
                }) if theirs == *cell => Some(entries),
                other => {
                    tracing::debug!(%cell, %contact, answer = ?other, "cell probe failed");
                    None
                }
            }
        }
    });
    let answers = futures_util::future::join_all(probes).await;
    let up = cells.up_cells();
    for ((cell, contact), answer) in calls.iter().zip(answers) {
        let answered = answer.is_some();
        if let Some(entries) = answer {
            node.merge_cells(entries, contact);
        }
        cells.probed(cell, contact, answered);
    }
    let now_up = cells.up_cells();
    if now_up != up {
        // This agent's own evidence completed a verdict: its host loop acts on it now.
        node.membership_moved.notify_one();
    }
    moved_between(&up, &now_up)
}

/// The cells held up in one of `before` and `after` and not in the other: those that went
/// down, then those that came back.
fn moved_between(before: &[String], after: &[String]) -> Vec<String> {
    let went_down = before.iter().filter(|c| !after.contains(c));
    let came_back = after.iter().filter(|c| !before.contains(c));
    went_down.chain(came_back).cloned().collect()
}

/// One round of questions to other cells about the replicas this agent runs or owns
/// ([`super::handoff`]) (a cell that does not answer leaves its moved replicas
/// waiting, up to the handoff bound, and the exclusive replicas waiting).
pub async fn ask_copies(node: &MeshNode, round: u64) {
    let cells = &node.cells;
    let questions = cells.handoffs.to_ask(round, &cells.up_cells());
    for chunk in questions.chunks(crate::state::cells::handoff::ASKS_IN_FLIGHT) {
        let asks = chunk
            .iter()
            .map(|(cell, replicas)| ask_cell(node, cell, replicas));
        futures_util::future::join_all(asks).await;
    }
}

/// Asks `cell` what it holds of `replicas` and records the answer.
async fn ask_cell(node: &MeshNode, cell: &str, replicas: &[shoal_core::instance::ReplicaId]) {
    let req = Request::CellCopies {
        replicas: replicas.to_vec(),
    };
    let accept = |answer| match answer {
        Response::CellCopies(answer) => Ok(answer),
        other => Err(other),
    };
    match ask_contacts(node, cell, &req, accept).await {
        Ok(answer) => {
            let cells = &node.cells;
            cells
                .handoffs
                .answered(cell, replicas, &answer, cells.mono_ms());
        }
        Err(why) => tracing::debug!(%cell, %why, "copies ask failed"),
    }
}

/// Sends `req` to the contacts of `cell` in turn, each given [`CELLS_CALL_TIMEOUT`], until one
/// answers with what `accept` takes; the last failure otherwise.
pub(crate) async fn ask_contacts<T>(
    node: &MeshNode,
    cell: &str,
    req: &Request,
    accept: impl Fn(Response) -> Result<T, Response>,
) -> Result<T, String> {
    let summary = node
        .cells
        .summary(cell)
        .ok_or_else(|| format!("cell {cell} is not known here"))?;
    let mut last = format!("cell {cell} lists no contact");
    for contact in summary.contacts.iter().filter_map(|c| parse_contact(c)) {
        let answer: Result<Response, _> = rpc::call_with(
            node.rpc.as_ref(),
            contact.api,
            &contact.name,
            req,
            CELLS_CALL_TIMEOUT,
        )
        .await;
        match answer.map(&accept) {
            Ok(Ok(taken)) => return Ok(taken),
            Ok(Err(other)) => last = format!("{}: unexpected answer {other:?}", contact.name),
            Err(e) => last = format!("{}: {e}", contact.name),
        }
    }
    Err(last)
}

/// How this agent's directory answers `ask` ([`crate::transport::gossip::directory`]): its cell and API
/// address, and gossip addresses of members of the asked cell: its own live members when that is
/// its cell, else agents of that cell that asked lately and the envoys its table lists.
pub async fn directory_answer(
    node: &MeshNode,
    ask: crate::transport::gossip::directory::Ask,
) -> crate::transport::gossip::directory::Answer {
    let own = node.cells.own().to_string();
    let mut peers: Vec<SocketAddr> = if ask.cell == own {
        node.members()
            .await
            .iter()
            .filter(|m| m.alive)
            .map(|m| m.id.gossip_advertise_addr)
            .collect()
    } else {
        node.cells.gossip_addrs_of(&ask.cell)
    };
    peers.retain(|a| *a != ask.gossip);
    peers.truncate(crate::transport::gossip::directory::DIRECTORY_PEERS_MAX);
    if ask.cell != own && crate::state::cells::check_cell_name(&ask.cell).is_ok() {
        node.cells.note_asker(&ask.cell, ask.gossip);
    }
    crate::transport::gossip::directory::Answer {
        cell: own,
        api: node.record().map_or(ask.gossip, |r| r.api_addr),
        peers,
    }
}

/// While this agent hears no member of its cell, asks each seed's directory whom of its cell
/// it knows and gossips to them; learns the seeds' API addresses for the cell exchange. Ends
/// with the node. (`ask` is the transport's directory call: QUIC for a real agent.)
pub async fn join_across_cells<F, Fut>(
    node: std::sync::Weak<MeshNode>,
    seeds: Vec<SocketAddr>,
    own_gossip: SocketAddr,
    ask: F,
) where
    F: Fn(SocketAddr, crate::transport::gossip::directory::Ask) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<crate::transport::gossip::directory::Answer>>,
{
    if seeds.is_empty() {
        return;
    }
    let mut first = true;
    loop {
        tokio::time::sleep(match first {
            true => std::time::Duration::from_secs(1),
            false => CELLS_INTERVAL * 2,
        })
        .await;
        let Some(node) = node.upgrade() else {
            return;
        };
        let alone = node
            .members()
            .await
            .iter()
            .all(|m| !m.alive || m.name == node.name);
        if !alone && !first {
            continue;
        }
        first = false;
        for seed in &seeds {
            let question = crate::transport::gossip::directory::Ask {
                name: node.name.clone(),
                cell: node.cells.own().to_string(),
                gossip: own_gossip,
            };
            match ask(*seed, question).await {
                Ok(answer) => {
                    if answer.cell != node.cells.own() {
                        node.cells.add_seed(answer.api);
                    }
                    for peer in answer.peers {
                        let _ = node.gossip().gossip(peer);
                    }
                }
                Err(e) => tracing::debug!(%seed, error = %e, "directory ask failed"),
            }
        }
    }
}
