//! Cell verdicts on evidence (mesh version 14, `CellRule::Evidence`): a stale cell is degraded,
//! and down only when observer cells say their envoys' probes of several of its members failed.
//! A cell whose members answer is never down however long its envoys stay silent; one starved
//! or cut-off observer cannot take a cell down for the others; a cell cut off alone holds the
//! others down on its own evidence; and the quorum of cells still counts only silence.

use shoal_core::cells::{
    cell_changes, summarize, CellChange, CellHealth, CellRule, CellSummary, CellTable,
    CELL_DEGRADED_MS, CELL_DOWN_MS, CELL_PROBED_MIN, CELL_PROBE_MS, CELL_REPROBE_MS, CELL_STALE_MS,
};
use shoal_core::placement::{Node, Placement};
use shoal_core::resources::Resources;

const GIB: u64 = 1 << 30;
const WALL: u64 = 1_800_000_000_000;
/// Contacts every cell lists: 3 envoys and 2 members.
const CONTACTS: usize = 5;

fn contact(cell: &str, i: usize) -> String {
    format!("{cell}-n{i}@10.0.0.{i}:7001@10.0.0.{i}:7000")
}

fn summary(cell: &str, sees: Vec<String>) -> CellSummary {
    let nodes: Vec<Node> = (0..CONTACTS)
        .map(|i| Node {
            id: format!("{cell}-n{i}"),
            capacity: Resources::new(4000, 8 * GIB),
            labels: Default::default(),
            zone: "a".into(),
            draining: false,
            down: false,
            caps: None,
        })
        .collect();
    let contacts: Vec<String> = (0..CONTACTS).map(|i| contact(cell, i)).collect();
    let mut s = summarize(cell, 0, &contacts, &nodes, &Placement::default(), &[], None);
    s.sees = sees;
    s
}

/// One envoy's table per cell, `c1..=cn`, all under the evidence rule.
struct Mesh {
    tables: Vec<CellTable>,
    /// Cells whose envoys publish no more.
    silent: Vec<bool>,
}

/// A mesh of four cells whose c4 went silent and whose c1 and c2 envoys' probes of it failed:
/// c4 is down on evidence at the time returned.
fn lost_c4() -> (Mesh, u64) {
    let mut m = Mesh::new(4);
    m.silent[3] = true;
    let now = 1 + CELL_STALE_MS + 1;
    m.round(now);
    m.probe(0, now, &|_| false);
    m.probe(1, now, &|_| false);
    m.round(now + 10);
    (m, now + 10)
}

impl Mesh {
    fn new(n: usize) -> Mesh {
        let mut tables: Vec<CellTable> = (1..=n)
            .map(|i| {
                let mut t = CellTable::new(&format!("c{i}"));
                t.set_rule(CellRule::Evidence);
                t
            })
            .collect();
        for (i, t) in tables.iter_mut().enumerate() {
            let cell = format!("c{}", i + 1);
            t.publish(summary(&cell, vec![]), WALL, 0);
        }
        let mut mesh = Mesh {
            tables,
            silent: vec![false; n],
        };
        mesh.round(0);
        mesh.round(1);
        mesh
    }

    fn name(i: usize) -> String {
        format!("c{}", i + 1)
    }

    /// Every publishing envoy publishes (its `sees` from its own evidence), then every table
    /// pulls from every other whose cell still answers (a silent cell's table neither sends nor
    /// is sent to: it is gone).
    fn round(&mut self, now: u64) {
        for i in 0..self.tables.len() {
            if self.silent[i] {
                continue;
            }
            let sees = self.tables[i].sees(now);
            let cell = Mesh::name(i);
            self.tables[i].publish(summary(&cell, sees), WALL + now, now);
        }
        for to in 0..self.tables.len() {
            for from in 0..self.tables.len() {
                if to == from || self.silent[to] || self.silent[from] {
                    continue;
                }
                let entries = self.tables[from].newer_than(&self.tables[to].known(), now);
                let outcome = self.tables[to].merge(entries, now, WALL + now);
                assert!(outcome.refused.is_empty(), "{:?}", outcome.refused);
            }
        }
    }

