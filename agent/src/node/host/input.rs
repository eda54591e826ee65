//! Builds the reconciler's input from the store, the gossip view and the runtime.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chitchat::{Chitchat, ChitchatId};
use shoal_core::cells::{Cell, CellPlacer};
use shoal_core::instance::ReplicaId;
use shoal_core::placement::Placement;
use shoal_core::reconcile::{InstanceStatus, Membership, ReconcileInput, SpecEntry};
use shoal_core::stacking::StackedPlacer;
use shoal_core::Resources;

use super::{Host, INSTANCES_KEY};
use crate::state::mesh::view::{self, Member, MemberCache};
use crate::state::store_db::RESERVED_PREFIX;

/// How long after start the view counts as suspect unless the store synced with a peer first.
pub const START_SUSPECT_MS: u64 = 10_000;
/// Longest observed-state value accepted from a peer, in bytes.
pub const INSTANCES_BYTES_MAX: usize = 512 * 1024;

/// Caches the shell keeps between rounds, and the reconciler's input itself: each round updates
/// only what moved (membership, peers' observed state, specs, placement), so a quiet round costs
/// a walk over chitchat's node states, not a decode and a copy of everything.
#[derive(Default)]
pub struct ShellState {
    /// The membership, re-read where chitchat's versions moved: the node's cache
    /// (`MeshNode::member_cache`), shared with its other readers ([`ShellState::new`]).
    members: Arc<std::sync::Mutex<MemberCache>>,
    /// What this shell saw of `members` at its last refresh.
    members_seen: view::CacheSeen,
    /// The members as the last [`build`] read them (shared with the cache until it rebuilds
    /// them).
    members_now: Arc<[Member]>,
    /// Which identity and version each entry of `input.peers` was decoded from (a version that
    /// failed to decode counts as taken: it is counted once, and the entry keeps what the same
    /// identity published before).
    peers_from: BTreeMap<String, (ChitchatId, u64)>,
    /// The store digest the specs were decoded at.
    specs_digest: Option<u64>,
    /// The mesh's capacity caps, read with the specs.
    caps: crate::identity::authority::caps::NodeCaps,
    specs: BTreeMap<String, SpecEntry>,
    /// The rollout records of the live workloads that have one (`shoal:rollout:NAME`), read
    /// with the specs.
    records: BTreeMap<String, shoal_core::rollout::Record>,
    placement_key: Option<u64>,
    /// The last placement computed.
    pub placement: Arc<Placement>,
    /// Keeps the placement up to date incrementally (a full pass costs about a second at
    /// 10,000 nodes; a node going down or a spec change, tens of milliseconds).
    placer: StackedPlacer,
    /// The same in a mesh of several cells: the cell level, then this cell's node level.
    cell_placer: CellPlacer,
    /// The cells placed over last (`None`: one cell, single-level placement), shared with
    /// `cell_placer`.
    cells: Option<Arc<Vec<Cell>>>,
    /// What `cells` was read at: read again only when it moved.
    cells_stamp: shoal_core::cells::PlacementStamp,
    /// The view of the cells read but not adopted yet.
    cells_settle: shoal_core::cells::CellsSettle,
    /// Why the last round held the placement (`CellState::holds_placement`), if it did: the
    /// first round after places whatever moved meanwhile.
    placement_held: Option<String>,
    /// Every cell's standing at the last round (what the cell events compare).
    cell_healths: Vec<(String, shoal_core::cells::CellHealth)>,
    /// Peers' observed state that failed to decode, counted.
    pub statuses_rejected: u64,

    /// The input of the last round, updated in place.
    input: ReconcileInput,
    /// Counts the rounds in which the peers' observed instances or the specs moved (what the
    /// endpoint table reads of the input besides the members' addresses and liveness; not every
    /// key: while a mesh forms, records move every round, and rebuilding every agent's table
    /// each time cost a twelfth of the simulator's time at 5,000 agents).
    endpoints_generation: u64,
    /// Members held up in a planned restart (`Member::held_up`) at the last round: when one's
    /// restart ends unreturned, the membership and the placement are computed again.
    held_up: BTreeSet<String>,
    /// Past versions instances here run that the store's history did not have (not looked up
    /// again until the specs move).
    past_missing: BTreeSet<(String, String)>,
    /// When the fixed host ports were last probed (monotonic ms).
    ports_probed_at: u64,
    /// Every identity's heartbeats, for names claimed by two live agents at once.
    claims: shoal_core::claims::NameClaims,
    /// The names disputed at the last round.
    pub disputes: Vec<shoal_core::claims::Dispute>,
    /// Members whose observed state is read from a newer identity of their name (`successors`).
    successors: BTreeMap<String, ChitchatId>,
    /// Each identity's exclusive lease as last read: its chitchat version, and when (monotonic
    /// ms) this agent saw it advance (`Membership::leased_at`, [`view::LEASE_KEY`]).
    leases: BTreeMap<ChitchatId, (u64, u64)>,
    /// `leases` was read while exclusive workloads existed (what moved since is in `Moved::keys`).
    leases_read: bool,
}

