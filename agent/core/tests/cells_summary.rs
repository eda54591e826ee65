//! Cell summaries: what `summarize` publishes (always valid, with hysteresis on the ranked
//! figures), and what `validate` refuses (sizes first, then figures that do not add up), never
//! panicking on a hostile one.

use std::collections::BTreeMap;

use proptest::prelude::*;
use shoal_core::cells::{
    summarize, CellSummary, LabelOffer, SummaryError, ZoneOffer, CELL_CONTACTS_MAX,
    CELL_LABELS_MAX, CELL_SUMMARY_BYTES_MAX, CELL_ZONES_MAX,
};
use shoal_core::placement::{Node, Placement, ReplicaId, Resource, Spread, Workload};
use shoal_core::resources::Resources;

const GIB: u64 = 1 << 30;

fn node(id: usize, cores: u64, zone: &str, disk: &str) -> Node {
    Node {
        id: format!("n{id}"),
        capacity: Resources::new(cores * 1000, cores * 4 * GIB),
        labels: [("disk".to_string(), disk.to_string())].into(),
        zone: zone.into(),
        draining: false,
        down: false,
        caps: None,
    }
}

fn cell_nodes() -> Vec<Node> {
    (0..20)
        .map(|i| {
            node(
                i,
                8 + 8 * (i as u64 % 3),
                ["a", "b"][i % 2],
                ["ssd", "hdd"][i % 3 % 2],
            )
        })
        .collect()
}

fn summary_of(nodes: &[Node], previous: Option<&CellSummary>) -> CellSummary {
    summarize(
        "c1",
        7,
        &["10.0.0.1:7100".into()],
        nodes,
        &Placement::default(),
        &[],
        previous,
    )
}

