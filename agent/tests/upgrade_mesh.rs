//! The mesh version over the in-memory network with paused time: an older member holds it and is
//! named, an operator's hold keeps it, it moves within seconds once nothing holds it, and it never
//! moves back. The older member is a node of this build that gossips the build facts of a build
//! speaking wire 7 only (what a build before 8 amounts to: `BuildRecord::legacy`); the real older
//! build is exercised by `scripts/rolling-upgrade.sh` and the recorded frames of `compat.rs`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use shoal::agent::mem::{call, mem_setup, start_mem_node, tokio_clock};
use shoal::agent::run::RunningNode;
use shoal::state::mesh::build::BUILD_KEY;
use shoal::state::mesh::upgrade::{UpgradeView, MESH_KEY};
use shoal::state::store_db::MemDisk;
use shoal::transport::gossip::mem::MemNetwork;
use shoal::wire::api::{Request, Response};
use shoal_core::version::{Since, WIRE_CUR, WIRE_MIN};

const BASE_MS: u64 = 1_800_000_000_000;

/// `n` nodes; the first (n1, the seed) gossips the build facts of a build that speaks wire 7 only
/// from the moment it starts, before anyone could move the version: the mesh an upgrade starts
/// from has its older members first.
async fn cluster(net: &MemNetwork, n: usize) -> Vec<RunningNode> {
    let mut nodes = Vec::new();
    for i in 0..n {
        let disk = MemDisk::new();
        let setup = mem_setup(i, 0, "z");
        let node = start_mem_node(net, setup, &disk, tokio_clock(BASE_MS))
            .await
            .unwrap();
        if i == 0 {
            speak_only_7(&node, true).await;
        }
        nodes.push(node);
    }
    nodes
}

/// Makes `node` gossip the build facts of a build that speaks wire 7 only, or its own again.
async fn speak_only_7(node: &RunningNode, old: bool) {
    let build = if old {
        shoal::state::mesh::build::legacy(None)
    } else {
        shoal::state::mesh::build::this()
    };
    let chitchat = node.node.gossip().chitchat();
    let mut guard = chitchat.lock().await;
    guard.self_node_state().set(BUILD_KEY, build.encode());
}

fn apply_as_user() -> Request {
    let text = "name = \"asuser\"\nuser = \"nobody\"\n[process]\ncommand = [\"sleep\", \"9\"]\n\
                [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";
    Request::Apply {
        specs: vec![shoal_core::spec::WorkloadSpec::from_toml_str(text, "asuser.toml").unwrap()],
    }
}

async fn status(node: &RunningNode) -> UpgradeView {
    match call(node, Request::UpgradeStatus { since: Since }).await {
        Response::Upgrade(view) => *view,
        other => panic!("unexpected {other:?}"),
    }
}

async fn hold(node: &RunningNode, held: bool) {
    match call(node, Request::UpgradeHold { held, since: Since }).await {
        Response::Upgrade(_) => {}
        other => panic!("unexpected {other:?}"),
    }
}

