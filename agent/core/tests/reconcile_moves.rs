//! Replicas changing: rolling updates within the mesh-wide budget, live settings through the
//! reload hook, normal handoff without a gap, deletion and scale-down, the handoff bound.

mod reconcile_support;

use reconcile_support::*;
use shoal_core::instance::Phase;
use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::{Action, CellHandoff, IssueKind, StopCause};

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

fn four_nodes(extra: &str) -> Cluster {
    let mut c = Cluster::new(&NODES);
    c.put(spec("web", 4, extra), "v1");
    for (r, n) in NODES.iter().enumerate() {
        c.place("web", r as u32, n);
    }
    c.run_for(3_000);
    assert_eq!(c.serving("web"), 4);
    c
}

/// Copies starting or running (not being stopped) across the cluster.
fn up_copies(c: &Cluster) -> usize {
    let phases = [Phase::Starting, Phase::Running];
    let observed = c.agents.values().flat_map(|a| a.rec.observed());
    observed
        .filter(|s| s.handle.is_some() && phases.contains(&s.phase))
        .count()
}

fn versions(c: &Cluster) -> Vec<String> {
    (0..4)
        .flat_map(|r| c.alive_copies("web", r))
        .map(|(_, _, v)| v)
        .collect()
}

#[test]
fn update_replaces_one_at_a_time_within_max_unavailable() {
    let health = "[health]\ninterval = \"1s\"\nstart_grace = \"0s\"\n\n[health.tcp]\nport = 80\n";
    let mut c = four_nodes(health);
    c.put(
        spec("web", 4, &format!("{health}[process.env]\nV = \"2\"\n")),
        "v2",
    );
    let mut min_serving = 4;
    c.run_for_checked(30_000, |c| min_serving = min_serving.min(c.serving("web")));
    assert_eq!(min_serving, 3, "never more than max_unavailable = 1 down");
    assert_eq!(versions(&c), ["v2"; 4]);
    let update_stops = c.log.iter().filter(|(_, _, a)| {
        matches!(
            a,
            Action::Stop {
                cause: StopCause::Update,
                ..
            }
        )
    });
    assert_eq!(update_stops.count(), 4);
    assert!(c.agents.keys().all(|n| c.agent(n).rec.issues().is_empty()));
}

/// A new version whose copies run for a moment and exit (no health check: a running copy is
/// healthy at once). Every agent reads a copy serving in the round it runs; if the rollout
/// counted it as updated then, a second replica would go down before the first one's exit was
/// seen (CI stop 50, `rollout_auto`). A copy counts only once it has served for
/// `update_settle_ms`, so the rollout stalls at one replica down.
#[test]
fn a_copy_that_serves_for_a_moment_does_not_let_the_update_take_a_second_replica_down() {
    let mut c = four_nodes("");
    c.put(spec("web", 4, "[process.env]\nV = \"2\"\n"), "v2");
    let mut min_serving = 4;
    let mut crashed = 0;
    let end = c.now + 30_000;
    while c.now < end {
        c.step();
        min_serving = min_serving.min(c.serving("web"));
        let now = c.now;
        for node in NODES {
            let rt = &mut c.agent_mut(node).rt;
            let running: Vec<String> = rt
                .instances
                .values()
                .filter(|i| i.spec_version == "v2" && i.phase == Phase::Running)
                .map(|i| i.handle.clone())
                .collect();
            for handle in running {
                rt.crash(&handle, 3, now);
                crashed += 1;
            }
        }
    }
    assert!(
        crashed >= 2,
        "the new version ran and exited {crashed} times"
    );
    assert_eq!(min_serving, 3, "never more than max_unavailable = 1 down");
    let v1 = versions(&c).iter().filter(|v| *v == "v1").count();
    assert_eq!(
        v1,
        3,
        "three replicas keep the old version: {:?}",
        versions(&c)
    );
}

#[test]
fn update_with_surge_never_loses_a_replica() {
    let extra = "[update]\nmax_unavailable = 0\nmax_surge = 1\n";
    let mut c = four_nodes(extra);
    c.put(
        spec("web", 4, &format!("{extra}[process.env]\nV = \"2\"\n")),
        "v2",
    );
    let mut min_serving = 4;
    let mut max_alive = 0;
    c.run_for_checked(30_000, |c| {
        min_serving = min_serving.min(c.serving("web"));
        max_alive = max_alive.max(up_copies(c));
    });
    assert_eq!(min_serving, 4, "max_unavailable = 0");
    assert_eq!(max_alive, 5, "max_surge = 1");
    assert_eq!(versions(&c), ["v2"; 4]);
}

