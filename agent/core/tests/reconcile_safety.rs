//! Exclusive replicas are never run in two places (stop before start, fencing delay after a
//! death, self-fencing without a majority, held issues where the mesh cannot decide), and an agent
//! with a suspicious view never mass-stops.

mod reconcile_support;

use reconcile_support::*;
use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::{Action, ApproveError, IssueKind, Layer, ReconcileInput, StopCause};

const EXCLUSIVE: &str = "[placement]\nexclusive = true\n";

fn three_nodes_with_db() -> Cluster {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, EXCLUSIVE), "v1");
    c.put(spec("web", 3, ""), "v1");
    c.place("db", 0, "n1");
    for (r, n) in [(0, "n1"), (1, "n2"), (2, "n3")] {
        c.place("web", r, n);
    }
    c.run_for(5_000); // exclusive starts publish their claim for 3 s first
    assert_eq!(c.alive_copies("db", 0).len(), 1);
    c
}

fn never_two_db_copies(c: &Cluster) {
    let copies = c.alive_copies("db", 0);
    assert!(
        copies.len() <= 1,
        "two copies of an exclusive replica at {}: {copies:?}",
        c.now
    );
}

fn db_start_after(c: &Cluster, t: u64) -> Option<u64> {
    c.starts("db", 0).into_iter().find(|&s| s > t)
}

#[test]
fn exclusive_handoff_stops_before_it_starts() {
    let mut c = three_nodes_with_db();
    c.agent_mut("n1").rt.stop_ms = 3_000;
    c.place("db", 0, "n2");
    c.step();
    let waiting = c
        .issue("n2", IssueKind::ExclusiveWaiting)
        .expect("n2 waits");
    assert!(
        waiting.message.contains("copy on n1"),
        "{}",
        waiting.message
    );
    c.run_for_checked(10_000, never_two_db_copies);
    assert_eq!(c.alive_copies("db", 0)[0].0, "n2");
    assert_eq!(
        c.count("n1", |a| matches!(
            a,
            Action::Stop {
                cause: StopCause::ExclusiveMoved,
                ..
            }
        )),
        1
    );
}

#[test]
fn dead_owner_is_replaced_only_after_the_fencing_delay() {
    let mut c = three_nodes_with_db();
    let killed = c.now;
    c.kill_host("n1");
    c.place("db", 0, "n2");
    c.place("web", 0, "n2");
    c.run_for_checked(40_000, never_two_db_copies);
    let started = db_start_after(&c, killed).expect("replaced");
    // Noticed at the next step, confirmed dead 3 s later, then the 20 s fencing delay.
    assert_eq!(started - killed, STEP_MS + 3_000 + 20_000);
    let web = c.starts("web", 0);
    assert_eq!(
        web.last().unwrap() - killed,
        500,
        "a normal replica moves at once"
    );
}

#[test]
fn isolated_owner_fences_itself_before_the_majority_starts_a_copy() {
    let mut c = three_nodes_with_db();
    let cut = c.now;
    c.partition(&["n1"], &["n2", "n3"]);
    let mut moved = c.owners.clone();
    moved.insert(ReplicaId::new("db", 0), "n2".into());
    moved.insert(ReplicaId::new("web", 0), "n2".into());
    c.owners_of.insert("n2".into(), moved.clone());
    c.owners_of.insert("n3".into(), moved);
    c.run_for_checked(40_000, never_two_db_copies);
    let fence = c.log.iter().find(|(_, n, a)| {
        n == "n1"
            && matches!(
                a,
                Action::Stop {
                    cause: StopCause::Fence,
                    ..
                }
            )
    });
    let fenced_at = fence.expect("n1 fenced").0;
    // Counted from the last round that saw a majority.
    assert_eq!(fenced_at - cut, 10_000, "self_fence_ms");
    let started = db_start_after(&c, cut).expect("n2 took over");
    assert_eq!(started - cut, STEP_MS + 3_000 + 20_000);
    let fenced = c
        .issue("n1", IssueKind::SelfFenced)
        .expect("self-fenced issue");
    assert_eq!(fenced.layer, Layer::Safety);
    assert_eq!(
        c.alive_copies("web", 0).len(),
        2,
        "normal replicas keep running on both sides"
    );
    assert_eq!(
        c.count("n1", |a| matches!(a, Action::Start { .. })),
        2,
        "no restart while fenced"
    );
}

