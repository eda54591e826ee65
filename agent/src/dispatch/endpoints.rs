//! `shoal endpoints NAME`: one workload's endpoints from the host's endpoint table, the same
//! table the agent's DNS answers from.

use super::Api;
use crate::wire::api::{ApiError, ErrorKind, Response};

impl Api {
    /// The endpoints of workload `name`, or not found.
    pub(crate) fn handle_endpoints(&self, name: &str) -> Result<Response, ApiError> {
        let Some(host) = self.host.as_ref() else {
            return Err(ApiError::new(
                ErrorKind::Internal,
                "this agent runs no host loop; ask another agent",
            ));
        };
        match host.endpoints().get(name) {
            Some(w) => Ok(Response::Endpoints(Box::new(w.clone()))),
            None => Err(ApiError::new(
                ErrorKind::NotFound,
                format!("no workload named {name:?}; `shoal get` lists them"),
            )),
        }
    }
}
