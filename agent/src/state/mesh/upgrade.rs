//! The mesh version in the shell: recorded in the store, moved by the agents, held by operators.
//!
//! The mesh's own entry [`MESH_VERSION_NAME`] holds the mesh version: the highest wire version
//! every known member speaks once it was reached (`shoal_core::upgrade::assess`). Every agent
//! checks once a [`CHECK_INTERVAL`]; the lowest-named live member of a cell that speaks the next
//! version writes it (a signed, replicated write like any other). Readers take the highest
//! version the entry ever held on this agent, so a stale write never moves it back.
//! [`HOLD_NAME`] is an operator's hold (`shoal upgrade hold` / `release`), last writer wins.
//!
//! What other agents must agree on follows the recorded version: what this agent sends first
//! (its gossip frames and RPC requests, through the shared `wire` cell), the placement algorithm
//! (`shoal_core::upgrade::placement_algorithm`), the spec fields an apply may set
//! ([`refusal`]).
//!
//! A mesh of cells: an agent's gossip holds its own cell's members only, so each cell reports
//! its members' builds in the store ([`CELL_WIRE_PREFIX`]`CELL`, written by its lowest-named live
//! member once other cells are known; replicated across cells as every entry), and an agent
//! counts each other cell as that report says: its lowest `wire_max`, its members that hold it
//! back named `cell NAME: n7, n8`. A cell without a report (one of builds before 8, or not
//! reported yet) holds the version at 7.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shoal_core::upgrade::{assess, Assessment, MemberBuild};
use shoal_core::version::{WIRE_CUR, WIRE_MIN};

use crate::state::store_db::DesiredStore;
use crate::wire::api::{ApiError, ErrorKind, Response};
pub use crate::wire::build::{BuildGroup, HoldRecord, HolderView, UpgradeView};

use super::node::MeshNode;
use super::view::Member;

pub use crate::state::store_db::{decode_version, MeshVersionRecord, MESH_VERSION_NAME};
/// The store name of an operator's hold.
pub const HOLD_NAME: &str = "shoal:upgrade-hold";

/// How often an agent checks whether the mesh version may move.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// The mesh version from which peers hold a member up in placement while it restarts
/// (`RESTARTING_KEY`): every member then knows the fact, so all place alike.
pub const RESTART_HOLD_SINCE: u16 = 8;

/// How long a started agent waits before it may move the mesh version (its view of the
/// membership fills in over a few gossip rounds).
pub const SETTLE: Duration = Duration::from_secs(3);
/// Most builds and members per build an answer lists.
pub const BUILDS_MAX: usize = 32;
/// Most member names listed per build.
pub const NAMES_PER_BUILD_MAX: usize = 32;

/// Chitchat key holding the mesh version this agent runs (decimal): how a freshly started agent
/// learns it before its store has synced ([`adopt_gossiped`]). Builds that do not read it pass it
/// on as any key.
pub const MESH_KEY: &str = "mesh";

/// Longest [`MESH_KEY`] value read (a u16 in decimal).
const MESH_VALUE_MAX: usize = 5;

/// Takes the mesh version from the peers' gossip (`shoal_core::upgrade::gossiped_floor`): the
/// highest version more than half of this agent's live peers say they run, never above the newest
/// every member it knows speaks (a member without a build key counts as a build before 8). Raises
/// what [`MeshNode::mesh_version`] returns and the wire version this agent sends in; returns the
/// version taken, if it moved. Without this, an agent started with an empty store runs the oldest
/// version until anti-entropy brings the record (seconds), and in a mesh of compact gossip judges
/// its peers by heartbeats that no longer come every round.
pub fn adopt_gossiped(node: &MeshNode, chitchat: &chitchat::Chitchat) -> Option<u16> {
    let me = chitchat.self_chitchat_id();
    let reports: Vec<u16> = chitchat
        .live_nodes()
        .filter(|id| *id != me)
        .filter_map(|id| chitchat.node_state(id)?.get(MESH_KEY))
        .filter(|v| v.len() <= MESH_VALUE_MAX)
        .filter_map(|v| v.parse().ok())
        .collect();
    if reports.is_empty() {
        return None;
    }
    let supported = chitchat
        .node_states()
        .values()
        .map(|state| {
            state
                .get(super::build::BUILD_KEY)
                .and_then(|b| super::build::BuildRecord::decode(b).ok())
                .map_or(WIRE_MIN, |b| b.wire_max)
        })
        .min()
        .unwrap_or(WIRE_MIN);
    let current = node.mesh_version();
    let floor = shoal_core::upgrade::gossiped_floor(current, &reports, supported)?;
    node.mesh_version_seen.fetch_max(floor, Ordering::Relaxed);
    node.wire.fetch_max(floor.min(WIRE_CUR), Ordering::Relaxed);
    tracing::info!(
        from = current,
        to = floor,
        peers = reports.len(),
        "mesh version taken from the peers' gossip"
    );
    Some(floor)
}

