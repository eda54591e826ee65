//! The desired state of the model tier (spec epochs) and the placement each host's view implies:
//! the real `PlacementEngine`, run once per distinct view and indexed by host, so that a host's
//! round reads only its own slice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use shoal::mesh::view::placement_workload;
use shoal_core::instance::ReplicaId;
use shoal_core::placement::{model::Node, PlacementEngine};
use shoal_core::reconcile::SpecEntry;
use shoal_core::spec::WorkloadSpec;

/// A view: the hosts an observer holds dead (sorted) and the spec epoch it holds.
pub(super) type ViewKey = (Vec<u32>, usize);

/// Most placements kept besides the views in use (each is a map of every replica).
const CACHED_MAX: usize = 32;

/// The specs after one apply, with the store versions the reconciler compares.
pub(super) struct Epoch {
    /// The live specs.
    pub specs: Vec<WorkloadSpec>,
    /// The same as the reconciler's input: name to version and shared spec.
    pub entries: BTreeMap<String, SpecEntry>,
}

/// The placement of one view.
pub(super) struct ViewPlacement {
    /// Replica to host index.
    pub owners: BTreeMap<ReplicaId, u32>,
    /// Host index to the replicas it owns.
    pub by_host: BTreeMap<u32, Vec<ReplicaId>>,
}

/// Spec epochs, the placements of the views hosts hold, and how many up hosts hold each view.
pub(super) struct Views {
    nodes: Vec<Node>,
    /// Every apply so far; epoch 0 is empty.
    pub epochs: Vec<Epoch>,
    cache: BTreeMap<ViewKey, Arc<ViewPlacement>>,
    in_use: BTreeMap<ViewKey, usize>,
}

fn host_index(name: &str) -> u32 {
    let n: u32 = name
        .strip_prefix('n')
        .and_then(|n| n.parse().ok())
        .expect("the model names hosts n1..nN");
    n - 1
}

impl Views {
    /// Views over these hosts, with the empty epoch 0.
    pub fn new(nodes: Vec<Node>) -> Views {
        let empty = Epoch {
            specs: Vec::new(),
            entries: BTreeMap::new(),
        };
        Views {
            nodes,
            epochs: vec![empty],
            cache: BTreeMap::new(),
            in_use: BTreeMap::new(),
        }
    }

    /// Adds an epoch with these specs; a spec equal to the previous epoch's keeps its version
    /// (an unchanged workload must not look outdated to the reconciler).
    pub fn push_epoch(&mut self, specs: Vec<WorkloadSpec>) -> usize {
        let epoch = self.epochs.len();
        let previous = &self.epochs[epoch - 1];
        let entries = specs
            .iter()
            .map(|s| {
                let kept = previous.specs.iter().any(|p| p == s);
                let entry = match previous.entries.get(&s.name) {
                    Some(e) if kept => e.clone(),
                    _ => SpecEntry {
                        version: format!("v{epoch}"),
                        spec: Arc::new(s.clone()),
                    },
                };
                (s.name.clone(), entry)
            })
            .collect();
        self.epochs.push(Epoch { specs, entries });
        epoch
    }

    /// The newest epoch.
    pub fn latest(&self) -> usize {
        self.epochs.len() - 1
    }

    /// The placement of a view: the real engine, the hosts the view holds dead marked down (as
    /// agents keep them until chitchat forgets them, an hour later).
    pub fn placement(&mut self, key: &ViewKey) -> Arc<ViewPlacement> {
        if let Some(p) = self.cache.get(key) {
            return p.clone();
        }
        if self.cache.len() >= CACHED_MAX {
            let in_use = &self.in_use;
            self.cache.retain(|k, _| in_use.contains_key(k));
        }
        let dead: BTreeSet<u32> = key.0.iter().copied().collect();
        let nodes: Vec<Node> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Node {
                down: dead.contains(&(i as u32)),
                ..n.clone()
            })
            .collect();
        let workloads: Vec<_> = self.epochs[key.1]
            .specs
            .iter()
            .map(placement_workload)
            .collect();
        let placement = PlacementEngine::new(&nodes, &workloads).into_placement();
        let mut by_host: BTreeMap<u32, Vec<ReplicaId>> = BTreeMap::new();
        let owners: BTreeMap<ReplicaId, u32> = placement
            .assigned
            .into_iter()
            .map(|(r, n)| (r, host_index(&n)))
            .collect();
        for (r, h) in &owners {
            by_host.entry(*h).or_default().push(r.clone());
        }
        let p = Arc::new(ViewPlacement { owners, by_host });
        self.cache.insert(key.clone(), p.clone());
        p
    }

    /// An up host now holds `key` (its placement is kept while any host holds it).
    pub fn enter(&mut self, key: &ViewKey) {
        self.placement(key);
        *self.in_use.entry(key.clone()).or_default() += 1;
    }

    /// An up host no longer holds `key`.
    pub fn leave(&mut self, key: &ViewKey) {
        let n = self.in_use.get_mut(key).expect("a view left was entered");
        *n -= 1;
        if *n == 0 {
            self.in_use.remove(key);
        }
    }

    /// The owner of `replica` in every view some up host holds, each once, sorted.
    pub fn owners_in_use(&self, replica: &ReplicaId) -> BTreeSet<u32> {
        self.in_use
            .keys()
            .filter_map(|k| self.cache.get(k)?.owners.get(replica).copied())
            .collect()
    }
}
