//! The cell table: what envoys exchange converges (only what is newer travels, bodies only when
//! the content changed), a cell not heard from is down (never the agent's own), stamps keep
//! growing when envoys' clocks disagree, and nothing received can make it panic or grow past
//! its bound.

use proptest::prelude::*;
use shoal_core::cells::{
    content_version, summarize, CellEntry, CellRule, CellSummary, CellTable, EntryRefusal,
    CELLS_MAX, CELL_DOWN_MS, CELL_STALE_MS, STAMP_AHEAD_MAX_MS,
};
use shoal_core::placement::{Node, Placement};
use shoal_core::resources::Resources;

const GIB: u64 = 1 << 30;
const WALL: u64 = 1_800_000_000_000;

/// `n` members of `cell`, each of `cores` CPUs and 2 GiB per CPU, in zone "a".
fn hosts(cell: &str, n: usize, cores: u64) -> Vec<Node> {
    (0..n)
        .map(|i| Node {
            id: format!("{cell}-n{i}"),
            capacity: Resources::new(cores * 1000, cores * 2 * GIB),
            labels: Default::default(),
            zone: "a".into(),
            draining: false,
            down: false,
            caps: None,
        })
        .collect()
}

fn summary(cell: &str, members: usize) -> CellSummary {
    summarize(
        cell,
        0,
        &[format!("10.0.0.{members}:7001")],
        &hosts(cell, members, 4),
        &Placement::default(),
        &[],
        None,
    )
}

/// One pull: `to` asks `from` for what it lacks.
fn pull(to: &mut CellTable, from: &CellTable, now_mono: u64) -> usize {
    let entries = from.newer_than(&to.known(), now_mono);
    let n = entries.len();
    let outcome = to.merge(entries, now_mono, WALL);
    assert!(outcome.refused.is_empty(), "{:?}", outcome.refused);
    n
}

#[test]
fn what_one_envoy_publishes_reaches_another_and_only_news_travel() {
    let mut a = CellTable::new("c1");
    let mut b = CellTable::new("c2");
    a.publish(summary("c1", 3), WALL, 0);
    b.publish(summary("c2", 5), WALL, 0);
    assert_eq!(pull(&mut a, &b, 10), 1);
    assert_eq!(pull(&mut b, &a, 10), 1);
    assert_eq!(a.known(), b.known(), "both hold both cells");
    assert_eq!(pull(&mut a, &b, 20), 0, "nothing newer: nothing sent");

    // Same content, later stamp: the stamp travels, the body does not.
    a.publish(summary("c1", 3), WALL + 1000, 1000);
    let entries = a.newer_than(&b.known(), 1000);
    assert_eq!(entries.len(), 1);
    assert!(entries[0].summary.is_none(), "b holds this version already");
    assert_eq!(b.merge(entries, 1000, WALL).updated, vec!["c1".to_string()]);

    // New content: the body travels.
    a.publish(summary("c1", 4), WALL + 2000, 2000);
    let entries = a.newer_than(&b.known(), 2000);
    assert_eq!(entries[0].summary.as_ref().map(|s| s.members), Some(4));
    b.merge(entries, 2000, WALL);
    assert_eq!(b.summary("c1").map(|s| s.members), Some(4));
}

#[test]
fn a_cell_not_heard_from_is_down_and_the_own_cell_never_is() {
    let mut a = CellTable::new("c1");
    let mut b = CellTable::new("c2");
    a.publish(summary("c1", 3), WALL, 0);
    b.publish(summary("c2", 3), WALL, 0);
    pull(&mut a, &b, 0);
    assert!(!a.is_down("c2", CELL_DOWN_MS));
    assert!(a.is_down("c2", CELL_DOWN_MS + 1));
    assert!(!a.is_down("c1", 10 * CELL_DOWN_MS), "its own cell");
    let cells = a.placement_cells(CELL_DOWN_MS + 1);
    assert_eq!(
        cells.iter().map(|c| c.down).collect::<Vec<_>>(),
        [false, true]
    );
    // A fresh stamp brings it back.
    b.publish(summary("c2", 3), WALL + 9000, 9000);
    pull(&mut a, &b, CELL_DOWN_MS + 1);
    assert!(!a.is_down("c2", CELL_DOWN_MS + 1));
}