/// Each cell's report of the wire versions its members speak, `shoal:cell-wire:CELL`, written by
/// the cell's lowest-named live member once other cells are known: how an agent learns whether
/// the members of other cells speak the next version (they are not in its gossip). Older builds
/// keep and replicate the entry as any other.
pub const CELL_WIRE_PREFIX: &str = "shoal:cell-wire:";

/// What a cell reports of its members' builds (JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellWireRecord {
    /// The newest wire version every known member of the cell speaks (the lowest `wire_max`).
    pub wire_max: u16,
    /// The highest `wire_min` of a member (above the mesh version: a member too new for it).
    pub wire_min: u16,
    /// Members that speak less than the writer's newest version (at most
    /// [`shoal_core::upgrade::NAMED_MAX`], oldest first), to name them in other cells.
    pub holders: Vec<String>,
    /// How many there are in all.
    pub holders_count: usize,
}

impl CellWireRecord {
    /// The report of a cell with these members.
    pub fn of(members: &[Member]) -> CellWireRecord {
        let builds = member_builds(members, &[]);
        let assessment = assess(WIRE_MIN, &builds, false);
        CellWireRecord {
            wire_max: builds.iter().map(|b| b.wire_max).min().unwrap_or(WIRE_CUR),
            wire_min: builds.iter().map(|b| b.wire_min).max().unwrap_or(WIRE_MIN),
            holders: assessment.waiting_for.into_iter().map(|h| h.name).collect(),
            holders_count: assessment.waiting_count,
        }
    }
}

/// A new cell holding the wire version this agent sends in, at the oldest this build speaks.
pub fn wire_cell() -> Arc<AtomicU16> {
    Arc::new(AtomicU16::new(WIRE_MIN))
}

/// An operator's hold a store body holds, when it is held.
pub fn decode_hold(body: Option<&[u8]>) -> Option<HoldRecord> {
    serde_json::from_slice::<HoldRecord>(body?)
        .ok()
        .filter(|h| h.held)
}

/// What one agent knows of the mesh's builds: its cell's members (alive, or dead but not yet
/// forgotten) and each other cell it knows, as that cell's report says (`None`: no report yet,
/// counted as a build before 8, which writes none).
pub fn member_builds(
    members: &[Member],
    other_cells: &[(String, Option<CellWireRecord>)],
) -> Vec<MemberBuild> {
    let mut out: Vec<MemberBuild> = members
        .iter()
        .map(|m| {
            let build = m.build();
            MemberBuild {
                name: m.name.clone(),
                wire_min: build.wire_min,
                wire_max: build.wire_max,
                alive: m.alive,
            }
        })
        .collect();
    out.extend(other_cells.iter().map(|(cell, report)| match report {
        Some(r) => {
            let named = match r.holders.as_slice() {
                [] => String::new(),
                names if r.holders_count > names.len() => {
                    format!(
                        ": {} and {} more",
                        names.join(", "),
                        r.holders_count - names.len()
                    )
                }
                names => format!(": {}", names.join(", ")),
            };
            MemberBuild {
                name: format!("cell {cell}{named}"),
                wire_min: r.wire_min,
                wire_max: r.wire_max,
                alive: true,
            }
        }
        None => MemberBuild {
            name: format!("cell {cell} (no report of its builds yet)"),
            wire_min: WIRE_MIN,
            wire_max: WIRE_MIN,
            alive: true,
        },
    }));
    out
}

