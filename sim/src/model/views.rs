//! The desired state of the model tier (spec epochs) and the placement each host's view implies:
//! the real `PlacementEngine`, run once per distinct view and indexed by host, so that a host's
//! round reads only its own slice.
//!
//! In a mesh of cells (`[mesh] cells`), the real two-level placement: the cell level
//! (`place_cells`) over the cells' summaries as the view holds them (a generation of summaries
//! and the cells it holds down), then the node level (`place_stacked_shares`) of one cell on its
//! members, as an agent computes it for its own cell only. The summaries are what the cells'
//! envoys would publish (`summarize`, with its hysteresis) from the truth's live members; a new
//! generation is made only when a ranked figure moves.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use shoal::state::mesh::view::placement_workload;
use shoal_core::cells::{place_cells, summarize, Cell, CellPlacement, CellSummary};
use shoal_core::instance::ReplicaId;
use shoal_core::placement::model::{Placement, Workload};
use shoal_core::placement::{model::Node, PlacementEngine};
use shoal_core::reconcile::SpecEntry;
use shoal_core::spec::WorkloadSpec;
use shoal_core::stacking::place_stacked_shares;

/// A view: what an observer's placement depends on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ViewKey {
    /// The cell whose node level the view places; `None`: every cell (the truth), and always
    /// `None` in a mesh without cells.
    pub cell: Option<u32>,
    /// The hosts the observer holds dead, sorted (in a mesh of cells, of its own cell only: it
    /// knows the others through their summaries).
    pub dead: Vec<u32>,
    /// The cells the observer holds down, sorted (empty without cells).
    pub down_cells: Vec<u32>,
    /// The generation of cell summaries it holds (0 without cells).
    pub summaries: usize,
    /// The spec epoch it holds.
    pub epoch: usize,
}

/// The cells of the mesh: members, and the summaries their envoys published, by generation.
struct Cells {
    names: Vec<String>,
    /// Host indices of each cell, sorted.
    members: Vec<Vec<u32>>,
    /// Every generation of summaries (one per cell); generation 0 is the full mesh's.
    generations: Vec<Vec<CellSummary>>,
    /// Cell-level placements by (down cells, summary generation, epoch).
    level: BTreeMap<(Vec<u32>, usize, usize), Arc<CellPlacement>>,
}

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
    /// The cell level (every replica's cell), in a mesh of cells.
    pub level: Option<Arc<CellPlacement>>,
}