/// How often an agent probes the fixed host ports of workloads not placed on it.
const PORT_PROBE_MS: u64 = 10_000;

/// Gossips which fixed host ports of the workloads with no live instance here something else
/// holds on this host, found by binding each on every address (`ports_taken` of its
/// capabilities): placement then keeps those workloads off this node, and a replica placed here
/// whose start finds its port taken moves. A workload with an instance here is not probed (its
/// instance may hold the port); a port freed later is dropped at the next probe. At most
/// `CAPABILITY_ITEMS_MAX` ports, in port order.
async fn probe_fixed_ports(host: &Host, shell: &ShellState) {
    use shoal_core::placement::HostPort;
    use shoal_core::spec::Protocol;
    let here: BTreeSet<&str> = shell
        .input
        .instances
        .iter()
        .filter(|i| i.phase.may_be_alive())
        .map(|i| i.replica.workload.as_str())
        .collect();
    let mut ours: BTreeSet<HostPort> = BTreeSet::new();
    let mut probe: BTreeSet<HostPort> = BTreeSet::new();
    for (name, entry) in &shell.specs {
        let ports = entry.spec.fixed_host_ports().into_iter();
        let ports = ports.map(|(port, protocol)| HostPort { port, protocol });
        match here.contains(name.as_str()) {
            true => ours.extend(ports),
            false => probe.extend(ports),
        }
    }
    let mut taken = Vec::new();
    for p in probe.difference(&ours) {
        if taken.len() >= crate::state::mesh::capabilities::CAPABILITY_ITEMS_MAX {
            break;
        }
        let addr = std::net::SocketAddr::from(([0, 0, 0, 0], p.port));
        let bound = match p.protocol {
            Protocol::Tcp => std::net::TcpListener::bind(addr).map(drop),
            Protocol::Udp => std::net::UdpSocket::bind(addr).map(drop),
        };
        if bound.is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse) {
            taken.push(*p);
        }
    }
    host.node.set_ports_taken(taken).await;
}

impl ShellState {
    /// A shell reading the membership through `members`, the node's cache, and sharing
    /// placements through `memo` (`HostConfig::placement_memo`).
    pub fn new(
        members: Arc<std::sync::Mutex<MemberCache>>,
        memo: Option<Arc<shoal_core::cells::PlacementMemo>>,
    ) -> ShellState {
        let mut shell = ShellState {
            members,
            ..ShellState::default()
        };
        shell.placer.set_memo(memo.as_ref().map(|m| m.nodes()));
        shell.cell_placer.set_memo(memo);
        shell
    }

    /// The store digest the specs were last decoded at.
    pub fn specs_digest(&self) -> Option<u64> {
        self.specs_digest
    }

    /// The rollout records, by workload, as the store held them when the specs were read.
    pub fn records(&self) -> &BTreeMap<String, shoal_core::rollout::Record> {
        &self.records
    }

    /// Moves with every round in which the peers' observed instances or the specs moved: the
    /// endpoint table, built from them and the members' addresses, need not be built again
    /// while it stays and those stand.
    pub fn endpoints_generation(&self) -> u64 {
        self.endpoints_generation
    }

    /// The members as the last [`build`] read them.
    pub fn members(&self) -> &Arc<[Member]> {
        &self.members_now
    }

    /// The reconciler's input as the last [`build`] left it.
    pub fn input(&self) -> &ReconcileInput {
        &self.input
    }

    /// Tells the reconciler why no guard can be relied on (exclusive replicas then wait).
    pub fn set_guard_unavailable(&mut self, why: Option<String>) {
        self.input.exclusive_guard_unavailable = why;
    }

