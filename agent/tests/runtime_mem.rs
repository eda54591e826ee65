//! The in-memory runtime: determinism under a seed (paused tokio time), start latency, failures,
//! crash loops, crashes on demand, SIGTERM-ignoring instances, engine outages.

mod runtime_support;

use std::time::Duration;

use runtime_support::{process_spec, request, spec};
use shoal::core::instance::{Phase, RuntimeInstance};
use shoal::core::spec::Probe;
use shoal::node::runtime::mem::{MemProfile, MemRuntime};
use shoal::node::runtime::{ProbeOutcome, Runtime, RuntimeError, RuntimeEvent};
use tokio::time::Instant;

const NODE: &str = "n1";

/// One scripted run; everything it observed.
async fn scripted_run(seed: u64) -> (Vec<String>, Vec<RuntimeEvent>, Vec<RuntimeInstance>) {
    let rt = MemRuntime::new(NODE, seed);
    let mut events = rt.events();
    rt.set_profile(
        "web",
        MemProfile {
            start_latency: Duration::from_millis(300),
            start_fail_probability: 0.5,
            ..MemProfile::default()
        },
    );
    let crash_loop = MemProfile {
        exit_after: Some(Duration::from_secs(1)),
        exit_code: 3,
        ..MemProfile::default()
    };
    rt.set_profile("crashy", crash_loop);
    let web = process_spec("web", &["web"]);
    let crashy = process_spec("crashy", &["crashy"]);
    let mut outcomes = Vec::new();
    for replica in 0..12 {
        let result = rt.start(request(&web, replica, NODE)).await;
        outcomes.push(match result {
            Ok(i) => format!("{} at {}", i.handle, i.started_at_ms),
            Err(e) => e.to_string(),
        });
    }
    rt.start(request(&crashy, 0, NODE)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    rt.start(request(&crashy, 0, NODE)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    rt.check_invariants();
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    (outcomes, seen, rt.list().await.unwrap())
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_gives_the_same_run() {
    let first = scripted_run(7).await;
    let again = scripted_run(7).await;
    assert_eq!(first, again);
    let other = scripted_run(8).await;
    assert_ne!(first.0, other.0, "another seed fails other starts");

    let (outcomes, events, instances) = first;
    // Start latency is 300 ms each, one after the other, on the paused clock.
    assert!(
        outcomes[0].ends_with(" at 300") || outcomes[0].contains("injected"),
        "{outcomes:?}"
    );
    let failed = outcomes
        .iter()
        .filter(|o| o.contains("injected start failure"))
        .count();
    assert!(failed > 0 && failed < 12, "{outcomes:?}");
    // The crash loop: both crashy instances exited with code 3, a second after each start.
    let crashes: Vec<_> = instances
        .iter()
        .filter(|i| i.replica.workload == "crashy")
        .collect();
    assert_eq!(crashes.len(), 2);
    for i in crashes {
        assert_eq!((i.phase, i.exit_code), (Phase::Exited, Some(3)));
        assert_eq!(i.exited_at_ms.unwrap() - i.started_at_ms, 1000);
    }
    let exits = events
        .iter()
        .filter(|e| matches!(e, RuntimeEvent::Exited { .. }))
        .count();
    assert_eq!(exits, 2);
}

#[tokio::test(start_paused = true)]
async fn crashes_failures_stops_and_outages_on_demand() {
    let rt = MemRuntime::new(NODE, 1);
    let mut events = rt.events();
    let spec = process_spec("db", &["db"]);
    let inst = rt.start(request(&spec, 0, NODE)).await.unwrap();
    let probe = Probe::Tcp { port: 5432.into() };
    let timeout = Duration::from_secs(1);
    assert_eq!(
        rt.probe(&inst.handle, &probe, timeout).await,
        ProbeOutcome::Healthy
    );
    rt.set_probe_outcome(&inst.handle, Some(ProbeOutcome::fail("stuck")));
    assert_eq!(
        rt.probe(&inst.handle, &probe, timeout).await,
        ProbeOutcome::fail("stuck")
    );

    assert!(matches!(
        rt.remove(&inst.handle).await,
        Err(RuntimeError::StillRunning { .. })
    ));
    assert!(rt.crash(&inst.handle, 139));
    assert!(
        !rt.crash(&inst.handle, 1),
        "a dead instance cannot crash again"
    );
    assert!(matches!(
        events.recv().await.unwrap(),
        RuntimeEvent::Started { .. }
    ));
    match events.recv().await.unwrap() {
        RuntimeEvent::Exited { exit_code, .. } => assert_eq!(exit_code, Some(139)),
        other => panic!("{other:?}"),
    }
    rt.remove(&inst.handle).await.unwrap();
    assert!(rt.list().await.unwrap().is_empty());

    let profile = MemProfile {
        fail_starts: Some("image \"db:9\" not found".into()),
        ..MemProfile::default()
    };
    rt.set_profile("db", profile);
    let err = rt.start(request(&spec, 0, NODE)).await.unwrap_err();
    assert_eq!(err.to_string(), "start failed: image \"db:9\" not found");

    rt.set_profile(
        "db",
        MemProfile {
            ignores_sigterm: true,
            ..MemProfile::default()
        },
    );
    let stubborn = rt.start(request(&spec, 0, NODE)).await.unwrap();
    let t0 = Instant::now();
    rt.stop(&stubborn.handle, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(30));
    assert_eq!(rt.list().await.unwrap()[0].exit_code, Some(137));

    rt.set_supported(true, false);
    let container = spec_container();
    assert!(rt.supports(&container).is_err());
    let err = rt.start(request(&container, 0, NODE)).await.unwrap_err();
    assert!(matches!(err, RuntimeError::Unsupported { .. }));

    let mut events = rt.events();
    rt.set_engine_down(Some("daemon stopped"));
    let err = rt.list().await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    rt.set_engine_down(None);
    assert_eq!(
        vec![events.recv().await.unwrap(), events.recv().await.unwrap()],
        vec![
            RuntimeEvent::EngineUnavailable {
                reason: "daemon stopped".into()
            },
            RuntimeEvent::EngineAvailable
        ]
    );
    rt.kill_all();
    assert!(rt.list().await.unwrap().is_empty());
    assert_eq!(rt.starts(), 3);
    rt.check_invariants();
}

fn spec_container() -> std::sync::Arc<shoal::core::spec::WorkloadSpec> {
    spec("name = \"c\"\n[container]\nimage = \"x:1\"\n[resources]\ncpu = \"1\"\nmemory = \"1Mi\"\n")
}
