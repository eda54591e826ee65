//! [`CellTable`]: what one agent knows of every cell of the mesh, merged from what envoys
//! exchange. Pure: time arrives as arguments (`now_mono` for freshness, `now_wall` only to refuse
//! stamps from the future), and the shell moves the bytes.
//!
//! Each cell's envoys publish its summary with a **stamp** (the publishing envoy's wall clock, ms)
//! and a **version** (a hash of the summary's content, so two envoys of one cell publishing the
//! same content publish the same version, and a receiver already holding it is not sent the body
//! again). A higher stamp replaces a lower one. A cell whose stamp has not grown for
//! [`CELL_DOWN_MS`] of this agent's monotonic time is **down** (its envoys failed or are cut
//! off); this agent's own cell never is. Entries relay an **age** (how long ago the relaying agent
//! heard the stamp first), so an agent that learns of a cell second-hand does not think it fresher
//! than it is.
//!
//! Nothing received can make the table panic or grow without bound: at most [`CELLS_MAX`] cells,
//! every summary validated ([`CellSummary::validate`]), a version that does not match its content,
//! a stamp from the future or a body for another cell refused and counted.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::intern::intern;
use super::model::Cell;
use super::publish::summarize;
use super::quorum::CellQuorum;
use super::summary::CellSummary;
use crate::placement::model::{Node, Placement, Workload};
use crate::resources::Resources;

/// Most cells a table holds; more are refused and counted.
pub const CELLS_MAX: usize = 1024;
/// A cell whose stamp has not grown for this long (monotonic ms) is down under the stamp rule
/// ([`CellRule::Stamp`]); under the evidence rule it is the bound past which a stale cell no
/// longer counts toward a quorum of cells, whatever its members answer.
pub const CELL_DOWN_MS: u64 = 8_000;
/// Under the evidence rule ([`CellRule::Evidence`]), a cell whose stamp has not grown for this
/// long is **stale**: the envoys of other cells probe its members (a probe is a cell exchange
/// call, so a member's answer also brings the cell's newest stamp it holds), and it may be held
/// down on their evidence. A healthy cell's stamp reaches an envoy in a round or two and a probe
/// refreshes it, so this bounds how stale a healthy cell gets at an envoy.
pub const CELL_STALE_MS: u64 = 2_500;
/// Under the evidence rule, a cell whose stamp has not grown for this long is already probed
/// by the envoys of other cells, before it is stale: a failed probe counts toward
/// [`CellTable::unreached`] only once the cell is stale, so the evidence is in when it becomes
/// stale instead of a quick look and a probe timeout (1.25 s) later; an answer brings the
/// cell's newest stamp its member holds, so a healthy cell whose stamps are only slow is
/// refreshed by it. Below the stale bound by a quick look (250 ms) and a probe timeout (1 s),
/// less a quarter second: probes of late but healthy cells are the cost.
pub const CELL_PROBE_MS: u64 = 1_500;
/// Under the evidence rule, a cell stale this long and not down is **degraded**: its members
/// answer probes (or too few observers say they do not), but even their answers bring no fresh
/// stamp: its envoys are starved or cut off. Past the stale bound plus a probe and two rounds,
/// so that a healthy cell whose stamps cross the mesh slowly, refreshed by a probe, never shows
/// degraded.
pub const CELL_DEGRADED_MS: u64 = 6_000;
/// Members of a stale cell whose probes must all have failed (and none answered) before this
/// agent calls the cell unreached: several, not only its envoys (fewer when it lists fewer).
pub const CELL_PROBED_MIN: usize = 3;
/// Observer cells (up here, this agent's own included) that must call a stale cell unreached
/// before it is down: a single starved or cut-off observer cannot take a cell down for the
/// others (fewer when fewer observers are up).
pub const CELL_DOWN_OBSERVERS: usize = 2;
/// A cell down this long is forgotten (its replicas stop waiting for it).
pub const CELL_FORGET_MS: u64 = 60 * 60 * 1000;
/// A stamp further ahead of this agent's wall clock than this is refused (a clock that far off is
/// an issue of its own; a stamp at `u64::MAX` would otherwise pin a cell up forever).
pub const STAMP_AHEAD_MAX_MS: u64 = 60_000;

/// One cell as exchanged between agents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellEntry {
    /// The cell.
    pub cell: String,
    /// [`content_version`] of the summary.
    pub version: u64,
    /// The publishing envoy's wall clock when it published, ms.
    pub stamp: u64,
    /// How long ago (ms) the sender first held this stamp.
    pub age_ms: u64,
    /// The summary, left out when the receiver already holds this version.
    pub summary: Option<CellSummary>,
}

/// What an agent holds of one cell, as it tells a peer (so the peer sends only what is newer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Known {
    /// The cell.
    pub cell: String,
    /// The version held.
    pub version: u64,
    /// The stamp held.
    pub stamp: u64,
}

/// Why a received entry was not taken.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EntryRefusal {
    /// The summary failed [`CellSummary::validate`].
    Invalid(String),
    /// The summary names another cell than the entry.
    WrongCell,
    /// The version is not the hash of the summary's content.
    VersionMismatch,
    /// The stamp is more than [`STAMP_AHEAD_MAX_MS`] ahead of this agent's clock.
    FromTheFuture,
    /// A newer stamp of a version this agent does not hold, without its body.
    MissingBody,
    /// The table already holds [`CELLS_MAX`] cells.
    TableFull,
    /// A summary of this agent's own cell that claims more members or capacity than the
    /// members' records add up to.
    OwnCellOverclaimed(String),
}

/// What [`CellTable::merge`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeOutcome {
    /// Cells whose entry changed (a newer stamp or content).
    pub updated: Vec<String>,
    /// Entries refused, with why.
    pub refused: Vec<(String, EntryRefusal)>,
}

