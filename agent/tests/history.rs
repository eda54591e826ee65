//! A workload's history and `rollout undo`, on in-memory mesh nodes with paused time: the store
//! keeps the replaced versions newest first, any agent lists them, undo applies a past version's
//! content as a new version, bad input is refused with a clear error, and a delete takes the
//! history with it.

use std::time::Duration;

use shoal::agent::mem::{call, mem_setup, start_mem_node, tokio_clock};
use shoal::agent::run::RunningNode;
use shoal::state::store_db::MemDisk;
use shoal::transport::gossip::mem::MemNetwork;
use shoal::wire::api::{ErrorKind, Request, Response, VersionView};
use shoal_core::spec::WorkloadSpec;

const BASE_MS: u64 = 1_800_000_000_000;

fn spec(replicas: u32) -> WorkloadSpec {
    let text = format!(
        "name = \"web\"\nreplicas = {replicas}\n[process]\ncommand = [\"sleep\", \"{replicas}\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
    );
    WorkloadSpec::from_toml_str(&text, "test.toml").unwrap()
}

async fn history(node: &RunningNode) -> Result<Vec<VersionView>, (ErrorKind, String)> {
    let req = Request::History { name: "web".into() };
    match call(node, req).await {
        Response::History { versions, .. } => Ok(versions),
        Response::Error(e) => Err((e.kind, e.message)),
        other => panic!("unexpected {other:?}"),
    }
}

