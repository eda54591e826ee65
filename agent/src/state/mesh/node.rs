//! `MeshNode`: one agent's mesh state (gossip handle, desired-state store, RPC client) and the
//! API handlers. Transport-agnostic: the QUIC wiring is in [`crate::agent::run`], and the simulator
//! can build the same node over the in-memory network.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitchat::ChitchatHandle;
use shoal_core::hlc::format_version;
use shoal_core::store::Entry;

use super::history::{self, History};
use super::record::NodeRecord;
use super::skew::{ClockSkew, Refusal};
use super::view::{self, Member};
use crate::state::store_db::DesiredStore;
use crate::transport::rpc::{self, RpcClient};
use crate::wire::api::{
    ApiError, Applied, ErrorKind, Request, Response, APPLY_SPECS_MAX, ENTRIES_PER_MESSAGE_MAX,
};

/// Longest wait for a peer to confirm it holds an applied entry.
pub const REPLICATE_TIMEOUT: Duration = Duration::from_secs(3);
/// Peers asked at once to hold a new entry (the first confirmation acknowledges the apply).
pub const REPLICATE_FANOUT: usize = 3;
pub use crate::state::store_db::RESERVED_PREFIX;

/// Bytes per page of a sync answer.
pub const PULL_PAGE_BYTES: usize = 1 << 20;

pub use super::skew::WallClock;

/// The real wall clock.
pub fn system_clock() -> WallClock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    })
}

/// One agent's mesh state. Cheap to share: wrap in an `Arc`.
pub struct MeshNode {
    /// This node's id.
    pub name: String,
    pub(crate) store: Arc<Mutex<DesiredStore>>,
    pub(crate) gossip: ChitchatHandle,
    pub(crate) rpc: Arc<dyn RpcClient>,
    pub(crate) clock: WallClock,
    /// The store was out of sync longer than the tombstone grace when the node started.
    pub(crate) stale: AtomicBool,
    /// Run store calls inline instead of on the blocking pool (in-memory stores: keeps paused
    /// tokio time from jumping while a call runs, and keeps the simulator deterministic).
    pub(crate) inline_store: AtomicBool,
    /// Anti-entropy found this node in sync with a live peer at least once since start.
    pub(crate) synced_once: AtomicBool,
    /// The record this node gossips (kept to change `draining`).
    /// What this node gossips it can run, when it does (`MeshSetup::capabilities`).
    pub(crate) capabilities: Mutex<Option<super::capabilities::CapabilitiesRecord>>,
    pub(crate) record: Mutex<Option<NodeRecord>>,
    /// Peers' clock samples and the writes refused for clock skew.
    pub(crate) skew: ClockSkew,
    /// This agent's cell and every cell it knows.
    pub cells: crate::state::cells::CellState,
    /// Keys, trust and revocations: signs this node's writes, checks its peers'.
    pub authority: Arc<crate::identity::authority::Authority>,
    /// The membership as last read: re-read per node only when its chitchat keys moved. Shared
    /// with the host loop (`member_cache`): one cache per agent, not one per reader (each holds
    /// every member's facts twice, about 110 KB at 100 members).
    members: Arc<Mutex<view::MemberCache>>,
    /// Where an operator's drain is kept across restarts (`DATA_DIR/draining`), when on disk.
    drain_marker: std::sync::OnceLock<std::path::PathBuf>,
    /// The wire version this agent sends in (the mesh version), shared with its gossip transport
    /// and RPC client; moved by [`super::upgrade::run`].
    pub wire: Arc<std::sync::atomic::AtomicU16>,
    /// The highest mesh version this agent has seen recorded: it never moves back.
    pub(crate) mesh_version_seen: std::sync::atomic::AtomicU16,
    /// The member probes' verdicts (`verdicts.rs`), read by the membership.
    verdicts: Mutex<Arc<view::Verdicts>>,
    /// Notified when the probes declare a member dead or alive again, or when news from
    /// another cell moves a cell down or up ([`MeshNode::merge_cells`]): wakes the host loop.
    pub membership_moved: tokio::sync::Notify,
    /// Notified when news from another cell moved a cell down or up here
    /// ([`MeshNode::take_cells_moved`]): an envoy tells its members.
    pub cell_news: tokio::sync::Notify,
    /// The cells news moved down or up since the exchange last took them (at most
    /// `CELLS_MAX`).
    cells_moved: Mutex<Vec<String>>,
    /// What the probes counted and the verdict changes not yet taken as events.
    probes: Mutex<ProbeRecord>,
    /// The gate every task of this agent passes ([`MeshNode::spawn`]): closed only by the
    /// simulator, to freeze the agent.
    pub(crate) freeze: crate::transport::freeze::Freeze,
}

