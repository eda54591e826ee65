//! Scaling a workload moves none of its replicas that stay: scaling up from k to k' replicas
//! leaves replicas 0..k where they were, scaling down from k' to k leaves replicas 0..k where
//! they were, as long as capacity is not what decides (issue 13: a 4-replica workload on 10
//! hosts scaled to 6 moved 2 of its 4 running replicas).

use std::collections::BTreeMap;

use shoal_core::placement::{place, Node, Placement, ReplicaId, Spread, Workload};
use shoal_core::resources::Resources;
use shoal_core::stacking::place_stacked;

const GIB: u64 = 1 << 30;

fn hosts(count: usize) -> Vec<Node> {
    (0..count)
        .map(|i| Node {
            id: format!("host-{i:02}"),
            capacity: Resources::new(8000, 32 * GIB),
            labels: BTreeMap::new(),
            zone: format!("z{}", i % 3),
            draining: false,
            down: false,
            caps: None,
        })
        .collect()
}

fn web(replicas: u32, spread: Spread) -> Workload {
    Workload {
        id: "web".into(),
        replicas,
        request: Resources::new(250, 256 << 20),
        spread,
        constraints: vec![],
        exclusive: false,
        priority: 0,
        sticky: Default::default(),
        needs: Default::default(),
        yields_when_short: false,
        yields_unplaced: false,
        cell_level_needs: false,
        ports_exclusive: false,
    }
}

/// The replicas of `before` that moved in `after` (those that exist in both).
fn moved(before: &Placement, after: &Placement) -> Vec<String> {
    before
        .assigned
        .iter()
        .filter(|(r, n)| after.assigned.get(*r).is_some_and(|m| m != *n))
        .map(|(r, n)| format!("{r}: {n} -> {}", after.assigned[r]))
        .collect()
}

#[test]
fn the_issue_case_four_to_six_on_ten_hosts_moves_nothing() {
    let nodes = hosts(10);
    for spread in [Spread::Node, Spread::Zone] {
        let four = place_stacked(&nodes, &[web(4, spread)]);
        let six = place_stacked(&nodes, &[web(6, spread)]);
        assert_eq!(four.assigned.len(), 4);
        assert_eq!(six.assigned.len(), 6);
        assert_eq!(moved(&four, &six), Vec::<String>::new(), "{spread:?} up");
        assert_eq!(moved(&six, &four), Vec::<String>::new(), "{spread:?} down");
    }
}

/// Every count from 1 to 14 on 10 hosts and on 40, one step and several at a time, through the
/// stacking layers (more replicas than hosts) as agents place.
#[test]
fn no_scale_step_moves_a_replica_that_stays() {
    for count in [10, 40] {
        let nodes = hosts(count);
        for spread in [Spread::Node, Spread::Zone] {
            let at: Vec<Placement> = (0..=14)
                .map(|r| place_stacked(&nodes, &[web(r, spread)]))
                .collect();
            for from in 0..at.len() {
                for to in from + 1..at.len() {
                    let up = moved(&at[from], &at[to]);
                    assert!(
                        up.is_empty(),
                        "{count} hosts {spread:?} {from}->{to}: {up:?}"
                    );
                    let down = moved(&at[to], &at[from]);
                    assert!(
                        down.is_empty(),
                        "{count} hosts {spread:?} {to}->{from}: {down:?}"
                    );
                }
            }
        }
    }
}

/// The same at the level of `place`, next to other workloads that leave ample room.
#[test]
fn scaling_among_other_workloads_moves_nothing_of_its_own() {
    let nodes = hosts(30);
    let others: Vec<Workload> = (0..12)
        .map(|i| {
            let mut w = web(1 + i % 5, Spread::Node);
            w.id = format!("other-{i}");
            w
        })
        .collect();
    for spread in [Spread::Node, Spread::Zone] {
        let with = |r: u32| {
            let mut all = others.clone();
            all.push(web(r, spread));
            place(&nodes, &all)
        };
        let small = with(3);
        let large = with(11);
        for r in 0..3 {
            let id = ReplicaId::new("web", r);
            assert_eq!(small.assigned[&id], large.assigned[&id], "{spread:?} {id}");
        }
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;
    use shoal_core::constraint::Constraint;

    fn arb_nodes() -> impl Strategy<Value = Vec<Node>> {
        prop::collection::vec((1u64..=16, 0u32..4, any::<bool>()), 1..24).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (cores, zone, ssd))| Node {
                    id: format!("n{i}"),
                    capacity: Resources::new(cores * 1000, cores * 4 * GIB),
                    labels: [("disk".into(), if ssd { "ssd" } else { "hdd" }.into())].into(),
                    zone: format!("z{zone}"),
                    draining: false,
                    down: false,
                    caps: None,
                })
                .collect()
        })
    }

    fn arb_workloads() -> impl Strategy<Value = Vec<Workload>> {
        prop::collection::vec((0u32..8, any::<bool>(), any::<bool>(), -1i32..2), 1..6).prop_map(
            |v| {
                v.into_iter()
                    .enumerate()
                    .map(|(i, (replicas, zone, ssd, priority))| Workload {
                        id: format!("w{i}"),
                        replicas,
                        // Tiny: capacity never decides.
                        request: Resources::new(1, 1 << 20),
                        spread: if zone { Spread::Zone } else { Spread::Node },
                        constraints: if ssd {
                            vec![Constraint::parse("disk == ssd").expect("valid")]
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
                    })
                    .collect()
            },
        )
    }

    proptest! {
        /// With room everywhere, scaling one workload from `a` to `b` replicas (up or down,
        /// through stacking layers when it outgrows its nodes) leaves every replica below
        /// `min(a, b)` where it was, and moves no replica of any other workload either.
        #[test]
        fn scaling_moves_no_replica_that_stays(
            nodes in arb_nodes(),
            workloads in arb_workloads(),
            pick in any::<usize>(),
            to in 0u32..30,
        ) {
            let pick = pick % workloads.len();
            let before = place_stacked(&nodes, &workloads);
            let mut scaled = workloads.clone();
            scaled[pick].replicas = to;
            let after = place_stacked(&nodes, &scaled);
            prop_assert_eq!(moved(&before, &after), Vec::<String>::new());
        }
    }
}
