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
//! What the restriction changes: a rolling update's budget (`Availability`) would count only the
//! peers listed here; the model applies specs only as the scenario's initial applies, so no
//! update runs.

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::instance::{ReplicaId, RuntimeInstance};
use shoal_core::reconcile::{Membership, ReconcileInput};
use shoal_core::Resources;

use super::gossip::Gossip;
use super::views::{Epoch, ViewPlacement};

/// What the model knows of one host that its input needs.
pub(super) struct HostState<'a> {
    /// Host index.
    pub index: u32,
    /// The hosts its view holds dead.
    pub dead: &'a BTreeSet<u32>,
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
}

/// Builds host `host`'s input at `now` from its view's placement and spec epoch.
pub(super) fn build(
    host: &HostState<'_>,
    view: &ViewPlacement,
    epoch: &Epoch,
    mesh: &Mesh<'_>,
    now: u64,
) -> ReconcileInput {
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
    let members_known = members_known(mesh.names.len(), host.dead.len(), live.len());
    // The model's gossip is symmetric: every live peer in this host's view hears it.
    let heard_at = live.iter().map(|n| (n.clone(), now)).collect();
    ReconcileInput {
        specs: epoch.entries.clone(),
        owners,
        instances: host.runtime.values().cloned().collect(),
        runtime_unavailable: None,
        exclusive_guard_unavailable: None,
        moved_to_cells: BTreeMap::new(),
        cell_copies: BTreeMap::new(),
        supports_containers: true,
        supports_processes: true,
        peers,
        membership: Membership {
            live,
            dead,
            unreachable: BTreeSet::new(),
            members_known,
            heard_at,
            cells: None,
        },
        draining: false,
        capacity: Some(mesh.capacity),
        view_suspect: None,
        // The model's time stands in for every host's wall clock.
        fence_token_floor: now,
    }
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
