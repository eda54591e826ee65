//! Property tests of two-level placement: the cell level over summaries built from random
//! members, and each cell's node level.
//!
//! Meshes are small (one to five cells, a few dozen nodes) so that full cells, down cells,
//! constraints no cell offers and zone homes missing from a cell all happen often.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use shoal_core::cells::PlacementMemo;
use shoal_core::cells::{
    cell_hash, place_cells, place_mesh, summarize, Cell, CellPlacement, CellPlacer,
    CELL_FILL_PERMILLE,
};
use shoal_core::constraint::Constraint;
use shoal_core::placement::hash::RequestScale;
use shoal_core::placement::hash::{
    key, pair_hash, replica_offset, replica_pair, unit, workload_hash,
};
use shoal_core::placement::{Node, Placement, ReplicaId, Spread, Workload};
use shoal_core::resources::Resources;
use shoal_core::stacking::place_stacked;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

const CONSTRAINT_SETS: [&[&str]; 6] = [
    &[],
    &["disk == ssd"],
    &["zone == z1"],
    &["disk == ssd", "zone == z2"],
    &["disk == nvme"],
    &["zone != z0"],
];

/// A mesh: each cell's name and members, and which cells are down.
#[derive(Clone, Debug)]
struct Mesh {
    members: Vec<(String, Vec<Node>)>,
    down: Vec<bool>,
}

impl Mesh {
    fn cells(&self) -> Vec<Cell> {
        self.members
            .iter()
            .zip(&self.down)
            .map(|((name, nodes), &down)| Cell {
                summary: summarize(name, 1, &[], nodes, &Placement::default(), &[], None),
                down,
            })
            .collect()
    }
}

fn arb_mesh(cells: std::ops::Range<usize>) -> impl Strategy<Value = Mesh> {
    (
        cells,
        prop::collection::vec(
            (
                0usize..5,
                1u64..=32,
                0u32..4,
                any::<bool>(),
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
            ),
            0..30,
        ),
        prop::collection::vec(prop::bool::weighted(0.2), 5),
    )
        .prop_map(|(count, nodes, down)| {
            let mut members: Vec<(String, Vec<Node>)> =
                (0..count).map(|c| (format!("c{c}"), Vec::new())).collect();
            for (i, (cell, cores, zone, ssd, draining, node_down)) in nodes.into_iter().enumerate()
            {
                members[cell % count].1.push(Node {
                    id: format!("n{i}"),
                    capacity: Resources::new(cores * 1000, cores * 4 * GIB),
                    labels: [("disk".into(), if ssd { "ssd" } else { "hdd" }.into())].into(),
                    zone: format!("z{zone}"),
                    draining,
                    down: node_down,
                    caps: None,
                });
            }
            Mesh {
                members,
                down: down[..count].to_vec(),
            }
        })
}

fn arb_workloads(request_scale: u64) -> impl Strategy<Value = Vec<Workload>> {
    prop::collection::vec(
        (
            (0u32..8, 1u64..4000, 64u64..8192),
            (
                any::<bool>(),
                0..CONSTRAINT_SETS.len(),
                prop::bool::weighted(0.2),
                -1i32..2,
            ),
        ),
        0..8,
    )
    .prop_map(move |v| {
        v.into_iter()
            .enumerate()
            .map(
                |(i, ((replicas, cpu, mib), (zone, constraints, exclusive, priority)))| Workload {
                    id: format!("w{i}"),
                    replicas,
                    request: Resources::new(
                        (cpu / request_scale).max(1),
                        (mib * MIB / request_scale).max(1),
                    ),
                    spread: if zone { Spread::Zone } else { Spread::Node },
                    constraints: CONSTRAINT_SETS[constraints]
                        .iter()
                        .map(|c| Constraint::parse(c).expect("valid constraint"))
                        .collect(),
                    exclusive,
                    priority,
                    sticky: Default::default(),
                    needs: Default::default(),
                    yields_when_short: false,
                    yields_unplaced: false,
                    cell_level_needs: false,
                    ports_exclusive: false,
                },
            )
            .collect()
    })
}

