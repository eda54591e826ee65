//! The guard against the real Docker engine: when the lease is not renewed it kills this node's
//! running containers of the exclusive workloads, found by their `shoal.node` and
//! `shoal.workload` labels, including one the agent never told it about; other containers keep
//! running. Needs the engine, like runtime_docker.rs (`SHOAL_SKIP_DOCKER_TESTS=1` skips it).

mod runtime_support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
use runtime_support::{request, spec};
use shoal::core::reconcile::ReconcileConfig;
use shoal::node::guard::{GuardConfig, GuardLink, GuardRuntime};
use shoal::node::runtime::docker::{ensure_busybox_image, DockerConfig, DockerRuntime};
use shoal::node::runtime::Runtime;

const NODE: &str = "dt-guard";
const LEASE_MS: u64 = 3_000;

fn container(name: &str) -> std::sync::Arc<shoal::core::spec::WorkloadSpec> {
    spec(&format!(
        "name = \"{name}\"\n[container]\nimage = \"shoal-busybox:latest\"\npull = \"if-not-present\"\n\
         command = [\"sh\", \"-c\", \"exec sleep 300\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
    ))
}

async fn remove_node_containers(docker: &bollard::Docker) {
    let filters = std::collections::HashMap::from([(
        "label".to_string(),
        vec![format!("shoal.node={NODE}")],
    )]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    for c in docker.list_containers(Some(options)).await.unwrap() {
        let force = RemoveContainerOptionsBuilder::new().force(true).build();
        let _ = docker
            .remove_container(c.id.as_deref().unwrap(), Some(force))
            .await;
    }
}

async fn running(docker: &bollard::Docker, id: &str) -> bool {
    let inspected = docker.inspect_container(id, None).await.unwrap();
    inspected.state.and_then(|s| s.running).unwrap_or(false)
}

#[tokio::test]
async fn the_guard_kills_exclusive_containers_by_label() {
    if std::env::var("SHOAL_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("SHOAL_SKIP_DOCKER_TESTS=1: docker test skipped");
        return;
    }
    let rt = DockerRuntime::connect(DockerConfig::new(NODE))
        .await
        .expect("the Docker engine must answer (or set SHOAL_SKIP_DOCKER_TESTS=1)");
    let docker = rt.docker().await.unwrap();
    ensure_busybox_image(&docker, "shoal-busybox", "latest")
        .await
        .unwrap();
    remove_node_containers(&docker).await;

    let dir = tempfile::tempdir().unwrap();
    let mut config = GuardConfig::new(
        dir.path(),
        NODE,
        GuardRuntime::Docker,
        &ReconcileConfig::default(),
    );
    config.lease_ms = LEASE_MS;
    config.exe = PathBuf::from(env!("CARGO_BIN_EXE_shoal"));
    let mut link = GuardLink::start(config);
    link.wait_ready(Duration::from_secs(5)).await;
    assert_eq!(link.unavailable(), None);

    let db = rt.start(request(&container("db"), 0, NODE)).await.unwrap();
    let web = rt.start(request(&container("web"), 0, NODE)).await.unwrap();
    let exclusive = BTreeSet::from(["db".to_string()]);
    // The agent told the guard about db/0 only; db/1 starts after the last renewal.
    let until = Instant::now() + Duration::from_millis(2 * LEASE_MS);
    while Instant::now() < until {
        link.renew(&exclusive, BTreeSet::from([db.handle.clone()]), LEASE_MS);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let late = rt.start(request(&container("db"), 1, NODE)).await.unwrap();
    assert!(running(&docker, &db.handle).await);

    let t0 = Instant::now();
    while (running(&docker, &db.handle).await || running(&docker, &late.handle).await)
        && t0.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = t0.elapsed();
    eprintln!("containers killed {took:?} after db/1 started (lease {LEASE_MS} ms, last renewal before that)");
    let log = std::fs::read_to_string(dir.path().join("guard/guard.log")).unwrap_or_default();
    if running(&docker, &db.handle).await || running(&docker, &late.handle).await {
        remove_node_containers(&docker).await;
        panic!("db still runs\n{log}");
    }
    assert!(took < Duration::from_millis(LEASE_MS + 1_500), "{took:?}");
    assert!(running(&docker, &web.handle).await, "web is not exclusive");

    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let fired = link.take_fired();
    let killed: BTreeSet<String> = fired
        .iter()
        .flat_map(|f| {
            f.killed
                .iter()
                .map(|k| format!("{}/{}", k.workload, k.replica))
        })
        .collect();
    assert_eq!(
        killed,
        BTreeSet::from(["db/0".into(), "db/1".into()]),
        "{fired:?}"
    );
    link.release();
    remove_node_containers(&docker).await;
}
