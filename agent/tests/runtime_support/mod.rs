//! Helpers shared by the runtime tests: specs from TOML, start requests, waiting for events.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use shoal::core::instance::ReplicaId;
use shoal::core::spec::WorkloadSpec;
use shoal::node::runtime::{RuntimeEvent, StartRequest};
use tokio::sync::broadcast;

/// A validated spec from TOML (panics with every problem if invalid: a test bug).
pub fn spec(toml: &str) -> Arc<WorkloadSpec> {
    match WorkloadSpec::from_toml_str(toml, "test.toml") {
        Ok(spec) => Arc::new(spec),
        Err(e) => panic!("test spec invalid:\n{e}"),
    }
}

/// A process workload named `name` running `command`, with 100m CPU and 16Mi.
pub fn process_spec(name: &str, command: &[&str]) -> Arc<WorkloadSpec> {
    let command: Vec<String> = command.iter().map(|c| format!("{c:?}")).collect();
    spec(&format!(
        "name = \"{name}\"\n[process]\ncommand = [{}]\n[resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n",
        command.join(", ")
    ))
}

/// A start request for replica `replica` of `spec` on `node`, at spec version "v1".
pub fn request(spec: &Arc<WorkloadSpec>, replica: u32, node: &str) -> StartRequest {
    StartRequest {
        replica: ReplicaId::new(&spec.name, replica),
        spec: spec.clone(),
        spec_version: "v1".into(),
        node: node.into(),
        fence_token: None,
        addr: std::net::IpAddr::from([127, 0, 0, 1]),
        ports: Default::default(),
        // The runtime tests may use any host path.
        volume_roots: Arc::from(vec!["/".to_string()]),
    }
}

/// Waits for the `Exited` events of every one of `handles`, in whatever order they come (waiting
/// for one after another would skip, and lose, an exit that came first); panics after `limit`.
pub async fn exits_of(
    events: &mut broadcast::Receiver<RuntimeEvent>,
    handles: &[&str],
    limit: Duration,
) -> std::collections::BTreeMap<String, Option<i32>> {
    let mut seen = std::collections::BTreeMap::new();
    let wait = async {
        while seen.len() < handles.len() {
            match events.recv().await {
                Ok(RuntimeEvent::Exited {
                    handle, exit_code, ..
                }) if handles.contains(&handle.as_str()) => {
                    seen.insert(handle, exit_code);
                }
                Ok(_) => {}
                Err(e) => panic!("event stream failed: {e}"),
            }
        }
    };
    if tokio::time::timeout(limit, wait).await.is_err() {
        panic!("exits of {handles:?} within {limit:?}: only {seen:?}");
    }
    seen
}

/// Waits for the `Exited` event of `handle`, skipping others; panics after `limit`.
pub async fn exit_of(
    events: &mut broadcast::Receiver<RuntimeEvent>,
    handle: &str,
    limit: Duration,
) -> Option<i32> {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(RuntimeEvent::Exited {
                    handle: h,
                    exit_code,
                    ..
                }) if h == handle => return exit_code,
                Ok(_) => {}
                Err(e) => panic!("event stream failed: {e}"),
            }
        }
    };
    match tokio::time::timeout(limit, wait).await {
        Ok(code) => code,
        Err(_) => panic!("no exit event for {handle} within {limit:?}"),
    }
}

/// Polls `check` every 20 ms until it holds; panics after `limit` with `what`.
pub async fn eventually<F: FnMut() -> bool>(limit: Duration, what: &str, mut check: F) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