    /// The workloads whose replicas are exclusive.
    pub fn exclusive_workloads(&self) -> BTreeSet<String> {
        self.specs
            .iter()
            .filter(|(_, e)| e.spec.placement.exclusive)
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// Brings the reconciler's input up to date for one round at `now`.
pub async fn build(host: &Host, shell: &mut ShellState, now: u64) {
    let node = &host.node;
    let members_moved = {
        let chitchat = node.gossip().chitchat();
        let guard = chitchat.lock().await;
        let cache = shell.members.clone();
        // Held to the end of this block (no await in it), after chitchat's, as every reader
        // takes them.
        let cache = &mut *cache.lock().expect("members lock");
        let moved = cache.refresh_for(&guard, &node.verdicts(), &mut shell.members_seen);
        shell.members_now = cache.members().clone();
        let compact = crate::transport::gossip::probe::compact_at(
            node.wire.load(std::sync::atomic::Ordering::Relaxed),
        );
        let sightings = sightings(&guard, cache, compact.then_some(now));
        shell.claims.handle_view_of(now, &sightings);
        // A lease advance moves its node state's versions: read again only then (and at once
        // when exclusive workloads appear), not every round over every member.
        let exclusive = shell.specs.values().any(|e| e.spec.placement.exclusive);
        if exclusive && (moved.keys || !shell.leases_read) {
            read_leases(&guard, &mut shell.leases, now);
        }
        shell.leases_read = exclusive;
        let successors = successors(&guard, shell, cache, now);
        if moved.keys || successors != shell.successors {
            shell.successors = successors;
            if refresh_peers(&guard, shell, moved.members) {
                shell.endpoints_generation += 1;
            }
        }
        // Held up while they restart (planned, within their grace, at mesh version 8 or later):
        // not dead, so an exclusive replica of theirs waits for them and for the fencing delay
        // counted from the end of the grace.
        let (wall, hold) = ((host.clock)(), node.restart_hold());
        let held_up: BTreeSet<String> = shell
            .members_now
            .iter()
            .filter(|m| m.held_up(wall, hold))
            .map(|m| m.name.clone())
            .collect();
        let held_moved = held_up != shell.held_up;
        shell.held_up = held_up;
        let dead = dead_names(guard.dead_nodes(), &shell.members_now, &shell.held_up);
        let me = view::claim_identity(guard.self_chitchat_id());
        shell.input.name_hold = shell.claims.self_hold(&me, now);
        shell.disputes = shell.claims.disputes(now);
        if moved.members || held_moved || dead != shell.input.membership.dead {
            shell.input.membership = membership(&shell.members_now, dead);
        }
        moved.members || held_moved
    };
    shell.input.membership.heard_at = host.heard_snapshot();
    shell.input.membership.leased_at = leased_at(&shell.leases);
    // Wall time: a new owner's fencing token is at least this, should the mesh have forgotten
    // every earlier one (docs/reconcile.md, "Fencing tokens").
    shell.input.fence_token_floor = (host.clock)();
    let specs_moved = refresh_specs(host, shell).await;
    if specs_moved {
        shell.endpoints_generation += 1;
        shell.input.specs = shell.specs.clone();
    }
    // The placement is a function of the members, the specs and the cells only.
    // A new view of the cells is adopted once it stands (`CellsSettle`): while a mesh of cells
    // forms, views change round after round, and each would move replicas the next moves again.
    let read = node.cells.placement_cells_since(&mut shell.cells_stamp);
    let adopted = shell.cells.as_deref().map(Vec::as_slice);
    let cells = shell.cells_settle.offer(now, read, adopted);
    let cells_moved = cells
        .as_ref()
        .is_some_and(|c| c.as_ref() != shell.cells.as_deref());
    let healths = node.cells.healths();
    if healths != shell.cell_healths {
        record_cell_changes(host, &shell.cell_healths, &healths);
        shell.cell_healths = healths;
    }
    if let Some(cells) = cells.filter(|_| cells_moved) {
        shell.cells = cells.map(Arc::new);
        shell.placement_key = None;
    }
    let hold = node.cells.holds_placement();
    if hold != shell.placement_held {
        match &hold {
            Some(why) => tracing::info!("placement held: {why}"),
            None => tracing::info!("placement no longer held"),
        }
    }
    if cells_moved || hold.is_some() != shell.placement_held.is_some() {
        node.cells.set_adopted(crate::state::cells::Adopted::new(
            shell.cells.clone(),
            hold.is_some(),
        ));
    }
    let was_held = std::mem::replace(&mut shell.placement_held, hold);
    let place = members_moved || specs_moved || cells_moved || was_held.is_some();
    if place && shell.placement_held.is_none() {
        let before = shell.placement.clone();
        let members = shell.members_now.clone();
        refresh_placement(host, shell, &members);
        if !Arc::ptr_eq(&before, &shell.placement) {
            shell.input.owners = shell.placement.assigned.clone();
        }
    }
    if shell.input.volume_roots != host.config.volume_roots {
        shell.input.volume_roots = host.config.volume_roots.clone();
    }
    shell.input.draining = node.record().is_some_and(|r| r.draining);
    shell.input.capacity = node
        .record()
        .map(|r| Resources::new(r.cpu_millis, r.memory_bytes));
    let (instances, runtime_unavailable) = match host.runtime.list().await {
        Ok(list) => {
            host.hold_listed_ports(&list);
            (list, None)
        }
        Err(e) => (
            Vec::new(),
            Some(format!(
                "the {} runtime cannot be listed: {e}",
                host.runtime.kind()
            )),
        ),
    };
    shell.input.instances = instances;
    if now >= shell.ports_probed_at + PORT_PROBE_MS {
        shell.ports_probed_at = now;
        probe_fixed_ports(host, shell).await;
    }
    if specs_moved {
        shell.past_missing.clear();
    }
    refresh_past_specs(host, shell).await;
    shell.input.runtime_unavailable = runtime_unavailable;
    shell.input.data_missing = data_missing(host, &shell.input).await;
    shell.input.pulling = host.runtime.pulling();
    refresh_handoffs(host, shell);
    shell.input.view_suspect = if node.is_stale() {
        Some("the store is resynchronizing after a long absence".to_string())
    } else if !node.synced_once() && now < host.started_mono_ms() + START_SUSPECT_MS {
        Some("the agent just started and has not synced with a peer yet".to_string())
    } else {
        None
    };
    (
        shell.input.supports_containers,
        shell.input.supports_processes,
    ) = support_flags(&host.runtime);
}

/// The exclusive replicas with data placed here, recorded as held here, with no instance, whose
/// data the runtime says is gone (`ReconcileInput::data_missing`). A stat, or an engine call,
/// per such replica (few: they are the ones waiting to start here).
async fn data_missing(host: &Host, input: &ReconcileInput) -> BTreeMap<ReplicaId, String> {
    let me = host.node.name.as_str();
    let waiting = input
        .data_holders
        .iter()
        .filter(|(r, holder)| *holder == me && input.owners.get(*r).is_some_and(|o| o == me))
        .filter(|(r, _)| {
            !input
                .instances
                .iter()
                .any(|i| &i.replica == *r && i.phase.may_be_alive())
        })
        .filter_map(|(r, _)| Some((r, input.specs.get(&r.workload)?.spec.clone())))
        .filter(|(_, spec)| spec.sticky());
    let mut out = BTreeMap::new();
    for (r, spec) in waiting {
        if let Some(why) = host.runtime.data_missing(r, &spec).await {
            out.insert(r.clone(), why);
        }
    }
    out
}

/// In a mesh of several cells: tells the cell exchange which instances here run a replica the
/// cell level placed in another cell, and which exclusive replicas placed here do not run yet
/// (it asks the other cells about them), and hands the reconciler the answers and this cell's
/// quorum of cells.
fn refresh_handoffs(host: &Host, shell: &mut ShellState) {
    let cells = &host.node.cells;
    shell.input.membership.cells = cells.quorum();
    let any_exclusive = (shell.specs.values()).any(|e| e.spec.placement.exclusive);
    let exclusive: BTreeSet<_> = match shell.input.membership.cells {
        Some(_) if any_exclusive => shell
            .input
            .owners
            .iter()
            .filter(|(r, owner)| {
                **owner == host.node.name
                    && shell
                        .specs
                        .get(&r.workload)
                        .is_some_and(|e| e.spec.placement.exclusive)
                    && !shell
                        .input
                        .instances
                        .iter()
                        .any(|i| &i.replica == *r && i.phase.may_be_alive())
            })
            .map(|(r, _)| r.clone())
            .collect(),
        _ => BTreeSet::new(),
    };
    if exclusive.is_empty() {
        if !shell.input.cell_copies.is_empty() {
            cells.handoffs.set_exclusive(BTreeSet::new());
            shell.input.cell_copies.clear();
        }
    } else {
        cells.handoffs.set_exclusive(exclusive);
        shell.input.cell_copies =
            cells
                .handoffs
                .copies(cells.mono_ms(), cells.own(), &cells.up_cells());
    }
    if shell.cells.is_none() {
        if !shell.input.moved_to_cells.is_empty() {
            cells.handoffs.set_moved(BTreeMap::new());
            shell.input.moved_to_cells.clear();
        }
        return;
    }
    let assigned = &shell.cell_placer.last().cells.assigned;
    let moved: BTreeMap<_, _> = shell
        .input
        .instances
        .iter()
        .filter(|i| i.phase.may_be_alive() && !shell.input.owners.contains_key(&i.replica))
        .filter_map(|i| {
            let cell = assigned.get(&i.replica)?;
            (cell != cells.own()).then(|| (i.replica.clone(), cell.clone()))
        })
        .collect();
    cells.handoffs.set_moved(moved);
    shell.input.moved_to_cells = cells.handoffs.view(cells.mono_ms());
}

/// The specs of the past versions this node's instances run (an agent that restarted never saw
/// them applied), from the store's history: decoded once, kept while an instance runs them.
async fn refresh_past_specs(host: &Host, shell: &mut ShellState) {
    let input = &mut shell.input;
    let wanted: BTreeSet<(String, String)> = input
        .instances
        .iter()
        .filter(|i| {
            input
                .specs
                .get(&i.replica.workload)
                .is_some_and(|e| e.version != i.spec_version)
        })
        .map(|i| (i.replica.workload.clone(), i.spec_version.clone()))
        .collect();
    input.past_specs.retain(|key, _| wanted.contains(key));
    let missing: Vec<(String, String)> = wanted
        .into_iter()
        .filter(|k| !input.past_specs.contains_key(k) && !shell.past_missing.contains(k))
        .collect();
    if missing.is_empty() {
        return;
    }
    let found = host
        .node
        .with_store(move |s| {
            missing
                .into_iter()
                .map(|(workload, version)| {
                    let name = crate::state::mesh::history::store_name(&workload);
                    let history = crate::state::mesh::history::History::decode(
                        s.get(&name).and_then(|e| e.body.live()),
                    );
                    let body = history
                        .versions
                        .into_iter()
                        .find(|p| p.version == version)
                        .map(|p| p.spec);
                    ((workload, version), body)
                })
                .collect::<Vec<_>>()
        })
        .await;
    for (key, body) in found {
        match body.and_then(|b| view::decode_spec(&b).ok()) {
            Some(spec) => {
                shell.input.past_specs.insert(key, Arc::new(spec));
            }
            None => {
                shell.past_missing.insert(key);
            }
        }
    }
}

/// This agent's view of a cell went down, degraded, came back or forgot it: an event each
/// (issue 28: a cell's verdict is shown and evented). The rule is the cell table's
/// (`shoal_core::cells::CellTable::health`).
fn record_cell_changes(
    host: &Host,
    before: &[(String, shoal_core::cells::CellHealth)],
    after: &[(String, shoal_core::cells::CellHealth)],
) {
    use shoal_core::cells::{CellChange, CELL_DOWN_MS, CELL_STALE_MS};
    let rule = host.node.cells.rule();
    for change in shoal_core::cells::cell_changes(before, after) {
        let reason = match (&change, rule) {
            (CellChange::Down(cell), shoal_core::cells::CellRule::Stamp) => format!(
                "cell {cell}: no fresh summary of it heard for over {} s: held down, its \
                 replicas are placed in the other cells",
                CELL_DOWN_MS / 1000
            ),
            (CellChange::Down(cell), _) => format!(
                "cell {cell}: no fresh summary of it heard for over {} ms, and the probes of \
                 its members by {} observer cells failed: held down, its replicas are placed \
                 in the other cells",
                CELL_STALE_MS,
                shoal_core::cells::CELL_DOWN_OBSERVERS
            ),
            (CellChange::Degraded(cell), _) => format!(
                "cell {cell}: no fresh summary of it heard for over {CELL_STALE_MS} ms, but its \
                 members answer (or too few cells say they do not): degraded, it keeps its \
                 replicas"
            ),
            (CellChange::Up(cell), _) => {
                format!("cell {cell}: heard again: up, its replicas are placed there again")
            }
            (CellChange::Forgotten(cell), _) => {
                format!("cell {cell}: down for too long: forgotten")
            }
        };
        match change {
            CellChange::Down(_) | CellChange::Degraded(_) => tracing::warn!("{reason}"),
            _ => tracing::info!("{reason}"),
        }
        host.record(change.kind(), None, reason);
    }
}

/// Every identity chitchat holds with its heartbeat, for the name-claim rule (`claims`); one
/// that announced a leave or a planned restart is stopping, not claiming, as the member cache
/// read it (refreshed from this very view). With compact gossip (`probes`: `now`), heartbeats no
/// longer spread every round: an identity the probes hold alive and unsuspected (the cache's
/// judgment) counts as heartbeating now (its watchers probe it every few
/// hundred milliseconds and would suspect it within a second of its going quiet), any other as
/// not heartbeating.
fn sightings<'a>(
    chitchat: &Chitchat,
    members: &'a view::MemberCache,
    probes: Option<u64>,
) -> Vec<shoal_core::claims::SightingRef<'a>> {
    // The cache was refreshed from this very view: one entry per identity, in its order.
    debug_assert_eq!(members.identities(), chitchat.node_states().len());
    members
        .judged()
        .zip(chitchat.node_states())
        .map(|(judged, (id, state))| {
            debug_assert_eq!(judged.id, id, "a member cache out of step");
            shoal_core::claims::SightingRef {
                identity: judged.claim,
                heartbeat: match probes {
                    None => state.heartbeat().into(),
                    Some(now) => match (judged.alive, judged.suspect) {
                        (true, false) => now.max(1),
                        _ => 0,
                    },
                },
                leaving: judged.stopping,
            }
        })
        .collect()
}

