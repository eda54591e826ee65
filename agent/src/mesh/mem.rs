//! Mesh nodes on the in-memory network, for in-process tests and the simulator: the same
//! [`start_node`] as the real agent, over [`MemNetwork`] and an in-memory store.

use std::net::SocketAddr;
use std::sync::Arc;

use shoal_core::store::StoreConfig;

use super::node::WallClock;
use super::run::{api_handler, start_node, MeshSetup, RunningNode};
use crate::gossip::mem::MemNetwork;
use crate::store_db::{DesiredStore, MemDisk};
use crate::tls::PeerName;

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
    let store = DesiredStore::open_in_memory(disk, &setup.name, StoreConfig::default())?;
    let api: SocketAddr = setup.record.api_addr;
    let name = PeerName(setup.name.clone());
    let rpc = Arc::new(net.rpc_client(api, name.clone()));
    let running = start_node(setup, store, &net.transport(), rpc, clock, true).await?;
    net.serve_rpc(api, name, api_handler(running.node.clone()));
    Ok(running)
}
