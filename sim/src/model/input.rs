//! One host's `ReconcileInput`, restricted to what concerns it so that a round costs what the
//! host's slice costs, not what the mesh costs.
//!
//! The replicas that concern a host are those its view places on it, those its runtime holds and
//! those its last observed state mentions (a start in flight). The input holds:
//! - `owners`: the owner of each of those replicas in the host's view;
//! - `peers`: the visible published state (gossip delay) of every other host that owns one of
//!   them in this view or published a status of one of them;
//! - `membership`: the host itself and those peers as live unless its view holds them dead,
//!   and every host its view holds dead (the exclusive rule waits for the fencing delay of any
//!   dead member, not only the old owner's). `members_known` is chosen so that
//!   `Membership::has_majority` answers as it would with the whole mesh listed: the model has no
//!   partitions, so a host sees a majority when its view holds fewer than half the mesh dead.
//!   Only counts in the reconciler's messages differ from a full view;
//! - `instances`: the host's own runtime list; `specs`: its spec epoch; `capacity`: the mesh's.
//!
//! In a mesh of cells, as an agent of a cell sees it: `owners` and `peers` of its own cell only,
//! `membership` over its cell (the majority is its cell's) with the cells' quorum from the cells
//! its view holds down, and `moved_to_cells` for the instances it runs that the cell level moved
//! to another cell, serving once a copy there has been ready for `cell_ask_ms` (the agents ask
//! the other cell; the model reads the truth, delayed).
//!
//! What the restriction changes: a rolling update's budget (`Availability`) would count only the
//! peers listed here; the model applies specs only as the scenario's initial applies, so no
//! update runs.

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::instance::{ReplicaId, RuntimeInstance};
use shoal_core::reconcile::{CellHandoff, CellQuorum, Membership, ReconcileInput};
use shoal_core::Resources;

use super::gossip::Gossip;
use super::views::{Epoch, ViewPlacement, Views};

/// What the model knows of one host that its input needs.
pub(super) struct HostState<'a> {
    /// Host index.
    pub index: u32,
    /// Its cell (`None` without cells).
    pub cell: Option<u32>,
    /// The hosts its view holds dead.
    pub dead: &'a BTreeSet<u32>,
    /// The cells its view holds down, with when it learned each.
    pub down_cells: &'a BTreeMap<u32, u64>,
    /// Its runtime's instances, by handle.
    pub runtime: &'a BTreeMap<String, RuntimeInstance>,
    /// Replicas its last observed state mentioned.
    pub claims: &'a [ReplicaId],
}

/// The mesh-wide facts every input reads.
pub(super) struct Mesh<'a> {
    /// Host names by index.
    pub names: &'a [String],
    /// Published observed states.
    pub gossip: &'a Gossip,
    /// Every host's declared capacity.
    pub capacity: Resources,
    /// The cells, and their members.
    pub views: &'a Views,
    /// The truth: alive copies of each replica, host to when it became ready.
    pub copies: &'a BTreeMap<ReplicaId, BTreeMap<u32, u64>>,
    /// How long after a copy in another cell became ready its cell answers it serving.
    pub cell_ask_ms: u64,
}