impl MeshNode {
    /// The recorded mesh version (the highest this agent has seen recorded, at least
    /// [`WIRE_MIN`]).
    pub fn mesh_version(&self) -> u16 {
        let stored = self.stored_mesh_version();
        let seen = self.mesh_version_seen.load(Ordering::Relaxed);
        let version = stored.unwrap_or(WIRE_MIN).max(seen).max(WIRE_MIN);
        self.mesh_version_seen.fetch_max(version, Ordering::Relaxed);
        version
    }

    /// The mesh version this agent's store holds a record of, if any (what anti-entropy brought or
    /// this agent wrote; [`Self::mesh_version`] may be ahead of it, never behind).
    pub fn stored_mesh_version(&self) -> Option<u16> {
        let store = self.store.lock().expect("store lock");
        decode_version(store.get(MESH_VERSION_NAME).and_then(|e| e.body.live()))
    }

    /// Whether a member stopped for a planned restart is held up (`super::view::Member::held_up`):
    /// from mesh version [`RESTART_HOLD_SINCE`] on.
    pub fn restart_hold(&self) -> bool {
        self.mesh_version() >= RESTART_HOLD_SINCE
    }

    /// The placement algorithm the mesh version names (`shoal_core::upgrade`).
    pub fn placement_algorithm(&self) -> u32 {
        shoal_core::upgrade::placement_algorithm(self.mesh_version())
    }

    /// What the placement inputs follow of the mesh version: whether planned restarts hold a node
    /// up, and the placement algorithm (`view::placement_nodes`).
    pub fn placement_terms(&self) -> (bool, u32) {
        (self.restart_hold(), self.placement_algorithm())
    }

    /// The operator's hold, when held.
    pub fn upgrade_hold(&self) -> Option<HoldRecord> {
        let store = self.store.lock().expect("store lock");
        decode_hold(store.get(HOLD_NAME).and_then(|e| e.body.live()))
    }

    /// Where the mesh version stands, from this agent's view.
    pub async fn upgrade_assessment(&self) -> (Assessment, Arc<[Member]>) {
        let members = self.members().await;
        let own = self.cells.own().to_string();
        let others: Vec<(String, Option<CellWireRecord>)> = {
            let store = self.store.lock().expect("store lock");
            self.cells
                .names()
                .into_iter()
                .filter(|c| *c != own)
                .map(|cell| {
                    let report = cell_report(&store, &cell);
                    (cell, report)
                })
                .collect()
        };
        let builds = member_builds(&members, &others);
        let held = self.upgrade_hold().is_some();
        (assess(self.mesh_version(), &builds, held), members)
    }
}