/// Notes, for every identity chitchat holds, when its exclusive lease ([`view::LEASE_KEY`])
/// last advanced: the first sighting counts as an advance (the lease may be fresh), so an agent
/// that starts or begins to care waits the whole fencing delay for a member that holds one.
/// Identities chitchat forgot are dropped, which bounds the map by the membership.
fn read_leases(chitchat: &Chitchat, leases: &mut BTreeMap<ChitchatId, (u64, u64)>, now: u64) {
    let states = chitchat.node_states();
    leases.retain(|id, _| states.contains_key(id));
    for (id, state) in states {
        let Some(version) = state.get_versioned(view::LEASE_KEY).map(|v| v.version) else {
            continue;
        };
        match leases.get_mut(id) {
            Some((seen, _)) if *seen == version => {}
            Some(entry) => *entry = (version, now),
            None => {
                leases.insert(id.clone(), (version, now));
            }
        }
    }
}

/// The latest lease advance seen of each name (any of its identities).
fn leased_at(leases: &BTreeMap<ChitchatId, (u64, u64)>) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for (id, (_, at)) in leases {
        let entry = out.entry(id.node_id.to_string()).or_default();
        *entry = (*entry).max(*at);
    }
    out
}

/// The names the failure detector holds dead: those of its dead identities, less the names with
/// a live identity and the members held up in a planned restart. chitchat keeps a restarted
/// agent's earlier identity dead for `dead_node_grace_period` (an hour) beside its live new one;
/// fed as dead, the name's death dated from the earlier identity's, and when the new one went
/// silent, peers skipped the fencing delay for its exclusive replicas (docs/reconcile.md,
/// rule 5; the core ignores a live name's death too).
fn dead_names<'a>(
    dead: impl Iterator<Item = &'a ChitchatId>,
    members: &[Member],
    held_up: &BTreeSet<String>,
) -> BTreeSet<String> {
    let live: BTreeSet<&str> = members
        .iter()
        .filter(|m| m.alive)
        .map(|m| m.name.as_str())
        .collect();
    dead.map(|id| id.node_id.to_string())
        .filter(|name| !held_up.contains(name) && !live.contains(name.as_str()))
        .collect()
}

