//! Sticky replicas (`Workload::sticky`): a replica with data prefers the node that holds it. In
//! the actual pass its home is that node, while the node is known and eligible; nodes joining
//! the rankings do not move it, a holder going down sends it down its own list, and coming back
//! brings it home. Invalid entries are ignored, and the incremental engines still equal a
//! placement from scratch.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use shoal_core::constraint::Constraint;
use shoal_core::placement::{place, Node, Placement, PlacementEngine, ReplicaId, Spread, Workload};
use shoal_core::resources::Resources;
use shoal_core::stacking::{place_stacked, StackedPlacer};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn node(id: &str, zone: &str, disk: &str) -> Node {
    Node {
        id: id.into(),
        capacity: Resources::new(8000, 16 * GIB),
        labels: [("disk".to_string(), disk.to_string())].into(),
        zone: zone.into(),
        draining: false,
        down: false,
        caps: None,
    }
}

/// Five ssd nodes `n0`..`n4` in one zone.
fn five() -> Vec<Node> {
    (0..5).map(|i| node(&format!("n{i}"), "z", "ssd")).collect()
}

fn db(replicas: u32, sticky: &[(u32, &str)]) -> Workload {
    Workload {
        id: "db".into(),
        replicas,
        request: Resources::new(500, 512 * MIB),
        spread: Spread::Node,
        constraints: Vec::new(),
        exclusive: true,
        priority: 0,
        sticky: sticky.iter().map(|&(r, n)| (r, n.to_string())).collect(),
        needs: Default::default(),
        yields_when_short: false,
        yields_unplaced: false,
        cell_level_needs: false,
        ports_exclusive: false,
    }
}

fn on(p: &Placement, replica: u32) -> &str {
    p.assigned
        .get(&ReplicaId::new("db", replica))
        .map(String::as_str)
        .unwrap_or_else(|| panic!("db/{replica} not placed: {p:?}"))
}

/// A node of `nodes` other than `not`.
fn other<'a>(nodes: &'a [Node], not: &str) -> &'a str {
    nodes
        .iter()
        .map(|n| n.id.as_str())
        .find(|&n| n != not)
        .expect("another node")
}

/// (a) The holder, not the ideal node, gets the replica.
#[test]
fn a_replica_goes_to_its_data_holder_not_its_ideal_node() {
    let nodes = five();
    let ideal = on(&place(&nodes, &[db(1, &[])]), 0).to_string();
    let holder = other(&nodes, &ideal);
    let p = place(&nodes, &[db(1, &[(0, holder)])]);
    assert_eq!(on(&p, 0), holder);
    let mut engine = PlacementEngine::new(&nodes, &[db(1, &[(0, holder)])]);
    engine.check_invariants();
    assert_eq!(engine.placement(), &p);
}

/// (b) A node joining that outranks the holder takes a replica without data, not one with.
#[test]
fn a_joining_node_does_not_move_a_sticky_replica() {
    let nodes = five();
    let holder = on(&place(&nodes, &[db(1, &[])]), 0).to_string();
    // A joining id that replica 0 ranks first (about one in six does).
    let joined = (0..1000)
        .map(|k| node(&format!("j{k}"), "z", "ssd"))
        .find(|j| {
            let with: Vec<Node> = nodes.iter().cloned().chain([j.clone()]).collect();
            on(&place(&with, &[db(1, &[])]), 0) == j.id
        })
        .expect("some joining id outranks the holder");
    let with: Vec<Node> = nodes.iter().cloned().chain([joined.clone()]).collect();
    let sticky = db(1, &[(0, &holder)]);
    assert_eq!(on(&place(&with, std::slice::from_ref(&sticky)), 0), holder);
    // The same through the incremental engine.
    let mut engine = PlacementEngine::new(&nodes, std::slice::from_ref(&sticky));
    assert_eq!(on(engine.placement(), 0), holder);
    engine.handle_node_added(joined).expect("new node");
    assert_eq!(on(engine.placement(), 0), holder);
    engine.check_invariants();
}

