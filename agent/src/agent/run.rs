//! Starting a mesh node over any chitchat transport: joins, checks its name, runs anti-entropy
//! and watches its seeds. The agent process around it is [`crate::agent`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chitchat::spawn_chitchat_with;
use chitchat::transport::Transport;

use crate::state::mesh::node::{MeshNode, WallClock};
use crate::state::mesh::record::{NodeRecord, DIGEST_KEY, NODE_KEY};
use crate::state::mesh::sync::to_hex;
use crate::state::mesh::view::{LEAVING_KEY, RESTARTING_KEY, STALE_KEY};
use crate::state::store_db::DesiredStore;
use crate::transport::freeze::Freeze;
use crate::transport::gossip::{chitchat_config_tuned, GossipTuning};
use crate::transport::rpc::{self, RpcClient};
use crate::wire::api::{Request, Response};

/// How long a leaving agent keeps gossiping its "leaving" mark before it stops.
pub const LEAVE_ANNOUNCE: Duration = Duration::from_millis(800);
/// How long an agent stopping for a planned restart gossips it before it stops: a few gossip
/// rounds. A peer that misses it sees a crash, which is safe (docs/reconcile.md).
pub const RESTART_ANNOUNCE: Duration = Duration::from_millis(400);

/// The cluster id: derived from the CA certificate, so two clusters never mix gossip.
pub fn cluster_id(ca_der: &[u8]) -> String {
    format!("shoal-{:016x}", xxhash_rust::xxh3::xxh3_64(ca_der))
}

/// What a mesh node needs besides its store and network.
#[derive(Clone, Debug)]
pub struct MeshSetup {
    /// Node id.
    pub name: String,
    /// Gossip address, bound and advertised.
    pub gossip_addr: SocketAddr,
    /// Seeds to join through (peers saved in the store are added).
    pub seeds: Vec<SocketAddr>,
    /// The record to gossip.
    pub record: NodeRecord,
    /// Gossip timing.
    pub tuning: GossipTuning,
    /// Cluster id (derived from the CA).
    pub cluster_id: String,
    /// The cell (a DNS label; [`crate::state::cells::DEFAULT_CELL`] for a one-cell mesh): its own
    /// gossip domain.
    pub cell: String,
    /// API addresses of agents of other cells to learn the mesh's cells from.
    pub cell_seeds: Vec<SocketAddr>,
    /// Signs this node's writes and checks its peers' ([`Authority::unsigned`] on the in-memory
    /// network).
    ///
    /// [`Authority::unsigned`]: crate::identity::authority::Authority::unsigned
    pub authority: Arc<crate::identity::authority::Authority>,
    /// The wire version this node sends in, shared with its transport and RPC client
    /// ([`crate::state::mesh::upgrade::wire_cell`]); set from the store's mesh version before joining.
    pub wire: Arc<std::sync::atomic::AtomicU16>,
    /// What this node can run, gossiped from its first frame; `None` gossips nothing, and
    /// placement then counts the node able to run anything (the in-memory agents).
    pub capabilities: Option<crate::state::mesh::capabilities::CapabilitiesRecord>,
    /// The gate every task of this agent passes ([`Freeze::none`] but in the simulator, which
    /// closes it to freeze the agent as SIGSTOP would).
    pub freeze: Freeze,
}

/// A started mesh node and its background tasks.
pub struct RunningNode {
    /// The node.
    pub node: Arc<MeshNode>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Dropped without [`RunningNode::leave`], the node stops as in a crash.
impl Drop for RunningNode {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        let _ = self.node.gossip().initiate_shutdown();
    }
}

impl RunningNode {
    /// Announces the leave, gossips it for [`LEAVE_ANNOUNCE`], then stops every task.
    pub async fn leave(self) {
        {
            let chitchat = self.node.gossip().chitchat();
            chitchat
                .lock()
                .await
                .self_node_state()
                .set(LEAVING_KEY, "1");
        }
        tokio::time::sleep(LEAVE_ANNOUNCE).await;
        self.crash();
    }

    /// Stops for a planned restart: announces that this agent means to be back by `until_ms`
    /// (wall time) where every member knows the fact (mesh version 8 on: peers hold it up in
    /// placement and do not count it dead until then), else announces a leave as
    /// [`RunningNode::leave`]; gossips it for [`RESTART_ANNOUNCE`], then stops every task.
    pub async fn restart(self, until_ms: u64) {
        {
            let hold = self.node.restart_hold();
            let chitchat = self.node.gossip().chitchat();
            let mut guard = chitchat.lock().await;
            if hold {
                guard
                    .self_node_state()
                    .set(RESTARTING_KEY, until_ms.to_string());
            } else {
                guard.self_node_state().set(LEAVING_KEY, "1");
            }
        }
        tokio::time::sleep(RESTART_ANNOUNCE).await;
        self.crash();
    }

