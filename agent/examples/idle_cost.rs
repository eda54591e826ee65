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

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Parser;
use shoal::core::spec::WorkloadSpec;
use shoal::wire::api::Request;
use support::agents::{LocalMesh, MeshBuilder};
use support::client::BenchClient;
use support::procfs::{clock_ticks_per_sec, pgrep, stat_fields, status_kib};
use support::run::run_bench;

/// Time between two polls while waiting.
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
    let samples = run_bench(&args.shoal, measure(&args))?;
    report(&args, &samples);
    Ok(())
}

async fn measure(args: &Args) -> anyhow::Result<Vec<Sample>> {
    let marker = 1_000_000_000 + u64::from(std::process::id()) * 100;
    let instance_pattern = format!("^sleep {marker}$");
    let mesh = MeshBuilder::new(&args.shoal, args.agents, "shoal-idle-")
        .metrics()
        .kill_at_drop(instance_pattern.clone())
        .start()?;
    let client = BenchClient::new(&mesh.pki(), CALL_TIMEOUT)?;
    mesh.wait_members(&client, STAGE_TIMEOUT, POLL).await?;
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
    let running = pgrep(&["-f", &instance_pattern]).len();
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

async fn all_healthy(client: &BenchClient, api: SocketAddr, workloads: &[(String, u32)]) -> bool {
    for (name, replicas) in workloads {
        let Ok(status) = client.status(api, name).await else {
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
async fn sample(mesh: &LocalMesh, seconds: u64) -> anyhow::Result<Vec<Sample>> {
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
    status_kib(pid, "VmRSS:")
}

/// `utime + stime` of `pid` (fields 14 and 15 of /proc/PID/stat), in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let [utime, stime] = stat_fields(pid, [14, 15])?;
    Ok(utime + stime)
}

/// `shoal_gossip_bytes_total{direction="out"}` from the agent's /metrics (0 if unreadable).
fn gossip_out(metrics: Option<SocketAddr>) -> u64 {
    let Some(metrics) = metrics else {
        return 0;
    };
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
