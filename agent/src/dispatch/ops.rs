//! API operations that read or steer the host loops across the mesh: issues, approvals, events
//! and draining (status with phases is in [`super::status`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shoal_core::placement::model::ReplicaId;
use shoal_core::reconcile::{InstanceStatus, Issue};

use super::Api;
use crate::node::host::{INSTANCES_KEY, ISSUES_KEY, NAME_ISSUE_KEY};
use crate::state::mesh::skew::CLOCK_ISSUE_KEY;
use crate::state::mesh::view;
use crate::transport::rpc;
use crate::wire::api::{ApiError, ErrorKind, IssueKey, Request, Response};
use crate::wire::page;

/// Longest wait for a forwarded approve or drain.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);
/// Most events one call returns.
const EVENTS_PER_CALL_MAX: u32 = 1000;
/// Longest gossiped value decoded for status or issues, in bytes.
const GOSSIP_VALUE_BYTES_MAX: usize = 512 * 1024;

impl Api {
    /// Every node's gossiped value under `key`, decoded, by node name (newest generation).
    pub(super) async fn gossiped<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> BTreeMap<String, (bool, T)> {
        let chitchat = self.node.gossip().chitchat();
        let guard = chitchat.lock().await;
        let mut out = BTreeMap::new();
        for member in view::members(&guard, &self.node.verdicts()) {
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

    /// What this agent's cell serves, runs and claims of `replicas`, by its host loop's last
    /// placement and its cell's gossip (`Request::CellCopies`).
    pub(crate) async fn handle_cell_copies(&self, replicas: Vec<ReplicaId>) -> Response {
        let placed = self.node.cells.local().placement;
        let mut observed: BTreeMap<String, (bool, Vec<InstanceStatus>)> =
            self.gossiped(INSTANCES_KEY).await;
        if let Some(host) = &self.host {
            observed.insert(self.node.name.clone(), (true, host.observed()));
        }
        let answer =
            crate::state::cells::handoff::copies_answer(&replicas, &placed.assigned, &observed);
        Response::CellCopies(answer)
    }

    /// A page of every node's issues, by node then id, after `after`.
    pub(crate) async fn handle_issues(&self, after: Option<IssueKey>, limit: u32) -> Response {
        let issues = self
            .all_issues()
            .await
            .into_iter()
            .skip_while(|i| after.as_ref().is_some_and(|a| IssueKey::of(i) <= *a));
        let (issues, next_after) = page::take_page(issues, limit, IssueKey::of);
        Response::Issues { issues, next_after }
    }

    /// Every node's issues (as gossiped; this node's fresh), by node then id.
    async fn all_issues(&self) -> Vec<Issue> {
        let mut by_node: BTreeMap<String, (bool, Vec<Issue>)> = self.gossiped(ISSUES_KEY).await;
        if let Some(host) = &self.host {
            by_node.insert(self.node.name.clone(), (true, host.issues()));
        }
        // The mesh's own issues (clock skew) live under their own key; this node's, fresh.
        // Node names claimed by two live agents, raised by every agent that sees it.
        let mut names: BTreeMap<String, (bool, Vec<Issue>)> = self.gossiped(NAME_ISSUE_KEY).await;
        if let Some(host) = &self.host {
            names.insert(self.node.name.clone(), (true, host.name_issues()));
        }
        let mut clock: BTreeMap<String, (bool, Vec<Issue>)> = self.gossiped(CLOCK_ISSUE_KEY).await;
        let members = self.node.members().await;
        let mine = crate::state::mesh::sync::current_issue(&self.node, &members)
            .await
            .into_iter()
            .collect();
        clock.insert(self.node.name.clone(), (true, mine));
        let mut issues: Vec<Issue> = by_node
            .into_values()
            .chain(clock.into_values())
            .chain(names.into_values())
            .flat_map(|(_, list)| list)
            .collect();
        // Declarations over the mesh's capacity caps, from the membership and the store.
        let declared = members.iter().filter(|m| m.alive).filter_map(|m| {
            let r = m.record.as_ref()?;
            Some((m.name.as_str(), r.cpu_millis, r.memory_bytes))
        });
        issues.extend(self.node.caps().issues(declared, (self.node.clock)()));
        // One issue per workload some of whose replicas fit nowhere, from this agent's last
        // placement (the host loop's; an agent without one says none).
        if self.host.is_some() {
            let local = self.node.cells.local();
            let now = (self.node.clock)();
            issues.extend(
                shoal_core::placement::summary::unplaceable_all(&local.placement, &local.workloads)
                    .iter()
                    .map(|u| unplaceable_issue(u, &self.node.name, now)),
            );
        }
        issues.sort_by(|a, b| (&a.node, &a.id).cmp(&(&b.node, &b.id)));
        issues
    }

    pub(crate) async fn handle_approve(
        self: Arc<Self>,
        id: String,
        node: Option<String>,
        by: String,
    ) -> Result<Response, ApiError> {
        let target = match node {
            Some(node) => node,
            None => {
                let issues = self.all_issues().await;
                match issues.iter().find(|i| i.id == id) {
                    Some(issue) if issue.kind == shoal_core::reconcile::IssueKind::NameDisputed => {
                        return Err(ApiError::new(
                            ErrorKind::Invalid,
                            format!(
                                "issue {id} is two live agents claiming one node name: approving \
                                 cannot choose between them; stop the agent that should not run \
                                 (and revoke the node's certificate if its key was stolen)"
                            ),
                        ))
                    }
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
            host.record_asked(
                "approve",
                None,
                format!("operator approved issue {id}"),
                &by,
            );
            return Ok(Response::Approved { id, node: target });
        }
        self.forward(
            &target,
            Request::Approve {
                id,
                node: Some(target.clone()),
                by: Some(by),
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

    /// Drains or undrains this node. NodeRestriction: the caller is a client with write access,
    /// or this node's own certificate; a drain is never forwarded (a forwarding agent's node
    /// certificate would stand for the client, and a stolen node key could drain every node), so
    /// the CLI connects to the node it drains.
    pub(crate) async fn handle_drain(
        self: Arc<Self>,
        node: String,
        draining: bool,
        (role, caller): (crate::identity::pki::Role, String),
        by: String,
    ) -> Result<Response, ApiError> {
        let what = if draining { "drain" } else { "undrain" };
        if role == crate::identity::pki::Role::Node && caller != node {
            return Err(ApiError::new(
                ErrorKind::Unauthorized,
                format!(
                    "{what} of {node} needs a client certificate with write access: the node \
                     certificate of {caller} may {what} only {caller} itself (NodeRestriction)"
                ),
            ));
        }
        if node != self.node.name {
            let members = self.node.members().await;
            let at = view::live_peer_apis(&members, &self.node.name)
                .into_iter()
                .find(|(n, _)| *n == node)
                .map_or_else(|| "its API address".to_string(), |(_, a)| a.to_string());
            return Err(ApiError::new(
                ErrorKind::Invalid,
                format!(
                    "this agent is {}: a {what} is made by the node it concerns, which checks \
                     the caller's certificate itself; connect to {node} at {at} (`shoal {what}` \
                     does so since this version: update the CLI)",
                    self.node.name
                ),
            ));
        }
        {
            if !self.node.set_draining(draining).await {
                return Err(ApiError::new(
                    ErrorKind::Internal,
                    "this agent has no record to change",
                ));
            }
            tracing::info!(draining, by, "draining flag changed by an operator");
            if let Some(host) = &self.host {
                host.record_asked(what, None, format!("{what} of {node}"), &by);
            }
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
            Ok(Response::Drained { node, draining })
        }
    }

    pub(super) async fn forward(&self, node: &str, req: Request) -> Result<Response, ApiError> {
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

/// A workload's issue for its unplaceable replicas, as the agent `node` answering says it at
/// `now_ms`: one per workload, its id from the workload alone, so every agent names it alike.
fn unplaceable_issue(
    u: &shoal_core::placement::summary::Unplaceable,
    node: &str,
    now_ms: u64,
) -> Issue {
    use shoal_core::reconcile::{issue_id, IssueKind};
    let kind = IssueKind::Unplaceable;
    Issue {
        id: issue_id(kind, None, &format!("workload/{}", u.workload)),
        layer: kind.layer(),
        kind,
        replica: None,
        node: node.to_string(),
        message: format!(
            "{u}. Placement tries again whenever nodes or specs change; add nodes that can take \
             them, lower the replica count or the request, or see `shoal plan -f`"
        ),
        held: None,
        approved: false,
        since_ms: now_ms,
    }
}
