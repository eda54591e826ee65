//! One node's convergence: start, crash and restart (at once, then with backoff), health, restart
//! policies, start failures, unsupported specs, adoption after an agent restart, the per-round
//! bound, determinism.

mod reconcile_support;

use reconcile_support::*;
use shoal_core::instance::{Phase, ReplicaId};
use shoal_core::reconcile::{Action, IssueKind, Layer, ReconcileConfig, StopCause};

fn one_node(extra: &str) -> Cluster {
    let mut c = Cluster::new(&["n1"]);
    c.put(spec("web", 1, extra), "v1");
    c.place("web", 0, "n1");
    c
}

/// Crashes the replica as soon as it runs, `times` times; returns the delays between each crash
/// and the next start. The agent ticks at the crash, as the shell does when the runtime reports
/// an exit.
fn crash_loop(c: &mut Cluster, times: usize) -> Vec<u64> {
    let mut delays = Vec::new();
    for _ in 0..times {
        c.run_for(1_500);
        c.crash("n1", "web", 0, 1);
        let crashed = c.now;
        let before = c.starts("web", 0).len();
        c.tick("n1");
        while c.starts("web", 0).len() == before {
            c.step();
            assert!(c.now - crashed < 400_000, "no restart");
        }
        delays.push(c.starts("web", 0)[before] - crashed);
    }
    delays
}

#[test]
fn missing_replica_starts_and_becomes_healthy() {
    let mut c = one_node("");
    let actions = c.tick("n1");
    assert!(matches!(&actions[..], [Action::Start { version, .. }] if version == "v1"));
    assert_eq!(
        c.issue("n1", IssueKind::Missing).unwrap().layer,
        Layer::Placement
    );
    c.run_for(2_000);
    let status = c.agent("n1").rec.observed();
    assert_eq!(status.len(), 1);
    assert_eq!(
        (status[0].phase, status[0].healthy, status[0].restarts),
        (Phase::Running, true, 0)
    );
    assert!(c.agent("n1").rec.issues().is_empty());
    assert_eq!(c.starts("web", 0).len(), 1, "exactly one start");
}

#[test]
fn crash_restarts_at_once_then_with_doubling_backoff_capped_then_reset_after_healthy_period() {
    let mut c = one_node("");
    c.tick("n1");
    let delays = crash_loop(&mut c, 8);
    let secs: Vec<u64> = delays.iter().map(|d| d / 1000).collect();
    assert_eq!(secs, [0, 10, 20, 40, 80, 160, 300, 300]);
    assert_eq!(c.agent("n1").rec.observed()[0].restarts, 8);
    let issue = c.issue("n1", IssueKind::Missing);
    assert!(issue.is_some() || c.agent("n1").rec.issues().is_empty());
    c.run_for(601_000); // healthy for longer than backoff_reset (10 min)
    let delays = crash_loop(&mut c, 2);
    assert_eq!(
        delays,
        [0, 10_000],
        "after 10 min healthy the count starts over: at once, then backoff_initial"
    );
}

