//! The agent process: loads the identity, opens the store, binds the QUIC gossip and API
//! endpoints, joins the mesh, serves, syncs, and leaves gracefully on shutdown.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chitchat::spawn_chitchat;
use chitchat::transport::Transport;
use shoal_core::store::StoreConfig;

use super::api::{Request, Response};
use super::node::{system_clock, MeshNode, WallClock};
use super::record::{NodeRecord, DIGEST_KEY, NODE_KEY};
use super::sync::to_hex;
use super::view::{LEAVING_KEY, STALE_KEY};
use crate::gossip::quic::{QuicGossipConfig, QuicTransport};
use crate::gossip::{chitchat_config_tuned, GossipTuning};
use crate::rpc::{self, QuicRpcClient, RpcClient, RpcServerConfig, TransportStats};
use crate::store_db::DesiredStore;
use crate::tls::{self, QuicOptions, ALPN_API};

/// Everything `shoal agent` needs.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// Node id (must match the certificate name).
    pub name: String,
    /// Gossip address (bound and advertised).
    pub gossip_addr: SocketAddr,
    /// API address.
    pub api_addr: SocketAddr,
    /// Data directory (store, peers, generation).
    pub data_dir: PathBuf,
    /// PKI directory (CA certificate, this node's certificate and key, or the CA key).
    pub pki_dir: PathBuf,
    /// Members to join through.
    pub seeds: Vec<SocketAddr>,
    /// Declared CPU capacity.
    pub cpu_millis: u64,
    /// Declared memory capacity.
    pub memory_bytes: u64,
    /// Failure domain.
    pub zone: String,
    /// Labels for placement constraints.
    pub labels: BTreeMap<String, String>,
    /// Gossip timing.
    pub tuning: GossipTuning,
    /// Where to serve OpenMetrics `/metrics` (plain HTTP), if anywhere.
    pub metrics_addr: Option<SocketAddr>,
    /// Which runtime runs this node's instances.
    pub runtime: RuntimeChoice,
    /// The host loop's timing and bounds.
    pub host: crate::host::HostConfig,
}

/// The runtime an agent runs its instances with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// Supervised host processes, state under `DATA_DIR/instances`, working dirs under
    /// `DATA_DIR/replicas`.
    Process,
    /// Docker containers through the local engine.
    Docker,
}

/// Opens the chosen runtime for node `name`.
pub async fn open_runtime(
    choice: RuntimeChoice,
    data_dir: &std::path::Path,
    name: &str,
) -> anyhow::Result<Arc<dyn crate::runtime::Runtime>> {
    Ok(match choice {
        RuntimeChoice::Process => {
            let config = crate::runtime::process::ProcessConfig::new(data_dir, name);
            let runtime = crate::runtime::process::ProcessRuntime::open(config)
                .await
                .context("opening the process runtime")?;
            if let Some(note) = crate::runtime::Runtime::limits_note(&runtime) {
                tracing::warn!(%note, "resource limits");
            }
            Arc::new(runtime)
        }
        RuntimeChoice::Docker => {
            let config = crate::runtime::docker::DockerConfig::new(name);
            Arc::new(
                crate::runtime::docker::DockerRuntime::new(config)
                    .context("opening the docker runtime")?,
            )
        }
    })
}

/// How long a leaving agent keeps gossiping its "leaving" mark before it stops.
pub const LEAVE_ANNOUNCE: Duration = Duration::from_millis(800);

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
}

/// A started mesh node and its background tasks.
pub struct RunningNode {
    /// The node.
    pub node: Arc<MeshNode>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
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

    /// Stops every task at once, as a crash would (the store keeps what was durable).
    pub fn crash(self) {
        for task in &self.tasks {
            task.abort();
        }
        let _ = self.node.gossip().initiate_shutdown();
    }
}

/// The API handler of `node`.
pub fn api_handler(node: Arc<MeshNode>) -> rpc::Handler<Request, Response> {
    Arc::new(move |req, peer| {
        let node = node.clone();
        Box::pin(async move { node.handle_request(req, peer).await })
    })
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
    let summary = to_hex(&store.digest().summary().encode());
    let config = chitchat_config_tuned(
        &setup.name,
        generation,
        setup.gossip_addr,
        &seeds,
        &setup.cluster_id,
        &setup.tuning,
    );
    let mut kvs = vec![
        (NODE_KEY.to_string(), setup.record.encode()),
        (DIGEST_KEY.to_string(), summary),
    ];
    if stale {
        kvs.push((STALE_KEY.to_string(), "1".to_string()));
    }
    let gossip = spawn_chitchat(config, kvs, transport)
        .await
        .with_context(|| format!("starting gossip on {}", setup.gossip_addr))?;
    tracing::info!(
        name = %setup.name, gossip = %setup.gossip_addr, api = %setup.record.api_addr, generation,
        seeds = ?seeds, cluster = %setup.cluster_id, "agent started"
    );
    if !seeds.is_empty() {
        if let Some(other) = wait_for_name_conflict(&gossip, setup.tuning.gossip_interval).await {
            let _ = gossip.initiate_shutdown();
            anyhow::bail!(
                "the name {:?} is already used by a live agent at {other}: choose another --name \
                 (or stop that agent first)",
                setup.name
            );
        }
    }
    let node = Arc::new(MeshNode::new(
        setup.name.clone(),
        store,
        gossip,
        rpc_client,
        clock,
    ));
    node.stale
        .store(stale, std::sync::atomic::Ordering::Relaxed);
    node.inline_store
        .store(inline_store, std::sync::atomic::Ordering::Relaxed);
    *node.record.lock().expect("record lock") = Some(setup.record.clone());
    let tasks = vec![
        tokio::spawn(node.clone().run_sync()),
        tokio::spawn(watch_seeds(node.clone(), seeds)),
    ];
    Ok(RunningNode { node, tasks })
}

