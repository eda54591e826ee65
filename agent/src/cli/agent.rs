//! `shoal agent`: the long-running agent on every host.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use shoal::agent::{run_agent, AgentOptions, RuntimeChoice};
use shoal::node::host::HostConfig;
use shoal::transport::admission::AdmissionConfig;
use shoal::transport::gossip::GossipTuning;
use shoal_core::resources::{parse_cpu_millis, parse_memory_bytes};

/// Arguments of `shoal agent`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    shoal agent --name n1 --gossip 10.0.0.1:7000 --api 10.0.0.1:7001 --data-dir /var/lib/shoal --pki /etc/shoal/pki\n  \
    shoal agent --name n2 --gossip 10.0.0.2:7000 --api 10.0.0.2:7001 --data-dir /var/lib/shoal --pki /etc/shoal/pki --seed 10.0.0.1:7000 --zone eu-1b --label disk=ssd")]
pub struct Args {
    /// This node's id; the certificate in --pki must carry this name.
    #[arg(long)]
    name: String,
    /// Gossip address, bound and advertised to peers (QUIC, UDP).
    #[arg(long, value_name = "IP:PORT")]
    gossip: SocketAddr,
    /// API address for the CLI and for peers (QUIC, UDP).
    #[arg(long, value_name = "IP:PORT")]
    api: SocketAddr,
    /// Where the desired-state store and node facts live.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// PKI directory: ca.crt and NAME.crt/NAME.key (a node certificate for --name); a crl.pem
    /// there is adopted and spread to the mesh; a renewed NAME.crt is picked up live.
    #[arg(long, value_name = "DIR")]
    pki: PathBuf,
    /// Issue NAME.crt from a ca.key in --pki when it is missing (a sandbox's convenience; keep
    /// ca.key off the hosts in production).
    #[arg(long, env = "SHOAL_SELF_ISSUE")]
    self_issue: bool,
    /// A live member's gossip address to join through (repeatable). A restarted agent also
    /// rejoins through the peers it last knew.
    #[arg(long = "seed", value_name = "IP:PORT")]
    seeds: Vec<SocketAddr>,
    /// The cell: this agent's gossip domain (a DNS label; every --seed must be of the same
    /// cell). A mesh of one cell needs none.
    #[arg(long, default_value = shoal::state::cells::DEFAULT_CELL)]
    cell: String,
    /// The API address of an agent of another cell, to learn the mesh's other cells from when
    /// this cell knows none yet (repeatable).
    #[arg(long = "cell-seed", value_name = "IP:PORT")]
    cell_seeds: Vec<SocketAddr>,
    /// Declared CPU capacity (default: this machine's CPUs).
    #[arg(long)]
    cpu: Option<String>,
    /// Declared memory capacity (default: this machine's memory).
    #[arg(long)]
    memory: Option<String>,
    /// Failure domain.
    #[arg(long, default_value = "default")]
    zone: String,
    /// A SIGTERM is a planned restart: every instance keeps running, exclusive ones under the
    /// guard's lease for this long (at most the lease, 10s), and peers (mesh version 8 on) move
    /// nothing while it restarts; if no agent is back by then the guard fences them and the mesh
    /// replaces them as after a crash. 0s: a SIGTERM fences exclusive instances and leaves.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    restart_grace: String,
    /// A node label for placement constraints, `key=value` (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// Which runtime runs this node's instances.
    #[arg(long, value_enum, default_value = "process")]
    runtime: Runtime,
    /// Serve OpenMetrics at http://IP:PORT/metrics, with /healthz and /readyz.
    #[arg(long, value_name = "IP:PORT")]
    metrics: Option<SocketAddr>,
    /// The host IP containers' ports are published on (--runtime docker). Default: the IP this
    /// agent advertises (--api's, or --gossip's when --api is a wildcard); all interfaces when
    /// both are wildcards or with 0.0.0.0.
    #[arg(long, value_name = "IP")]
    publish_addr: Option<std::net::IpAddr>,
    /// Serve the read-only web UI at IP:PORT: plain HTTP on a loopback address; on any other,
    /// HTTPS with the node's certificate, and only to browsers presenting a client certificate
    /// of the cluster (docs/ui.md).
    #[arg(long, value_name = "IP:PORT")]
    ui: Option<SocketAddr>,
    /// Answer DNS for the mesh's workloads on IP:PORT, UDP and TCP (off unless given):
    /// `NAME.shoal.`, `REPLICA.NAME.shoal.`, `_PORT._tcp.NAME.shoal.` (docs/operations.md, "DNS").
    #[arg(long, value_name = "IP:PORT")]
    dns: Option<SocketAddr>,
    /// The zone `--dns` answers.
    #[arg(long, value_name = "DOMAIN", default_value = "shoal.")]
    dns_domain: String,
    /// Where the host ports of named ports without a number come from (`ports = [{ name =
    /// "http" }]`), handed to instances as SHOAL_PORT_<NAME>; keep it clear of the kernel's
    /// ephemeral range (docs/operations.md, "Named ports").
    #[arg(long, value_name = "LOW-HIGH", default_value = "20000-32767")]
    port_range: String,
    /// A directory under which workloads may use host paths (`[[volumes]] kind = "host"`),
    /// repeatable; without any, every host path is refused (docs/operations.md, "Volumes").
    #[arg(long = "volume-root", value_name = "DIR")]
    volume_roots: Vec<String>,
    /// Who workloads without a `user` run as: a name or uid[:gid] of this host, resolved at start
    /// (processes run as it, containers as its numeric uid:gid, whatever the image's default
    /// user). Default `nobody`; an agent not started as root runs them as itself
    /// (docs/operations.md, "Workload users").
    #[arg(long, value_name = "USER")]
    workload_user: Option<String>,
    /// Run workloads whose spec's `user` is root (`root`, `0`, `0:GROUP`, or a name that is uid 0
    /// here); without it such a replica is refused here, and placement (mesh version 10) puts
    /// it only on agents started with this flag.
    #[arg(long)]
    allow_root_workloads: bool,
    /// Registry credentials for the docker runtime's image pulls: a Docker config.json whose
    /// `auths` gives `auth` (base64 user:password) or `username`/`password` per registry host.
    /// Read once at startup; never gossiped or logged (docs/operations.md, "Image pulls").
    #[arg(long, value_name = "FILE")]
    registry_auth: Option<std::path::PathBuf>,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Most bytes an instance's output keeps on disk, all its rotated files together (`shoal
    /// logs` reads them; docs/operations.md, "Logs"). Containers too: the `json-file` driver
    /// with max-size and max-file, unless --engine-logs.
    #[arg(long, value_name = "BYTES", default_value = "10Mi")]
    log_max_bytes: String,
    /// How many files --log-max-bytes is spread over (the current one and the rotated ones).
    #[arg(long, value_name = "N", default_value_t = shoal::node::runtime::logs::LOG_FILES_DEFAULT)]
    log_files: u32,
    /// Leave containers' logging to the engine (its `daemon.json`: driver and bounds) instead of
    /// `json-file` within --log-max-bytes. The engine's default `json-file` keeps everything.
    #[arg(long)]
    engine_logs: bool,
    /// Change an admission limit of the api or gossip endpoint (repeatable), e.g.
    /// `api.handshakes_per_ip_max=32`, `gossip.connections_per_ip_max=2048`; keys and defaults in
    /// docs/operations.md, "Limits before and after the handshake".
    #[arg(long = "admission", value_name = "ENDPOINT.KEY=VALUE")]
    admission: Vec<String>,
}