#[test]
fn a_cell_going_down_coming_back_and_forgotten_is_one_change_each() {
    use shoal_core::cells::{cell_changes, CellChange};
    let mut a = CellTable::new("c1");
    let mut b = CellTable::new("c2");
    a.publish(summary("c1", 3), WALL, 0);
    b.publish(summary("c2", 3), WALL, 0);
    let empty = a.healths(0);
    pull(&mut a, &b, 0);
    let up = a.healths(1);
    // First heard of: no change; the same reading twice: none.
    assert_eq!(cell_changes(&empty, &up), []);
    assert_eq!(cell_changes(&up, &a.healths(CELL_DOWN_MS)), []);
    let down = a.healths(CELL_DOWN_MS + 1);
    assert_eq!(cell_changes(&up, &down), [CellChange::Down("c2".into())]);
    assert_eq!(CellChange::Down("c2".into()).kind(), "cell-down");
    b.publish(summary("c2", 3), WALL + 9000, 9000);
    pull(&mut a, &b, CELL_DOWN_MS + 1);
    let back = a.healths(CELL_DOWN_MS + 2);
    assert_eq!(cell_changes(&down, &back), [CellChange::Up("c2".into())]);
    // Held down, then no longer held: forgotten; an up cell missing from a reading is not.
    let own_only: Vec<_> = down.iter().filter(|(c, _)| c == "c1").cloned().collect();
    assert_eq!(
        cell_changes(&down, &own_only),
        [CellChange::Forgotten("c2".into())]
    );
    assert_eq!(cell_changes(&up, &own_only), []);
}

#[test]
fn a_relayed_entry_is_as_old_as_its_relay_says() {
    let mut a = CellTable::new("c1");
    let mut relay = CellTable::new("c2");
    let mut c = CellTable::new("c3");
    c.publish(summary("c3", 3), WALL, 0);
    pull(&mut relay, &c, 0);
    // a hears of c3 through the relay 6 s after the relay did: 2 s more and c3 is down.
    pull(&mut a, &relay, 6000);
    assert!(!a.is_down("c3", 6000 + CELL_DOWN_MS - 6000));
    assert!(a.is_down("c3", 6000 + CELL_DOWN_MS - 6000 + 1));
}

#[test]
fn one_stamp_heard_along_two_paths_is_dated_by_the_earliest_under_the_evidence_rule() {
    let mut c = CellTable::new("c3");
    c.publish(summary("c3", 3), WALL, 0);
    let mut slow = CellTable::new("c2");
    // A path that took a second: the entry sent at 0 (age 0) arrives at 1 s.
    let sent = c.entry("c3", 0).expect("held");
    assert!(slow.merge(vec![sent], 1_000, WALL).refused.is_empty());
    for (rule, stale_from) in [(CellRule::Evidence, 0), (CellRule::Stamp, 1_000)] {
        let mut a = CellTable::new("c1");
        a.set_rule(rule);
        pull(&mut a, &c, 0);
        // The same publication again, through the slow path: 500 ms old at the relay.
        let relayed = slow.entry("c3", 1_500).expect("held");
        assert_eq!(relayed.age_ms, 500);
        let outcome = a.merge(vec![relayed], 1_500, WALL);
        assert!(outcome.refused.is_empty() && outcome.updated.is_empty());
        let stale_at = stale_from + CELL_STALE_MS + 1;
        assert!(!a.any_stale(stale_at - 1), "{rule:?}");
        assert!(a.any_stale(stale_at), "{rule:?}: stale from {stale_at}");
    }
}