    /// `observer`'s envoy probes what its table says to probe; `answers(contact)` says whether
    /// the contact answered.
    fn probe(&mut self, observer: usize, now: u64, answers: &dyn Fn(&str) -> bool) -> usize {
        let asks = self.tables[observer].to_probe(now, CELL_PROBED_MIN);
        let mut n = 0;
        for (cell, contacts) in asks {
            for c in contacts {
                n += 1;
                let ok = answers(&c);
                self.tables[observer].probed(&cell, &c, ok, now);
            }
        }
        n
    }

    fn health(&self, at: usize, cell: usize, now: u64) -> CellHealth {
        self.tables[at].health(&Mesh::name(cell), now)
    }
}

#[test]
fn a_stale_cell_is_degraded_and_probed_and_while_its_members_answer_never_down() {
    let mut m = Mesh::new(4);
    m.silent[3] = true; // c4's envoys stop publishing (starved, say); its members still answer.
    let mut now = 1;
    assert_eq!(m.health(0, 3, now + CELL_STALE_MS), CellHealth::Up);
    let mut probes = 0;
    while now < 60_000 {
        now += 1_000;
        for o in 0..3 {
            probes += m.probe(o, now, &|_| true);
        }
        m.round(now);
        for at in 0..3 {
            let h = m.health(at, 3, now);
            assert_ne!(h, CellHealth::Down, "at c{} after {now} ms", at + 1);
            if now > CELL_DEGRADED_MS + 1 {
                assert_eq!(h, CellHealth::Degraded, "at c{} after {now} ms", at + 1);
            } else {
                assert_eq!(h, CellHealth::Up, "at c{} after {now} ms", at + 1);
            }
        }
    }
    // A cell whose member answered is not probed again within the stale bound: each observer
    // probes it every few seconds, not every round.
    let every_round = 3 * CELL_PROBED_MIN * 60;
    assert!(
        probes > 0 && probes * 2 <= every_round,
        "{probes} probes in 60 s"
    );
}

#[test]
fn a_lost_cell_is_down_once_two_observer_cells_probes_of_several_members_failed() {
    let mut m = Mesh::new(4);
    m.silent[3] = true;
    let now = 1 + CELL_STALE_MS + 1;
    m.round(now);
    assert_eq!(
        m.health(0, 3, now),
        CellHealth::Up,
        "stale, probed, not degraded yet"
    );
    // c1's envoy probes three members of c4: all fail. Its own evidence, one observer of three.
    assert_eq!(m.probe(0, now, &|_| false), CELL_PROBED_MIN);
    assert!(m.tables[0].unreached("c4", now));
    m.round(now);
    for at in 0..3 {
        assert_eq!(
            m.health(at, 3, now),
            CellHealth::Up,
            "one observer is not enough"
        );
    }
    // c2's probes fail too: two observers of three, and every agent holds c4 down.
    m.probe(1, now + 10, &|_| false);
    m.round(now + 10);
    for at in 0..3 {
        assert_eq!(
            m.health(at, 3, now + 10),
            CellHealth::Down,
            "at c{}",
            at + 1
        );
    }
    // The changes an agent's events show: up, degraded, down.
    let up = vec![("c4".to_string(), CellHealth::Up)];
    let degraded = vec![("c4".to_string(), CellHealth::Degraded)];
    let down = vec![("c4".to_string(), CellHealth::Down)];
    assert_eq!(
        cell_changes(&up, &degraded),
        [CellChange::Degraded("c4".into())]
    );
    assert_eq!(
        cell_changes(&degraded, &down),
        [CellChange::Down("c4".into())]
    );
    assert_eq!(CellChange::Degraded("c4".into()).kind(), "cell-degraded");
    // c4 comes back: its fresh stamp makes it up everywhere, the failures are forgotten.
    m.silent[3] = false;
    m.round(now + 20);
    for at in 0..4 {
        assert_eq!(m.health(at, 3, now + 20), CellHealth::Up);
    }
    assert!(!m.tables[0].unreached("c4", now + 20 + CELL_STALE_MS + 1));
}