#[test]
fn unreachable_owner_not_confirmed_dead_is_held_for_approval() {
    let mut c = three_nodes_with_db();
    c.dead_after_ms = u64::MAX; // the detector never confirms
    let cut = c.now;
    c.partition(&["n1"], &["n2", "n3"]);
    let mut moved = c.owners.clone();
    moved.insert(ReplicaId::new("db", 0), "n2".into());
    c.owners_of.insert("n2".into(), moved.clone());
    c.owners_of.insert("n3".into(), moved);
    c.run_for_checked(29_000, never_two_db_copies);
    assert!(
        c.issue("n2", IssueKind::ExclusiveUndecided).is_none(),
        "not held before the bound"
    );
    c.run_for_checked(2_000, never_two_db_copies);
    let held = c
        .issue("n2", IssueKind::ExclusiveUndecided)
        .expect("held issue");
    assert!(
        held.held
            .as_deref()
            .unwrap()
            .contains("unreachable but not confirmed dead"),
        "{held:?}"
    );
    assert_eq!(db_start_after(&c, cut), None, "nothing started while held");
    let not_held = c
        .issue("n2", IssueKind::Missing)
        .map(|i| i.id)
        .unwrap_or_else(|| "000000000000".into());
    assert!(c.agent_mut("n2").rec.approve(&not_held).is_err());
    assert!(matches!(
        c.agent_mut("n2").rec.approve("nope"),
        Err(ApproveError::Unknown(_))
    ));
    c.agent_mut("n2").rec.approve(&held.id).expect("approve");
    c.run_for(1_000);
    assert!(db_start_after(&c, cut).is_some(), "started on approval");
    let issue = c.issue("n2", IssueKind::ExclusiveUndecided);
    assert!(issue.is_none_or(|i| i.approved && i.held.is_none()));
}

#[test]
fn minority_agent_holds_exclusive_start_and_approval_keeps_it_running() {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.kill_host("n2");
    c.kill_host("n3");
    c.put(spec("db", 1, EXCLUSIVE), "v1");
    c.place("db", 0, "n1");
    c.run_for(29_500);
    assert!(c.starts("db", 0).is_empty());
    assert!(c.issue("n1", IssueKind::ExclusiveWaiting).is_some());
    c.run_for(1_000);
    let held = c.issue("n1", IssueKind::ExclusiveUndecided).expect("held");
    assert!(
        held.held.as_deref().unwrap().contains("no strict majority"),
        "{held:?}"
    );
    c.agent_mut("n1").rec.approve(&held.id).unwrap();
    c.run_for(60_000);
    assert_eq!(c.starts("db", 0).len(), 1);
    assert_eq!(
        c.count("n1", |a| matches!(a, Action::Stop { .. })),
        0,
        "approval overrides fencing"
    );
    assert!(
        c.issue("n1", IssueKind::ExclusiveUndecided)
            .unwrap()
            .approved
    );
}

fn five_workloads_on_n1(extra: &str) -> Cluster {
    let mut c = Cluster::new(&["n1", "n2"]);
    for w in ["a", "b", "c", "d", "e"] {
        c.put(spec(w, 1, extra), "v1");
        c.place(w, 0, "n1");
    }
    c.run_for(5_000);
    c
}

#[test]
fn empty_view_never_mass_stops_until_approved() {
    let mut c = five_workloads_on_n1("");
    c.specs.clear();
    c.owners.clear();
    c.run_for(30_000);
    assert_eq!(c.count("n1", |a| matches!(a, Action::Stop { .. })), 0);
    let held = c.issue("n1", IssueKind::SuspiciousView).expect("held");
    assert!(
        held.held
            .as_deref()
            .unwrap()
            .contains("no workload specs at all"),
        "{held:?}"
    );
    c.agent_mut("n1").rec.approve(&held.id).unwrap();
    c.run_for(3_000);
    assert_eq!(
        c.count("n1", |a| matches!(
            a,
            Action::Stop {
                cause: StopCause::Deleted,
                ..
            }
        )),
        5
    );
    assert!(c.issue("n1", IssueKind::SuspiciousView).is_none());
}

#[test]
fn placement_moving_everything_away_is_held_unless_draining() {
    let mut c = five_workloads_on_n1(EXCLUSIVE);
    for w in ["a", "b", "c", "d", "e"] {
        c.place(w, 0, "n2");
    }
    c.run_for(10_000);
    assert_eq!(c.count("n1", |a| matches!(a, Action::Stop { .. })), 0);
    assert_eq!(
        c.count("n2", |a| matches!(a, Action::Start { .. })),
        0,
        "n2 waits for n1's copies"
    );
    assert!(c.issue("n1", IssueKind::SuspiciousView).is_some());
    c.agent_mut("n1").draining = true;
    c.run_for(5_000);
    assert_eq!(
        c.count("n1", |a| matches!(
            a,
            Action::Stop {
                cause: StopCause::ExclusiveMoved,
                ..
            }
        )),
        5
    );
    assert_eq!(c.count("n2", |a| matches!(a, Action::Start { .. })), 5);
}

