//! Cells in the shell: an agent's cell (`shoal agent --cell NAME`) is its gossip domain (the
//! chitchat cluster id carries the cell's name, so agents of two cells never gossip with each
//! other), and what crosses cells is one summary per cell, held in a [`CellTable`]
//! (`shoal_core::cells`).
//!
//! - [`CellState`], a part of every [`MeshNode`](crate::state::mesh::node::MeshNode): the agent's cell,
//!   its table, and what its host loop last placed (for the summary's `free`).
//! - [`exchange::CellExchange`], a task over the node: every [`CELLS_INTERVAL`], the cell's
//!   **envoys** (its [`ENVOYS_PER_CELL`] live members ranked first by a hash of the cell and the
//!   member's name: no election) publish the cell's summary and exchange tables with envoys of
//!   other cells and of their own (push and pull, only what is newer); every other member pulls
//!   the table from one of its cell's envoys. Envoys also compare store digests across cells
//!   and pull what differs, so desired state reaches every cell.
//! - [`handoff`]: an instance whose replica moved to another cell stops once that cell says its
//!   copy serves (the exchange asks it each round).
//! - [`names`]: an agent asks every other cell once whether its name is in use there.
//!
//! A mesh of one cell (the default, `default`) sees no other cell in its table and places
//! exactly as before; the host loop uses two-level placement only once another cell is known.

pub mod handoff;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_core::cells::{
    Cell, CellEntry, CellHealth, CellRule, CellSummary, CellTable, Known, MergeOutcome,
    CELL_NAME_LEN_MAX,
};
use shoal_core::placement::{Placement, Workload};

/// The cell of an agent started without `--cell`.
pub const DEFAULT_CELL: &str = "default";
/// Live members of a cell that publish its summary and exchange tables with other cells.
pub const ENVOYS_PER_CELL: usize = 3;
/// Time between two rounds of the cell exchange.
pub const CELLS_INTERVAL: Duration = Duration::from_secs(1);
/// Longest wait for one call to another cell (a push, a question about copies, a forwarded
/// request).
pub const CELLS_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for a round's exchange pull: a peer that does not answer within it holds the
/// round up no longer (an answer is a few kilobytes; a slow peer is asked again next round).
pub const CELLS_EXCHANGE_TIMEOUT: Duration = Duration::from_secs(1);
/// Peers an envoy exchanges with per round.
pub const CELL_PEERS_PER_ROUND: usize = 2;
/// Longest wait for an envoy's probe of a stale cell's member (mesh version 14). A member frozen
/// or starved for less than this still answers in time: past it, a frozen cell cannot be told
/// from a lost one.
pub const CELL_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Most probes of stale cells' members an envoy sends in one round.
pub const CELL_PROBES_PER_ROUND_MAX: usize = 48;
/// While another cell is in question (stale, not yet held down), an envoy looks this often
/// between its rounds: it probes the cell at once instead of at its next round.
pub const CELLS_QUICK_INTERVAL: Duration = Duration::from_millis(250);
/// Most other cells an envoy pushes its summary to when its probes change what it holds up
/// (one contact each, the cells taken from a place of its own); the rest hear it by exchange.
pub const NEWS_CELLS_MAX: usize = 16;
/// Most members of its own cell an envoy pushes such news to.
pub const NEWS_MEMBERS_MAX: usize = 64;

/// How long from its start an agent of a mesh of cells holds its placement while its view of
/// the cells is incomplete ([`CellState::holds_placement`]), ms: a few exchange rounds. Past
/// it, it places over what it knows (its own cell alone, if no other answered).
pub const PLACEMENT_HOLD_MAX_MS: u64 = 5_000;

/// Checks that `name` can name a cell: a DNS label (1 to 63 of `a-z`, `0-9` and `-`, neither
/// first nor last a `-`).
pub fn check_cell_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= CELL_NAME_LEN_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    match ok {
        true => Ok(()),
        false => Err(format!(
            "cell name {name:?} is not a DNS label: 1 to {CELL_NAME_LEN_MAX} of a-z, 0-9 and \
             '-', not starting or ending with '-' (e.g. --cell eu-1)"
        )),
    }
}

