//! Idle cost benchmark: memory and CPU of real `shoal agent` processes on loopback that supervise
//! healthy `sleep` instances and have nothing to change.
//!
//! ```text
//! cargo build --release -p shoal
//! cargo run --release -p shoal --example idle_cost -- \
//!     --instances 50 --agents 3 --seconds 30 --shoal target/release/shoal --json
//! ```
//!
//! It builds nothing: it runs the `shoal` binary given by `--shoal`. It starts the agents in a
//! temp dir (process runtime, ports from the kernel, `/metrics` on), applies enough `sleep`
//! workloads to total `--instances` (a workload's replicas go to distinct nodes, so each has at
//! most `--agents` replicas), waits until every instance is healthy and then `--settle-secs`, and
//! samples each agent for `--seconds`: resident memory (`VmRSS` in /proc/PID/status, once a
//! second, the highest kept), CPU (`utime + stime` from /proc/PID/stat over the window, as a
//! percentage of one core) and gossip bytes sent (`shoal_gossip_bytes_total` on /metrics). The
//! instances' own cost is not counted.
//!
//! The last stdout line is one JSON object `{agents, instances, seconds, rss_kib_per_agent_max,
//! rss_kib_per_agent_mean, cpu_percent_per_agent_mean, cpu_percent_per_agent_max, ...}`. The
//! figures are in docs/measurements.md.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use shoal::core::spec::WorkloadSpec;
use shoal::identity::tls::ANY_MEMBER;
use shoal::transport::rpc::QuicRpcClient;
use shoal::wire::api::{Request, Response, PAGE_ITEMS_MAX};

/// Time between two polls while waiting.
mod support;
use support::{bench_rpc, free_udp_addrs, skew_hint};

const POLL: Duration = Duration::from_millis(200);
/// Longest wait for the mesh to form and for every instance to be healthy.
const STAGE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait for one API call.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Agent RSS and CPU while idle with healthy instances.
#[derive(Debug, Parser)]
struct Args {
    /// Instances in total, over all agents.
    #[arg(long, default_value_t = 50)]
    instances: u32,
    /// Agents.
    #[arg(long, default_value_t = 3)]
    agents: usize,
    /// Length of the measurement window.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Seconds between "every instance healthy" and the window.
    #[arg(long, default_value_t = 5)]
    settle_secs: u64,
    /// The release binary to run.
    #[arg(long, default_value = "target/release/shoal")]
    shoal: PathBuf,
    /// Print only the JSON line on stdout.
    #[arg(long)]
    json: bool,
}