/// (c) Holder down: the replica goes down its own list as if it had no holder; holder back:
/// the replica returns to it.
#[test]
fn a_holder_down_sends_the_replica_away_and_back_up_brings_it_home() {
    let mut nodes = five();
    let ideal = on(&place(&nodes, &[db(1, &[])]), 0).to_string();
    let holder = other(&nodes, &ideal).to_string();
    let sticky = db(1, &[(0, &holder)]);
    let mut engine = PlacementEngine::new(&nodes, std::slice::from_ref(&sticky));
    assert_eq!(on(engine.placement(), 0), holder);

    let h = nodes.iter().position(|n| n.id == holder).expect("holder");
    nodes[h].down = true;
    let away = place(&nodes, std::slice::from_ref(&sticky));
    assert_ne!(on(&away, 0), holder);
    assert_eq!(
        away,
        place(&nodes, &[db(1, &[])]),
        "its own list, as without data"
    );
    engine.handle_node_changed(nodes[h].clone()).expect("known");
    assert_eq!(engine.placement(), &away);

    nodes[h].down = false;
    let back = place(&nodes, std::slice::from_ref(&sticky));
    assert_eq!(on(&back, 0), holder);
    engine.handle_node_changed(nodes[h].clone()).expect("known");
    assert_eq!(engine.placement(), &back);
    engine.check_invariants();
}

/// (d) A holder the constraints rule out is ignored.
#[test]
fn an_ineligible_holder_is_ignored() {
    let mut nodes = five();
    nodes[4].labels.insert("disk".into(), "hdd".into());
    let mut w = db(1, &[]);
    w.constraints = vec![Constraint::parse("disk == ssd").expect("valid")];
    let without = place(&nodes, std::slice::from_ref(&w));
    assert_ne!(on(&without, 0), "n4");
    w.sticky.insert(0, "n4".into());
    assert_eq!(place(&nodes, std::slice::from_ref(&w)), without);
    // With the label back, the same entry is taken.
    nodes[4].labels.insert("disk".into(), "ssd".into());
    assert_eq!(on(&place(&nodes, &[w]), 0), "n4");
}

/// (e) An index past the replica count or a node nobody knows is ignored, not rejected.
#[test]
fn out_of_range_indices_and_unknown_nodes_are_ignored() {
    let nodes = five();
    let without = place(&nodes, &[db(2, &[])]);
    let holder = other(&nodes, on(&without, 0));
    for sticky in [
        db(2, &[(2, holder)]),
        db(2, &[(9, holder)]),
        db(2, &[(0, "ghost")]),
    ] {
        let p = place(&nodes, std::slice::from_ref(&sticky));
        assert_eq!(p, without, "{:?}", sticky.sticky);
        assert!(p.rejected.is_empty());
    }
    // An unknown holder that joins later takes effect then.
    let mut engine = PlacementEngine::new(&nodes, &[db(2, &[(0, "late")])]);
    engine
        .handle_node_added(node("late", "z", "ssd"))
        .expect("new node");
    assert_eq!(on(engine.placement(), 0), "late");
}

/// A holder beats a sibling whose ideal node it is: data stays, the sibling moves.
#[test]
fn a_holder_outranks_a_sibling_at_its_ideal_node() {
    let nodes = five();
    let without = place(&nodes, &[db(2, &[])]);
    let zero = on(&without, 0).to_string();
    let p = place(&nodes, &[db(2, &[(1, &zero)])]);
    assert_eq!(on(&p, 1), zero);
    assert_ne!(on(&p, 0), zero);
}

/// Zone spread: a holder in any eligible zone is taken, and zone repair leaves the replicas at
/// their holders even when they share a zone and another zone has room.
#[test]
fn zone_spread_keeps_replicas_at_holders_in_one_zone() {
    let nodes = vec![
        node("a0", "za", "ssd"),
        node("a1", "za", "ssd"),
        node("b0", "zb", "ssd"),
        node("b1", "zb", "ssd"),
    ];
    let mut w = db(2, &[]);
    w.spread = Spread::Zone;
    let without = place(&nodes, std::slice::from_ref(&w));
    let zones: BTreeSet<char> = without
        .assigned
        .values()
        .map(|n| n.as_bytes()[0] as char)
        .collect();
    assert_eq!(zones.len(), 2, "{without:?}");
    w.sticky = [(0, "a0".to_string()), (1, "a1".to_string())].into();
    let p = place(&nodes, std::slice::from_ref(&w));
    assert_eq!((on(&p, 0), on(&p, 1)), ("a0", "a1"));
    PlacementEngine::new(&nodes, &[w]).check_invariants();
}

