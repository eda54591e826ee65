//! The API: one request from the CLI or a peer in, one response out. [`Api`] holds the parts a
//! request may need (the mesh node for the store and gossip, the host for this node's instances,
//! issues and events) and depends on them; neither knows the API.
//!
//! Writes and the store's sync requests are the node's ([`MeshNode`]); reads of the host loops
//! across the mesh (issues, approve, events, drain) are in [`ops`], status in [`status`]; the
//! membership and cells lists, a page at a time, in [`pages`].

mod endpoints;
mod exec;
mod history;
mod logs;
mod ops;
mod pages;
mod plan;
mod restart;
pub mod roles;
mod root;
mod status;

use std::sync::Arc;

use crate::identity::pki::Role;
use crate::identity::tls::Peer;
use crate::node::host::Host;
use crate::state::mesh::node::{MeshNode, PULL_PAGE_BYTES};
use crate::transport::rpc;
use crate::wire::api::{Request, Response};

/// Answers API requests for one agent.
pub struct Api {
    node: Arc<MeshNode>,
    host: Option<Arc<Host>>,
    /// The exec sessions running on this node.
    exec: Arc<crate::node::exec::Sessions>,
}

impl Api {
    /// The API of `node`, answering for its host when it has one (an agent without a host loop
    /// answers store and membership requests only).
    pub fn new(node: Arc<MeshNode>, host: Option<Arc<Host>>) -> Arc<Api> {
        Arc::new(Api {
            node,
            host,
            exec: crate::node::exec::Sessions::new(),
        })
    }

    /// The node it serves.
    pub fn node(&self) -> &Arc<MeshNode> {
        &self.node
    }

    /// The handler to serve on the API address.
    pub fn handler(self: &Arc<Self>) -> rpc::Handler<Request, Response> {
        let api = self.clone();
        Arc::new(move |req, peer| {
            let api = api.clone();
            Box::pin(async move { api.handle_request(req, peer).await })
        })
    }