/// The failure detector's facts from the members and the dead identities' names.
fn membership(members: &[Member], dead: BTreeSet<String>) -> Membership {
    let live: BTreeSet<String> = members
        .iter()
        .filter(|m| m.alive)
        .map(|m| m.name.clone())
        .collect();
    // A member counts once it has published something (its record or store digest, which every
    // agent does before it runs anything) or is live. chitchat adopts every node a peer's digest
    // names, even one that never existed: counted, a digest naming thousands of such ghosts took
    // every agent's majority away (tests/gossip_hostile.rs).
    let counted: Vec<&Member> = members
        .iter()
        .filter(|m| m.alive || m.record.is_some() || m.digest.is_some())
        .collect();
    let members_known = counted.iter().filter(|m| !m.leaving).count().max(1);
    // A member that announced its leave, or that the detector neither holds live nor dead, is
    // unreachable: its instances may still run, so exclusive replicas wait (see reconcile.md).
    let unreachable: BTreeSet<String> = counted
        .iter()
        .filter(|m| !m.alive && !dead.contains(&m.name))
        .map(|m| m.name.clone())
        .collect();
    Membership {
        live,
        dead,
        unreachable,
        members_known,
        heard_at: Default::default(),
        leased_at: Default::default(),
        cells: None,
    }
}

