//! `status`: where a workload's replicas are and how they run, wherever they run, a page of
//! replicas at a time. Ten thousand replicas with a 256-byte last error each take more than a
//! frame, so a page covers a window of replica indices (at most [`PAGE_ITEMS_MAX`]) and ends at
//! a whole replica within the page budget ([`crate::wire::page`]). The agent asked answers its
//! own cell's replicas of the window from its gossip and asks one envoy of each other cell
//! holding some for the same window; when an envoy's page ends early, so does the answer.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use shoal_core::placement::model::{Placement, ReplicaId};
use shoal_core::reconcile::InstanceStatus;
use shoal_core::spec::WorkloadSpec;

use super::Api;
use crate::node::host::INSTANCES_KEY;
use crate::state::mesh::view;
use crate::wire::api::{ApiError, ErrorKind, InstanceView, Request, Response, StatusView};
use crate::wire::page::{self, PAGE_ITEMS_MAX};

/// Most notes in one page (one per node with instances in it that has one).
const NOTES_MAX: usize = 64;
/// Longest note, in bytes (a node's record may carry up to 16 KiB).
const NOTE_BYTES_MAX: usize = 512;

/// Observed instances by node name, with whether the node is live.
type Observed = BTreeMap<String, (bool, Vec<InstanceStatus>)>;

fn not_found(name: &str) -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("no workload named {name:?}; `shoal get` lists them"),
    )
}

/// The replicas a page asked for `after` and `limit` covers, before the workload's own bound.
fn window(after: Option<u32>, limit: u32) -> Range<u32> {
    let first = after.map_or(0, |a| a.saturating_add(1));
    first..first.saturating_add(page::items_max(limit) as u32)
}

impl Api {
    /// A page of a workload's status across the mesh: this cell's replicas from its own gossip,
    /// each other cell's asked of one of its envoys (a cell that does not answer is marked
    /// `unknown`).
    pub(crate) async fn handle_status(
        self: Arc<Self>,
        name: String,
        after: Option<u32>,
        limit: u32,
    ) -> Result<Response, ApiError> {
        let asked = window(after, limit);
        let (mut view, elsewhere) = self
            .clone()
            .status_here(name.clone(), asked.clone())
            .await?;
        let mut covered = asked.end.min(view.desired);
        // Every other cell at once: one that does not answer costs its contacts' timeouts, not
        // the sum over cells.
        let asks = elsewhere
            .keys()
            .map(|cell| self.ask_cell(cell, &name, after, limit));
        let answers = futures_util::future::join_all(asks).await;
        for ((cell, replicas), answer) in elsewhere.into_iter().zip(answers) {
            match answer {
                Ok((theirs, next_after)) => {
                    // That cell's page ended early: so does this one.
                    // (Never before the first replica asked: each page makes progress.)
                    if let Some(last) = next_after {
                        covered =
                            covered.min(last.saturating_add(1).max(asked.start.saturating_add(1)));
                    }
                    view.instances.extend(
                        theirs
                            .instances
                            .into_iter()
                            .filter(|i| replicas.contains(&i.replica)),
                    );
                    view.notes.extend(theirs.notes);
                }
                Err(why) => view
                    .instances
                    .extend(replicas.iter().map(|&replica| InstanceView {
                        replica,
                        node: None,
                        phase: "unknown".to_string(),
                        healthy: None,
                        restarts: 0,
                        spec_version: None,
                        since_ms: None,
                        last_error: None,
                        reason: Some(format!(
                            "placed in cell {cell}, which did not answer: {why}"
                        )),
                        fence_token: None,
                        pull: None,
                        data_on: None,
                    })),
            }
        }
        view.instances.retain(|i| i.replica < covered);
        view.instances.sort_by_key(|i| i.replica);
        let next_after = end_page(&mut view, covered);
        Ok(Response::Status {
            view: Box::new(view),
            next_after,
        })
    }

    /// A page of the status of `name`'s replicas placed in this agent's cell only.
    pub(crate) async fn handle_cell_status(
        self: Arc<Self>,
        name: String,
        after: Option<u32>,
        limit: u32,
    ) -> Result<Response, ApiError> {
        let asked = window(after, limit);
        let (mut view, _) = self.status_here(name, asked.clone()).await?;
        let covered = asked.end.min(view.desired);
        let next_after = end_page(&mut view, covered);
        Ok(Response::Status {
            view: Box::new(view),
            next_after,
        })
    }