/// Builds host `host`'s input at `now` from its view's placement and spec epoch, with the time
/// a handoff to another cell will show serving, if one is waiting for that.
pub(super) fn build(
    host: &HostState<'_>,
    view: &ViewPlacement,
    epoch: &Epoch,
    mesh: &Mesh<'_>,
    now: u64,
) -> (ReconcileInput, Option<u64>) {
    let h = host.index;
    let mut replicas: BTreeSet<&ReplicaId> = BTreeSet::new();
    replicas.extend(view.by_host.get(&h).into_iter().flatten());
    replicas.extend(host.runtime.values().map(|i| &i.replica));
    replicas.extend(host.claims);
    let mut owners = BTreeMap::new();
    let mut concerned: BTreeSet<u32> = BTreeSet::new();
    for r in replicas {
        if let Some(&o) = view.owners.get(r) {
            owners.insert(r.clone(), mesh.names[o as usize].clone());
            concerned.insert(o);
        }
        concerned.extend(mesh.gossip.reporters(r));
    }
    concerned.remove(&h);
    // An agent sees the members of its own cell only.
    concerned.retain(|p| mesh.views.cell_of(*p) == host.cell);
    let mut live = BTreeSet::from([mesh.names[h as usize].clone()]);
    let mut peers = BTreeMap::new();
    for p in concerned {
        let name = &mesh.names[p as usize];
        if !host.dead.contains(&p) {
            live.insert(name.clone());
        }
        if let Some(s) = mesh.gossip.visible(p, now) {
            peers.insert(name.clone(), s.to_vec());
        }
    }
    let dead: BTreeSet<String> = host
        .dead
        .iter()
        .map(|d| mesh.names[*d as usize].clone())
        .collect();
    let cell_size = match host.cell {
        Some(c) => mesh.views.members(c).len(),
        None => mesh.names.len(),
    };
    let members_known = members_known(cell_size, host.dead.len(), live.len());
    let cells = host.cell.map(|_| {
        let known = mesh.views.cell_count() as usize;
        CellQuorum {
            known,
            with_us: known - host.down_cells.len(),
            incomplete: None,
            newest_down_ms: host.down_cells.values().max().map(|t| now - t),
        }
    });
    let (moved_to_cells, wake) = moved_to_cells(host, view, mesh, &owners, now);
    // The model's gossip is symmetric: every live peer in this host's view hears it.
    let heard_at = live.iter().map(|n| (n.clone(), now)).collect();
    let input = ReconcileInput {
        specs: epoch.entries.clone(),
        owners,
        instances: host.runtime.values().cloned().collect(),
        runtime_unavailable: None,
        exclusive_guard_unavailable: None,
        name_hold: Default::default(),
        moved_to_cells,
        cell_copies: BTreeMap::new(),
        supports_containers: true,
        supports_processes: true,
        peers,
        // The model's runtime starts at once: it never pulls.
        pulling: BTreeMap::new(),
        membership: Membership {
            live,
            dead,
            unreachable: BTreeSet::new(),
            members_known,
            heard_at,
            leased_at: BTreeMap::new(),
            cells,
        },
        draining: false,
        capacity: Some(mesh.capacity),
        view_suspect: None,
        // The model's store has no tombstones: an empty view stays suspicious, as it should
        // for a store that lost its specs.
        deleted: BTreeSet::new(),
        // The model tier keeps no data: its workloads have no volumes.
        data_holders: BTreeMap::new(),
        data_missing: BTreeMap::new(),
        past_specs: BTreeMap::new(),
        // The model's time stands in for every host's wall clock.
        fence_token_floor: now,
        // The model's specs have no host paths.
        volume_roots: Vec::new(),
    };
    (input, wake)
}

/// The instances host `host` runs whose replica the cell level of its view placed in another
/// cell, each serving there once a copy in that cell has been ready `cell_ask_ms`; and when the
/// next of those not serving yet will be.
fn moved_to_cells(
    host: &HostState<'_>,
    view: &ViewPlacement,
    mesh: &Mesh<'_>,
    owners: &BTreeMap<ReplicaId, String>,
    now: u64,
) -> (BTreeMap<ReplicaId, CellHandoff>, Option<u64>) {
    let mut moved = BTreeMap::new();
    let mut wake: Option<u64> = None;
    let Some(level) = &view.level else {
        return (moved, wake);
    };
    for i in host.runtime.values().filter(|i| i.phase.may_be_alive()) {
        let r = &i.replica;
        if owners.contains_key(r) || moved.contains_key(r) {
            continue;
        }
        let Some(cell) = level.assigned.get(r) else {
            continue;
        };
        let ready = mesh
            .copies
            .get(r)
            .into_iter()
            .flatten()
            .filter(|(h, _)| mesh.views.cell_of(**h).map(|c| mesh.views.cell_name(c)) == Some(cell))
            .map(|(_, at)| at + mesh.cell_ask_ms)
            .min();
        let serving = ready.is_some_and(|at| at <= now);
        if let Some(at) = ready.filter(|at| *at > now) {
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        let handoff = CellHandoff {
            cell: cell.clone(),
            serving,
        };
        moved.insert(r.clone(), handoff);
    }
    (moved, wake)
}

/// `members_known` for a membership listing `listed` live hosts (this one included) of a mesh of
/// `mesh_size` hosts whose view holds `dead` dead: `Membership::has_majority` then answers as it
/// would with every host listed (live = `mesh_size - dead`, known = `mesh_size`).
fn members_known(mesh_size: usize, dead: usize, listed: usize) -> usize {
    let majority = 2 * (mesh_size - dead) > mesh_size;
    if majority {
        listed
    } else {
        2 * listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_matches_the_full_view() {
        for (mesh_size, dead) in [(10usize, 4usize), (10, 5), (10, 6), (3, 1), (3, 2), (1, 0)] {
            let full = Membership {
                live: (dead..mesh_size).map(|i| format!("n{i}")).collect(),
                members_known: mesh_size,
                ..Membership::default()
            };
            let me = format!("n{}", mesh_size - 1);
            for listed in 1..=(mesh_size - dead) {
                let known = members_known(mesh_size, dead, listed);
                let restricted = Membership {
                    live: (mesh_size - listed..mesh_size)
                        .map(|i| format!("n{i}"))
                        .collect(),
                    members_known: known,
                    ..Membership::default()
                };
                assert_eq!(
                    restricted.has_majority(&me),
                    full.has_majority(&me),
                    "{mesh_size} hosts, {dead} dead, {listed} listed"
                );
            }
        }
    }
}
