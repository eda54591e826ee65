//! The cell level and node capabilities (placement algorithm 9, issue 26): envoys publish what
//! their members lack as reserved label offers, and the cell level gives a replica only to cells
//! whose members can run it (its runtime, and root when it runs as root). A cell whose summary
//! says nothing of capabilities stays eligible for everything; at algorithm 8 the cell level
//! places as it did before.

use std::collections::BTreeMap;

use proptest::prelude::*;
use shoal_core::cells::{
    place_cells, place_mesh, summarize, Cell, CellPlacement, CellSummary, CellUnschedulable,
    CELL_LABELS_MAX, LACKS_KEY_PREFIX,
};
use shoal_core::placement::{
    for_algorithm, Capabilities, Node, Placement, ReplicaId, Runtime, Spread, Unmet, Workload,
};
use shoal_core::resources::Resources;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// What a member gossips it can run: `None` says nothing.
fn caps(runtimes: &[Runtime], root: bool) -> Option<Capabilities> {
    Some(Capabilities {
        runtimes: runtimes.to_vec(),
        root_allowed: root,
        ..Default::default()
    })
}

fn node(id: &str, cores: u64, caps: Option<Capabilities>) -> Node {
    Node {
        id: id.into(),
        capacity: Resources::new(cores * 1000, cores * 4 * GIB),
        labels: BTreeMap::new(),
        zone: "z1".into(),
        draining: false,
        down: false,
        caps,
    }
}

fn summary(cell: &str, nodes: &[Node], previous: Option<&CellSummary>) -> CellSummary {
    summarize(cell, 1, &[], nodes, &Placement::default(), &[], previous)
}

fn workload(id: &str, replicas: u32, runtime: Option<Runtime>, root: bool) -> Workload {
    let mut w = Workload {
        id: id.into(),
        replicas,
        request: Resources::new(500, 256 * MIB),
        spread: Spread::Node,
        constraints: vec![],
        exclusive: false,
        priority: 0,
        sticky: Default::default(),
        needs: Default::default(),
        yields_when_short: true,
        yields_unplaced: true,
        cell_level_needs: true,
        ports_exclusive: false,
    };
    w.needs.runtime = runtime;
    w.needs.root = root;
    w
}

fn lack(s: &CellSummary, what: &str) -> Option<Resources> {
    let key = format!("{LACKS_KEY_PREFIX}{what}");
    let values = s.label_values(&key);
    assert!(values.len() <= 1, "one value per reserved key");
    values.first().map(|l| {
        assert_eq!(l.value, "yes");
        l.capacity
    })
}

#[test]
fn a_summary_lists_the_capacity_of_what_members_lack() {
    let both = [Runtime::Process, Runtime::Container];
    let mut draining = node("n5", 64, caps(&[Runtime::Container], false));
    draining.draining = true;
    let nodes = [
        node("n1", 8, caps(&[Runtime::Process], false)),
        node("n2", 8, caps(&[Runtime::Process], true)),
        node("n3", 16, caps(&[Runtime::Container], false)),
        node("n4", 4, None),
        node("n6", 2, caps(&both, true)),
        draining,
    ];
    let s = summary("c1", &nodes, None);
    assert_eq!(s.validate(), Ok(()));
    let cores = |c: u64| Resources::new(c * 1000, c * 4 * GIB);
    assert_eq!(lack(&s, "container"), Some(cores(16)), "n1 and n2");
    assert_eq!(
        lack(&s, "process"),
        Some(cores(16)),
        "n3; draining n5 offers nothing"
    );
    assert_eq!(
        lack(&s, "root"),
        Some(cores(24)),
        "n1 and n3; n4 said nothing"
    );
    // Members that say nothing lack nothing: such a cell publishes no reserved offer at all.
    let quiet = summary("c2", &[node("n1", 8, None), node("n2", 8, None)], None);
    assert!(quiet.labels.is_empty());
    let able = summary("c3", &[node("n1", 8, caps(&both, true))], None);
    assert!(able.labels.is_empty(), "nothing lacking");
}