/// Stacking: replicas of later layers keep their holders (sticky is keyed by the real index).
#[test]
fn stacked_layers_keep_their_holders() {
    let nodes = five();
    // Seven replicas on five nodes: layer 0 is 0..5, layer 1 is 5..7.
    let without = place_stacked(&nodes, &[db(7, &[])]);
    let holder = other(&nodes, on(&without, 6));
    let p = place_stacked(&nodes, &[db(7, &[(6, holder)])]);
    assert_eq!(on(&p, 6), holder);
    assert_eq!(p.assigned.len(), 7);
}

// Properties.

fn arb_node(id_pool: u32) -> impl Strategy<Value = Node> {
    (
        0..id_pool,
        1u64..=16,
        0u32..3,
        any::<bool>(),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(id, cores, zone, ssd, draining, down)| Node {
            id: format!("n{id}"),
            capacity: Resources::new(cores * 1000, cores * 2 * GIB),
            labels: [("disk".into(), if ssd { "ssd" } else { "hdd" }.into())].into(),
            zone: format!("z{zone}"),
            draining,
            down,
            caps: None,
        })
}

/// Holders by index, some past the replica count, some naming nodes that never exist.
fn arb_sticky() -> impl Strategy<Value = BTreeMap<u32, String>> {
    prop::collection::btree_map(0u32..10, (0u32..14).prop_map(|n| format!("n{n}")), 0..5)
}

fn arb_workload() -> impl Strategy<Value = Workload> {
    (
        (0u32..6, 0u32..9, 200u64..4000, 128u64..4096),
        (
            any::<bool>(),
            prop::bool::weighted(0.3),
            -1i32..2,
            arb_sticky(),
        ),
    )
        .prop_map(
            |((id, replicas, cpu, mib), (zone, ssd_only, priority, sticky))| Workload {
                id: format!("w{id}"),
                replicas,
                request: Resources::new(cpu, mib * MIB),
                spread: if zone { Spread::Zone } else { Spread::Node },
                constraints: if ssd_only {
                    vec![Constraint::parse("disk == ssd").expect("valid constraint")]
                } else {
                    Vec::new()
                },
                exclusive: false,
                priority,
                sticky,
                needs: Default::default(),
                yields_when_short: false,
                yields_unplaced: false,
                cell_level_needs: false,
                ports_exclusive: false,
            },
        )
}

#[derive(Clone, Debug)]
enum Op {
    /// A node joins, or a known one changes (capacity, labels, zone, flags).
    Node(Node),
    RemoveNode(usize),
    /// Only a known node's down flag.
    Down(usize, bool),
    Upsert(Workload),
    /// Only a known workload's holders.
    Sticky(usize, BTreeMap<u32, String>),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => arb_node(12).prop_map(Op::Node),
        1 => any::<usize>().prop_map(Op::RemoveNode),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(i, down)| Op::Down(i, down)),
        2 => arb_workload().prop_map(Op::Upsert),
        3 => (any::<usize>(), arb_sticky()).prop_map(|(i, s)| Op::Sticky(i, s)),
    ]
}

fn nth_key<V>(map: &BTreeMap<String, V>, i: usize) -> Option<String> {
    (!map.is_empty()).then(|| map.keys().nth(i % map.len()).cloned().expect("in range"))
}

/// Applies `op` to the inputs.
fn apply(nodes: &mut BTreeMap<String, Node>, workloads: &mut BTreeMap<String, Workload>, op: &Op) {
    match op {
        Op::Node(n) => {
            nodes.insert(n.id.clone(), n.clone());
        }
        Op::RemoveNode(i) => {
            if let Some(id) = nth_key(nodes, *i) {
                nodes.remove(&id);
            }
        }
        Op::Down(i, down) => {
            if let Some(id) = nth_key(nodes, *i) {
                nodes.get_mut(&id).expect("known").down = *down;
            }
        }
        Op::Upsert(w) => {
            workloads.insert(w.id.clone(), w.clone());
        }
        Op::Sticky(i, sticky) => {
            if let Some(id) = nth_key(workloads, *i) {
                workloads.get_mut(&id).expect("known").sticky = sticky.clone();
            }
        }
    }
}

