//! Sticky stateful replicas: an exclusive replica whose data another node holds does not start
//! empty on its own. It waits under a held `data-elsewhere` issue until the holder takes it back,
//! an operator approves, or `on_data_loss = "start-empty"` and `sticky_for` have let it.

mod reconcile_support;

use reconcile_support::*;
use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::{IssueKind, Layer};

const WITH_DATA: &str = "[[volumes]]\nname = \"data\"\n\n[placement]\nexclusive = true\n";

/// db/0 runs on n1, which holds its data; then n1's host dies and placement gives db/0 to n2.
fn holder_dies(extra: &str) -> (Cluster, u64) {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, &format!("{WITH_DATA}{extra}")), "v1");
    c.place("db", 0, "n1");
    c.run_for(5_000);
    assert_eq!(c.alive_copies("db", 0).len(), 1, "db/0 runs on n1");
    c.data_holders.insert(ReplicaId::new("db", 0), "n1".into());
    let died = c.now;
    c.kill_host("n1");
    c.place("db", 0, "n2");
    (c, died)
}

/// db/0 runs on n1, which holds its data; then n1 is drained and placement gives db/0 to n2.
fn holder_drained() -> Cluster {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, WITH_DATA), "v1");
    c.place("db", 0, "n1");
    c.run_for(5_000);
    c.data_holders.insert(ReplicaId::new("db", 0), "n1".into());
    c.agent_mut("n1").draining = true;
    c.place("db", 0, "n2");
    c
}

fn started_on(c: &Cluster, node: &str, after: u64) -> bool {
    c.log.iter().any(|(t, n, a)| {
        *t > after && n == node && matches!(a, shoal_core::reconcile::Action::Start { .. })
    })
}

#[test]
fn replica_waits_for_its_data_under_a_held_issue_and_approval_starts_it_empty() {
    let (mut c, died) = holder_dies("");
    c.run_for(10 * 60_000);
    assert!(
        !started_on(&c, "n2", died),
        "never started empty on its own"
    );
    let held = c.issue("n2", IssueKind::DataElsewhere).expect("held issue");
    assert_eq!(held.layer, Layer::Safety);
    assert_eq!(held.replica, Some(ReplicaId::new("db", 0)));
    let why = held.held.as_deref().expect("held for an operator");
    assert_eq!(why, "db/0's data is on n1, which is down");
    assert!(
        held.message.contains("approve to start it empty on n2 now")
            && held.message.contains("on_data_loss = \"wait\""),
        "{}",
        held.message
    );
    c.agent_mut("n2").rec.approve(&held.id).expect("approve");
    c.run_for(5_000);
    assert!(started_on(&c, "n2", died), "started on approval");
    assert_eq!(c.alive_copies("db", 0).len(), 1);
    assert!(
        c.issue("n2", IssueKind::DataElsewhere).is_none(),
        "resolved"
    );
}

#[test]
fn an_approved_replica_that_crashes_restarts_without_asking_again() {
    let (mut c, died) = holder_dies("");
    c.run_for(5_000);
    let held = c.issue("n2", IssueKind::DataElsewhere).expect("held");
    c.agent_mut("n2").rec.approve(&held.id).unwrap();
    c.run_for(30_000);
    assert_eq!(c.starts("db", 0).iter().filter(|&&t| t > died).count(), 1);
    // The record still names n1 (the shell had not rewritten it yet).
    c.crash("n2", "db", 0, 1);
    c.run_for(30_000);
    assert_eq!(c.starts("db", 0).iter().filter(|&&t| t > died).count(), 2);
    assert!(c.issue("n2", IssueKind::DataElsewhere).is_none());
}

#[test]
fn start_empty_policy_starts_it_once_sticky_for_has_passed() {
    let (mut c, died) = holder_dies("sticky_for = \"1m\"\non_data_loss = \"start-empty\"\n");
    c.run_for(55_000);
    assert!(!started_on(&c, "n2", died), "not before sticky_for");
    let waiting = c.issue("n2", IssueKind::DataElsewhere).expect("held");
    assert!(
        waiting.message.contains("it starts empty here at"),
        "{}",
        waiting.message
    );
    c.run_for(10_000);
    let first = c
        .starts("db", 0)
        .into_iter()
        .find(|&t| t > died)
        .expect("started");
    assert!(
        first >= died + 60_000,
        "not before sticky_for: {}",
        first - died
    );
    assert!(
        first <= died + 60_000 + 2 * STEP_MS,
        "at once after it: {}",
        first - died
    );
}

#[test]
fn replica_goes_home_when_its_holder_comes_back_and_never_ran_elsewhere() {
    let (mut c, died) = holder_dies("");
    c.run_for(60_000);
    c.restart_agent("n1");
    c.place("db", 0, "n1");
    c.run_for(10_000);
    assert!(!started_on(&c, "n2", died));
    assert!(started_on(&c, "n1", died), "the holder runs it again");
    assert!(c.issue("n2", IssueKind::DataElsewhere).is_none());
}