#[test]
fn reserved_offers_keep_their_room_among_many_labels() {
    let mut nodes: Vec<Node> = (0..300)
        .map(|i| {
            let mut n = node(&format!("n{i}"), 8, caps(&[Runtime::Process], true));
            n.labels.insert("rack".into(), format!("r{i}"));
            n
        })
        .collect();
    // The smallest member is the only one without the process runtime.
    nodes[0].capacity = Resources::new(1000, 4 * GIB);
    nodes[0].caps = caps(&[Runtime::Container], true);
    let s = summary("c1", &nodes, None);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(s.labels.len(), CELL_LABELS_MAX);
    assert_eq!(lack(&s, "process"), Some(Resources::new(1000, 4 * GIB)));
    assert_eq!(s.label_values("rack").len(), CELL_LABELS_MAX - 2);
}

#[test]
fn a_member_label_cannot_pass_for_a_reserved_one() {
    let mut n = node("n1", 8, None);
    n.labels
        .insert(format!("{LACKS_KEY_PREFIX}process"), "yes".into());
    let s = summary("c1", &[n], None);
    assert!(s.labels.is_empty(), "{:?}", s.labels);
}

#[test]
fn a_cell_that_loses_or_gains_a_capability_entirely_republishes() {
    let process = caps(&[Runtime::Process], false);
    let mut nodes: Vec<Node> = (0..20)
        .map(|i| node(&format!("n{i}"), 16, process.clone()))
        .collect();
    let first = summary("c1", &nodes, None);
    assert_eq!(lack(&first, "container"), Some(first.capacity));
    // One member of twenty gains containers: 5% of the capacity, under the 1/16 of hysteresis,
    // but the cell no longer lacks containers entirely, so the lack is republished.
    nodes[0].caps = caps(&[Runtime::Process, Runtime::Container], false);
    let second = summary("c1", &nodes, Some(&first));
    let lacking = lack(&second, "container").unwrap();
    assert!(lacking.cpu_millis < second.capacity.cpu_millis);
    // And back: the figures are within 1/16 again, but whether it lacks it entirely is exact.
    nodes[0].caps = process;
    let third = summary("c1", &nodes, Some(&second));
    assert_eq!(lack(&third, "container"), Some(third.capacity));
}

/// Two cells of one kind each: `docker` with container members, `procs` with process members.
fn split_mesh() -> (Vec<Cell>, BTreeMap<String, Vec<Node>>) {
    let docker: Vec<Node> = (0..4)
        .map(|i| node(&format!("d{i}"), 16, caps(&[Runtime::Container], false)))
        .collect();
    let procs: Vec<Node> = (0..4)
        .map(|i| node(&format!("p{i}"), 16, caps(&[Runtime::Process], false)))
        .collect();
    let members: BTreeMap<String, Vec<Node>> =
        [("docker".to_string(), docker), ("procs".to_string(), procs)].into();
    let cells = members
        .iter()
        .map(|(name, nodes)| Cell {
            summary: summary(name, nodes, None),
            down: false,
        })
        .collect();
    (cells, members)
}

#[test]
fn replicas_go_only_to_cells_whose_members_can_run_them() {
    let (cells, members) = split_mesh();
    let workloads = [
        workload("batch", 4, Some(Runtime::Process), false),
        workload("web", 4, Some(Runtime::Container), false),
    ];
    for (cell, nodes) in &members {
        let mesh = place_mesh(cell, &cells, nodes, &workloads);
        assert!(mesh.cells.unschedulable.is_empty());
        assert!(mesh.cells.unsure.is_empty());
        assert!(mesh.local.unschedulable.is_empty(), "{cell}: {mesh:?}");
        for (r, c) in &mesh.cells.assigned {
            let want = if r.workload == "batch" {
                "procs"
            } else {
                "docker"
            };
            assert_eq!(c, want, "{r}");
        }
        let here = mesh.cells.assigned.values().filter(|c| *c == cell).count();
        assert_eq!(mesh.local.assigned.len(), here, "{cell} places its share");
    }
    // Algorithm 8 (issue 26's bug): the cell level ignores needs, so some process replica lands
    // in the docker cell, whose node level cannot place it.
    let mut old = workloads.to_vec();
    for_algorithm(8, &mut [], &mut old);
    assert!(old.iter().all(|w| !w.cell_level_needs));
    let mesh = place_mesh("docker", &cells, &members["docker"], &old);
    let stuck = mesh
        .local
        .unschedulable
        .keys()
        .filter(|r| r.workload == "batch")
        .count();
    assert!(stuck > 0, "{mesh:?}");
}