    /// Stops every task at once, as a crash would (the store keeps what was durable).
    pub fn crash(self) {
        drop(self);
    }
}

/// The API handler of a `node` without a host loop (store and membership requests only; an
/// agent serves [`crate::agent::Agent::handler`]).
pub fn api_handler(node: Arc<MeshNode>) -> rpc::Handler<Request, Response> {
    crate::dispatch::Api::new(node, None).handler()
}

/// Starts a mesh node over any chitchat transport and RPC client: joins, checks that its name is
/// not in use, and runs anti-entropy. The caller serves [`api_handler`] on its API address.
pub async fn start_node(
    setup: MeshSetup,
    mut store: DesiredStore,
    transport: &dyn Transport,
    rpc_client: Arc<dyn RpcClient>,
    clock: WallClock,
    inline_store: bool,
    probes: Option<crate::transport::gossip::probe::ProbeChannel>,
) -> anyhow::Result<RunningNode> {
    let stale = store.is_stale(clock())?;
    if stale {
        tracing::warn!(
            "this node was out of sync longer than the tombstone grace: it will resynchronize \
             from the first live peer that is not stale"
        );
    }
    let generation = store.generation_next(clock())?;
    let mut seeds = setup.seeds.clone();
    for peer in store.peers_load()? {
        if !seeds.contains(&peer) && peer != setup.gossip_addr {
            seeds.push(peer);
        }
    }
    // How many members the mesh had when this agent last saw a majority: its name check ends
    // early once as many are heard again, each with its record.
    let members_before = store.members_known_load()?.map(|n| n as usize);
    let summary = to_hex(&store.digest().summary().encode());
    crate::state::cells::check_cell_name(&setup.cell).map_err(anyhow::Error::msg)?;
    let gossip_cluster = crate::state::cells::gossip_cluster_id(&setup.cluster_id, &setup.cell);
    let config = chitchat_config_tuned(
        &setup.name,
        generation,
        setup.gossip_addr,
        &seeds,
        &gossip_cluster,
        &setup.tuning,
    );
    // Before the first gossip frame: what this agent sends in is the mesh version it last knew
    // (a build of the version before it is then still heard), the oldest it speaks when it knows
    // none.
    let recorded = crate::state::mesh::upgrade::decode_version(
        store
            .get(crate::state::mesh::upgrade::MESH_VERSION_NAME)
            .and_then(|e| e.body.live()),
    );
    let wire_version = recorded
        .unwrap_or(shoal_core::version::WIRE_MIN)
        .clamp(shoal_core::version::WIRE_MIN, shoal_core::version::WIRE_CUR);
    setup
        .wire
        .store(wire_version, std::sync::atomic::Ordering::Relaxed);
    let mut kvs = vec![
        (NODE_KEY.to_string(), setup.record.encode()),
        (DIGEST_KEY.to_string(), summary),
        (
            crate::state::mesh::build::BUILD_KEY.to_string(),
            crate::state::mesh::build::this().encode(),
        ),
        (
            crate::state::mesh::upgrade::MESH_KEY.to_string(),
            wire_version.to_string(),
        ),
    ];
    if let Some(capabilities) = &setup.capabilities {
        kvs.push((
            crate::state::mesh::capabilities::CAPABILITIES_KEY.to_string(),
            capabilities.encode(),
        ));
    }
    if stale {
        kvs.push((STALE_KEY.to_string(), "1".to_string()));
    }
    let freeze = setup.freeze.clone();
    let gossip = spawn_chitchat_with(config, kvs, transport, |task| freeze.spawn(task))
        .await
        .with_context(|| format!("starting gossip on {}", setup.gossip_addr))?;
    tracing::info!(
        name = %setup.name, gossip = %setup.gossip_addr, api = %setup.record.api_addr, generation,
        seeds = ?seeds, cluster = %setup.cluster_id, cell = %setup.cell, "agent started"
    );
    let node = Arc::new(
        MeshNode::new(setup.name.clone(), store, gossip, rpc_client, clock)
            .in_cell(&setup.cell)
            .with_authority(setup.authority.clone())
            .with_wire(setup.wire.clone())
            .with_freeze(setup.freeze.clone()),
    );
    // The member probes (issue 28, `state::mesh::verdicts`) run from the first gossip frame:
    // the mesh probes this agent as soon as its state arrives, and with compact gossip an
    // unanswered probe is a death (the name check below takes up to 2 s).
    let mut tasks: Vec<tokio::task::JoinHandle<()>> = probes
        .into_iter()
        .map(|channel| {
            node.spawn(crate::state::mesh::verdicts::run(
                node.clone(),
                channel,
                shoal_core::verdict::ProbeConfig::default(),
            ))
        })
        .collect();
    if !seeds.is_empty() {
        let interval = setup.tuning.gossip_interval;
        if let Some(other) = wait_for_name_conflict(&node, interval, members_before).await {
            for task in &tasks {
                task.abort();
            }
            let _ = node.gossip().initiate_shutdown();
            anyhow::bail!(
                "the name {:?} is already used by a live agent at {other}: choose another --name \
                 (or stop that agent first)",
                setup.name
            );
        }
    }
    node.cells.set_seeds(setup.cell_seeds.clone());
    if !seeds.is_empty() {
        node.cells.joins_through_seeds();
    }
    node.stale
        .store(stale, std::sync::atomic::Ordering::Relaxed);
    node.inline_store
        .store(inline_store, std::sync::atomic::Ordering::Relaxed);
    *node.record.lock().expect("record lock") = Some(setup.record.clone());
    *node.capabilities.lock().expect("capabilities lock") = setup.capabilities.clone();
    let joins = !seeds.is_empty();
    tasks.extend([
        node.spawn(crate::state::mesh::sync::AntiEntropy::new(node.clone()).run()),
        node.spawn(watch_seeds(node.clone(), seeds)),
        node.spawn(crate::state::mesh::cell_exchange::CellExchange::new(node.clone()).run()),
        node.spawn(crate::state::mesh::upgrade::run(node.clone(), joins)),
    ]);
    Ok(RunningNode { node, tasks })
}

