//! Fencing tokens in the runtimes: an exclusive replica's process sees `SHOAL_FENCE_TOKEN` in its
//! environment, a spec cannot fake it, and the runtime lists the instance with its token, after a
//! restart of the agent (a fresh runtime adopting the process) too. The in-memory runtime keeps it
//! the same way.

mod runtime_support;

use std::time::Duration;

use runtime_support::{eventually, exits_of, process_spec, request, spec};
use shoal::core::instance::Phase;
use shoal::node::runtime::logs::Stream;
use shoal::node::runtime::mem::MemRuntime;
use shoal::node::runtime::process::{ProcessConfig, ProcessRuntime};
use shoal::node::runtime::{Runtime, FENCE_TOKEN_ENV};

const NODE: &str = "n1";
const EVENT_WAIT: Duration = Duration::from_secs(5);
const TOKEN: u64 = 1_800_000_123_456;

async fn open(dir: &std::path::Path) -> ProcessRuntime {
    ProcessRuntime::open(ProcessConfig::new(dir, NODE))
        .await
        .expect("open runtime")
}

#[tokio::test]
async fn a_process_sees_its_fencing_token_and_a_spec_cannot_fake_one() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(dir.path()).await;
    let mut events = rt.events();
    let spec = spec(
        r#"name = "db"
[process]
command = ["sh", "-c", "echo token=${SHOAL_FENCE_TOKEN-none}"]
env = { SHOAL_FENCE_TOKEN = "999999999999999" }
[resources]
cpu = "100m"
memory = "16Mi"
[placement]
exclusive = true
"#,
    );
    let mut with_token = request(&spec, 0, NODE);
    with_token.fence_token = Some(TOKEN);
    let owner = rt.start(with_token).await.unwrap();
    assert_eq!(owner.fence_token, Some(TOKEN));
    // A normal replica: the spec's own value is dropped, not passed as a token.
    let normal = rt.start(request(&spec, 1, NODE)).await.unwrap();
    assert_eq!(normal.fence_token, None);
    // Both exit at once, in either order: wait for the two together.
    let handles = [owner.handle.as_str(), normal.handle.as_str()];
    let exits = exits_of(&mut events, &handles, EVENT_WAIT).await;
    assert!(exits.values().all(|code| *code == Some(0)), "{exits:?}");
    let stdout = |h: &str| rt.output(h, Stream::Stdout);
    eventually(Duration::from_secs(5), "the output to be relayed", || {
        !stdout(&owner.handle).is_empty() && !stdout(&normal.handle).is_empty()
    })
    .await;
    assert_eq!(stdout(&owner.handle), format!("token={TOKEN}\n"));
    assert_eq!(stdout(&normal.handle), "token=none\n");
    let listed = rt.list().await.unwrap();
    let token_of = |h: &str| listed.iter().find(|i| i.handle == h).unwrap().fence_token;
    assert_eq!(
        token_of(&owner.handle),
        Some(TOKEN),
        "an exited record keeps it"
    );
    assert_eq!(token_of(&normal.handle), None);
}

#[tokio::test]
async fn an_adopted_process_keeps_its_fencing_token() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path()).await;
    let spec = process_spec("db", &["sleep", "30"]);
    let mut req = request(&spec, 0, NODE);
    req.fence_token = Some(TOKEN);
    let started = first.start(req).await.unwrap();
    drop(first); // the agent restarts; its process keeps running

    let second = open(dir.path()).await;
    let listed = second.list().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].handle, started.handle);
    assert_eq!(listed[0].phase, Phase::Running);
    assert_eq!(listed[0].fence_token, Some(TOKEN), "adopted with its token");
    second
        .stop(&started.handle, Duration::from_secs(5))
        .await
        .expect("stop adopted");
}

#[tokio::test(start_paused = true)]
async fn the_memory_runtime_keeps_the_token() {
    let rt = MemRuntime::new(NODE, 1);
    let spec = process_spec("db", &["db"]);
    let mut req = request(&spec, 0, NODE);
    req.fence_token = Some(7);
    let inst = rt.start(req).await.unwrap();
    assert_eq!(inst.fence_token, Some(7));
    assert_eq!(rt.list().await.unwrap()[0].fence_token, Some(7));
    assert_eq!(FENCE_TOKEN_ENV, "SHOAL_FENCE_TOKEN");
}