/// Which rule says a cell is down: the mesh version decides, since every agent must place
/// alike (docs/ARCHITECTURE.md, "Cells").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CellRule {
    /// Below mesh version 14: a cell is down when its stamp has not grown for
    /// [`CELL_DOWN_MS`]; never degraded.
    #[default]
    Stamp,
    /// Mesh version 14 and later: a cell stale for [`CELL_STALE_MS`] is probed, and `down` only
    /// when [`CELL_DOWN_OBSERVERS`] observer cells (this agent's own included) say their
    /// envoys' probes of [`CELL_PROBED_MIN`] of its members all failed; stale for
    /// [`CELL_DEGRADED_MS`] and not down, it is `degraded`.
    Evidence,
}

/// A cell's standing in one agent's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellHealth {
    /// Heard from lately, or stale for less than [`CELL_DEGRADED_MS`] and not shown lost.
    Up,
    /// Stale for over [`CELL_DEGRADED_MS`], but not shown lost: its members answer, or too few
    /// observers say they do not. It keeps its replicas.
    Degraded,
    /// Lost: its replicas go to the cells ranked next.
    Down,
}

impl CellHealth {
    /// How `shoal nodes` and the metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            CellHealth::Up => "up",
            CellHealth::Degraded => "degraded",
            CellHealth::Down => "down",
        }
    }
}

/// What this agent's own probes of one cell's members found since the cell went stale.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Probes {
    /// When a member last answered (monotonic ms).
    answered_mono: Option<u64>,
    /// Contacts whose probe failed since the stamp last grew or a member last answered.
    failed: std::collections::BTreeSet<String>,
    /// When this agent last probed the cell.
    probed_mono: Option<u64>,
}

/// How often an envoy probes again a cell it already calls unreached, ms: one of its contacts
/// in turn, whether its members answer again (a healed partition: exchanges with an unreached
/// cell stop, so this is how the two sides find each other again before the silence bound).
pub const CELL_REPROBE_MS: u64 = 1_000;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    /// This agent's own probes of the cell's members (not exchanged).
    probes: Probes,
    /// Held down on evidence at some [`CellTable::latch`] since the stamp last grew: it stays
    /// down until the stamp grows (evidence that changes back and forth, as a cell's envoys'
    /// summaries do while a restarted cell's members start answering one envoy's probes before
    /// another's, does not move its replicas back and forth).
    latched: bool,
    /// Shared with every equal summary held in this process ([`intern`]).
    summary: Arc<CellSummary>,
    /// [`for_placement`] of `summary`, kept: the cell level reads it at every change of any
    /// cell, and copying the whole summary to clear most of it (`sees` names every cell) was a
    /// tenth of the simulator's time at 5,000 agents.
    placed: Arc<CellSummary>,
    /// [`placement_hash`] of `placed`.
    ranked: u64,
    version: u64,
    stamp: u64,
    /// When this agent first held `stamp` (or heard of it, back-dated by the relayed age).
    heard_mono: u64,
    /// The first cell `summary.sees` holds up that this table does not know (`first_unknown`),
    /// once asked: [`CellTable::quorum`] reads it every host round, and working it out is a walk
    /// of two lists of every cell. Empty again whenever the summary's `sees`, or the set of cells
    /// held, changes.
    unknown: std::sync::OnceLock<Option<String>>,
}

impl Held {
    /// Whether this agent's probes of at least [`CELL_PROBED_MIN`] of the cell's contacts (all
    /// of them when it lists fewer) failed. An answer clears the failures, so those held all
    /// came after the last answer.
    fn failed_enough(&self) -> bool {
        let listed = self.summary.contacts.len();
        self.probes.failed.len() >= CELL_PROBED_MIN.min(listed).max(1)
    }
}

/// What of a summary the cell level reads: its ranked figures (`version`, `free`, `contacts`
/// and `sees` cleared: placement never reads them, and clearing them keeps the cell level from
/// being redone when only they change). Of `members` it reads only whether there is one
/// (`Cell::usable`): kept as 0 or 1, so that a member joining or leaving a cell, which the
/// ranked figures' hysteresis absorbs, does not make every agent of the mesh place every
/// replica again (at 5,000 agents in 50 cells, a third of the simulator's time went there).
fn for_placement(summary: &CellSummary) -> CellSummary {
    // Every field named: a field added to summaries must be placed or cleared here.
    let CellSummary {
        cell,
        version: _,
        members,
        capacity,
        largest,
        free: _,
        zones,
        labels,
        contacts: _,
        sees: _,
    } = summary;
    CellSummary {
        cell: cell.clone(),
        version: 0,
        members: (*members).min(1),
        capacity: *capacity,
        largest: *largest,
        free: Default::default(),
        zones: zones.clone(),
        labels: labels.clone(),
        contacts: Vec::new(),
        sees: Vec::new(),
    }
}

