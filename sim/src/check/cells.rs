//! The target placement of a mesh of cells, computed as its agents compute it. Each agent
//! places in two levels over the view of the cells its host loop adopted
//! (`MeshNode::cells.adopted()`): the cell level over that view, then the node level of its own
//! cell's share on its cell's members; while it knows no other cell, single-level placement of
//! every workload on its cell's members (what its host loop then does); while it holds its
//! placement, nothing. An agent runs what its own placement gives
//! its host, so the target is, for each host that is up, the replicas its agent's view places
//! on it. The target itself is judged: a replica two agents' views place on themselves, or one
//! no view places on an up host and none declares unschedulable, is a gap, so a disagreement
//! between views can never pass as converged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use shoal_core::cells::PlacementMemo;
use shoal_core::cells::{Cell, CellPlacement};
use shoal_core::instance::ReplicaId;
use shoal_core::placement::model::{Node, Placement, Workload};

use super::HostView;
use crate::host::HostState;

/// One up agent's adopted view of the mesh's cells (`None` inside: it places in one level), with
/// its key: equal keys, equal views, up to hash collisions, so the key only says where to look;
/// equality is decided on the views.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    /// The view's hash (`None` with `cells`).
    pub key: Option<u64>,
    /// The cells it places over (the host loop's own copy, shared).
    pub cells: Option<Arc<Vec<Cell>>>,
    /// It holds its placement: it places nothing.
    pub held: bool,
}

/// Each up agent's view of the mesh's cells, by host index.
pub type Views = BTreeMap<u32, View>;

