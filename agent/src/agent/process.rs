//! The agent process (`shoal agent`): loads the identity, opens the store and the runtime, binds
//! the QUIC gossip and API endpoints, starts or adopts its guard, joins the mesh, serves the API
//! and `/metrics`, and leaves gracefully on shutdown.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use shoal_core::store::StoreConfig;

use super::Agent;
use crate::agent::run::{cluster_id, start_node, MeshSetup};
use crate::identity::tls::{self, QuicOptions, ALPN_API};
use crate::node::guard::{GuardConfig, GuardLink, GuardRuntime};
use crate::node::host::Host;
use crate::state::mesh::metrics;
use crate::state::mesh::node::system_clock;
use crate::state::mesh::record::NodeRecord;
use crate::state::store_db::DesiredStore;
use crate::transport::gossip::quic::{QuicGossipConfig, QuicTransport};
use crate::transport::gossip::GossipTuning;
use crate::transport::rpc::{self, QuicRpcClient, RpcServerConfig, TransportStats};

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
    /// PKI directory (CA certificate, this node's certificate and key; a `crl.pem` there is
    /// adopted and spread; the certificate is reloaded when renewed).
    pub pki_dir: PathBuf,
    /// Issue this node's certificate from a `ca.key` in the PKI directory when it is missing
    /// (a sandbox's convenience; production keeps the CA key off the hosts).
    pub self_issue: bool,
    /// Members to join through.
    pub seeds: Vec<SocketAddr>,
    /// The cell, a DNS label ([`crate::state::cells::DEFAULT_CELL`] for a mesh of one cell).
    pub cell: String,
    /// API addresses of agents of other cells to learn the mesh's cells from.
    pub cell_seeds: Vec<SocketAddr>,
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
    /// The host IP docker containers' ports are published on (`--publish-addr`); `None`: the
    /// advertised address ([`AgentOptions::publish_ip`]).
    pub publish_addr: Option<std::net::IpAddr>,
    /// Where to serve the read-only web UI, if anywhere (TLS with client certificates unless on
    /// loopback; docs/ui.md).
    pub ui_addr: Option<SocketAddr>,
    /// Where to answer DNS for the mesh's workloads, and the zone, if anywhere.
    pub dns: Option<crate::node::dns::DnsConfig>,
    /// Which runtime runs this node's instances.
    pub runtime: RuntimeChoice,
    /// Registry credentials for the docker runtime's pulls (`--registry-auth`), read at startup;
    /// never gossiped, stored or logged.
    pub registry_auth: Option<Arc<crate::node::runtime::docker::RegistryAuth>>,
    /// How the process runtime bounds instances' output (`--log-max-bytes`, `--log-files`); the
    /// docker runtime bounds containers' logs alike unless `engine_logs`.
    pub process_logs: crate::node::runtime::process::LogConfig,
    /// Leave containers' logging to the engine's `daemon.json` (`--engine-logs`).
    pub engine_logs: bool,
    /// Who workloads without `user` run as, and whether root workloads run here
    /// (`--workload-user`, `--allow-root-workloads`; gossiped as `root_allowed`).
    pub workload_users: crate::node::runtime::users::WorkloadUsers,
    /// The host loop's timing and bounds.
    pub host: crate::node::host::HostConfig,
    /// Admission limits of the API endpoint (handshakes and connections it lets in).
    pub api_admission: crate::transport::admission::AdmissionConfig,
    /// Admission limits of the gossip endpoint.
    pub gossip_admission: crate::transport::admission::AdmissionConfig,
}

impl AgentOptions {
    /// The host IP containers' ports are published on: `--publish-addr`, else the address this
    /// agent advertises (the API's IP, or the gossip's when the API is bound to a wildcard, as
    /// `Host::advertised_addr`); `None` (every interface) when that is a wildcard.
    pub fn publish_ip(&self) -> Option<std::net::IpAddr> {
        publish_ip(self.publish_addr, self.api_addr, self.gossip_addr)
    }
}