/// Every replica in exactly one of assigned and unschedulable, on a usable cell.
fn check(cells: &[Cell], workloads: &[Workload], p: &CellPlacement) {
    let usable: BTreeMap<&str, bool> = cells
        .iter()
        .map(|c| (c.summary.cell.as_str(), c.usable()))
        .collect();
    let total: usize = workloads.iter().map(|w| w.replicas as usize).sum();
    assert_eq!(p.assigned.len() + p.unschedulable.len(), total);
    for w in workloads {
        for r in 0..w.replicas {
            let id = ReplicaId::new(&w.id, r);
            assert!(p.assigned.contains_key(&id) != p.unschedulable.contains_key(&id));
        }
    }
    for (r, c) in &p.assigned {
        assert!(usable[c.as_str()], "{r} on dead cell {c}");
    }
    if usable.values().any(|&u| u) {
        assert!(p.unschedulable.is_empty(), "a usable cell exists");
    }
}

/// Requests of the replicas each cell was given.
fn used(workloads: &[Workload], p: &CellPlacement) -> BTreeMap<String, Resources> {
    let requests: BTreeMap<&str, Resources> = workloads
        .iter()
        .map(|w| (w.id.as_str(), w.request))
        .collect();
    let mut used: BTreeMap<String, Resources> = BTreeMap::new();
    for (r, c) in &p.assigned {
        let u = used.entry(c.clone()).or_default();
        *u = u.saturating_add(&requests[r.workload.as_str()]);
    }
    used
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Same inputs in any order: the same cell for every replica.
    #[test]
    fn permutation_invariance(mesh in arb_mesh(1..6), workloads in arb_workloads(1), seed in any::<u64>()) {
        let cells = mesh.cells();
        let base = place_cells(&cells, &workloads);
        check(&cells, &workloads, &base);
        let (mut c2, mut w2) = (cells.clone(), workloads.clone());
        c2.reverse();
        w2.reverse();
        let len = c2.len().max(1);
        c2.rotate_left(seed as usize % len);
        let len = w2.len().max(1);
        w2.rotate_left((seed >> 32) as usize % len);
        prop_assert_eq!(place_cells(&c2, &w2), base);
    }

    /// A replica of an unconstrained node-spread workload is in the first cell of its ranking
    /// that is usable and had room: every usable cell ranked before it (that can hold the request
    /// at all) ends the pass without room for it (room only shrinks during the pass).
    #[test]
    fn full_cells_spill_to_the_next_in_the_ranking(mesh in arb_mesh(2..6), workloads in arb_workloads(1)) {
        let cells = mesh.cells();
        let p = place_cells(&cells, &workloads);
        let used = used(&workloads, &p);
        let budget = |c: &Resources| {
            let part = |x: u64| (u128::from(x) * u128::from(CELL_FILL_PERMILLE) / 1000) as u64;
            Resources::new(part(c.cpu_millis), part(c.memory_bytes))
        };
        for w in workloads.iter().filter(|w| w.constraints.is_empty() && w.spread == Spread::Node) {
            let scale = RequestScale::new(&w.request);
            for r in 0..w.replicas {
                let id = ReplicaId::new(&w.id, r);
                let Some(at) = p.assigned.get(&id) else { continue };
                if p.unsure.contains(&id) {
                    continue;
                }
                let offset = replica_offset(workload_hash(&w.id), r);
                let mut ranked: Vec<(f64, &str, &Cell)> = cells
                    .iter()
                    .filter(|c| {
                        w.request.fits_in(&c.summary.capacity) && w.request.fits_in(&c.summary.largest)
                    })
                    .map(|c| {
                        let pair = pair_hash(workload_hash(&w.id), cell_hash(&c.summary.cell));
                        let k = key(unit(replica_pair(pair, offset)), scale.weight(&c.summary.capacity));
                        (k, c.summary.cell.as_str(), c)
                    })
                    .collect();
                ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
                for (_, name, c) in ranked {
                    if name == at {
                        break;
                    }
                    let room = used
                        .get(name)
                        .copied()
                        .unwrap_or_default()
                        .saturating_add(&w.request)
                        .fits_in(&budget(&c.summary.capacity));
                    prop_assert!(!c.usable() || !room, "{} skipped {} with room for {}", id, name, at);
                }
            }
        }
    }

    /// Scaling a workload from a to b replicas leaves its replicas below min(a, b) in their cells,
    /// whatever room the cells have (they come before the new ones in the canonical order); with
    /// room everywhere, on their nodes too, but for a replica waiting away from a home that is
    /// down or draining.
    #[test]
    fn scaling_moves_no_replica_that_stays(
        mesh in arb_mesh(1..6),
        workloads in arb_workloads(1),
        pick in any::<usize>(),
        to in 0u32..12,
        ample in any::<bool>(),
    ) {
        prop_assume!(!workloads.is_empty());
        let workloads: Vec<Workload> = workloads
            .into_iter()
            .map(|mut w| {
                if ample {
                    w.request = Resources::new(1, 1);
                }
                w
            })
            .collect();
        let cells = mesh.cells();
        let w = pick % workloads.len();
        let mut scaled = workloads.clone();
        scaled[w].replicas = to;
        let stays = workloads[w].replicas.min(to);
        let before = place_cells(&cells, &workloads);
        let after = place_cells(&cells, &scaled);
        for r in 0..stays {
            let id = ReplicaId::new(&workloads[w].id, r);
            prop_assert_eq!(before.assigned.get(&id), after.assigned.get(&id), "{} changed cell", id);
        }
        if ample {
            for (name, nodes) in &mesh.members {
                let before = place_mesh(name, &cells, nodes, &workloads).local;
                let after = place_mesh(name, &cells, nodes, &scaled).local;
                // A replica waiting away from its home (its node with every node up), which is
                // down or draining, may give way to a new sibling whose home it waits on.
                let up: Vec<Node> = nodes
                    .iter()
                    .map(|n| Node { down: false, draining: false, ..n.clone() })
                    .collect();
                let ideal = place_mesh(name, &cells, &up, &workloads).local;
                let away = |id: &ReplicaId| {
                    ideal.assigned.get(id).is_some_and(|home| {
                        nodes.iter().any(|n| &n.id == home && !n.available())
                    })
                };
                for r in 0..stays {
                    let id = ReplicaId::new(&workloads[w].id, r);
                    if !away(&id) {
                        prop_assert_eq!(before.assigned.get(&id), after.assigned.get(&id), "{} changed node", id);
                    }
                }
            }
        }
    }

    /// A mesh of one cell places exactly as single-level placement does.
    #[test]
    fn one_cell_is_single_level(mesh in arb_mesh(1..2), workloads in arb_workloads(1)) {
        let cells = mesh.cells();
        prop_assume!(cells[0].usable());
        let nodes = &mesh.members[0].1;
        let two = place_mesh("c0", &cells, nodes, &workloads);
        let one = place_stacked(nodes, &workloads);
        prop_assert!(two.cells.unsure.iter().all(|r| two.cells.assigned[r] == "c0"));
        prop_assert_eq!(&two.local.assigned, &one.assigned);
        prop_assert_eq!(&two.local.unschedulable, &one.unschedulable);
    }

    /// A replica surely in a cell is in one whose summary offers what its constraints ask, in
    /// its home zone when it has one and a cell offering it has room.
    #[test]
    fn constraints_are_honoured(mesh in arb_mesh(1..6), workloads in arb_workloads(1)) {
        let cells = mesh.cells();
        let p = place_cells(&cells, &workloads);
        let by_name: BTreeMap<&str, &Cell> = cells.iter().map(|c| (c.summary.cell.as_str(), c)).collect();
        for (r, c) in &p.assigned {
            if p.unsure.contains(&r) {
                continue;
            }
            let w = workloads.iter().find(|w| w.id == r.workload).expect("placed workload");
            let s = &by_name[c.as_str()].summary;
            prop_assert!(w.request.fits_in(&s.largest), "{} too large for {}", r, c);
            for constraint in &w.constraints {
                let offered = match (constraint.key.as_str(), constraint.to_string().contains("!=")) {
                    ("zone", true) => s.zones.iter().filter(|z| z.zone != "z0").fold(Resources::default(), |a, z| a.saturating_add(&z.capacity)),
                    ("zone", false) => s.zone_capacity(&constraint.to_string()["zone == ".len()..]),
                    (key, _) => {
                        let value = &constraint.to_string()[key.len() + 4..];
                        s.label_values(key).iter().find(|l| l.value == value).map_or(Resources::default(), |l| l.capacity)
                    }
                };
                prop_assert!(w.request.fits_in(&offered), "{} in {} which does not offer `{}`", r, c, constraint);
            }
        }
    }

    /// Each cell's node level places only its own replicas: across all cells, every replica runs
    /// on one node at most (an exclusive one included), in the cell the cell level chose.
    #[test]
    fn a_replica_runs_in_one_cell_at_most(mesh in arb_mesh(1..6), workloads in arb_workloads(1)) {
        let cells = mesh.cells();
        let mut seen: BTreeSet<ReplicaId> = BTreeSet::new();
        for (name, nodes) in &mesh.members {
            let m = place_mesh(name, &cells, nodes, &workloads);
            for r in m.local.assigned.keys().chain(m.local.unschedulable.keys()) {
                prop_assert_eq!(m.cells.assigned.get(r).map(String::as_str), Some(name.as_str()));
                prop_assert!(seen.insert(r.clone()), "{} placed by two cells", r);
            }
        }
        let p = place_cells(&cells, &workloads);
        prop_assert_eq!(seen.len(), p.assigned.len());
    }

    /// With room everywhere, a cell going down moves only the replicas it had, and coming back
    /// restores the placement exactly.
    #[test]
    fn a_dead_cell_moves_only_its_replicas(mesh in arb_mesh(2..6), workloads in arb_workloads(1_000_000), pick in any::<usize>()) {
        let mut mesh = mesh;
        mesh.down.iter_mut().for_each(|d| *d = false);
        let cells = mesh.cells();
        let before = place_cells(&cells, &workloads);
        let victim = pick % cells.len();
        let mut dead = cells.clone();
        dead[victim].down = true;
        let after = place_cells(&dead, &workloads);
        check(&dead, &workloads, &after);
        let name = &cells[victim].summary.cell;
        for (r, c) in &before.assigned {
            if c != name {
                prop_assert_eq!(after.assigned.get(&r), Some(c), "{} left {}", r, c);
            }
        }
        prop_assert_eq!(place_cells(&cells, &workloads), before);
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// A node of the own cell changes its flags.
    Flags(usize, bool, bool),
    /// A node of the own cell leaves for good.
    Forget(usize),
    /// A cell goes down or comes back.
    CellDown(usize, bool),
    /// A workload changes its replica count.
    Scale(usize, u32),
    /// A workload is deleted.
    Remove(usize),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<usize>(), prop::bool::weighted(0.2), prop::bool::weighted(0.4))
            .prop_map(|(i, d, x)| Op::Flags(i, d, x)),
        1 => any::<usize>().prop_map(Op::Forget),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(c, d)| Op::CellDown(c, d)),
        2 => (any::<usize>(), 0u32..10).prop_map(|(w, r)| Op::Scale(w, r)),
        1 => any::<usize>().prop_map(Op::Remove),
    ]
}