    /// Answers one API request from `peer`, if its role allows it (a refusal is counted and
    /// logged with the peer's name and role).
    pub async fn handle_request(self: Arc<Self>, req: Request, peer: Peer) -> Response {
        let kind = request_kind(&req);
        tracing::debug!(%peer, kind, "API request");
        let needs = roles::needs(&req);
        if !roles::allows(peer.role, needs) {
            self.node.authority.count_unauthorized();
            tracing::warn!(%peer, kind, "API request refused: role");
            return Response::Error(crate::wire::api::ApiError::new(
                crate::wire::api::ErrorKind::Unauthorized,
                roles::refusal(peer.role, needs, kind),
            ));
        }
        // Who asked: the certificate, or for an agent forwarding a client's request, that client.
        let asked_by = |by: Option<String>| match (peer.role, by) {
            (Role::Node, Some(by)) => format!("{by} via {}", peer.name),
            _ => format!("{} ({})", peer.name, peer.role),
        };
        let peer_name = peer.name.clone();
        let node = self.node.clone();
        let result = match req {
            Request::Apply { specs } => {
                if let Some(refusal) = self.host_path_refused(&specs).await {
                    return Response::Error(refusal);
                }
                if let Some(refusal) = self.root_refused(&specs).await {
                    return Response::Error(refusal);
                }
                for spec in &specs {
                    if let Some(refusal) = crate::state::mesh::upgrade::refusal(&node, spec).await {
                        return Response::Error(refusal);
                    }
                }
                let by = asked_by(None);
                let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
                let result = node
                    .handle_apply(specs, by.clone(), self.assessed_complete())
                    .await;
                self.record_write("apply", &names, &result, &by);
                match result {
                    Ok(Response::Applied(applied)) => {
                        Ok(Response::Applied(self.fit_notes(applied).await))
                    }
                    other => other,
                }
            }
            Request::Delete { name, purge_data } => {
                let by = asked_by(None);
                let result = node
                    .handle_delete(name.clone(), purge_data, by.clone())
                    .await;
                self.record_write("delete", &[name], &result, &by);
                result
            }
            Request::Get { name } => node.handle_get(name, false).await,
            Request::GetSecrets { name, .. } => {
                let by = asked_by(None);
                let result = node.clone().handle_get(name.clone(), true).await;
                if let (Ok(_), Some(host)) = (&result, &self.host) {
                    tracing::info!(workload = %name, by = %by, "secret values shown");
                    host.record_asked(
                        "show-secrets",
                        None,
                        format!("the secret values of {name} were shown"),
                        &by,
                    );
                }
                result
            }
            Request::List { after, limit } => node.handle_list(after, limit).await,
            Request::Nodes { after, limit } => Ok(self.handle_nodes(after, limit).await),
            Request::Status { name, after, limit } => {
                self.clone().handle_status(name, after, limit).await
            }
            Request::SetCaps { caps } => {
                let by = asked_by(None);
                let body = caps.encode();
                let name = crate::identity::authority::caps::STORE_NAME;
                let result = node.clone().store_reserved(name, body, by.clone()).await;
                if let (Ok(_), Some(host)) = (&result, &self.host) {
                    host.record_asked("set-caps", None, format!("capacity caps {caps:?}"), &by);
                }
                result.map(|_| Response::Caps(caps))
            }
            Request::Caps => Ok(Response::Caps(node.caps())),
            Request::Plan { specs, .. } => Ok(self.handle_plan(specs).await),
            Request::UpgradeStatus { .. } => Ok(Response::Upgrade(Box::new(
                crate::state::mesh::upgrade::view(&node).await,
            ))),
            Request::UpgradeHold { held, .. } => {
                let by = asked_by(None);
                let result =
                    crate::state::mesh::upgrade::set_hold(node.clone(), held, by.clone()).await;
                if let (Ok(_), Some(host)) = (&result, &self.host) {
                    let what = if held {
                        "upgrade-hold"
                    } else {
                        "upgrade-release"
                    };
                    host.record_asked(what, None, format!("mesh version {what}"), &by);
                }
                result
            }
            Request::History { name } => history::versions(&node, self.host.as_deref(), name).await,
            Request::Endpoints { name } => self.handle_endpoints(&name),
            Request::Logs {
                workload,
                replica,
                previous,
                query,
            } => self.handle_logs(workload, replica, previous, query).await,
            Request::LogsHere {
                replica,
                previous,
                query,
            } => self.handle_logs_here(replica, previous, query).await,
            Request::Restart { workload, replica } => {
                let by = asked_by(None);
                match replica {
                    None => {
                        let complete = self.assessed_complete();
                        let result =
                            restart::workload(&node, workload.clone(), by.clone(), complete).await;
                        self.record_write("restart", &[workload], &result, &by);
                        result
                    }
                    Some(index) => self.handle_restart(workload, index, by).await,
                }
            }
            Request::RestartHere { replica, by } => {
                self.handle_restart_here(replica, asked_by(Some(by))).await
            }
            Request::Pause { name, paused } => {
                let by = asked_by(None);
                let result = history::pause(&node, name.clone(), paused, by.clone()).await;
                let kind = if paused { "pause" } else { "resume" };
                self.record_write(kind, &[name], &result, &by);
                result
            }
            Request::Undo { name, to } => {
                let by = asked_by(None);
                let complete = self.assessed_complete();
                let result = history::undo(&node, name.clone(), to, by.clone(), complete).await;
                self.record_write("undo", &[name], &result, &by);
                result
            }
            Request::PublishCrl { der } => {
                let by = asked_by(None);
                self.handle_publish_crl(der, by).await
            }
            Request::Replicate { entries } => node.handle_replicate(entries, &peer_name.0).await,
            Request::Issues { after, limit } => Ok(self.handle_issues(after, limit).await),
            Request::Approve { id, node, by } => self.handle_approve(id, node, asked_by(by)).await,
            Request::Events { after, limit } => Ok(self.handle_events(after, limit)),
            // Never forwarded (NodeRestriction): `by` is not taken from the caller.
            Request::Drain { node, draining, .. } => {
                let caller = (peer.role, peer_name.0.clone());
                self.handle_drain(node, draining, caller, asked_by(None))
                    .await
            }
            Request::Clock => Ok(Response::Clock {
                now_ms: (node.clock)(),
            }),
            Request::Hears => {
                let members = node.members().await;
                let live = members.iter().any(|m| m.alive && m.name == peer_name.0);
                Ok(Response::Hears { live })
            }
            Request::Cells { cell, known } => handle_cells(&node, cell, known).await,
            Request::CellsPush { entries } => {
                if entries.len() > shoal_core::cells::CELLS_MAX {
                    Err(too_many("CellsPush entries"))
                } else {
                    let outcome = node.merge_cells(entries, &peer_name.0);
                    Ok(Response::CellsPushed {
                        refused: outcome.refused.len() as u32,
                    })
                }
            }
            Request::CellList { after, limit } => Ok(self.handle_cell_list(after, limit)),
            Request::CellStatus { name, after, limit } => {
                self.clone().handle_cell_status(name, after, limit).await
            }
            Request::NameUsed { name } => {
                let members = node.members().await;
                let live = members.iter().any(|m| m.alive && m.name == name);
                Ok(Response::NameUsed { live })
            }
            Request::CellCopies { replicas } => {
                if replicas.len() > crate::state::cells::handoff::SERVING_ASK_MAX {
                    Err(too_many("CellCopies replicas"))
                } else {
                    Ok(self.handle_cell_copies(replicas).await)
                }
            }
            Request::Digest => {
                let digest = node.with_store(|s| s.digest().encode()).await;
                Ok(Response::Digest(digest))
            }
            Request::Pull { buckets, after } => {
                let page = node
                    .with_store(move |s| {
                        s.entries_in_buckets(&buckets, after.as_deref(), PULL_PAGE_BYTES)
                    })
                    .await;
                Ok(Response::Entries {
                    entries: page.entries,
                    next_after: page.next_after,
                })
            }
            Request::Exec {
                workload,
                replica,
                command,
                stdin,
                tty,
            } => {
                let by = asked_by(None);
                let mode = crate::node::exec::ExecMode { stdin, tty };
                self.handle_exec(workload, replica, command, mode, by).await
            }
            Request::ExecIo { node, session, io } => {
                self.handle_exec_io(node, session, io, asked_by(None)).await
            }
            Request::ExecHere {
                replica,
                command,
                stdin,
                tty,
                by,
            } => {
                let via = Some(peer_name.0.clone());
                let mode = crate::node::exec::ExecMode { stdin, tty };
                self.handle_exec_here(replica, command, mode, by, via).await
            }
            Request::ExecIoHere { session, io, by } => {
                self.handle_exec_io_here(session, io, by).await
            }
        };
        result.unwrap_or_else(Response::Error)
    }