/// Instance runtimes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Runtime {
    /// Supervised host processes.
    Process,
    /// Docker containers.
    Docker,
}

/// Log formats.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour_on_stderr())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Colours only for a person: stderr a terminal and `NO_COLOR` unset (journald, files and pipes
/// get plain text).
pub fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn machine_memory_bytes() -> anyhow::Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    for line in meminfo.lines() {
        if let Some(rest) = line.strip_prefix("MemTotal:") {
            let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse()?;
            return Ok(kib * 1024);
        }
    }
    bail!("/proc/meminfo has no MemTotal: pass --memory")
}

fn options(args: &Args) -> anyhow::Result<AgentOptions> {
    let cpu_millis = match &args.cpu {
        Some(text) => parse_cpu_millis(text).map_err(|e| anyhow::anyhow!("--cpu: {e}"))?,
        None => std::thread::available_parallelism()
            .map(|n| n.get() as u64 * 1000)
            .unwrap_or(1000),
    };
    let memory_bytes = match &args.memory {
        Some(text) => parse_memory_bytes(text).map_err(|e| anyhow::anyhow!("--memory: {e}"))?,
        None => machine_memory_bytes()?,
    };
    if cpu_millis == 0 || memory_bytes == 0 {
        bail!("--cpu and --memory must be above zero");
    }
    let mut labels = BTreeMap::new();
    for label in &args.labels {
        let Some((k, v)) = label.split_once('=') else {
            bail!("--label {label:?}: expected KEY=VALUE, e.g. --label disk=ssd");
        };
        let (k, v) = (k.trim(), v.trim());
        if shoal_core::constraint::BUILT_IN_KEYS.contains(&k) {
            bail!(
                "--label {label:?}: the key {k:?} is built in (the node's own {k}); built-in \
                 keys: {} (the zone is set with --zone)",
                shoal_core::constraint::BUILT_IN_KEYS.join(", ")
            );
        }
        for (what, text) in [("key", k), ("value", v)] {
            if !shoal_core::constraint::valid_token(text) {
                bail!(
                    "--label {label:?}: the {what} {text:?} is not one constraints can match: 1 to \
                     63 ASCII letters, digits, '-', '_', '.' or '/'"
                );
            }
        }
        labels.insert(k.to_string(), v.to_string());
    }
    if labels.len() > shoal::state::mesh::record::LABELS_MAX {
        bail!(
            "--label: {} labels, more than the {} a node may carry",
            labels.len(),
            shoal::state::mesh::record::LABELS_MAX
        );
    }
    shoal::identity::pki::validate_name(&args.name).map_err(|e| anyhow::anyhow!("--name: {e}"))?;
    shoal::state::cells::check_cell_name(&args.cell).map_err(|e| anyhow::anyhow!("--cell: {e}"))?;
    let (api_admission, gossip_admission) = admission_limits(&args.admission)?;
    let zone = shoal::node::dns::Zone::new(&args.dns_domain).map_err(|e| anyhow::anyhow!(e))?;
    let dns = args
        .dns
        .map(|addr| shoal::node::dns::DnsConfig { addr, zone });
    let port_range = shoal_core::ports::PortRange::parse(&args.port_range)
        .map_err(|e| anyhow::anyhow!("--port-range: {e}"))?;
    let registry_auth = match &args.registry_auth {
        Some(path) => Some(std::sync::Arc::new(
            shoal::node::runtime::docker::RegistryAuth::load(path)?,
        )),
        None => None,
    };
    if args.engine_logs && matches!(args.runtime, Runtime::Process) {
        bail!("--engine-logs is for --runtime docker: process instances are logged by the agent");
    }
    if registry_auth.is_some() && matches!(args.runtime, Runtime::Process) {
        bail!("--registry-auth is for --runtime docker: the process runtime pulls no images");
    }
    let process_logs = shoal::node::runtime::process::LogConfig {
        bytes_max: parse_memory_bytes(&args.log_max_bytes)
            .map_err(|e| anyhow::anyhow!("--log-max-bytes: {e}"))?,
        files: args.log_files,
        ..Default::default()
    };
    process_logs
        .check()
        .map_err(|e| anyhow::anyhow!("--log-max-bytes/--log-files: {e}"))?;
    Ok(AgentOptions {
        name: args.name.clone(),
        gossip_addr: args.gossip,
        api_addr: args.api,
        data_dir: args.data_dir.clone(),
        pki_dir: args.pki.clone(),
        self_issue: args.self_issue,
        seeds: args.seeds.clone(),
        cell: args.cell.clone(),
        cell_seeds: args.cell_seeds.clone(),
        cpu_millis,
        memory_bytes,
        zone: args.zone.clone(),
        labels,
        tuning: GossipTuning::default(),
        metrics_addr: args.metrics,
        publish_addr: args.publish_addr,
        ui_addr: args.ui,
        dns,
        runtime: match args.runtime {
            Runtime::Process => RuntimeChoice::Process,
            Runtime::Docker => RuntimeChoice::Docker,
        },
        registry_auth,
        process_logs,
        engine_logs: args.engine_logs,
        workload_users: workload_users(args.workload_user.as_deref(), args.allow_root_workloads)?,
        host: HostConfig {
            port_range,
            volume_roots: volume_roots(&args.volume_roots)?,
            restart_grace_ms: restart_grace(&args.restart_grace)?,
            ..HostConfig::default()
        },
        api_admission,
        gossip_admission,
    })
}

