//! The agent as one composition root over the in-memory network and runtime, under paused time:
//! it runs its slice through the API, and dropping it frees its node and host (no ownership
//! cycle keeps a crashed agent alive).

use std::sync::Arc;
use std::time::Duration;

use shoal::agent::mem::{join_mem_node, mem_setup, tokio_clock};
use shoal::agent::Agent;
use shoal::identity::pki::Role;
use shoal::identity::tls::{Peer, PeerName};
use shoal::node::host::{Host, HostConfig};
use shoal::node::runtime::mem::MemRuntime;
use shoal::node::runtime::Runtime;
use shoal::state::store_db::MemDisk;
use shoal::transport::gossip::mem::MemNetwork;
use shoal::wire::api::{Request, Response, PAGE_ITEMS_MAX};
use shoal_core::spec::WorkloadSpec;

const BASE_MS: u64 = 1_800_000_000_000;

async fn start_agent(net: &MemNetwork, i: usize, disk: &MemDisk) -> (Agent, MemRuntime) {
    let setup = mem_setup(i, 3, "z1");
    let api = setup.record.api_addr;
    let name = setup.name.clone();
    let clock = tokio_clock(BASE_MS);
    let running = join_mem_node(net, setup, disk, clock.clone())
        .await
        .unwrap();
    let runtime = MemRuntime::new(&name, i as u64);
    let mono = shoal::node::host::clock::monotonic_from(&clock);
    let config = HostConfig {
        tick: Duration::from_millis(200),
        ..HostConfig::default()
    };
    let (host, host_loop) = Host::new(
        running.node.clone(),
        Arc::new(runtime.clone()),
        clock,
        mono,
        config,
    );
    let agent = Agent::start(running, host, host_loop);
    net.serve_rpc(api, PeerName(name), agent.handler());
    (agent, runtime)
}

async fn call(agent: &Agent, req: Request) -> Response {
    agent
        .api()
        .clone()
        .handle_request(req, Peer::new("test", Role::Client))
        .await
}

fn spec(replicas: u32) -> WorkloadSpec {
    let text = format!(
        "name = \"web\"\nreplicas = {replicas}\n[process]\ncommand = [\"sleep\", \"9\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
    );
    WorkloadSpec::from_toml_str(&text, "test.toml").unwrap()
}

async fn running_here(runtime: &MemRuntime) -> usize {
    let list = runtime.list().await.unwrap();
    list.iter().filter(|i| i.phase.may_be_alive()).count()
}

#[tokio::test(start_paused = true)]
async fn an_agent_runs_its_slice_and_frees_everything_when_dropped() {
    let net = MemNetwork::new(11);
    let disks: Vec<MemDisk> = (0..3).map(|_| MemDisk::new()).collect();
    let mut agents = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        agents.push(start_agent(&net, i, disk).await);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let applied = call(
        &agents[0].0,
        Request::Apply {
            specs: vec![spec(3)],
        },
    )
    .await;
    assert!(matches!(applied, Response::Applied(_)), "{applied:?}");
    tokio::time::sleep(Duration::from_secs(15)).await;
    let mut total = 0;
    for (_, runtime) in &agents {
        total += running_here(runtime).await;
    }
    assert_eq!(total, 3, "every replica runs once across the mesh");
    // The API answers for the host from its snapshot: status shows three running replicas.
    let req = Request::Status {
        name: "web".into(),
        after: None,
        limit: PAGE_ITEMS_MAX,
    };
    let Response::Status { view: status, .. } = call(&agents[1].0, req).await else {
        panic!("status failed");
    };
    let running = status
        .instances
        .iter()
        .filter(|i| i.phase == "running")
        .count();
    assert_eq!(running, 3, "{status:?}");

    // Crash the first agent: once its tasks end and its API is no longer served, nothing holds
    // its node or its host.
    let (agent, _runtime) = agents.remove(0);
    let node = Arc::downgrade(agent.node());
    let host = Arc::downgrade(agent.host());
    net.stop_rpc(mem_setup(0, 3, "z1").record.api_addr);
    agent.crash();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        node.upgrade().is_none(),
        "the crashed agent's node is still referenced"
    );
    assert!(
        host.upgrade().is_none(),
        "the crashed agent's host is still referenced"
    );

    // A plain drop frees them too.
    let (agent, _runtime) = agents.remove(0);
    let node = Arc::downgrade(agent.node());
    let host = Arc::downgrade(agent.host());
    net.stop_rpc(mem_setup(1, 3, "z1").record.api_addr);
    drop(agent);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        node.upgrade().is_none(),
        "the dropped agent's node is still referenced"
    );
    assert!(
        host.upgrade().is_none(),
        "the dropped agent's host is still referenced"
    );
}