/// Keeps `node`'s outgoing wire version at the mesh version and moves the mesh version when every
/// known member speaks the next one (this agent writes it when it is the lowest-named live member
/// of its cell that speaks it). An agent that joined through seeds or known peers (`joins`) moves
/// nothing before anti-entropy found it in sync with a live peer and [`SETTLE`] has passed: an
/// agent just restarted with a new build may not know the older members yet.
pub async fn run(node: Arc<MeshNode>, joins: bool) {
    let started = tokio::time::Instant::now();
    let mut interval = tokio::time::interval(CHECK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut published = None;
    loop {
        interval.tick().await;
        {
            let chitchat = node.gossip().chitchat();
            let mut guard = chitchat.lock().await;
            adopt_gossiped(&node, &guard);
            let running = node.mesh_version();
            if published != Some(running) {
                guard.self_node_state().set(MESH_KEY, running.to_string());
                published = Some(running);
            }
        }
        let (assessment, members) = node.upgrade_assessment().await;
        node.wire
            .store(assessment.current.min(WIRE_CUR), Ordering::Relaxed);
        if started.elapsed() < SETTLE || (joins && !node.synced_once()) {
            continue;
        }
        report_cell(&node, &members).await;
        let Some(next) = assessment.move_to else {
            continue;
        };
        let writer = members
            .iter()
            .filter(|m| m.alive && m.build().wire_max >= next)
            .map(|m| m.name.as_str())
            .min();
        if writer != Some(node.name.as_str()) {
            continue;
        }
        let body = serde_json::to_vec(&MeshVersionRecord { version: next })
            .expect("a mesh version always encodes");
        let by = format!("{} (every known member speaks wire {next})", node.name);
        match node
            .clone()
            .store_reserved(MESH_VERSION_NAME, body, by)
            .await
        {
            Ok(_) => {
                tracing::info!(from = assessment.current, to = next, "mesh version moved");
                node.mesh_version_seen.fetch_max(next, Ordering::Relaxed);
                // The writer speaks it from now, not a check interval later.
                node.wire.fetch_max(next.min(WIRE_CUR), Ordering::Relaxed);
            }
            Err(err) => tracing::warn!(error = %err.message, to = next, "mesh version not moved"),
        }
    }
}

/// The report `cell` holds in `store`, when it holds a readable one.
fn cell_report(store: &DesiredStore, cell: &str) -> Option<CellWireRecord> {
    let name = format!("{CELL_WIRE_PREFIX}{cell}");
    let body = store.get(&name).and_then(|e| e.body.live())?;
    serde_json::from_slice(body).ok()
}

/// Writes this cell's [`CellWireRecord`] when this agent is the cell's lowest-named live member,
/// other cells are known, and the stored report differs.
async fn report_cell(node: &Arc<MeshNode>, members: &[Member]) {
    let own = node.cells.own().to_string();
    if node.cells.names().iter().all(|c| *c == own) {
        return;
    }
    let writer = members
        .iter()
        .filter(|m| m.alive)
        .map(|m| m.name.as_str())
        .min();
    if writer != Some(node.name.as_str()) {
        return;
    }
    let record = CellWireRecord::of(members);
    let name = format!("{CELL_WIRE_PREFIX}{own}");
    let stored = cell_report(&node.store.lock().expect("store lock"), &own);
    if stored.as_ref() == Some(&record) {
        return;
    }
    let body = serde_json::to_vec(&record).expect("a cell report always encodes");
    let by = format!("{} (the builds of cell {own})", node.name);
    if let Err(err) = node.clone().store_reserved(name, body, by).await {
        tracing::warn!(error = %err.message, "cell build report not written");
    }
}

/// `shoal upgrade status` as this agent sees it.
pub async fn view(node: &MeshNode) -> UpgradeView {
    let (assessment, members) = node.upgrade_assessment().await;
    let mut groups: Vec<BuildGroup> = Vec::new();
    for m in members.iter() {
        let build = m.build();
        let name = if m.alive {
            m.name.clone()
        } else {
            format!("{} (dead)", m.name)
        };
        if let Some(group) = groups.iter_mut().find(|g| g.build == build) {
            group.count += 1;
            if group.members.len() < NAMES_PER_BUILD_MAX {
                group.members.push(name);
            }
        } else if groups.len() < BUILDS_MAX {
            groups.push(BuildGroup {
                build,
                count: 1,
                members: vec![name],
            });
        }
    }
    groups.sort_by(|a, b| {
        (b.build.wire_max, &b.build.version, &b.build.commit).cmp(&(
            a.build.wire_max,
            &a.build.version,
            &a.build.commit,
        ))
    });
    UpgradeView {
        agent: node.name.clone(),
        agent_build: crate::state::mesh::build::this(),
        mesh_version: assessment.current,
        placement_algorithm: shoal_core::upgrade::placement_algorithm(assessment.current),
        supported: assessment.supported,
        next: (assessment.supported > assessment.current).then_some(assessment.supported),
        hold: node.upgrade_hold(),
        builds: groups,
        waiting_for: holder_views(&assessment),
        waiting_count: assessment.waiting_count,
        too_new: assessment.too_new,
    }
}

fn holder_views(assessment: &Assessment) -> Vec<HolderView> {
    assessment
        .waiting_for
        .iter()
        .map(|h| HolderView {
            name: h.name.clone(),
            wire_max: h.wire_max,
            alive: h.alive,
        })
        .collect()
}

/// `n5 (wire 7), n3 (wire 7, dead) and 2 more`: the members holding the version back, of
/// `count` in all.
pub fn describe_holders(holders: &[HolderView], count: usize) -> String {
    let names: Vec<String> = holders
        .iter()
        .map(|h| {
            let dead = if h.alive { "" } else { ", dead" };
            format!("{} (wire {}{dead})", h.name, h.wire_max)
        })
        .collect();
    let more = count.saturating_sub(names.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("{}{more}", names.join(", "))
}

/// `shoal upgrade hold` / `release`.
pub async fn set_hold(node: Arc<MeshNode>, held: bool, by: String) -> Result<Response, ApiError> {
    let record = HoldRecord {
        held,
        by: by.clone(),
        at_ms: (node.clock)(),
    };
    let body = serde_json::to_vec(&record).expect("a hold always encodes");
    node.clone().store_reserved(HOLD_NAME, body, by).await?;
    Ok(Response::Upgrade(Box::new(view(&node).await)))
}

/// Why a spec of an apply cannot be stored at the mesh version: it sets a field that the version
/// lacks (`WorkloadSpec::fields_since`; as a backstop, it does not encode in that version's
/// layout). Names the members holding the version back and what to do.
pub async fn refusal(node: &MeshNode, spec: &shoal_core::spec::WorkloadSpec) -> Option<ApiError> {
    let mesh_version = node.mesh_version();
    let why = match shoal_core::upgrade::refuse_spec(&spec.fields_since(), mesh_version) {
        Some(refusal) => format!(
            "`{}`, of wire version {}",
            refusal.fields.join("`, `"),
            refusal.needs
        ),
        None => {
            let fits = shoal_core::version::with_layout(mesh_version, || {
                bincode::serde::encode_to_vec(spec, crate::wire::bincode_config())
            });
            fits.err()?.to_string()
        }
    };
    let (assessment, _) = node.upgrade_assessment().await;
    let holders = holder_views(&assessment);
    let held_back = if holders.is_empty() {
        match node.upgrade_hold() {
            Some(hold) => format!(
                "an operator holds it ({}; `shoal upgrade release`)",
                hold.by
            ),
            None => "it moves within seconds: apply again shortly".to_string(),
        }
    } else {
        format!(
            "held back by {}: upgrade them or, if gone for good, remove them; `shoal upgrade \
             status` shows the rest",
            describe_holders(&holders, assessment.waiting_count)
        )
    };
    Some(ApiError::new(
        ErrorKind::Invalid,
        format!(
            "{}: the spec sets a field the mesh version {mesh_version} lacks ({why}); {held_back}",
            spec.name
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bad_bodies_are_none() {
        let body = serde_json::to_vec(&MeshVersionRecord { version: 8 }).unwrap();
        assert_eq!(decode_version(Some(&body)), Some(8));
        assert_eq!(decode_version(Some(b"junk")), None);
        assert_eq!(decode_version(None), None);
        let hold = HoldRecord {
            held: true,
            by: "ops".into(),
            at_ms: 1,
        };
        let body = serde_json::to_vec(&hold).unwrap();
        assert_eq!(decode_hold(Some(&body)), Some(hold));
        let released = serde_json::to_vec(&HoldRecord {
            held: false,
            by: "ops".into(),
            at_ms: 2,
        })
        .unwrap();
        assert_eq!(decode_hold(Some(&released)), None);
    }

    #[test]
    fn other_cells_hold_the_version_at_the_oldest() {
        let builds = member_builds(&[], &[("c2".to_string(), None)]);
        assert_eq!(builds[0].name, "cell c2 (no report of its builds yet)");
        assert_eq!(builds[0].wire_max, WIRE_MIN);
        let report = CellWireRecord {
            wire_max: 8,
            wire_min: 7,
            holders: vec![],
            holders_count: 0,
        };
        let builds = member_builds(&[], &[("c2".to_string(), Some(report))]);
        assert_eq!(
            (builds[0].name.as_str(), builds[0].wire_max),
            ("cell c2", 8)
        );
        let report = CellWireRecord {
            wire_max: 7,
            wire_min: 7,
            holders: vec!["n7".into()],
            holders_count: 3,
        };
        let builds = member_builds(&[], &[("c2".to_string(), Some(report))]);
        assert_eq!(builds[0].name, "cell c2: n7 and 2 more");
    }
}