#[test]
fn no_cell_able_to_run_a_replica_makes_it_unschedulable_with_the_reason() {
    let (mut cells, _) = split_mesh();
    let root = workload("admin", 2, Some(Runtime::Process), true);
    let p = place_cells(&cells, std::slice::from_ref(&root));
    let why = &p.unschedulable[&ReplicaId::new("admin", 0)];
    assert_eq!(
        why,
        &CellUnschedulable::Incapable {
            known: 2,
            needs: vec![Unmet::Root]
        }
    );
    assert_eq!(
        why.to_string(),
        "needs root workloads allowed (--allow-root-workloads), which no cell that is up offers \
         (2 cells known)"
    );
    // With the process cell down, process replicas have nowhere to go either.
    cells
        .iter_mut()
        .find(|c| c.summary.cell == "procs")
        .unwrap()
        .down = true;
    let batch = workload("batch", 1, Some(Runtime::Process), false);
    let p = place_cells(&cells, &[batch]);
    assert_eq!(
        p.unschedulable[&ReplicaId::new("batch", 0)].to_string(),
        "needs runtime process, which no cell that is up offers (2 cells known)"
    );
    // Every cell down: no cell at all, whatever the needs.
    cells.iter_mut().for_each(|c| c.down = true);
    let p = place_cells(&cells, &[root]);
    assert_eq!(
        p.unschedulable[&ReplicaId::new("admin", 0)],
        CellUnschedulable::NoCells { known: 2 }
    );
}

/// A member's capabilities: said nothing, process, container, both; root allowed or not.
fn arb_caps() -> impl Strategy<Value = Option<Capabilities>> {
    (0usize..4, any::<bool>()).prop_map(|(kind, root)| match kind {
        0 => None,
        1 => caps(&[Runtime::Process], root),
        2 => caps(&[Runtime::Container], root),
        _ => caps(&[Runtime::Process, Runtime::Container], root),
    })
}

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
                summary: summary(name, nodes, None),
                down,
            })
            .collect()
    }

    /// Whether some live, non-draining member of cell `c` with capacity meets `need`, from the
    /// members themselves (a member that said nothing meets everything).
    fn offers(&self, c: usize, need: &Unmet) -> bool {
        self.members[c].1.iter().any(|n| {
            n.available()
                && match (&n.caps, need) {
                    (None, _) => true,
                    (Some(caps), Unmet::Runtime(r)) => caps.runtimes.contains(r),
                    (Some(caps), Unmet::Root) => caps.root_allowed,
                    _ => unreachable!("the cell level judges runtime and root only"),
                }
        })
    }
}

fn arb_mesh() -> impl Strategy<Value = Mesh> {
    (
        1usize..5,
        prop::collection::vec(
            (
                0usize..4,
                1u64..=32,
                arb_caps(),
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
            ),
            0..24,
        ),
        prop::collection::vec(prop::bool::weighted(0.2), 4),
    )
        .prop_map(|(count, nodes, down)| {
            let mut members: Vec<(String, Vec<Node>)> =
                (0..count).map(|c| (format!("c{c}"), Vec::new())).collect();
            for (i, (cell, cores, caps, draining, node_down)) in nodes.into_iter().enumerate() {
                let mut n = node(&format!("n{i}"), cores, caps);
                n.draining = draining;
                n.down = node_down;
                members[cell % count].1.push(n);
            }
            Mesh {
                members,
                down: down[..count].to_vec(),
            }
        })
}

fn arb_workloads() -> impl Strategy<Value = Vec<Workload>> {
    prop::collection::vec(
        (
            0u32..6,
            0usize..3,
            prop::bool::weighted(0.3),
            1u64..4000,
            any::<bool>(),
        ),
        0..6,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (replicas, runtime, root, cpu, zone))| {
                let runtime = [None, Some(Runtime::Process), Some(Runtime::Container)][runtime];
                let mut w = workload(&format!("w{i}"), replicas, runtime, root);
                w.request = Resources::new(cpu, cpu * MIB);
                if zone {
                    w.spread = Spread::Zone;
                }
                w
            })
            .collect()
    })
}

/// The needs the cell level judges of `w`.
fn judged(w: &Workload) -> Vec<Unmet> {
    let mut needs: Vec<Unmet> = w.needs.runtime.map(Unmet::Runtime).into_iter().collect();
    if w.needs.root {
        needs.push(Unmet::Root);
    }
    needs
}

