//! API operations that read or steer the host loops across the mesh: status with phases,
//! issues, approvals, events and draining.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shoal_core::placement::model::ReplicaId;
use shoal_core::reconcile::{InstanceStatus, Issue};

use super::Api;
use crate::host::{INSTANCES_KEY, ISSUES_KEY};
use crate::mesh::api::{ApiError, ErrorKind, InstanceView, Request, Response, StatusView};
use crate::mesh::skew::CLOCK_ISSUE_KEY;
use crate::mesh::view;
use crate::rpc;

/// Longest wait for a forwarded approve or drain.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);
/// Most events one call returns.
const EVENTS_PER_CALL_MAX: u32 = 1000;
/// Longest gossiped value decoded for status or issues, in bytes.
const GOSSIP_VALUE_BYTES_MAX: usize = 512 * 1024;

fn not_found(name: &str) -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("no workload named {name:?}; `shoal get` lists them"),
    )
}

impl Api {
    /// Every node's gossiped value under `key`, decoded, by node name (newest generation).
    async fn gossiped<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> BTreeMap<String, (bool, T)> {
        let chitchat = self.node.gossip().chitchat();
        let guard = chitchat.lock().await;
        let mut out = BTreeMap::new();
        for member in view::members(&guard) {
            let Some(state) = guard.node_state(&member.id) else {
                continue;
            };
            let Some(text) = state.get(key) else { continue };
            if text.len() > GOSSIP_VALUE_BYTES_MAX {
                continue;
            }
            if let Ok(value) = serde_json::from_str::<T>(text) {
                out.insert(member.name.clone(), (member.alive, value));
            }
        }
        out
    }