async fn undo(node: &RunningNode, to: Option<String>) -> Result<(), (ErrorKind, String)> {
    let req = Request::Undo {
        name: "web".into(),
        to,
    };
    match call(node, req).await {
        Response::Applied(_) => Ok(()),
        Response::Error(e) => Err((e.kind, e.message)),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn history_lists_replaced_versions_and_undo_applies_a_past_one() {
    let net = MemNetwork::new(41);
    let disks: Vec<MemDisk> = (0..2).map(|_| MemDisk::new()).collect();
    let mut nodes = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        let setup = mem_setup(i, 41, "z1");
        nodes.push(
            start_mem_node(&net, setup, disk, tokio_clock(BASE_MS))
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    for replicas in 1..=3 {
        let applied = call(
            &nodes[0],
            Request::Apply {
                specs: vec![spec(replicas)],
            },
        )
        .await;
        assert!(matches!(applied, Response::Applied(_)), "{applied:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Any agent lists them once anti-entropy carried the history.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let versions = history(&nodes[1]).await.unwrap();
    let replicas: Vec<u32> = versions.iter().map(|v| v.replicas).collect();
    assert_eq!(replicas, [3, 2, 1], "current first, then newest first");
    assert!(versions[0].current && !versions[1].current);
    assert_eq!(versions[2].runs, "sleep 1");
    assert!(versions.windows(2).all(|w| w[0].at_ms >= w[1].at_ms));

    // Undo: the version before the current, then an explicit older one.
    undo(&nodes[1], None).await.unwrap();
    let versions = history(&nodes[1]).await.unwrap();
    let replicas: Vec<u32> = versions.iter().map(|v| v.replicas).collect();
    assert_eq!(replicas, [2, 3, 2, 1]);
    // In-memory nodes sign nothing, so nobody is recorded (agents over QUIC record who asked:
    // authority_agents.rs).
    assert_eq!(versions[0].by, "-");
    let oldest = versions[3].version.clone();
    undo(&nodes[1], Some(oldest)).await.unwrap();
    assert_eq!(history(&nodes[1]).await.unwrap()[0].replicas, 1);
    // `--to` as people read it (`shoal history`'s text) names the same version.
    let versions = history(&nodes[1]).await.unwrap();
    let three = versions.iter().find(|v| v.replicas == 3).unwrap();
    let shown = shoal_core::hlc::format_version(&three.version);
    assert!(shown.contains(" by "), "{shown}");
    undo(&nodes[1], Some(shown)).await.unwrap();
    assert_eq!(history(&nodes[1]).await.unwrap()[0].replicas, 3);
    let (kind, message) = undo(&nodes[0], Some("last tuesday".into()))
        .await
        .unwrap_err();
    assert_eq!(kind, ErrorKind::Invalid);
    assert!(message.contains("is not a version"), "{message}");

    // Bad input: a version not in the history, the current one, an unknown workload.
    let (kind, message) = undo(&nodes[0], Some("1.0@nowhere".into()))
        .await
        .unwrap_err();
    assert_eq!(kind, ErrorKind::Invalid);
    assert!(message.contains("is not in web's history"), "{message}");
    let current = history(&nodes[0]).await.unwrap()[0].version.clone();
    let (_, message) = undo(&nodes[0], Some(current)).await.unwrap_err();
    assert!(message.contains("current version already"), "{message}");
    let req = Request::History {
        name: "nope".into(),
    };
    let Response::Error(e) = call(&nodes[0], req).await else {
        panic!("history of an unknown workload answered");
    };
    assert_eq!(e.kind, ErrorKind::NotFound);

    // Pause and resume: an unknown workload is refused (the host loops' side, keeping old
    // instances while paused, is reconcile_moves::a_paused_rollout_keeps_old_instances...).
    let pause = |name: &str, paused| Request::Pause {
        name: name.into(),
        paused,
    };
    let Response::Error(e) = call(&nodes[0], pause("nope", true)).await else {
        panic!("paused an unknown workload");
    };
    assert_eq!(e.kind, ErrorKind::NotFound);
    let answer = call(&nodes[0], pause("web", true)).await;
    assert!(
        matches!(answer, Response::Paused { paused: true, .. }),
        "{answer:?}"
    );
    let answer = call(&nodes[0], pause("web", false)).await;
    assert!(
        matches!(answer, Response::Paused { paused: false, .. }),
        "{answer:?}"
    );

    // A delete takes the history with it: a new `web` starts with none.
    let deleted = call(
        &nodes[0],
        Request::Delete {
            name: "web".into(),
            purge_data: false,
        },
    )
    .await;
    assert!(matches!(deleted, Response::Deleted(_)), "{deleted:?}");
    let applied = call(
        &nodes[0],
        Request::Apply {
            specs: vec![spec(5)],
        },
    )
    .await;
    assert!(matches!(applied, Response::Applied(_)), "{applied:?}");
    let versions = history(&nodes[0]).await.unwrap();
    assert_eq!(versions.len(), 1, "{versions:?}");
    let (_, message) = undo(&nodes[0], None).await.unwrap_err();
    assert!(
        message.contains("no version before the current one"),
        "{message}"
    );
}

/// The mesh's rollback write: the content of a past version in place of exactly the failed one
/// (a compare-and-set), the failed one in the history as rolled back with why; a second writer
/// finds the version moved and writes nothing; an apply after it wins and says it stops it.
#[tokio::test(start_paused = true)]
async fn a_rollback_is_a_compare_and_set_and_a_newer_apply_stops_it() {
    let net = MemNetwork::new(43);
    let disks: Vec<MemDisk> = (0..2).map(|_| MemDisk::new()).collect();
    let mut nodes = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        let setup = mem_setup(i, 43, "z1");
        nodes.push(
            start_mem_node(&net, setup, disk, tokio_clock(BASE_MS))
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    for replicas in [1, 2] {
        let req = Request::Apply {
            specs: vec![spec(replicas)],
        };
        assert!(matches!(call(&nodes[0], req).await, Response::Applied(_)));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let versions = history(&nodes[1]).await.unwrap();
    let (failed, good) = (versions[0].version.clone(), versions[1].version.clone());
    let roll_back = |i: usize, from: &str| {
        nodes[i].node.clone().roll_back(
            "web".into(),
            from.to_string(),
            good.clone(),
            "1 of 2 replicas failed".into(),
            "auto-rollback (test)".into(),
        )
    };
    let done = roll_back(1, &failed).await.unwrap().expect("written");
    let restored = done.entry.version.to_string();
    // Just above the failed version: its wall time, logical + 1.
    assert!(
        restored.starts_with(failed.split('.').next().unwrap()),
        "{restored} vs {failed}"
    );
    // The other agent, once the rollback reached it, finds the version moved.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(roll_back(0, &failed).await.unwrap().is_none());
    let versions = history(&nodes[0]).await.unwrap();
    assert_eq!(versions[0].version, restored);
    assert_eq!(versions[0].replicas, 1, "the good version's content");
    assert_eq!(versions[1].outcome.as_deref(), Some("rolled back"));
    assert_eq!(versions[1].reason, "1 of 2 replicas failed");
    // Not recorded complete: the rollback was still rolling out; a newer apply stops it.
    let req = Request::Apply {
        specs: vec![spec(3)],
    };
    let Response::Applied(applied) = call(&nodes[0], req).await else {
        panic!("apply refused");
    };
    let note = applied[0].note.as_deref().unwrap_or_default();
    assert!(note.contains("this newer write stops it"), "{applied:?}");
    let versions = history(&nodes[0]).await.unwrap();
    assert_eq!(versions[0].replicas, 3);
    assert_eq!(versions[1].outcome.as_deref(), Some("superseded"));
}