/// A hash of a summary [`for_placement`] made.
fn placement_hash(placed: &CellSummary) -> u64 {
    let bytes = serde_json::to_vec(placed).expect("a summary always serializes");
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// The version of a summary: a hash of its content with `version` set to 0.
pub fn content_version(summary: &CellSummary) -> u64 {
    content_version_of(&mut summary.clone())
}

/// [`content_version`] of a summary this caller owns, without copying it: its `version` is
/// cleared for the hash and put back (a merge checks every summary it receives: copying each
/// was most of what merging cost the simulator at 5,000 agents).
fn content_version_of(summary: &mut CellSummary) -> u64 {
    let claimed = std::mem::take(&mut summary.version);
    let bytes = serde_json::to_vec(&*summary).expect("a summary always serializes");
    summary.version = claimed;
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// One agent's table of cells.
#[derive(Clone, Debug, Default)]
pub struct CellTable {
    own: String,
    cells: BTreeMap<String, Held>,
    refused_total: u64,
    /// What this agent's own cell can offer at most, from its members' records (every known
    /// member, live or not): a summary of the own cell from a peer that claims more is refused.
    own_bound: Option<OwnBound>,
    /// Which rule says a cell is down.
    rule: CellRule,
    /// Grows whenever [`CellTable::placement_cells`] may return other summaries: a cell held
    /// or forgotten, or a summary whose placed figures ([`for_placement`]) changed. Compared
    /// exactly, unlike the `ranked` hashes.
    placed_generation: u64,
}

/// What [`CellTable::placement_cells`] depends on at one instant: equal stamps, equal cells
/// (exactly). A caller that keeps the last one rebuilds the cells only when it moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementStamp {
    generation: u64,
    places: bool,
    down: Vec<bool>,
}

/// What a cell's members' records add up to, as one member sees them: their count, their
/// capacity summed, and the largest one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnBound {
    /// Members known.
    pub members: u32,
    /// Their declared capacity, summed.
    pub capacity: Resources,
    /// The largest member's capacity.
    pub largest: Resources,
}

impl OwnBound {
    /// Why `summary` claims more than these records can account for, if it does. Members'
    /// views differ while hosts join (the envoy may have heard of a few more), and the ranked
    /// capacity lags by the publication's hysteresis, so the bound is loose: twice the members
    /// plus 4, twice the capacity plus four of the largest member. It catches a cell inflated
    /// by orders of magnitude, not a member or two.
    pub fn exceeded_by(&self, summary: &CellSummary) -> Option<String> {
        let most_members = self.members.saturating_mul(2).saturating_add(4);
        let most = |sum: u64, largest: u64| {
            sum.saturating_mul(2)
                .saturating_add(largest.saturating_mul(4))
        };
        let cap = summary.capacity;
        if summary.members > most_members {
            return Some(format!(
                "{} live members claimed, {} known here",
                summary.members, self.members
            ));
        }
        if cap.cpu_millis > most(self.capacity.cpu_millis, self.largest.cpu_millis)
            || cap.memory_bytes > most(self.capacity.memory_bytes, self.largest.memory_bytes)
        {
            return Some(format!(
                "capacity {} mCPU / {} bytes claimed, the members' records add up to {} / {}",
                cap.cpu_millis,
                cap.memory_bytes,
                self.capacity.cpu_millis,
                self.capacity.memory_bytes
            ));
        }
        None
    }
}

impl CellTable {
    /// A table for an agent of cell `own`, knowing no cell yet.
    pub fn new(own: &str) -> CellTable {
        CellTable {
            own: own.to_string(),
            ..CellTable::default()
        }
    }

    /// Sets what this agent's cell's members' records add up to (the shell, every round).
    pub fn set_own_bound(&mut self, bound: OwnBound) {
        self.own_bound = Some(bound);
    }

    /// This agent's cell.
    pub fn own(&self) -> &str {
        &self.own
    }

    /// Cells held.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// Whether no cell is held.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// Entries refused since the table was made.
    pub fn refused_total(&self) -> u64 {
        self.refused_total
    }

    /// An envoy of this agent's cell publishes `summary` (its `version` is replaced by
    /// [`content_version`]) at `now_wall`, or just after the newest stamp held for the cell when
    /// that is later (another envoy's clock ahead of this one's): the cell's stamps keep growing
    /// while any of its envoys publishes. Returns the stamp used.
    pub fn publish(&mut self, mut summary: CellSummary, now_wall: u64, now_mono: u64) -> u64 {
        let held = self.cells.get(&summary.cell).map_or(0, |h| h.stamp);
        let stamp = now_wall.max(held.saturating_add(1));
        summary.version = content_version_of(&mut summary);
        let entry = CellEntry {
            cell: summary.cell.clone(),
            version: summary.version,
            stamp,
            age_ms: 0,
            summary: Some(summary),
        };
        // The agent's own publication: its own clock, no refusal for the future.
        let outcome = self.merge(vec![entry], now_mono, u64::MAX - STAMP_AHEAD_MAX_MS);
        debug_assert!(outcome.refused.is_empty(), "{:?}", outcome.refused);
        stamp
    }

    /// What an envoy of this agent's cell publishes now: [`summarize`] of the cell's members
    /// (`nodes`), its own placement of `workloads`, its `contacts`, and the cells it holds up
    /// ([`sees`](CellTable::sees)). The ranked figures' hysteresis is against the cell's summary
    /// as this table holds it (the latest stamp of any of the cell's envoys), and against
    /// `own_last` (this envoy's last publication) only before it holds one. With each envoy
    /// keeping its own, two envoys that first published at different member counts (99 and 100
    /// hosts) each stayed within 1/16 of the truth forever and published two ranked capacities in
    /// turn, and every agent's cell level flipped with each publication: a 5,000-host simulation
    /// never converged. Against the held one, the envoys' figures meet at the latest stamp's.
    pub fn summarize_own(
        &self,
        contacts: &[String],
        nodes: &[Node],
        local: (&Placement, &[Workload]),
        own_last: Option<&CellSummary>,
        now_mono: u64,
    ) -> CellSummary {
        let held = self.summary(&self.own);
        let mut summary = summarize(
            &self.own,
            0,
            contacts,
            nodes,
            local.0,
            local.1,
            held.or(own_last),
        );
        summary.sees = self.sees(now_mono);
        summary
    }

    /// What this agent holds, for a peer to answer with only what is newer.
    pub fn known(&self) -> Vec<Known> {
        self.cells
            .iter()
            .map(|(cell, h)| Known {
                cell: cell.clone(),
                version: h.version,
                stamp: h.stamp,
            })
            .collect()
    }