#[test]
fn a_paused_rollout_keeps_old_instances_until_it_resumes() {
    let mut c = four_nodes("");
    c.put(spec("web", 4, "[process.env]\nV = \"2\"\n"), "v2");
    c.pause("web", true);
    c.run_for(20_000);
    assert_eq!(
        versions(&c),
        ["v1"; 4],
        "a paused rollout replaced an instance"
    );
    assert_eq!(c.serving("web"), 4);
    let held = c.agent("n1").rec.issues();
    assert!(
        held.iter()
            .any(|i| i.kind == IssueKind::Outdated && i.message.contains("paused")),
        "{held:?}"
    );
    c.pause("web", false);
    c.run_for(30_000);
    assert_eq!(
        versions(&c),
        ["v2"; 4],
        "the resumed rollout did not finish"
    );
}

#[test]
fn failing_new_version_stalls_the_rollout() {
    let mut c = four_nodes("");
    c.put(spec("web", 4, "[process.env]\nV = \"2\"\n"), "v2");
    for n in NODES {
        c.agent_mut(n).rt.failing.insert("web".to_string());
    }
    c.run_for(60_000);
    let old = versions(&c).iter().filter(|v| *v == "v1").count();
    assert_eq!(
        old, 3,
        "only one replica was taken down for the broken version"
    );
    assert_eq!(c.serving("web"), 3);
}

#[test]
fn live_settings_change_runs_the_reload_hook_without_restart() {
    let reload = "[reload]\nsignal = \"HUP\"\n";
    let mut c = four_nodes(&format!("[settings]\nlevel = \"info\"\n{reload}"));
    c.put(
        spec(
            "web",
            4,
            &format!("[settings]\nlevel = \"debug\"\n{reload}"),
        ),
        "v2",
    );
    c.run_for(3_000);
    assert_eq!(
        c.log
            .iter()
            .filter(|(_, _, a)| matches!(a, Action::Reload { .. }))
            .count(),
        4
    );
    assert_eq!(
        c.log
            .iter()
            .filter(|(_, _, a)| matches!(a, Action::Stop { .. }))
            .count(),
        0
    );
    let observed = c.agent("n1").rec.observed();
    assert_eq!(observed[0].spec_version, "v2", "reloaded instance runs v2");
}

#[test]
fn failing_reload_falls_back_to_replacement() {
    let reload = "[reload]\nsignal = \"HUP\"\n";
    let mut c = four_nodes(&format!("[settings]\nlevel = \"info\"\n{reload}"));
    for n in NODES {
        c.agent_mut(n).rt.reload_fails = true;
    }
    c.put(
        spec(
            "web",
            4,
            &format!("[settings]\nlevel = \"debug\"\n{reload}"),
        ),
        "v2",
    );
    c.step();
    assert!(c.issue("n1", IssueKind::SettingsDiffer).is_some());
    c.run_for(90_000);
    assert_eq!(
        c.count("n1", |a| matches!(a, Action::Reload { .. })),
        3,
        "reload_attempts_max"
    );
    assert_eq!(versions(&c), ["v2"; 4], "replaced after the reloads failed");
}

#[test]
fn normal_handoff_has_no_gap() {
    let mut c = four_nodes("");
    // Drain n1: its replica moves to a fifth node.
    c.agents.insert(
        "n5".into(),
        Cluster::new(&["n5"]).agents.remove("n5").unwrap(),
    );
    c.agent_mut("n5").rt.start_ms = 4_000; // a slow starter: the old copy must wait for it
    c.agent_mut("n1").draining = true;
    c.place("web", 0, "n5");
    let mut min_serving = 4;
    c.run_for_checked(10_000, |c| min_serving = min_serving.min(c.serving("web")));
    assert_eq!(min_serving, 4, "no gap");
    assert!(c.alive_copies("web", 0).iter().all(|(n, _, _)| n == "n5"));
    let stop = c
        .log
        .iter()
        .find(|(_, n, a)| n == "n1" && matches!(a, Action::Stop { .. }))
        .unwrap();
    assert!(matches!(
        stop.2,
        Action::Stop {
            cause: StopCause::Handoff,
            ..
        }
    ));
    assert!(
        stop.0 >= c.starts("web", 0)[1] + 4_000,
        "old copy stopped after the new one was healthy"
    );
}

#[test]
fn a_healthy_orphan_keeps_running_past_the_handoff_bound_while_the_new_owner_fails() {
    let mut c = four_nodes("");
    c.agent_mut("n2").rt.failing.insert("web".to_string());
    c.place("web", 0, "n2");
    c.run_for(30_000);
    assert_eq!(c.issue("n1", IssueKind::Orphan).unwrap().held, None);
    assert_eq!(
        c.alive_copies("web", 0).len(),
        1,
        "still running while waiting"
    );
    c.run_for(120_000);
    let stops = c.count("n1", |a| matches!(a, Action::Stop { .. }));
    assert_eq!(
        stops, 0,
        "a healthy copy is never traded for one that cannot start"
    );
    assert_eq!(c.alive_copies("web", 0).len(), 1);
    let issue = c.issue("n1", IssueKind::Orphan).unwrap();
    assert!(
        issue.message.contains("moving (blocked"),
        "{}",
        issue.message
    );
    // The new owner recovers: the old copy hands off once the new one is healthy.
    c.agent_mut("n2").rt.failing.clear();
    c.run_for(60_000);
    assert!(c.alive_copies("web", 0).iter().all(|(n, _, _)| n == "n2"));
    assert_eq!(c.alive_copies("web", 0).len(), 1);
}