/// Kubernetes' schedule: the round that sees the first crash starts the replica again; the round
/// that sees the second one starts nothing, says when the next attempt is, and asks to be woken
/// then.
#[test]
fn first_crash_restarts_in_the_same_round_and_the_second_waits_backoff_initial() {
    let mut c = one_node("[restart]\nbackoff_initial = \"4s\"\n");
    c.tick("n1");
    c.run_for(1_500);

    c.crash("n1", "web", 0, 137);
    let first = c.now;
    let actions = c.tick("n1");
    let started: Vec<&Action> = actions
        .iter()
        .filter(|a| matches!(a, Action::Start { .. }))
        .collect();
    assert!(
        matches!(&started[..], [Action::Start { reason, .. }] if reason.contains("exited with code 137")),
        "the first crash restarts in the round that sees it: {actions:?}"
    );
    assert_eq!(c.starts("web", 0).len(), 2);
    assert_eq!(
        c.starts("web", 0).last(),
        Some(&first),
        "started at the crash's time"
    );
    c.run_for(1_500);
    assert_eq!(c.agent("n1").rec.observed()[0].restarts, 1);

    c.crash("n1", "web", 0, 137);
    let second = c.now;
    let actions = c.tick("n1");
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Start { .. })),
        "the second crash backs off: {actions:?}"
    );
    let issue = c.issue("n1", IssueKind::Exited).expect("exited issue");
    assert!(
        issue.message.contains("2 consecutive failures")
            && issue.message.contains(&format!(
                "next attempt at {}",
                shoal_core::hlc::format_utc_ms(second + 4_000)
            )),
        "{}",
        issue.message
    );
    assert_eq!(c.agent("n1").rec.poll_timeout(), Some(second + 4_000));
    c.run_for(3_500);
    assert_eq!(
        c.starts("web", 0).last(),
        Some(&first),
        "nothing before 4 s"
    );
    c.step();
    assert_eq!(c.starts("web", 0).last(), Some(&(second + 4_000)));
    assert_eq!(c.agent("n1").rec.observed()[0].restarts, 2);
}

/// A failed start never gets the immediate retry, even right after a crash that did: it counts as
/// at least the second failure.
#[test]
fn a_restart_that_fails_to_start_waits_backoff_initial_then_doubles() {
    let mut c = one_node("[restart]\nbackoff_initial = \"4s\"\n");
    c.tick("n1");
    c.run_for(1_500);
    c.agent_mut("n1").rt.failing.insert("web".to_string());
    c.crash("n1", "web", 0, 1);
    let crashed = c.now;
    c.tick("n1");
    c.run_for(20_000);
    let starts = c.starts("web", 0);
    let after: Vec<u64> = starts[1..].iter().map(|t| t - crashed).collect();
    assert_eq!(after, [0, 4_000, 12_000], "at once, then 4 s, then 8 s");
    let issue = c
        .issue("n1", IssueKind::StartFailing)
        .expect("start-failing issue");
    assert!(issue.message.contains("next attempt"), "{}", issue.message);
}

#[test]
fn backoff_values_come_from_the_spec() {
    let mut c = one_node("[restart]\nbackoff_initial = \"1s\"\nbackoff_max = \"3s\"\n");
    c.tick("n1");
    let delays = crash_loop(&mut c, 5);
    assert_eq!(delays, [0, 1_000, 2_000, 3_000, 3_000]);
}

#[test]
fn exited_issue_names_the_cause_and_the_next_attempt() {
    let mut c = one_node("");
    c.tick("n1");
    c.run_for(1_500);
    c.crash("n1", "web", 0, 3);
    c.step(); // the first crash restarts at once
    c.run_for(1_500);
    c.crash("n1", "web", 0, 3);
    c.step();
    let issue = c.issue("n1", IssueKind::Exited).expect("exited issue");
    assert_eq!(issue.layer, Layer::Process);
    assert!(
        issue.message.contains("exited with code 3"),
        "{}",
        issue.message
    );
    assert!(issue.message.contains("next attempt"), "{}", issue.message);
    assert_eq!(c.agent("n1").rec.poll_timeout(), Some(c.now - 500 + 10_000));
    let status = c.agent("n1").rec.observed();
    let phases: Vec<(Phase, Option<i32>, bool)> = status
        .iter()
        .map(|s| (s.phase, s.exit_code, s.handle.is_some()))
        .collect();
    // The exited record, and the replica's pending entry (what it waits for).
    assert_eq!(
        phases,
        [
            (Phase::Pending, Some(3), false),
            (Phase::Exited, Some(3), true)
        ]
    );
}

