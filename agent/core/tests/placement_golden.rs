//! Golden vectors: the bits every agent must agree on, as literals. If one of these changes, the
//! placement algorithm changed: bump `PLACEMENT_ALGORITHM_VERSION` and update the literals.
//! Also the handling of bad input (rejected, reported, never a panic).

use std::collections::BTreeMap;

use shoal_core::constraint::Constraint;
use shoal_core::placement::hash::{
    key, node_hash, pair_hash, replica_offset, unit, workload_hash, RequestScale,
};
use shoal_core::placement::{
    place, InputError, Node, PlacementEngine, ReplicaId, Resource, Spread, Unschedulable, Workload,
    PLACEMENT_ALGORITHM_VERSION,
};
use shoal_core::resources::Resources;

const GIB: u64 = 1 << 30;

fn node(id: &str, cores: u64, gib: u64, zone: &str) -> Node {
    Node {
        id: id.into(),
        capacity: Resources::new(cores * 1000, gib * GIB),
        labels: BTreeMap::new(),
        zone: zone.into(),
        draining: false,
        down: false,
        caps: None,
    }
}

fn workload(id: &str, replicas: u32, cpu: u64, mib: u64) -> Workload {
    Workload {
        id: id.into(),
        replicas,
        request: Resources::new(cpu, mib << 20),
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
    }
}

#[test]
fn version() {
    assert_eq!(PLACEMENT_ALGORITHM_VERSION, 9);
}

#[test]
fn golden_hashes() {
    let got = [
        node_hash("node-1"),
        node_hash(""),
        workload_hash("web"),
        pair_hash(workload_hash("web"), node_hash("node-1")),
        pair_hash(0, 0),
        pair_hash(u64::MAX, 1),
    ];
    println!("hashes {got:#018x?}");
    assert_eq!(got, GOLDEN_HASHES);
}

#[test]
fn golden_keys() {
    let scale = RequestScale::new(&Resources::new(250, 64 << 20));
    let weight = scale.weight(&Resources::new(8000, 32 * GIB));
    let pair = pair_hash(workload_hash("web"), node_hash("node-1"));
    let got = [
        weight.to_bits(),
        unit(pair).to_bits(),
        key(unit(pair), weight).to_bits(),
        unit(0).to_bits(),
        unit(u64::MAX).to_bits(),
        key(unit(0), 1.0).to_bits(),
        key(unit(u64::MAX), 1.0).to_bits(),
    ];
    println!("keys {got:#018x?}");
    assert_eq!(got, GOLDEN_KEYS);
    // u stays strictly inside (0, 1) at both ends, so keys are finite and positive.
    assert!(unit(0) > 0.0 && unit(u64::MAX) < 1.0);
}

/// Version 4: replica `i` ranks node `n` by `pair_hash(workload, n) + replica_offset(i)`, its
/// own weighted-rendezvous order (replica 0's offset is 0: the workload's order). Version 3 split
/// one workload order into own lists by jump hash over the replica count (`jump`,
/// `replica_class`; their golden vectors were `[0, 3, 5, 3, 2, 6, 2, 6]` and `[1, 2, 2, 2]`).
#[test]
fn golden_replica_offsets() {
    let web = workload_hash("web");
    let got: Vec<u64> = (0..4).map(|i| replica_offset(web, i)).collect();
    println!("replica offsets {got:#018x?}");
    assert_eq!(got[0], 0, "replica 0 ranks by the workload's own order");
    assert_eq!(got, GOLDEN_REPLICA_OFFSETS);
}

#[test]
fn golden_assignment() {
    let nodes = vec![
        node("node-a", 4, 16, "z1"),
        node("node-b", 8, 32, "z1"),
        node("node-c", 16, 64, "z2"),
        node("node-d", 2, 4, "z2"),
        node("node-e", 8, 16, "z3"),
    ];
    let mut db = workload("db", 2, 2000, 8192);
    db.spread = Spread::Zone;
    db.exclusive = true;
    db.priority = 10;
    let mut cache = workload("cache", 2, 1000, 4096);
    cache.constraints = vec![Constraint::parse("zone != z3").unwrap()];
    let workloads = vec![
        workload("web", 3, 500, 512),
        db,
        cache,
        workload("batch", 2, 6000, 1024),
    ];
    let p = place(&nodes, &workloads);
    let got: Vec<String> = p
        .assigned
        .iter()
        .map(|(r, n)| format!("{r}={n}"))
        .chain(p.unschedulable.iter().map(|(r, why)| format!("{r}!{why}")))
        .collect();
    println!("assignment {got:#?}");
    assert_eq!(got, GOLDEN_ASSIGNMENT);
}