/// The chitchat cluster id of `cell` in the cluster `cluster_id`: the cluster's own for the
/// default cell (a one-cell mesh gossips exactly as before), `CLUSTER/CELL` otherwise.
pub fn gossip_cluster_id(cluster_id: &str, cell: &str) -> String {
    match cell == DEFAULT_CELL {
        true => cluster_id.to_string(),
        false => format!("{cluster_id}/{cell}"),
    }
}

/// An envoy's addresses as its cell's summary lists them: `NAME@API@GOSSIP`.
pub fn contact_text(name: &str, api: SocketAddr, gossip: SocketAddr) -> String {
    format!("{name}@{api}@{gossip}")
}

/// How a summary lists a member that is not an envoy (a probe target for other cells' envoys,
/// mesh version 14): [`contact_text`] and `@member`. Builds before it read no contact from it
/// (their reader wants three parts), so they never take it for an envoy.
pub fn member_contact_text(name: &str, api: SocketAddr, gossip: SocketAddr) -> String {
    format!("{name}@{api}@{gossip}@{MEMBER_MARK}")
}

const MEMBER_MARK: &str = "member";

/// A contact read from a summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contact {
    /// The agent's name (its certificate's).
    pub name: String,
    /// Its API address.
    pub api: SocketAddr,
    /// Its gossip address.
    pub gossip: SocketAddr,
    /// An envoy of its cell (false: a member listed for other cells' probes).
    pub envoy: bool,
}

/// Reads a contact written by [`contact_text`] or [`member_contact_text`]; `None` for anything
/// else.
pub fn parse_contact(text: &str) -> Option<Contact> {
    let mut parts = text.split('@');
    let (name, api, gossip) = (parts.next()?, parts.next()?, parts.next()?);
    let envoy = match parts.next() {
        None => true,
        Some(MEMBER_MARK) => false,
        Some(_) => return None,
    };
    if parts.next().is_some() || name.is_empty() {
        return None;
    }
    Some(Contact {
        name: name.to_string(),
        api: api.parse().ok()?,
        gossip: gossip.parse().ok()?,
        envoy,
    })
}

/// Agents of other cells remembered per cell as having asked this agent's directory.
const ASKERS_PER_CELL_MAX: usize = 8;
/// Cells whose askers are remembered at most.
const ASKER_CELLS_MAX: usize = 64;
/// How long an asker is remembered, ms.
const ASKER_KEPT_MS: u64 = 10 * 60 * 1000;

/// What the host loop places over: the view of the cells it adopted (`None`: one level), a hash
/// of it, and whether it holds its placement ([`CellState::holds_placement`]). The simulator's
/// checker judges each agent by it.
#[derive(Clone, Debug, Default)]
pub struct Adopted {
    /// The view adopted (`None`: one level, no other cell).
    pub cells: Option<Arc<Vec<Cell>>>,
    /// A hash of `cells` (`None` with it): equal views, equal keys.
    pub key: Option<u64>,
    /// It places nothing now.
    pub held: bool,
}

impl Adopted {
    /// `cells` adopted, held or not.
    pub fn new(cells: Option<Arc<Vec<Cell>>>, held: bool) -> Adopted {
        use std::hash::{Hash, Hasher};
        let key = cells.as_ref().map(|c| {
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            c.hash(&mut h);
            h.finish()
        });
        Adopted { cells, key, held }
    }
}

/// What the host loop placed last, for the summary's `free`.
#[derive(Clone, Default)]
pub struct LocalPlacement {
    /// The node-level placement of this agent's cell.
    pub placement: Arc<Placement>,
    /// The workloads it placed.
    pub workloads: Arc<Vec<Workload>>,
}

pub use crate::wire::cells::CellView;

/// One agent's cells: its own and the table of every cell it knows.
pub struct CellState {
    own: String,
    table: Mutex<CellTable>,
    mono_start: tokio::time::Instant,
    local: Mutex<LocalPlacement>,
    /// What the host loop places over now.
    adopted: Mutex<Adopted>,
    /// API addresses given with `--cell-seed` (or learned from a seed's directory), asked
    /// until another cell is known.
    seeds: Mutex<Vec<SocketAddr>>,
    /// What this agent runs that moved to other cells, and whether those cells serve it; what
    /// they said of the exclusive replicas placed on it.
    pub handoffs: handoff::Handoffs,
    /// The count of cells known when this agent's cell last held its quorum of cells (saved in
    /// the store, restored at start; 0: never).
    known_floor: std::sync::atomic::AtomicUsize,
    /// Gossip addresses of agents that asked this agent's directory lately, by cell, with when.
    askers: Mutex<std::collections::BTreeMap<String, Vec<(SocketAddr, u64)>>>,
    /// A new agent of a named cell that joined through seeds and has not had an answer to a
    /// cell exchange yet: it cannot tell a mesh of one cell from one whose other cells it has
    /// not heard of, so its view of the cells is incomplete until then.
    awaiting_table: std::sync::atomic::AtomicBool,
}

