//! `shoal logs`: find the node running the replica from this agent's view of the mesh (its own
//! host's instances, every other node's gossiped ones) and read there, forwarding as
//! [`Request::LogsHere`] when it is another node. Reading is its runtime's business
//! ([`crate::node::runtime::Runtime::logs`]).
//!
//! Without a replica number the lowest-numbered replica that has an instance is read (like
//! `kubectl logs deployment/x` picking one pod): the answer names it. Among nodes reporting an
//! instance of the replica, a live node with it running wins (during a move or a rolling update
//! two may: the running copy is the one worth reading).

use std::collections::BTreeMap;

use shoal_core::instance::{Phase, ReplicaId};
use shoal_core::reconcile::InstanceStatus;

use super::Api;
use crate::node::host::INSTANCES_KEY;
use crate::node::runtime::logs::LogQuery;
use crate::node::runtime::RuntimeError;
use crate::wire::api::{ApiError, ErrorKind, LogsAnswer, Request, Response};

impl Api {
    /// Reads a replica's output wherever it runs.
    pub(crate) async fn handle_logs(
        &self,
        workload: String,
        replica: Option<u32>,
        previous: bool,
        query: LogQuery,
    ) -> Result<Response, ApiError> {
        let mut observed: BTreeMap<String, (bool, Vec<InstanceStatus>)> =
            self.gossiped(INSTANCES_KEY).await;
        if let Some(host) = &self.host {
            observed.insert(self.node.name.clone(), (true, host.observed()));
        }
        let Some((index, node)) = pick(&observed, &workload, replica) else {
            // Unknown workload, or no instance anywhere: say which.
            self.node
                .clone()
                .handle_get(workload.clone(), false)
                .await?;
            let which = match replica {
                Some(r) => format!("{workload}/{r}"),
                None => format!("no replica of {workload}"),
            };
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!(
                    "{which} has no instance on any node this agent hears of (pending, or not \
                     placed yet): `shoal status {workload}` says why"
                ),
            ));
        };
        let replica = ReplicaId::new(&workload, index);
        if node == self.node.name {
            return self.handle_logs_here(replica, previous, query).await;
        }
        let forwarded = Request::LogsHere {
            replica,
            previous,
            query,
        };
        self.forward(&node, forwarded).await
    }

    /// Reads a replica's output on this node's runtime.
    pub(crate) async fn handle_logs_here(
        &self,
        replica: ReplicaId,
        previous: bool,
        query: LogQuery,
    ) -> Result<Response, ApiError> {
        let Some(host) = &self.host else {
            return Err(ApiError::new(
                ErrorKind::Internal,
                "this agent runs no host loop, so no instances: ask another agent",
            ));
        };
        match host.runtime().logs(&replica, previous, &query).await {
            Ok(page) => Ok(Response::Logs(Box::new(LogsAnswer {
                node: self.node.name.clone(),
                replica: replica.replica,
                page,
            }))),
            Err(RuntimeError::NoLogs { reason }) => Err(ApiError::new(ErrorKind::NotFound, reason)),
            Err(e) => Err(ApiError::new(
                ErrorKind::Internal,
                format!("reading the logs of {replica} on {}: {e}", self.node.name),
            )),
        }
    }
}

/// The replica to read and the node to read it on: the asked replica (or the lowest-numbered one
/// with an instance), on a live node running it if any, else on any node reporting an instance
/// of it.
pub(super) fn pick(
    observed: &BTreeMap<String, (bool, Vec<InstanceStatus>)>,
    workload: &str,
    replica: Option<u32>,
) -> Option<(u32, String)> {
    observed
        .iter()
        .flat_map(|(node, (alive, list))| list.iter().map(move |s| (node, *alive, s)))
        .filter(|(_, _, s)| s.replica.workload == workload && s.handle.is_some())
        .filter(|(_, _, s)| replica.is_none_or(|r| s.replica.replica == r))
        .min_by_key(|(node, alive, s)| {
            let running = matches!(s.phase, Phase::Running | Phase::Starting);
            (s.replica.replica, !alive, !running, node.as_str())
        })
        .map(|(node, _, s)| (s.replica.replica, node.clone()))
}