/// Gossip alone can show a dead node live and serving for seconds (its old heartbeats and
/// instances relayed after a partition heals: swarm seed 419). The old copy hands off only once
/// the new owner answered a round trip begun since it was seen serving.
#[test]
fn a_new_owner_that_answers_no_round_trip_gets_no_handoff() {
    let mut c = four_nodes("");
    c.silent.insert("n2".to_string());
    c.place("web", 0, "n2");
    c.run_for(30_000);
    let stops = c.count("n1", |a| matches!(a, Action::Stop { .. }));
    assert_eq!(
        stops, 0,
        "no round trip answered: the healthy copy keeps running"
    );
    assert_eq!(c.alive_copies("web", 0).len(), 2);
    c.silent.clear();
    c.run_for(10_000);
    assert!(c.alive_copies("web", 0).iter().all(|(n, _, _)| n == "n2"));
    assert_eq!(c.alive_copies("web", 0).len(), 1);
}

#[test]
fn an_unhealthy_orphan_stops_after_the_handoff_bound_when_the_new_owner_never_gets_healthy() {
    let health = "[health]\ninterval = \"1s\"\nstart_grace = \"0s\"\n\n[health.tcp]\nport = 80\n";
    let mut c = four_nodes(health);
    let (_, handle, _) = c.alive_copies("web", 0).remove(0);
    c.agent_mut("n1").rt.unhealthy.insert(handle);
    c.agent_mut("n2").rt.failing.insert("web".to_string());
    c.place("web", 0, "n2");
    c.run_for(30_000);
    assert_eq!(c.alive_copies("web", 0).len(), 1, "waiting");
    c.run_for(31_000);
    let stops = c.count("n1", |a| {
        matches!(
            a,
            Action::Stop {
                cause: StopCause::HandoffTimeout,
                ..
            }
        )
    });
    assert_eq!(stops, 1);
}

/// Moves every replica of `web` off `node` to cell `cell` (the cell level placed them there;
/// this cell's placement has no owner for them), as not serving there yet.
fn move_to_cell(c: &mut Cluster, node: &str, cell: &str) -> Vec<ReplicaId> {
    let moved: Vec<ReplicaId> = c
        .owners
        .iter()
        .filter(|(_, n)| n.as_str() == node)
        .map(|(r, _)| r.clone())
        .collect();
    for r in &moved {
        c.owners.remove(r);
        let handoff = CellHandoff {
            cell: cell.to_string(),
            serving: false,
        };
        c.agent_mut(node).moved_to_cells.insert(r.clone(), handoff);
    }
    moved
}