/// The summaries without their reserved offers: what they would be had no member said anything.
fn without_lacks(cells: &[Cell]) -> Vec<Cell> {
    let mut cells = cells.to_vec();
    for c in &mut cells {
        c.summary
            .labels
            .retain(|l| !l.key.starts_with(LACKS_KEY_PREFIX));
    }
    cells
}

fn cell_index(mesh: &Mesh, name: &str) -> usize {
    mesh.members.iter().position(|(n, _)| n == name).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every replica goes to a cell whose members offer each of its judged needs, and is
    /// unschedulable for want of them only when no usable cell offers them all.
    #[test]
    fn replicas_go_to_cells_that_can_run_them(mesh in arb_mesh(), workloads in arb_workloads()) {
        let cells = mesh.cells();
        let p = place_cells(&cells, &workloads);
        let usable: Vec<bool> = cells.iter().map(Cell::usable).collect();
        for w in &workloads {
            let needs = judged(w);
            let able = |c: usize| usable[c] && needs.iter().all(|n| mesh.offers(c, n));
            let any_able = (0..cells.len()).any(able);
            for r in 0..w.replicas {
                let id = ReplicaId::new(&w.id, r);
                match (p.assigned.get(&id), p.unschedulable.get(&id)) {
                    (Some(cell), None) => {
                        let c = cell_index(&mesh, cell);
                        prop_assert!(able(c), "{id} in {cell}, which cannot run it");
                    }
                    (None, Some(CellUnschedulable::Incapable { needs: named, .. })) => {
                        prop_assert!(!any_able, "{id} unschedulable though a cell can run it");
                        prop_assert!(!named.is_empty() && named.iter().all(|n| needs.contains(n)));
                    }
                    (None, Some(CellUnschedulable::NoCells { .. })) => {
                        prop_assert!(!usable.iter().any(|u| *u));
                    }
                    other => prop_assert!(false, "{id}: {other:?}"),
                }
            }
        }
    }

    /// A cell whose summary says nothing of capabilities is eligible for everything: with the
    /// reserved offers removed, and at algorithm 9, no replica is unschedulable for its needs,
    /// and the placement equals that of workloads needing nothing.
    #[test]
    fn cells_that_say_nothing_are_eligible_for_everything(
        mesh in arb_mesh(),
        workloads in arb_workloads(),
    ) {
        let cells = without_lacks(&mesh.cells());
        let p = place_cells(&cells, &workloads);
        let bare: Vec<Workload> = workloads
            .iter()
            .map(|w| Workload { needs: Default::default(), ..w.clone() })
            .collect();
        prop_assert_eq!(&p, &place_cells(&cells, &bare));
        let incapable = p
            .unschedulable
            .values()
            .any(|u| matches!(u, CellUnschedulable::Incapable { .. }));
        prop_assert!(!incapable);
    }

    /// At placement algorithm 8 the cell level places as it did before capabilities: neither the
    /// workloads' needs nor the reserved offers change a bit of its output, which is the output
    /// of workloads needing nothing over summaries without the offers (the summaries builds
    /// before published; the agents publish none below algorithm 9 either).
    #[test]
    fn algorithm_8_places_as_before(mesh in arb_mesh(), workloads in arb_workloads()) {
        let mut old = workloads.clone();
        for_algorithm(8, &mut [], &mut old);
        let cells = mesh.cells();
        let p = place_cells(&cells, &old);
        let bare: Vec<Workload> = old
            .iter()
            .map(|w| Workload { needs: Default::default(), ..w.clone() })
            .collect();
        prop_assert_eq!(&p, &place_cells(&without_lacks(&cells), &bare));
        let incapable = p
            .unschedulable
            .values()
            .any(|u| matches!(u, CellUnschedulable::Incapable { .. }));
        prop_assert!(!incapable);
    }

    /// The inputs' order changes nothing, as everywhere in placement.
    #[test]
    fn order_changes_nothing(mesh in arb_mesh(), workloads in arb_workloads()) {
        let mut cells = mesh.cells();
        let p: CellPlacement = place_cells(&cells, &workloads);
        cells.reverse();
        let mut reversed = workloads.clone();
        reversed.reverse();
        prop_assert_eq!(p, place_cells(&cells, &reversed));
    }
}