/// `--workload-user` and `--allow-root-workloads`, checked on this host. An agent that is not
/// root cannot run workloads as another user: without the flag they run as the agent's user
/// (which is not root), with it the flag is refused.
fn workload_users(
    user: Option<&str>,
    root_allowed: bool,
) -> anyhow::Result<shoal::node::runtime::users::WorkloadUsers> {
    use shoal::node::runtime::users::WorkloadUsers;
    if !nix::unistd::geteuid().is_root() {
        if let Some(user) = user {
            bail!(
                "--workload-user {user:?}: running workloads as another user needs the agent to \
                 run as root; leave the flag out to run them as the agent's own user"
            );
        }
        return Ok(WorkloadUsers {
            default: None,
            root_allowed: false,
        });
    }
    WorkloadUsers::of_flags(user.unwrap_or(WORKLOAD_USER_DEFAULT), root_allowed)
        .map_err(|e| anyhow::anyhow!(e))
}

/// Who workloads without `user` run as unless `--workload-user` says otherwise.
const WORKLOAD_USER_DEFAULT: &str = "nobody";

/// `--restart-grace`: at most the guard's lease, which is what keeps exclusive instances safe
/// while no agent renews it.
fn restart_grace(text: &str) -> anyhow::Result<u64> {
    let ms = shoal_core::spec::parse_duration_ms(text)
        .map_err(|e| anyhow::anyhow!("--restart-grace: {e}"))?;
    let max = shoal::node::host::RESTART_GRACE_MS_DEFAULT;
    if ms > max {
        bail!(
            "--restart-grace {text}: at most the guard's lease ({}): past it nothing would fence an \
             exclusive instance of an agent that does not come back",
            shoal_core::spec::format_duration_ms(max)
        );
    }
    Ok(ms)
}