/// Gossip rounds of the name check at most.
const NAME_CHECK_ROUNDS: u32 = 8;
/// Gossip rounds of the name check at least.
const NAME_CHECK_ROUNDS_MIN: u32 = 3;

/// Gossips for a few rounds after joining and reports a live agent already using this name.
///
/// The rounds also let the membership fill in before the host loop's first round: ended as soon
/// as a peer was heard (tried in issue 25 to shorten restarts), the restarted agent placed over a
/// partial view and started an extra copy of a replica (`agent/tests/restart_grace.rs` caught
/// it). So the check runs [`NAME_CHECK_ROUNDS`] (2 s at the default interval), or ends after
/// [`NAME_CHECK_ROUNDS_MIN`] once as many members as the mesh had when this agent last saw a
/// majority (`members_before`, saved in the store) are live with their node records: a view at
/// least as whole as the one it left (a planned restart's case).
///
/// Each round also takes the mesh version from the peers' gossip when it is ahead of this agent's
/// (`upgrade::adopt_gossiped`): an agent started with an empty store then judges as its peers do
/// from its first rounds, not after anti-entropy brought the record.
async fn wait_for_name_conflict(
    node: &MeshNode,
    gossip_interval: Duration,
    members_before: Option<usize>,
) -> Option<SocketAddr> {
    let gossip = node.gossip();
    let me = gossip.chitchat_id().clone();
    for round in 1..=NAME_CHECK_ROUNDS {
        tokio::time::sleep(gossip_interval).await;
        let chitchat = gossip.chitchat();
        let mut guard = chitchat.lock().await;
        if let Some(addr) = crate::state::mesh::view::name_taken_by(&guard, &me) {
            return Some(addr);
        }
        if let Some(version) = crate::state::mesh::upgrade::adopt_gossiped(node, &guard) {
            guard
                .self_node_state()
                .set(crate::state::mesh::upgrade::MESH_KEY, version.to_string());
        }
        let whole = members_before.is_some_and(|before| {
            let with_record: std::collections::BTreeSet<String> = guard
                .live_nodes()
                .filter(|id| {
                    guard
                        .node_state(id)
                        .is_some_and(|state| state.get(NODE_KEY).is_some())
                })
                .map(|id| id.node_id.to_string())
                .collect();
            with_record.len() >= before
        });
        if whole && round >= NAME_CHECK_ROUNDS_MIN {
            tracing::debug!(
                round,
                "name check ended: every member known before is heard"
            );
            break;
        }
    }
    None
}

/// Logs, with backoff, while this agent has no live peer although it was given seeds: the
/// operator sees why it is alone. chitchat keeps contacting the seeds by itself.
async fn watch_seeds(node: Arc<MeshNode>, seeds: Vec<SocketAddr>) {
    if seeds.is_empty() {
        return;
    }
    let mut wait = Duration::from_secs(2);
    loop {
        tokio::time::sleep(wait).await;
        let alone = node
            .members()
            .await
            .iter()
            .all(|m| !m.alive || m.name == node.name);
        if alone {
            tracing::warn!(?seeds, retry_in = ?wait, "no live peer yet: seeds unreachable or refusing this node's certificate");
            wait = (wait * 2).min(Duration::from_secs(60));
        } else {
            wait = Duration::from_secs(2);
        }
    }
}
