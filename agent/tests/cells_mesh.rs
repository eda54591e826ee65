//! A mesh of three cells of three agents each, over the in-memory network and runtime under
//! paused time: each cell gossips only within itself, every agent learns every cell's summary,
//! a spec applied in one cell reaches the others, two-level placement runs every replica exactly
//! once across the cells, and when a whole cell dies its replicas run in the others.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shoal::agent::mem::{join_mem_node, mem_setup, tokio_clock};
use shoal::agent::run::MeshSetup;
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
const CELLS: usize = 3;
const PER_CELL: usize = 3;

/// Agent `i` of cell `c`: named `c{c}-n{i}`, on subnet `20 + c`, seeded through the cell's
/// first agent, and every cell but the first through the first agent of the first.
fn setup(c: usize, i: usize) -> MeshSetup {
    let mut s = mem_setup(i, 20 + c as u8, "z1");
    s.name = format!("c{c}-n{i}");
    s.cell = format!("c{c}");
    s.cell_seeds = match c {
        0 => Vec::new(),
        _ => vec![mem_setup(0, 20, "z1").record.api_addr],
    };
    s
}

struct Running {
    agent: Agent,
    runtime: MemRuntime,
    cell: usize,
}

async fn start(net: &MemNetwork, c: usize, i: usize, disk: &MemDisk) -> Running {
    let setup = setup(c, i);
    let api = setup.record.api_addr;
    let name = setup.name.clone();
    let clock = tokio_clock(BASE_MS);
    let running = join_mem_node(net, setup, disk, clock.clone())
        .await
        .unwrap();
    let runtime = MemRuntime::new(&name, (c * PER_CELL + i) as u64);
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
    Running {
        agent,
        runtime,
        cell: c,
    }
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

/// Replica index -> the agents running it, over `agents`.
async fn running(agents: &[Running]) -> BTreeMap<u32, Vec<String>> {
    let mut at: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for a in agents {
        for i in a.runtime.list().await.unwrap() {
            if i.phase.may_be_alive() {
                at.entry(i.replica.replica)
                    .or_default()
                    .push(a.agent.node().name.clone());
            }
        }
    }
    at
}

#[tokio::test(start_paused = true)]
async fn three_cells_place_across_and_a_lost_cell_moves_to_the_others() {
    let net = MemNetwork::new(13);
    let disks: Vec<MemDisk> = (0..CELLS * PER_CELL).map(|_| MemDisk::new()).collect();
    let mut agents = Vec::new();
    for c in 0..CELLS {
        for i in 0..PER_CELL {
            agents.push(start(&net, c, i, &disks[c * PER_CELL + i]).await);
        }
    }
    tokio::time::sleep(Duration::from_secs(10)).await;

    // Each cell gossips only within itself; every agent knows every cell, none down.
    for a in &agents {
        let node = a.agent.node();
        let members = node.members().await;
        assert_eq!(members.len(), PER_CELL, "{} sees {members:?}", node.name);
        let cells = node.cells.list();
        let names: Vec<&str> = cells.iter().map(|c| c.summary.cell.as_str()).collect();
        assert_eq!(names, ["c0", "c1", "c2"], "{}", node.name);
        assert!(cells.iter().all(|c| !c.down), "{}: {cells:?}", node.name);
        assert!(cells.iter().all(|c| c.summary.members == PER_CELL as u32));
    }

    // Applied in cell c0, the spec reaches every cell, and every replica runs once.
    let applied = call(
        &agents[0].agent,
        Request::Apply {
            specs: vec![spec(12)],
        },
    )
    .await;
    assert!(matches!(applied, Response::Applied(_)), "{applied:?}");
    tokio::time::sleep(Duration::from_secs(15)).await;
    for a in &agents {
        let req = Request::List {
            after: None,
            limit: PAGE_ITEMS_MAX,
        };
        let Response::Workloads { workloads, .. } = call(&a.agent, req).await else {
            panic!("get failed on {}", a.agent.node().name);
        };
        assert_eq!(workloads.len(), 1, "{} holds the spec", a.agent.node().name);
    }
    let at = running(&agents).await;
    assert_eq!(at.len(), 12, "every replica runs: {at:?}");
    assert!(
        at.values().all(|n| n.len() == 1),
        "each exactly once: {at:?}"
    );
    let cells_used: std::collections::BTreeSet<&str> = at
        .values()
        .map(|n| n[0].split('-').next().unwrap())
        .collect();
    assert!(cells_used.len() >= 2, "placed across cells: {at:?}");

    // Cell c1 dies whole: its agents stop and their API goes away.
    let (lost, mut alive): (Vec<Running>, Vec<Running>) =
        agents.into_iter().partition(|a| a.cell == 1);
    for i in 0..PER_CELL {
        net.stop_rpc(setup(1, i).record.api_addr);
    }
    for a in lost {
        a.agent.crash();
    }
    tokio::time::sleep(Duration::from_secs(25)).await;
    for a in &alive {
        let node = a.agent.node();
        let down: Vec<String> = node
            .cells
            .list()
            .into_iter()
            .filter(|c| c.down)
            .map(|c| c.summary.cell)
            .collect();
        assert_eq!(down, ["c1"], "{} holds c1 down", node.name);
        // ...and said so once, in its events (and never of a cell that stayed up).
        let Response::Events(events) = call(
            &a.agent,
            Request::Events {
                after: 0,
                limit: 1000,
            },
        )
        .await
        else {
            panic!("events failed on {}", node.name);
        };
        let cell_events: Vec<(&str, &str)> = events
            .iter()
            .filter(|e| e.kind.starts_with("cell-"))
            .map(|e| (e.kind.as_str(), e.reason.as_str()))
            .collect();
        // Stale first (degraded, mesh version 14), then down once the probes of its members
        // failed; down once, and only c1.
        let kinds: Vec<&str> = cell_events.iter().map(|e| e.0).collect();
        assert!(
            kinds == ["cell-degraded", "cell-down"] || kinds == ["cell-down"],
            "{}: {cell_events:?}",
            node.name
        );
        assert!(
            cell_events.iter().all(|e| e.1.starts_with("cell c1:")),
            "{cell_events:?}"
        );
    }
    let at = running(&alive).await;
    assert_eq!(at.len(), 12, "every replica runs in c0 and c2: {at:?}");
    assert!(
        at.values().all(|n| n.len() == 1),
        "each exactly once: {at:?}"
    );
    alive.clear();
}