#[test]
fn stamps_keep_growing_when_the_envoy_with_the_fastest_clock_dies() {
    let mut fast = CellTable::new("c1");
    let mut slow = CellTable::new("c1");
    let mut other = CellTable::new("c2");
    // fast's clock is 30 s ahead of slow's.
    fast.publish(summary("c1", 3), WALL + 30_000, 0);
    pull(&mut slow, &fast, 0);
    pull(&mut other, &fast, 0);
    // fast dies; slow keeps publishing with its own clock, behind: its stamps still grow.
    for t in 1..=20u64 {
        let stamp = slow.publish(summary("c1", 3), WALL + t * 1000, t * 1000);
        assert!(stamp > WALL + 30_000);
        pull(&mut other, &slow, t * 1000);
        assert!(!other.is_down("c1", t * 1000), "c1 publishes at {t} s");
    }
}

#[test]
fn placement_cells_carry_only_what_the_cell_level_reads() {
    let mut a = CellTable::new("c1");
    a.publish(summary("c1", 3), WALL, 0);
    let cells = a.placement_cells(0);
    let s = &cells[0].summary;
    assert_eq!(
        (s.version, s.free, s.contacts.len()),
        (0, Resources::default(), 0)
    );
    assert_eq!(s.capacity, summary("c1", 3).capacity);
}

fn entry(summary: CellSummary, stamp: u64) -> CellEntry {
    CellEntry {
        cell: summary.cell.clone(),
        version: content_version(&summary),
        stamp,
        age_ms: 0,
        summary: Some(summary),
    }
}

#[test]
fn what_a_peer_may_not_send_is_refused_and_counted() {
    let mut t = CellTable::new("c1");
    let good = summary("c2", 3);
    let mut wrong_version = entry(good.clone(), WALL);
    wrong_version.version ^= 1;
    let mut wrong_cell = entry(good.clone(), WALL);
    wrong_cell.cell = "c9".into();
    let future = entry(good.clone(), WALL + STAMP_AHEAD_MAX_MS + 1);
    let mut invalid = good.clone();
    invalid.cell = "Not A Label".into();
    let invalid = entry(invalid, WALL);
    let mut no_body = entry(good.clone(), WALL);
    no_body.summary = None;
    let outcome = t.merge(
        vec![wrong_version, wrong_cell, future, invalid, no_body],
        0,
        WALL,
    );
    let why: Vec<_> = outcome.refused.iter().map(|(_, w)| w.clone()).collect();
    assert!(matches!(why[0], EntryRefusal::VersionMismatch));
    assert!(matches!(why[1], EntryRefusal::WrongCell));
    assert!(matches!(why[2], EntryRefusal::FromTheFuture));
    assert!(matches!(why[3], EntryRefusal::Invalid(_)));
    assert!(matches!(why[4], EntryRefusal::MissingBody));
    assert_eq!(t.refused_total(), 5);
    assert!(t.is_empty(), "nothing refused was kept");

    // Full: the next new cell is refused, the table stays at its bound.
    let many: Vec<CellEntry> = (0..CELLS_MAX + 3)
        .map(|i| entry(summary(&format!("x{i}"), 1), WALL))
        .collect();
    let outcome = t.merge(many, 0, WALL);
    assert_eq!(t.len(), CELLS_MAX);
    assert_eq!(outcome.refused.len(), 3);
    assert!(outcome
        .refused
        .iter()
        .all(|(_, w)| *w == EntryRefusal::TableFull));
}

