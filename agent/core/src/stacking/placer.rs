//! [`StackedPlacer`]: [`place_stacked`](super::place_stacked) kept up to date by the incremental
//! [`PlacementEngine`] instead of recomputed from scratch on every change.
//!
//! An agent recomputes the placement whenever a node or a spec changes. From scratch that costs a
//! whole capacity pass (about a second at 10,000 nodes and 100,000 replicas); the engine redoes
//! only what the change touches (docs/placement.md has the figures). The placer diffs the new
//! inputs against the last ones, feeds the engine the differences, and finishes as
//! `place_stacked` does (layers back to replica ids, then the overflow step). Its result is
//! `place_stacked`'s on the same inputs, bit for bit (a property test checks it).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::memo::{hash_serialized, Memo};
use crate::placement::model::{Node, Share, Workload};
use crate::placement::{Placement, PlacementEngine};

use super::{finish, layers};

/// Node-level results by input (nodes, shares), shared by the agents of a process
/// ([`crate::cells::PlacementMemo`] holds one).
pub type NodeMemo = Memo<(Vec<Node>, Vec<Share>), Placement>;

/// The node level's result for these inputs from `memo`, else `compute`'s, kept there.
pub fn node_level(
    memo: &NodeMemo,
    nodes: &[Node],
    shares: &[Share],
    compute: impl FnOnce() -> Placement,
) -> Arc<Placement> {
    let same = |(n, s): &(Vec<Node>, Vec<Share>)| n.as_slice() == nodes && s.as_slice() == shares;
    let inputs = || (nodes.to_vec(), shares.to_vec());
    memo.get_or(hash_serialized(nodes, shares), same, inputs, compute)
}

/// The stacked placement of the last inputs, updated incrementally.
#[derive(Clone, Default)]
pub struct StackedPlacer {
    /// The engine over the last nodes and layered workloads; `None` until the first update, and
    /// whenever the inputs held something the engine rejects (then every update is a full pass,
    /// which reports the rejection the way `place` does).
    engine: Option<PlacementEngine>,
    /// The nodes the engine holds, by id.
    nodes: BTreeMap<String, Node>,
    /// The layered shares the engine holds, by workload id.
    layered: BTreeMap<String, Share>,
    /// Results shared with the other agents of the process, by input (the simulator's; a real
    /// agent has none).
    memo: Option<Arc<NodeMemo>>,
}

impl StackedPlacer {
    /// A placer with no inputs yet.
    pub fn new() -> StackedPlacer {
        StackedPlacer::default()
    }

    /// The stacked placement of these inputs: what
    /// [`place_stacked(nodes, workloads)`](super::place_stacked) returns.
    pub fn update(&mut self, nodes: &[Node], workloads: &[Workload]) -> Placement {
        let shares: Vec<Share> = workloads.iter().cloned().map(Share::whole).collect();
        self.update_shares(nodes, &shares)
    }

    /// Takes results from `memo`, and leaves there those it computes: an input another agent
    /// of the process placed already is not placed again (the engine then catches up at the
    /// next input the memo lacks, from the last one it saw).
    pub fn set_memo(&mut self, memo: Option<Arc<NodeMemo>>) {
        self.memo = memo;
    }

    /// The stacked placement of these shares: what
    /// [`place_stacked_shares(nodes, shares)`](super::place_stacked_shares) returns.
    pub fn update_shares(&mut self, nodes: &[Node], shares: &[Share]) -> Placement {
        let Some(memo) = self.memo.clone() else {
            return self.compute(nodes, shares);
        };
        (*node_level(&memo, nodes, shares, || self.compute(nodes, shares))).clone()
    }

    /// [`StackedPlacer::update_shares`] through the engine.
    fn compute(&mut self, nodes: &[Node], shares: &[Share]) -> Placement {
        let (layered, origin) = layers(nodes, shares);
        let placed = match self.apply(nodes, &layered) {
            Some(placed) => placed,
            None => self.rebuild(nodes, &layered),
        };
        finish(nodes, shares, placed, &origin)
    }

    /// Feeds the engine the differences from the last inputs; `None` (engine dropped) when there
    /// is no engine, an input is duplicated, or the engine refuses a change.
    fn apply(&mut self, nodes: &[Node], layered: &[Share]) -> Option<Placement> {
        let engine = self.engine.as_mut()?;
        let fresh_nodes = by_id(nodes, |n| &n.id);
        let fresh_layered = by_id(layered, |s| &s.workload.id);
        let (Some(fresh_nodes), Some(fresh_layered)) = (fresh_nodes, fresh_layered) else {
            self.engine = None;
            return None;
        };
        let mut ok = true;
        for id in self
            .nodes
            .keys()
            .filter(|id| !fresh_nodes.contains_key(id.as_str()))
        {
            ok &= engine.handle_node_removed(id).is_ok();
        }
        for (id, node) in &fresh_nodes {
            ok &= match self.nodes.get(*id) {
                None => engine.handle_node_added((*node).clone()).is_ok(),
                Some(old) if old != *node => engine.handle_node_changed((*node).clone()).is_ok(),
                Some(_) => true,
            };
        }
        for id in self
            .layered
            .keys()
            .filter(|id| !fresh_layered.contains_key(id.as_str()))
        {
            ok &= engine.handle_workload_removed(id).is_ok();
        }
        for (id, s) in &fresh_layered {
            if self.layered.get(*id) != Some(*s) {
                ok &= engine.handle_share_upserted((*s).clone()).is_ok();
            }
        }
        if !ok {
            self.engine = None;
            return None;
        }
        let placed = engine.placement().clone();
        self.nodes = owned(fresh_nodes);
        self.layered = owned(fresh_layered);
        Some(placed)
    }

    /// A full pass; the engine is kept for the next update when nothing was rejected.
    fn rebuild(&mut self, nodes: &[Node], layered: &[Share]) -> Placement {
        let mut engine = PlacementEngine::with_shares(nodes, layered);
        let placed = engine.placement().clone();
        if placed.rejected.is_empty() {
            self.nodes = nodes.iter().map(|n| (n.id.clone(), n.clone())).collect();
            self.layered = layered
                .iter()
                .map(|s| (s.workload.id.clone(), s.clone()))
                .collect();
            self.engine = Some(engine);
        } else {
            self.engine = None;
        }
        placed
    }
}

/// The items by id, or `None` when an id repeats.
fn by_id<T>(items: &[T], id: impl Fn(&T) -> &String) -> Option<BTreeMap<&str, &T>> {
    let mut out = BTreeMap::new();
    for item in items {
        if out.insert(id(item).as_str(), item).is_some() {
            return None;
        }
    }
    Some(out)
}

fn owned<T: Clone>(items: BTreeMap<&str, &T>) -> BTreeMap<String, T> {
    items
        .into_iter()
        .map(|(id, item)| (id.to_string(), item.clone()))
        .collect()
}