    /// The entries a peer that holds `known` lacks: every cell whose stamp here is newer than the
    /// peer's (or that the peer does not know), with the body when the peer's version differs.
    pub fn newer_than(&self, known: &[Known], now_mono: u64) -> Vec<CellEntry> {
        let theirs: BTreeMap<&str, &Known> = known.iter().map(|k| (k.cell.as_str(), k)).collect();
        self.cells
            .iter()
            .filter_map(|(cell, h)| {
                let peer = theirs.get(cell.as_str());
                if peer.is_some_and(|k| k.stamp >= h.stamp) {
                    return None;
                }
                Some(CellEntry {
                    cell: cell.clone(),
                    version: h.version,
                    stamp: h.stamp,
                    age_ms: now_mono.saturating_sub(h.heard_mono),
                    summary: match peer {
                        Some(k) if k.version == h.version => None,
                        _ => Some(CellSummary::clone(&h.summary)),
                    },
                })
            })
            .collect()
    }

    /// Takes the entries newer than what the table holds. Never panics; what it refuses it
    /// counts and returns.
    pub fn merge(&mut self, entries: Vec<CellEntry>, now_mono: u64, now_wall: u64) -> MergeOutcome {
        let mut outcome = MergeOutcome::default();
        for entry in entries {
            let cell = entry.cell.clone();
            match self.merge_one(entry, now_mono, now_wall) {
                Ok(true) => outcome.updated.push(cell),
                Ok(false) => {}
                Err(why) => {
                    self.refused_total += 1;
                    outcome.refused.push((cut(&cell), why));
                }
            }
        }
        outcome
    }

    fn merge_one(
        &mut self,
        entry: CellEntry,
        now_mono: u64,
        now_wall: u64,
    ) -> Result<bool, EntryRefusal> {
        if entry.stamp > now_wall.saturating_add(STAMP_AHEAD_MAX_MS) {
            return Err(EntryRefusal::FromTheFuture);
        }
        // Never more recent than now, never older than the down bound allows to matter.
        let heard = now_mono.saturating_sub(entry.age_ms.min(CELL_FORGET_MS));
        // What this table holds already decides first: a body it would not read (an older or
        // equal stamp, or the content it holds newly stamped) is neither checked nor kept.
        if let Some(held) = self.cells.get_mut(&entry.cell) {
            if entry.stamp < held.stamp {
                return Ok(false);
            }
            if entry.stamp == held.stamp {
                // The same publication relayed along another path. Under the stamp rule, age
                // alone takes a cell down: the latest hearing is kept (the generous reading).
                // Under the evidence rule age only starts probes, and a verdict waits for
                // their failures: the earliest hearing is kept, the nearest to when it was
                // published (every path adds its own delay; the latest would let a member
                // that pulled it late push a lost cell's staleness back, up to a round).
                held.heard_mono = match self.rule {
                    CellRule::Stamp => held.heard_mono.max(heard),
                    CellRule::Evidence => held.heard_mono.min(heard),
                };
                return Ok(false);
            }
            if entry.version == held.version {
                // The content held, newly stamped (the summary, placed figures and remembered
                // unknown cell stand).
                held.probes = Probes::default();
                held.latched = false;
                held.stamp = entry.stamp;
                held.heard_mono = heard.max(held.heard_mono);
                return Ok(true);
            }
        }
        let Some(mut summary) = entry.summary else {
            return Err(EntryRefusal::MissingBody);
        };
        summary
            .validate()
            .map_err(|e| EntryRefusal::Invalid(e.to_string()))?;
        if summary.cell != entry.cell {
            return Err(EntryRefusal::WrongCell);
        }
        if content_version_of(&mut summary) != entry.version {
            return Err(EntryRefusal::VersionMismatch);
        }
        let over = self
            .own_bound
            .filter(|_| summary.cell == self.own)
            .and_then(|bound| bound.exceeded_by(&summary));
        if let Some(why) = over {
            return Err(EntryRefusal::OwnCellOverclaimed(why));
        }
        let placed = for_placement(&summary);
        let ranked = placement_hash(&placed);
        let placed = intern(placed, ranked);
        let summary = intern(summary, entry.version);
        match self.cells.get_mut(&entry.cell) {
            Some(held) => {
                if placed != held.placed {
                    self.placed_generation += 1;
                }
                // The remembered unknown cell stands while the summary names the same cells:
                // forgetting it at each new version made the quorum walk every cell's `sees`
                // again each round.
                let unknown = match summary.sees == held.summary.sees {
                    true => std::mem::take(&mut held.unknown),
                    false => Default::default(),
                };
                *held = Held {
                    probes: Probes::default(),
                    latched: false,
                    summary,
                    placed,
                    ranked,
                    version: entry.version,
                    stamp: entry.stamp,
                    heard_mono: heard.max(held.heard_mono),
                    unknown,
                };
                Ok(true)
            }
            None => {
                if self.cells.len() >= CELLS_MAX {
                    return Err(EntryRefusal::TableFull);
                }
                self.placed_generation += 1;
                self.names_moved();
                self.cells.insert(
                    entry.cell,
                    Held {
                        probes: Probes::default(),
                        latched: false,
                        ranked,
                        placed,
                        summary,
                        version: entry.version,
                        stamp: entry.stamp,
                        heard_mono: heard,
                        unknown: Default::default(),
                    },
                );
                Ok(true)
            }
        }
    }

    /// Sets the rule that says a cell is down (the shell, from the mesh version).
    pub fn set_rule(&mut self, rule: CellRule) {
        if rule != self.rule {
            for h in self.cells.values_mut() {
                h.latched = false;
            }
        }
        self.rule = rule;
    }

    /// The rule in force.
    pub fn rule(&self) -> CellRule {
        self.rule
    }