/// The record an agent with these options gossips.
pub fn node_record(opts: &AgentOptions) -> NodeRecord {
    NodeRecord {
        cpu_millis: opts.cpu_millis,
        memory_bytes: opts.memory_bytes,
        labels: opts.labels.clone(),
        zone: opts.zone.clone(),
        draining: false,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        placement_version: shoal_core::placement::PLACEMENT_ALGORITHM_VERSION,
        api_addr: opts.api_addr,
        limits_note: None,
    }
}

/// Runs an agent over QUIC until `shutdown` resolves, then leaves the mesh gracefully.
pub async fn run_agent(
    opts: AgentOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let identity = crate::pki::load_identity(&opts.pki_dir, &opts.name)
        .with_context(|| format!("loading the identity of {:?}", opts.name))?;
    std::fs::create_dir_all(&opts.data_dir)
        .with_context(|| format!("creating --data-dir {}", opts.data_dir.display()))?;
    let store = DesiredStore::open(&opts.data_dir, &opts.name, StoreConfig::default())
        .with_context(|| format!("opening the store under {}", opts.data_dir.display()))?;
    let ca = identity
        .ca_certs
        .first()
        .context("the PKI holds no CA certificate")?;
    let cluster = cluster_id(ca.as_ref());
    let api_endpoint = tls::bind_endpoint(opts.api_addr, &identity, ALPN_API, &QuicOptions::api())
        .with_context(|| format!("binding the API on {}", opts.api_addr))?;
    let api_stats = Arc::new(TransportStats::default());
    let rpc_client = Arc::new(QuicRpcClient::new(api_endpoint.clone(), api_stats.clone()));
    let transport = QuicTransport::new(identity, QuicGossipConfig::default());
    let gossip_stats = transport.stats();
    let runtime = open_runtime(opts.runtime, &opts.data_dir, &opts.name).await?;
    let mut record = node_record(&opts);
    record.limits_note = runtime.limits_note();
    // An operator's drain survives restarts.
    let drain_marker = opts.data_dir.join("draining");
    record.draining = drain_marker.exists();
    if record.draining {
        tracing::info!(marker = %drain_marker.display(), "drained by an operator before the restart");
    }
    let setup = MeshSetup {
        name: opts.name.clone(),
        gossip_addr: opts.gossip_addr,
        seeds: opts.seeds.clone(),
        record,
        tuning: opts.tuning.clone(),
        cluster_id: cluster,
    };
    let running = start_node(setup, store, &transport, rpc_client, system_clock(), false).await?;
    running.node.set_drain_marker(drain_marker);
    let host = crate::host::Host::new(
        running.node.clone(),
        runtime,
        system_clock(),
        opts.host.clone(),
    );
    host.keep_majority_time_in(opts.data_dir.join("last-majority"))
        .await;
    running.node.attach_host(host.clone());
    let host_task = tokio::spawn(host.clone().run());
    let server = tokio::spawn(rpc::serve(
        api_endpoint.clone(),
        api_handler(running.node.clone()),
        RpcServerConfig::default(),
        api_stats.clone(),
    ));
    let metrics = opts.metrics_addr.map(|addr| {
        let node = running.node.clone();
        let collect: crate::metrics::Collector = Arc::new(move || {
            let (node, gossip, api) = (node.clone(), gossip_stats.clone(), api_stats.clone());
            Box::pin(async move {
                let mut families = super::metrics::mesh_families(&node, &gossip, &api).await;
                if let Some(host) = node.host() {
                    families.extend(crate::host::metrics::host_families(host).await);
                }
                families
            })
        });
        tokio::spawn(async move {
            if let Err(e) = crate::metrics::serve(addr, collect).await {
                tracing::error!(%addr, error = %e, "the /metrics endpoint stopped");
            }
        })
    });
    shutdown.await;
    tracing::info!("leaving the mesh");
    host_task.abort();
    host.fence_on_leave().await;
    running.leave().await;
    server.abort();
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    api_endpoint.close(0u32.into(), b"agent leaving");
    Ok(())
}

/// Gossips for a few rounds after joining and reports a live agent already using this name.
async fn wait_for_name_conflict(
    gossip: &chitchat::ChitchatHandle,
    gossip_interval: Duration,
) -> Option<SocketAddr> {
    let me = gossip.chitchat_id().clone();
    for _ in 0..8 {
        tokio::time::sleep(gossip_interval).await;
        let chitchat = gossip.chitchat();
        let guard = chitchat.lock().await;
        if let Some(addr) = super::view::name_taken_by(&guard, &me) {
            return Some(addr);
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
