//! The specs this node needs beyond the desired ones: the version an older instance runs (its
//! probe, and whether the change to the desired spec is live-appliable), bounded by the specs and
//! instances that concern this node.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::instance::ReplicaId;
use crate::spec::WorkloadSpec;

use super::input::ReconcileInput;
use super::track::Tracked;

/// Specs by (workload, version), for instances that run an older version than the desired one:
/// their probe, and whether the change to the desired spec is live-appliable.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpecCache {
    specs: BTreeMap<(String, String), Arc<WorkloadSpec>>,
    /// The desired spec of every workload that concerns this node.
    desired: BTreeMap<String, Arc<WorkloadSpec>>,
}

impl SpecCache {
    /// Caches the desired specs of the workloads that concern this node, and forgets versions no
    /// tracked instance runs and no spec desires: the cache is bounded by specs plus instances.
    pub fn refresh(
        &mut self,
        input: &ReconcileInput,
        instances: &BTreeMap<String, Tracked>,
        workloads: &BTreeSet<String>,
    ) {
        self.desired.clear();
        for workload in workloads {
            if let Some(entry) = input.spec(workload) {
                let key = (workload.clone(), entry.version.clone());
                self.specs.entry(key).or_insert_with(|| entry.spec.clone());
                self.desired.insert(workload.clone(), entry.spec.clone());
            }
        }
        // Past versions instances here run that this agent never saw applied (it restarted):
        // from the store's history, as the shell found them. The runtime's list, not the
        // tracked instances: this runs before the first round adopts them.
        for ri in &input.instances {
            let key = (ri.replica.workload.clone(), ri.spec_version.clone());
            if let Some(spec) = input.past_specs.get(&key) {
                self.specs.entry(key).or_insert_with(|| spec.clone());
            }
        }
        self.specs.retain(|(workload, version), _| {
            let desired = workloads.contains(workload)
                && input.spec(workload).is_some_and(|e| &e.version == version);
            desired
                || instances
                    .values()
                    .any(|t| &t.replica.workload == workload && &t.version == version)
                || input
                    .past_specs
                    .contains_key(&(workload.clone(), version.clone()))
                    && input
                        .instances
                        .iter()
                        .any(|ri| &ri.replica.workload == workload && &ri.spec_version == version)
        });
    }

    /// Caches a spec started here.
    pub fn insert(&mut self, workload: &str, version: &str, spec: &Arc<WorkloadSpec>) {
        let key = (workload.to_string(), version.to_string());
        self.specs.entry(key).or_insert_with(|| spec.clone());
    }

    /// The spec of exactly this version, if known.
    pub fn exact(&self, workload: &str, version: &str) -> Option<&Arc<WorkloadSpec>> {
        self.specs.get(&(workload.to_string(), version.to_string()))
    }

    /// The spec an instance runs: its exact version, else the desired one.
    pub fn for_instance(&self, replica: &ReplicaId, version: &str) -> Option<&Arc<WorkloadSpec>> {
        self.exact(&replica.workload, version)
            .or_else(|| self.desired.get(&replica.workload))
    }

    /// The desired spec of a workload that concerns this node.
    pub fn desired(&self, workload: &str) -> Option<&Arc<WorkloadSpec>> {
        self.desired.get(workload)
    }

    /// How many specs are cached.
    pub fn len(&self) -> usize {
        self.specs.len()
    }
}
