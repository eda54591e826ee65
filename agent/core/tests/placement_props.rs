//! Property tests of the placement engine: the properties listed in the placement brief.
//!
//! Inputs are small (a few to a few dozen nodes and workloads) so that contention, ties, spread
//! limits and infeasible requests all happen often; case counts keep the suite to seconds in debug.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use shoal_core::constraint::Constraint;
use shoal_core::placement::{
    place, Node, Placement, PlacementEngine, ReplicaId, Spread, Unschedulable, Workload,
};
use shoal_core::resources::Resources;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

const CONSTRAINT_SETS: [&[&str]; 6] = [
    &[],
    &["disk == ssd"],
    &["zone != z0"],
    &["disk == ssd", "zone in (z1, z2)"],
    &["disk == nvme"],
    &["disk == ssd", "disk == hdd"],
];

fn arb_node(id_pool: u32) -> impl Strategy<Value = Node> {
    (
        0..id_pool,
        1u64..=32,
        1u64..=64,
        0u32..4,
        any::<bool>(),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(id, cores, gib, zone, ssd, draining, down)| Node {
            id: format!("n{id}"),
            capacity: Resources::new(cores * 1000, gib * GIB),
            labels: [(
                "disk".to_string(),
                if ssd { "ssd" } else { "hdd" }.to_string(),
            )]
            .into(),
            zone: format!("z{zone}"),
            draining,
            down,
            caps: None,
        })
}