/// Spec epochs, the placements of the views hosts hold, and how many up hosts hold each view.
pub(super) struct Views {
    nodes: Vec<Node>,
    cells: Option<Cells>,
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
    /// Views over these hosts, with the empty epoch 0; with `cells` > 0, host `i` is in cell
    /// `i % cells` (named `c1..cN`, as the real tier names them).
    pub fn new(nodes: Vec<Node>, cells: u32) -> Views {
        let empty = Epoch {
            specs: Vec::new(),
            entries: BTreeMap::new(),
        };
        let cells = (cells > 0).then(|| {
            let mut members = vec![Vec::new(); cells as usize];
            for i in 0..nodes.len() as u32 {
                members[(i % cells) as usize].push(i);
            }
            let names: Vec<String> = (1..=cells).map(|c| format!("c{c}")).collect();
            let first = names
                .iter()
                .zip(&members)
                .map(|(name, m)| publish(name, 0, &nodes, m, &BTreeSet::new(), None))
                .collect();
            Cells {
                names,
                members,
                generations: vec![first],
                level: BTreeMap::new(),
            }
        });
        Views {
            nodes,
            cells,
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
                        paused: false,
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
    /// agents keep them until chitchat forgets them, an hour later). In a mesh of cells, the
    /// cell level over the view's summaries and down cells, then the node level of the view's
    /// cell (of every cell for the truth).
    pub fn placement(&mut self, key: &ViewKey) -> Arc<ViewPlacement> {
        if let Some(p) = self.cache.get(key) {
            return p.clone();
        }
        if self.cache.len() >= CACHED_MAX {
            let in_use = &self.in_use;
            self.cache.retain(|k, _| in_use.contains_key(k));
        }
        let dead: BTreeSet<u32> = key.dead.iter().copied().collect();
        let workloads: Vec<_> = self.epochs[key.epoch]
            .specs
            .iter()
            .map(placement_workload)
            .collect();
        let (assigned, level) = match self.cells.is_some() {
            false => {
                let nodes = self.marked(&dead, None);
                let placed = PlacementEngine::new(&nodes, &workloads).into_placement();
                (placed.assigned, None)
            }
            true => {
                let level = self.cell_level(key, &workloads);
                let assigned = self.node_level(key, &level, &dead, &workloads);
                (assigned, Some(level))
            }
        };
        let mut by_host: BTreeMap<u32, Vec<ReplicaId>> = BTreeMap::new();
        let owners: BTreeMap<ReplicaId, u32> = assigned
            .into_iter()
            .map(|(r, n)| (r, host_index(&n)))
            .collect();
        for (r, h) in &owners {
            by_host.entry(*h).or_default().push(r.clone());
        }
        let p = Arc::new(ViewPlacement {
            owners,
            by_host,
            level,
        });
        self.cache.insert(key.clone(), p.clone());
        p
    }

    /// The hosts (of `members` only, when given) with those of `dead` marked down.
    fn marked(&self, dead: &BTreeSet<u32>, members: Option<&[u32]>) -> Vec<Node> {
        let all: Vec<u32>;
        let members = match members {
            Some(m) => m,
            None => {
                all = (0..self.nodes.len() as u32).collect();
                &all
            }
        };
        members
            .iter()
            .map(|&i| Node {
                down: dead.contains(&i),
                ..self.nodes[i as usize].clone()
            })
            .collect()
    }

    /// The node level of the view's cell (or of every cell) under the cell level `level`.
    fn node_level(
        &self,
        key: &ViewKey,
        level: &CellPlacement,
        dead: &BTreeSet<u32>,
        workloads: &[Workload],
    ) -> BTreeMap<ReplicaId, String> {
        let cells = self.cells.as_ref().expect("a mesh of cells");
        let scope: Vec<u32> = match key.cell {
            Some(c) => vec![c],
            None => (0..cells.names.len() as u32).collect(),
        };
        let mut assigned = BTreeMap::new();
        for c in scope {
            let shares = level.shares(&cells.names[c as usize], workloads);
            if shares.is_empty() {
                continue;
            }
            let nodes = self.marked(dead, Some(&cells.members[c as usize]));
            let local: Placement = place_stacked_shares(&nodes, &shares);
            assigned.extend(local.assigned);
        }
        assigned
    }

    /// The cell level of a view's down cells, summaries and epoch (cached).
    fn cell_level(&mut self, key: &ViewKey, workloads: &[Workload]) -> Arc<CellPlacement> {
        let cells = self.cells.as_mut().expect("a mesh of cells");
        let level_key = (key.down_cells.clone(), key.summaries, key.epoch);
        if let Some(p) = cells.level.get(&level_key) {
            return p.clone();
        }
        if cells.level.len() >= CACHED_MAX {
            cells.level.clear();
        }
        let input: Vec<Cell> = cells.generations[key.summaries]
            .iter()
            .enumerate()
            .map(|(i, summary)| Cell {
                summary: summary.clone(),
                down: key.down_cells.contains(&(i as u32)),
            })
            .collect();
        let p = Arc::new(place_cells(&input, workloads));
        cells.level.insert(level_key, p.clone());
        p
    }

    /// The cell of host `h` (`None` without cells).
    pub fn cell_of(&self, h: u32) -> Option<u32> {
        let cells = self.cells.as_ref()?;
        Some(h % cells.names.len() as u32)
    }

    /// The hosts of cell `c`.
    pub fn members(&self, c: u32) -> &[u32] {
        &self.cells.as_ref().expect("a mesh of cells").members[c as usize]
    }

    /// Cells in the mesh (0 without cells).
    pub fn cell_count(&self) -> u32 {
        self.cells.as_ref().map_or(0, |c| c.names.len() as u32)
    }

    /// The name of cell `c`.
    pub fn cell_name(&self, c: u32) -> &str {
        &self.cells.as_ref().expect("a mesh of cells").names[c as usize]
    }

    /// The newest generation of summaries.
    pub fn latest_summaries(&self) -> usize {
        self.cells.as_ref().map_or(0, |c| c.generations.len() - 1)
    }

    /// The cells' envoys republish from the truth's live members (`down`: the hosts down now):
    /// a new generation when a ranked figure of a cell with a live member moved (a cell with
    /// none has no envoy to publish; the others hold it down instead).
    pub fn republish(&mut self, down: &BTreeSet<u32>) -> Option<usize> {
        let nodes = &self.nodes;
        let cells = self.cells.as_mut()?;
        let last = cells.generations.last().expect("generation 0").clone();
        let version = cells.generations.len() as u64;
        let mut next = last.clone();
        let mut moved = false;
        for (c, summary) in next.iter_mut().enumerate() {
            let members = &cells.members[c];
            if members.iter().all(|m| down.contains(m)) {
                continue;
            }
            let fresh = publish(
                summary.cell.as_str(),
                version,
                nodes,
                members,
                down,
                Some(&*summary),
            );
            moved |= ranked(&fresh) != ranked(summary);
            *summary = fresh;
        }
        if !moved {
            return None;
        }
        cells.generations.push(next);
        Some(cells.generations.len() - 1)
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

/// What cell `name`'s envoys publish: `summarize` over its members, those of `down` down (free
/// capacity is left out: the cell level never reads it).
fn publish(
    name: &str,
    version: u64,
    nodes: &[Node],
    members: &[u32],
    down: &BTreeSet<u32>,
    previous: Option<&CellSummary>,
) -> CellSummary {
    let listed: Vec<Node> = members
        .iter()
        .map(|&i| Node {
            down: down.contains(&i),
            ..nodes[i as usize].clone()
        })
        .collect();
    let contacts = [format!("{name}-envoy")];
    summarize(
        name,
        version,
        &contacts,
        &listed,
        &Placement::default(),
        &[],
        previous,
    )
}

/// What the cell level ranks a summary by (besides its name): whether it has a member, and its
/// ranked figures.
fn ranked(s: &CellSummary) -> impl PartialEq + '_ {
    (s.members > 0, s.capacity, s.largest, &s.zones, &s.labels)
}
