//! Property tests of placement algorithm 8: fixed host ports held exclusively between workloads.
//!
//! Random nodes (some down or draining) and random workloads fixing ports from a small set, with
//! random priorities: no node ever holds two workloads' replicas fixing one port; a replica is
//! unplaceable only when every node with room for it holds such a replica (the engine's
//! `check_invariants`); the result does not depend on the inputs' order nor on whether it was
//! reached incrementally; with no two workloads sharing a port it is algorithm 7's result bit for
//! bit; and at algorithm 7 (`for_algorithm`) ports are shared as before.

use proptest::prelude::*;
use shoal_core::placement::{
    for_algorithm, place, HostPort, Needs, Node, PlacementEngine, Spread, Unschedulable, Workload,
};
use shoal_core::resources::Resources;
use std::collections::BTreeMap;

const GIB: u64 = 1 << 30;

fn port(port: u16) -> HostPort {
    HostPort {
        port,
        protocol: Default::default(),
    }
}

fn arb_node(id: usize) -> impl Strategy<Value = Node> {
    (
        1u64..=8,
        0u32..3,
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.05),
    )
        .prop_map(move |(cores, zone, down, draining)| Node {
            id: format!("n{id}"),
            capacity: Resources::new(cores * 1000, 16 * GIB),
            labels: Default::default(),
            zone: format!("z{zone}"),
            draining,
            down,
            caps: None,
        })
}

fn arb_workload(id: usize) -> impl Strategy<Value = Workload> {
    (0u32..6, 100u64..3000, 0u8..8, any::<bool>(), 0i32..2).prop_map(
        move |(replicas, cpu, ports, zone, priority)| Workload {
            id: format!("w{id}"),
            replicas,
            request: Resources::new(cpu, 256 << 20),
            spread: if zone { Spread::Zone } else { Spread::Node },
            constraints: Vec::new(),
            exclusive: false,
            priority,
            sticky: Default::default(),
            needs: Needs {
                runtime: None,
                host_paths: Vec::new(),
                fixed_ports: [(80, 1), (443, 2), (9000, 4)]
                    .iter()
                    .filter(|(_, bit)| ports & bit != 0)
                    .map(|(p, _)| port(*p))
                    .collect(),
                root: false,
            }
            .canonical(),
            yields_when_short: true,
            yields_unplaced: true,
            cell_level_needs: false,
            ports_exclusive: ports != 0,
        },
    )
}

fn arb_inputs() -> impl Strategy<Value = (Vec<Node>, Vec<Workload>)> {
    (1usize..10, 1usize..7).prop_flat_map(|(n, w)| {
        (
            (0..n).map(arb_node).collect::<Vec<_>>(),
            (0..w).map(arb_workload).collect::<Vec<_>>(),
        )
    })
}

/// (node, port) pairs held by two workloads' replicas.
fn shared_ports(p: &shoal_core::placement::Placement, workloads: &[Workload]) -> Vec<String> {
    let mut held: BTreeMap<(String, HostPort), Vec<String>> = BTreeMap::new();
    for (replica, node) in &p.assigned {
        let w = workloads.iter().find(|w| w.id == replica.workload).unwrap();
        for &fixed in &w.needs.fixed_ports {
            held.entry((node.clone(), fixed))
                .or_default()
                .push(w.id.clone());
        }
    }
    held.into_iter()
        .filter(|(_, ws)| ws.len() > 1)
        .map(|((n, p), ws)| format!("{p} on {n}: {ws:?}"))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn two_workloads_never_share_a_fixed_port_on_a_node((nodes, workloads) in arb_inputs()) {
        let p = place(&nodes, &workloads);
        prop_assert!(p.rejected.is_empty(), "{:?}", p.rejected);
        let shared = shared_ports(&p, &workloads);
        prop_assert!(shared.is_empty(), "{:?}", shared);
        let mut engine = PlacementEngine::new(&nodes, &workloads);
        engine.check_invariants();
    }

    #[test]
    fn order_and_increments_do_not_change_the_result(
        (nodes, workloads) in arb_inputs(),
        which in any::<prop::sample::Index>(),
        down in any::<bool>(),
    ) {
        let p = place(&nodes, &workloads);
        let (mut rn, mut rw) = (nodes.clone(), workloads.clone());
        rn.reverse();
        rw.reverse();
        prop_assert_eq!(&place(&rn, &rw), &p);
        let mut engine = PlacementEngine::new(&nodes, &workloads);
        let mut changed = nodes.clone();
        let at = which.index(changed.len());
        changed[at].down = down;
        engine.handle_node_changed(changed[at].clone()).unwrap();
        prop_assert_eq!(engine.placement(), &place(&changed, &workloads));
        engine.check_invariants();
    }

    /// Ports fixed by one workload each: algorithm 8 changes nothing.
    #[test]
    fn ports_no_two_workloads_share_place_as_algorithm_7((mut nodes, mut workloads) in arb_inputs()) {
        // Algorithm 8 against 7 (algorithm 9 places a short workload with nothing placed later).
        for_algorithm(8, &mut nodes, &mut workloads);
        for (i, w) in workloads.iter_mut().enumerate() {
            w.needs.fixed_ports = vec![port(10_000 + i as u16)];
            w.ports_exclusive = true;
        }
        let (mut old_nodes, mut old_workloads) = (nodes.clone(), workloads.clone());
        for_algorithm(7, &mut old_nodes, &mut old_workloads);
        prop_assert!(old_workloads.iter().all(|w| !w.ports_exclusive));
        prop_assert_eq!(place(&nodes, &workloads), place(&old_nodes, &old_workloads));
    }
}

/// Two workloads fixing port 80 on three nodes, two replicas each: at algorithm 7 they share
/// nodes; at 8 three replicas run and the fourth is unplaceable, saying why.
#[test]
fn two_web_servers_on_port_80_take_distinct_nodes() {
    let nodes: Vec<Node> = (0..3)
        .map(|i| Node {
            id: format!("n{i}"),
            capacity: Resources::new(4000, 8 * GIB),
            labels: Default::default(),
            zone: String::new(),
            draining: false,
            down: false,
            caps: None,
        })
        .collect();
    let web = |id: &str| Workload {
        id: id.into(),
        replicas: 2,
        request: Resources::new(100, 64 << 20),
        spread: Spread::Node,
        constraints: Vec::new(),
        exclusive: false,
        priority: 0,
        sticky: Default::default(),
        needs: Needs {
            fixed_ports: vec![port(80)],
            ..Needs::default()
        },
        yields_when_short: true,
        yields_unplaced: true,
        cell_level_needs: false,
        ports_exclusive: true,
    };
    let workloads = vec![web("a"), web("b")];
    let p = place(&nodes, &workloads);
    assert_eq!(p.assigned.len(), 3, "{p:?}");
    assert!(shared_ports(&p, &workloads).is_empty());
    let (_, why) = p.unschedulable.iter().next().expect("one replica left");
    match why {
        Unschedulable::Incapable { need, nodes } => {
            assert!(need.contains("80/tcp"), "{need}");
            assert_eq!(*nodes, 2, "{why:?}: both nodes of the other workload");
        }
        other => panic!("{other:?}"),
    }
    let (mut old_nodes, mut old) = (nodes.clone(), workloads.clone());
    for_algorithm(7, &mut old_nodes, &mut old);
    let p7 = place(&old_nodes, &old);
    assert_eq!(p7.assigned.len(), 4);
    assert!(!shared_ports(&p7, &workloads).is_empty());
}