/// What the member probes report to the node: counters, local health, verdict changes.
#[derive(Default)]
pub struct ProbeRecord {
    /// The prober's counters.
    pub counters: shoal_core::verdict::ProbeCounters,
    /// Its local health score.
    pub health: u32,
    /// Probe frames that could not be decoded or encoded.
    pub frames_rejected: u64,
    /// Verdict changes not yet taken (bounded: the oldest go first).
    pub events: std::collections::VecDeque<shoal_core::verdict::VerdictEvent>,
    /// The latest deaths the probes declared, by name and generation, with the instant each was
    /// declared (bounded: the oldest go first). What the simulator's false-verdict checker
    /// judges a death at, rather than at the sample that first showed it.
    pub deaths: std::collections::VecDeque<(String, u64, tokio::time::Instant)>,
}

/// Verdict changes kept for the host loop at most.
const PROBE_EVENTS_MAX: usize = 256;
/// Declared deaths kept with their instants at most.
const PROBE_DEATHS_MAX: usize = 64;

impl MeshNode {
    /// A node over an open store, a running chitchat and an RPC client.
    pub fn new(
        name: String,
        store: DesiredStore,
        gossip: ChitchatHandle,
        rpc: Arc<dyn RpcClient>,
        clock: WallClock,
    ) -> Self {
        MeshNode {
            skew: ClockSkew::new(Default::default(), name.clone(), clock.clone(), rpc.clone()),
            cells: crate::state::cells::CellState::new(crate::state::cells::DEFAULT_CELL),
            authority: Arc::default(),
            name,
            store: Arc::new(Mutex::new(store)),
            gossip,
            rpc,
            clock,
            stale: AtomicBool::new(false),
            inline_store: AtomicBool::new(false),
            synced_once: AtomicBool::new(false),
            record: Mutex::new(None),
            capabilities: Mutex::new(None),
            members: Arc::default(),
            drain_marker: std::sync::OnceLock::new(),
            wire: super::upgrade::wire_cell(),
            mesh_version_seen: std::sync::atomic::AtomicU16::new(shoal_core::version::WIRE_MIN),
            verdicts: Mutex::new(Arc::default()),
            membership_moved: tokio::sync::Notify::new(),
            cell_news: tokio::sync::Notify::new(),
            cells_moved: Mutex::default(),
            probes: Mutex::default(),
            freeze: crate::transport::freeze::Freeze::none(),
        }
    }

    /// The member probes' verdicts in force.
    pub fn verdicts(&self) -> Arc<view::Verdicts> {
        self.verdicts.lock().expect("verdicts lock").clone()
    }

    /// Takes cell entries from `from` (an exchange, a probe's answer, a push). While a cell is
    /// stale, the news may move it down or up: the host loop is woken then, so that a lost
    /// cell's replicas start without waiting for its tick, and an envoy tells its members
    /// ([`MeshNode::take_cells_moved`]).
    pub fn merge_cells(
        &self,
        entries: Vec<shoal_core::cells::CellEntry>,
        from: &str,
    ) -> shoal_core::cells::MergeOutcome {
        let before = self.cells.any_stale().then(|| self.cells.up_cells());
        let outcome = self.cells.merge(entries, (self.clock)(), from);
        let Some(before) = before else {
            return outcome;
        };
        let after = self.cells.up_cells();
        if before != after {
            self.membership_moved.notify_one();
            let mut moved = self.cells_moved.lock().expect("cells moved lock");
            let went_down = before.iter().filter(|c| !after.contains(c));
            let came_up = after.iter().filter(|c| !before.contains(c));
            for cell in went_down.chain(came_up).cloned() {
                if !moved.contains(&cell) && moved.len() < shoal_core::cells::CELLS_MAX {
                    moved.push(cell);
                }
            }
            self.cell_news.notify_one();
        }
        outcome
    }