/// Brings `views` to the up agents of `hosts` (none when the scenario has no cells): each
/// agent's adopted view, shared with its host loop (no copy). Whether a view moved.
pub fn refresh_views(hosts: &[HostView<'_>], views: &mut Views) -> bool {
    let mut moved = false;
    let mut up = BTreeSet::new();
    for h in hosts
        .iter()
        .filter(|h| h.state == HostState::Up && h.cell.is_some())
    {
        let Some(node) = h.node else { continue };
        up.insert(h.index);
        let adopted = node.cells.adopted();
        let view = View {
            key: adopted.key,
            cells: adopted.cells,
            held: adopted.held,
        };
        // Equal keys first; an `Arc` of equal views compares its pointers before its cells.
        if views.get(&h.index) == Some(&view) {
            continue;
        }
        views.insert(h.index, view);
        moved = true;
    }
    let len = views.len();
    views.retain(|index, _| up.contains(index));
    moved || views.len() != len
}

/// The merged target and what is wrong with it.
#[derive(Default)]
pub struct CellTarget {
    /// Replica to the host whose agent places it on itself (the lowest such host when two do).
    pub placement: Placement,
    /// Replicas placed on two hosts, or on none (and not unschedulable), in replica order.
    pub gaps: Vec<String>,
}

/// Each cell's known hosts (`up`: those up now) as its agents' node level sees them.
pub fn members(
    hosts: &[HostView<'_>],
    known: &BTreeSet<u32>,
    up: &BTreeSet<u32>,
    algorithm: u32,
) -> BTreeMap<String, Vec<Node>> {
    let mut members: BTreeMap<String, Vec<Node>> = BTreeMap::new();
    for h in hosts.iter().filter(|h| known.contains(&h.index)) {
        let Some(cell) = h.cell else { continue };
        let node = super::truth::placement_node(h, up.contains(&h.index), algorithm);
        members.entry(cell.to_string()).or_default().push(node);
    }
    members
}

/// The target for a mesh of cells whose cells hold `members` ([`members`]), under the truth's
/// `key` (see [`merge`]).
pub fn target(
    hosts: &[HostView<'_>],
    members: &BTreeMap<String, Vec<Node>>,
    workloads: &[Workload],
    views: &Views,
    memo: &PlacementMemo,
    cache: &mut Placed,
    key: u64,
) -> CellTarget {
    let agents: Vec<Agent<'_>> = hosts
        .iter()
        .filter(|h| views.get(&h.index).is_none_or(|v| !v.held))
        .filter_map(|h| {
            Some(Agent {
                name: h.name,
                cell: h.cell?,
                view: views.get(&h.index)?.cells.as_ref(),
                key: views.get(&h.index)?.key.unwrap_or(0),
            })
        })
        .collect();
    let mut target = merge(members, workloads, &agents, memo, cache, key);
    // Agents that hold their placement place nothing: name them in the first gap of a replica no
    // one places (the one a failed convergence shows).
    if target.gaps.iter().any(|g| g.contains("placed on no host")) {
        let mut held: BTreeMap<&str, usize> = BTreeMap::new();
        for h in hosts {
            if views.get(&h.index).is_some_and(|v| v.held) {
                *held.entry(h.cell.unwrap_or("-")).or_default() += 1;
            }
        }
        if !held.is_empty() {
            let held = counted(held.iter().map(|(c, n)| (c.to_string(), *n)));
            if let Some(gap) = target
                .gaps
                .iter_mut()
                .find(|g| g.contains("placed on no host"))
            {
                gap.push_str(&format!("; agents holding their placement: {held}"));
            }
        }
    }
    target
}

/// Most gap replicas explained ([`explain`]) in one sample.
const GAPS_EXPLAINED_MAX: usize = 3;
/// Most cells named in one part of an explanation.
const CELLS_NAMED_MAX: usize = 6;

/// `cell (count), ...` for up to [`CELLS_NAMED_MAX`] of `counts`, then how many more.
fn counted(counts: impl Iterator<Item = (String, usize)>) -> String {
    let all: Vec<(String, usize)> = counts.collect();
    let mut text: Vec<String> = all
        .iter()
        .take(CELLS_NAMED_MAX)
        .map(|(c, n)| format!("{c} ({n})"))
        .collect();
    if all.len() > CELLS_NAMED_MAX {
        text.push(format!("{} more", all.len() - CELLS_NAMED_MAX));
    }
    text.join(", ")
}

/// Where the agents' views put `r`, which none of them places on itself: by the cell each
/// view's cell level gives it (or the host its own cell's node level gives it), the agents
/// holding such a view, by their cell. A disagreement between the views of two cells shows as
/// two answers.
fn explain<'a>(
    r: &ReplicaId,
    placed: &[(ViewKey<'a>, Arc<Placement>)],
    hashes: &[u64],
    agents_of: &[BTreeMap<&str, usize>],
    workloads: &[Workload],
    levels: &mut Levels<'a>,
    memo: &PlacementMemo,
) -> String {
    let mut answers: BTreeMap<String, BTreeMap<&str, usize>> = BTreeMap::new();
    // The first view behind each answer, to say how the views behind two answers differ.
    let mut views: BTreeMap<String, &Arc<Vec<Cell>>> = BTreeMap::new();
    for (at, ((cell, view), local)) in placed.iter().enumerate() {
        let answer = match local.assigned.get(r) {
            Some(node) => format!("on {node} of {cell}"),
            None => match view {
                None => format!("not in {cell} (one level)"),
                Some(cells) => match levels
                    .get(cells, hashes[at], workloads, memo)
                    .assigned
                    .get(r)
                {
                    Some(c) if c == cell => format!("in {c}, on no host of it"),
                    Some(c) => format!("in {c}"),
                    None => "nowhere (unsure or unschedulable)".to_string(),
                },
            },
        };
        if let Some(v) = view {
            views.entry(answer.clone()).or_insert(v);
        }
        let by = answers.entry(answer).or_default();
        for (c, n) in &agents_of[at] {
            *by.entry(c).or_default() += n;
        }
    }
    let parts: Vec<String> = answers
        .iter()
        .map(|(answer, by)| {
            let agents: usize = by.values().sum();
            format!(
                "{answer} by {agents} agents of {}",
                counted(by.iter().map(|(c, n)| (c.to_string(), *n)))
            )
        })
        .collect();
    let mut text = format!("the views place it {}", parts.join("; "));
    let behind: Vec<(&String, &&Arc<Vec<Cell>>)> = views.iter().collect();
    if let [(a, first), rest @ ..] = behind.as_slice() {
        for (b, other) in rest {
            let diff = view_diff(first, other);
            if !diff.is_empty() {
                text.push_str(&format!(
                    "; the view placing it {a} and the one placing it {b} differ in {}",
                    diff.join(", ")
                ));
            }
        }
    }
    text
}

/// The cells in which two views differ, and how (up to [`CELLS_NAMED_MAX`], then how many
/// more): a cell only one of them holds, or the fields of its summary or its down flag that
/// differ, as the first view has them / as the second has them.
fn view_diff(a: &[Cell], b: &[Cell]) -> Vec<String> {
    let by_name = |cells: &[Cell]| -> BTreeMap<String, Cell> {
        cells
            .iter()
            .map(|c| (c.summary.cell.clone(), c.clone()))
            .collect()
    };
    let (a, b) = (by_name(a), by_name(b));
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut out = Vec::new();
    for name in names {
        let what = match (a.get(name), b.get(name)) {
            (Some(_), None) => "held by the first only".to_string(),
            (None, Some(_)) => "held by the second only".to_string(),
            (Some(x), Some(y)) if x != y => {
                let (s, t) = (&x.summary, &y.summary);
                let mut fields = Vec::new();
                if x.down != y.down {
                    fields.push(format!("down {} / {}", x.down, y.down));
                }
                if s.members != t.members {
                    fields.push(format!("members {} / {}", s.members, t.members));
                }
                if s.capacity != t.capacity {
                    fields.push(format!("capacity {:?} / {:?}", s.capacity, t.capacity));
                }
                if s.largest != t.largest {
                    fields.push(format!("largest {:?} / {:?}", s.largest, t.largest));
                }
                if s.zones != t.zones {
                    fields.push(format!("zones {:?} / {:?}", s.zones, t.zones));
                }
                if s.labels != t.labels {
                    fields.push("labels".to_string());
                }
                if fields.is_empty() {
                    fields.push("another field".to_string());
                }
                fields.join(" ")
            }
            _ => continue,
        };
        out.push(format!("{name} ({what})"));
    }
    if out.len() > CELLS_NAMED_MAX {
        let more = out.len() - CELLS_NAMED_MAX;
        out.truncate(CELLS_NAMED_MAX);
        out.push(format!("{more} more"));
    }
    out
}

/// One up agent: its host's name, its cell and its view of the cells.
pub struct Agent<'a> {
    /// Its host's node name.
    pub name: &'a str,
    /// Its cell.
    pub cell: &'a str,
    /// Its view of the cells (`None`: it knows no other cell and places in one level).
    pub view: Option<&'a Arc<Vec<Cell>>>,
    /// A hash of `view` ([`View::key`]; any value will do, equal ones only cost a search).
    pub key: u64,
}

/// A cell and one view of the cells: agents sharing both place alike.
type ViewKey<'a> = (&'a str, Option<&'a Arc<Vec<Cell>>>);

/// What [`merge`] placed at the last sample, by cell and view: kept while the members of the
/// cells and the workloads stand (the truth's key), so that a view that stands from one sample
/// to the next is not placed again (while a mesh of 5,000 forms, hundreds of distinct views
/// stand at once, more than the shared memo keeps: the checker placed most of them again at
/// every sample, and pushed the agents' own results out of the memo).
#[derive(Default)]
pub struct Placed {
    /// The truth key the entries were placed under.
    key: u64,
    /// By cell, then by view key.
    entries: PlacedViews,
}

/// Placements by cell, then by view key ([`Placed`]).
type PlacedViews = BTreeMap<String, BTreeMap<Option<u64>, Vec<PlacedView>>>;

/// One (cell, view)'s placement of its cell's replicas.
struct PlacedView {
    view: Option<Arc<Vec<Cell>>>,
    local: Arc<Placement>,
    /// The replicas either level declared unschedulable.
    unschedulable: Vec<ReplicaId>,
}

impl Placed {
    /// An earlier sample's placement of `cell` under `view` (key `hint`), if it kept one.
    fn get(
        &self,
        cell: &str,
        hint: Option<u64>,
        view: Option<&Arc<Vec<Cell>>>,
    ) -> Option<&PlacedView> {
        let list = self.entries.get(cell)?.get(&hint)?;
        list.iter().find(|p| p.view.as_ref() == view)
    }
}

/// Where `list` holds `key`, found through `at` (what its hash points at): that entry when it
/// is `key`, any entry that is when two keys hash alike, none when the hash points nowhere
/// (equal keys hash alike).
fn find<K: PartialEq, V>(list: &[(K, V)], at: Option<usize>, key: &K) -> Option<usize> {
    match at {
        Some(at) if list[at].0 == *key => Some(at),
        Some(_) => list.iter().position(|(k, _)| k == key),
        None => None,
    }
}

/// Each distinct view's cell level in one sample, placed once, found by the view's key.
#[derive(Default)]
struct Levels<'a> {
    list: Vec<(&'a Arc<Vec<Cell>>, Arc<CellPlacement>)>,
    at: BTreeMap<u64, usize>,
}

impl<'a> Levels<'a> {
    /// The cell level of `cells` (key `key`), placed through `memo` on its first asking.
    fn get(
        &mut self,
        cells: &'a Arc<Vec<Cell>>,
        key: u64,
        workloads: &[Workload],
        memo: &PlacementMemo,
    ) -> &CellPlacement {
        let at = match find(&self.list, self.at.get(&key).copied(), &cells) {
            Some(at) => at,
            None => {
                self.list.push((cells, memo.place_cells(cells, workloads)));
                self.list.len() - 1
            }
        };
        self.at.insert(key, at);
        &self.list[at].1
    }
}

/// Places agent `a`'s cell as its view does: its cell's share of the cell level (`levels`),
/// then the node level on the cell's `members`; or, with no view, every workload on them.
/// With the replicas either level declared unschedulable.
fn place<'a>(
    a: &Agent<'a>,
    members: &BTreeMap<String, Vec<Node>>,
    workloads: &[Workload],
    levels: &mut Levels<'a>,
    memo: &PlacementMemo,
) -> (Arc<Placement>, Vec<ReplicaId>) {
    let nodes = members.get(a.cell).map_or(&[][..], |n| n.as_slice());
    let mut dropped: Vec<ReplicaId> = Vec::new();
    let local = match a.view {
        None => memo.place_stacked(nodes, workloads),
        Some(cells) => {
            let level = levels.get(cells, a.key, workloads, memo);
            dropped.extend(level.unschedulable.keys().cloned());
            memo.place_stacked_shares(nodes, &level.shares(a.cell, workloads))
        }
    };
    dropped.extend(local.unschedulable.keys().cloned());
    (local, dropped)
}

/// Places as every agent does (pure; see the module doc) and merges what each places on itself.
/// Each distinct input is placed through `memo`, which the agents share: an input one of them
/// placed already, or an earlier sample did, is not placed again (the result is the same). A
/// (cell, view) the last sample placed under the same `key` (the members and workloads) is
/// taken from `cache`.
pub fn merge(
    members: &BTreeMap<String, Vec<Node>>,
    workloads: &[Workload],
    agents: &[Agent<'_>],
    memo: &PlacementMemo,
    cache: &mut Placed,
    key: u64,
) -> CellTarget {
    if cache.key != key {
        *cache = Placed {
            key,
            entries: BTreeMap::new(),
        };
    }
    // Agents of a cell usually hold the same view: each distinct (cell, view) is placed once,
    // and each distinct view's cell level once. Found by their keys (equal views have equal
    // keys; the views are compared too, for the keys' collisions).
    let mut levels = Levels::default();
    let mut placed: Vec<(ViewKey<'_>, Arc<Placement>)> = Vec::new();
    let mut placed_at: BTreeMap<(&str, Option<u64>), usize> = BTreeMap::new();
    let mut unschedulable: BTreeSet<ReplicaId> = BTreeSet::new();
    let mut kept = PlacedViews::new();
    let mut target = CellTarget::default();
    let mut agent_at: Vec<usize> = Vec::with_capacity(agents.len());
    for a in agents {
        let key = (a.cell, a.view);
        let hint = (a.cell, a.view.map(|_| a.key));
        let at = match find(&placed, placed_at.get(&hint).copied(), &key) {
            Some(at) => at,
            None => {
                let (local, dropped) = match cache.get(a.cell, hint.1, a.view) {
                    Some(p) => (p.local.clone(), p.unschedulable.clone()),
                    None => place(a, members, workloads, &mut levels, memo),
                };
                unschedulable.extend(dropped.iter().cloned());
                kept.entry(a.cell.to_string())
                    .or_default()
                    .entry(hint.1)
                    .or_default()
                    .push(PlacedView {
                        view: a.view.cloned(),
                        local: local.clone(),
                        unschedulable: dropped,
                    });
                placed.push((key, local));
                placed.len() - 1
            }
        };
        placed_at.insert(hint, at);
        agent_at.push(at);
    }
    // What this sample placed is what the next one may take (a view no agent holds now is
    // dropped: the cache holds at most one entry per distinct (cell, view) of one sample).
    cache.entries = kept;
    // A placement several agents share is indexed by host, walked once (not once per agent of
    // it: 5,000 agents each walking their cell's whole placement); one only one agent reads is
    // walked by that agent.
    let mut uses = vec![0usize; placed.len()];
    for &at in &agent_at {
        uses[at] += 1;
    }
    let mut hashes = vec![0u64; placed.len()];
    for (a, &at) in agents.iter().zip(&agent_at) {
        hashes[at] = a.key;
    }
    let by_node: Vec<Option<BTreeMap<&str, Vec<&ReplicaId>>>> = placed
        .iter()
        .zip(&uses)
        .map(|((_, p), &uses)| {
            (uses > 1).then(|| {
                let mut index: BTreeMap<&str, Vec<&ReplicaId>> = BTreeMap::new();
                for (r, node) in &p.assigned {
                    index.entry(node.as_str()).or_default().push(r);
                }
                index
            })
        })
        .collect();
    let mut own: Vec<&ReplicaId> = Vec::new();
    for (a, &at) in agents.iter().zip(&agent_at) {
        own.clear();
        match &by_node[at] {
            Some(index) => own.extend(index.get(a.name).into_iter().flatten().copied()),
            None => own.extend(
                placed[at]
                    .1
                    .assigned
                    .iter()
                    .filter(|(_, node)| *node == a.name)
                    .map(|(r, _)| r),
            ),
        }
        for &r in &own {
            match target.placement.assigned.get(r) {
                Some(first) => target.gaps.push(format!(
                    "{r} is placed on two hosts: {first} and {} each place it on themselves",
                    a.name
                )),
                None => {
                    target
                        .placement
                        .assigned
                        .insert(r.clone(), a.name.to_string());
                }
            }
        }
    }
    // A replica no view places is a gap; the first few say where the views put it instead.
    let mut nowhere: Vec<ReplicaId> = Vec::new();
    for w in workloads {
        for i in 0..w.replicas {
            let r = ReplicaId::new(&w.id, i);
            if !target.placement.assigned.contains_key(&r) && !unschedulable.contains(&r) {
                nowhere.push(r);
            }
        }
    }
    let mut agents_of: Vec<BTreeMap<&str, usize>> = Vec::new();
    if !nowhere.is_empty() {
        agents_of = vec![BTreeMap::new(); placed.len()];
        for (a, &at) in agents.iter().zip(&agent_at) {
            *agents_of[at].entry(a.cell).or_default() += 1;
        }
    }
    for (i, r) in nowhere.iter().enumerate() {
        let gap = format!("{r} is placed on no host (no up agent's view places it on itself)");
        target.gaps.push(match i < GAPS_EXPLAINED_MAX {
            true => {
                let why = explain(
                    r,
                    &placed,
                    &hashes,
                    &agents_of,
                    workloads,
                    &mut levels,
                    memo,
                );
                format!("{gap}: {why}")
            }
            false => gap,
        });
    }
    target.gaps.sort();
    target
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::truth::{Copies, Copy};
    use crate::check::Checker;
    use shoal::state::mesh::view::placement_workload;
    use shoal_core::cells::summarize;
    use shoal_core::instance::Phase;
    use shoal_core::resources::Resources;
    use shoal_core::spec::WorkloadSpec;

    fn spec() -> WorkloadSpec {
        let text = "name = \"web\"\nreplicas = 4\n[process]\ncommand = [\"sleep\", \"9\"]\n\
                    [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";
        WorkloadSpec::from_toml_str(text, "test.toml").unwrap()
    }

    /// Two cells of two hosts: c1 = n1, n3; c2 = n2, n4.
    fn members() -> BTreeMap<String, Vec<Node>> {
        let node = |i: u32| Node {
            id: format!("n{i}"),
            capacity: Resources::new(4000, 8 << 30),
            labels: BTreeMap::new(),
            zone: "z1".into(),
            draining: false,
            down: false,
            caps: None,
        };
        BTreeMap::from([
            ("c1".to_string(), vec![node(1), node(3)]),
            ("c2".to_string(), vec![node(2), node(4)]),
        ])
    }

    fn cells(members: &BTreeMap<String, Vec<Node>>) -> Vec<Cell> {
        members
            .iter()
            .map(|(c, nodes)| Cell {
                summary: summarize(c, 1, &[], nodes, &Placement::default(), &[], None),
                down: false,
            })
            .collect()
    }

    /// The agents n1, n3 (c1, viewing `c1`) and n2, n4 (c2, viewing `c2`).
    fn agents<'a>(
        c1: Option<&'a Arc<Vec<Cell>>>,
        c2: Option<&'a Arc<Vec<Cell>>>,
    ) -> Vec<Agent<'a>> {
        [
            ("n1", "c1", c1),
            ("n3", "c1", c1),
            ("n2", "c2", c2),
            ("n4", "c2", c2),
        ]
        .into_iter()
        .map(|(name, cell, view)| Agent {
            name,
            cell,
            view,
            key: 0,
        })
        .collect()
    }

    #[test]
    fn agreeing_cells_place_every_replica_once() {
        let m = members();
        let w = vec![placement_workload(&spec())];
        let view = Arc::new(cells(&m));
        let t = merge(
            &m,
            &w,
            &agents(Some(&view), Some(&view)),
            &PlacementMemo::new(),
            &mut Placed::default(),
            0,
        );
        assert_eq!(t.gaps, Vec::<String>::new());
        assert_eq!(t.placement.assigned.len(), 4);
    }

    #[test]
    fn a_view_that_stands_is_placed_once_across_samples_while_the_key_stands() {
        let m = members();
        let w = vec![placement_workload(&spec())];
        let view = Arc::new(cells(&m));
        let memo = PlacementMemo::new();
        let mut cache = Placed::default();
        let agents = agents(Some(&view), Some(&view));
        let first = merge(&m, &w, &agents, &memo, &mut cache, 7);
        let asked = memo.stats();
        let again = merge(&m, &w, &agents, &memo, &mut cache, 7);
        assert_eq!(
            memo.stats(),
            asked,
            "the second sample asked the memo again"
        );
        assert_eq!(
            (&again.placement, &again.gaps),
            (&first.placement, &first.gaps)
        );
        // Another key (the members or workloads moved): placed again, through the memo.
        let moved = merge(&m, &w, &agents, &memo, &mut cache, 8);
        assert!(
            memo.stats().cell_hits > asked.cell_hits,
            "{:?}",
            memo.stats()
        );
        assert_eq!(moved.placement, first.placement);
    }

    #[test]
    fn a_cell_placing_alone_or_a_cell_without_agents_is_a_gap() {
        let m = members();
        let w = vec![placement_workload(&spec())];
        let view = Arc::new(cells(&m));
        // c1 knows no other cell: it places all four replicas itself, c2 places its share.
        let t = merge(
            &m,
            &w,
            &agents(None, Some(&view)),
            &PlacementMemo::new(),
            &mut Placed::default(),
            0,
        );
        assert!(
            t.gaps.iter().any(|g| g.contains("placed on two hosts")),
            "{:?}",
            t.gaps
        );
        // No agent of c1 is up and c2 has not seen c1 down: c1's share is placed nowhere.
        let only_c2: Vec<Agent<'_>> = agents(None, Some(&view)).into_iter().skip(2).collect();
        let t = merge(
            &m,
            &w,
            &only_c2,
            &PlacementMemo::new(),
            &mut Placed::default(),
            0,
        );
        assert!(
            t.gaps.iter().any(|g| g.contains("placed on no host")),
            "{:?}",
            t.gaps
        );
        // And the gap itself (what a failed convergence shows) says where the views put it: in
        // c1, by the two agents of c2.
        assert!(
            t.gaps.iter().any(|g| g.contains("placed on no host")
                && g.contains("the views place it in c1 by 2 agents of c2 (2)")),
            "{:?}",
            t.gaps
        );
    }

    /// Two cells each holding itself down and the other up place their replicas in each other:
    /// no one places them, and the gap says where each view puts one and how the views differ.
    #[test]
    fn a_gap_between_two_views_says_where_each_puts_it_and_how_they_differ() {
        let m = members();
        let w = vec![placement_workload(&spec())];
        let down = |cell: &str| {
            let mut view = cells(&m);
            for c in &mut view {
                c.down = c.summary.cell == cell;
            }
            Arc::new(view)
        };
        let (c1_down, c2_down) = (down("c1"), down("c2"));
        let t = merge(
            &m,
            &w,
            &agents(Some(&c1_down), Some(&c2_down)),
            &PlacementMemo::new(),
            &mut Placed::default(),
            0,
        );
        let gap = t
            .gaps
            .iter()
            .find(|g| g.contains("placed on no host"))
            .unwrap_or_else(|| panic!("{:?}", t.gaps));
        assert!(gap.contains("in c1 by 2 agents of c2 (2)"), "{gap}");
        assert!(gap.contains("in c2 by 2 agents of c1 (2)"), "{gap}");
        assert!(
            gap.contains("differ in c1 (down false / true), c2 (down true / false)"),
            "{gap}"
        );
    }

    /// The checker over a correct cell target: a replica running twice, a replica running
    /// nowhere and a replica of a deleted workload each fail running = desired.
    #[test]
    fn the_checker_fails_a_replica_twice_nowhere_or_deleted() {
        let m = members();
        let spec = spec();
        let w = vec![placement_workload(&spec)];
        let view = Arc::new(cells(&m));
        let t = merge(
            &m,
            &w,
            &agents(Some(&view), Some(&view)),
            &PlacementMemo::new(),
            &mut Placed::default(),
            0,
        );
        let mut checker = Checker::default();
        checker
            .latest
            .insert("web".into(), (Some("v1".into()), Some(spec)));
        checker.truth.placement = t.placement.clone();
        let copy = |host: u32| Copy {
            handle: String::new(),
            host,
            phase: Phase::Running,
            ready_ms: 0,
            version: "v1".into(),
            revision: 0,
            exclusive: false,
        };
        let host_of = |node: &str| node[1..].parse::<u32>().unwrap() - 1;
        let good: Copies = t
            .placement
            .assigned
            .iter()
            .map(|(r, n)| (r.clone(), vec![copy(host_of(n))]))
            .collect();
        assert_eq!(checker.first_gap(&good, &[]), None);

        let mut twice = good.clone();
        let r0 = ReplicaId::new("web", 0);
        let other = (host_of(&t.placement.assigned[&r0]) + 1) % 4;
        twice.get_mut(&r0).unwrap().push(copy(other));
        let gap = checker.first_gap(&twice, &[]).unwrap();
        assert!(gap.starts_with("web/0 placed on"), "{gap}");

        let mut nowhere = good.clone();
        nowhere.remove(&ReplicaId::new("web", 2));
        let gap = checker.first_gap(&nowhere, &[]).unwrap();
        assert!(gap.contains("runs on nowhere"), "{gap}");

        let mut deleted = good.clone();
        deleted.insert(ReplicaId::new("db", 0), vec![copy(1)]);
        let gap = checker.first_gap(&deleted, &[]).unwrap();
        assert!(gap.contains("db/0 is not desired"), "{gap}");

        checker.truth.cell_gaps = vec!["web/1 is placed on two hosts".into()];
        assert_eq!(
            checker.first_gap(&good, &[]).as_deref(),
            Some("web/1 is placed on two hosts")
        );
    }
}