/// A busy little cluster: first choices collide, nodes keep the strongest claims and send the rest
/// on, guests take what is left, one replica waits. Pins the capacity pass itself.
#[test]
fn golden_contended_assignment() {
    let nodes: Vec<Node> = (0..6)
        .map(|i| node(&format!("n{i}"), 4, 16, &format!("z{}", i % 3)))
        .collect();
    let mut workloads: Vec<Workload> = (0..8)
        .map(|i| workload(&format!("w{i}"), 1 + i % 3, 900 + 150 * u64::from(i), 2048))
        .collect();
    workloads[1].priority = 5;
    workloads[2].spread = Spread::Zone;
    workloads[5].spread = Spread::Zone;
    workloads[6].priority = -1;
    let p = place(&nodes, &workloads);
    let got: Vec<String> = p
        .assigned
        .iter()
        .map(|(r, n)| format!("{r}={n}"))
        .chain(p.unschedulable.iter().map(|(r, why)| format!("{r}!{why}")))
        .collect();
    println!("contended {got:#?}");
    assert_eq!(got, GOLDEN_CONTENDED);
}

const GOLDEN_HASHES: [u64; 6] = [
    0x29c5_5835_9780_8fe2,
    0xbae0_4595_242a_f190,
    0x9917_9d8f_3ef4_1fdd,
    0xf698_70e0_97f2_a40b,
    0xd60d_3e2e_a33c_1759,
    0x0311_b9be_776e_3b4e,
];
/// weight 32.0; u and key of (web, node-1); u at both ends (2^-53, 1 - 2^-53) and their keys.
const GOLDEN_KEYS: [u64; 7] = [
    0x4040_0000_0000_0000,
    0x3fee_d30e_1c12_fe55,
    0x3f53_29ca_774a_1078,
    0x3ca0_0000_0000_0000,
    0x3fef_ffff_ffff_ffff,
    0x4042_5e4f_7b27_37fa,
    0x3ca0_0000_0000_0000,
];
/// Version 1 (first-fit in canonical order) gave w2/1=n5, w2/2=n0, w4/1=n0, w5/1=n4, w5/2=n1,
/// w7/1=n3 here. Version 3 (versions 2 and 3 agreed) gave w2/1=n0, w4/0=n5, w4/1=n4: w4/0 now
/// ranks w4's whole order, whose first node (n4) version 3 had put in replica 1's own list, and
/// w4/1 ranks by its own offset; w2/1 (zone spread) ranks its home zone by its own offset and
/// takes n5 there. Everything else is unchanged; w6/0 still waits for CPU.
const GOLDEN_CONTENDED: [&str; 15] = [
    "w0/0=n3",
    "w1/0=n0",
    "w1/1=n4",
    "w2/0=n4",
    "w2/1=n5",
    "w2/2=n3",
    "w3/0=n1",
    "w4/0=n4",
    "w4/1=n0",
    "w5/0=n2",
    "w5/1=n1",
    "w5/2=n3",
    "w7/0=n2",
    "w7/1=n5",
    "w6/0!no room: of 6 candidate nodes, 6 lack CPU (needs 1800m, most free 1450m on n0)",
];
const GOLDEN_REPLICA_OFFSETS: [u64; 4] = [
    0x0000_0000_0000_0000,
    0x699e_95e1_1659_9802,
    0x8992_90b5_42bd_cb42,
    0x7241_d555_dc8c_8db5,
];
/// Version 3 gave cache/0=node-b, cache/1=node-c, web/1=node-e, web/2=node-b. In version 4
/// cache/0 ranks its workload's whole order, whose first node (node-c) version 3 had put in
/// replica 1's own list, and cache/1, web/1 and web/2 rank by their own offsets: the two pairs
/// swap their nodes. The replicas 0 of batch, db and web, and db/1, keep theirs.
const GOLDEN_ASSIGNMENT: [&str; 9] = [
    "batch/0=node-b",
    "batch/1=node-c",
    "cache/0=node-c",
    "cache/1=node-b",
    "db/0=node-e",
    "db/1=node-c",
    "web/0=node-c",
    "web/1=node-b",
    "web/2=node-e",
];