/// Seconds until every node records `version` (at most `within_s`), or `None`.
async fn seconds_until(nodes: &[RunningNode], version: u16, within_s: u64) -> Option<u64> {
    for s in 0..=within_s {
        if nodes.iter().all(|n| n.node.mesh_version() == version) {
            return Some(s);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    None
}

#[tokio::test(start_paused = true)]
async fn an_older_member_holds_the_version_a_hold_keeps_it_and_it_never_moves_back() {
    let net = MemNetwork::new(25);
    let nodes = cluster(&net, 3).await;
    tokio::time::sleep(Duration::from_secs(15)).await;

    for node in &nodes {
        assert_eq!(node.node.mesh_version(), WIRE_MIN, "{}", node.node.name);
        assert_eq!(node.node.wire.load(Ordering::Relaxed), WIRE_MIN);
    }
    let view = status(&nodes[0]).await;
    assert_eq!((view.mesh_version, view.next), (WIRE_MIN, None));
    let holders: Vec<&str> = view.waiting_for.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(holders, ["n1"], "{view:?}");
    assert_eq!(view.builds.len(), 2, "two builds: {view:?}");

    // A spec with a field of wire 8 is refused while the mesh is at 7, naming who holds it.
    let refused = call(&nodes[1], apply_as_user()).await;
    let Response::Error(err) = refused else {
        panic!("applied at mesh version 7: {refused:?}")
    };
    for says in ["`user`", "mesh version 7", "n1 (wire 7)"] {
        assert!(
            err.message.contains(says),
            "{says:?} not in: {}",
            err.message
        );
    }

    // The operator holds the version, then n1 runs the new build: it may move, it does not.
    hold(&nodes[1], true).await;
    speak_only_7(&nodes[0], false).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let view = status(&nodes[2]).await;
    assert_eq!(view.mesh_version, WIRE_MIN, "held: {view:?}");
    assert_eq!(view.next, Some(WIRE_CUR));
    assert!(view.hold.is_some());

    // Released: every node records the new version within a few seconds and sends in it.
    hold(&nodes[0], false).await;
    let took = seconds_until(&nodes, WIRE_CUR, 10).await;
    assert!(took.is_some(), "the mesh version did not move within 10 s");
    tokio::time::sleep(Duration::from_secs(2)).await;
    for node in &nodes {
        assert_eq!(node.node.wire.load(Ordering::Relaxed), WIRE_CUR);
    }
    let applied = call(&nodes[1], apply_as_user()).await;
    assert!(matches!(applied, Response::Applied(_)), "{applied:?}");

    // A member back on the older build does not move it back; it is named as behind.
    speak_only_7(&nodes[0], true).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    for node in &nodes {
        assert_eq!(node.node.mesh_version(), WIRE_CUR, "{}", node.node.name);
    }
    let view = status(&nodes[0]).await;
    assert_eq!(view.waiting_for.len(), 1, "{view:?}");
}

#[tokio::test(start_paused = true)]
async fn a_dead_older_member_holds_the_version_until_it_is_back_on_the_new_build() {
    let net = MemNetwork::new(26);
    let t0 = tokio::time::Instant::now();
    let mut nodes = cluster(&net, 3).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    // n1 dies while it speaks 7 only: the others still count it.
    nodes.remove(0).crash();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let view = status(&nodes[0]).await;
    assert_eq!(view.mesh_version, WIRE_MIN, "{view:?}");
    let n1 = view
        .waiting_for
        .iter()
        .find(|h| h.name == "n1")
        .expect("n1 named");
    assert!(!n1.alive, "named as dead: {view:?}");

    // n1 comes back on the new build (a fresh store: what a replaced host looks like), joining
    // through n2.
    let disk = MemDisk::new();
    let mut setup = mem_setup(0, 0, "z");
    setup.seeds = vec![mem_setup(1, 0, "z").gossip_addr];
    // Its clock reads what the others' read now (a generation above the dead identity's, and no
    // skew that would refuse its writes).
    let now_ms = BASE_MS + t0.elapsed().as_millis() as u64;
    let back = start_mem_node(&net, setup, &disk, tokio_clock(now_ms))
        .await
        .unwrap();
    nodes.push(back);
    let took = seconds_until(&nodes, WIRE_CUR, 15).await;
    let views = [status(&nodes[0]).await, status(&nodes[2]).await];
    assert!(
        took.is_some(),
        "the mesh version did not move after n1 came back: {views:#?}"
    );
}

/// Probes need no mesh version: while an older member holds the mesh at 7, the members whose build
/// speaks probes judge each other by them from their start (a fresh mesh is not left to the
/// heartbeat detector's few samples), the older member is left to the heartbeat detector, and a
/// killed member is declared dead by the survivors' probes.
#[tokio::test(start_paused = true)]
async fn members_that_speak_probes_judge_each_other_by_them_while_an_older_member_holds_the_version(
) {
    let net = MemNetwork::new(28);
    let mut nodes = cluster(&net, 4).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    for node in &nodes {
        assert_eq!(node.node.mesh_version(), WIRE_MIN, "{}", node.node.name);
    }
    // n2..n4 each judge the two others that speak probes, not n1 (its build facts say wire 7).
    for node in &nodes[1..] {
        assert_eq!(node.node.verdicts().len(), 2, "{}", node.node.name);
    }
    nodes.remove(2).crash();
    let survivors = [&nodes[1], &nodes[2]];
    let mut dead_after = None;
    for tenth in 0..100u64 {
        let mut all = true;
        for s in survivors {
            let members = s.node.members().await;
            all &= members.iter().any(|m| m.name == "n3" && !m.alive);
        }
        if all {
            dead_after = Some(tenth);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(dead_after.is_some(), "n3 was not held dead within 10 s");
    for s in survivors {
        let events = s.node.take_probe_events();
        assert!(
            events
                .iter()
                .any(|e| e.name == "n3" && e.kind == shoal_core::verdict::VerdictKind::Dead),
            "{}'s probes did not declare n3 dead: {events:?}",
            s.node.name
        );
    }
}

/// A node joins through n1 with an empty store (a replaced host). Its store has not synced when
/// `start_mem_node` returns (anti-entropy starts after the name check), so what it runs then came
/// from the peers' gossip (`MESH_KEY`).
async fn join_fresh(net: &MemNetwork, i: usize, t0: tokio::time::Instant) -> RunningNode {
    let disk = MemDisk::new();
    let setup = mem_setup(i, 0, "z");
    let now_ms = BASE_MS + t0.elapsed().as_millis() as u64;
    start_mem_node(net, setup, &disk, tokio_clock(now_ms))
        .await
        .unwrap()
}

fn store_holds_version(node: &RunningNode) -> bool {
    node.node.stored_mesh_version().is_some()
}

#[tokio::test(start_paused = true)]
async fn a_fresh_agent_runs_the_mesh_version_its_peers_gossip_before_its_store_syncs() {
    let net = MemNetwork::new(27);
    let t0 = tokio::time::Instant::now();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let setup = mem_setup(i, 0, "z");
        let node = start_mem_node(&net, setup, &MemDisk::new(), tokio_clock(BASE_MS))
            .await
            .unwrap();
        nodes.push(node);
    }
    assert!(
        seconds_until(&nodes, WIRE_CUR, 20).await.is_some(),
        "the mesh version did not reach {WIRE_CUR}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    for node in &nodes {
        let gossiped = node.node.gossip().chitchat();
        let mut guard = gossiped.lock().await;
        let published = guard.self_node_state().get(MESH_KEY).map(str::to_string);
        assert_eq!(published, Some(WIRE_CUR.to_string()), "{}", node.node.name);
    }

    let fresh = join_fresh(&net, 3, t0).await;
    assert!(
        !store_holds_version(&fresh),
        "the store synced before the name check ended: the test proves nothing"
    );
    assert_eq!(fresh.node.mesh_version(), WIRE_CUR);
    assert_eq!(fresh.node.wire.load(Ordering::Relaxed), WIRE_CUR);
    // And it gossips what it took, for the next fresh agent.
    let gossiped = fresh.node.gossip().chitchat();
    let published = gossiped
        .lock()
        .await
        .self_node_state()
        .get(MESH_KEY)
        .map(str::to_string);
    assert_eq!(published, Some(WIRE_CUR.to_string()));
}

#[tokio::test(start_paused = true)]
async fn a_lying_peer_cannot_raise_a_fresh_agents_mesh_version() {
    let net = MemNetwork::new(28);
    let t0 = tokio::time::Instant::now();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let setup = mem_setup(i, 0, "z");
        let node = start_mem_node(&net, setup, &MemDisk::new(), tokio_clock(BASE_MS))
            .await
            .unwrap();
        if i == 0 {
            // An operator holds the version before anyone could move it.
            hold(&node, true).await;
        }
        nodes.push(node);
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    for node in &nodes {
        assert_eq!(node.node.mesh_version(), WIRE_MIN, "{}", node.node.name);
    }
    // n2 has a valid certificate and lies: it says it runs the newest version.
    {
        let chitchat = nodes[1].node.gossip().chitchat();
        let mut guard = chitchat.lock().await;
        guard.self_node_state().set(MESH_KEY, WIRE_CUR.to_string());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    let fresh = join_fresh(&net, 3, t0).await;
    assert_eq!(
        fresh.node.mesh_version(),
        WIRE_MIN,
        "one liar of three moved it"
    );
    assert_eq!(fresh.node.wire.load(Ordering::Relaxed), WIRE_MIN);
    tokio::time::sleep(Duration::from_secs(5)).await;
    for node in nodes.iter().chain([&fresh]) {
        assert_eq!(node.node.mesh_version(), WIRE_MIN, "{}", node.node.name);
    }
}

/// Node `i` of cell `c` (the second of each speaks wire 7 only at first): named `c{c}-n{i}`, on subnet `30 + c`, seeded through the cell's first
/// node, and cell 1 through the first node of cell 0.
fn cell_setup(c: usize, i: usize) -> shoal::agent::run::MeshSetup {
    let mut s = mem_setup(i, 30 + c as u8, "z");
    s.name = format!("c{c}-n{i}");
    s.cell = format!("c{c}");
    s.cell_seeds = match c {
        0 => Vec::new(),
        _ => vec![mem_setup(0, 30, "z").record.api_addr],
    };
    s
}

#[tokio::test(start_paused = true)]
async fn another_cells_older_member_holds_the_version_and_is_named_through_its_cells_report() {
    let net = MemNetwork::new(27);
    let mut nodes = Vec::new();
    for c in 0..2 {
        for i in 0..2 {
            let node = start_mem_node(
                &net,
                cell_setup(c, i),
                &MemDisk::new(),
                tokio_clock(BASE_MS),
            )
            .await
            .unwrap();
            if i == 1 {
                speak_only_7(&node, true).await;
            }
            nodes.push(node);
        }
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
    // A mesh of two cells, each with a member of the older build; c0's is upgraded first.
    speak_only_7(&nodes[1], false).await;
    tokio::time::sleep(Duration::from_secs(10)).await;

    // Cell c0 knows c1 only through c1's report: c1-n1 holds the version, named from c0.
    for node in &nodes {
        assert_eq!(node.node.mesh_version(), WIRE_MIN, "{}", node.node.name);
    }
    let view = status(&nodes[0]).await;
    let holders: Vec<&str> = view.waiting_for.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(holders, ["cell c1: c1-n1"], "{view:?}");
    assert_eq!(view.next, None, "{view:?}");

    // c1-n1 on the new build: c1 reports it and the whole mesh moves, both cells.
    speak_only_7(&nodes[3], false).await;
    let took = seconds_until(&nodes, WIRE_CUR, 20).await;
    assert!(took.is_some(), "the mesh version did not move within 20 s");
    let view = status(&nodes[1]).await;
    assert!(view.waiting_for.is_empty(), "{view:?}");
}