/// Feeds the engine the difference between the old and new inputs.
fn feed(
    engine: &mut PlacementEngine,
    old: (&BTreeMap<String, Node>, &BTreeMap<String, Workload>),
    new: (&BTreeMap<String, Node>, &BTreeMap<String, Workload>),
) {
    for id in old.0.keys().filter(|id| !new.0.contains_key(*id)) {
        engine.handle_node_removed(id).expect("known node");
    }
    for (id, n) in new.0 {
        match old.0.get(id) {
            None => engine.handle_node_added(n.clone()).expect("new node"),
            Some(o) if o != n => engine.handle_node_changed(n.clone()).expect("known node"),
            Some(_) => {}
        }
    }
    for (id, w) in new.1 {
        if old.1.get(id) != Some(w) {
            engine
                .handle_workload_upserted(w.clone())
                .expect("valid workload");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// (f) The incremental engine and the stacked placer, fed random holders and changes to
    /// them, equal `place` and `place_stacked` from scratch after every step.
    #[test]
    fn incremental_placement_with_holders_equals_a_full_pass(
        nodes in prop::collection::vec(arb_node(12), 0..10),
        workloads in prop::collection::vec(arb_workload(), 0..6),
        ops in prop::collection::vec(arb_op(), 1..20),
    ) {
        let mut nodes: BTreeMap<String, Node> =
            nodes.into_iter().map(|n| (n.id.clone(), n)).collect();
        let mut workloads: BTreeMap<String, Workload> =
            workloads.into_iter().map(|w| (w.id.clone(), w)).collect();
        let list = |n: &BTreeMap<String, Node>, w: &BTreeMap<String, Workload>| {
            (n.values().cloned().collect::<Vec<_>>(), w.values().cloned().collect::<Vec<_>>())
        };
        let (n0, w0) = list(&nodes, &workloads);
        let mut engine = PlacementEngine::new(&n0, &w0);
        let mut placer = StackedPlacer::new();
        prop_assert_eq!(&placer.update(&n0, &w0), &place_stacked(&n0, &w0));
        for (step, op) in ops.iter().enumerate() {
            let (old_nodes, old_workloads) = (nodes.clone(), workloads.clone());
            apply(&mut nodes, &mut workloads, op);
            feed(&mut engine, (&old_nodes, &old_workloads), (&nodes, &workloads));
            let (n, w) = list(&nodes, &workloads);
            prop_assert_eq!(engine.placement(), &place(&n, &w), "step {}: {:?}", step, op);
            prop_assert_eq!(&placer.update(&n, &w), &place_stacked(&n, &w), "step {}: {:?}", step, op);
        }
        engine.check_invariants();
    }

    /// (f) With room everywhere, a replica whose holder is available, eligible and held by no
    /// sibling is on its holder, and stays there whatever nodes join.
    #[test]
    fn a_replica_at_its_holder_stays_when_nodes_join(
        nodes in prop::collection::vec(arb_node(12), 1..10),
        workloads in prop::collection::vec(arb_workload(), 1..6),
        joining in prop::collection::vec(arb_node(40), 1..6),
    ) {
        let roomy = |mut n: Node| {
            n.capacity = Resources::new(64_000, 256 * GIB);
            n
        };
        let nodes: BTreeMap<String, Node> =
            nodes.into_iter().map(|n| (n.id.clone(), roomy(n))).collect();
        let workloads: BTreeMap<String, Workload> =
            workloads.into_iter().map(|w| (w.id.clone(), w)).collect();
        let workloads: Vec<Workload> = workloads.into_values().collect();
        let before: Vec<Node> = nodes.values().cloned().collect();
        let mut after = before.clone();
        after.extend(
            joining
                .into_iter()
                .map(roomy)
                .filter(|n| !nodes.contains_key(&n.id))
                .map(|n| (n.id.clone(), n))
                .collect::<BTreeMap<_, _>>()
                .into_values(),
        );
        let mut engine = PlacementEngine::new(&before, &workloads);
        engine.check_invariants();
        for (stage, nodes) in [("before", &before), ("after", &after)] {
            let p = place(nodes, &workloads);
            if stage == "after" {
                for n in &after[before.len()..] {
                    engine.handle_node_added(n.clone()).expect("new node");
                }
                prop_assert_eq!(engine.placement(), &p);
                engine.check_invariants();
            }
            for w in &workloads {
                for (&r, holder) in &w.sticky {
                    let shared = w.sticky.values().filter(|h| *h == holder).count() > 1;
                    let fits = before.iter().find(|n| &n.id == holder).is_some_and(|n| {
                        n.available()
                            && w.constraints.iter().all(|c| c.matches(&n.labels, &n.zone, &n.id))
                    });
                    if r < w.replicas && fits && !shared {
                        prop_assert_eq!(
                            p.assigned.get(&ReplicaId::new(&w.id, r)),
                            Some(holder),
                            "{}: {}/{}", stage, w.id, r
                        );
                    }
                }
            }
        }
    }
}