/// A body the table would not read is not checked: an older or equal stamp is ignored, and a
/// newer stamp of the version held only restamps the content held (whatever came with it). A
/// new version is checked as ever.
#[test]
fn a_body_the_table_holds_already_is_neither_checked_nor_kept() {
    let mut t = CellTable::new("c1");
    let good = summary("c2", 3);
    assert!(t
        .merge(vec![entry(good.clone(), WALL)], 0, WALL)
        .refused
        .is_empty());
    let mut garbled = good.clone();
    garbled.cell = "Not A Label".into();
    let garbled_at = |stamp| CellEntry {
        summary: Some(garbled.clone()),
        ..entry(good.clone(), stamp)
    };
    let older = t.merge(vec![garbled_at(WALL - 1), garbled_at(WALL)], 0, WALL);
    assert!(
        older.refused.is_empty() && older.updated.is_empty(),
        "{older:?}"
    );
    let restamped = t.merge(vec![garbled_at(WALL + 1)], 0, WALL);
    assert!(restamped.refused.is_empty(), "{restamped:?}");
    assert_eq!(restamped.updated, vec!["c2".to_string()]);
    assert_eq!(t.summary("c2").map(|s| s.cell.as_str()), Some("c2"));
    assert_eq!(t.known()[0].stamp, WALL + 1);
    assert_eq!(t.refused_total(), 0);
    // A new version with a body that does not match it is refused, the content held stands.
    let mut bigger = entry(summary("c2", 5), WALL + 2);
    bigger.version ^= 1;
    let refused = t.merge(vec![bigger], 0, WALL);
    assert!(matches!(
        refused.refused[0].1,
        EntryRefusal::VersionMismatch
    ));
    assert_eq!(t.summary("c2").map(|s| s.members), Some(3));
    assert_eq!(t.refused_total(), 1);
}

proptest! {
    /// Arbitrary entries (names, versions, stamps, ages, bodies or none) never panic the table
    /// and never take it past its bound; every entry is taken, ignored as older, or refused.
    #[test]
    fn arbitrary_entries_never_panic(
        raw in proptest::collection::vec(
            ("[a-z0-9-]{0,8}|.{0,8}", any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>(), 0usize..4),
            0..40,
        )
    ) {
        let mut t = CellTable::new("c1");
        let entries: Vec<CellEntry> = raw
            .into_iter()
            .map(|(cell, version, stamp, age_ms, body, members)| {
                let body = body.then(|| {
                    let mut s = summary("c2", members);
                    s.cell = cell.clone();
                    s
                });
                CellEntry { cell, version, stamp, age_ms, summary: body }
            })
            .collect();
        let n = entries.len();
        let outcome = t.merge(entries, 5000, WALL);
        prop_assert!(t.len() <= n);
        prop_assert!(outcome.refused.len() + outcome.updated.len() <= n);
        let _ = t.placement_cells(u64::MAX);
        let _ = t.newer_than(&[], u64::MAX);
    }
}

/// A summary of `cell` that holds `sees` up.
fn seeing(cell: &str, sees: &[&str]) -> CellSummary {
    let mut s = summary(cell, 3);
    s.sees = sees.iter().map(|c| c.to_string()).collect();
    s
}

#[test]
fn a_cell_counts_toward_the_quorum_only_while_up_and_holding_this_cell_up() {
    let mut a = CellTable::new("c1");
    a.publish(seeing("c1", &["c2", "c3"]), WALL, 0);
    let mut b = CellTable::new("c2");
    b.publish(seeing("c2", &["c1", "c3"]), WALL, 0);
    let mut c = CellTable::new("c3");
    // c3 hears c1's packets no more (a one-way partition): it holds only c2 up.
    c.publish(seeing("c3", &["c2"]), WALL, 0);
    pull(&mut a, &b, 0);
    pull(&mut a, &c, 0);
    let q = a.quorum(0, 0);
    assert_eq!((q.known, q.with_us, q.incomplete.clone()), (3, 2, None));
    assert!(q.holds(), "c1 and c2: 2 of 3");
    assert_eq!(a.up_cells(0), ["c2", "c3"]);

    // c2 stops being heard: down after CELL_DOWN_MS, and no longer counted.
    let later = CELL_DOWN_MS + 1;
    let q = a.quorum(later, 0);
    assert_eq!((q.known, q.with_us), (3, 1));
    assert!(!q.holds());
    assert!(
        q.why_not().unwrap().contains("1 of the 3"),
        "{:?}",
        q.why_not()
    );
    assert!(a.up_cells(later).is_empty());

    // The floor saved at the last quorum keeps a cell that forgot the others a minority.
    let alone = CellTable::new("c1");
    assert!(alone.quorum(0, 0).holds(), "a lone cell of a mesh of one");
    assert!(!alone.quorum(0, 3).holds(), "one of three known before");
}