    /// Adopts a revocation list given by an operator, writes it to the store (which spreads it)
    /// and records who gave it.
    async fn handle_publish_crl(
        &self,
        der: Vec<u8>,
        by: String,
    ) -> Result<Response, crate::wire::api::ApiError> {
        use crate::wire::api::{ApiError, ErrorKind};
        if der.len() > crate::identity::crl::CRL_BYTES_MAX {
            return Err(ApiError::new(ErrorKind::Invalid, "the CRL is too large"));
        }
        let adopted = self
            .node
            .authority
            .adopt_crl(&der, &by)
            .map_err(|why| ApiError::new(ErrorKind::Invalid, format!("CRL refused: {why}")))?;
        let crl = self.node.authority.crl().ok_or_else(|| {
            ApiError::new(ErrorKind::Internal, "the CRL was adopted but is not held")
        })?;
        self.node
            .clone()
            .store_reserved(
                crate::identity::crl::STORE_NAME,
                crl.der.clone(),
                by.clone(),
            )
            .await?;
        if let Some(host) = &self.host {
            let reason = format!(
                "revocation list number {} ({} revoked) {}",
                crl.number,
                crl.revoked.len(),
                if adopted { "adopted" } else { "already held" }
            );
            host.record_asked("publish-crl", None, reason, &by);
        }
        Ok(Response::CrlPublished {
            number: crl.number,
            revoked: crl.revoked.len() as u32,
            adopted,
        })
    }

    /// The refusal of an apply whose spec uses a host path this agent does not allow
    /// (`--volume-root`): the agent that takes the apply says so at once. Other agents may allow
    /// other roots; one that does not refuses to start the replica (an `unsupported` issue).
    async fn host_path_refused(
        &self,
        specs: &[shoal_core::spec::WorkloadSpec],
    ) -> Option<crate::wire::api::ApiError> {
        let invalid = |text: String| {
            crate::wire::api::ApiError::new(crate::wire::api::ErrorKind::Invalid, text)
        };
        if self.node.placement_algorithm() >= 7 {
            // Placement puts each replica where its host paths are allowed: refuse only a path
            // no live node allows (a node that says nothing of its roots allows it).
            let members = self.node.members().await;
            let live: Vec<_> = members.iter().filter(|m| m.alive).collect();
            return specs.iter().find_map(|spec| {
                let path = spec.volumes.iter().find_map(|v| {
                    let path = v.host_path.as_deref()?;
                    let allowed = live.iter().any(|m| {
                        m.capabilities.as_ref().is_none_or(|c| {
                            shoal_core::spec::host_path_allowed(path, &c.volume_roots)
                        })
                    });
                    (!allowed).then_some((v.name.as_str(), path))
                })?;
                Some(invalid(format!(
                    "{}: volume {:?}: host path {} is refused: no live node allows it (each \
                     allows host paths only under its --volume-root)",
                    spec.name, path.0, path.1
                )))
            });
        }
        let roots = self.host.as_ref()?.volume_roots();
        specs.iter().find_map(|spec| {
            let (volume, path) = spec.host_path_refused(roots)?;
            let why = shoal_core::reconcile::host_path_refusal(volume, path, roots);
            Some(invalid(format!("{}: {why}", spec.name)))
        })
    }

