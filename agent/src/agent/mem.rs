//! Mesh nodes on the in-memory network, for in-process tests and the simulator: the same
//! [`start_node`] as the real agent, over [`MemNetwork`] and an in-memory store.

use std::net::SocketAddr;
use std::sync::Arc;

use shoal_core::store::StoreConfig;

use super::run::{api_handler, start_node, MeshSetup, RunningNode};
use crate::identity::pki::Role;
use crate::identity::tls::{Peer, PeerName};
use crate::state::mesh::node::WallClock;
use crate::state::store_db::{DesiredStore, MemDisk};
use crate::transport::gossip::mem::MemNetwork;

/// A wall clock that follows tokio's clock (pausable) from `base_ms`.
pub fn tokio_clock(base_ms: u64) -> WallClock {
    let start = tokio::time::Instant::now();
    Arc::new(move || base_ms + start.elapsed().as_millis() as u64)
}

/// Starts a node named `setup.name` on `net`, its store on `disk` (which survives a crash of
/// the node when the caller keeps it), serving the API at `setup.record.api_addr`.
pub async fn start_mem_node(
    net: &MemNetwork,
    setup: MeshSetup,
    disk: &MemDisk,
    clock: WallClock,
) -> anyhow::Result<RunningNode> {
    let api: SocketAddr = setup.record.api_addr;
    let name = PeerName(setup.name.clone());
    let running = join_mem_node(net, setup, disk, clock).await?;
    net.serve_rpc(api, name, api_handler(running.node.clone()));
    Ok(running)
}

/// Like [`start_mem_node`] without serving the API (an agent serves its own handler).
pub async fn join_mem_node(
    net: &MemNetwork,
    setup: MeshSetup,
    disk: &MemDisk,
    clock: WallClock,
) -> anyhow::Result<RunningNode> {
    let store = DesiredStore::open_in_memory(disk, &setup.name, StoreConfig::default())?;
    let api: SocketAddr = setup.record.api_addr;
    let rpc = Arc::new(net.rpc_client(api, Peer::new(setup.name.clone(), Role::Node)));
    let probes = net.probe_channel(setup.gossip_addr);
    start_node(
        setup,
        store,
        &net.transport(),
        rpc,
        clock,
        true,
        Some(probes),
    )
    .await
}

/// The setup of node `i` (named `n{i+1}`) of an in-memory mesh on `10.0.{subnet}.0/24`: gossip on
/// port 7000, API on 7001, seeded through node 0, 4 cores and 8 GiB in `zone`.
pub fn mem_setup(i: usize, subnet: u8, zone: &str) -> MeshSetup {
    let addr = |port: u16| SocketAddr::from(([10, 0, subnet, i as u8 + 1], port));
    let seed = SocketAddr::from(([10, 0, subnet, 1], 7000));
    MeshSetup {
        name: format!("n{}", i + 1),
        gossip_addr: addr(7000),
        seeds: if i == 0 { vec![] } else { vec![seed] },
        record: crate::state::mesh::record::NodeRecord {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            labels: Default::default(),
            zone: zone.to_string(),
            draining: false,
            agent_version: "test".into(),
            placement_version: shoal_core::placement::PLACEMENT_ALGORITHM_VERSION,
            api_addr: addr(7001),
            limits_note: None,
            ports: crate::state::mesh::record::default_ports(),
        },
        tuning: crate::transport::gossip::GossipTuning::default(),
        cluster_id: "test".into(),
        cell: crate::state::cells::DEFAULT_CELL.to_string(),
        cell_seeds: Vec::new(),
        authority: Default::default(),
        wire: crate::state::mesh::upgrade::wire_cell(),
        capabilities: None,
        freeze: crate::transport::freeze::Freeze::none(),
    }
}

/// Hands `req` to `node`'s API handler as the client `test`.
pub async fn call(
    node: &RunningNode,
    req: crate::wire::api::Request,
) -> crate::wire::api::Response {
    crate::dispatch::Api::new(node.node.clone(), None)
        .handle_request(req, Peer::new("test", Role::Client))
        .await
}