#[test]
fn restart_policies_are_respected() {
    let mut c = one_node("[restart]\npolicy = \"on-failure\"\n");
    c.tick("n1");
    c.run_for(1_500);
    c.crash("n1", "web", 0, 0);
    c.run_for(60_000);
    assert_eq!(
        c.starts("web", 0).len(),
        1,
        "on-failure: a clean exit is not restarted"
    );
    assert!(c.agent("n1").rec.issues().is_empty());

    let mut c = one_node("[restart]\npolicy = \"on-failure\"\n");
    c.tick("n1");
    let delays = crash_loop(&mut c, 1);
    assert_eq!(
        delays,
        [0],
        "on-failure: a failed exit is restarted (at once, the first time)"
    );

    let mut c = one_node("[restart]\npolicy = \"never\"\n");
    c.tick("n1");
    c.run_for(1_500);
    c.crash("n1", "web", 0, 2);
    c.run_for(60_000);
    assert_eq!(c.starts("web", 0).len(), 1, "never: not restarted");
    let issue = c.issue("n1", IssueKind::Exited).expect("exited issue");
    let said = &issue.message;
    assert!(said.contains("restart policy never does not"), "{said}");
}

#[test]
fn unhealthy_past_threshold_restarts_and_start_grace_is_respected() {
    let health = "[health]\ninterval = \"1s\"\nfailure_threshold = 3\nstart_grace = \"5s\"\n\n[health.tcp]\nport = 80\n";
    let mut c = one_node(health);
    c.tick("n1");
    c.agent_mut("n1").rt.unhealthy.insert("n1-1".to_string());
    // Failing probes every 500 ms from 1 s after start: ignored until 5 s, then 3 failures.
    c.run_for(5_000);
    assert_eq!(
        c.count("n1", |a| matches!(a, Action::Stop { .. })),
        0,
        "grace respected"
    );
    let status = &c.agent("n1").rec.observed()[0];
    assert_eq!((status.phase, status.healthy), (Phase::Starting, false));
    c.run_for(1_500);
    let stops = c.count("n1", |a| {
        matches!(
            a,
            Action::Stop {
                cause: StopCause::Unhealthy,
                ..
            }
        )
    });
    assert_eq!(stops, 1, "stopped after 3 failures past the grace");
    let issues = c.agent("n1").rec.issues();
    let kinds: Vec<IssueKind> = issues.iter().map(|i| i.kind).collect();
    assert!(
        kinds == [IssueKind::Unhealthy] || kinds == [IssueKind::Exited],
        "{issues:#?}"
    );
    c.run_for(1_000);
    assert_eq!(
        c.starts("web", 0).len(),
        2,
        "restarted once stopped: the first failure waits for no backoff"
    );
    assert_eq!(c.agent("n1").rec.observed()[0].restarts, 1);
}

#[test]
fn failing_starts_raise_a_runtime_issue_and_back_off() {
    let mut c = one_node("");
    c.agent_mut("n1").rt.failing.insert("web".to_string());
    c.run_for(70_000);
    let starts = c.starts("web", 0);
    let gaps: Vec<u64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(
        gaps[..2],
        [10_000, 20_000],
        "a failed start is never retried at once: backoff_initial, then doubling"
    );
    let issue = c
        .issue("n1", IssueKind::StartFailing)
        .expect("start-failing issue");
    assert_eq!(issue.layer, Layer::Runtime);
    assert!(
        issue.message.contains("image busybox:1 not found"),
        "{}",
        issue.message
    );
    let status = c.agent("n1").rec.observed();
    let records = status.iter().filter(|s| s.handle.is_some()).count();
    assert_eq!(
        records, 1,
        "failed records are replaced, not accumulated: {status:?}"
    );
    assert!(
        status.iter().all(|s| s.restarts == 0),
        "failed starts are not restarts"
    );

    // The shell may also report a start that produced no instance at all.
    let mut c = one_node("");
    c.tick("n1");
    c.agent_mut("n1").rt.instances.clear();
    let now = c.now;
    c.agent_mut("n1")
        .rec
        .handle_start_failed(&ReplicaId::new("web", 0), "engine unreachable", now);
    c.step();
    let issue = c
        .issue("n1", IssueKind::StartFailing)
        .expect("start-failing issue");
    assert!(
        issue.message.contains("engine unreachable"),
        "{}",
        issue.message
    );
}