/// One agent's figures over the window.
#[derive(Debug, Default)]
struct Sample {
    rss_kib_max: u64,
    cpu_percent: f64,
    gossip_out_bytes_per_sec: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.agents == 0 || args.instances == 0 || args.seconds == 0 {
        bail!("--agents, --instances and --seconds must be at least 1");
    }
    if !args.shoal.is_file() {
        bail!(
            "{} not found: run cargo build --release first (or pass --shoal PATH)",
            args.shoal.display()
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let samples = runtime.block_on(async {
        tokio::select! {
            samples = measure(&args) => samples,
            _ = tokio::signal::ctrl_c() => bail!("interrupted (every process started was stopped)"),
        }
    })?;
    report(&args, &samples);
    Ok(())
}

async fn measure(args: &Args) -> anyhow::Result<Vec<Sample>> {
    let marker = 1_000_000_000 + u64::from(std::process::id()) * 100;
    let mesh = Mesh::start(&args.shoal, args.agents, format!("^sleep {marker}$"))?;
    let client = Client::new(&mesh.pki())?;
    mesh.wait_members(&client).await?;
    let workloads = workloads(args.instances, args.agents as u32, marker)?;
    let names: Vec<(String, u32)> = workloads
        .iter()
        .map(|w| (w.name.clone(), w.replicas))
        .collect();
    client
        .call(mesh.agents[0].api, Request::Apply { specs: workloads })
        .await?;
    let start = Instant::now();
    while !all_healthy(&client, mesh.agents[0].api, &names).await {
        if start.elapsed() > STAGE_TIMEOUT {
            bail!(
                "instances not all healthy within {STAGE_TIMEOUT:?}; logs in {}",
                mesh.dir.path().display()
            );
        }
        tokio::time::sleep(POLL).await;
    }
    eprintln!(
        "{} instances in {} workloads healthy on {} agents after {:.1} s; settling {} s, then \
         sampling {} s",
        args.instances,
        names.len(),
        args.agents,
        start.elapsed().as_secs_f64(),
        args.settle_secs,
        args.seconds
    );
    tokio::time::sleep(Duration::from_secs(args.settle_secs)).await;
    let running = pgrep(&mesh.instance_pattern);
    if running != args.instances as usize {
        bail!("{running} sleep processes run, {} wanted", args.instances);
    }
    sample(&mesh, args.seconds).await
}

/// Workloads totalling `instances` replicas, each with at most `agents` of them.
fn workloads(instances: u32, agents: u32, marker: u64) -> anyhow::Result<Vec<WorkloadSpec>> {
    let mut specs = Vec::new();
    let mut left = instances;
    while left > 0 {
        let replicas = left.min(agents);
        let name = format!("idle-{}", specs.len());
        let text = format!(
            "name = \"{name}\"\nreplicas = {replicas}\n[process]\ncommand = [\"sleep\", \"{marker}\"]\n\
             [resources]\ncpu = \"10m\"\nmemory = \"8Mi\"\n"
        );
        let spec =
            WorkloadSpec::from_toml_str(&text, "idle.toml").map_err(|e| anyhow::anyhow!("{e}"))?;
        specs.push(spec);
        left -= replicas;
    }
    Ok(specs)
}

async fn all_healthy(client: &Client, api: SocketAddr, workloads: &[(String, u32)]) -> bool {
    for (name, replicas) in workloads {
        let req = Request::Status {
            name: name.clone(),
            after: None,
            limit: PAGE_ITEMS_MAX,
        };
        let Ok(Response::Status {
            view: status,
            next_after: None,
        }) = client.call(api, req).await
        else {
            return false;
        };
        let healthy: BTreeSet<u32> = status
            .instances
            .iter()
            .filter(|i| i.phase == "running" && i.healthy == Some(true))
            .map(|i| i.replica)
            .collect();
        if healthy.len() != *replicas as usize {
            return false;
        }
    }
    true
}

/// Samples every agent for `seconds`.
async fn sample(mesh: &Mesh, seconds: u64) -> anyhow::Result<Vec<Sample>> {
    let ticks_per_sec = clock_ticks_per_sec();
    let pids: Vec<u32> = mesh
        .agents
        .iter()
        .map(|a| a.child.as_ref().expect("running").id())
        .collect();
    let cpu_before = pids
        .iter()
        .map(|&p| cpu_ticks(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let gossip_before: Vec<u64> = mesh.agents.iter().map(|a| gossip_out(a.metrics)).collect();
    let start = Instant::now();
    let mut samples: Vec<Sample> = pids.iter().map(|_| Sample::default()).collect();
    for second in 1..=seconds {
        for (s, &pid) in samples.iter_mut().zip(&pids) {
            s.rss_kib_max = s.rss_kib_max.max(rss_kib(pid)?);
        }
        let next = start + Duration::from_secs(second);
        tokio::time::sleep_until(next.into()).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    for (i, s) in samples.iter_mut().enumerate() {
        let ticks = cpu_ticks(pids[i])? - cpu_before[i];
        s.cpu_percent = ticks as f64 / ticks_per_sec / elapsed * 100.0;
        let sent = gossip_out(mesh.agents[i].metrics).saturating_sub(gossip_before[i]);
        s.gossip_out_bytes_per_sec = sent as f64 / elapsed;
        s.rss_kib_max = s.rss_kib_max.max(rss_kib(pids[i])?);
        eprintln!(
            "{}: rss max {} KiB, cpu {:.2} % of a core, gossip out {:.1} KB/s",
            mesh.agents[i].name,
            s.rss_kib_max,
            s.cpu_percent,
            s.gossip_out_bytes_per_sec / 1000.0
        );
    }
    Ok(samples)
}

fn report(args: &Args, samples: &[Sample]) {
    let n = samples.len() as f64;
    let rss: Vec<u64> = samples.iter().map(|s| s.rss_kib_max).collect();
    let cpu: Vec<f64> = samples.iter().map(|s| s.cpu_percent).collect();
    let round2 = |x: f64| (x * 100.0).round() / 100.0;
    let gossip_mean = samples
        .iter()
        .map(|s| s.gossip_out_bytes_per_sec)
        .sum::<f64>()
        / n;
    let json = serde_json::json!({
        "agents": args.agents,
        "instances": args.instances,
        "seconds": args.seconds,
        "rss_kib_per_agent_max": rss.iter().max(),
        "rss_kib_per_agent_mean": (rss.iter().sum::<u64>() as f64 / n).round() as u64,
        "cpu_percent_per_agent_mean": round2(cpu.iter().sum::<f64>() / n),
        "cpu_percent_per_agent_max": round2(cpu.iter().cloned().fold(0.0, f64::max)),
        "gossip_out_kb_per_sec_per_agent_mean": round2(gossip_mean / 1000.0),
    });
    if !args.json {
        println!(
            "{} agents, {} instances, {} s idle: RSS per agent mean {} KiB (max {}), CPU per \
             agent mean {} % of a core (max {})",
            args.agents,
            args.instances,
            args.seconds,
            json["rss_kib_per_agent_mean"],
            json["rss_kib_per_agent_max"],
            json["cpu_percent_per_agent_mean"],
            json["cpu_percent_per_agent_max"]
        );
    }
    println!("{json}");
}

/// `VmRSS` of `pid`, in KiB.
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("agent {pid} is gone"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS in /proc/PID/status")
}

/// `utime + stime` of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("agent {pid} is gone"))?;
    // The command name may hold spaces: the fields start after its closing parenthesis, with
    // the state (field 3); utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("malformed /proc/PID/stat")?
        .1
        .split_whitespace()
        .collect();
    let field = |n: usize| -> anyhow::Result<u64> {
        Ok(fields.get(n - 3).context("short /proc/PID/stat")?.parse()?)
    };
    Ok(field(14)? + field(15)?)
}

fn clock_ticks_per_sec() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// `shoal_gossip_bytes_total{direction="out"}` from the agent's /metrics (0 if unreadable).
fn gossip_out(metrics: SocketAddr) -> u64 {
    let scrape = || -> std::io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&metrics, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    };
    scrape()
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("shoal_gossip_bytes_total{direction=\"out\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// An API client with one QUIC connection per agent, presenting a client certificate it issues.
struct Client {
    rpc: QuicRpcClient,
}

impl Client {
    /// Must be called inside the tokio runtime (the endpoint needs it).
    fn new(pki: &Path) -> anyhow::Result<Client> {
        Ok(Client {
            rpc: bench_rpc(pki)?,
        })
    }

    async fn call(&self, api: SocketAddr, req: Request) -> anyhow::Result<Response> {
        let answer = self.rpc.call(api, ANY_MEMBER, &req, CALL_TIMEOUT).await;
        match answer.map_err(skew_hint)? {
            Response::Error(e) => bail!("{}", e.message),
            other => Ok(other),
        }
    }
}

struct Agent {
    name: String,
    api: SocketAddr,
    metrics: SocketAddr,
    child: Option<Child>,
}

/// Agent processes in a temp dir; dropping it kills them and their instances.
struct Mesh {
    dir: tempfile::TempDir,
    agents: Vec<Agent>,
    /// `pkill -f` pattern of the instances, which outlive their agents.
    instance_pattern: String,
}

impl Mesh {
    fn start(shoal: &Path, n: usize, instance_pattern: String) -> anyhow::Result<Mesh> {
        let dir = tempfile::Builder::new().prefix("shoal-idle-").tempdir()?;
        let mut mesh = Mesh {
            dir,
            agents: Vec::new(),
            instance_pattern,
        };
        let pki = mesh.pki();
        let out = Command::new(shoal)
            .args(["pki", "init", "--dir"])
            .arg(&pki)
            .output()?;
        if !out.status.success() {
            bail!("shoal pki init: {}", String::from_utf8_lossy(&out.stderr));
        }
        let udp = free_udp_addrs(2 * n)?;
        let tcp = free_tcp_addrs(n)?;
        for i in 0..n {
            let name = format!("n{}", i + 1);
            let (gossip, api, metrics) = (udp[2 * i], udp[2 * i + 1], tcp[i]);
            let mut cmd = Command::new(shoal);
            cmd.args(["agent", "--name", &name])
                .args(["--gossip", &gossip.to_string(), "--api", &api.to_string()])
                .args(["--metrics", &metrics.to_string()])
                .arg("--data-dir")
                .arg(mesh.dir.path().join(format!("data-{name}")))
                .env("SHOAL_SELF_ISSUE", "true")
                .arg("--pki")
                .arg(&pki)
                .args(["--cpu", "4", "--memory", "8Gi"]);
            if i > 0 {
                cmd.args(["--seed", &udp[0].to_string()]);
            }
            let log = File::create(mesh.dir.path().join(format!("{name}.log")))?;
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .env("RUST_LOG", "warn,shoal=info");
            let child = cmd.spawn().context("starting an agent")?;
            mesh.agents.push(Agent {
                name,
                api,
                metrics,
                child: Some(child),
            });
        }
        Ok(mesh)
    }

    fn pki(&self) -> PathBuf {
        self.dir.path().join("pki")
    }

    /// Waits until every agent holds every agent alive.
    async fn wait_members(&self, client: &Client) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let mut formed = true;
            for agent in &self.agents {
                let req = Request::Nodes {
                    after: None,
                    limit: PAGE_ITEMS_MAX,
                };
                let alive = match client.call(agent.api, req).await {
                    Ok(Response::Nodes { nodes, .. }) => nodes.iter().filter(|n| n.alive).count(),
                    _ => 0,
                };
                formed &= alive == self.agents.len();
            }
            if formed {
                return Ok(());
            }
            if start.elapsed() > STAGE_TIMEOUT {
                bail!("the mesh did not form within {STAGE_TIMEOUT:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        for agent in &mut self.agents {
            if let Some(child) = agent.child.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let dir = self.dir.path().display().to_string();
        for pattern in [self.instance_pattern.as_str(), dir.as_str()] {
            let _ = Command::new("pkill").args(["-9", "-f", pattern]).status();
        }
    }
}

/// How many processes `pgrep -f PATTERN` lists.
fn pgrep(pattern: &str) -> usize {
    Command::new("pgrep")
        .args(["-f", pattern])
        .output()
        .map_or(0, |o| String::from_utf8_lossy(&o.stdout).lines().count())
}

/// `n` distinct free loopback TCP addresses (bound together, then released).
fn free_tcp_addrs(n: usize) -> anyhow::Result<Vec<SocketAddr>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<_, _>>()?)
}