#[test]
fn a_summary_naming_a_cell_this_agent_does_not_know_makes_the_view_incomplete() {
    let mut a = CellTable::new("c1");
    a.publish(seeing("c1", &["c2"]), WALL, 0);
    let mut b = CellTable::new("c2");
    b.publish(seeing("c2", &["c1", "c4"]), WALL, 0);
    pull(&mut a, &b, 0);
    let q = a.quorum(0, 0);
    assert_eq!(q.with_us, 2);
    assert!(!q.holds());
    let why = q.incomplete.expect("incomplete");
    assert!(why.contains("c4"), "{why}");
}

#[test]
fn sees_must_be_sorted_valid_names_other_than_the_cell_itself() {
    for (sees, bad) in [
        (vec!["c2", "c1"], "sorted"),
        (vec!["c1"], "its own name"),
        (vec!["C2"], "not a DNS label"),
    ] {
        let mut s = summary("c1", 3);
        s.sees = sees.iter().map(|c| c.to_string()).collect();
        assert!(s.validate().is_err(), "{bad}: {sees:?}");
    }
    let mut s = summary("c1", 3);
    s.sees = (0..=CELLS_MAX).map(|i| format!("x{i:05}")).collect();
    assert!(s.validate().is_err(), "more than CELLS_MAX");
    s.sees.truncate(2);
    assert_eq!(s.validate(), Ok(()));
}

#[test]
fn a_summary_of_the_own_cell_claiming_more_than_its_members_records_is_refused_and_counted() {
    let mut a = CellTable::new("c1");
    a.set_own_bound(shoal_core::cells::OwnBound {
        members: 3,
        capacity: Resources::new(3 * 4000, 3 * 8 * GIB),
        largest: Resources::new(4000, 8 * GIB),
    });
    let mut liar = CellTable::new("c2");
    // A peer publishes a summary of c1 with 50 members (what three records cannot account for;
    // a few more than known would pass: views differ while hosts join).
    liar.publish(summary("c1", 50), WALL, 0);
    let outcome = a.merge(liar.newer_than(&a.known(), 0), 0, WALL);
    assert_eq!(outcome.refused.len(), 1, "{outcome:?}");
    assert!(matches!(
        outcome.refused[0].1,
        shoal_core::cells::EntryRefusal::OwnCellOverclaimed(_)
    ));
    assert_eq!(a.refused_total(), 1);
    assert!(a.summary("c1").is_none());
    // The truth (3 members of 4 CPUs) is taken; so is any summary of another cell.
    let mut honest = CellTable::new("c2");
    honest.publish(summary("c1", 3), WALL, 0);
    honest.publish(summary("c2", 50), WALL, 0);
    let outcome = a.merge(honest.newer_than(&a.known(), 0), 0, WALL);
    assert!(outcome.refused.is_empty(), "{outcome:?}");
    assert_eq!(a.summary("c1").map(|s| s.members), Some(3));
    assert_eq!(a.summary("c2").map(|s| s.members), Some(50));
}