fn arb_workload(id_pool: u32) -> impl Strategy<Value = Workload> {
    (
        (0..id_pool, 0u32..7, 100u64..8000, 64u64..16384),
        (
            any::<bool>(),
            0..CONSTRAINT_SETS.len(),
            prop::bool::weighted(0.2),
            -1i32..3,
        ),
    )
        .prop_map(
            |((id, replicas, cpu, mib), (zone, constraints, exclusive, priority))| Workload {
                id: format!("w{id}"),
                replicas,
                request: Resources::new(cpu, mib * MIB),
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
}

fn unique_nodes(v: Vec<Node>) -> Vec<Node> {
    v.into_iter()
        .map(|n| (n.id.clone(), n))
        .collect::<BTreeMap<_, _>>()
        .into_values()
        .collect()
}

fn unique_workloads(v: Vec<Workload>) -> Vec<Workload> {
    v.into_iter()
        .map(|w| (w.id.clone(), w))
        .collect::<BTreeMap<_, _>>()
        .into_values()
        .collect()
}

fn arb_inputs() -> impl Strategy<Value = (Vec<Node>, Vec<Workload>)> {
    (
        prop::collection::vec(arb_node(16), 0..14).prop_map(unique_nodes),
        prop::collection::vec(arb_workload(10), 0..9).prop_map(unique_workloads),
    )
}

/// Checks, from the outside, everything a placement must satisfy (properties 5, 6 and 11).
fn check_placement(nodes: &[Node], workloads: &[Workload], p: &Placement) {
    let by_id: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let mut used: BTreeMap<&str, Resources> = BTreeMap::new();
    for w in workloads {
        let mut held: Vec<&Node> = Vec::new();
        for r in 0..w.replicas {
            let id = ReplicaId::new(&w.id, r);
            // Every replica, exclusive or not, is either on exactly one node or unschedulable.
            assert!(
                p.assigned.contains_key(&id) != p.unschedulable.contains_key(&id),
                "{id}"
            );
            if let Some(n) = p.assigned.get(&id) {
                let node = by_id[n.as_str()];
                assert!(node.available(), "{id} on down or draining {n}");
                assert!(w.constraints.iter().all(|c| c.matches(
                    &node.labels,
                    &node.zone,
                    &node.id
                )));
                let u = used.entry(node.id.as_str()).or_default();
                *u = u.saturating_add(&w.request);
                held.push(node);
            }
        }
        let distinct: BTreeSet<&str> = held.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(
            distinct.len(),
            held.len(),
            "{}: two replicas on one node",
            w.id
        );
        if w.spread == Spread::Zone {
            check_zone_spread(w, &held, nodes, p, workloads);
        }
    }
    for (n, u) in &used {
        assert!(u.fits_in(&by_id[n].capacity), "node {n} over capacity");
    }
    let total: usize = workloads.iter().map(|w| w.replicas as usize).sum();
    assert_eq!(p.assigned.len() + p.unschedulable.len(), total);
}

/// If two replicas share a zone, no zone the workload does not use has an eligible node with room
/// left for it at the end (room only shrinks during the pass, so it had none then either).
fn check_zone_spread(
    w: &Workload,
    held: &[&Node],
    nodes: &[Node],
    p: &Placement,
    all: &[Workload],
) {
    let zones: BTreeSet<&str> = held.iter().map(|n| n.zone.as_str()).collect();
    if zones.len() == held.len() {
        return;
    }
    let requests: BTreeMap<&str, Resources> =
        all.iter().map(|w| (w.id.as_str(), w.request)).collect();
    for n in nodes {
        if zones.contains(n.zone.as_str())
            || !n.available()
            || !w
                .constraints
                .iter()
                .all(|c| c.matches(&n.labels, &n.zone, &n.id))
        {
            continue;
        }
        let used = p
            .assigned
            .iter()
            .filter(|(_, node)| **node == n.id)
            .fold(Resources::default(), |a, (r, _)| {
                a.saturating_add(&requests[r.workload.as_str()])
            });
        assert!(
            !w.request.fits_in(&n.capacity.saturating_sub(&used))
                || used.saturating_add(&w.request) > n.capacity,
            "{}: zone {} shared while {} in unused zone {} had room",
            w.id,
            held[0].zone,
            n.id,
            n.zone
        );
    }
}

/// Nodes each workload occupies, as (workload, node) -> count: replicas are interchangeable here.
fn instances(p: &Placement) -> BTreeSet<(String, String)> {
    p.assigned
        .iter()
        .map(|(r, n)| (r.workload.clone(), n.clone()))
        .collect()
}

#[derive(Clone, Debug)]
enum Op {
    AddNode(Node),
    RemoveNode(usize),
    ChangeNode(Node),
    /// Sets a known node's draining and down flags only (the engine's cheap path).
    Flags(usize, bool, bool),
    Upsert(Workload),
    RemoveWorkload(usize),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => arb_node(20).prop_map(Op::AddNode),
        2 => any::<usize>().prop_map(Op::RemoveNode),
        2 => arb_node(20).prop_map(Op::ChangeNode),
        3 => (any::<usize>(), prop::bool::weighted(0.2), prop::bool::weighted(0.4))
            .prop_map(|(i, draining, down)| Op::Flags(i, draining, down)),
        3 => arb_workload(12).prop_map(Op::Upsert),
        1 => any::<usize>().prop_map(Op::RemoveWorkload),
    ]
}

struct Model {
    nodes: BTreeMap<String, Node>,
    workloads: BTreeMap<String, Workload>,
}

impl Model {
    fn nodes(&self) -> Vec<Node> {
        self.nodes.values().cloned().collect()
    }
    fn workloads(&self) -> Vec<Workload> {
        self.workloads.values().cloned().collect()
    }
    /// Applies `op` to the model and the engine; both must agree on whether it is accepted.
    fn apply(&mut self, engine: &mut PlacementEngine, op: &Op) {
        match op {
            Op::AddNode(n) => {
                let ok = engine.handle_node_added(n.clone()).is_ok();
                assert_eq!(ok, !self.nodes.contains_key(&n.id));
                self.nodes.entry(n.id.clone()).or_insert_with(|| n.clone());
            }
            Op::RemoveNode(i) if !self.nodes.is_empty() => {
                let id = self
                    .nodes
                    .keys()
                    .nth(i % self.nodes.len())
                    .cloned()
                    .expect("in range");
                engine.handle_node_removed(&id).expect("known node");
                self.nodes.remove(&id);
            }
            Op::RemoveNode(_) => assert!(engine.handle_node_removed("nobody").is_err()),
            Op::Flags(i, draining, down) if !self.nodes.is_empty() => {
                let mut n = self
                    .nodes
                    .values()
                    .nth(i % self.nodes.len())
                    .cloned()
                    .expect("in range");
                (n.draining, n.down) = (*draining, *down);
                engine.handle_node_changed(n.clone()).expect("known node");
                self.nodes.insert(n.id.clone(), n);
            }
            Op::Flags(..) => {}
            Op::ChangeNode(n) => {
                let ok = engine.handle_node_changed(n.clone()).is_ok();
                assert_eq!(ok, self.nodes.contains_key(&n.id));
                if ok {
                    self.nodes.insert(n.id.clone(), n.clone());
                }
            }
            Op::Upsert(w) => {
                engine
                    .handle_workload_upserted(w.clone())
                    .expect("valid workload");
                self.workloads.insert(w.id.clone(), w.clone());
            }
            Op::RemoveWorkload(i) if !self.workloads.is_empty() => {
                let id = self
                    .workloads
                    .keys()
                    .nth(i % self.workloads.len())
                    .cloned()
                    .expect("in range");
                engine.handle_workload_removed(&id).expect("known workload");
                self.workloads.remove(&id);
            }
            Op::RemoveWorkload(_) => assert!(engine.handle_workload_removed("nothing").is_err()),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// 1. Permuting the inputs gives the same placement. Each engine also seeds its hash maps
    ///    afresh, so this covers hash-map seeds too (the engine is single-threaded).
    #[test]
    fn permutation_invariance(
        (nodes, workloads) in arb_inputs(),
        seed in any::<u64>(),
    ) {
        let base = place(&nodes, &workloads);
        let mut n2 = nodes.clone();
        let mut w2 = workloads.clone();
        n2.reverse();
        w2.reverse();
        // A cheap deterministic shuffle on top of the reversal.
        let len = n2.len().max(1);
        n2.rotate_left(seed as usize % len);
        let len = w2.len().max(1);
        w2.rotate_left((seed >> 32) as usize % len);
        prop_assert_eq!(&place(&n2, &w2), &base);
    }

    /// 5, 6, 11. Capacity, eligibility, distinct nodes, zone spread, one node per replica.
    #[test]
    fn placements_are_valid((nodes, workloads) in arb_inputs()) {
        let p = place(&nodes, &workloads);
        check_placement(&nodes, &workloads, &p);
        let mut engine = PlacementEngine::new(&nodes, &workloads);
        engine.check_invariants();
    }

    /// 3. The incremental engine equals a full recompute after every step of a random sequence.
    #[test]
    fn incremental_equals_full(
        (nodes, workloads) in arb_inputs(),
        ops in prop::collection::vec(arb_op(), 1..25),
    ) {
        let mut engine = PlacementEngine::new(&nodes, &workloads);
        let mut model = Model {
            nodes: nodes.iter().map(|n| (n.id.clone(), n.clone())).collect(),
            workloads: workloads.iter().map(|w| (w.id.clone(), w.clone())).collect(),
        };
        for op in &ops {
            model.apply(&mut engine, op);
            let full = place(&model.nodes(), &model.workloads());
            let incremental = engine.placement();
            prop_assert_eq!(&incremental.assigned, &full.assigned, "after {:?}", op);
            prop_assert_eq!(&incremental.unschedulable, &full.unschedulable, "after {:?}", op);
        }
        engine.check_invariants();
        check_placement(&model.nodes(), &model.workloads(), engine.placement());
    }

    /// 3 again, on clusters larger than a ranking's first chunk and busy enough that walks extend
    /// rankings: cached prefixes are then partial, and must still give the full result.
    #[test]
    fn incremental_equals_full_with_partial_rankings(
        nodes in prop::collection::vec(arb_node(400), 40..120).prop_map(unique_nodes),
        workloads in prop::collection::vec(arb_workload(60), 10..40).prop_map(unique_workloads),
        ops in prop::collection::vec(arb_op(), 1..8),
    ) {
        let workloads: Vec<Workload> = workloads
            .into_iter()
            .map(|mut w| {
                w.request.cpu_millis *= 3;
                w
            })
            .collect();
        let mut engine = PlacementEngine::new(&nodes, &workloads);
        let mut model = Model {
            nodes: nodes.iter().map(|n| (n.id.clone(), n.clone())).collect(),
            workloads: workloads.iter().map(|w| (w.id.clone(), w.clone())).collect(),
        };
        for op in &ops {
            model.apply(&mut engine, op);
            let full = place(&model.nodes(), &model.workloads());
            prop_assert_eq!(engine.placement(), &full, "after {:?}", op);
        }
        engine.check_invariants();
    }

    /// 4. The same set of changes (on distinct ids) applied in any order ends in the same placement.
    #[test]
    fn change_order_does_not_matter(
        (nodes, workloads) in arb_inputs(),
        new_nodes in prop::collection::vec(arb_node(40), 0..5).prop_map(unique_nodes),
        new_workloads in prop::collection::vec(arb_workload(30), 0..5).prop_map(unique_workloads),
        rotation in any::<usize>(),
    ) {
        let mut changes: Vec<Op> = Vec::new();
        for n in new_nodes.iter().filter(|n| !nodes.iter().any(|m| m.id == n.id)) {
            changes.push(Op::AddNode(n.clone()));
        }
        for (i, n) in nodes.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
            let mut changed = n.clone();
            changed.draining = !changed.draining;
            changed.capacity.cpu_millis += 1000 * i as u64;
            changes.push(Op::ChangeNode(changed));
        }
        for w in &new_workloads {
            changes.push(Op::Upsert(w.clone()));
        }
        let run = |changes: &[Op]| {
            let mut engine = PlacementEngine::new(&nodes, &workloads);
            let mut model = Model {
                nodes: nodes.iter().map(|n| (n.id.clone(), n.clone())).collect(),
                workloads: workloads.iter().map(|w| (w.id.clone(), w.clone())).collect(),
            };
            for op in changes {
                model.apply(&mut engine, op);
            }
            engine.placement().clone()
        };
        let forward = run(&changes);
        let mut shuffled = changes.clone();
        shuffled.reverse();
        let len = shuffled.len().max(1);
        shuffled.rotate_left(rotation % len);
        prop_assert_eq!(run(&shuffled), forward);
    }

    /// 7. With ample capacity (every request tiny against every node): removing X takes instances
    ///    only off X, and adding Y puts new instances only on Y. Workloads' instances are compared
    ///    as sets of nodes: that is what a node change can promise (see docs/placement.md).
    #[test]
    fn ample_capacity_moves_only_what_it_must(
        (nodes, workloads) in arb_inputs(),
        victim in any::<usize>(),
        newcomer in arb_node(1).prop_map(|mut n| { n.id = "newcomer".into(); n.draining = false; n.down = false; n }),
    ) {
        let workloads: Vec<Workload> = workloads
            .into_iter()
            .map(|mut w| {
                w.request = Resources::new(1, 1);
                w.spread = Spread::Node;
                w
            })
            .collect();
        // Every node up: removing a down or draining node (which holds nothing) re-ranks the
        // replicas that waited elsewhere for it, by design (docs/placement.md, "Down nodes").
        let nodes: Vec<Node> = nodes
            .into_iter()
            .map(|mut n| { n.draining = false; n.down = false; n })
            .collect();
        let before = place(&nodes, &workloads);
        if !nodes.is_empty() {
            let x = &nodes[victim % nodes.len()].id;
            let rest: Vec<Node> = nodes.iter().filter(|n| &n.id != x).cloned().collect();
            let after = place(&rest, &workloads);
            let lost: Vec<_> = instances(&before).difference(&instances(&after)).cloned().collect();
            prop_assert!(lost.iter().all(|(_, n)| n == x), "lost {:?} removing {}", lost, x);
        }
        let mut more = nodes.clone();
        more.push(newcomer);
        let after = place(&more, &workloads);
        let gained: Vec<_> = instances(&after).difference(&instances(&before)).cloned().collect();
        prop_assert!(gained.iter().all(|(_, n)| n == "newcomer"), "gained {:?}", gained);
    }

    /// 10. Changing or removing a workload never moves a replica of a higher priority.
    #[test]
    fn lower_priority_change_never_moves_higher(
        (nodes, workloads) in arb_inputs(),
        pick in any::<usize>(),
        replacement in arb_workload(1),
        remove in any::<bool>(),
    ) {
        prop_assume!(!workloads.is_empty());
        let target = workloads[pick % workloads.len()].clone();
        let mut changed: Vec<Workload> = workloads.iter().filter(|w| w.id != target.id).cloned().collect();
        if !remove {
            let mut w = replacement;
            w.id = target.id.clone();
            w.priority = target.priority;
            changed.push(w);
        }
        let before = place(&nodes, &workloads);
        let after = place(&nodes, &changed);
        let higher = |r: &ReplicaId| workloads.iter().any(|w| w.id == r.workload && w.priority > target.priority);
        for (r, n) in before.assigned.iter().filter(|(r, _)| higher(r)) {
            prop_assert_eq!(after.assigned.get(r), Some(n), "{} moved", r);
        }
        for (r, why) in before.unschedulable.iter().filter(|(r, _)| higher(r)) {
            prop_assert!(after.unschedulable.contains_key(r), "{} ({}) got placed", r, why);
        }
    }
}

proptest! {
    /// A node that goes down (or drains) and comes back restores the placement exactly: a down
    /// node keeps its place in every ranking, and the actual placement is a function of the
    /// ideal one and the set of unavailable nodes.
    #[test]
    fn a_node_back_up_restores_the_placement(
        (nodes, workloads) in arb_inputs(),
        pick in any::<usize>(),
        drain in any::<bool>(),
    ) {
        prop_assume!(!nodes.is_empty());
        let i = pick % nodes.len();
        let before = place(&nodes, &workloads);
        let mut engine = PlacementEngine::new(&nodes, &workloads);
        let mut away = nodes[i].clone();
        if drain { away.draining = true } else { away.down = true }
        engine.handle_node_changed(away).expect("known node");
        prop_assert!(engine.placement().assigned.values().all(|n| *n != nodes[i].id));
        engine.check_invariants();
        engine.handle_node_changed(nodes[i].clone()).expect("known node");
        prop_assert_eq!(engine.placement(), &before);
    }

    /// 9 (the shape of it). With every node up, a node going down moves the replicas that were
    /// on it, and a replica elsewhere only when its node took in a replica of a higher priority
    /// (whose room it needed), or to spread a zone-spread workload over a zone it did not use
    /// (room there appeared): never for one of its own priority or lower.
    #[test]
    fn a_node_down_moves_only_its_own_and_what_higher_priorities_push(
        (nodes, workloads) in arb_inputs(),
        pick in any::<usize>(),
    ) {
        let nodes: Vec<Node> = nodes
            .into_iter()
            .map(|mut n| { n.draining = false; n.down = false; n })
            .collect();
        prop_assume!(!nodes.is_empty());
        let victim = nodes[pick % nodes.len()].id.clone();
        let before = place(&nodes, &workloads);
        let mut engine = PlacementEngine::new(&nodes, &workloads);
        let mut down = nodes[pick % nodes.len()].clone();
        down.down = true;
        engine.handle_node_changed(down).expect("known node");
        let after = engine.placement().clone();
        let priority = |r: &ReplicaId| {
            workloads.iter().find(|w| w.id == r.workload).map_or(0, |w| w.priority)
        };
        for (r, old) in &before.assigned {
            if *old == victim || after.assigned.get(r) == Some(old) {
                continue;
            }
            let pushed = after.assigned.iter().any(|(other, n)| {
                n == old
                    && before.assigned.get(other) != Some(n)
                    && priority(other) > priority(r)
            });
            let spec = workloads.iter().find(|w| w.id == r.workload).expect("placed workload");
            let zone = |id: &str| nodes.iter().find(|n| n.id == id).map(|n| n.zone.clone());
            let spreads = spec.spread == Spread::Zone
                && after.assigned.get(r).is_some_and(|new| {
                    !before.assigned.iter().any(|(sib, n)| {
                        sib.workload == r.workload && zone(n) == zone(new)
                    })
                });
            prop_assert!(
                pushed || spreads,
                "{} moved off {} with nothing of a higher priority arriving", r, old
            );
        }
    }
}

/// 6. Infeasible requests are unschedulable with the right reason.
#[test]
fn infeasible_requests_are_reported() {
    let nodes: Vec<Node> = (0..4)
        .map(|i| Node {
            id: format!("n{i}"),
            capacity: Resources::new(4000, 8 * GIB),
            labels: BTreeMap::new(),
            zone: format!("z{}", i % 2),
            draining: false,
            down: false,
            caps: None,
        })
        .collect();
    let w = |id: &str, replicas, cpu, mem| Workload {
        id: id.into(),
        replicas,
        request: Resources::new(cpu, mem),
        spread: Spread::Zone,
        constraints: vec![],
        exclusive: true,
        priority: 0,
        sticky: Default::default(),
        needs: Default::default(),
        yields_when_short: false,
        yields_unplaced: false,
        cell_level_needs: false,
        ports_exclusive: false,
    };
    let p = place(
        &nodes,
        &[
            w("big", 1, 5000, GIB),
            w("many", 6, 100, MIB),
            w("fat", 1, 100, 9 * GIB),
        ],
    );
    assert_eq!(
        p.unschedulable[&ReplicaId::new("big", 0)],
        Unschedulable::RequestTooLarge {
            resource: shoal_core::placement::Resource::Cpu,
            requested: 5000,
            largest: 4000
        }
    );
    assert!(matches!(
        p.unschedulable[&ReplicaId::new("fat", 0)],
        Unschedulable::RequestTooLarge { .. }
    ));
    // Six replicas, four nodes in two zones: four run, two per zone; the other two wait for
    // nodes.
    let many: Vec<ReplicaId> = (0..6).map(|r| ReplicaId::new("many", r)).collect();
    let running: Vec<&String> = many.iter().filter_map(|r| p.assigned.get(r)).collect();
    assert_eq!(running.len(), 4);
    for r in many.iter().filter(|r| !p.assigned.contains_key(*r)) {
        assert_eq!(
            p.unschedulable[r],
            Unschedulable::NotEnoughNodes { eligible: 4 }
        );
    }
    let zones: BTreeMap<String, usize> = running
        .iter()
        .map(|n| nodes.iter().find(|m| &&m.id == n).unwrap().zone.clone())
        .fold(BTreeMap::new(), |mut m, z| {
            *m.entry(z).or_default() += 1;
            m
        });
    assert_eq!(zones.values().copied().collect::<Vec<_>>(), vec![2, 2]);
}

/// 8. First choices are proportional to capacity: 20,000 single-replica workloads with tiny
///    requests on 20 nodes of 1 to 4 units; chi-square with 19 degrees of freedom under 43.8
///    (p = 0.001). Deterministic: the ids are fixed, so is the statistic.
#[test]
fn first_choices_follow_capacity() {
    let nodes: Vec<Node> = (0..20u64)
        .map(|i| Node {
            id: format!("node-{i}"),
            capacity: Resources::new((1 + i % 4) * 1000, (1 + i % 4) * GIB),
            labels: BTreeMap::new(),
            zone: "z".into(),
            draining: false,
            down: false,
            caps: None,
        })
        .collect();
    let workloads: Vec<Workload> = (0..20_000)
        .map(|i| Workload {
            id: format!("w{i}"),
            replicas: 1,
            request: Resources::new(1, 1),
            spread: Spread::Node,
            constraints: vec![],
            exclusive: false,
            priority: 0,
            sticky: Default::default(),
            needs: Default::default(),
            yields_when_short: false,
            yields_unplaced: false,
            cell_level_needs: false,
            ports_exclusive: false,
        })
        .collect();
    let p = place(&nodes, &workloads);
    let total_weight: u64 = nodes.iter().map(|n| n.capacity.cpu_millis).sum();
    let mut chi2 = 0.0;
    for n in &nodes {
        let observed = p.assigned.values().filter(|v| **v == n.id).count() as f64;
        let expected = 20_000.0 * n.capacity.cpu_millis as f64 / total_weight as f64;
        chi2 += (observed - expected).powi(2) / expected;
    }
    assert!(chi2 < 43.8, "chi-square {chi2} with 19 degrees of freedom");
}