    /// The cells news moved down or up since the last call ([`MeshNode::merge_cells`]).
    pub fn take_cells_moved(&self) -> Vec<String> {
        std::mem::take(&mut *self.cells_moved.lock().expect("cells moved lock"))
    }

    /// Replaces the probes' verdicts; true when a member's aliveness changed with them.
    pub(crate) fn set_verdicts(&self, verdicts: view::Verdicts) -> bool {
        let mut current = self.verdicts.lock().expect("verdicts lock");
        if **current == verdicts {
            return false;
        }
        let moved = verdicts.alive_differs(&current);
        *current = Arc::new(verdicts);
        moved
    }

    /// The probes' counters, health and new verdict changes.
    pub(crate) fn record_probes(
        &self,
        counters: shoal_core::verdict::ProbeCounters,
        health: u32,
        events: &[shoal_core::verdict::VerdictEvent],
    ) {
        let mut record = self.probes.lock().expect("probes lock");
        record.counters = counters;
        record.health = health;
        let now = tokio::time::Instant::now();
        for e in events {
            if record.events.len() >= PROBE_EVENTS_MAX {
                record.events.pop_front();
            }
            record.events.push_back(e.clone());
            if e.kind == shoal_core::verdict::VerdictKind::Dead {
                if record.deaths.len() >= PROBE_DEATHS_MAX {
                    record.deaths.pop_front();
                }
                record.deaths.push_back((e.name.clone(), e.generation, now));
            }
        }
    }

    /// When the probes last declared `name` of `generation` dead, if among the latest deaths
    /// kept.
    pub fn death_declared_at(&self, name: &str, generation: u64) -> Option<tokio::time::Instant> {
        let record = self.probes.lock().expect("probes lock");
        (record.deaths.iter().rev())
            .find(|(n, g, _)| n == name && *g == generation)
            .map(|(_, _, at)| *at)
    }

    /// Counts a probe frame that could not be read or written.
    pub(crate) fn probe_rejected(&self) {
        self.probes.lock().expect("probes lock").frames_rejected += 1;
    }

    /// Takes the verdict changes not yet taken.
    pub fn take_probe_events(&self) -> Vec<shoal_core::verdict::VerdictEvent> {
        let mut record = self.probes.lock().expect("probes lock");
        record.events.drain(..).collect()
    }

    /// The probes' counters, local health and rejected frames now.
    pub fn probe_stats(&self) -> (shoal_core::verdict::ProbeCounters, u32, u64) {
        let record = self.probes.lock().expect("probes lock");
        (record.counters, record.health, record.frames_rejected)
    }

    /// The same node sending in the version `wire` holds (shared with its transport and RPC
    /// client), before it is shared.
    pub fn with_wire(mut self, wire: Arc<std::sync::atomic::AtomicU16>) -> Self {
        self.wire = wire;
        self
    }

    /// The same node with the freeze gate its tasks pass, before it is shared.
    pub fn with_freeze(mut self, freeze: crate::transport::freeze::Freeze) -> Self {
        self.freeze = freeze;
        self
    }

