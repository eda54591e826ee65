//! `shoal plan`: the placement with some specs applied, beside the placement now, computed as
//! every agent computes it (`Api::placement_of`); nothing is written.

use std::collections::BTreeMap;

use shoal_core::placement::model::ReplicaId;
use shoal_core::placement::summary::unplaceable;
use shoal_core::spec::WorkloadSpec;

use super::Api;
use crate::state::mesh::view;
use crate::wire::api::Response;
use crate::wire::plan::{PlanMove, PlanRow, PlanView, PlanWorkload, PLAN_ROWS_MAX};

impl Api {
    /// What applying `planned` would do to the placement.
    pub(super) async fn handle_plan(&self, planned: Vec<WorkloadSpec>) -> Response {
        let ((stored, _), (holders, _)) = self
            .node
            .with_store(|s| {
                let holders = crate::state::mesh::data::holders(s.core().iter());
                (view::live_specs(s.list_live()), holders)
            })
            .await;
        let members = self.node.members().await;
        let now_specs: Vec<&WorkloadSpec> = stored.iter().map(|(s, _)| s).collect();
        let mut after: BTreeMap<&str, &WorkloadSpec> =
            now_specs.iter().map(|s| (s.name.as_str(), *s)).collect();
        for spec in &planned {
            after.insert(&spec.name, spec);
        }
        let after_specs: Vec<&WorkloadSpec> = after.values().copied().collect();
        let (now, _) = self.placement_of(&members, &now_specs, &holders);
        let (then, _) = self.placement_of(&members, &after_specs, &holders);
        let mut workloads = Vec::with_capacity(planned.len());
        for spec in &planned {
            let stored_spec = now_specs.iter().find(|s| s.name == spec.name);
            let change = match stored_spec {
                None => "create",
                Some(s) if *s == spec => "unchanged",
                Some(_) => "update",
            };
            let mut refused = crate::state::mesh::upgrade::refusal(&self.node, spec)
                .await
                .map(|e| e.message);
            if refused.is_none() {
                refused = self
                    .host_path_refused(std::slice::from_ref(spec))
                    .await
                    .map(|e| e.message);
            }
            if refused.is_none() {
                refused = self
                    .root_refused(std::slice::from_ref(spec))
                    .await
                    .map(|e| e.message);
            }
            let mut rows = Vec::new();
            let mut moved = 0;
            for replica in 0..spec.replicas {
                let id = ReplicaId::new(&spec.name, replica);
                let node = then.assigned.get(&id).cloned();
                let was = now.assigned.get(&id).cloned();
                moved += u32::from(was.is_some() && was != node);
                if rows.len() < PLAN_ROWS_MAX {
                    rows.push(PlanRow {
                        replica,
                        reason: then.unschedulable.get(&id).map(|u| u.to_string()),
                        node,
                        now: was,
                    });
                }
            }
            workloads.push(PlanWorkload {
                name: spec.name.clone(),
                change: change.to_string(),
                replicas: spec.replicas,
                refused,
                rows,
                fit: unplaceable(&then, &spec.name, spec.replicas).map(|u| u.to_string()),
                moved,
            });
        }
        // Replicas of the workloads not planned whose node changes.
        let mut moves = Vec::new();
        let mut moves_count = 0;
        for (id, from) in &now.assigned {
            if planned.iter().any(|s| s.name == id.workload) {
                continue;
            }
            let to = then.assigned.get(id);
            if to != Some(from) {
                moves_count += 1;
                if moves.len() < PLAN_ROWS_MAX {
                    moves.push(PlanMove {
                        replica: id.to_string(),
                        from: Some(from.clone()),
                        to: to.cloned(),
                    });
                }
            }
        }
        Response::Plan(Box::new(PlanView {
            agent: self.node.name.clone(),
            mesh_version: self.node.mesh_version(),
            placement_algorithm: self.node.placement_algorithm(),
            workloads,
            moves,
            moves_count,
        }))
    }
}