#[test]
fn container_spec_on_a_process_only_node_is_an_issue_not_a_start() {
    let mut c = Cluster::new(&["n1"]);
    c.agent_mut("n1").supports_containers = false;
    c.put(container_spec("box", 1), "v1");
    c.place("box", 0, "n1");
    c.run_for(5_000);
    assert!(c.log.is_empty());
    let issue = c
        .issue("n1", IssueKind::Unsupported)
        .expect("unsupported issue");
    assert_eq!(issue.layer, Layer::Runtime);
    assert!(
        issue.message.contains("no container runtime"),
        "{}",
        issue.message
    );
}

#[test]
fn restarted_agent_adopts_its_instances_without_duplicates() {
    let mut c = Cluster::new(&["n1"]);
    c.put(spec("web", 3, ""), "v1");
    for r in 0..3 {
        c.place("web", r, "n1");
    }
    c.run_for(3_000);
    c.crash("n1", "web", 0, 1);
    c.restart_agent("n1");
    c.shuffle_lists = true;
    c.run_for(3_000);
    assert_eq!(
        c.starts("web", 1).len(),
        1,
        "no duplicate start of an adopted replica"
    );
    assert_eq!(c.starts("web", 2).len(), 1);
    assert_eq!(
        c.starts("web", 0).len(),
        2,
        "the exited one restarts at once after adoption"
    );
    assert_eq!(
        c.count("n1", |a| matches!(a, Action::Remove { .. })),
        1,
        "old record removed"
    );
    assert_eq!(c.serving("web"), 3);
}

#[test]
fn actions_per_round_are_bounded_and_the_rest_follows() {
    let config = ReconcileConfig {
        actions_per_round_max: 10,
        ..ReconcileConfig::default()
    };
    let mut c = Cluster::with_config(&["n1"], config);
    c.put(spec("many", 95, ""), "v1");
    for r in 0..95 {
        c.place("many", r, "n1");
    }
    assert_eq!(c.tick("n1").len(), 10);
    assert_eq!(
        c.agent("n1").rec.poll_timeout(),
        Some(c.now),
        "capped: tick again at once"
    );
    c.run_for(8_000);
    assert_eq!(c.serving("many"), 95);
    assert_eq!(c.log.len(), 95);
}

#[test]
fn same_inputs_give_the_same_actions() {
    let run = |shuffle: bool| {
        let mut c = Cluster::new(&["n1", "n2", "n3"]);
        c.shuffle_lists = shuffle;
        c.put(
            spec("web", 3, "[restart]\nbackoff_initial = \"1s\"\n"),
            "v1",
        );
        for (r, n) in [(0, "n1"), (1, "n2"), (2, "n3")] {
            c.place("web", r, n);
        }
        c.run_for(3_000);
        c.crash("n2", "web", 1, 1);
        c.put(
            spec(
                "web",
                3,
                "[restart]\nbackoff_initial = \"2s\"\n[process.env]\nV = \"2\"\n",
            ),
            "v2",
        );
        c.run_for(30_000);
        c.log
            .iter()
            .map(|(t, n, a)| format!("{t} {n} {a}"))
            .collect::<Vec<_>>()
    };
    let first = run(false);
    assert!(first.len() > 6);
    assert_eq!(first, run(false));
    assert_eq!(
        first,
        run(true),
        "the order of the runtime's list does not matter"
    );
}

