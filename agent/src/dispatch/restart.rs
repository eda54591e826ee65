//! `shoal restart NAME[/REPLICA]`.
//!
//! A whole workload restarts as a rolling update: its held spec is applied again with a new
//! `restarted_at` stamp, a change that replaces every replica at the pace of `[update]`
//! (`max_unavailable`, `max_surge`, health gating, automatic rollback), as `kubectl rollout
//! restart` does with its annotation. One replica restarts at once on the node running it (like
//! deleting one pod): its running instance is stopped and a new one started there, which the
//! reconciler does not count as a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use shoal_core::hlc::format_utc_ms;
use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::InstanceStatus;

use super::logs::pick;
use super::Api;
use crate::node::host::{HostRestartError, INSTANCES_KEY};
use crate::state::mesh::node::MeshNode;
use crate::wire::api::{ApiError, ErrorKind, Request, Response};

/// Applies `name`'s held spec again with a new restart stamp (the time of the request on this
/// agent's clock, and who asked).
pub(super) async fn workload(
    node: &Arc<MeshNode>,
    name: String,
    by: String,
    complete: BTreeSet<(String, String)>,
) -> Result<Response, ApiError> {
    let Response::Workload(view) = node.clone().handle_get(name.clone(), false).await? else {
        return Err(ApiError::new(
            ErrorKind::Internal,
            format!("reading {name}'s spec gave an unexpected answer"),
        ));
    };
    let mut spec = view.spec;
    let mut now = (node.clock)();
    let mut stamp = format_utc_ms(now);
    // Two restarts within one millisecond still make two changes.
    while spec.restarted_at.as_deref() == Some(stamp.as_str()) {
        now += 1;
        stamp = format_utc_ms(now);
    }
    spec.restarted_at = Some(stamp);
    if spec.replicas == 0 {
        return Err(ApiError::new(
            ErrorKind::Invalid,
            format!("{name} has 0 replicas: nothing to restart (`shoal scale {name} N` first)"),
        ));
    }
    node.clone()
        .handle_apply(vec![spec], format!("{by}, restart"), complete)
        .await
}

impl Api {
    /// Restarts one replica where it runs: here, or forwarded as [`Request::RestartHere`].
    pub(crate) async fn handle_restart(
        &self,
        workload: String,
        index: u32,
        by: String,
    ) -> Result<Response, ApiError> {
        let mut observed: BTreeMap<String, (bool, Vec<InstanceStatus>)> =
            self.gossiped(INSTANCES_KEY).await;
        if let Some(host) = &self.host {
            observed.insert(self.node.name.clone(), (true, host.observed()));
        }
        let Some((_, node)) = pick(&observed, &workload, Some(index)) else {
            // Unknown workload, or no instance anywhere: say which.
            self.node
                .clone()
                .handle_get(workload.clone(), false)
                .await?;
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!(
                    "{workload}/{index} has no instance on any node this agent hears of \
                     (pending, or not placed yet): `shoal status {workload}` says why"
                ),
            ));
        };
        let replica = ReplicaId::new(&workload, index);
        if node == self.node.name {
            return self.handle_restart_here(replica, by).await;
        }
        self.forward(&node, Request::RestartHere { replica, by })
            .await
    }

    /// Restarts the running instance of `replica` on this node's host.
    pub(crate) async fn handle_restart_here(
        &self,
        replica: ReplicaId,
        by: String,
    ) -> Result<Response, ApiError> {
        let Some(host) = &self.host else {
            return Err(ApiError::new(
                ErrorKind::Internal,
                "this agent runs no host loop, so no instances: ask another agent",
            ));
        };
        match host.restart(&replica).await {
            Ok(instance) => {
                let reason = format!("operator asked to restart instance {instance}");
                host.record_asked("restart", Some(replica.to_string()), reason, &by);
                Ok(Response::Restarted {
                    replica: replica.to_string(),
                    node: self.node.name.clone(),
                    instance,
                })
            }
            Err(HostRestartError::Reconciler(e)) => {
                Err(ApiError::new(ErrorKind::Invalid, e.to_string()))
            }
            Err(e) => Err(ApiError::new(ErrorKind::Internal, e.to_string())),
        }
    }
}