    /// How long ago (ms) `cell`'s stamp last grew here.
    fn age(&self, h: &Held, now_mono: u64) -> u64 {
        now_mono.saturating_sub(h.heard_mono)
    }

    /// Whether this agent's own probes call `cell` unreached: stale, every probe of at least
    /// [`CELL_PROBED_MIN`] of its contacts (all of them when it lists fewer) failed, and none
    /// answered since it went stale.
    pub fn unreached(&self, cell: &str, now_mono: u64) -> bool {
        let Some(h) = self.cells.get(cell) else {
            return false;
        };
        if cell == self.own || self.age(h, now_mono) <= CELL_STALE_MS {
            return false;
        }
        h.failed_enough()
    }

    /// Whether a cell is in question at `now_mono` (evidence rule): another cell late (past
    /// [`CELL_PROBE_MS`]) and not yet silent for [`CELL_DOWN_MS`] that this agent does not hold
    /// down. While one is, an
    /// envoy probes between its rounds (`CELLS_QUICK_INTERVAL` in the shell), so that its
    /// evidence does not wait for a whole round; a cell held down, or long silent, asks nothing
    /// more of it.
    pub fn in_question(&self, now_mono: u64) -> bool {
        self.rule == CellRule::Evidence
            && self.cells.iter().any(|(cell, h)| {
                let age = self.age(h, now_mono);
                *cell != self.own
                    && age > CELL_PROBE_MS
                    && age <= CELL_DOWN_MS
                    && !h.latched
                    && !self.is_down(cell, now_mono)
            })
    }

    /// Whether another cell is stale at `now_mono` (in question, degraded or down): only then
    /// can news move a cell down or up (a fresh cell is up, and news only refreshes it).
    pub fn any_stale(&self, now_mono: u64) -> bool {
        self.cells
            .iter()
            .any(|(cell, h)| *cell != self.own && self.age(h, now_mono) > CELL_STALE_MS)
    }

    /// `cell`'s entry as held, summary included (what an envoy pushes when its news cannot
    /// wait for the next exchange).
    pub fn entry(&self, cell: &str, now_mono: u64) -> Option<CellEntry> {
        let h = self.cells.get(cell)?;
        Some(CellEntry {
            cell: cell.to_string(),
            version: h.version,
            stamp: h.stamp,
            age_ms: now_mono.saturating_sub(h.heard_mono),
            summary: Some(CellSummary::clone(&h.summary)),
        })
    }