fn publish_ip(
    explicit: Option<std::net::IpAddr>,
    api: SocketAddr,
    gossip: SocketAddr,
) -> Option<std::net::IpAddr> {
    let advertised = [api.ip(), gossip.ip()]
        .into_iter()
        .find(|ip| !ip.is_unspecified());
    explicit.or(advertised).filter(|ip| !ip.is_unspecified())
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

/// Opens the runtime `opts` choose.
pub async fn open_runtime(
    opts: &AgentOptions,
) -> anyhow::Result<Arc<dyn crate::node::runtime::Runtime>> {
    let (data_dir, name, dns) = (&opts.data_dir, &opts.name, opts.dns.as_ref());
    let (registry_auth, logs) = (opts.registry_auth.clone(), &opts.process_logs);
    let engine_logs = opts.engine_logs;
    Ok(match opts.runtime {
        RuntimeChoice::Process => {
            let config = crate::node::runtime::process::ProcessConfig {
                logs: logs.clone(),
                users: opts.workload_users,
                ..crate::node::runtime::process::ProcessConfig::new(data_dir, name)
            };
            let runtime = crate::node::runtime::process::ProcessRuntime::open(config)
                .await
                .context("opening the process runtime")?;
            if let Some(note) = crate::node::runtime::Runtime::limits_note(&runtime) {
                tracing::warn!(%note, "resource limits");
            }
            Arc::new(runtime)
        }
        RuntimeChoice::Docker => {
            use crate::node::runtime::docker::DockerConfig;
            let mut config = DockerConfig::new(name);
            if let Some(auth) = &registry_auth {
                let registries: Vec<&str> = auth.registries().collect();
                tracing::info!(?registries, "registry credentials for pulls");
            }
            config.registry_auth = registry_auth;
            config.volumes = Some(crate::node::runtime::volumes::VolumeDirs::new(data_dir));
            config.users = opts.workload_users;
            config.publish_ip = opts.publish_ip();
            let publish = config
                .publish_ip
                .map_or("every interface".to_string(), |ip| ip.to_string());
            tracing::info!(%publish, "containers' ports are published on");
            config.log_bound = (!engine_logs).then_some(crate::node::runtime::docker::LogBound {
                bytes_max: logs.bytes_max,
                files: logs.files,
            });
            if let Some(dns) = dns {
                let zone = dns.zone.origin().to_ascii();
                match DockerConfig::container_dns(dns.addr, &zone) {
                    Ok(resolver) => {
                        tracing::info!(server = %resolver.server, search = %resolver.search,
                            "containers resolve through this agent's DNS");
                        config.dns = Some(resolver);
                    }
                    Err(why) => tracing::warn!(%why, "containers keep the engine's resolver"),
                }
            }
            Arc::new(
                crate::node::runtime::docker::DockerRuntime::new(config)
                    .context("opening the docker runtime")?,
            )
        }
    })
}

/// What a node with this runtime and these volume roots can run, for placement (gossiped under
/// `capabilities`). The container runtime names the engine's version when the engine answers
/// within 2 s; the agent is configured for it either way (a start while the engine is down says
/// so on the replica).
pub async fn capabilities_of(
    runtime: &Arc<dyn crate::node::runtime::Runtime>,
    volume_roots: &[String],
) -> crate::state::mesh::capabilities::CapabilitiesRecord {
    use crate::node::runtime::RuntimeKind;
    use crate::state::mesh::capabilities::{CapabilitiesRecord, RuntimeFact};
    use shoal_core::placement::Runtime;
    let fact = |kind, version| RuntimeFact { kind, version };
    let runtimes = match runtime.kind() {
        RuntimeKind::Process => vec![fact(Runtime::Process, None)],
        RuntimeKind::Docker => {
            let engine = async {
                let docker = bollard::Docker::connect_with_local_defaults().ok()?;
                docker.version().await.ok()?.version
            };
            let version = tokio::time::timeout(Duration::from_secs(2), engine)
                .await
                .ok()
                .flatten()
                .map(|v| format!("docker {v}"));
            vec![fact(Runtime::Container, version)]
        }
        RuntimeKind::Mem => runtime.runs().into_iter().map(|k| fact(k, None)).collect(),
    };
    CapabilitiesRecord::this(runtimes, volume_roots.to_vec())
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
        ports: opts.host.port_range.len() as u64,
    }
}