impl CellState {
    /// The state of an agent of `cell` (checked by the caller), knowing no cell yet.
    pub fn new(cell: &str) -> CellState {
        CellState {
            own: cell.to_string(),
            table: Mutex::new(CellTable::new(cell)),
            mono_start: tokio::time::Instant::now(),
            local: Mutex::new(LocalPlacement::default()),
            adopted: Mutex::default(),
            seeds: Mutex::new(Vec::new()),
            handoffs: handoff::Handoffs::default(),
            known_floor: std::sync::atomic::AtomicUsize::new(0),
            askers: Mutex::default(),
            awaiting_table: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// This agent joins through seeds: in a named cell, its view of the cells is incomplete
    /// until a cell exchange is answered ([`CellState::table_pulled`]).
    pub fn joins_through_seeds(&self) {
        let named = self.own != DEFAULT_CELL;
        self.awaiting_table
            .store(named, std::sync::atomic::Ordering::Relaxed);
    }

    /// Why this agent does not place yet, if it does not: in its first
    /// [`PLACEMENT_HOLD_MAX_MS`], while it knows it is in a mesh of cells (it was given cell
    /// seeds, or knows another cell) but cannot place over them: it has not pulled the cells'
    /// table, or its own cell or every other is missing from it. Placing then would put every
    /// replica of the mesh on its own cell's members, and start copies of replicas that run in
    /// other cells, only to hand them back a round later.
    pub fn holds_placement(&self) -> Option<String> {
        if self.mono_ms() >= PLACEMENT_HOLD_MAX_MS {
            return None;
        }
        if self
            .awaiting_table
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Some(format!(
                "this agent of cell {} has not pulled the cells' table yet",
                self.own
            ));
        }
        let seeded = !self.seeds.lock().expect("cells lock").is_empty();
        let table = self.table.lock().expect("cells lock");
        let mesh_of_cells = seeded || table.len() > 1 || self.known_floor() > 1;
        (mesh_of_cells && !table.places_cells()).then(|| {
            format!(
                "this agent of cell {} is in a mesh of cells whose table lacks its own cell or \
                 every other yet",
                self.own
            )
        })
    }

    /// A cell exchange was answered: this agent holds the cells' table as another agent does.
    pub fn table_pulled(&self) {
        self.awaiting_table
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Adds a seed's API address (learned from its directory), at most 16 kept.
    pub fn add_seed(&self, api: SocketAddr) {
        let mut seeds = self.seeds.lock().expect("cells lock");
        if !seeds.contains(&api) && seeds.len() < 16 {
            seeds.push(api);
        }
    }

    /// Remembers an agent of `cell` that asked this agent's directory (bounded per cell and in
    /// cells; the oldest go first).
    pub fn note_asker(&self, cell: &str, gossip: SocketAddr) {
        let now = self.mono_ms();
        let mut askers = self.askers.lock().expect("cells lock");
        askers.retain(|_, list| {
            list.retain(|(_, at)| now.saturating_sub(*at) < ASKER_KEPT_MS);
            !list.is_empty()
        });
        if !askers.contains_key(cell) && askers.len() >= ASKER_CELLS_MAX {
            return;
        }
        let list = askers.entry(cell.to_string()).or_default();
        list.retain(|(addr, _)| *addr != gossip);
        if list.len() >= ASKERS_PER_CELL_MAX {
            list.remove(0);
        }
        list.push((gossip, now));
    }

    /// Gossip addresses of agents of `cell` this agent knows from its directory and its table.
    pub fn gossip_addrs_of(&self, cell: &str) -> Vec<SocketAddr> {
        let mut addrs: Vec<SocketAddr> = self
            .askers
            .lock()
            .expect("cells lock")
            .get(cell)
            .map(|l| l.iter().rev().map(|(a, _)| *a).collect())
            .unwrap_or_default();
        if let Some(summary) = self.summary(cell) {
            addrs.extend(
                summary
                    .contacts
                    .iter()
                    .filter_map(|c| parse_contact(c))
                    .map(|c| c.gossip),
            );
        }
        addrs.dedup();
        addrs
    }

    /// This agent's cell.
    pub fn own(&self) -> &str {
        &self.own
    }

    /// Milliseconds since this state was made, on the (tokio, so pausable) monotonic clock.
    pub fn mono_ms(&self) -> u64 {
        self.mono_start.elapsed().as_millis() as u64
    }

    /// API addresses of agents of other cells to ask first.
    pub fn set_seeds(&self, seeds: Vec<SocketAddr>) {
        *self.seeds.lock().expect("cells lock") = seeds;
    }

    pub(crate) fn seeds(&self) -> Vec<SocketAddr> {
        self.seeds.lock().expect("cells lock").clone()
    }

    /// Whether the table holds a cell other than this agent's: the mesh places in two levels.
    pub fn multi(&self) -> bool {
        let table = self.table.lock().expect("cells lock");
        table.len() > 1 || (table.len() == 1 && table.summary(&self.own).is_none())
    }

    /// The cells to place over, by name, with their down flags, when the mesh has more than one
    /// and this agent's own is among them (its envoys published it); `None` otherwise.
    pub fn placement_cells(&self) -> Option<Vec<Cell>> {
        let now = self.mono_ms();
        let mut table = self.table.lock().expect("cells lock");
        let downs = table.latch_downs(now);
        table
            .places_cells()
            .then(|| table.placement_cells_from(&downs))
    }

    /// [`CellState::placement_cells`] when it may differ from what it was at `stamp`, which is
    /// brought to now; `None` when it cannot have moved (no summary copied: the host round asks
    /// every round).
    pub fn placement_cells_since(
        &self,
        stamp: &mut shoal_core::cells::PlacementStamp,
    ) -> Option<Option<Vec<Cell>>> {
        let now = self.mono_ms();
        let mut table = self.table.lock().expect("cells lock");
        let downs = table.latch_downs(now);
        let current = table.placement_stamp_from(downs.clone());
        if current == *stamp {
            return None;
        }
        *stamp = current;
        Some(
            table
                .places_cells()
                .then(|| table.placement_cells_from(&downs)),
        )
    }

    /// Whether this agent is in a mesh of cells for the exclusive rules: it knows another cell,
    /// or its cell knew others before (a saved count above one), or it was given cell seeds.
    pub fn is_mesh_of_cells(&self) -> bool {
        self.multi() || self.known_floor() > 1 || !self.seeds.lock().expect("cells lock").is_empty()
    }

    /// This agent's cell's quorum of cells (`None` outside a mesh of cells). Given cell seeds
    /// but knowing no other cell yet, it counts at least two cells known: no quorum until it
    /// learns them.
    ///
    /// A new agent of a named cell that has not had a cell exchange answered yet has no quorum
    /// (its view is incomplete): it may be in a mesh of cells it has not heard of, where a
    /// single-cell rule could start an exclusive replica that another cell runs.
    pub fn quorum(&self) -> Option<shoal_core::reconcile::CellQuorum> {
        if self
            .awaiting_table
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            let why = format!(
                "this agent of cell {} has not pulled the cells' table from another agent yet",
                self.own
            );
            return Some(shoal_core::reconcile::CellQuorum {
                known: self.held().max(2),
                with_us: 1,
                incomplete: Some(why),
                newest_down_ms: None,
            });
        }
        if !self.is_mesh_of_cells() {
            return None;
        }
        let now = self.mono_ms();
        let seeded = !self.seeds.lock().expect("cells lock").is_empty();
        let floor = self.known_floor().max(if seeded { 2 } else { 0 });
        Some(self.table.lock().expect("cells lock").quorum(now, floor))
    }

    /// Sets what this cell's members' records add up to: a summary of this cell from a peer
    /// that claims more is refused and counted.
    pub fn set_own_bound(&self, bound: shoal_core::cells::OwnBound) {
        self.table.lock().expect("cells lock").set_own_bound(bound);
    }

    /// The cells held, this agent's own counted.
    pub fn held(&self) -> usize {
        self.table.lock().expect("cells lock").held()
    }

    /// The other cells held up now, by name.
    pub fn up_cells(&self) -> Vec<String> {
        let now = self.mono_ms();
        let mut table = self.table.lock().expect("cells lock");
        table.latch(now);
        table.up_cells(now)
    }

    /// Every cell held, with its standing now, by name (what the cell events compare).
    pub fn healths(&self) -> Vec<(String, CellHealth)> {
        let now = self.mono_ms();
        let mut table = self.table.lock().expect("cells lock");
        table.latch(now);
        table.healths(now)
    }

    /// The rule in force.
    pub fn rule(&self) -> CellRule {
        self.table.lock().expect("cells lock").rule()
    }

    /// Sets the rule that says a cell is down (from the mesh version).
    pub fn set_rule(&self, rule: CellRule) {
        self.table.lock().expect("cells lock").set_rule(rule);
    }

    /// What this agent, as an envoy, publishes as the cells its cell holds up.
    pub fn sees(&self) -> Vec<String> {
        let now = self.mono_ms();
        self.table.lock().expect("cells lock").sees(now)
    }

    /// The stale cells to probe now, each with at most `per_cell` of its contacts.
    pub fn to_probe(&self, per_cell: usize) -> Vec<(String, Vec<String>)> {
        let now = self.mono_ms();
        self.table
            .lock()
            .expect("cells lock")
            .to_probe(now, per_cell)
    }

    /// Whether another cell is in question (stale, not yet held down): the exchange then
    /// probes and pulls between rounds (`CellTable::in_question`).
    pub fn in_question(&self) -> bool {
        let now = self.mono_ms();
        self.table.lock().expect("cells lock").in_question(now)
    }

    /// Whether another cell is stale (`CellTable::any_stale`).
    pub fn any_stale(&self) -> bool {
        let now = self.mono_ms();
        self.table.lock().expect("cells lock").any_stale(now)
    }

    /// `cell`'s entry as held, summary included.
    pub fn entry(&self, cell: &str) -> Option<shoal_core::cells::CellEntry> {
        let now = self.mono_ms();
        self.table.lock().expect("cells lock").entry(cell, now)
    }

    /// Whether this agent's own probes call `cell` unreached.
    pub fn unreached(&self, cell: &str) -> bool {
        let now = self.mono_ms();
        self.table.lock().expect("cells lock").unreached(cell, now)
    }

    /// Records a probe of `contact` of `cell`: answered or failed.
    pub fn probed(&self, cell: &str, contact: &str, answered: bool) {
        let now = self.mono_ms();
        self.table
            .lock()
            .expect("cells lock")
            .probed(cell, contact, answered, now);
    }

    /// The saved count of cells known at the last quorum.
    pub fn known_floor(&self) -> usize {
        self.known_floor.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets the count of cells known at the last quorum (restored from the store at start, then
    /// each time the quorum holds with another count).
    pub fn set_known_floor(&self, cells: usize) {
        self.known_floor
            .store(cells, std::sync::atomic::Ordering::Relaxed);
    }

    /// The names of the cells held, in order (no summary copied, no cell judged).
    pub fn names(&self) -> Vec<String> {
        let table = self.table.lock().expect("cells lock");
        table.names().cloned().collect()
    }

    /// Every cell held, by name.
    pub fn list(&self) -> Vec<CellView> {
        let now = self.mono_ms();
        let mut table = self.table.lock().expect("cells lock");
        table.latch(now);
        table
            .list(now)
            .into_iter()
            .map(|(summary, health, heard)| CellView {
                own: summary.cell == self.own,
                summary: summary.clone(),
                down: health == CellHealth::Down,
                degraded: Some(health == CellHealth::Degraded),
                heard_ms_ago: heard,
            })
            .collect()
    }

    /// The summary held for `cell`.
    pub fn summary(&self, cell: &str) -> Option<CellSummary> {
        let table = self.table.lock().expect("cells lock");
        table.summary(cell).cloned()
    }

    /// Entries refused since start.
    pub fn refused_total(&self) -> u64 {
        self.table.lock().expect("cells lock").refused_total()
    }

    /// What the host loop places over now.
    pub fn set_adopted(&self, adopted: Adopted) {
        *self.adopted.lock().expect("cells lock") = adopted;
    }

    /// What the host loop places over now (one level, not held, before its first round).
    pub fn adopted(&self) -> Adopted {
        self.adopted.lock().expect("cells lock").clone()
    }

    /// The host loop's last placement of this cell.
    pub fn set_local(&self, local: LocalPlacement) {
        *self.local.lock().expect("cells lock") = local;
    }

    pub(crate) fn local(&self) -> LocalPlacement {
        self.local.lock().expect("cells lock").clone()
    }

    /// What this agent, as an envoy, publishes now (`CellTable::summarize_own`: hysteresis
    /// against the cell's summary as held, `own_last` only before one is held), from its cell's
    /// members (`nodes`), its `contacts` and the host loop's last placement.
    pub(crate) fn summarize_own(
        &self,
        contacts: &[String],
        nodes: &[shoal_core::placement::Node],
        own_last: Option<&CellSummary>,
    ) -> CellSummary {
        let local = self.local();
        let now = self.mono_ms();
        self.table.lock().expect("cells lock").summarize_own(
            contacts,
            nodes,
            (&local.placement, &local.workloads),
            own_last,
            now,
        )
    }

    pub(crate) fn publish(&self, summary: CellSummary, now_wall: u64) {
        let now = self.mono_ms();
        let mut table = self.table.lock().expect("cells lock");
        table.publish(summary, now_wall, now);
        table.forget_old(now);
    }

    /// What this agent holds, for a peer.
    pub fn known(&self) -> Vec<Known> {
        self.table.lock().expect("cells lock").known()
    }

    /// What a peer holding `known` lacks.
    pub fn newer_than(&self, known: &[Known]) -> Vec<CellEntry> {
        let now = self.mono_ms();
        self.table
            .lock()
            .expect("cells lock")
            .newer_than(known, now)
    }

    /// Takes what a peer sent; logs what was refused (the table counts it).
    pub fn merge(&self, entries: Vec<CellEntry>, now_wall: u64, from: &str) -> MergeOutcome {
        let now = self.mono_ms();
        let outcome = self
            .table
            .lock()
            .expect("cells lock")
            .merge(entries, now, now_wall);
        for (cell, why) in &outcome.refused {
            tracing::warn!(%from, %cell, ?why, "cell entry refused");
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_agent_of_a_named_cell_has_no_quorum_until_it_pulls_the_table() {
        let cells = CellState::new("c2");
        assert_eq!(
            cells.quorum(),
            None,
            "the first agent of a mesh: nothing to pull"
        );
        cells.joins_through_seeds();
        let q = cells
            .quorum()
            .expect("a quorum that says why it does not hold");
        assert!(!q.holds(), "{q:?}");
        assert!(
            q.why_not()
                .is_some_and(|w| w.contains("has not pulled the cells' table")),
            "{q:?}"
        );
        cells.table_pulled();
        // Its exchange answered with no other cell: a mesh of one (named) cell, as before.
        assert_eq!(cells.quorum(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_agent_of_a_mesh_of_cells_holds_its_placement_until_it_can_place_over_them() {
        // The first agent of a mesh, with no cell seeds: nothing to wait for.
        let first = CellState::new("c1");
        assert_eq!(first.holds_placement(), None);
        // An agent of a named cell that joined through seeds: until its exchange is answered.
        let cells = CellState::new("c2");
        cells.joins_through_seeds();
        let why = cells
            .holds_placement()
            .expect("held before the table is pulled");
        assert!(why.contains("has not pulled the cells' table"), "{why}");
        cells.table_pulled();
        assert_eq!(cells.holds_placement(), None, "a mesh of one named cell");
        // Given cell seeds, it knows it is in a mesh of cells: held while no other cell is
        // known, then placed over its own cell once the bound has passed.
        cells.set_seeds(vec!["10.0.0.1:7001".parse().unwrap()]);
        let why = cells
            .holds_placement()
            .expect("held while no other cell is known");
        assert!(why.contains("in a mesh of cells"), "{why}");
        tokio::time::advance(std::time::Duration::from_millis(PLACEMENT_HOLD_MAX_MS - 1)).await;
        assert!(cells.holds_placement().is_some(), "still within the bound");
        tokio::time::advance(std::time::Duration::from_millis(1)).await;
        assert_eq!(
            cells.holds_placement(),
            None,
            "held no longer than the bound"
        );
    }

    #[test]
    fn an_agent_of_the_default_cell_joining_through_seeds_keeps_the_single_cell_rules() {
        let cells = CellState::new(DEFAULT_CELL);
        cells.joins_through_seeds();
        assert_eq!(cells.quorum(), None);
    }
}