/// The members whose observed state comes from a newer identity of their name than the one the
/// membership shows, by name. Empty but for a restart. The newer identity is:
/// - the newest one of the name at the member's own gossip address: two processes cannot hold one
///   address, so the earlier identity is dead and its instance list stale, however live it still
///   looks (a restarted observer holds every identity it first hears of live until its probes
///   find otherwise, and the oldest live identity speaks for a name in the membership);
/// - else `NameClaims::successor`: a newer identity elsewhere that heartbeats while the member's
///   does not (an earlier identity held live by relayed heartbeats, with its last instance list).
fn successors(
    chitchat: &Chitchat,
    shell: &ShellState,
    members: &MemberCache,
    now: u64,
) -> BTreeMap<String, ChitchatId> {
    let mut out = BTreeMap::new();
    if !shell.claims.names_shared() {
        return out;
    }
    let identities: Vec<(&ChitchatId, bool)> = members.judged().map(|j| (j.id, j.alive)).collect();
    for member in members.members().iter().filter(|m| m.alive) {
        if let Some(id) = restarted_at(&identities, &member.id) {
            out.insert(member.name.clone(), id.clone());
            continue;
        }
        let Some(newer) = shell
            .claims
            .successor(&view::claim_identity(&member.id), now)
        else {
            continue;
        };
        let found = chitchat
            .node_states()
            .keys()
            .find(|id| *id.node_id == *member.name && id.generation_id == newer.generation);
        if let Some(id) = found {
            out.insert(member.name.clone(), id.clone());
        }
    }
    out
}

/// The newest identity of `id`'s name at `id`'s gossip address with a higher generation that
/// is alive, among `identities` (in chitchat's order, by id, with whether each is held alive):
/// the process that replaced `id` there. One held dead is not: with its data dir lost and the
/// clock set back, a restart can take a lower generation than the identity it replaced, whose
/// last instance list would then be read in place of the live one's.
fn restarted_at<'a>(
    identities: &[(&'a ChitchatId, bool)],
    id: &ChitchatId,
) -> Option<&'a ChitchatId> {
    let after = identities.partition_point(|(other, _)| *other <= id);
    identities[after..]
        .iter()
        .take_while(|(other, _)| other.node_id == id.node_id)
        .filter(|(other, alive)| *alive && other.gossip_advertise_addr == id.gossip_advertise_addr)
        .map(|(other, _)| *other)
        .last()
}

/// Updates `input.peers` from the members' observed-state keys (a member's, or its successor's:
/// [`successors`]), decoding a value only when its chitchat version moved. When the members
/// moved, also drops the entries of names no longer members and the decoded values of
/// identities chitchat forgot. Whether `input.peers` moved.
fn refresh_peers(chitchat: &Chitchat, shell: &mut ShellState, members_moved: bool) -> bool {
    let members = shell.members_now.clone();
    let mut moved = false;
    for member in members.iter() {
        let id = shell.successors.get(&member.name).unwrap_or(&member.id);
        let value = chitchat
            .node_state(id)
            .and_then(|state| state.get_versioned(INSTANCES_KEY));
        let Some(value) = value else {
            moved |= shell.input.peers.remove(&member.name).is_some();
            shell.peers_from.remove(&member.name);
            continue;
        };
        let from = (id.clone(), value.version);
        let before = shell.peers_from.get(&member.name);
        if before == Some(&from) {
            continue;
        }
        let same_identity = before.is_some_and(|(was, _)| was == id);
        let decoded = (value.value.len() <= INSTANCES_BYTES_MAX)
            .then(|| serde_json::from_str::<Vec<InstanceStatus>>(&value.value).ok())
            .flatten();
        match decoded {
            Some(list) => {
                moved |= shell.input.peers.get(&member.name) != Some(&list);
                shell.input.peers.insert(member.name.clone(), list);
            }
            None => {
                shell.statuses_rejected += 1;
                if !same_identity {
                    moved |= shell
                        .input
                        .peers
                        .get(&member.name)
                        .is_none_or(|l| !l.is_empty());
                    shell.input.peers.insert(member.name.clone(), Vec::new());
                }
            }
        }
        shell.peers_from.insert(member.name.clone(), from);
    }
    if members_moved {
        let named = |name: &String| members.binary_search_by(|m| m.name.cmp(name)).is_ok();
        let len = shell.input.peers.len();
        shell.input.peers.retain(|name, _| named(name));
        moved |= shell.input.peers.len() != len;
        shell.peers_from.retain(|name, _| named(name));
    }
    moved
}