    /// The late cells (past [`CELL_PROBE_MS`]) this agent (an envoy) should probe now, each
    /// with the contacts to probe: those not failed yet, at most `per_cell`. A cell already
    /// unreached is probed again every [`CELL_REPROBE_MS`] (one of its contacts in turn: do its
    /// members answer again?); one whose member answered within [`CELL_STALE_MS`] (within
    /// [`CELL_REPROBE_MS`] when it answered before the cell was stale) is not probed. Only under
    /// the evidence rule.
    pub fn to_probe(&self, now_mono: u64, per_cell: usize) -> Vec<(String, Vec<String>)> {
        if self.rule != CellRule::Evidence {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (cell, h) in &self.cells {
            if *cell == self.own || self.age(h, now_mono) <= CELL_PROBE_MS {
                continue;
            }
            // Not again soon after an answer: within the stale bound of one given while the
            // cell was stale (a degraded cell's members are not asked every round), within a
            // reprobe interval of one given while it was only late (it may have been lost just
            // after, and its loss must not wait out the longer quiet).
            let fresh_answer = h.probes.answered_mono.is_some_and(|a| {
                let late_only = a <= h.heard_mono.saturating_add(CELL_STALE_MS);
                let quiet = if late_only {
                    CELL_REPROBE_MS
                } else {
                    CELL_STALE_MS
                };
                now_mono.saturating_sub(a) < quiet
            });
            if fresh_answer {
                continue;
            }
            let contacts: Vec<String> = if self.unreached(cell, now_mono) {
                let due = h
                    .probes
                    .probed_mono
                    .is_none_or(|p| now_mono.saturating_sub(p) >= CELL_REPROBE_MS);
                if !due || h.summary.contacts.is_empty() {
                    continue;
                }
                let turn = (now_mono / CELL_REPROBE_MS) as usize % h.summary.contacts.len();
                vec![h.summary.contacts[turn].clone()]
            } else if h.failed_enough() {
                // Late, not stale yet, and its failures already enough: they count once it is
                // stale, and probing more of its members until then adds nothing.
                continue;
            } else {
                h.summary
                    .contacts
                    .iter()
                    .filter(|c| !h.probes.failed.contains(*c))
                    .take(per_cell)
                    .cloned()
                    .collect()
            };
            if !contacts.is_empty() {
                out.push((cell.clone(), contacts));
            }
        }
        out
    }

    /// Records a probe of `contact` (one of `cell`'s listed contacts) at `now_mono`: it
    /// answered, or it failed. A contact the summary does not list is ignored.
    pub fn probed(&mut self, cell: &str, contact: &str, answered: bool, now_mono: u64) {
        let Some(h) = self.cells.get_mut(cell) else {
            return;
        };
        if !h.summary.contacts.iter().any(|c| c == contact) {
            return;
        }
        h.probes.probed_mono = Some(now_mono);
        if answered {
            h.probes.answered_mono = Some(now_mono);
            h.probes.failed.clear();
        } else {
            h.probes.failed.insert(contact.to_string());
        }
    }

    /// `cell`'s standing at `now_mono` under the rule in force. This agent's own cell is always
    /// up. Under the evidence rule a cell [latched](CellTable::latch) down stays down until its
    /// stamp grows.
    ///
    /// Under the evidence rule a stale cell is down only when, of the **observers** (the cells
    /// other than it that are not stale here, this agent's own included), at least
    /// [`CELL_DOWN_OBSERVERS`] (all of them when fewer) call it unreached: a cell calls it so
    /// when its latest summary, published at least [`CELL_STALE_MS`] after the cell's latest
    /// stamp, leaves it out of `sees` (its envoys' probes of its members failed), this agent's
    /// own cell also when this agent's own probes did. With one observer (this agent's own
    /// cell alone) or none, it is down once silent for [`CELL_DOWN_MS`], as under the stamp
    /// rule. Not down,
    /// it is degraded once stale for [`CELL_DEGRADED_MS`], up before.
    pub fn health(&self, cell: &str, now_mono: u64) -> CellHealth {
        match self.cells.get(cell) {
            Some(h) if h.latched && self.rule == CellRule::Evidence => CellHealth::Down,
            _ => self.judged(cell, now_mono),
        }
    }

    /// Latches down every cell held down on evidence now, until its stamp grows (the shell
    /// calls it before each reading of the cells' standing).
    pub fn latch(&mut self, now_mono: u64) {
        if self.rule != CellRule::Evidence {
            return;
        }
        // A latched cell stays latched: judging it again (a walk over every cell for a stale
        // one) would change nothing.
        let down: Vec<String> = self
            .cells
            .iter()
            .filter(|(c, h)| !h.latched && self.judged(c, now_mono) == CellHealth::Down)
            .map(|(c, _)| c.clone())
            .collect();
        for cell in down {
            if let Some(h) = self.cells.get_mut(&cell) {
                h.latched = true;
            }
        }
    }

    /// [`CellTable::latch`], then every cell's [`CellTable::is_down`] at `now_mono`, by name:
    /// each cell judged once (the latch, then a reading of the down flags, judged each stale
    /// cell twice, and judging one walks every cell).
    pub fn latch_downs(&mut self, now_mono: u64) -> Vec<bool> {
        let healths = self.healths_now(now_mono);
        if self.rule == CellRule::Evidence {
            for (h, health) in self.cells.values_mut().zip(&healths) {
                h.latched |= *health == CellHealth::Down;
            }
        }
        healths.iter().map(|h| *h == CellHealth::Down).collect()
    }

    /// [`CellTable::health`] without the latch.
    fn judged(&self, cell: &str, now_mono: u64) -> CellHealth {
        let Some(h) = self.cells.get(cell) else {
            return CellHealth::Up;
        };
        if cell == self.own {
            return CellHealth::Up;
        }
        let age = self.age(h, now_mono);
        match self.rule {
            CellRule::Stamp if age > CELL_DOWN_MS => return CellHealth::Down,
            CellRule::Stamp => return CellHealth::Up,
            CellRule::Evidence if age <= CELL_STALE_MS => return CellHealth::Up,
            CellRule::Evidence => {}
        }
        let mut observers = 0;
        let mut against = 0;
        for (other, o) in &self.cells {
            let own = *other == self.own;
            if other == cell || (!own && self.age(o, now_mono) > CELL_STALE_MS) {
                continue;
            }
            observers += 1;
            // Evidence counts only when it is newer than the cell's last sign of life by the
            // stale bound: the observer published (its stamp heard here) long enough after the
            // cell's latest stamp to have learned it, or probed it, and still leaves it out. A
            // cell back from a restart is not held down again on what was said before it came.
            let left_out = o
                .summary
                .sees
                .binary_search_by(|c| c.as_str().cmp(cell))
                .is_err();
            let recent = o.heard_mono > h.heard_mono.saturating_add(CELL_STALE_MS);
            if (left_out && recent) || (own && self.unreached(cell, now_mono)) {
                against += 1;
            }
        }
        decide(age, observers, against)
    }

    /// Every cell's [`CellTable::health`] at `now_mono`, by name, with each observer's `sees`
    /// read once for all the stale cells: judging each stale cell alone searches every
    /// observer's `sees` (at 50 cells, most of a latch's cost).
    fn healths_now(&self, now_mono: u64) -> Vec<CellHealth> {
        let stale = |c: &String, h: &Held| *c != self.own && self.age(h, now_mono) > CELL_STALE_MS;
        let walk = self.rule == CellRule::Evidence
            && self.cells.iter().any(|(c, h)| !h.latched && stale(c, h));
        if !walk {
            return (self.cells.keys())
                .map(|c| self.health(c, now_mono))
                .collect();
        }
        let names: Vec<&String> = self.cells.keys().collect();
        // The observers (this agent's cell, and every cell not stale here): by index, whether
        // it is this agent's, when it was heard, and which held cells its `sees` lists.
        let observers: Vec<(usize, bool, u64, Vec<bool>)> = (self.cells.iter().enumerate())
            .filter(|(_, (c, o))| !stale(c, o))
            .map(|(i, (c, o))| {
                let mut listed = vec![false; names.len()];
                let mut j = 0;
                for seen in &o.summary.sees {
                    while j < names.len() && names[j] < seen {
                        j += 1;
                    }
                    if j < names.len() && names[j] == seen {
                        listed[j] = true;
                    }
                }
                (i, *c == self.own, o.heard_mono, listed)
            })
            .collect();
        let healths: Vec<CellHealth> = (self.cells.iter().enumerate())
            .map(|(i, (cell, h))| {
                if h.latched {
                    return CellHealth::Down;
                }
                if !stale(cell, h) {
                    return CellHealth::Up;
                }
                let (mut count, mut against) = (0, 0);
                for (k, own, heard, listed) in &observers {
                    if *k == i {
                        continue;
                    }
                    count += 1;
                    let recent = *heard > h.heard_mono.saturating_add(CELL_STALE_MS);
                    if (!listed[i] && recent) || (*own && self.unreached(cell, now_mono)) {
                        against += 1;
                    }
                }
                decide(self.age(h, now_mono), count, against)
            })
            .collect();
        #[cfg(debug_assertions)]
        for (cell, health) in self.cells.keys().zip(&healths) {
            assert_eq!(
                *health,
                self.health(cell, now_mono),
                "one walk judged {cell} otherwise"
            );
        }
        healths
    }

    /// Every cell held with its standing at `now_mono`, by name (what [`cell_changes`](super::cell_changes)
    /// compares).
    pub fn healths(&self, now_mono: u64) -> Vec<(String, CellHealth)> {
        let healths = self.healths_now(now_mono);
        self.cells.keys().cloned().zip(healths).collect()
    }

    /// Whether `cell` is down at `now_mono` ([`CellTable::health`]).
    pub fn is_down(&self, cell: &str, now_mono: u64) -> bool {
        self.health(cell, now_mono) == CellHealth::Down
    }

    /// What this agent, as an envoy, publishes as its cell's `sees`: the other cells it holds
    /// up. Under the stamp rule, those not down; under the evidence rule, its own evidence only
    /// (never what other cells say, so that observers stay independent): the cells not
    /// [`unreached`](CellTable::unreached) by its probes that were heard from within
    /// [`CELL_DOWN_MS`] or whose member answered within it.
    pub fn sees(&self, now_mono: u64) -> Vec<String> {
        if self.rule == CellRule::Stamp {
            return self.up_cells(now_mono);
        }
        self.cells
            .iter()
            .filter(|(cell, h)| {
                **cell != self.own
                    && !self.unreached(cell, now_mono)
                    && (self.age(h, now_mono) <= CELL_DOWN_MS
                        || h.probes
                            .answered_mono
                            .is_some_and(|a| now_mono.saturating_sub(a) <= CELL_DOWN_MS))
            })
            .map(|(cell, _)| cell.clone())
            .collect()
    }

    /// The names of the cells held, in order.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.cells.keys()
    }