    /// Asks an envoy of `cell` (the first of its contacts that answers, each given
    /// [`CELLS_CALL_TIMEOUT`](crate::state::cells::CELLS_CALL_TIMEOUT)) for its replicas of `name` in
    /// the same page.
    async fn ask_cell(
        &self,
        cell: &str,
        name: &str,
        after: Option<u32>,
        limit: u32,
    ) -> Result<(StatusView, Option<u32>), String> {
        let req = Request::CellStatus {
            name: name.to_string(),
            after,
            limit,
        };
        let accept = |answer| match answer {
            Response::Status { view, next_after } => Ok((*view, next_after)),
            other => Err(other),
        };
        crate::state::mesh::cell_exchange::ask_contacts(&self.node, cell, &req, accept).await
    }

    /// This cell's part of the status for the replicas in `asked`, and those of them placed in
    /// other cells, by cell.
    async fn status_here(
        self: Arc<Self>,
        name: String,
        asked: Range<u32>,
    ) -> Result<(StatusView, BTreeMap<String, Vec<u32>>), ApiError> {
        let ((specs, _), (holders, _)) = self
            .node
            .with_store(|s| {
                let holders = crate::state::mesh::data::holders(s.core().iter());
                (view::live_specs(s.list_live()), holders)
            })
            .await;
        let Some((spec, version)) = specs.iter().find(|(s, _)| s.name == name).cloned() else {
            return Err(not_found(&name));
        };
        let members = self.node.members().await;
        let own_cell = self.node.cells.own().to_string();
        let mut summary = None;
        let specs_only: Vec<&WorkloadSpec> = specs.iter().map(|(s, _)| s).collect();
        let (placed, cell_of) = match self.last_placement_of(&spec, &holders) {
            Some(placed) => (placed, None),
            None => {
                let (placed, cells) = self.placement_of(&members, &specs_only, &holders);
                (Arc::new(placed), cells)
            }
        };
        if asked.start == 0 {
            // The first page says first how much of the workload fits, and why not the rest.
            summary = shoal_core::placement::summary::unplaceable(&placed, &name, spec.replicas)
                .map(|u| u.to_string());
        }
        let mut elsewhere: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        let mut observed: Observed = self.gossiped(INSTANCES_KEY).await;
        if let Some(host) = &self.host {
            observed.insert(self.node.name.clone(), (true, host.observed()));
        }
        let hosts_known = !observed.is_empty();
        let mut instances = Vec::new();
        for replica in asked.start..asked.end.min(spec.replicas) {
            let id = ReplicaId::new(&name, replica);
            let cell = cell_of.as_ref().and_then(|c| c.assigned.get(&id));
            if let Some(cell) = cell.filter(|c| **c != own_cell) {
                elsewhere.entry(cell.clone()).or_default().push(replica);
                instances.extend(handing_off(&id, cell, &observed));
                continue;
            }
            let owner = placed.assigned.get(&id).cloned();
            // A replica no cell took has the cell level's reason (no cell up, or none whose
            // members can run it); the node level never saw it.
            let unplaced = placed
                .unschedulable
                .get(&id)
                .map(|u| u.to_string())
                .or_else(|| {
                    let level = cell_of.as_ref()?;
                    level.unschedulable.get(&id).map(|u| u.to_string())
                });
            let before = instances.len();
            instances.extend(observed_here(
                &id,
                owner.as_deref(),
                unplaced.as_deref(),
                &observed,
            ));
            if instances.len() == before {
                let reason = unplaced;
                let phase = match (&owner, hosts_known) {
                    (None, _) => "unschedulable",
                    (Some(_), true) => "pending",
                    (Some(_), false) => "assigned",
                };
                instances.push(InstanceView {
                    replica,
                    node: owner,
                    phase: phase.to_string(),
                    healthy: None,
                    restarts: 0,
                    spec_version: None,
                    since_ms: None,
                    last_error: None,
                    reason,
                    fence_token: None,
                    pull: None,
                    data_on: None,
                });
            }
        }
        if spec.keeps_replica_data() {
            for i in &mut instances {
                let id = ReplicaId::new(&name, i.replica);
                i.data_on = holders.get(&id).cloned();
            }
        }
        let mut notes = Vec::new();
        if let Some(why) = self.node.cells.holds_placement() {
            notes.push(format!(
                "this agent holds its placement ({why}): it starts and stops nothing, and shows \
                 where its view of the cells would place the replicas"
            ));
        }
        for member in members.iter() {
            let here = instances
                .iter()
                .any(|i| i.node.as_deref() == Some(member.name.as_str()));
            if let (true, Some(note)) = (
                here,
                member.record.as_ref().and_then(|r| r.limits_note.clone()),
            ) {
                notes.push(format!("{}: {note}", member.name));
            }
        }
        let view = StatusView {
            name,
            desired: spec.replicas,
            version,
            instances,
            notes,
            fit: summary,
        };
        Ok((view, elsewhere))
    }
}

