//! When an agent adopts a new view of the cells (`CellsSettle`): a view that keeps changing
//! waits until it stands or the wait is up; a change of what may take replicas, or of the level,
//! is adopted at once.

use shoal_core::cells::{summarize, Cell, CellsSettle, CELLS_SETTLE_MAX_MS, CELLS_SETTLE_MS};
use shoal_core::placement::{Node, Placement};
use shoal_core::resources::Resources;

fn cell(name: &str, members: usize, down: bool) -> Cell {
    let nodes: Vec<Node> = (0..members)
        .map(|i| Node {
            id: format!("{name}-n{i}"),
            capacity: Resources::new(4000, 8 << 30),
            labels: Default::default(),
            zone: "a".into(),
            draining: false,
            down: false,
            caps: None,
        })
        .collect();
    let summary = summarize(name, 0, &[], &nodes, &Placement::default(), &[], None);
    Cell { summary, down }
}

fn view(cells: &[(&str, usize, bool)]) -> Option<Vec<Cell>> {
    Some(cells.iter().map(|(n, m, d)| cell(n, *m, *d)).collect())
}

#[test]
fn a_view_that_keeps_changing_waits_until_it_stands_or_the_wait_is_up() {
    let mut s = CellsSettle::new();
    let two = view(&[("c1", 3, false), ("c2", 3, false)]);
    // The first view of the cells changes the level: adopted at once.
    assert_eq!(s.offer(0, Some(two.clone()), None), Some(two.clone()));
    let adopted = two.clone();
    // A cell learned: waits.
    let three = view(&[("c1", 3, false), ("c2", 3, false), ("c3", 3, false)]);
    assert_eq!(s.offer(100, Some(three.clone()), adopted.as_deref()), None);
    assert!(s.waiting());
    assert_eq!(
        s.offer(CELLS_SETTLE_MS + 99, None, adopted.as_deref()),
        None
    );
    assert_eq!(
        s.offer(CELLS_SETTLE_MS + 100, None, adopted.as_deref()),
        Some(three.clone()),
        "stood for the settle time"
    );
    assert!(!s.waiting());
    // Views that change every 500 ms: adopted once the first change has waited the longest.
    let adopted = three;
    let mut t = 10_000;
    let mut taken = None;
    for members in 4..20 {
        let v = view(&[("c1", members, false), ("c2", 3, false), ("c3", 3, false)]);
        if let Some(v) = s.offer(t, Some(v), adopted.as_deref()) {
            taken = Some((t, v));
            break;
        }
        t += 500;
    }
    let (at, v) = taken.expect("adopted within the longest wait");
    assert_eq!(at, 10_000 + CELLS_SETTLE_MAX_MS);
    assert_eq!(v.unwrap()[0].summary.members, 10, "the latest view read");
    // Reading the adopted view again drops what waited.
    let mut s = CellsSettle::new();
    let other = view(&[("c1", 5, false), ("c2", 3, false)]);
    assert_eq!(s.offer(0, Some(other), two.as_deref()), None);
    assert_eq!(s.offer(50, Some(two.clone()), two.as_deref()), None);
    assert!(!s.waiting());
}

#[test]
fn a_change_of_what_may_take_replicas_or_of_the_level_is_adopted_at_once() {
    let adopted = view(&[("c1", 3, false), ("c2", 3, false), ("c3", 3, false)]);
    let cases = [
        (
            "a cell down",
            view(&[("c1", 3, false), ("c2", 3, true), ("c3", 3, false)]),
        ),
        ("a cell gone", view(&[("c1", 3, false), ("c3", 3, false)])),
        (
            "a cell with no member",
            view(&[("c1", 3, false), ("c2", 0, false), ("c3", 3, false)]),
        ),
        ("one level", None),
    ];
    for (what, next) in cases {
        let mut s = CellsSettle::new();
        assert_eq!(
            s.offer(0, Some(next.clone()), adopted.as_deref()),
            Some(next),
            "{what}"
        );
    }
    // Back up: adopted at once too.
    let down = view(&[("c1", 3, false), ("c2", 3, true), ("c3", 3, false)]);
    let mut s = CellsSettle::new();
    assert_eq!(
        s.offer(0, Some(adopted.clone()), down.as_deref()),
        Some(adopted.clone())
    );
    // A new cell that is down changes nothing that takes replicas: it waits.
    let mut s = CellsSettle::new();
    let more = view(&[
        ("c1", 3, false),
        ("c2", 3, false),
        ("c3", 3, false),
        ("c4", 3, true),
    ]);
    assert_eq!(s.offer(0, Some(more), adopted.as_deref()), None);
}
