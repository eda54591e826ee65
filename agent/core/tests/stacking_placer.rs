//! `StackedPlacer` (the incremental form the agents use) returns exactly what `place_stacked`
//! returns from scratch, after any sequence of node and workload changes, stacking and overflow
//! layers and rejected inputs included.

use std::collections::BTreeMap;

use proptest::prelude::*;
use shoal_core::constraint::Constraint;
use shoal_core::placement::model::{Node, Spread, Workload};
use shoal_core::resources::Resources;
use shoal_core::stacking::{place_stacked, StackedPlacer};

const MIB: u64 = 1 << 20;

fn arb_node() -> impl Strategy<Value = Node> {
    (
        0u32..9,
        1u64..=8,
        0u32..3,
        any::<bool>(),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(id, cores, zone, ssd, draining, down)| Node {
            id: format!("n{id}"),
            capacity: Resources::new(cores * 1000, cores * 2048 * MIB),
            labels: [("disk".into(), if ssd { "ssd" } else { "hdd" }.into())].into(),
            zone: format!("z{zone}"),
            draining,
            down,
            caps: None,
        })
}

fn arb_workload() -> impl Strategy<Value = Workload> {
    (
        0u32..5,
        0u32..14,
        (200u64..3000, 128u64..4096),
        any::<bool>(),
        prop::bool::weighted(0.3),
        -1i32..2,
    )
        .prop_map(
            |(id, replicas, (cpu, mib), zone, ssd_only, priority)| Workload {
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
                sticky: Default::default(),
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
    Upsert(Workload),
    RemoveWorkload(usize),
    /// The next inputs list one node twice (rejected, as `place` rejects it); cleared by the
    /// following op.
    Duplicate(usize),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => arb_node().prop_map(Op::Node),
        2 => any::<usize>().prop_map(Op::RemoveNode),
        3 => arb_workload().prop_map(Op::Upsert),
        1 => any::<usize>().prop_map(Op::RemoveWorkload),
        1 => any::<usize>().prop_map(Op::Duplicate),
    ]
}

fn nth_key<V>(map: &BTreeMap<String, V>, i: usize) -> Option<String> {
    (!map.is_empty()).then(|| map.keys().nth(i % map.len()).cloned().expect("in range"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_incremental_placer_equals_a_full_stacked_placement(
        ops in prop::collection::vec(arb_op(), 1..30)
    ) {
        let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
        let mut workloads: BTreeMap<String, Workload> = BTreeMap::new();
        let mut placer = StackedPlacer::new();
        for (step, op) in ops.iter().enumerate() {
            let mut duplicate = None;
            match op {
                Op::Node(n) => {
                    nodes.insert(n.id.clone(), n.clone());
                }
                Op::RemoveNode(i) => {
                    if let Some(id) = nth_key(&nodes, *i) {
                        nodes.remove(&id);
                    }
                }
                Op::Upsert(w) => {
                    workloads.insert(w.id.clone(), w.clone());
                }
                Op::RemoveWorkload(i) => {
                    if let Some(id) = nth_key(&workloads, *i) {
                        workloads.remove(&id);
                    }
                }
                Op::Duplicate(i) => duplicate = nth_key(&nodes, *i),
            }
            let mut node_list: Vec<Node> = nodes.values().cloned().collect();
            if let Some(id) = duplicate {
                node_list.push(nodes[&id].clone());
            }
            // Inputs in any order: the result must not depend on it.
            node_list.reverse();
            let workload_list: Vec<Workload> = workloads.values().cloned().collect();
            let incremental = placer.update(&node_list, &workload_list);
            let full = place_stacked(&node_list, &workload_list);
            prop_assert_eq!(&incremental, &full, "step {}: {:?}", step, op);
        }
    }
}

#[test]
fn stacked_replicas_and_a_down_node_match_a_full_pass() {
    let node = |id: &str, down: bool| Node {
        id: id.into(),
        capacity: Resources::new(4000, 8 << 30),
        labels: Default::default(),
        zone: "z".into(),
        draining: false,
        down,
        caps: None,
    };
    let web = Workload {
        id: "web".into(),
        replicas: 6,
        request: Resources::new(500, 256 * MIB),
        spread: Spread::Node,
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
    let mut nodes: Vec<Node> = (0..5).map(|i| node(&format!("n{i}"), false)).collect();
    let mut placer = StackedPlacer::new();
    let first = placer.update(&nodes, std::slice::from_ref(&web));
    assert_eq!(
        first.assigned.len(),
        6,
        "six replicas on five nodes: {first:?}"
    );
    nodes[2].down = true;
    let second = placer.update(&nodes, std::slice::from_ref(&web));
    assert_eq!(second, place_stacked(&nodes, std::slice::from_ref(&web)));
    assert_eq!(
        second.assigned.len(),
        6,
        "overflow keeps all six: {second:?}"
    );
    assert!(second.assigned.values().all(|n| n != "n2"));
    nodes[2].down = false;
    assert_eq!(placer.update(&nodes, std::slice::from_ref(&web)), first);
}