#[test]
fn one_starved_or_lossy_observer_cannot_take_a_cell_down() {
    let mut m = Mesh::new(4);
    m.silent[3] = true;
    let mut now = 1 + CELL_STALE_MS + 1;
    for _ in 0..30 {
        m.probe(0, now, &|_| false); // c1 hears nothing back: its own network is bad
        m.probe(1, now, &|_| true);
        m.probe(2, now, &|_| true);
        m.round(now);
        for at in 0..3 {
            assert_ne!(m.health(at, 3, now), CellHealth::Down, "at c{}", at + 1);
        }
        now += 1_000;
    }
}

#[test]
fn a_member_that_answers_clears_the_failures_and_an_unlisted_contact_is_ignored() {
    let mut m = Mesh::new(3);
    m.silent[2] = true;
    let now = 1 + CELL_STALE_MS + 1;
    m.tables[0].probed("c3", &contact("c3", 0), false, now);
    m.tables[0].probed("c3", &contact("c3", 1), false, now);
    m.tables[0].probed("c3", "stranger@10.9.9.9:1@10.9.9.9:2", false, now);
    m.tables[0].probed("c9", &contact("c3", 2), false, now);
    assert!(!m.tables[0].unreached("c3", now), "two of three failed");
    m.tables[0].probed("c3", &contact("c3", 2), false, now);
    assert!(m.tables[0].unreached("c3", now));
    m.tables[0].probed("c3", &contact("c3", 4), true, now + 1);
    assert!(
        !m.tables[0].unreached("c3", now + 1),
        "an answer vouches for it"
    );
    // Unreached again; probed again only every CELL_REPROBE_MS.
    for i in 0..3 {
        m.tables[0].probed("c3", &contact("c3", i), false, now + 2);
    }
    assert!(m.tables[0].unreached("c3", now + 2));
    let of_c3 = |asks: Vec<(String, Vec<String>)>| {
        asks.into_iter()
            .filter(|(c, _)| c == "c3")
            .flat_map(|(_, contacts)| contacts)
            .count()
    };
    // (Its answer at now + 1 also spares it probes within the stale bound.)
    let t = now + 2 + CELL_STALE_MS;
    m.tables[0].probed("c3", &contact("c3", 0), false, t);
    assert_eq!(of_c3(m.tables[0].to_probe(t + 1, 3)), 0);
    assert_eq!(of_c3(m.tables[0].to_probe(t + CELL_REPROBE_MS, 3)), 1);
}

#[test]
fn a_cell_cut_off_alone_holds_the_others_down_only_once_silent() {
    let mut m = Mesh::new(4);
    // c1 is cut off from every other cell: nothing moves either way.
    let now = 2 + CELL_STALE_MS + 1;
    let c1 = &mut m.tables[0];
    let asks = c1.to_probe(now, CELL_PROBED_MIN);
    assert_eq!(asks.len(), 3);
    for (cell, contacts) in asks {
        for c in contacts {
            c1.probed(&cell, &c, false, now);
        }
    }
    let sees = c1.sees(now);
    assert!(
        sees.is_empty(),
        "its summary says it reaches none: {sees:?}"
    );
    // Its only observer is its own cell (the others are stale here): most likely it is the
    // one cut off, so it does not pull their replicas in on its own word; it waits for the
    // silence bound, as under the stamp rule (and meanwhile the other cells, two observers
    // or more, hold it down on theirs).
    for cell in ["c2", "c3", "c4"] {
        assert_eq!(c1.health(cell, now), CellHealth::Up, "{cell}");
        assert_eq!(
            c1.health(cell, 1 + CELL_DOWN_MS + 1),
            CellHealth::Down,
            "{cell}"
        );
    }
    // The quorum counts silence only.
    let q = c1.quorum(now, 0);
    assert_eq!(q.newest_down_ms, None);
    assert_eq!(q.with_us, 4, "{q:?}");
    let later = 1 + CELL_DOWN_MS + 500;
    let q = c1.quorum(later, 0);
    assert_eq!(q.with_us, 1, "{q:?}");
    // Last heard at 1 ms (the mesh's second round).
    assert_eq!(q.newest_down_ms, Some(later - 1 - CELL_DOWN_MS));
    assert!(!q.holds());
}