#[test]
fn a_replica_moved_to_another_cell_runs_until_that_cell_serves_it() {
    let mut c = four_nodes("");
    let moved = move_to_cell(&mut c, "n1", "c2");
    assert_eq!(moved, [ReplicaId::new("web", 0)]);
    c.run_for(5_000);
    assert_eq!(
        c.alive_copies("web", 0).len(),
        1,
        "no gap while c2 starts it"
    );
    let issue = c.issue("n1", IssueKind::Orphan).expect("an orphan issue");
    assert!(issue.message.contains("cell c2"), "{}", issue.message);
    // c2 reports its copy serving: the copy here stops as a planned handoff.
    c.agent_mut("n1")
        .moved_to_cells
        .get_mut(&moved[0])
        .unwrap()
        .serving = true;
    c.run_for(3_000);
    assert!(c.alive_copies("web", 0).is_empty());
    let stop = c
        .log
        .iter()
        .find(|(_, n, a)| n == "n1" && matches!(a, Action::Stop { .. }))
        .unwrap();
    match &stop.2 {
        Action::Stop { cause, reason, .. } => {
            assert_eq!(*cause, StopCause::Handoff);
            assert!(reason.contains("cell c2"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_node_whose_every_replica_moved_to_a_serving_cell_hands_them_all_off() {
    // One node runs all four replicas, then learns of a second cell that takes them all (what
    // an agent sees when it placed alone before it learned the other cells): without the other
    // cell's word that would be a mass stop, held; with it, each is a planned handoff.
    let mut c = Cluster::new(&["n1"]);
    c.put(spec("web", 4, ""), "v1");
    for r in 0..4 {
        c.place("web", r, "n1");
    }
    c.run_for(3_000);
    assert_eq!(c.serving("web"), 4);
    let moved = move_to_cell(&mut c, "n1", "c2");
    c.run_for(70_000);
    assert_eq!(
        c.agent("n1")
            .rt
            .instances
            .values()
            .filter(|i| i.phase.may_be_alive())
            .count(),
        4,
        "not served elsewhere: the mass-stop guard holds even the handoff bound's stops"
    );
    for r in &moved {
        c.agent_mut("n1").moved_to_cells.get_mut(r).unwrap().serving = true;
    }
    c.run_for(3_000);
    for r in 0..4 {
        assert!(c.alive_copies("web", r).is_empty(), "web/{r} still runs");
    }
    assert_eq!(
        c.count("n1", |a| matches!(
            a,
            Action::Stop {
                cause: StopCause::Handoff,
                ..
            }
        )),
        4
    );
}

#[test]
fn deleted_workload_and_scaled_down_replicas_stop_and_are_removed() {
    let mut c = four_nodes("");
    c.put(spec("web", 2, ""), "v2");
    c.owners.retain(|r, _| r.replica < 2);
    c.run_for(1_500);
    assert_eq!(
        c.starts("web", 0).len(),
        1,
        "scaling is not a rolling update"
    );
    let scaled = c.log.iter().filter(|(_, _, a)| {
        matches!(
            a,
            Action::Stop {
                cause: StopCause::ScaledDown,
                ..
            }
        )
    });
    assert_eq!(scaled.count(), 2);
    c.specs.clear();
    c.owners.clear();
    c.put(spec("other", 1, ""), "v1"); // not an empty store: deletion is believable
    c.run_for(3_000);
    let deleted = c.log.iter().filter(|(_, _, a)| {
        matches!(
            a,
            Action::Stop {
                cause: StopCause::Deleted,
                ..
            }
        )
    });
    assert_eq!(deleted.count(), 2);
    let removes: Vec<String> = c
        .log
        .iter()
        .filter(|(_, _, a)| matches!(a, Action::Remove { .. }))
        .map(|(t, n, a)| format!("{t} {n} {a}"))
        .collect();
    assert_eq!(removes.len(), 4, "{removes:#?}");
    assert!(c.agents.values().all(|a| a.rt.instances.is_empty()));
}

#[test]
fn failing_surge_copy_backs_off_and_keeps_the_old_one() {
    let extra = "[update]\nmax_unavailable = 0\nmax_surge = 1\n";
    let mut c = four_nodes(extra);
    c.put(
        spec("web", 4, &format!("{extra}[process.env]\nV = \"2\"\n")),
        "v2",
    );
    for n in NODES {
        c.agent_mut(n).rt.failing.insert("web".to_string());
    }
    c.run_for(40_000);
    let starts = c.starts("web", 0);
    let gaps: Vec<u64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps[1..], [10_000, 20_000], "surge attempts back off");
    assert_eq!(c.serving("web"), 4, "the old copies keep serving");
    assert!(
        c.starts("web", 1).len() == 1,
        "the rollout stalls at the first replica"
    );
}

/// A node never starts more than its declared capacity holds: a replica moving here waits while
/// an instance moving away still runs (until its replica is served elsewhere), then starts.
#[test]
fn a_start_waits_for_room_while_an_instance_moving_away_still_runs() {
    let mut c = Cluster::new(&["n1", "n2"]);
    // 100m each: n1 holds two.
    c.agent_mut("n1").capacity = Some(shoal_core::Resources::new(250, 1 << 30));
    c.put(spec("web", 3, ""), "v1");
    c.place("web", 0, "n1");
    c.place("web", 1, "n1");
    c.place("web", 2, "n2");
    c.run_for(3_000);
    assert_eq!(c.serving("web"), 3);
    // web/0 moves to n2 and web/2 to n1: n1 runs web/0 until n2 serves it.
    c.place("web", 0, "n2");
    c.place("web", 2, "n1");
    let mut most_on_n1 = 0;
    let mut waited = false;
    c.run_for_checked(20_000, |c| {
        let alive = c.agent("n1").rt.instances.values();
        most_on_n1 = most_on_n1.max(alive.filter(|i| i.phase.may_be_alive()).count());
        waited |= c
            .issue("n1", IssueKind::Missing)
            .is_some_and(|i| i.message.contains("not started yet"));
    });
    assert!(
        most_on_n1 <= 2,
        "n1 ran {most_on_n1} instances of 100m in 250m"
    );
    assert!(waited, "n1 said why web/2 waited");
    assert_eq!(c.alive_copies("web", 2).len(), 1);
    assert_eq!(c.alive_copies("web", 2)[0].0, "n1");
    assert_eq!(c.alive_copies("web", 0)[0].0, "n2");
    assert_eq!(c.serving("web"), 3);
}