impl Api {
    /// Says of each applied workload how much of it fits, when some replicas fit nowhere (`only
    /// 6 of 10000 replicas of big fit: ...`), from the placement every agent computes with the
    /// store as it is after the write.
    pub(super) async fn fit_notes(
        &self,
        mut applied: Vec<crate::wire::api::Applied>,
    ) -> Vec<crate::wire::api::Applied> {
        let ((specs, _), holders) = self
            .node
            .with_store(|s| {
                let holders = crate::state::mesh::data::holders(s.core().iter()).0;
                (view::live_specs(s.list_live()), holders)
            })
            .await;
        let members = self.node.members().await;
        let refs: Vec<&WorkloadSpec> = specs.iter().map(|(s, _)| s).collect();
        let (placed, _) = self.placement_of(&members, &refs, &holders);
        for a in &mut applied {
            let Some(spec) = refs.iter().find(|s| s.name == a.name) else {
                continue;
            };
            if let Some(u) =
                shoal_core::placement::summary::unplaceable(&placed, &a.name, spec.replicas)
            {
                a.note = Some(match a.note.take() {
                    Some(note) => format!("{note}; {u}"),
                    None => u.to_string(),
                });
            }
        }
        applied
    }

    /// The host loop's last placement, when it placed `spec` as it stands (the same workload,
    /// with the same data holders) in a mesh of one cell: what this agent acts on, read without
    /// placing every workload again (a full placement of 100,000 replicas takes most of a
    /// second). None otherwise (no host loop, cells, or a spec the loop has not seen yet).
    fn last_placement_of(
        &self,
        spec: &WorkloadSpec,
        holders: &BTreeMap<ReplicaId, String>,
    ) -> Option<Arc<Placement>> {
        if self.host.is_none() || self.node.cells.adopted().cells.is_some() {
            return None;
        }
        let local = self.node.cells.local();
        let now = view::placement_workload_held(spec, holders, self.node.placement_algorithm());
        local.workloads.contains(&now).then_some(local.placement)
    }

    /// The placement every agent of this cell computes now for these specs (this cell's part,
    /// and in a mesh of cells which cell each replica went to), from the members and the data
    /// holders, at the mesh version's placement algorithm.
    pub(super) fn placement_of(
        &self,
        members: &[crate::state::mesh::view::Member],
        specs: &[&WorkloadSpec],
        holders: &BTreeMap<ReplicaId, String>,
    ) -> (Placement, Option<shoal_core::cells::CellPlacement>) {
        let nodes = view::placement_nodes(
            members,
            &self.node.caps(),
            (self.node.clock)(),
            self.node.placement_terms(),
        );
        let algorithm = self.node.placement_algorithm();
        let workloads: Vec<_> = specs
            .iter()
            .map(|s| view::placement_workload_held(s, holders, algorithm))
            .collect();
        let own_cell = self.node.cells.own().to_string();
        // An agent places over the view of the cells its host loop adopted (it waits for a new
        // view to stand, up to 3 s: `CellsSettle`), so that is what its status shows; without a
        // host loop, over its cells' table as it is.
        let cells = match self.host {
            Some(_) => self.node.cells.adopted().cells.map(|c| c.as_ref().clone()),
            None => self.node.cells.placement_cells(),
        };
        match cells {
            Some(cells) => {
                let mesh = shoal_core::cells::place_mesh(&own_cell, &cells, &nodes, &workloads);
                (mesh.local, Some(mesh.cells))
            }
            None => (
                shoal_core::stacking::place_stacked(&nodes, &workloads),
                None,
            ),
        }
    }
}