/// Adopts or starts the guard that stops this node's exclusive instances if the agent freezes,
/// and waits a moment for it to be ready. A guard that cannot run is logged here and reported by
/// the reconciler, which then starts no exclusive replica on this node.
async fn start_guard(opts: &AgentOptions) -> GuardLink {
    let runtime = match opts.runtime {
        RuntimeChoice::Process => GuardRuntime::Process,
        RuntimeChoice::Docker => GuardRuntime::Docker,
    };
    let config = GuardConfig::new(&opts.data_dir, &opts.name, runtime, &opts.host.reconcile);
    let mut link = GuardLink::start(config);
    link.wait_ready(Duration::from_secs(5)).await;
    match (link.pid(), link.unavailable()) {
        (Some(pid), None) => tracing::info!(pid, lease_ms = link.lease_ms(), "guard running"),
        (_, why) => tracing::error!(
            reason = why.as_deref().unwrap_or("unknown"),
            "no guard: exclusive replicas will not start on this node"
        ),
    }
    link
}

/// Answers agents joining through this one from another cell, and joins through seeds of other
/// cells while this agent hears no member of its own ([`crate::transport::gossip::directory`]).
fn serve_directory(
    opts: &AgentOptions,
    transport: &QuicTransport,
    node: &Arc<crate::state::mesh::node::MeshNode>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let weak = Arc::downgrade(node);
    transport.set_directory(Arc::new(move |ask| {
        let weak = weak.clone();
        Box::pin(async move {
            match weak.upgrade() {
                Some(node) => crate::state::mesh::cell_exchange::directory_answer(&node, ask).await,
                None => crate::transport::gossip::directory::Answer {
                    cell: String::new(),
                    api: ask.gossip,
                    peers: Vec::new(),
                },
            }
        })
    }));
    let identity = Arc::new(load_node_identity(opts)?);
    let quic = QuicOptions::gossip();
    let ask = move |seed, question| {
        let (identity, quic) = (identity.clone(), quic.clone());
        async move { crate::transport::gossip::directory::ask(&identity, &quic, seed, &question).await }
    };
    Ok(tokio::spawn(
        crate::state::mesh::cell_exchange::join_across_cells(
            Arc::downgrade(node),
            opts.seeds.clone(),
            opts.gossip_addr,
            ask,
        ),
    ))
}

/// This node's identity: a node certificate issued for `--name` (issued on the spot with
/// `--self-issue` and a CA key).
fn load_node_identity(opts: &AgentOptions) -> anyhow::Result<crate::identity::pki::Identity> {
    use crate::identity::pki::{Role, SelfIssue};
    let self_issue = match opts.self_issue {
        true => SelfIssue::As(Role::Node),
        false => SelfIssue::No,
    };
    let identity = crate::identity::pki::load_identity(&opts.pki_dir, &opts.name, self_issue)
        .with_context(|| format!("loading the identity of {:?}", opts.name))?;
    if identity.role != Role::Node {
        anyhow::bail!(
            "{}.crt is a {} certificate: an agent needs a node certificate \
             (`shoal pki issue --name {} --role node`)",
            opts.name,
            identity.role,
            opts.name
        );
    }
    Ok(identity)
}

/// Makes the data dir its owner's only (0700), keeping the traverse bit for others when it is
/// all they have (0701): the process runtime sets it so for an instance that runs as another
/// user, which enters its own directories by name (no listing; the files the agent writes below
/// are the owner's only). A dir others could list (0755, the default of an older build) becomes
/// 0700.
fn tighten_data_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir)
        .with_context(|| format!("reading --data-dir {}", dir.display()))?
        .permissions()
        .mode();
    let traverse_only = mode & 0o005 == 0o001;
    let tight = if traverse_only { 0o701 } else { 0o700 };
    if mode & 0o777 != tight {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(tight))
            .with_context(|| format!("making --data-dir {} private", dir.display()))?;
        tracing::info!(dir = %dir.display(), from = format!("{:o}", mode & 0o777), to = format!("{tight:o}"), "data dir made private");
    }
    Ok(())
}