    /// The summary held for `cell`.
    pub fn summary(&self, cell: &str) -> Option<&CellSummary> {
        self.cells.get(cell).map(|h| &*h.summary)
    }

    /// Every cell held, by name, with its summary, its standing, and how long ago it was last
    /// heard from (ms).
    pub fn list(&self, now_mono: u64) -> Vec<(&CellSummary, CellHealth, u64)> {
        self.cells
            .iter()
            .map(|(cell, h)| {
                (
                    &*h.summary,
                    self.health(cell, now_mono),
                    now_mono.saturating_sub(h.heard_mono),
                )
            })
            .collect()
    }

    /// The cells as the cell level places over them, by name: each summary's ranked figures only
    /// (`version`, `free`, `contacts` and `sees` cleared: placement never reads them, and clearing them
    /// keeps the cell level from being redone when only they change), with its down flag.
    pub fn placement_cells(&self, now_mono: u64) -> Vec<Cell> {
        let downs: Vec<bool> = (self.cells.keys())
            .map(|c| self.is_down(c, now_mono))
            .collect();
        self.placement_cells_from(&downs)
    }

    /// [`CellTable::placement_cells`] with the down flags [`CellTable::latch_downs`] returned.
    pub fn placement_cells_from(&self, downs: &[bool]) -> Vec<Cell> {
        self.cells
            .values()
            .zip(downs)
            .map(|(h, &down)| Cell {
                summary: CellSummary::clone(&h.placed),
                down,
            })
            .collect()
    }

    /// What [`CellTable::placement_cells`] and [`CellTable::places_cells`] depend on at
    /// `now_mono`, without a summary copied.
    pub fn placement_stamp(&self, now_mono: u64) -> PlacementStamp {
        let downs: Vec<bool> = (self.cells.keys())
            .map(|c| self.is_down(c, now_mono))
            .collect();
        self.placement_stamp_from(downs)
    }

    /// [`CellTable::placement_stamp`] with the down flags [`CellTable::latch_downs`] returned.
    pub fn placement_stamp_from(&self, downs: Vec<bool>) -> PlacementStamp {
        PlacementStamp {
            generation: self.placed_generation,
            places: self.places_cells(),
            down: downs,
        }
    }

    /// A hash of what [`CellTable::placement_cells`] returns at `now_mono`, without building it:
    /// equal keys, equal cells (up to hash collisions). For a caller that only needs to know
    /// whether the cells moved.
    pub fn placement_key(&self, now_mono: u64) -> u64 {
        let downs: Vec<bool> = (self.cells.keys())
            .map(|c| self.is_down(c, now_mono))
            .collect();
        self.placement_key_from(&downs)
    }

    /// [`CellTable::placement_key`] with the down flags [`CellTable::latch_downs`] returned.
    pub fn placement_key_from(&self, downs: &[bool]) -> u64 {
        use std::hash::Hasher;
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for ((cell, held), &down) in self.cells.iter().zip(downs) {
            h.write(cell.as_bytes());
            h.write_u64(held.ranked);
            h.write_u8(u8::from(down));
        }
        h.finish()
    }

    /// The cells held, this agent's own counted even before its envoys published it.
    pub fn held(&self) -> usize {
        self.cells.len() + usize::from(!self.cells.contains_key(&self.own))
    }

    /// Whether the table places in two levels: another cell is held, and this agent's own
    /// (its envoys published it).
    pub fn places_cells(&self) -> bool {
        self.cells.len() >= 2 && self.cells.contains_key(&self.own)
    }

    /// The other cells held up at `now_mono`, by name: what this agent publishes as its cell's
    /// `sees` when it is an envoy.
    pub fn up_cells(&self, now_mono: u64) -> Vec<String> {
        // Every cell judged in one walk (see `quorum`).
        let healths = self.healths_now(now_mono);
        self.cells
            .keys()
            .zip(healths)
            .filter(|(c, health)| **c != self.own && *health != CellHealth::Down)
            .map(|(c, _)| c.clone())
            .collect()
    }

