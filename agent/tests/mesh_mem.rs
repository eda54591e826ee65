//! Mesh nodes in one process over the in-memory network with paused time: replication,
//! partitions and healing, and a failing disk refusing an apply without losing acknowledged specs.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use shoal::agent::mem::{call, mem_setup, start_mem_node, tokio_clock};
use shoal::agent::run::{MeshSetup, RunningNode};
use shoal::state::store_db::MemDisk;
use shoal::transport::gossip::mem::MemNetwork;
use shoal::wire::api::{ErrorKind, Request, Response, PAGE_ITEMS_MAX};
use shoal_core::spec::WorkloadSpec;

const BASE_MS: u64 = 1_800_000_000_000;

fn gossip_addr(i: usize) -> SocketAddr {
    setup(i).gossip_addr
}

fn setup(i: usize) -> MeshSetup {
    mem_setup(i, 0, &format!("z{}", i % 2))
}

fn spec(name: &str, replicas: u32) -> WorkloadSpec {
    let text = format!(
        "name = \"{name}\"\nreplicas = {replicas}\n[process]\ncommand = [\"sleep\", \"9\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
    );
    WorkloadSpec::from_toml_str(&text, "test.toml").unwrap()
}

async fn names(node: &RunningNode) -> Vec<String> {
    let req = Request::List {
        after: None,
        limit: PAGE_ITEMS_MAX,
    };
    match call(node, req).await {
        Response::Workloads {
            workloads,
            next_after: None,
        } => workloads.into_iter().map(|w| w.name).collect(),
        other => panic!("unexpected {other:?}"),
    }
}

async fn cluster(net: &MemNetwork, disks: &[MemDisk]) -> Vec<RunningNode> {
    let mut nodes = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        nodes.push(
            start_mem_node(net, setup(i), disk, tokio_clock(BASE_MS))
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    nodes
}

#[tokio::test(start_paused = true)]
async fn replicates_heals_partitions_and_refuses_a_write_on_a_failing_disk() {
    let net = MemNetwork::new(7);
    let disks: Vec<MemDisk> = (0..5).map(|_| MemDisk::new()).collect();
    let nodes = cluster(&net, &disks).await;
    for node in &nodes {
        let alive = node.node.members().await.iter().filter(|m| m.alive).count();
        assert_eq!(alive, 5, "{} sees {alive} live members", node.node.name);
    }

    // Applied at n1: durable on two agents at once, on all five within 2 s.
    let Response::Applied(applied) = call(
        &nodes[0],
        Request::Apply {
            specs: vec![spec("web", 3)],
        },
    )
    .await
    else {
        panic!("apply failed");
    };
    assert!(applied[0].durable_on.len() >= 2, "{applied:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    for node in &nodes {
        assert_eq!(names(node).await, ["web"], "{}", node.node.name);
    }

    // Cut n4 and n5 off; a spec applied on the majority side reaches them after the heal.
    // Faults are per host: the cut takes gossip and API alike.
    let a: Vec<IpAddr> = (0..3).map(|i| gossip_addr(i).ip()).collect();
    let b: Vec<IpAddr> = (3..5).map(|i| gossip_addr(i).ip()).collect();
    net.partition(&a, &b);
    let Response::Applied(_) = call(
        &nodes[1],
        Request::Apply {
            specs: vec![spec("api", 2)],
        },
    )
    .await
    else {
        panic!("apply on the majority side failed");
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(names(&nodes[4]).await, ["web"], "the partition leaked");
    net.heal();
    tokio::time::sleep(Duration::from_secs(5)).await;
    for node in &nodes {
        assert_eq!(
            names(node).await,
            ["api", "web"],
            "{} did not catch up",
            node.node.name
        );
    }

    // n3's disk fails: its apply fails with a storage error, and nothing acknowledged is lost.
    // (A real full disk is exercised with a small tmpfs in mesh_agents.rs.)
    disks[2].set_failing(true);
    match call(
        &nodes[2],
        Request::Apply {
            specs: vec![spec("big", 1)],
        },
    )
    .await
    {
        Response::Error(e) => {
            assert_eq!(e.kind, ErrorKind::Storage, "{e:?}");
            assert!(
                e.message.contains("nothing was acknowledged"),
                "{}",
                e.message
            );
        }
        other => panic!("apply on a failing disk answered {other:?}"),
    }
    assert_eq!(names(&nodes[2]).await, ["api", "web"]);
    disks[2].set_failing(false);
    for node in nodes {
        node.crash();
    }
}