    /// Spawns a task of this agent: it makes no progress while the agent is frozen (the
    /// simulator's pause and starve), as no task of a stopped process does.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.freeze.spawn(task)
    }

    /// The same node in `cell` (checked by the caller), before it is shared.
    pub fn in_cell(mut self, cell: &str) -> Self {
        self.cells = crate::state::cells::CellState::new(cell);
        self
    }

    /// The same node with `authority`, before it is shared.
    pub fn with_authority(mut self, authority: Arc<crate::identity::authority::Authority>) -> Self {
        self.authority = authority;
        self
    }

    /// The record this node gossips.
    pub fn record(&self) -> Option<NodeRecord> {
        self.record.lock().expect("record lock").clone()
    }

    /// Whether the store was stale at start and has not resynchronized yet.
    pub fn is_stale(&self) -> bool {
        self.stale.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether anti-entropy found this node in sync with a live peer since start.
    pub fn synced_once(&self) -> bool {
        self.synced_once.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps an operator's drain in this file from now on (it exists while the node is drained).
    pub fn set_drain_marker(&self, path: std::path::PathBuf) {
        let _ = self.drain_marker.set(path);
    }

    /// Writes or removes the drain marker, when there is one: written to a temporary file and
    /// renamed, so a crash leaves either the old state or the new one.
    pub(crate) fn persist_draining(&self, draining: bool) -> std::io::Result<()> {
        let Some(path) = self.drain_marker.get() else {
            return Ok(());
        };
        if draining {
            let tmp = path.with_extension("tmp");
            std::fs::write(
                &tmp,
                b"drained by an operator (shoal drain); shoal undrain clears it\n",
            )?;
            std::fs::rename(&tmp, path)
        } else {
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        }
    }

    /// Gossips the fixed host ports something other than this node's replicas holds here, when
    /// they changed; false when the node gossips no capabilities.
    pub async fn set_ports_taken(&self, mut ports: Vec<shoal_core::placement::HostPort>) -> bool {
        ports.sort();
        ports.dedup();
        ports.truncate(super::capabilities::CAPABILITY_ITEMS_MAX);
        let text = {
            let mut caps = self.capabilities.lock().expect("capabilities lock");
            let Some(caps) = caps.as_mut() else {
                return false;
            };
            if caps.ports_taken == ports {
                return true;
            }
            caps.ports_taken = ports;
            caps.encode()
        };
        let chitchat = self.gossip.chitchat();
        chitchat
            .lock()
            .await
            .self_node_state()
            .set(super::capabilities::CAPABILITIES_KEY, &text);
        true
    }

    /// Sets this node's draining flag and gossips the changed record.
    pub async fn set_draining(&self, draining: bool) -> bool {
        let text = {
            let mut record = self.record.lock().expect("record lock");
            let Some(record) = record.as_mut() else {
                return false;
            };
            record.draining = draining;
            record.encode()
        };
        let chitchat = self.gossip.chitchat();
        chitchat
            .lock()
            .await
            .self_node_state()
            .set(super::record::NODE_KEY, &text);
        true
    }

    /// The gossip handle.
    pub fn gossip(&self) -> &ChitchatHandle {
        &self.gossip
    }

    /// Runs `f` on the store on a blocking thread (every write fsyncs).
    pub(crate) async fn with_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut DesiredStore) -> T + Send + 'static,
    ) -> T {
        let store = self.store.clone();
        if self.inline_store.load(std::sync::atomic::Ordering::Relaxed) {
            return f(&mut store.lock().expect("store lock"));
        }
        tokio::task::spawn_blocking(move || f(&mut store.lock().expect("store lock")))
            .await
            .expect("store task panicked")
    }

    /// The membership cache [`MeshNode::members`] refreshes, for the host loop to share.
    pub(crate) fn member_cache(&self) -> Arc<Mutex<view::MemberCache>> {
        self.members.clone()
    }

    /// The current membership (as [`view::members`] reads it, from a cache that re-reads a node
    /// only when its keys moved).
    pub async fn members(&self) -> Arc<[Member]> {
        let chitchat = self.gossip.chitchat();
        let guard = chitchat.lock().await;
        let verdicts = self.verdicts();
        let mut cache = self.members.lock().expect("members lock");
        cache.refresh(&guard, &verdicts);
        cache.members().clone()
    }

    /// Stores `specs` for `by`. `complete` names the (workload, version) pairs whose rollout this
    /// agent assessed complete last (the host's snapshot): a version replaced before the writer
    /// recorded its completion still goes to the history as complete.
    pub(crate) async fn handle_apply(
        self: Arc<Self>,
        specs: Vec<shoal_core::spec::WorkloadSpec>,
        by: String,
        complete: std::collections::BTreeSet<(String, String)>,
    ) -> Result<Response, ApiError> {
        if specs.is_empty() || specs.len() > APPLY_SPECS_MAX {
            let msg = format!(
                "apply takes 1 to {APPLY_SPECS_MAX} specs, got {}",
                specs.len()
            );
            return Err(ApiError::new(ErrorKind::Invalid, msg));
        }
        let mut problems = Vec::new();
        for spec in &specs {
            if let Err(e) = spec.validate() {
                problems.push(e.to_string());
            }
        }
        if !problems.is_empty() {
            return Err(ApiError::new(ErrorKind::Invalid, problems.join("\n")));
        }
        let members = self.members().await;
        self.skew.refuse_write_if_skewed("apply", &members)?;
        let clashes = self.fixed_port_clashes(&specs).await;
        let mut results = Vec::new();
        for (spec, clash) in specs.into_iter().zip(clashes) {
            let body = view::encode_spec(&spec);
            let now = (self.clock)();
            let name = spec.name.clone();
            let (authority, by) = (self.authority.clone(), by.clone());
            let complete = complete.clone();
            let outcome = self
                .with_store(move |s| {
                    let current = s.get(&name).filter(|e| !e.is_tombstone()).cloned();
                    if let Some(e) = &current {
                        if e.body.live() == Some(body.as_slice()) {
                            return Ok((e.clone(), false, None));
                        }
                    }
                    let seal = |e: &mut Entry| authority.seal(e, &by);
                    let written = s.apply_sealed(&name, body, now, seal)?;
                    // Then the replaced version joins the history. The spec is written first so
                    // that a refusal names the workload; a history write that fails (or a crash
                    // in between) loses that one past version, never the apply.
                    let history = current.and_then(|replaced| {
                        let assessed = (name.clone(), replaced.version.to_string());
                        let push = PushPast {
                            replaced: &replaced,
                            outcome: complete.contains(&assessed).then_some(Outcome::Complete),
                            reason: "",
                            by: &by,
                        };
                        push_history(s, &authority, &name, push, now)
                    });
                    Ok((written, true, history))
                })
                .await;
            // A failure after some specs were stored says which were: they stay stored.
            let stored_before = |mut e: ApiError, results: &[Applied]| {
                if !results.is_empty() {
                    let names: Vec<&str> = results.iter().map(|a| a.name.as_str()).collect();
                    e.message = format!(
                        "{} (already stored and kept, from this apply: {})",
                        e.message,
                        names.join(", ")
                    );
                }
                e
            };
            let (entry, changed, history) = outcome
                .map_err(|e| self.write_error(e))
                .map_err(|e| stored_before(e, &results))?;
            let note = history.as_ref().and_then(|(_, note)| note.clone());
            if let Some((history, _)) = history {
                // Anti-entropy carries it to whoever this misses; the apply waits for its spec.
                let node = self.clone();
                self.spawn(async move {
                    if let Err(e) = node.replicate(history, true).await {
                        tracing::debug!(error = %e.message, "history not yet durable elsewhere");
                    }
                });
            }
            let applied = self.clone().replicate(entry, changed).await;
            let mut applied = applied.map_err(|e| stored_before(e, &results))?;
            applied.note = note
                .into_iter()
                .chain(clash)
                .reduce(|a, b| format!("{a}; {b}"));
            results.push(applied);
        }
        Ok(Response::Applied(results))
    }

    /// For each spec of an apply, the host ports it fixes that another workload (stored, or in
    /// the same apply) fixes too, as one note (`None`: none).
    async fn fixed_port_clashes(
        &self,
        specs: &[shoal_core::spec::WorkloadSpec],
    ) -> Vec<Option<String>> {
        if specs.iter().all(|s| s.fixed_host_ports().is_empty()) {
            return vec![None; specs.len()];
        }
        let stored = self.with_store(|s| view::live_specs(s.list_live()).0).await;
        let apart = self.placement_algorithm() >= 8;
        specs
            .iter()
            .map(|spec| {
                let others = stored
                    .iter()
                    .map(|(s, _)| s)
                    .filter(|s| !specs.iter().any(|new| new.name == s.name))
                    .chain(specs);
                let lines = shoal_core::spec::fixed_port_clashes(spec, others, apart);
                (!lines.is_empty()).then(|| lines.join("; "))
            })
            .collect()
    }

    /// The mesh's capacity caps as this node's store holds them (a read of memory: the store's
    /// lock is held for a lookup).
    pub fn caps(&self) -> crate::identity::authority::caps::NodeCaps {
        use crate::identity::authority::caps::{NodeCaps, STORE_NAME};
        let store = self.store.lock().expect("store lock");
        NodeCaps::from_body(store.get(STORE_NAME).and_then(|e| e.body.live()))
    }

    /// Writes `body` under the reserved name `name` (one of the mesh's own entries), signed by
    /// this node on behalf of `by`, and replicates it. Checked by the caller.
    pub(crate) async fn store_reserved(
        self: Arc<Self>,
        name: impl Into<String>,
        der: Vec<u8>,
        by: String,
    ) -> Result<Applied, ApiError> {
        let name: String = name.into();
        debug_assert!(name.starts_with(RESERVED_PREFIX));
        let members = self.members().await;
        self.skew.refuse_write_if_skewed("write", &members)?;
        let now = (self.clock)();
        let authority = self.authority.clone();
        let outcome = self
            .with_store(move |s| {
                if let Some(e) = s.get(&name) {
                    if e.body.live() == Some(der.as_slice()) {
                        return Ok((e.clone(), false));
                    }
                }
                let seal = |e: &mut Entry| authority.seal(e, &by);
                s.apply_sealed(&name, der, now, seal).map(|e| (e, true))
            })
            .await;
        let (entry, changed) = outcome.map_err(|e| self.write_error(e))?;
        self.replicate(entry, changed).await
    }

    /// Tombstones the reserved entry `name` if it is live, signed on behalf of `by`, and
    /// replicates the tombstone; nothing when it is not live.
    pub(crate) async fn delete_reserved(
        self: Arc<Self>,
        name: String,
        by: String,
    ) -> Result<(), ApiError> {
        debug_assert!(name.starts_with(RESERVED_PREFIX));
        let members = self.members().await;
        self.skew.refuse_write_if_skewed("write", &members)?;
        let now = (self.clock)();
        let authority = self.authority.clone();
        let deleted = self
            .with_store(move |s| match s.get(&name) {
                Some(e) if !e.is_tombstone() => {
                    let seal = |e: &mut Entry| authority.seal(e, &by);
                    s.delete_sealed(&name, now, seal).map(Some)
                }
                _ => Ok(None),
            })
            .await
            .map_err(|e| self.write_error(e))?;
        if let Some(entry) = deleted {
            self.replicate(entry, true).await?;
        }
        Ok(())
    }

    pub(crate) async fn handle_delete(
        self: Arc<Self>,
        name: String,
        purge_data: bool,
        by: String,
    ) -> Result<Response, ApiError> {
        if name.starts_with(RESERVED_PREFIX) {
            return Err(ApiError::new(
                ErrorKind::Invalid,
                format!("{name:?} is the mesh's own entry, not a workload"),
            ));
        }
        let members = self.members().await;
        self.skew.refuse_write_if_skewed("delete", &members)?;
        let now = (self.clock)();
        let key = name.clone();
        let authority = self.authority.clone();
        let entry = self
            .with_store(move |s| match s.get(&key) {
                Some(e) if !e.is_tombstone() => {
                    let seal = |e: &mut Entry| authority.seal(e, &by);
                    let deleted = s.delete_sealed_with(&key, now, purge_data, seal)?;
                    // Its history, pause mark and rollout record go with it (replicated by
                    // anti-entropy).
                    let mut own_entries = vec![
                        history::store_name(&key),
                        history::paused_name(&key),
                        history::rollout_name(&key),
                    ];
                    // With its data, the records of where the data was (a plain delete keeps
                    // both: the workload applied again finds its data where it was).
                    if purge_data {
                        let prefix = super::data::workload_prefix(&key);
                        own_entries.extend(
                            s.core()
                                .iter()
                                .filter(|e| e.name.starts_with(&prefix))
                                .map(|e| e.name.clone()),
                        );
                    }
                    for own in own_entries {
                        if s.get(&own).is_some_and(|e| !e.is_tombstone()) {
                            let seal = |e: &mut Entry| authority.seal(e, &by);
                            s.delete_sealed(&own, now, seal)?;
                        }
                    }
                    Ok(Some(deleted))
                }
                _ => Ok(None),
            })
            .await
            .map_err(|e| self.write_error(e))?;
        let Some(entry) = entry else {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!("no workload named {name:?}"),
            ));
        };
        Ok(Response::Deleted(self.replicate(entry, true).await?))
    }

    /// Sends `entry` to up to [`REPLICATE_FANOUT`] live peers and returns once one confirms it is
    /// durable there (or at once when this node is alone). Slower confirmations finish in the
    /// background; anti-entropy covers peers that missed it.
    pub(super) async fn replicate(
        self: Arc<Self>,
        entry: Entry,
        changed: bool,
    ) -> Result<Applied, ApiError> {
        let members = self.members().await;
        let mut peers = view::live_peer_apis(&members, &self.name);
        // Spread the load: rotate the sorted peer list by the entry's name.
        if !peers.is_empty() {
            let shift = xxhash_rust::xxh3::xxh3_64(entry.name.as_bytes()) as usize % peers.len();
            peers.rotate_left(shift);
        }
        peers.truncate(REPLICATE_FANOUT);
        let mut applied = Applied {
            name: entry.name.clone(),
            version: entry.version.to_string(),
            durable_on: vec![self.name.clone()],
            changed,
            note: None,
        };
        if peers.is_empty() {
            return Ok(applied);
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel(peers.len());
        for (peer, addr) in peers {
            let (rpc, tx, entry) = (self.rpc.clone(), tx.clone(), entry.clone());
            self.spawn(async move {
                let req = Request::Replicate {
                    entries: vec![entry],
                };
                let answer: Result<Response, _> =
                    rpc::call_with(rpc.as_ref(), addr, &peer, &req, REPLICATE_TIMEOUT).await;
                let outcome = match answer {
                    Ok(Response::Replicated { newer, .. }) => match newer.into_iter().next() {
                        Some((_, version)) => PeerOutcome::Newer(version),
                        None => PeerOutcome::Durable,
                    },
                    Ok(Response::Error(e)) if e.kind == ErrorKind::ClockSkew => {
                        PeerOutcome::ClockSkew(e.message)
                    }
                    other => {
                        tracing::debug!(%peer, answer = ?other, "replicate failed");
                        PeerOutcome::Failed
                    }
                };
                let _ = tx.send((peer, outcome)).await;
            });
        }
        drop(tx);
        let mut skew_refusal = None;
        while let Some((peer, outcome)) = rx.recv().await {
            match outcome {
                PeerOutcome::Durable => {
                    applied.durable_on.push(peer);
                    return Ok(applied);
                }
                PeerOutcome::Newer(newer) => {
                    return Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!(
                            "{} (version {}) lost to a newer write of the same workload \
                             (version {}, seen on {peer}): a concurrent apply or a clock \
                             ahead of this agent's; run `shoal get {}` and apply again if \
                             yours should win",
                            applied.name,
                            format_version(&applied.version),
                            format_version(&newer),
                            applied.name
                        ),
                    ));
                }
                PeerOutcome::ClockSkew(why) => skew_refusal = Some((peer, why)),
                PeerOutcome::Failed => {}
            }
        }
        if let Some((peer, why)) = skew_refusal {
            self.skew.count(Refusal::NewerVersion);
            return Err(ApiError::new(
                ErrorKind::ClockSkew,
                format!(
                    "{} (version {}) is stored on {} but not acknowledged: {peer} refused it \
                     ({why}) and no other agent confirmed it. Fix the clocks (NTP) or send the \
                     command to another agent (--agent)",
                    applied.name,
                    format_version(&applied.version),
                    self.name
                ),
            ));
        }
        Err(ApiError::new(
            ErrorKind::NotDurable,
            format!(
                "{} (version {}) is stored on {} but no second agent confirmed it within {} s; \
                 it will spread by anti-entropy, run the command again to confirm",
                applied.name,
                format_version(&applied.version),
                self.name,
                REPLICATE_TIMEOUT.as_secs()
            ),
        ))
    }

    pub(crate) async fn handle_replicate(
        self: Arc<Self>,
        entries: Vec<Entry>,
        from: &str,
    ) -> Result<Response, ApiError> {
        if entries.len() > ENTRIES_PER_MESSAGE_MAX {
            return Err(ApiError::new(
                ErrorKind::Invalid,
                "too many entries in one message",
            ));
        }
        let sent = entries.len();
        let entries = self.authority.verified(entries, from);
        if entries.len() < sent {
            // Never acknowledge what was not stored.
            return Err(ApiError::new(
                ErrorKind::Invalid,
                format!(
                    "{} refused {} of {sent} entries: their proof of origin fails",
                    self.name,
                    sent - entries.len()
                ),
            ));
        }
        let now = (self.clock)();
        let sent: Vec<(String, shoal_core::hlc::Version)> = entries
            .iter()
            .map(|e| (e.name.clone(), e.version.clone()))
            .collect();
        let (outcome, newer) = self
            .with_store(move |s| {
                let outcome = s.merge_remote(entries, now)?;
                // Newer than the sent version: what this node holds, or a newer version it refused
                // as too far ahead of its clock (the mesh holds it; the sent write would lose).
                let newer: Vec<(String, String)> = sent
                    .iter()
                    .filter_map(|(name, version)| {
                        let known = s.core().newest_known(name, now)?;
                        (known > version).then(|| (name.clone(), known.to_string()))
                    })
                    .collect();
                Ok::<_, crate::state::store_db::StoreDbError>((outcome, newer))
            })
            .await
            .map_err(storage_error)?;
        if let Some((name, why)) = outcome.rejected.first() {
            // Never acknowledge what was not stored: the caller must not count this copy.
            tracing::warn!(%name, %why, "replicated entry refused");
            let kind = match why {
                shoal_core::store::Rejection::Clock(_) => ErrorKind::ClockSkew,
                _ => ErrorKind::Invalid,
            };
            return Err(ApiError::new(
                kind,
                format!("{} refused {name}: {why}", self.name),
            ));
        }
        Ok(Response::Replicated {
            changed: outcome.changed.len(),
            newer,
        })
    }
}