    /// This agent's cell's quorum of cells at `now_mono`. Known cells: those held (its own
    /// counted), or `floor` if more (the count saved when the quorum last held, so that a
    /// cell cut off and restarted, or one that forgot the others, is no majority of itself).
    /// With it: its own cell, and each other cell up here whose latest summary holds this cell
    /// up. Incomplete: a cell up here holds up a cell this agent does not know. Newest down: how
    /// long ago the last cell to go down went down.
    pub fn quorum(&self, now_mono: u64, floor: usize) -> CellQuorum {
        let held = self.held();
        let mut with_us = 1;
        let mut incomplete = None;
        let mut newest_down_ms: Option<u64> = None;
        // Every cell judged in one walk (judging each stale cell alone walks every cell's
        // `sees`: while a large mesh forms, many are stale at once, each round).
        let healths = self.healths_now(now_mono);
        for ((cell, h), health) in self.cells.iter().zip(healths) {
            if *cell == self.own {
                continue;
            }
            // Silent, not down: under the evidence rule a cell may be held down sooner, but
            // only silence (a bound the held cell can see from its side too, and fence by)
            // takes it out of this cell's quorum and starts the claim clock of its exclusive
            // replicas (docs/reconcile.md, "Exclusive replicas across cells").
            if self.age(h, now_mono) > CELL_DOWN_MS {
                let down = now_mono.saturating_sub(h.heard_mono.saturating_add(CELL_DOWN_MS));
                newest_down_ms = Some(newest_down_ms.map_or(down, |d| d.min(down)));
                continue;
            }
            if health == CellHealth::Down {
                // Down on evidence, not silent yet: its replicas may move here, but the claim
                // clock starts only once it is silent.
                newest_down_ms = Some(0);
            }
            if h.summary.sees.binary_search(&self.own).is_ok() {
                with_us += 1;
            }
            if incomplete.is_none() {
                let unknown = h.unknown.get_or_init(|| {
                    first_unknown(&h.summary.sees, self.cells.keys(), &self.own).cloned()
                });
                debug_assert_eq!(
                    unknown.as_ref(),
                    first_unknown(&h.summary.sees, self.cells.keys(), &self.own),
                    "a remembered unknown cell of {cell}'s summary is stale"
                );
                if let Some(other) = unknown {
                    incomplete = Some(format!(
                        "cell {cell} holds cell {other} up, which this agent does not know yet"
                    ));
                }
            }
        }
        CellQuorum {
            known: held.max(floor),
            with_us,
            incomplete,
            newest_down_ms,
        }
    }

    /// Forgets cells down for more than [`CELL_FORGET_MS`]; returns their names.
    pub fn forget_old(&mut self, now_mono: u64) -> Vec<String> {
        let old: Vec<String> = self
            .cells
            .iter()
            .filter(|(cell, h)| {
                **cell != self.own && now_mono.saturating_sub(h.heard_mono) > CELL_FORGET_MS
            })
            .map(|(cell, _)| cell.clone())
            .collect();
        for cell in &old {
            self.cells.remove(cell);
            self.placed_generation += 1;
        }
        if !old.is_empty() {
            self.names_moved();
        }
        old
    }

    /// A cell came or went: which names each summary holds up that this table does not know
    /// is worked out again when next asked.
    fn names_moved(&mut self) {
        for h in self.cells.values_mut() {
            h.unknown = Default::default();
        }
    }
}

/// The first of `sees` (strictly ascending, as in every summary held) that is neither `own`
/// nor among `held` (ascending): one walk over both lists, not a lookup per name (the quorum
/// reads every cell's `sees` each round: cells squared lookups at 50 cells).
fn first_unknown<'a, 'b>(
    sees: &'a [String],
    held: impl Iterator<Item = &'b String>,
    own: &str,
) -> Option<&'a String> {
    let mut held = held.peekable();
    for c in sees {
        while held.next_if(|h| *h < c).is_some() {}
        if held.peek().is_some_and(|h| *h == c) || c == own {
            continue;
        }
        return Some(c);
    }
    None
}

/// A stale cell's standing under the evidence rule, from its age and how many observer cells
/// there are and say it is unreached ([`CellTable::health`]).
fn decide(age: u64, observers: usize, against: usize) -> CellHealth {
    // One observer is only this agent's own cell when every other is stale here too: this
    // cell is the one cut off, most likely, and holding the others down on its own word
    // would pull every replica of the mesh into it for a blip. It waits for silence, as
    // under the stamp rule (a mesh of two cells too: neither can tell which side is cut).
    let down = match observers {
        0 | 1 => age > CELL_DOWN_MS,
        n => against >= CELL_DOWN_OBSERVERS.min(n),
    };
    match (down, age > CELL_DEGRADED_MS) {
        (true, _) => CellHealth::Down,
        (false, true) => CellHealth::Degraded,
        (false, false) => CellHealth::Up,
    }
}

/// A cell name as quoted in a refusal: at most 64 bytes of it.
fn cut(name: &str) -> String {
    let mut end = name.len().min(64);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The sorted walk finds what a lookup per name finds.
        #[test]
        fn first_unknown_is_the_first_name_neither_own_nor_held(
            held in prop::collection::btree_set(0u8..20, 0..10),
            sees in prop::collection::btree_set(0u8..20, 0..10),
            own in 0u8..20,
        ) {
            let name = |i: &u8| format!("c{i:02}");
            let own = name(&own);
            let held: std::collections::BTreeSet<String> = held.iter().map(name).collect();
            let sees: Vec<String> = sees.iter().map(name).collect();
            let naive = sees.iter().find(|c| **c != own && !held.contains(*c));
            prop_assert_eq!(first_unknown(&sees, held.iter(), &own), naive);
        }
    }
}