#[test]
fn minority_view_holds_deletions_and_shell_suspicion_holds_them_too() {
    let mut c = five_workloads_on_n1("");
    c.kill_host("n2");
    c.run_for(5_000);
    c.specs.remove("a");
    c.owners.remove(&ReplicaId::new("a", 0));
    c.run_for(5_000);
    assert_eq!(c.count("n1", |a| matches!(a, Action::Stop { .. })), 0);
    let held = c.issue("n1", IssueKind::SuspiciousView).expect("held");
    assert!(
        held.message.contains("no strict majority"),
        "{}",
        held.message
    );

    let mut c = five_workloads_on_n1("");
    c.agent_mut("n1").view_suspect = Some("store resyncing".into());
    c.specs.remove("a");
    c.owners.remove(&ReplicaId::new("a", 0));
    c.run_for(5_000);
    assert_eq!(c.count("n1", |a| matches!(a, Action::Stop { .. })), 0);
    c.agent_mut("n1").view_suspect = None;
    c.run_for(1_000);
    assert_eq!(
        c.count("n1", |a| matches!(
            a,
            Action::Stop {
                cause: StopCause::Deleted,
                ..
            }
        )),
        1
    );
}

#[test]
fn unavailable_runtime_freezes_local_action_with_an_issue() {
    let mut c = five_workloads_on_n1("");
    let mut input: ReconcileInput = c.input_of("n1");
    input.instances.clear();
    input.runtime_unavailable = Some("docker engine unreachable".into());
    let now = c.now + 500;
    let agent = c.agent_mut("n1");
    assert!(agent.rec.handle_tick(&input, now).is_empty());
    let issues = agent.rec.issues();
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].kind, IssueKind::RuntimeUnavailable);
    assert!(issues[0].message.contains("docker engine unreachable"));
    assert_eq!(agent.rec.observed().len(), 5, "what it knew is kept");
}

#[test]
fn two_nodes_claiming_one_exclusive_replica_start_it_once() {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.put(spec("db", 1, EXCLUSIVE), "v1");
    c.place("db", 0, "n1");
    let mut stale = c.owners.clone();
    stale.insert(ReplicaId::new("db", 0), "n2".into());
    c.owners_of.insert("n2".into(), stale); // n2's placement view differs for a while
    c.run_for_checked(10_000, never_two_db_copies);
    assert_eq!(
        c.alive_copies("db", 0)[0].0,
        "n1",
        "the lower node name goes first"
    );
    let waiting = c
        .issue("n2", IssueKind::ExclusiveWaiting)
        .expect("n2 waits");
    assert!(
        waiting.message.contains("copy on n1"),
        "{}",
        waiting.message
    );
    c.owners_of.clear();
    c.run_for_checked(10_000, never_two_db_copies);
    assert_eq!(c.starts("db", 0).len(), 1);
}

/// Moves `db/0` (and `web/0`) to n2 in the views of n2 and n3, as their placement does once
/// they hold n1 dead.
fn others_move_db_to_n2(c: &mut Cluster) {
    let mut moved = c.owners.clone();
    moved.insert(ReplicaId::new("db", 0), "n2".into());
    moved.insert(ReplicaId::new("web", 0), "n2".into());
    c.owners_of.insert("n2".into(), moved.clone());
    c.owners_of.insert("n3".into(), moved);
}

#[test]
fn owner_that_cannot_send_fences_itself_before_the_others_start_a_copy() {
    // n1's packets are lost, the others' reach it: n1 sees a majority the whole time, the
    // others hold it dead. Seeing is not enough: nobody confirms hearing n1, so it fences.
    let mut c = three_nodes_with_db();
    let cut = c.now;
    c.one_way("n1", &["n2", "n3"]);
    others_move_db_to_n2(&mut c);
    c.run_for_checked(40_000, never_two_db_copies);
    let fenced_at = c
        .first_stop("n1", StopCause::Fence)
        .expect("n1 fenced although it sees a majority");
    let config = shoal_core::reconcile::ReconcileConfig::default();
    // The last confirmation is at most one step before the cut; it counts for the window.
    assert!(
        fenced_at - cut <= config.heard_window_ms + config.self_fence_ms,
        "fenced {} ms after the cut",
        fenced_at - cut
    );
    let started = db_start_after(&c, cut).expect("n2 took over");
    assert!(
        started > fenced_at + config.fence_stop_grace_ms,
        "the copy started at {started}, the fenced one stopped by {}",
        fenced_at + config.fence_stop_grace_ms
    );
}