/// The copies of `id` still running in this cell while it is placed in `cell`: each hands off to
/// that cell's copy, shown beside it.
fn handing_off(id: &ReplicaId, cell: &str, observed: &Observed) -> Vec<InstanceView> {
    let mut out = Vec::new();
    for (node, (alive, list)) in observed {
        let moving = list
            .iter()
            .filter(|s| s.replica == *id && s.may_be_alive() && *alive);
        for status in moving {
            out.push(InstanceView {
                replica: id.replica,
                node: Some(node.clone()),
                phase: status.phase.to_string(),
                healthy: Some(status.healthy),
                restarts: status.restarts,
                spec_version: Some(status.spec_version.clone()),
                since_ms: Some(status.since_ms),
                last_error: status.last_error.clone(),
                reason: Some(format!("placed in cell {cell}: handing off")),
                fence_token: status.fence_token,
                pull: status.pull.clone(),
                data_on: None,
            });
        }
    }
    out
}

/// Every instance of `id` this cell's nodes report, `owner` being where placement puts it.
/// `unplaced`: why the replica has no node, when it has none (said of its running copies too).
fn observed_here(
    id: &ReplicaId,
    owner: Option<&str>,
    unplaced: Option<&str>,
    observed: &Observed,
) -> Vec<InstanceView> {
    let mut out = Vec::new();
    for (node, (alive, list)) in observed {
        for status in list.iter().filter(|s| s.replica == *id) {
            let misplaced = owner != Some(node.as_str());
            // A node that is not live cannot vouch for its instances: their state is unknown.
            let phase = if *alive {
                status.phase.to_string()
            } else {
                "unknown".to_string()
            };
            out.push(InstanceView {
                replica: id.replica,
                node: Some(node.clone()),
                phase,
                healthy: Some(status.healthy && *alive),
                restarts: status.restarts,
                spec_version: Some(status.spec_version.clone()),
                since_ms: Some(status.since_ms),
                last_error: status.last_error.clone(),
                reason: match (alive, misplaced, unplaced) {
                    (false, _, Some(why)) => Some(format!(
                        "node {node} is not live; placed on no node ({why})"
                    )),
                    (false, _, None) => Some(format!("node {node} is not live")),
                    (true, true, Some(why)) => Some(format!(
                        "placed on no node ({why}); this copy keeps running while it is healthy"
                    )),
                    (true, true, None) => Some("no longer placed here: handing off".to_string()),
                    _ => None,
                },
                fence_token: status.fence_token,
                pull: status.pull.clone(),
                data_on: None,
            });
        }
    }
    out
}

/// Ends `view` (its instances sorted by replica, all below `covered`) at a whole replica within
/// the page budget, bounds its notes, and returns the last replica of the page when more of the
/// workload's follow.
fn end_page(view: &mut StatusView, covered: u32) -> Option<u32> {
    let mut groups: Vec<Vec<InstanceView>> = Vec::new();
    for instance in std::mem::take(&mut view.instances) {
        match groups.last_mut() {
            Some(group) if group[0].replica == instance.replica => group.push(instance),
            _ => groups.push(vec![instance]),
        }
    }
    // At most PAGE_ITEMS_MAX replicas were asked: only the byte budget can end the page here.
    let (groups, cut) = page::take_page(groups, PAGE_ITEMS_MAX, |g| g[0].replica);
    view.instances = groups.into_iter().flatten().collect();
    let mut notes = std::mem::take(&mut view.notes);
    notes.sort();
    notes.dedup();
    view.notes = notes
        .into_iter()
        .filter(|n| {
            let node = n.split(": ").next();
            view.instances.iter().any(|i| i.node.as_deref() == node)
        })
        .take(NOTES_MAX)
        .map(|n| page::cut_text(n, NOTE_BYTES_MAX))
        .collect();
    cut.or_else(|| (covered < view.desired).then(|| covered - 1))
}
