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
                    assert!(up.is_empty(), "{count} hosts {spread:?} {from}->{to}: {up:?}");
                    let down = moved(&at[to], &at[from]);
                    assert!(down.is_empty(), "{count} hosts {spread:?} {to}->{from}: {down:?}");
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