/// The key (a hash, for the simulator's checker) and the stamp (exact, for the host round) move
/// exactly when the placement cells do.
#[test]
fn the_placement_key_and_stamp_move_exactly_when_the_placement_cells_do() {
    let mut a = CellTable::new("c1");
    a.publish(summary("c1", 3), WALL, 0);
    let alone = a.placement_stamp(0);
    let mut b = CellTable::new("c2");
    b.publish(summary("c2", 3), WALL, 0);
    pull(&mut a, &b, 0);
    let (cells, key, stamp) = (
        a.placement_cells(0),
        a.placement_key(0),
        a.placement_stamp(0),
    );
    // A second cell held: the stamp moved (and now places in two levels).
    assert_ne!(stamp, alone);
    // A later stamp, or a summary differing only in what placement never reads (how many
    // members, beyond having one, included): same key.
    let mut same = summary("c2", 3);
    same.contacts = vec!["elsewhere".to_string()];
    same.sees = vec!["c1".to_string()];
    same.members = 9;
    b.publish(same, WALL + 1000, 1000);
    pull(&mut a, &b, 1000);
    assert_eq!(a.placement_cells(1000), cells);
    assert_eq!(a.placement_key(1000), key);
    assert_eq!(a.placement_stamp(1000), stamp);
    // New ranked figures: all move.
    b.publish(summary("c2", 7), WALL + 2000, 2000);
    pull(&mut a, &b, 2000);
    assert_ne!(a.placement_cells(2000), cells);
    assert_ne!(a.placement_key(2000), key);
    assert_ne!(a.placement_stamp(2000), stamp);
    // A cell going down: all move.
    let (cells, key, stamp) = (
        a.placement_cells(2000),
        a.placement_key(2000),
        a.placement_stamp(2000),
    );
    let later = 2000 + CELL_DOWN_MS + 1;
    assert_ne!(a.placement_cells(later), cells);
    assert_ne!(a.placement_key(later), key);
    assert_ne!(a.placement_stamp(later), stamp);
    // A cell forgotten: the stamp moves.
    let stamp = a.placement_stamp(later);
    let forgotten = later + shoal_core::cells::CELL_FORGET_MS + 1;
    assert_eq!(a.forget_old(forgotten), vec!["c2".to_string()]);
    assert_ne!(a.placement_stamp(forgotten), stamp);
}

/// Two envoys of one cell that first published at different member counts (one saw 99 hosts,
/// the other 100) publish the same ranked figures once they hold each other's summary, and the
/// cell's summary then stands: with each envoy's hysteresis against its own last publication,
/// they published 792 and 800 CPUs in turn forever and every agent's cell level flipped with
/// them (a 5,000-host simulation never converged).
#[test]
fn two_envoys_that_first_saw_different_member_counts_publish_one_summary_that_stands() {
    let contacts = ["10.0.0.1:7001".to_string()];
    let placement = Placement::default();
    // One envoy's publication at `t` seeing `n` members: the summary it built, kept as its last.
    let republish = |table: &mut CellTable, last: &mut Option<CellSummary>, n: usize, t: u64| {
        let s = table.summarize_own(
            &contacts,
            &hosts("c1", n, 8),
            (&placement, &[]),
            last.as_ref(),
            t,
        );
        table.publish(s.clone(), WALL + t, t);
        *last = Some(s);
    };
    let (mut a, mut b) = (CellTable::new("c1"), CellTable::new("c1"));
    let (mut a_last, mut b_last) = (None, None);
    // a first saw 99 members, b 100; neither holds the other's summary yet.
    republish(&mut a, &mut a_last, 99, 0);
    republish(&mut b, &mut b_last, 100, 1);
    assert_ne!(
        a.summary("c1").map(|s| s.capacity),
        b.summary("c1").map(|s| s.capacity),
        "the two first publications differ"
    );
    // From now on both see 100 members; they publish in turn and pull each other's news.
    let mut held = Vec::new();
    for round in 1..=20u64 {
        let t = round * 1000;
        pull(&mut a, &b, t);
        republish(&mut a, &mut a_last, 100, t);
        pull(&mut b, &a, t + 500);
        republish(&mut b, &mut b_last, 100, t + 500);
        pull(&mut a, &b, t + 500);
        let (sa, sb) = (a.summary("c1").unwrap(), b.summary("c1").unwrap());
        assert_eq!(
            sa.version, sb.version,
            "round {round}: both hold one summary"
        );
        held.push(sa.clone());
    }
    assert_eq!(
        a_last.as_ref().map(|s| s.capacity),
        b_last.as_ref().map(|s| s.capacity),
        "both envoys publish the same ranked capacity"
    );
    assert!(
        held.windows(2).all(|w| w[0] == w[1]),
        "the cell's summary stands once the envoys agree: {:?}",
        held.iter().map(|s| s.capacity).collect::<Vec<_>>()
    );
}