fn storage_error(e: crate::state::store_db::StoreDbError) -> ApiError {
    use crate::state::store_db::StoreDbError;
    use shoal_core::store::StoreError;
    match e {
        StoreDbError::Store(inner @ StoreError::NewerVersionRefused { .. }) => {
            ApiError::new(ErrorKind::ClockSkew, inner.to_string())
        }
        StoreDbError::Store(inner) => ApiError::new(ErrorKind::Invalid, inner.to_string()),
        other => ApiError::new(
            ErrorKind::Storage,
            format!("the agent's store refused the write, nothing was acknowledged: {other}"),
        ),
    }
}

/// What one peer answered to a replicate.
enum PeerOutcome {
    /// It holds the entry durably.
    Durable,
    /// It knows a newer version of the workload.
    Newer(String),
    /// It refused the entry as too far ahead of its clock.
    ClockSkew(String),
    /// No answer, or another error.
    Failed,
}

impl MeshNode {
    /// The API error for a failed local write, counting a clock-skew refusal.
    pub(super) fn write_error(&self, e: crate::state::store_db::StoreDbError) -> ApiError {
        let error = storage_error(e);
        if error.kind == ErrorKind::ClockSkew {
            self.skew.count(Refusal::NewerVersion);
        }
        error
    }
}