    /// The (workload, version) pairs whose rollout this agent's host assessed complete last.
    pub(crate) fn assessed_complete(&self) -> std::collections::BTreeSet<(String, String)> {
        let Some(host) = &self.host else {
            return Default::default();
        };
        host.snapshot()
            .rollouts
            .iter()
            .filter(|(_, a)| a.phase == shoal_core::rollout::RolloutPhase::Complete)
            .map(|(name, a)| (name.clone(), a.version.clone()))
            .collect()
    }

    /// Records an accepted (or refused) apply or delete in this agent's events, with who asked,
    /// and wakes the host loop after an accepted one.
    fn record_write(
        &self,
        kind: &str,
        names: &[String],
        result: &Result<Response, crate::wire::api::ApiError>,
        by: &str,
    ) {
        let Some(host) = &self.host else {
            tracing::info!(kind, ?names, by, ok = result.is_ok(), "operator write");
            return;
        };
        let reason = match result {
            Ok(Response::Applied(applied)) => applied
                .iter()
                .map(|a| {
                    let version = shoal_core::hlc::format_version(&a.version);
                    match &a.note {
                        Some(note) => format!("{} stored as version {version} ({note})", a.name),
                        None => format!("{} stored as version {version}", a.name),
                    }
                })
                .collect::<Vec<_>>()
                .join("; "),
            Ok(Response::Deleted(a)) => format!(
                "{} deleted (version {})",
                a.name,
                shoal_core::hlc::format_version(&a.version)
            ),
            Ok(_) => "done".to_string(),
            Err(e) => format!("{} refused: {}", names.join(", "), e.message),
        };
        let replica = (names.len() == 1).then(|| names[0].clone());
        host.record_asked(kind, replica, reason, by);
        // This agent's own replicas of the new version need not wait for the next tick (peers
        // hear of it by gossip and act at theirs).
        if result.is_ok() {
            host.wake();
        }
    }
}

fn request_kind(req: &Request) -> &'static str {
    match req {
        Request::Apply { .. } => "apply",
        Request::Get { .. } => "get",
        Request::List { .. } => "list",
        Request::Delete { .. } => "delete",
        Request::Nodes { .. } => "nodes",
        Request::Status { .. } => "status",
        Request::Replicate { .. } => "replicate",
        Request::PublishCrl { .. } => "publish-crl",
        Request::SetCaps { .. } => "set-caps",
        Request::Caps => "caps",
        Request::History { .. } => "history",
        Request::Endpoints { .. } => "endpoints",
        Request::Logs { .. } => "logs",
        Request::LogsHere { .. } => "logs-here",
        Request::Restart { .. } => "restart",
        Request::RestartHere { .. } => "restart-here",
        Request::Undo { .. } => "undo",
        Request::Pause { .. } => "pause",
        Request::Digest => "digest",
        Request::Pull { .. } => "pull",
        Request::Issues { .. } => "issues",
        Request::Approve { .. } => "approve",
        Request::Events { .. } => "events",
        Request::Drain { .. } => "drain",
        Request::Clock => "clock",
        Request::Hears => "hears",
        Request::Cells { .. } => "cells",
        Request::CellsPush { .. } => "cells-push",
        Request::CellList { .. } => "cell-list",
        Request::CellStatus { .. } => "cell-status",
        Request::CellCopies { .. } => "cell-copies",
        Request::NameUsed { .. } => "name-used",
        Request::Exec { .. } => "exec",
        Request::ExecIo { .. } => "exec-io",
        Request::ExecHere { .. } => "exec-here",
        Request::ExecIoHere { .. } => "exec-io-here",
        Request::UpgradeStatus { .. } => "upgrade-status",
        Request::Plan { .. } => "plan",
        Request::GetSecrets { .. } => "get-secrets",
        Request::UpgradeHold { held: true, .. } => "upgrade-hold",
        Request::UpgradeHold { held: false, .. } => "upgrade-release",
    }
}

fn too_many(what: &str) -> crate::wire::api::ApiError {
    crate::wire::api::ApiError::new(
        crate::wire::api::ErrorKind::Invalid,
        format!(
            "{what}: more than {} cells in one message",
            shoal_core::cells::CELLS_MAX
        ),
    )
}

/// A peer's pull of the cells table: what it lacks, what this agent holds, and its store digest
/// summary (an envoy of another cell pulls the store when it differs).
async fn handle_cells(
    node: &MeshNode,
    cell: String,
    known: Vec<shoal_core::cells::Known>,
) -> Result<Response, crate::wire::api::ApiError> {
    if known.len() > shoal_core::cells::CELLS_MAX {
        return Err(too_many("Cells known"));
    }
    tracing::trace!(from_cell = %cell, "cells pull");
    let store = node
        .with_store(|s| crate::state::mesh::sync::to_hex(&s.digest().summary().encode()))
        .await;
    Ok(Response::Cells {
        cell: node.cells.own().to_string(),
        entries: node.cells.newer_than(&known),
        known: node.cells.known(),
        store,
    })
}