#[test]
fn a_cell_down_on_evidence_before_it_is_silent_holds_the_exclusive_claim_clock() {
    let (m, now) = lost_c4();
    assert_eq!(m.health(2, 3, now), CellHealth::Down);
    // Down on evidence, not silent: the claim clock has not started (0 ms).
    let q = m.tables[2].quorum(now, 0);
    assert_eq!(q.newest_down_ms, Some(0), "{q:?}");
}

#[test]
fn under_the_stamp_rule_a_cell_is_up_until_silent_and_nothing_is_probed() {
    let mut m = Mesh::new(3);
    for t in &mut m.tables {
        t.set_rule(CellRule::Stamp);
    }
    m.silent[2] = true;
    let now = 1 + CELL_STALE_MS + 1;
    assert_eq!(m.health(0, 2, now), CellHealth::Up);
    assert!(m.tables[0].to_probe(now, 3).is_empty());
    assert_eq!(m.tables[0].sees(now), m.tables[0].up_cells(now));
    assert_eq!(m.health(0, 2, 1 + CELL_DOWN_MS + 1), CellHealth::Down);
}

#[test]
fn with_no_observer_a_stale_cell_is_down_only_once_silent() {
    // An agent whose own cell has not published yet and knows one other cell: no observer.
    let mut a = CellTable::new("c1");
    a.set_rule(CellRule::Evidence);
    let mut b = CellTable::new("c2");
    b.publish(summary("c2", vec![]), WALL, 0);
    let entries = b.newer_than(&a.known(), 0);
    a.merge(entries, 0, WALL);
    assert_eq!(a.health("c2", CELL_STALE_MS + 1), CellHealth::Up);
    assert_eq!(a.health("c2", CELL_DEGRADED_MS + 1), CellHealth::Degraded);
    assert_eq!(a.health("c2", CELL_DOWN_MS + 1), CellHealth::Down);
}

#[test]
fn a_cell_back_from_a_restart_is_not_held_down_again_on_what_was_said_before_it_came() {
    let mut m = Mesh::new(4);
    m.silent[3] = true;
    let mut now = 1 + CELL_STALE_MS + 1;
    m.round(now);
    m.probe(0, now, &|_| false);
    m.probe(1, now, &|_| false);
    now += 10;
    m.round(now);
    assert_eq!(m.health(2, 3, now), CellHealth::Down);
    // c4 restarts: one fresh summary reaches c3 alone, then its envoys fall silent again while
    // they start (c1's and c2's summaries, which leave c4 out, predate it).
    now += 5_000;
    let mut back = CellTable::new("c4");
    back.set_rule(CellRule::Evidence);
    back.publish(summary("c4", vec![]), WALL + now, now);
    let entries = back.newer_than(&m.tables[2].known(), now);
    m.tables[2].merge(entries, now, WALL + now);
    assert_eq!(m.health(2, 3, now), CellHealth::Up);
    // Stale again before anyone published since: not down on the old evidence.
    let later = now + CELL_STALE_MS + 100;
    assert_eq!(m.health(2, 3, later), CellHealth::Up);
    // Evidence published after it (c1 and c2 still leave it out, their probes failing again)
    // takes it down.
    for o in 0..2 {
        let entries = back.newer_than(&m.tables[o].known(), now);
        m.tables[o].merge(entries, now, WALL + now);
    }
    m.probe(0, later, &|_| false);
    m.probe(1, later, &|_| false);
    m.round(later);
    assert_eq!(m.health(2, 3, later), CellHealth::Down);
}