/// Applies `op` to the mesh (its first cell's nodes, the cells' down flags) or the workloads.
fn apply(op: &Op, mesh: &mut Mesh, workloads: &mut Vec<Workload>) {
    match *op {
        Op::Flags(i, draining, down) if !mesh.members[0].1.is_empty() => {
            let nodes = &mut mesh.members[0].1;
            let len = nodes.len();
            (nodes[i % len].draining, nodes[i % len].down) = (draining, down);
        }
        Op::Forget(i) if !mesh.members[0].1.is_empty() => {
            let len = mesh.members[0].1.len();
            mesh.members[0].1.remove(i % len);
        }
        Op::CellDown(c, down) => {
            let len = mesh.down.len();
            mesh.down[c % len] = down;
        }
        Op::Scale(w, r) if !workloads.is_empty() => {
            let len = workloads.len();
            workloads[w % len].replicas = r;
        }
        Op::Remove(w) if !workloads.is_empty() => {
            let len = workloads.len();
            workloads.remove(w % len);
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// The agent's incremental placer equals the full computation after every change.
    #[test]
    fn incremental_equals_full(
        mesh in arb_mesh(1..5),
        workloads in arb_workloads(1),
        ops in prop::collection::vec(arb_op(), 1..15),
    ) {
        let (mut mesh, mut workloads) = (mesh, workloads);
        let own = mesh.members[0].0.clone();
        let mut placer = CellPlacer::new();
        for op in &ops {
            apply(op, &mut mesh, &mut workloads);
            let cells = mesh.cells();
            let nodes = &mesh.members[0].1;
            let full = place_mesh(&own, &cells, nodes, &workloads);
            prop_assert_eq!(placer.update(&own, &cells, nodes, &workloads), &full, "after {:?}", op);
        }
    }

    /// Agents sharing a memo (the simulator's) place as the full computation does: one agent
    /// updating at every change, a second only at some (its engine catching up from older
    /// inputs after the memo served it), a third of another cell; every result equals
    /// `place_mesh`, and the memo serves the inputs met before.
    #[test]
    fn placers_sharing_a_memo_equal_full(
        mesh in arb_mesh(2..5),
        workloads in arb_workloads(1),
        ops in prop::collection::vec((arb_op(), any::<bool>()), 1..15),
    ) {
        let (mut mesh, mut workloads) = (mesh, workloads);
        let memo = Arc::new(PlacementMemo::new());
        let mut placers: Vec<CellPlacer> = (0..3).map(|_| CellPlacer::new()).collect();
        for p in &mut placers {
            p.set_memo(Some(memo.clone()));
        }
        let mut calls = 0u64;
        for (op, second_too) in &ops {
            apply(op, &mut mesh, &mut workloads);
            let cells = mesh.cells();
            for (i, p) in placers.iter_mut().enumerate() {
                if i == 1 && !second_too {
                    continue;
                }
                let (own, nodes) = match i {
                    2 => (&mesh.members[1].0, &mesh.members[1].1),
                    _ => (&mesh.members[0].0, &mesh.members[0].1),
                };
                let full = place_mesh(own, &cells, nodes, &workloads);
                prop_assert_eq!(p.update(own, &cells, nodes, &workloads), &full, "placer {} after {:?}", i, op);
                calls += 1;
            }
        }
        let stats = memo.stats();
        // Each call that redid the cell level asked the memo once; the second placer's calls
        // at the first's inputs were served.
        prop_assert!(stats.cell_hits + stats.cell_misses <= calls);
        prop_assert!(stats.node_hits + stats.node_misses == calls);
        if ops.iter().any(|(_, second)| *second) {
            prop_assert!(stats.node_hits > 0, "{:?}", stats);
        }
    }
}

/// Equal cells with room to spare take a workload's replicas in equal shares, give or take
/// chance: 10,000 replicas over 100 cells, 100 each on average, every cell within 50 to 150
/// (five standard deviations of a fair draw). Ranking each replica by the pair hash plus its
/// offset gave 2 to 348 (one token per cell on a ring).
#[test]
fn the_cell_level_spreads_replicas_evenly() {
    let cells: Vec<Cell> = (1..=100)
        .map(|i| {
            let name = format!("c{i}");
            let nodes: Vec<Node> = (0..100)
                .map(|n| Node {
                    id: format!("{name}-n{n}"),
                    capacity: Resources::new(8_000, 16 * GIB),
                    labels: BTreeMap::new(),
                    zone: format!("z{}", n % 3),
                    draining: false,
                    down: false,
                    caps: None,
                })
                .collect();
            let summary = summarize(&name, 1, &[], &nodes, &Placement::default(), &[], None);
            Cell {
                summary,
                down: false,
            }
        })
        .collect();
    for spread in [Spread::Node, Spread::Zone] {
        let w = Workload {
            id: "web".to_string(),
            replicas: 10_000,
            request: Resources::new(500, 512 * MIB),
            spread,
            constraints: Vec::new(),
            exclusive: false,
            priority: 0,
            sticky: Default::default(),
            needs: Default::default(),
            yields_when_short: false,
            yields_unplaced: false,
            cell_level_needs: false,
            ports_exclusive: false,
        };
        let p = place_cells(&cells, std::slice::from_ref(&w));
        let mut per: BTreeMap<&str, u32> = BTreeMap::new();
        for c in p.assigned.values() {
            *per.entry(c.as_str()).or_default() += 1;
        }
        assert_eq!(per.values().sum::<u32>(), 10_000, "{spread:?}");
        assert_eq!(per.len(), 100, "{spread:?}: every cell takes some: {per:?}");
        let (min, max) = (per.values().min().unwrap(), per.values().max().unwrap());
        assert!(
            (50..=150).contains(min) && (50..=150).contains(max),
            "{spread:?}: {min} to {max} replicas per cell"
        );
    }
}