    /// A workload's status across the mesh: this cell's replicas from its own gossip, each other
    /// cell's asked of one of its envoys (a cell that does not answer is marked `unknown`).
    pub(crate) async fn handle_status(self: Arc<Self>, name: String) -> Result<Response, ApiError> {
        let (mut view, elsewhere) = self.clone().status_here(name.clone()).await?;
        // Every other cell at once: one that does not answer costs its contacts' timeouts, not
        // the sum over cells.
        let asks = elsewhere.keys().map(|cell| self.ask_cell(cell, &name));
        let answers = futures_util::future::join_all(asks).await;
        for ((cell, replicas), answer) in elsewhere.into_iter().zip(answers) {
            match answer {
                Ok(theirs) => {
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
                    })),
            }
        }
        view.instances.sort_by_key(|i| i.replica);
        Ok(Response::Status(view))
    }

    /// The status of `name`'s replicas placed in this agent's cell only.
    pub(crate) async fn handle_cell_status(
        self: Arc<Self>,
        name: String,
    ) -> Result<Response, ApiError> {
        let (view, _) = self.status_here(name).await?;
        Ok(Response::Status(view))
    }

    /// What this agent's cell serves, runs and claims of `replicas`, by its host loop's last
    /// placement and its cell's gossip (`Request::CellCopies`).
    pub(crate) async fn handle_cell_copies(&self, replicas: Vec<ReplicaId>) -> Response {
        let placed = self.node.cells.local().placement;
        let mut observed: BTreeMap<String, (bool, Vec<InstanceStatus>)> =
            self.gossiped(INSTANCES_KEY).await;
        if let Some(host) = &self.host {
            observed.insert(self.node.name.clone(), (true, host.observed()));
        }
        let answer = crate::cells::handoff::copies_answer(&replicas, &placed.assigned, &observed);
        Response::CellCopies(answer)
    }

    /// Asks an envoy of `cell` (the first of its contacts that answers, each given
    /// [`CELLS_CALL_TIMEOUT`](crate::cells::CELLS_CALL_TIMEOUT)) for its replicas of `name`.
    async fn ask_cell(&self, cell: &str, name: &str) -> Result<StatusView, String> {
        let req = Request::CellStatus {
            name: name.to_string(),
        };
        let accept = |answer| match answer {
            Response::Status(view) => Ok(view),
            other => Err(other),
        };
        crate::cells::exchange::ask_contacts(&self.node, cell, &req, accept).await
    }

    /// This cell's part of the status, and the replicas placed in other cells, by cell.
    async fn status_here(
        self: Arc<Self>,
        name: String,
    ) -> Result<(StatusView, BTreeMap<String, Vec<u32>>), ApiError> {
        let (specs, _) = self
            .node
            .with_store(|s| view::live_specs(s.list_live()))
            .await;
        let Some((spec, version)) = specs.iter().find(|(s, _)| s.name == name).cloned() else {
            return Err(not_found(&name));
        };
        let members = self.node.members().await;
        let nodes = view::placement_nodes(&members);
        let workloads: Vec<_> = specs
            .iter()
            .map(|(s, _)| view::placement_workload(s))
            .collect();
        let own_cell = self.node.cells.own().to_string();
        let (placed, cell_of) = match self.node.cells.placement_cells() {
            Some(cells) => {
                let mesh = shoal_core::cells::place_mesh(&own_cell, &cells, &nodes, &workloads);
                (mesh.local, Some(mesh.cells))
            }
            None => (
                shoal_core::stacking::place_stacked(&nodes, &workloads),
                None,
            ),
        };
        let mut elsewhere: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        let mut observed: BTreeMap<String, (bool, Vec<InstanceStatus>)> =
            self.gossiped(INSTANCES_KEY).await;
        if let Some(host) = &self.host {
            observed.insert(self.node.name.clone(), (true, host.observed()));
        }
        let hosts_known = !observed.is_empty();
        let mut instances = Vec::new();
        for replica in 0..spec.replicas {
            let id = ReplicaId::new(&name, replica);
            let cell = cell_of.as_ref().and_then(|c| c.assigned.get(&id));
            if let Some(cell) = cell.filter(|c| **c != own_cell) {
                elsewhere.entry(cell.clone()).or_default().push(replica);
                // A copy still running in this cell hands off to that cell's: shown beside it.
                for (node, (alive, list)) in &observed {
                    let moving = list
                        .iter()
                        .filter(|s| s.replica == id && s.may_be_alive() && *alive);
                    for status in moving {
                        instances.push(InstanceView {
                            replica,
                            node: Some(node.clone()),
                            phase: status.phase.to_string(),
                            healthy: Some(status.healthy),
                            restarts: status.restarts,
                            spec_version: Some(status.spec_version.clone()),
                            since_ms: Some(status.since_ms),
                            last_error: status.last_error.clone(),
                            reason: Some(format!("placed in cell {cell}: handing off")),
                            fence_token: status.fence_token,
                        });
                    }
                }
                continue;
            }
            let owner = placed.assigned.get(&id).cloned();
            let mut found = false;
            for (node, (alive, list)) in &observed {
                for status in list.iter().filter(|s| s.replica == id) {
                    found = true;
                    let misplaced = owner.as_deref() != Some(node.as_str());
                    // A node that is not live cannot vouch for its instances: their state is unknown.
                    let phase = if *alive {
                        status.phase.to_string()
                    } else {
                        "unknown".to_string()
                    };
                    instances.push(InstanceView {
                        replica,
                        node: Some(node.clone()),
                        phase,
                        healthy: Some(status.healthy && *alive),
                        restarts: status.restarts,
                        spec_version: Some(status.spec_version.clone()),
                        since_ms: Some(status.since_ms),
                        last_error: status.last_error.clone(),
                        reason: match (alive, misplaced) {
                            (false, _) => Some(format!("node {node} is not live")),
                            (true, true) => Some("no longer placed here: handing off".to_string()),
                            _ => None,
                        },
                        fence_token: status.fence_token,
                    });
                }
            }
            if !found {
                let reason = placed.unschedulable.get(&id).map(|u| u.to_string());
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
                });
            }
        }
        let mut notes = Vec::new();
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
        };
        Ok((view, elsewhere))
    }

    pub(crate) async fn handle_issues(self: Arc<Self>) -> Result<Response, ApiError> {
        let mut by_node: BTreeMap<String, (bool, Vec<Issue>)> = self.gossiped(ISSUES_KEY).await;
        if let Some(host) = &self.host {
            by_node.insert(self.node.name.clone(), (true, host.issues()));
        }
        // The mesh's own issues (clock skew) live under their own key; this node's, fresh.
        let mut clock: BTreeMap<String, (bool, Vec<Issue>)> = self.gossiped(CLOCK_ISSUE_KEY).await;
        let members = self.node.members().await;
        let mine = crate::mesh::sync::current_issue(&self.node, &members)
            .await
            .into_iter()
            .collect();
        clock.insert(self.node.name.clone(), (true, mine));
        let mut issues: Vec<Issue> = by_node
            .into_values()
            .chain(clock.into_values())
            .flat_map(|(_, list)| list)
            .collect();
        issues.sort_by(|a, b| (&a.node, &a.id).cmp(&(&b.node, &b.id)));
        Ok(Response::Issues(issues))
    }

    pub(crate) async fn handle_approve(
        self: Arc<Self>,
        id: String,
        node: Option<String>,
    ) -> Result<Response, ApiError> {
        let target = match node {
            Some(node) => node,
            None => {
                let Ok(Response::Issues(issues)) = self.clone().handle_issues().await else {
                    return Err(ApiError::new(ErrorKind::Internal, "cannot list issues"));
                };
                match issues.iter().find(|i| i.id == id) {
                    Some(issue) => issue.node.clone(),
                    None => {
                        return Err(ApiError::new(
                            ErrorKind::NotFound,
                            format!(
                                "no current issue has id {id}; run `shoal issues` to list them"
                            ),
                        ))
                    }
                }
            }
        };
        if target == self.node.name {
            let Some(host) = &self.host else {
                return Err(ApiError::new(
                    ErrorKind::Invalid,
                    "this agent runs no host loop",
                ));
            };
            host.approve(&id)
                .await
                .map_err(|e| ApiError::new(ErrorKind::Invalid, e.to_string()))?;
            return Ok(Response::Approved { id, node: target });
        }
        self.forward(
            &target,
            Request::Approve {
                id,
                node: Some(target.clone()),
            },
        )
        .await
    }

    pub(crate) fn handle_events(&self, after: u64, limit: u32) -> Response {
        let limit = limit.clamp(1, EVENTS_PER_CALL_MAX) as usize;
        Response::Events(
            self.host
                .as_ref()
                .map(|h| h.events_after(after, limit))
                .unwrap_or_default(),
        )
    }

    pub(crate) async fn handle_drain(
        self: Arc<Self>,
        node: String,
        draining: bool,
    ) -> Result<Response, ApiError> {
        if node == self.node.name {
            if !self.node.set_draining(draining).await {
                return Err(ApiError::new(
                    ErrorKind::Internal,
                    "this agent has no record to change",
                ));
            }
            tracing::info!(draining, "draining flag changed by an operator");
            if let Err(e) = self.node.persist_draining(draining) {
                return Err(ApiError::new(
                    ErrorKind::Internal,
                    format!(
                        "the draining flag is {} but could not be saved in the data directory \
                         ({e}): an agent restart would forget it",
                        if draining { "set" } else { "cleared" }
                    ),
                ));
            }
            return Ok(Response::Drained { node, draining });
        }
        self.forward(
            &node,
            Request::Drain {
                node: node.clone(),
                draining,
            },
        )
        .await
    }

    async fn forward(&self, node: &str, req: Request) -> Result<Response, ApiError> {
        let members = self.node.members().await;
        let Some((_, addr)) = view::live_peer_apis(&members, &self.node.name)
            .into_iter()
            .find(|(n, _)| n == node)
        else {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!("node {node:?} is not live here; `shoal nodes` lists the members"),
            ));
        };
        rpc::call_with(self.node.rpc.as_ref(), addr, node, &req, FORWARD_TIMEOUT)
            .await
            .map_err(|e| {
                ApiError::new(
                    ErrorKind::Internal,
                    format!("forwarding to {node} failed: {e}"),
                )
            })
    }
}