#[test]
fn holder_up_but_not_chosen_is_named_as_such() {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, WITH_DATA), "v1");
    c.data_holders.insert(ReplicaId::new("db", 0), "n3".into());
    c.place("db", 0, "n2");
    c.run_for(10_000);
    assert!(c.starts("db", 0).is_empty());
    let held = c.issue("n2", IssueKind::DataElsewhere).expect("held");
    assert!(held
        .held
        .unwrap()
        .contains("n3, which is up but cannot take it"));
}

#[test]
fn no_hold_without_a_holder_elsewhere_nor_for_replicas_that_are_not_sticky() {
    // No record: a new replica starts where placement puts it.
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, WITH_DATA), "v1");
    c.place("db", 0, "n2");
    c.run_for(5_000);
    assert_eq!(c.starts("db", 0).len(), 1);

    // The record names this node.
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, WITH_DATA), "v1");
    c.data_holders.insert(ReplicaId::new("db", 0), "n2".into());
    c.place("db", 0, "n2");
    c.run_for(5_000);
    assert_eq!(c.starts("db", 0).len(), 1);

    // Not exclusive, or exclusive without data of its own: the record does not hold them.
    for extra in [
        "[[volumes]]\nname = \"data\"\n",
        "[placement]\nexclusive = true\n",
    ] {
        let mut c = Cluster::new(&["n1", "n2", "n3"]);
        c.put(spec("db", 1, extra), "v1");
        c.data_holders.insert(ReplicaId::new("db", 0), "n3".into());
        c.place("db", 0, "n2");
        c.run_for(5_000);
        assert_eq!(c.starts("db", 0).len(), 1, "{extra}");
        assert!(c.issue("n2", IssueKind::DataElsewhere).is_none());
    }
}

#[test]
fn a_holder_drained_keeps_running_its_copy_while_the_new_owner_waits() {
    let mut c = holder_drained();
    let moved = c.now;
    c.run_for(60_000);
    let copies = c.alive_copies("db", 0);
    assert!(!started_on(&c, "n2", moved), "n2 waits for the data");
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(
        copies[0].0, "n1",
        "the drained holder keeps serving: {copies:?}"
    );
}

#[test]
fn approving_the_new_owner_stops_the_drained_holders_copy_then_starts_it_there() {
    let mut c = holder_drained();
    c.run_for(10_000);
    let held = c.issue("n2", IssueKind::DataElsewhere).expect("held");
    assert!(held.held.unwrap().contains("is up but cannot take it"));
    let orphan = c
        .issue("n1", IssueKind::Orphan)
        .expect("the holder says why it keeps it");
    assert!(
        orphan.message.contains("waits for this replica's data"),
        "{}",
        orphan.message
    );
    c.agent_mut("n2").rec.approve(&held.id).unwrap();
    let approved = c.now;
    c.run_for_checked(30_000, |c| {
        assert!(c.alive_copies("db", 0).len() <= 1, "never two copies");
    });
    let copies = c.alive_copies("db", 0);
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].0, "n2", "moved on approval: {copies:?}");
    assert!(c.first_stop("n1", shoal_core::reconcile::StopCause::ExclusiveMoved) > Some(approved));
}

#[test]
fn a_holder_that_lost_its_data_waits_like_any_other_node() {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, WITH_DATA), "v1");
    c.data_holders.insert(ReplicaId::new("db", 0), "n1".into());
    let gone = "its volume \"data\" (/d/volumes/db/0/data) is missing here".to_string();
    c.data_missing.insert(
        "n1".into(),
        [(ReplicaId::new("db", 0), gone)].into_iter().collect(),
    );
    c.place("db", 0, "n1");
    c.run_for(10_000);
    assert!(
        c.starts("db", 0).is_empty(),
        "not started over an empty volume"
    );
    let held = c.issue("n1", IssueKind::DataElsewhere).expect("held");
    assert_eq!(
        held.held.as_deref(),
        Some("db/0's data was on this node, but its volume \"data\" (/d/volumes/db/0/data) is missing here")
    );
    c.agent_mut("n1").rec.approve(&held.id).unwrap();
    c.run_for(5_000);
    assert_eq!(c.starts("db", 0).len(), 1, "started empty on approval");
}

#[test]
fn a_start_that_failed_before_its_volume_existed_is_not_missing_data() {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, WITH_DATA), "v1");
    c.place("db", 0, "n1");
    c.run_for(5_000);
    assert_eq!(c.starts("db", 0).len(), 1);
    // The record names n1 and the volume is missing (the start failed before creating it):
    // this agent started it here itself, so it retries without asking.
    c.data_holders.insert(ReplicaId::new("db", 0), "n1".into());
    c.data_missing.insert(
        "n1".into(),
        [(ReplicaId::new("db", 0), "gone".to_string())]
            .into_iter()
            .collect(),
    );
    c.crash("n1", "db", 0, 1);
    c.run_for(30_000);
    assert!(c.starts("db", 0).len() >= 2, "restarted");
    assert!(c.issue("n1", IssueKind::DataElsewhere).is_none());
}