#[test]
fn owner_heard_again_counts_its_claim_from_then_not_from_when_nobody_heard_it() {
    // n1 cannot send; n2 and n3 hold it dead and move db to n2, which starts it once the fencing
    // delay has passed. The links come back one peer at a time, as gossip revives a node on one
    // peer a moment before another: n3 hears n1 again one step before n2's fencing delay ends,
    // n2 a step after. n1's claim was published all through the cut but reached nobody; counted
    // from then, n1 would start as soon as n3 confirms hearing it, in the step n2 starts: two
    // copies. Counted from when n1 was heard again, n1 waits, sees n2's copy and waits for it.
    let mut c = three_nodes_with_db();
    let cut = c.now;
    c.one_way("n1", &["n2", "n3"]);
    others_move_db_to_n2(&mut c);
    let n2_starts = cut + STEP_MS + 3_000 + 20_000; // noticed, confirmed dead, fencing delay
    c.run_for_checked(n2_starts - STEP_MS - c.now, never_two_db_copies);
    assert!(c.alive_copies("db", 0).is_empty(), "n1 fenced itself");
    c.cut.remove(&("n1".to_string(), "n3".to_string()));
    c.run_for_checked(STEP_MS, never_two_db_copies);
    assert_eq!(db_start_after(&c, cut), Some(n2_starts), "n2 took over");
    c.heal();
    c.owners_of.clear(); // n1 is live everywhere again: db is placed back on n1
    c.run_for_checked(20_000, never_two_db_copies);
    let copies = c.alive_copies("db", 0);
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(copies[0].0, "n1", "back on its owner");
}

#[test]
fn a_member_back_from_the_dead_gets_the_whole_fencing_delay_when_it_goes_silent_again() {
    // Found by the simulator (swarm seed 199, scenarios/regress/restart-then-one-way-exclusive.toml):
    // n1, the owner, dies and its agent comes back (a new gossip identity; the failure detector
    // keeps the earlier one dead for an hour, so its name stays in the dead set beside the live
    // one). Long after, n1's packets are lost. Its death must be counted from then: dated from
    // the first death, the fencing delay had passed long ago, and n2 started db one claim delay
    // after the cut, while n1 still ran its copy until it fenced itself.
    let mut c = three_nodes_with_db();
    c.kill_host("n1");
    others_move_db_to_n2(&mut c);
    c.run_for_checked(5_000, never_two_db_copies); // confirmed dead, within the fencing delay
    c.restart_agent("n1");
    c.earlier_identity_dead.insert("n1".to_string());
    c.owners_of.clear(); // n1 is live again: db goes back to it
    c.run_for_checked(40_000, never_two_db_copies);
    let copies = c.alive_copies("db", 0);
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(copies[0].0, "n1", "back on its owner");
    let cut = c.now;
    c.one_way("n1", &["n2", "n3"]);
    others_move_db_to_n2(&mut c);
    c.run_for_checked(40_000, never_two_db_copies);
    let fenced_at = c.first_stop("n1", StopCause::Fence).expect("n1 fenced");
    let started = db_start_after(&c, cut).expect("n2 took over");
    // The name was in the dead set already: dead from the step that noticed, then the whole
    // fencing delay.
    assert_eq!(started - cut, STEP_MS + 20_000, "the whole fencing delay");
    let config = shoal_core::reconcile::ReconcileConfig::default();
    assert!(started > fenced_at + config.fence_stop_grace_ms);
}

#[test]
fn owner_that_cannot_receive_fences_itself_and_nobody_starts_a_copy() {
    // The other direction: the others hear n1 (it stays live for them, so the replica stays
    // placed on n1), n1 hears nobody: it sees no majority and fences.
    let mut c = three_nodes_with_db();
    c.one_way("n2", &["n1"]);
    c.one_way("n3", &["n1"]);
    c.run_for_checked(40_000, never_two_db_copies);
    assert!(c.issue("n1", IssueKind::SelfFenced).is_some(), "n1 fenced");
    assert!(c.alive_copies("db", 0).is_empty());
    c.heal();
    c.run_for_checked(20_000, never_two_db_copies);
    assert_eq!(c.alive_copies("db", 0).len(), 1, "back once healed");
}