#[test]
fn a_summary_adds_up_its_members() {
    let mut nodes = cell_nodes();
    nodes[0].down = true;
    nodes[1].draining = true;
    let s = summary_of(&nodes, None);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(s.members, 19, "down is not live; draining is");
    let live: Vec<&Node> = nodes.iter().filter(|n| n.available()).collect();
    let total = live
        .iter()
        .fold(Resources::default(), |a, n| a.saturating_add(&n.capacity));
    assert_eq!(s.capacity, total);
    assert_eq!(s.free, total, "nothing placed");
    assert_eq!(s.largest, Resources::new(24_000, 96 * GIB));
    assert_eq!(
        s.zones.iter().map(|z| z.zone.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(s.label_values("disk").len(), 2);
    assert_eq!(s.contacts, ["10.0.0.1:7100"]);
}

#[test]
fn free_is_what_the_cell_placed_subtracted() {
    let nodes = cell_nodes();
    let mut placement = Placement::default();
    placement
        .assigned
        .insert(ReplicaId::new("web", 0), "n3".into());
    placement
        .assigned
        .insert(ReplicaId::new("web", 1), "n4".into());
    let web = Workload {
        id: "web".into(),
        replicas: 2,
        request: Resources::new(1500, GIB),
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
    };
    let s = summarize("c1", 1, &[], &nodes, &placement, &[web], None);
    assert_eq!(
        s.free,
        s.capacity.saturating_sub(&Resources::new(3000, 2 * GIB))
    );
}

#[test]
fn ranked_figures_hold_until_they_drift_by_a_sixteenth() {
    let nodes = cell_nodes();
    let first = summary_of(&nodes, None);
    // One small node of twenty fails: under 3% of the capacity, 5% of its zone's, below 1/16.
    // The ranked figures stand.
    let mut one_down = nodes.clone();
    one_down[3].down = true;
    let second = summary_of(&one_down, Some(&first));
    assert_eq!(second.validate(), Ok(()));
    assert_eq!(second.members, 19);
    assert_eq!(second.capacity, first.capacity);
    assert_eq!(second.zones, first.zones);
    assert_eq!(second.labels, first.labels);
    // A quarter fails: republished.
    let mut many_down = nodes.clone();
    for n in many_down.iter_mut().take(5) {
        n.down = true;
    }
    let third = summary_of(&many_down, Some(&second));
    assert!(third.capacity.cpu_millis < first.capacity.cpu_millis);
    assert_eq!(third, summary_of(&many_down, None), "fresh figures");
    // A new label value changes what the cell offers: republished at once.
    let mut gpu = nodes.clone();
    gpu[2].labels.insert("gpu".into(), "a100".into());
    let fourth = summary_of(&gpu, Some(&first));
    assert_eq!(fourth.label_values("gpu").len(), 1);
    // Every member gone: republished as empty.
    let mut gone = nodes;
    gone.iter_mut().for_each(|n| n.down = true);
    let empty = summary_of(&gone, Some(&first));
    assert_eq!((empty.members, empty.capacity), (0, Resources::default()));
    assert_eq!(empty.validate(), Ok(()));
}

fn valid() -> CellSummary {
    summary_of(&cell_nodes(), None)
}

#[test]
fn inconsistent_summaries_are_refused_with_the_reason() {
    let check = |f: &dyn Fn(&mut CellSummary), want: &dyn Fn(&SummaryError) -> bool| {
        let mut s = valid();
        f(&mut s);
        let got = s.validate();
        assert!(got.as_ref().is_err_and(want), "{got:?}");
        assert!(!got.unwrap_err().to_string().is_empty());
    };
    check(
        &|s| s.free.cpu_millis = s.capacity.cpu_millis + 1,
        &|e| matches!(e, SummaryError::ExceedsCapacity { field, resource: Resource::Cpu } if field == "free"),
    );
    check(
        &|s| s.largest.memory_bytes = s.capacity.memory_bytes + 1,
        &|e| {
            matches!(
                e,
                SummaryError::ExceedsCapacity {
                    resource: Resource::Memory,
                    ..
                }
            )
        },
    );
    check(&|s| s.zones[0].capacity = s.capacity, &|e| {
        matches!(e, SummaryError::ZonesDisagree { .. })
    });
    check(
        &|s| {
            s.labels.push(LabelOffer {
                key: "disk".into(),
                value: "zzz".into(),
                capacity: s.capacity,
            })
        },
        &|e| matches!(e, SummaryError::ExceedsCapacity { field, .. } if field.contains("disk")),
    );
    check(&|s| s.zones.reverse(), &|e| {
        matches!(e, SummaryError::NotCanonical { .. })
    });
    check(&|s| s.labels.push(s.labels[0].clone()), &|e| {
        matches!(e, SummaryError::NotCanonical { .. })
    });
    check(&|s| s.members = 0, &|e| {
        matches!(e, SummaryError::MembersDisagree { .. })
    });
    check(
        &|s| {
            s.members = 1;
            s.capacity.memory_bytes = (1 << 50) + 1;
        },
        &|e| matches!(e, SummaryError::Absurd { .. }),
    );
    check(&|s| s.cell = "Cell_1".into(), &|e| {
        matches!(e, SummaryError::NameInvalid { .. })
    });
    check(&|s| s.cell = "c".repeat(64), &|e| {
        matches!(e, SummaryError::NameInvalid { .. })
    });
    check(
        &|s| s.contacts = vec!["x".into(); CELL_CONTACTS_MAX + 1],
        &|e| matches!(e, SummaryError::TooMany { .. }),
    );
    check(&|s| s.contacts = vec!["x".repeat(300)], &|e| {
        matches!(e, SummaryError::BadLength { .. })
    });
    check(
        &|s| {
            s.zones = (0..=CELL_ZONES_MAX)
                .map(|i| ZoneOffer {
                    zone: format!("z{i:03}"),
                    capacity: Resources::default(),
                })
                .collect()
        },
        &|e| matches!(e, SummaryError::TooMany { .. }),
    );
    check(
        &|s| {
            s.labels = (0..=CELL_LABELS_MAX)
                .map(|i| LabelOffer {
                    key: format!("k{i:04}"),
                    value: "v".into(),
                    capacity: Resources::default(),
                })
                .collect()
        },
        &|e| matches!(e, SummaryError::TooMany { .. }),
    );
}

/// The largest valid summary encodes within the decoding limit.
#[test]
fn the_largest_valid_summary_fits_the_byte_limit() {
    let mut s = valid();
    s.members = 100_000;
    s.contacts = vec!["c".repeat(253); CELL_CONTACTS_MAX];
    s.zones = (0..CELL_ZONES_MAX)
        .map(|i| ZoneOffer {
            zone: format!("{i:0>63}"),
            capacity: Resources::new(u64::MAX / 128, u64::MAX / 128),
        })
        .collect();
    s.labels = (0..CELL_LABELS_MAX)
        .map(|i| LabelOffer {
            key: format!("{i:0>63}"),
            value: "v".repeat(63),
            capacity: Resources::new(u64::MAX / 512, u64::MAX / 512),
        })
        .collect();
    let json = serde_json::to_vec(&s).unwrap();
    assert!(json.len() <= CELL_SUMMARY_BYTES_MAX, "{} bytes", json.len());
}

fn arb_summary() -> impl Strategy<Value = CellSummary> {
    let res = || (0u64..1 << 40, 0u64..1 << 50).prop_map(|(c, m)| Resources::new(c, m));
    (
        "[a-zA-Z0-9_-]{0,70}",
        0u32..200_000,
        (res(), res(), res()),
        prop::collection::vec(("[a-c]{0,3}", res()), 0..70),
        prop::collection::vec(("[a-c]{0,3}", "[a-c]{0,3}", res()), 0..40),
        prop::collection::vec(".{0,10}", 0..10),
    )
        .prop_map(
            |(cell, members, (capacity, largest, free), zones, labels, contacts)| CellSummary {
                cell,
                version: 1,
                members,
                capacity,
                largest,
                free,
                zones: zones
                    .into_iter()
                    .map(|(zone, capacity)| ZoneOffer { zone, capacity })
                    .collect(),
                labels: labels
                    .into_iter()
                    .map(|(key, value, capacity)| LabelOffer {
                        key,
                        value,
                        capacity,
                    })
                    .collect(),
                contacts,
                sees: Vec::new(),
            },
        )
}

proptest! {
    /// Whatever a peer sends, validation answers without panicking, and what it accepts adds up.
    #[test]
    fn validation_never_panics(s in arb_summary()) {
        if s.validate().is_ok() {
            prop_assert!(s.free.fits_in(&s.capacity));
            let zones = s.zones.iter().fold(Resources::default(), |a, z| a.saturating_add(&z.capacity));
            prop_assert!(zones.fits_in(&s.capacity));
        }
    }

    /// Whatever the members, `summarize` publishes a valid summary (it asserts so itself).
    #[test]
    fn summarize_is_always_valid(
        nodes in prop::collection::vec(
            (1u64..64, 0u32..80, "[a-z]{0,70}", any::<bool>(), any::<bool>()),
            0..120,
        ),
    ) {
        let nodes: Vec<Node> = nodes
            .into_iter()
            .enumerate()
            .map(|(i, (cores, zone, label, down, draining))| {
                let mut n = node(i, cores, &format!("z{zone}"), "ssd");
                n.labels.insert(format!("l{}", i % 7), label);
                n.labels.insert(format!("host{i}"), "yes".into());
                (n.down, n.draining) = (down, draining);
                n
            })
            .collect();
        let s = summary_of(&nodes, None);
        prop_assert!(s.zones.len() <= CELL_ZONES_MAX && s.labels.len() <= CELL_LABELS_MAX);
        let again = summary_of(&nodes, Some(&s));
        prop_assert_eq!(again, s);
    }
}

/// Label values too long for a constraint to name are not listed; zones in a cell with more
/// than fit are cut to those with the most capacity.
#[test]
fn summaries_stay_bounded() {
    let mut nodes: Vec<Node> = (0..100)
        .map(|i| node(i, 1 + i as u64, &format!("zone-{i:03}"), "ssd"))
        .collect();
    nodes[0].labels.insert("long".into(), "v".repeat(100));
    let s = summary_of(&nodes, None);
    assert_eq!(s.zones.len(), CELL_ZONES_MAX);
    assert!(s.zones.iter().all(|z| z.zone.as_str() >= "zone-036"));
    assert!(s.label_values("long").is_empty());
    let by_zone: BTreeMap<&str, u64> = s
        .zones
        .iter()
        .map(|z| (z.zone.as_str(), z.capacity.cpu_millis))
        .collect();
    assert_eq!(by_zone["zone-099"], 100_000);
}
