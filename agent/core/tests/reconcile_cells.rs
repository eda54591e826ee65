//! Exclusive replicas in a mesh of several cells: the start rule across cells (what the other
//! cells said, the longer claim) and the fencing of a cell that lost its quorum of cells.

mod reconcile_support;

use reconcile_support::*;
use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::{CellCopies, CellQuorum, IssueKind, StopCause};

const EXCLUSIVE: &str = "[placement]\nexclusive = true\n";

/// Three nodes of one cell among three cells, all holding each other up; `db` placed on n1,
/// nothing said by the other cells yet.
fn cell_of_three() -> Cluster {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    for n in ["n1", "n2", "n3"] {
        c.agent_mut(n).cell_quorum = Some(quorum(3, 3));
    }
    c.put(spec("db", 1, EXCLUSIVE), "v1");
    c.place("db", 0, "n1");
    c
}

fn quorum(known: usize, with_us: usize) -> CellQuorum {
    CellQuorum {
        known,
        with_us,
        incomplete: None,
        newest_down_ms: None,
    }
}

fn db() -> ReplicaId {
    ReplicaId::new("db", 0)
}

fn waiting(c: &Cluster) -> String {
    c.issue("n1", IssueKind::ExclusiveWaiting)
        .map(|i| i.message)
        .unwrap_or_default()
}

#[test]
fn an_exclusive_replica_starts_only_once_every_cell_said_it_runs_none_and_the_cell_claim_passed() {
    let mut c = cell_of_three();
    c.run_for(10_000);
    assert!(c.starts("db", 0).is_empty(), "no cell asked yet");
    assert!(waiting(&c).contains("not been asked"), "{}", waiting(&c));

    let unanswered = CellCopies {
        unanswered: vec!["c3".to_string()],
        ..CellCopies::default()
    };
    c.agent_mut("n1").cell_copies.insert(db(), unanswered);
    c.run_for(10_000);
    assert!(c.starts("db", 0).is_empty(), "c3 has not answered");
    assert!(waiting(&c).contains("c3"), "{}", waiting(&c));

    c.agent_mut("n1")
        .cell_copies
        .insert(db(), CellCopies::default());
    let cleared = c.now;
    c.run_for(60_000);
    let starts = c.starts("db", 0);
    assert_eq!(starts.len(), 1, "{starts:?}");
    // The claim was published from the start (t0), so the claim delay had passed when the
    // cells answered: the start follows at once.
    assert!(starts[0] >= cleared, "{starts:?}");
    assert!(starts[0] <= cleared + 1_000, "{starts:?}");
}

#[test]
fn the_claim_lasts_the_cell_claim_delay_in_a_mesh_of_cells() {
    let mut c = cell_of_three();
    c.agent_mut("n1")
        .cell_copies
        .insert(db(), CellCopies::default());
    c.run_for(60_000);
    let starts = c.starts("db", 0);
    assert_eq!(starts.len(), 1, "{starts:?}");
    let claim_ms = c.config.cell_live_claim_ms;
    assert!(claim_ms > c.config.exclusive_claim_ms);
    assert!(starts[0] >= T0 + claim_ms, "started at {starts:?}");
    assert!(starts[0] <= T0 + claim_ms + 1_000, "started at {starts:?}");
}

#[test]
fn a_cell_that_went_down_lately_is_given_the_time_to_fence_its_copy() {
    let mut c = cell_of_three();
    c.agent_mut("n1")
        .cell_copies
        .insert(db(), CellCopies::default());
    // c3 went down 5 s ago: its copy, if any, is fenced 30 s after it went down.
    c.agent_mut("n1").cell_quorum = Some(CellQuorum {
        newest_down_ms: Some(5_000),
        ..quorum(3, 2)
    });
    let t = c.now;
    c.run_for(20_000);
    assert!(c.starts("db", 0).is_empty(), "waits for c3 to fence");
    // The shell's figure grows with time; the core waits until 30 s after the cell went down.
    for second in 0..10 {
        c.agent_mut("n1").cell_quorum = Some(CellQuorum {
            newest_down_ms: Some(25_000 + second * 1_000),
            ..quorum(3, 2)
        });
        c.run_for(1_000);
    }
    let starts = c.starts("db", 0);
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert!(starts[0] >= t + 25_000, "{starts:?}");
}

#[test]
fn a_copy_alive_in_another_cell_or_a_lower_claim_holds_the_start() {
    let mut c = cell_of_three();
    let alive = CellCopies {
        alive_in: vec!["c2".to_string()],
        ..CellCopies::default()
    };
    c.agent_mut("n1").cell_copies.insert(db(), alive);
    c.run_for(60_000);
    assert!(c.starts("db", 0).is_empty());
    assert!(
        waiting(&c).contains("cell c2 reports a copy"),
        "{}",
        waiting(&c)
    );
    let claimed = CellCopies {
        claimed_by: vec!["c1".to_string()],
        ..CellCopies::default()
    };
    c.agent_mut("n1").cell_copies.insert(db(), claimed);
    c.run_for(60_000);
    assert!(c.starts("db", 0).is_empty());
    assert!(
        waiting(&c).contains("cell c1 also claims"),
        "{}",
        waiting(&c)
    );
    // Approval never lifts them: they resolve by themselves.
    assert!(c.issue("n1", IssueKind::ExclusiveUndecided).is_none());
}

#[test]
fn a_cell_without_its_quorum_of_cells_does_not_start_and_fences_what_it_runs() {
    let mut c = cell_of_three();
    c.agent_mut("n1").cell_quorum = Some(quorum(3, 1));
    c.agent_mut("n1")
        .cell_copies
        .insert(db(), CellCopies::default());
    c.run_for(60_000);
    assert!(c.starts("db", 0).is_empty(), "1 of 3 cells is no quorum");

    // Quorum back: it starts after the claim, counted from when the quorum came back.
    c.agent_mut("n1").cell_quorum = Some(quorum(3, 2));
    let back = c.now;
    c.run_for(40_000);
    let starts = c.starts("db", 0);
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert!(
        starts[0] >= back + c.config.cell_live_claim_ms,
        "{starts:?} vs {back}"
    );

    // Its cell loses the others (a partition of the cell, either way: the shell counts only
    // cells that hold it up): fenced after self_fence_ms, with the fence's short grace.
    c.agent_mut("n1").cell_quorum = Some(quorum(3, 1));
    let lost = c.now;
    c.run_for(c.config.self_fence_ms + 5_000);
    let fence = c.first_stop("n1", StopCause::Fence).expect("fenced");
    assert!(fence >= lost + c.config.self_fence_ms, "{fence} vs {lost}");
    assert!(c.alive_copies("db", 0).is_empty());
}

#[test]
fn an_incomplete_view_of_the_cells_fences_too() {
    let mut c = cell_of_three();
    c.agent_mut("n1")
        .cell_copies
        .insert(db(), CellCopies::default());
    c.run_for(40_000);
    assert_eq!(c.alive_copies("db", 0).len(), 1);
    c.agent_mut("n1").cell_quorum = Some(CellQuorum {
        incomplete: Some("cell c2 holds cell c4 up, which this agent does not know".to_string()),
        ..quorum(3, 3)
    });
    assert!(
        c.alive_copies("db", 0).len() == 1,
        "still running before self_fence_ms"
    );
    c.run_for(c.config.self_fence_ms + 5_000);
    assert!(c.alive_copies("db", 0).is_empty(), "fenced");
}