#[test]
fn a_start_pulling_its_image_shows_pulling_and_waits_as_long_as_the_pull_reports() {
    let mut c = one_node("");
    let web0 = ReplicaId {
        workload: "web".into(),
        replica: 0,
    };
    c.tick("n1");
    assert_eq!(c.starts("web", 0).len(), 1);
    // The runtime has not created the instance: it is pulling the image, slowly.
    c.agent_mut("n1").rt.instances.clear();
    for second in 0..90u64 {
        let progress = shoal_core::instance::PullProgress {
            image: "registry.local/web:1".into(),
            done_bytes: second * 1000,
            total_bytes: 90_000,
        };
        c.agent_mut("n1").pulling.insert(web0.clone(), progress);
        c.now += 1_000;
        c.tick("n1");
    }
    let status = c.agent("n1").rec.observed();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].phase, Phase::Pulling);
    assert!(status[0].phase.may_be_alive(), "a pull may become a copy");
    let pull = status[0].pull.as_ref().expect("progress shown");
    assert_eq!((pull.done_bytes, pull.total_bytes), (89_000, 90_000));
    assert_eq!(
        c.starts("web", 0).len(),
        1,
        "a reported pull never times out"
    );
    // The reports stop (a runtime that lost the start): the usual start timeout applies again.
    c.agent_mut("n1").pulling.clear();
    c.tick("n1");
    assert_eq!(c.agent("n1").rec.observed()[0].phase, Phase::Starting);
    let timeout = ReconcileConfig::default().start_report_timeout_ms;
    for _ in 0..timeout / 1_000 + 1 {
        c.now += 1_000;
        c.tick("n1");
    }
    let status = c.agent("n1").rec.observed();
    let error = status[0].last_error.as_deref().unwrap_or_default();
    assert!(error.contains("did not list"), "{status:?}");
}

#[test]
fn an_operator_restart_stops_the_instance_and_starts_a_new_one_without_backoff_or_failure() {
    let mut c = one_node("");
    let replica = ReplicaId::new("web", 0);
    // Nothing runs yet: refused, with what the node has instead.
    let err = c.agent_mut("n1").rec.restart(&replica).unwrap_err();
    assert!(
        err.to_string()
            .contains("web/0 has no running instance on n1"),
        "{err}"
    );
    c.run_for(2_000);
    let first = c.handle("n1", "web", 0);
    let asked = c.agent_mut("n1").rec.restart(&replica).unwrap();
    assert_eq!(asked, first);
    let actions = c.tick("n1");
    assert!(
        actions.iter().any(|a| matches!(a,
            Action::Stop { handle, cause: StopCause::Restart, .. } if *handle == first)),
        "{actions:?}"
    );
    c.run_for(3_000);
    let second = c.handle("n1", "web", 0);
    assert_ne!(second, first, "a new instance runs");
    assert_eq!(
        c.starts("web", 0).len(),
        2,
        "one start for the restart, no more"
    );
    let status = c.agent("n1").rec.observed();
    assert_eq!(
        (status[0].phase, status[0].healthy, status[0].restarts),
        (Phase::Running, true, 0),
        "a planned restart is not a failure"
    );
    // A stop is asked once: later ticks stop nothing more.
    c.run_for(5_000);
    assert_eq!(c.handle("n1", "web", 0), second);
    assert_eq!(c.count("n1", |a| matches!(a, Action::Stop { .. })), 1);
}

#[test]
fn a_stop_waits_the_grace_of_the_spec_the_instance_runs_or_else_the_agents() {
    let config = ReconcileConfig::default();
    let mut c = Cluster::new(&["n1"]);
    let mut db = (*spec("db", 1, "")).clone();
    db.stop_grace_ms = Some(45_000);
    c.put(std::sync::Arc::new(db.clone()), "v1");
    c.put(spec("web", 1, ""), "w1");
    c.place("db", 0, "n1");
    c.place("web", 0, "n1");
    c.run_for(2_000);
    assert_eq!(c.agent("n1").rec.observed().len(), 2, "both run");
    // Scaled to 0 in a version that no longer says how long: the instance runs v1's program,
    // so v1's grace holds.
    db.replicas = 0;
    db.stop_grace_ms = None;
    c.put(std::sync::Arc::new(db), "v2");
    c.put(spec("web", 0, ""), "w2");
    c.run_for(1_000);
    let graces = |workload: &str| -> Vec<u64> {
        c.log
            .iter()
            .filter_map(|(_, _, a)| match a {
                Action::Stop {
                    replica, grace_ms, ..
                } if replica.workload == workload => Some(*grace_ms),
                _ => None,
            })
            .collect()
    };
    assert_eq!(graces("db"), vec![45_000], "the spec's grace");
    assert_eq!(graces("web"), vec![config.stop_grace_ms], "the agent's");
}