use shoal_core::rollout::Outcome;

/// A live spec an apply (or a rollback) replaced, to push in front of its history.
pub(super) struct PushPast<'a> {
    pub replaced: &'a Entry,
    /// What became of it; `None`: read from the rollout record (complete or failed if the record
    /// is about it, else superseded).
    pub outcome: Option<shoal_core::rollout::Outcome>,
    pub reason: &'a str,
    pub by: &'a str,
}

/// Writes the history of `name` with `push.replaced` in front. Returns the written entry (to
/// replicate) and, when the replaced version was an automatic rollback whose rollout had not
/// completed, the note that the newer write stops it. A history write that fails is logged:
/// that one past version is lost, never the write that replaced it.
pub(super) fn push_history(
    s: &mut DesiredStore,
    authority: &crate::identity::authority::Authority,
    name: &str,
    push: PushPast<'_>,
    now: u64,
) -> Option<(Entry, Option<String>)> {
    let key = history::store_name(name);
    let held = History::decode(s.get(&key).and_then(|e| e.body.live()));
    let record = history::decode_record(
        s.get(&history::rollout_name(name))
            .and_then(|e| e.body.live()),
    );
    let outcome = push
        .outcome
        .unwrap_or_else(|| history::outcome_of(push.replaced, record.as_ref()));
    let note = (held.current_is_rollback() && outcome != Outcome::Complete).then(|| {
        format!(
            "the automatic rollback of {name} (version {}) had not completed: this newer write \
             stops it",
            push.replaced.version
        )
    });
    let bytes_max = s.core().config().body_bytes_max;
    let past = held.pushed(push.replaced, outcome, push.reason, bytes_max);
    let seal = |e: &mut Entry| authority.seal(e, push.by);
    s.apply_sealed(&key, past.encode(), now, seal)
        .map_err(|e| tracing::warn!(error = %e, %key, "history not kept"))
        .ok()
        .map(|entry| (entry, note))
}