#[test]
fn without_a_guard_exclusive_replicas_do_not_start_and_say_why() {
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.agent_mut("n1").guard_unavailable = Some("the guard process exited".into());
    c.put(spec("db", 1, EXCLUSIVE), "v1");
    c.put(spec("web", 1, ""), "v1");
    c.place("db", 0, "n1");
    c.place("web", 0, "n1");
    c.run_for(10_000);
    assert!(
        c.starts("db", 0).is_empty(),
        "no exclusive start without a guard"
    );
    assert_eq!(
        c.starts("web", 0).len(),
        1,
        "normal replicas are not affected"
    );
    let issue = c
        .issue("n1", IssueKind::Unsupported)
        .expect("an issue says why");
    assert_eq!(issue.replica, Some(ReplicaId::new("db", 0)));
    assert_eq!(issue.layer, Layer::Runtime);
    assert!(
        issue.message.contains("the guard process exited"),
        "{}",
        issue.message
    );

    // Once the guard is back, the replica starts (after its claim delay).
    c.agent_mut("n1").guard_unavailable = None;
    c.run_for(5_000);
    assert_eq!(c.starts("db", 0).len(), 1);
    assert!(c.issue("n1", IssueKind::Unsupported).is_none());
}

#[test]
fn a_disputed_name_holds_starts_the_later_claimant_all_the_incumbent_exclusive_ones() {
    use shoal_core::claims::SelfHold;
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    c.agent_mut("n1").name_hold = SelfHold::All("another agent with this node's name".into());
    c.agent_mut("n2").name_hold = SelfHold::Exclusive("two live agents claim n2".into());
    c.put(spec("db", 2, EXCLUSIVE), "v1");
    c.put(spec("web", 2, ""), "v1");
    c.place("db", 0, "n1");
    c.place("web", 0, "n1");
    c.place("db", 1, "n2");
    c.place("web", 1, "n2");
    c.run_for(10_000);
    assert!(
        c.starts("db", 0).is_empty() && c.starts("web", 0).is_empty(),
        "the later claimant starts nothing"
    );
    assert!(
        c.starts("db", 1).is_empty(),
        "no exclusive start on a disputed name"
    );
    assert_eq!(
        c.starts("web", 1).len(),
        1,
        "the incumbent runs its normal replicas"
    );
    let issue = c
        .issue("n1", IssueKind::Missing)
        .expect("an issue says why");
    assert!(
        issue
            .message
            .contains("another agent with this node's name"),
        "{}",
        issue.message
    );

    // The dispute over, both start what they hold.
    c.agent_mut("n1").name_hold = SelfHold::None;
    c.agent_mut("n2").name_hold = SelfHold::None;
    c.run_for(10_000);
    assert_eq!(c.starts("web", 0).len(), 1);
    assert_eq!(c.starts("db", 0).len(), 1);
    assert_eq!(c.starts("db", 1).len(), 1);
}

#[test]
fn an_agent_restarted_alone_in_a_minority_does_not_count_itself_a_majority() {
    // Found by the simulator (scenarios/regress/restart-in-minority.toml): n3 is cut off, its
    // agent restarts and, its seeds unreachable, hears only itself; its placement puts db/0 on
    // it while n1 runs it on the majority side.
    let mut c = three_nodes_with_db();
    let cut = c.now;
    c.partition(&["n3"], &["n1", "n2"]);
    c.run_for(2_000);
    c.restart_agent("n3");
    c.knows_only_itself.insert("n3".into());
    let mut alone = c.owners.clone();
    alone.insert(ReplicaId::new("db", 0), "n3".into());
    c.owners_of.insert("n3".into(), alone);
    c.run_for_checked(60_000, never_two_db_copies);
    assert_eq!(db_start_after(&c, cut), None, "n3 started db/0 alone");
    let waiting = c
        .issue("n3", IssueKind::ExclusiveUndecided)
        .expect("n3 says why it waits");
    assert!(waiting.message.contains("1 of 3"), "{}", waiting.message);
    // The partition heals: n3 learns the mesh again and its placement agrees with the others'.
    c.heal();
    c.knows_only_itself.clear();
    c.owners_of.clear();
    c.run_for_checked(10_000, never_two_db_copies);
    assert_eq!(c.alive_copies("db", 0)[0].0, "n1");
    assert_eq!(c.agent("n3").rec.members_known_at_majority(), Some(3));
}