/// Runs an agent over QUIC until `shutdown` resolves, then leaves the mesh gracefully.
pub async fn run_agent(
    opts: AgentOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let identity = load_node_identity(&opts)?;
    // Served from the start: `/healthz` answers while the agent starts, `/readyz` says what it
    // waits for; dropped (the task aborted) on every way out.
    let endpoint = match opts.metrics_addr {
        Some(addr) => {
            let listener = crate::transport::metrics::bind(addr)
                .await
                .with_context(|| format!("binding --metrics on {addr}"))?;
            let status = Arc::new(crate::transport::metrics::Status::default());
            status.waiting("starting: opening the store");
            let task = AbortOnDrop(tokio::spawn(crate::transport::metrics::serve(
                listener,
                status.clone(),
            )));
            Some((status, task))
        }
        None => None,
    };
    let stage = |what: &'static str| {
        if let Some((status, _)) = &endpoint {
            status.waiting(what);
        }
    };
    let authority = Arc::new(
        crate::identity::authority::Authority::certified(&identity)
            .context("loading the node key")?,
    );
    std::fs::create_dir_all(&opts.data_dir)
        .with_context(|| format!("creating --data-dir {}", opts.data_dir.display()))?;
    tighten_data_dir(&opts.data_dir)?;
    let store = DesiredStore::open(&opts.data_dir, &opts.name, StoreConfig::default())
        .with_context(|| format!("opening the store under {}", opts.data_dir.display()))?;
    let ca = identity
        .ca_certs
        .first()
        .context("the PKI holds no CA certificate")?;
    let cluster = cluster_id(ca.as_ref());
    let api_stats = Arc::new(TransportStats::default());
    let filter = |socket| {
        let config = crate::transport::admission::FilterConfig::default();
        crate::transport::admission::FilteredSocket::wrap(socket, config, api_stats.clone())
    };
    let api_endpoint = tls::bind_endpoint_wrapped(
        opts.api_addr,
        &identity,
        ALPN_API,
        &QuicOptions::api(),
        &filter,
    )
    .with_context(|| format!("binding the API on {}", opts.api_addr))?;
    // The wire version this agent sends in: the mesh version (crate::state::mesh::upgrade), one cell
    // shared by the RPC client, the gossip transport and the node.
    let wire = crate::state::mesh::upgrade::wire_cell();
    let rpc_client = Arc::new(
        QuicRpcClient::new(api_endpoint.clone(), api_stats.clone())
            .with_authority(authority.clone())
            .with_wire(wire.clone()),
    );
    authority.follow(tls::LiveEndpoint::new(
        api_endpoint.clone(),
        &identity,
        ALPN_API,
        &QuicOptions::api(),
        true,
    ));
    let gossip_config = QuicGossipConfig {
        admission: opts.gossip_admission.clone(),
        wire: wire.clone(),
        ..QuicGossipConfig::default()
    };
    // Bound before joining, so a taken or refused address stops the agent at start.
    let ui_listener = match opts.ui_addr {
        Some(addr) => {
            let tls = crate::ui::UiTls::new(&identity, authority.clone());
            let listener = crate::ui::UiListener::bind(addr, Some(tls)).await?;
            let scheme = if listener.is_tls() { "https" } else { "http" };
            tracing::info!(url = %format!("{scheme}://{addr}/"), "serving the web UI");
            Some(listener)
        }
        None => None,
    };
    let transport = QuicTransport::new(identity, gossip_config);
    transport.set_authority(authority.clone());
    let gossip_stats = transport.stats();
    let runtime = open_runtime(&opts).await?;
    // Before joining: the mesh sees this node only once it can serve and guard.
    let mut guard = start_guard(&opts).await;
    let mut record = node_record(&opts);
    record.limits_note = runtime.limits_note();
    // An operator's drain survives restarts.
    let drain_marker = opts.data_dir.join("draining");
    record.draining = drain_marker.exists();
    if record.draining {
        tracing::info!(marker = %drain_marker.display(), "drained by an operator before the restart");
    }
    let mut capabilities = capabilities_of(&runtime, &opts.host.volume_roots).await;
    capabilities.root_allowed = opts.workload_users.root_allowed;
    tracing::info!(runtimes = %capabilities.runtimes_text(), os = %capabilities.os,
        arch = %capabilities.arch, volume_roots = ?capabilities.volume_roots,
        root_allowed = capabilities.root_allowed, workload_user = ?opts.workload_users.default,
        "capabilities");
    let setup = MeshSetup {
        name: opts.name.clone(),
        gossip_addr: opts.gossip_addr,
        seeds: opts.seeds.clone(),
        record,
        tuning: opts.tuning.clone(),
        cluster_id: cluster,
        cell: opts.cell.clone(),
        cell_seeds: opts.cell_seeds.clone(),
        authority: authority.clone(),
        wire,
        capabilities: Some(capabilities),
        freeze: crate::transport::freeze::Freeze::none(),
    };
    let clock = system_clock();
    let probes = transport
        .probe_channel()
        .context("the gossip transport's probe channel was taken twice")?;
    stage("starting: joining the mesh");
    let running = start_node(
        setup,
        store,
        &transport,
        rpc_client,
        clock.clone(),
        false,
        Some(probes),
    )
    .await?;
    running.node.set_drain_marker(drain_marker);
    let joining = serve_directory(&opts, &transport, &running.node)?;
    let mono = crate::node::host::clock::monotonic_from(&clock);
    let (host, mut host_loop) = Host::new(
        running.node.clone(),
        runtime,
        clock,
        mono,
        opts.host.clone(),
    );
    host_loop.keep_majority_time_in(opts.data_dir.join("last-majority"));
    guard.hold(); // joining took a moment: the first round renews from here
    host.attach_guard(guard);
    let agent = Agent::start(running, host, host_loop);
    let server = tokio::spawn(rpc::serve(
        api_endpoint.clone(),
        agent.handler(),
        RpcServerConfig {
            authority: Some(authority.clone()),
            admission: opts.api_admission.clone(),
            ..RpcServerConfig::default()
        },
        api_stats.clone(),
    ));
    let watch = tokio::spawn(crate::state::mesh::crl_watch::watch(
        Arc::downgrade(agent.host().node()),
        opts.pki_dir.clone(),
        opts.data_dir.clone(),
        opts.name.clone(),
    ));
    let dns_stats = Arc::new(crate::node::dns::DnsStats::default());
    let dns = match opts.dns.clone() {
        Some(config) => Some(start_dns(config, agent.host(), dns_stats.clone()).await?),
        None => None,
    };
    if let Some((status, _)) = &endpoint {
        let host = agent.host().clone();
        let collect: crate::transport::metrics::Collector = Arc::new(move || {
            let (host, gossip, api) = (host.clone(), gossip_stats.clone(), api_stats.clone());
            let dns_stats = dns_stats.clone();
            Box::pin(async move {
                let mut families = metrics::mesh_families(host.node(), &gossip, &api).await;
                families.extend(crate::node::host::metrics::host_families(&host));
                families.extend(dns_stats.families());
                families.push(udp_buffer_family());
                families
            })
        });
        let host = Arc::downgrade(agent.host());
        let ready: crate::transport::metrics::ReadyCheck = Arc::new(move || match host.upgrade() {
            Some(host) if host.stats().rounds > 0 => Ok(()),
            Some(_) => Err("waiting for the host loop's first reconcile round".to_string()),
            None => Err("the agent is stopping".to_string()),
        });
        status.running(collect, ready);
    }
    let ui = ui_listener
        .map(|listener| tokio::spawn(crate::ui::serve(listener, Arc::downgrade(agent.api()))));
    // A name in use in another cell stops this agent as a name conflict inside its cell does.
    let mut names = tokio::spawn(crate::state::mesh::cell_names::watch_names(Arc::downgrade(
        agent.host().node(),
    )));
    let conflict = tokio::select! {
        _ = shutdown => None,
        found = &mut names => found.ok().flatten(),
    };
    if let Some(conflict) = &conflict {
        tracing::error!(%conflict, "stopping");
    }
    stage("stopping");
    names.abort();
    joining.abort();
    watch.abort();
    drop(dns);
    let grace_ms = opts.host.restart_grace_ms;
    if grace_ms > 0 && conflict.is_none() {
        tracing::info!(grace_ms, "stopping for a restart: instances keep running");
        let grace = agent.restart(grace_ms).await;
        tracing::info!(grace_ms = grace, "stopped; the guard fences exclusive instances unless an agent is back within the grace");
    } else {
        tracing::info!("leaving the mesh");
        agent.leave().await;
    }
    server.abort();
    drop(endpoint);
    if let Some(ui) = ui {
        ui.abort();
    }
    api_endpoint.close(0u32.into(), b"agent leaving");
    match conflict {
        Some(conflict) => anyhow::bail!(conflict),
        None => Ok(()),
    }
}