#[test]
fn a_cell_latched_down_stays_down_until_its_stamp_grows() {
    let (mut m, t) = lost_c4();
    m.tables[2].latch(t);
    assert_eq!(m.health(2, 3, t), CellHealth::Down);
    // c2's envoy now gets an answer from a member of c4 (its envoys have not published yet):
    // c2 vouches for c4 again, and c4 is no longer down on the evidence alone...
    m.tables[1].probed("c4", &contact("c4", 4), true, t + 10);
    m.round(t + 10);
    assert!(m.tables[1].sees(t + 10).contains(&"c4".to_string()));
    // ...but c3 latched it down, and keeps it down until c4's stamp grows.
    m.tables[2].latch(t + 10);
    assert_eq!(m.health(2, 3, t + 10), CellHealth::Down);
    m.silent[3] = false;
    m.round(t + 20);
    assert_eq!(m.health(2, 3, t + 20), CellHealth::Up);
}

/// `latch_downs` (each cell judged once) says what a latch and then `is_down` of each cell say,
/// and latches the same cells: on every table of a mesh losing a cell, as it is lost, held
/// down, and back.
#[test]
fn latch_downs_equals_a_latch_then_each_cells_down_flag() {
    let (mut m, t) = lost_c4();
    let check = |m: &Mesh, now: u64| {
        for table in &m.tables {
            let (mut one, mut two) = (table.clone(), table.clone());
            let downs = one.latch_downs(now);
            two.latch(now);
            let names: Vec<String> = two.healths(now).into_iter().map(|(c, _)| c).collect();
            let expected: Vec<bool> = names.iter().map(|c| two.is_down(c, now)).collect();
            assert_eq!(downs, expected, "at {now}");
            assert_eq!(
                one.healths(now + 1),
                two.healths(now + 1),
                "latched alike at {now}"
            );
        }
    };
    for dt in [0, 10, 2_600, 6_100, 8_100] {
        check(&m, t + dt);
    }
    m.tables[2].latch(t);
    m.silent[3] = false;
    m.round(t + 20);
    for dt in [20, 30, 9_000] {
        check(&m, t + dt);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Every cell's standing read at once (`healths`, `latch_downs`: each observer's `sees`
    /// read once) says what judging each cell alone says, whatever cells went silent, came
    /// back, or failed or answered probes, and at whatever age.
    #[test]
    fn standings_read_at_once_equal_each_cell_judged_alone(
        ops in proptest::collection::vec((0usize..6, 0u64..4_000, proptest::bool::ANY), 1..25),
    ) {
        let mut m = Mesh::new(6);
        let mut now = 1;
        for (cell, dt, flag) in ops {
            now += dt;
            match dt % 3 {
                0 => m.silent[cell] = flag,
                1 => {
                    m.probe(cell, now, &|c| flag && c.len() % 2 == 0);
                }
                _ => {}
            }
            m.round(now);
            for t in &m.tables {
                let names: Vec<String> = t.names().cloned().collect();
                let alone: Vec<CellHealth> = names.iter().map(|c| t.health(c, now)).collect();
                let at_once: Vec<CellHealth> = t.healths(now).into_iter().map(|(_, h)| h).collect();
                proptest::prop_assert_eq!(&at_once, &alone);
                let (mut one, mut two) = (t.clone(), t.clone());
                let downs = one.latch_downs(now);
                two.latch(now);
                let expected: Vec<bool> = names.iter().map(|c| two.is_down(c, now)).collect();
                proptest::prop_assert_eq!(downs, expected);
            }
            if let Some(t) = m.tables.iter_mut().find(|_| flag) {
                t.latch(now);
            }
        }
    }
}

#[test]
fn a_cell_is_in_question_from_late_until_held_down_or_silent() {
    let mut m = Mesh::new(4);
    m.silent[3] = true;
    assert!(
        !m.tables[0].in_question(1 + CELL_PROBE_MS),
        "fresh: nothing in question"
    );
    assert!(
        m.tables[0].in_question(1 + CELL_PROBE_MS + 1),
        "c4 late: probed before it is stale"
    );
    assert!(!m.tables[0].any_stale(1 + CELL_STALE_MS));
    let stale = 1 + CELL_STALE_MS + 1;
    assert!(m.tables[0].in_question(stale), "c4 stale, not down");
    // Held down on two observers' evidence: settled, no longer in question, still stale (news
    // may bring it back up).
    let (lost, now) = lost_c4();
    assert_eq!(lost.health(2, 3, now), CellHealth::Down);
    assert!(!lost.tables[2].in_question(now));
    assert!(lost.tables[2].any_stale(now));
    // Never held down (its members answer) but silent past the down bound: not in question.
    assert!(!m.tables[0].in_question(1 + CELL_DOWN_MS + 1));
    // Under the stamp rule nothing is ever in question.
    m.tables[0].set_rule(CellRule::Stamp);
    assert!(!m.tables[0].in_question(stale));
}

#[test]
fn an_entry_carries_the_summary_held() {
    let m = Mesh::new(3);
    let e = m.tables[0].entry("c2", 1).expect("c2 is held");
    assert_eq!(e.cell, "c2");
    assert_eq!(e.summary.as_ref().map(|s| s.cell.as_str()), Some("c2"));
    let known = m.tables[0].known();
    let held = known.iter().find(|k| k.cell == "c2").unwrap();
    assert_eq!((e.version, e.stamp), (held.version, held.stamp));
    assert!(m.tables[0].entry("c9", 1).is_none());
}

#[test]
fn a_late_cell_is_probed_before_it_is_stale_and_its_failures_count_once_it_is() {
    let mut m = Mesh::new(4);
    m.silent[3] = true; // c4 lost just after its last stamp
    let late = 1 + CELL_PROBE_MS + 1;
    m.round(1 + CELL_PROBE_MS);
    assert!(m.tables[0]
        .to_probe(1 + CELL_PROBE_MS, CELL_PROBED_MIN)
        .is_empty());
    m.round(late); // the other cells fresh
    let n = m.probe(0, late, &|_| false);
    assert_eq!(n, CELL_PROBED_MIN, "late: its contacts probed");
    assert!(
        !m.tables[0].unreached("c4", late + 500),
        "not stale yet: not unreached"
    );
    // Enough failures in: nothing more to probe until it is stale.
    m.round(late + 500);
    assert!(m.tables[0].to_probe(late + 500, CELL_PROBED_MIN).is_empty());
    let stale = 1 + CELL_STALE_MS + 1;
    m.round(stale);
    assert!(
        m.tables[0].unreached("c4", stale),
        "stale: the failures from before count, no new probe needed"
    );
    assert!(!m.tables[0].sees(stale).contains(&"c4".to_string()));
}

#[test]
fn a_late_cell_that_answered_is_probed_again_a_reprobe_interval_later() {
    let mut m = Mesh::new(4);
    m.silent[3] = true;
    let late = 1 + CELL_PROBE_MS + 1;
    m.round(late); // the other cells fresh
    assert_eq!(m.probe(0, late, &|_| true), CELL_PROBED_MIN);
    m.round(late + CELL_REPROBE_MS - 1);
    assert!(m.tables[0]
        .to_probe(late + CELL_REPROBE_MS - 1, CELL_PROBED_MIN)
        .is_empty());
    m.round(late + CELL_REPROBE_MS);
    let again = m.tables[0].to_probe(late + CELL_REPROBE_MS, CELL_PROBED_MIN);
    assert_eq!(
        again.len(),
        1,
        "answered while late: asked again after {CELL_REPROBE_MS} ms"
    );
    // Answered while stale: the longer quiet.
    let stale = 1 + CELL_STALE_MS + 1;
    m.round(stale);
    assert_eq!(m.probe(0, stale, &|_| true), CELL_PROBED_MIN);
    m.round(stale + CELL_REPROBE_MS);
    assert!(m.tables[0]
        .to_probe(stale + CELL_REPROBE_MS, CELL_PROBED_MIN)
        .is_empty());
    m.round(stale + CELL_STALE_MS);
    assert_eq!(
        m.tables[0]
            .to_probe(stale + CELL_STALE_MS, CELL_PROBED_MIN)
            .len(),
        1
    );
}
