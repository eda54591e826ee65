//! Reading the desired state: a page of workload summaries (`shoal get`), one workload with its
//! whole spec (`shoal get NAME`). A list never carries specs: at up to 256 KiB each, sixty of
//! them would not fit one frame, and a table of names needs none.

use std::sync::Arc;

use super::node::MeshNode;
use super::view;
use crate::wire::api::{ApiError, ErrorKind, Response, WorkloadSummary, WorkloadView};
use crate::wire::page;

impl MeshNode {
    /// A page of the live workloads whose names sort after `after`, by name.
    pub(crate) async fn handle_list(
        self: Arc<Self>,
        after: Option<String>,
        limit: u32,
    ) -> Result<Response, ApiError> {
        let (workloads, next_after) = self
            .with_store(move |s| {
                let summaries = s
                    .list_live()
                    .skip_while(|e| after.as_deref().is_some_and(|a| e.name.as_str() <= a))
                    .filter_map(|e| {
                        let body = e.body.live()?;
                        match view::decode_spec(body) {
                            Ok(spec) => Some(WorkloadSummary {
                                name: spec.name,
                                replicas: spec.replicas,
                                version: e.version.to_string(),
                                cpu_millis: spec.resources.cpu_millis,
                                memory_bytes: spec.resources.memory_bytes,
                            }),
                            Err(error) => {
                                tracing::warn!(name = %e.name, %error, "stored spec does not decode");
                                None
                            }
                        }
                    });
                page::take_page(summaries, limit, |w| w.name.clone())
            })
            .await;
        Ok(Response::Workloads {
            workloads,
            next_after,
        })
    }

    /// The live workload `name` with its whole spec.
    /// The workload `name` with its spec: its `secret_env` values replaced by `<secret>` unless
    /// `secrets` (`Request::GetSecrets`, a write the caller audits).
    pub(crate) async fn handle_get(
        self: Arc<Self>,
        name: String,
        secrets: bool,
    ) -> Result<Response, ApiError> {
        let key = name.clone();
        let stored = self
            .with_store(move |s| {
                let entry = s.get(&key)?;
                let body = entry.body.live()?;
                Some((view::decode_spec(body), entry.version.to_string()))
            })
            .await;
        match stored {
            None => Err(ApiError::new(
                ErrorKind::NotFound,
                format!("no workload named {name:?}; `shoal get` lists them"),
            )),
            Some((Err(e), _)) => Err(ApiError::new(
                ErrorKind::Internal,
                format!("the stored spec of {name:?} does not decode: {e}"),
            )),
            Some((Ok(spec), version)) => Ok(Response::Workload(Box::new(WorkloadView {
                name,
                replicas: spec.replicas,
                version,
                spec: match secrets {
                    true => spec,
                    false => spec.redacted(),
                },
            }))),
        }
    }
}