/// Serves DNS on `config.addr` from the host's endpoint table (held weakly: the server never
/// keeps a stopped agent's host alive).
async fn start_dns(
    config: crate::node::dns::DnsConfig,
    host: &Arc<Host>,
    stats: Arc<crate::node::dns::DnsStats>,
) -> anyhow::Result<crate::node::dns::DnsServer> {
    let addr = config.addr;
    let host = Arc::downgrade(host);
    let source: crate::node::dns::TableSource =
        Arc::new(move || host.upgrade().map(|h| h.endpoints()).unwrap_or_default());
    let server = crate::node::dns::DnsServer::start(config, source, stats)
        .await
        .with_context(|| format!("binding DNS (--dns) on {addr}, UDP and TCP"))?;
    tracing::info!(%addr, "answering DNS");
    Ok(server)
}

/// A task aborted when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The receive buffers the API and gossip UDP sockets got ([`tls::UDP_BUFFER_BYTES`] asked).
fn udp_buffer_family() -> crate::transport::metrics::Family {
    let (api, gossip) = tls::udp_receive_buffer_bytes();
    crate::transport::metrics::Family {
        name: "shoal_udp_receive_buffer_bytes",
        help: "Receive buffer of the endpoint's UDP socket as the kernel reports it.",
        kind: crate::transport::metrics::Kind::Gauge,
        samples: vec![
            (vec![("endpoint", "api".to_string())], api as f64),
            (vec![("endpoint", "gossip".to_string())], gossip as f64),
        ],
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ports_are_published_on_the_advertised_address_unless_told() {
        let ip = |t: &str| t.parse::<std::net::IpAddr>().unwrap();
        let addr = |t: &str| t.parse::<std::net::SocketAddr>().unwrap();
        let (api, gossip) = (addr("10.0.0.1:7001"), addr("10.0.0.2:7000"));
        assert_eq!(super::publish_ip(None, api, gossip), Some(ip("10.0.0.1")));
        let wild = addr("0.0.0.0:7001");
        assert_eq!(super::publish_ip(None, wild, gossip), Some(ip("10.0.0.2")));
        assert_eq!(super::publish_ip(None, wild, addr("[::]:7000")), None);
        let told = Some(ip("192.168.1.5"));
        assert_eq!(super::publish_ip(told, api, gossip), told);
        assert_eq!(super::publish_ip(Some(ip("0.0.0.0")), api, gossip), None);
    }

    use std::os::unix::fs::PermissionsExt;

    use super::tighten_data_dir;

    #[test]
    fn the_data_dir_is_made_private_keeping_the_traverse_bit_for_instances_of_other_users() {
        let tmp = tempfile::tempdir().unwrap();
        let mode = || std::fs::metadata(tmp.path()).unwrap().permissions().mode() & 0o777;
        let set = |m: u32| std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(m));
        set(0o755).unwrap();
        tighten_data_dir(tmp.path()).unwrap();
        assert_eq!(mode(), 0o700);
        set(0o711).unwrap();
        tighten_data_dir(tmp.path()).unwrap();
        assert_eq!(mode(), 0o701, "others may still enter by name, not list");
        set(0o705).unwrap();
        tighten_data_dir(tmp.path()).unwrap();
        assert_eq!(mode(), 0o700);
    }
}
