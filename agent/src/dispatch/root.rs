//! The refusal of an apply whose spec runs as root (`user = "root"`, `"0"`, `"0:G"`) when no live
//! agent allows root workloads (`--allow-root-workloads`, gossiped as `root_allowed`). Any mesh
//! version: a build that says nothing of root (before this one) counts as not allowing it.

use shoal_core::spec::WorkloadSpec;

use super::Api;
use crate::wire::api::{ApiError, ErrorKind};

impl Api {
    /// The first spec asking for root that no live agent runs, with the live agents named.
    pub(super) async fn root_refused(&self, specs: &[WorkloadSpec]) -> Option<ApiError> {
        let spec = specs.iter().find(|s| s.asks_root())?;
        let members = self.node.members().await;
        let live: Vec<_> = members.iter().filter(|m| m.alive).collect();
        let allows = |m: &&&crate::state::mesh::view::Member| {
            m.capabilities.as_ref().is_some_and(|c| c.root_allowed)
        };
        if live.iter().any(|m| allows(&m)) {
            return None;
        }
        let mut names: Vec<&str> = live.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        Some(ApiError::new(
            ErrorKind::Invalid,
            format!(
                "{}: user {:?} runs as root, and no live agent allows root workloads ({} \
                 refuse{}): start an agent with --allow-root-workloads, or run it as an \
                 unprivileged user",
                spec.name,
                spec.user.as_deref().unwrap_or_default(),
                names.join(", "),
                if names.len() == 1 { "s" } else { "" },
            ),
        ))
    }
}