/// The `--volume-root`s: absolute, normalized paths (compared as written, component by
/// component, with the host paths of specs).
fn volume_roots(roots: &[String]) -> anyhow::Result<Vec<String>> {
    for root in roots {
        shoal_core::spec::check_absolute_path(root)
            .map_err(|e| anyhow::anyhow!("--volume-root: {e}"))?;
    }
    Ok(roots.to_vec())
}

/// The endpoints' admission limits: the defaults changed by each `--admission` setting.
fn admission_limits(settings: &[String]) -> anyhow::Result<(AdmissionConfig, AdmissionConfig)> {
    let (mut api, mut gossip) = (AdmissionConfig::api(), AdmissionConfig::gossip());
    for setting in settings {
        let parts = setting
            .split_once('=')
            .and_then(|(path, value)| Some((path.split_once('.')?, value)));
        let Some(((endpoint, key), value)) = parts else {
            bail!(
                "--admission {setting:?}: expected ENDPOINT.KEY=VALUE, e.g. api.handshakes_max=64"
            );
        };
        let config = match endpoint {
            "api" => &mut api,
            "gossip" => &mut gossip,
            _ => bail!("--admission {setting:?}: the endpoint is api or gossip"),
        };
        config
            .set(key, value)
            .map_err(|e| anyhow::anyhow!("--admission {setting:?}: {e}"))?;
    }
    Ok((api, gossip))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupt received"),
    }
}

/// Runs the agent until SIGTERM or Ctrl-C.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    init_logging(args.log_format);
    let opts = options(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_agent(opts, shutdown_signal()))?;
    Ok(ExitCode::SUCCESS)
}