#[test]
fn bad_nodes_are_rejected_not_chosen() {
    let mut zero = node("zero", 0, 1, "z");
    zero.capacity.cpu_millis = 0;
    let huge = node("huge", 2_000_000, 1, "z");
    let nodes = vec![
        node("dup", 4, 4, "z"),
        node("dup", 8, 8, "z"),
        zero,
        huge,
        node("", 1, 1, "z"),
        node("ok", 4, 4, "z"),
    ];
    let p = place(&nodes, &[workload("w", 3, 100, 10)]);
    assert_eq!(
        p.rejected,
        vec![
            InputError::DuplicateNode { id: "dup".into() },
            InputError::InvalidId { id: "".into() },
            InputError::NodeCapacityZero { id: "zero".into() },
            InputError::NodeCapacityAbsurd {
                id: "huge".into(),
                capacity: Resources::new(2_000_000_000, GIB)
            },
        ]
    );
    // One node, three replicas: one replica runs there, the two others wait for nodes.
    assert_eq!(p.assigned.values().collect::<Vec<_>>(), vec!["ok"]);
    assert_eq!(p.unschedulable.len(), 2);
    for why in p.unschedulable.values() {
        assert_eq!(why, &Unschedulable::NotEnoughNodes { eligible: 1 });
    }
    for e in &p.rejected {
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn bad_workloads_are_rejected() {
    let too_many = workload("many", 1_000_000, 1, 1);
    let p = place(
        &[node("n", 1, 1, "z")],
        &[workload("dup", 1, 1, 1), workload("dup", 2, 1, 1), too_many],
    );
    assert_eq!(
        p.rejected,
        vec![
            InputError::DuplicateWorkload { id: "dup".into() },
            InputError::TooManyReplicas {
                id: "many".into(),
                replicas: 1_000_000
            },
        ]
    );
    assert!(p.assigned.is_empty() && p.unschedulable.is_empty());
}

#[test]
fn reasons_name_the_cause() {
    let mut ssd = node("ssd", 4, 8, "z1");
    ssd.labels.insert("disk".into(), "ssd".into());
    let mut draining = node("draining", 64, 256, "z2");
    draining.draining = true;
    let nodes = vec![ssd, node("plain", 8, 4, "z2"), draining];
    let with = |id: &str, cs: &[&str], cpu: u64, mib: u64| {
        let mut w = workload(id, 1, cpu, mib);
        w.constraints = cs.iter().map(|c| Constraint::parse(c).unwrap()).collect();
        w
    };
    let p = place(
        &nodes,
        &[
            with("gpu", &["gpu"], 1, 1),
            with("conflict", &["disk == ssd", "zone == z2"], 1, 1),
            with("cpu", &[], 9000, 1),
            with("mem", &["disk == ssd"], 1, 9 * 1024),
            with("both", &[], 6000, 6 * 1024),
        ],
    );
    let why = |w: &str| p.unschedulable[&ReplicaId::new(w, 0)].clone();
    assert_eq!(
        why("gpu"),
        Unschedulable::ConstraintUnsatisfiable {
            constraint: "gpu".into()
        }
    );
    assert_eq!(
        why("conflict"),
        Unschedulable::ConstraintsConflict {
            constraints: vec!["disk == ssd".into(), "zone == z2".into()]
        }
    );
    assert_eq!(
        why("cpu"),
        Unschedulable::RequestTooLarge {
            resource: Resource::Cpu,
            requested: 9000,
            largest: 8000
        }
    );
    assert_eq!(
        why("mem"),
        Unschedulable::RequestTooLarge {
            resource: Resource::Memory,
            requested: 9 * GIB,
            largest: 8 * GIB
        }
    );
    assert_eq!(
        why("both"),
        Unschedulable::RequestFitsNoSingleNode {
            requested: Resources::new(6000, 6 * GIB)
        }
    );
    assert_eq!(
        why("cpu").to_string(),
        "requests 9 CPU but the largest eligible node has 8"
    );
    let empty = place(&[], &[workload("w", 1, 1, 1)]);
    assert_eq!(
        empty.unschedulable[&ReplicaId::new("w", 0)],
        Unschedulable::NoNodes
    );
}

#[test]
fn no_room_counts_the_short_resource() {
    let nodes = vec![node("a", 2, 64, "z"), node("b", 2, 64, "z")];
    let mut first = workload("first", 2, 1500, 1024);
    first.priority = 1;
    let p = place(&nodes, &[first, workload("second", 1, 1000, 1024)]);
    let why = &p.unschedulable[&ReplicaId::new("second", 0)];
    assert!(
        matches!(
            why,
            Unschedulable::NoRoom {
                candidates: 2,
                cpu_short: 2,
                memory_short: 0,
                ports_short: 0,
                ..
            }
        ),
        "{why:?}"
    );
    assert_eq!(
        why.to_string(),
        "no room: of 2 candidate nodes, 2 lack CPU (needs 1, most free 500m on a)"
    );
}

#[test]
fn engine_rejects_bad_changes_without_changing_state() {
    let mut engine = PlacementEngine::new(&[node("a", 4, 4, "z")], &[workload("w", 1, 100, 1)]);
    let before = engine.placement().clone();
    assert_eq!(
        engine.handle_node_added(node("a", 8, 8, "z")),
        Err(InputError::NodeExists { id: "a".into() })
    );
    assert_eq!(
        engine.handle_node_removed("b"),
        Err(InputError::UnknownNode { id: "b".into() })
    );
    assert!(engine.handle_node_changed(node("a", 0, 8, "z")).is_err());
    assert_eq!(
        engine.handle_workload_removed("x"),
        Err(InputError::UnknownWorkload { id: "x".into() })
    );
    assert!(engine
        .handle_workload_upserted(workload("w", 20_000, 1, 1))
        .is_err());
    assert_eq!(engine.placement(), &before);
    engine.check_invariants();
}

/// Host ports the agent allocates are a resource: a node whose port range is used up by the
/// replicas placed on it takes no more that need one, and the others go elsewhere; a replica
/// that needs more ports than any range holds is unschedulable, saying so.
#[test]
fn allocated_ports_are_a_resource() {
    let with_ports = |id: &str, ports: u64| {
        let mut n = node(id, 64, 64, "z");
        n.capacity = n.capacity.with_ports(ports);
        n
    };
    let needing = |id: &str, ports: u64| {
        let mut w = workload(id, 1, 100, 16);
        w.request = w.request.with_ports(ports);
        w
    };
    // Ten single-replica workloads of one port each on a node with 3 ports and one with 100.
    let nodes = vec![with_ports("a", 3), with_ports("b", 100)];
    let workloads: Vec<Workload> = (0..10).map(|i| needing(&format!("w{i}"), 1)).collect();
    let p = place(&nodes, &workloads);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let on_a = p.assigned.values().filter(|n| n.as_str() == "a").count();
    let on_b = p.assigned.values().filter(|n| n.as_str() == "b").count();
    assert_eq!((on_a, on_b), (3, 7), "{:?}", p.assigned);

    // Without ports, the same node takes as many as its CPU allows.
    let plain: Vec<Workload> = (0..10)
        .map(|i| workload(&format!("w{i}"), 1, 100, 16))
        .collect();
    let p = place(&[node("a", 64, 64, "z")], &plain);
    assert_eq!(p.assigned.len(), 10);

    // More ports than any range holds.
    let p = place(&nodes, &[needing("big", 101)]);
    let why = &p.unschedulable[&ReplicaId::new("big", 0)];
    assert_eq!(
        *why,
        Unschedulable::RequestTooLarge {
            resource: Resource::Ports,
            requested: 101,
            largest: 100
        }
    );
    assert!(why.to_string().contains("port range"), "{why}");

    // Ranges used up everywhere: no room, counted as short of ports.
    let tight = vec![with_ports("a", 1), with_ports("b", 1)];
    let three: Vec<Workload> = (0..3).map(|i| needing(&format!("w{i}"), 1)).collect();
    let p = place(&tight, &three);
    assert_eq!(p.unschedulable.len(), 1, "{:?}", p.unschedulable);
    let why = p.unschedulable.values().next().unwrap();
    assert!(
        matches!(why, Unschedulable::NoRoom { ports_short: 2, .. }),
        "{why:?}"
    );
    assert!(why.to_string().contains("no free port"), "{why}");
}