#[test]
fn deleting_or_scaling_away_most_of_a_node_is_not_a_suspicious_move() {
    // scenarios/regress/delete-mass-stop.toml: five workloads of six running on n1 deleted.
    let mut c = five_workloads_on_n1("");
    c.put(spec("keep", 1, ""), "v1");
    c.place("keep", 0, "n1");
    c.run_for(2_000);
    for w in ["a", "b", "c", "d", "e"] {
        c.specs.remove(w);
        c.owners.remove(&ReplicaId::new(w, 0));
    }
    c.run_for(2_000);
    let deleted = |a: &Action| {
        matches!(
            a,
            Action::Stop {
                cause: StopCause::Deleted,
                ..
            }
        )
    };
    assert_eq!(c.count("n1", deleted), 5);
    assert!(c.issue("n1", IssueKind::SuspiciousView).is_none());

    // scale-down-mass-stop.toml: five replicas on n1 scaled to one.
    let mut c = Cluster::new(&["n1", "n2"]);
    c.put(spec("w", 5, ""), "v1");
    for r in 0..5 {
        c.place("w", r, "n1");
    }
    c.run_for(5_000);
    c.put(spec("w", 1, ""), "v2");
    for r in 1..5 {
        c.owners.remove(&ReplicaId::new("w", r));
    }
    c.run_for(2_000);
    let scaled = |a: &Action| {
        matches!(
            a,
            Action::Stop {
                cause: StopCause::ScaledDown,
                ..
            }
        )
    };
    assert_eq!(c.count("n1", scaled), 4);
    assert_eq!(c.alive_copies("w", 0).len(), 1);
}

#[test]
fn exclusive_replicas_taken_over_go_back_when_their_owner_returns() {
    // scenarios/regress/swarm-998-exclusive-handback.toml: n2 took three exclusive replicas
    // while n1 was away; when n1 is back and claims them, n2 hands them back instead of
    // holding the stops as a mass stop.
    let mut c = Cluster::new(&["n1", "n2", "n3"]);
    for w in ["a", "b", "c"] {
        c.put(spec(w, 1, EXCLUSIVE), "v1");
        c.place(w, 0, "n1");
    }
    c.run_for(5_000);
    c.kill_host("n1");
    for w in ["a", "b", "c"] {
        c.place(w, 0, "n2");
    }
    c.run_for(30_000);
    for w in ["a", "b", "c"] {
        assert_eq!(c.alive_copies(w, 0)[0].0, "n2", "{w} taken over");
    }
    c.restart_agent("n1");
    for w in ["a", "b", "c"] {
        c.place(w, 0, "n1");
    }
    c.run_for_checked(20_000, |c| {
        for w in ["a", "b", "c"] {
            assert!(c.alive_copies(w, 0).len() <= 1, "two copies of {w}");
        }
    });
    for w in ["a", "b", "c"] {
        let copies = c.alive_copies(w, 0);
        assert_eq!(copies.len(), 1, "{w}: {copies:?}");
        assert_eq!(copies[0].0, "n1", "{w} handed back");
    }
    assert!(c.issue("n2", IssueKind::SuspiciousView).is_none());
}

#[test]
fn deleting_the_last_workloads_stops_their_instances_without_approval() {
    let mut c = five_workloads_on_n1("");
    // Every workload deleted on purpose: the store holds their tombstones.
    c.deleted = c.specs.keys().cloned().collect();
    c.specs.clear();
    c.owners.clear();
    c.run_for(3_000);
    assert!(c.issue("n1", IssueKind::SuspiciousView).is_none());
    assert_eq!(
        c.count("n1", |a| matches!(
            a,
            Action::Stop {
                cause: StopCause::Deleted,
                ..
            }
        )),
        5
    );
}

#[test]
fn an_empty_view_with_one_instance_of_a_workload_never_deleted_is_still_held() {
    let mut c = five_workloads_on_n1("");
    // Four tombstones, and one workload whose spec vanished without one (a lost store).
    c.deleted = ["a", "b", "c", "d"].into_iter().map(String::from).collect();
    c.specs.clear();
    c.owners.clear();
    c.run_for(30_000);
    assert_eq!(c.count("n1", |a| matches!(a, Action::Stop { .. })), 0);
    let held = c.issue("n1", IssueKind::SuspiciousView).expect("held");
    assert!(
        held.held
            .as_deref()
            .unwrap()
            .contains("1 instances of workloads never deleted"),
        "{held:?}"
    );
}