/// (runs containers, runs processes), as the runtime says ([`crate::node::runtime::Runtime::runs`]).
fn support_flags(runtime: &Arc<dyn crate::node::runtime::Runtime>) -> (bool, bool) {
    use shoal_core::placement::Runtime;
    let runs = runtime.runs();
    (
        runs.contains(&Runtime::Container),
        runs.contains(&Runtime::Process),
    )
}

/// Decodes the specs again if the store moved; returns whether it did.
async fn refresh_specs(host: &Host, shell: &mut ShellState) -> bool {
    let digest = host.node.with_store(|s| s.digest().root_hash()).await;
    if shell.specs_digest == Some(digest) {
        return false;
    }
    let (specs, errors, caps, records, deleted, (holders, refused)) = host
        .node
        .with_store(|s| {
            use crate::identity::authority::caps::{NodeCaps, STORE_NAME};
            use crate::state::mesh::{data, history};
            let (specs, errors) = view::live_specs(s.list_live());
            // Workload names only (reserved entries such as `shoal:paused:NAME` never name an
            // instance's workload, so they would change nothing; they are left out all the same).
            let deleted: BTreeSet<String> = s
                .core()
                .iter()
                .filter(|e| e.is_tombstone() && !e.name.starts_with(RESERVED_PREFIX))
                .map(|e| e.name.clone())
                .collect();
            let caps = NodeCaps::from_body(s.get(STORE_NAME).and_then(|e| e.body.live()));
            let mut records = BTreeMap::new();
            let specs: Vec<_> = specs
                .into_iter()
                .map(|(spec, version)| {
                    let marker = history::paused_name(&spec.name);
                    let paused = s.get(&marker).is_some_and(|e| !e.is_tombstone());
                    let record = s.get(&history::rollout_name(&spec.name));
                    if let Some(r) = history::decode_record(record.and_then(|e| e.body.live())) {
                        records.insert(spec.name.clone(), r);
                    }
                    (spec, version, paused)
                })
                .collect();
            let holders = data::holders(s.core().iter());
            (specs, errors, caps, records, deleted, holders)
        })
        .await;
    shell.input.deleted = deleted;
    shell.input.data_holders = holders;
    host.stats.lock().expect("stats lock").data_records_refused = refused;
    if refused > 0 {
        tracing::warn!(refused, "data holder records refused: a body names another node than its writer, or the name does not parse");
    }
    shell.caps = caps;
    shell.records = records;
    for e in errors {
        tracing::warn!(error = %e, "a stored spec does not decode; it is left out");
    }
    shell.specs = specs
        .into_iter()
        .map(|(spec, version, paused)| {
            (
                spec.name.clone(),
                SpecEntry {
                    version,
                    spec: Arc::new(spec),
                    paused,
                },
            )
        })
        .collect();
    shell.specs_digest = Some(digest);
    true
}

fn refresh_placement(host: &Host, shell: &mut ShellState, members: &[Member]) {
    use std::hash::Hasher;
    let terms = host.node.placement_terms();
    let algorithm = terms.1;
    let nodes = view::placement_nodes(members, &shell.caps, (host.clock)(), terms);
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.write_u32(algorithm);
    for n in &nodes {
        if let Some(caps) = &n.caps {
            h.write_u8(0xca);
            for r in &caps.runtimes {
                h.write_u8(*r as u8);
            }
            for root in &caps.volume_roots {
                h.write_usize(root.len());
                h.write(root.as_bytes());
            }
            for p in &caps.ports_taken {
                h.write_u16(p.port);
                h.write_u8(p.protocol as u8);
            }
        }
        h.write(n.id.as_bytes());
        h.write_u64(n.capacity.cpu_millis);
        h.write_u64(n.capacity.memory_bytes);
        h.write(n.zone.as_bytes());
        h.write_u8(u8::from(n.draining));
        h.write_u8(u8::from(n.down));
        for (k, v) in &n.labels {
            h.write_usize(k.len());
            h.write(k.as_bytes());
            h.write_usize(v.len());
            h.write(v.as_bytes());
        }
    }
    for (name, entry) in &shell.specs {
        h.write(name.as_bytes());
        h.write(entry.version.as_bytes());
    }
    for (replica, node) in &shell.input.data_holders {
        h.write(replica.workload.as_bytes());
        h.write_u32(replica.replica);
        h.write(node.as_bytes());
    }
    let key = h.finish();
    if shell.placement_key == Some(key) {
        return;
    }
    let began = std::time::Instant::now();
    let workloads: Vec<_> = shell
        .specs
        .values()
        .map(|e| view::placement_workload_held(&e.spec, &shell.input.data_holders, algorithm))
        .collect();
    shell.placement = match &shell.cells {
        Some(cells) => {
            let own = host.node.cells.own();
            Arc::new(
                shell
                    .cell_placer
                    .update_shared(own, cells, &nodes, &workloads)
                    .local
                    .clone(),
            )
        }
        None => Arc::new(shell.placer.update(&nodes, &workloads)),
    };
    shell.placement_key = Some(key);
    host.node
        .cells
        .set_local(crate::state::cells::LocalPlacement {
            placement: shell.placement.clone(),
            workloads: Arc::new(workloads),
        });
    host.stats.lock().expect("stats lock").placement_last_us = began.elapsed().as_micros() as u64;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::mesh::record::NodeRecord;

    fn member(name: &str, alive: bool, published: bool) -> Member {
        let addr = std::net::SocketAddr::from(([10, 0, 0, 1], 7000));
        Member {
            name: name.to_string(),
            id: ChitchatId::new(name.to_string(), 1, addr),
            alive,
            suspect: false,
            record: published.then(|| NodeRecord {
                cpu_millis: 1000,
                memory_bytes: 1 << 30,
                labels: Default::default(),
                zone: "z".into(),
                draining: false,
                agent_version: "test".into(),
                placement_version: 3,
                api_addr: addr,
                limits_note: None,
                ports: crate::state::mesh::record::default_ports(),
            }),
            digest: None,
            stale: false,
            leaving: false,
            build: None,
            restarting_until: None,
            capabilities: None,
        }
    }

    #[test]
    fn a_restart_at_the_same_address_replaces_the_earlier_identity_a_twin_elsewhere_does_not() {
        let at = |port| std::net::SocketAddr::from(([10, 0, 0, 4], port));
        let id =
            |name: &str, generation, port| ChitchatId::new(name.to_string(), generation, at(port));
        let earlier = id("n4", 5, 7000);
        let ids = [
            (id("n3", 9, 7000), true),
            (earlier.clone(), true),
            (id("n4", 6, 7000), true),
            (id("n4", 7, 7001), true),  // a twin, at another address
            (id("n4", 8, 7000), true),  // the newest process at n4's address
            (id("n4", 9, 7000), false), // held dead (a restart that took a lower generation)
            (id("n5", 1, 7000), true),
        ];
        let identities: Vec<(&ChitchatId, bool)> = ids.iter().map(|(i, a)| (i, *a)).collect();
        assert_eq!(
            restarted_at(&identities, &earlier),
            Some(&id("n4", 8, 7000))
        );
        // The newest live one at its address has no successor; nor has the twin, alone at its
        // address; nor a live identity whose only newer one is dead.
        assert_eq!(restarted_at(&identities, &id("n4", 8, 7000)), None);
        assert_eq!(restarted_at(&identities, &id("n4", 7, 7001)), None);
        // The next name's identities are not this one's, though they follow it.
        assert_eq!(restarted_at(&identities, &id("n3", 9, 7000)), None);
    }

    #[test]
    fn a_name_with_a_live_identity_is_not_dead() {
        // n2 restarted: its earlier identity (generation 1) stays dead beside the live one.
        let addr = std::net::SocketAddr::from(([10, 0, 0, 2], 7000));
        let earlier = ChitchatId::new("n2".to_string(), 1, addr);
        let n3 = ChitchatId::new("n3".to_string(), 1, addr);
        let n4 = ChitchatId::new("n4".to_string(), 1, addr);
        let members = [
            member("n1", true, true),
            member("n2", true, true),
            member("n3", false, true),
            member("n4", false, true),
        ];
        let held_up = BTreeSet::from(["n4".to_string()]);
        let dead = dead_names([&earlier, &n3, &n4].into_iter(), &members, &held_up);
        assert_eq!(dead, BTreeSet::from(["n3".to_string()]));
    }

    #[test]
    fn members_that_never_published_anything_do_not_count_against_the_majority() {
        let mut members = vec![member("n1", true, true), member("n2", true, true)];
        members.extend((0..3000).map(|i| member(&format!("ghost-{i:05}"), false, false)));
        let m = membership(&members, BTreeSet::new());
        assert_eq!(m.members_known, 2);
        assert!(m.unreachable.is_empty(), "{:?}", m.unreachable.first());
        assert!(m.has_majority("n1"));

        // A silent member that did publish still counts: without a majority, exclusive replicas
        // wait (n3 may still run its instances).
        members.push(member("n3", false, true));
        members.push(member("n4", false, true));
        members.push(member("n5", false, true));
        let m = membership(&members, BTreeSet::new());
        assert_eq!(m.members_known, 5);
        assert_eq!(m.unreachable.len(), 3);
        assert!(!m.has_majority("n1"));
    }
}
