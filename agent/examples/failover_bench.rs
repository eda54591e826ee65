//! Failover benchmark: how long a mesh of real `shoal agent` processes on loopback takes to notice
//! that a host died (SIGKILL of its agent and of its instances) and to run every replica healthy
//! again on the surviving hosts.
//!
//! ```text
//! cargo build --release -p shoal
//! cargo run --release -p shoal --example failover_bench -- \
//!     --runs 10 --agents 5 --replicas 4 --shoal target/release/shoal --json
//! ```
//!
//! It builds nothing: it runs the `shoal` binary given by `--shoal`, which must be built from the
//! same sources as this example (the API frames are not self-describing). Each run starts a fresh
//! mesh in a temp dir (process runtime, ports from the kernel), applies a `sleep` workload with
//! `[restart] backoff_initial = "1s"`, waits until every replica is healthy and lets the failure
//! detectors gather samples for `--settle-secs`, then SIGKILLs an agent other than the first that
//! runs a replica (a different one from run to run where several do), together with the process
//! groups of its instances. Every 50 ms it then asks every survivor for its membership (`Nodes`)
//! and the first agent for the workload's `Status`, over the API through cached QUIC
//! connections, and records, since the kill: `detect` (the first agent no longer holds the victim
//! alive; `detect_first`: the earliest survivor that does not) and `healed` (the first agent's
//! status shows every replica running and healthy on a live node other than the victim). A
//! second after healing it reads `started` (when the replacement processes of the victim's
//! replicas started, from their start times in /proc, 10 ms resolution: the moment the new owner
//! acted, before gossip tells the first agent), counts the replicas that moved although their node
//! survived, and the `sleep` processes left.
//!
//! Per-run lines go to stderr; the last stdout line is one JSON object
//! `{runs, agents, replicas, detect_ms_median, detect_ms_worst, healed_ms_median,
//! healed_ms_worst, healed_ms_all, ...}`. The figures are in docs/measurements.md.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use futures_util::future::join_all;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use shoal::core::spec::WorkloadSpec;
use shoal::identity::tls::ANY_MEMBER;
use shoal::transport::rpc::QuicRpcClient;
use shoal::wire::api::{Request, Response, StatusView, PAGE_ITEMS_MAX};

/// Time between two polls of the surviving agent.
mod support;
use support::{bench_rpc, free_udp_addrs, median, skew_hint};

const POLL: Duration = Duration::from_millis(50);
/// Longest wait for any one stage (mesh formed, healthy, healed).
const STAGE_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for one API call.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// The benchmark's workload.
const WORKLOAD: &str = "bench";

/// Time from a host kill to detection and to healthy replacements, over several fresh meshes.
#[derive(Debug, Parser)]
struct Args {
    /// Fresh meshes to start, one host kill each.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Agents per mesh.
    #[arg(long, default_value_t = 5)]
    agents: usize,
    /// Replicas of the `sleep` workload (at most agents - 1, so the survivors can hold them).
    #[arg(long, default_value_t = 4)]
    replicas: u32,
    /// The release binary to run.
    #[arg(long, default_value = "target/release/shoal")]
    shoal: PathBuf,
    /// Seconds between "every replica healthy" and the kill, for the failure detectors' samples.
    #[arg(long, default_value_t = 5)]
    settle_secs: u64,
    /// Print only the JSON line on stdout.
    #[arg(long)]
    json: bool,
}

/// What one run measured.
struct RunResult {
    victim: String,
    victim_replicas: usize,
    /// When the first agent, which the benchmark polls, saw the victim dead.
    detect_ms: u64,
    /// When the first of the survivors saw the victim dead.
    detect_first_ms: u64,
    /// When the last of the victim's replicas' replacement processes started (10 ms resolution).
    started_ms: Option<u64>,
    healed_ms: u64,
    moved: Vec<String>,
    processes_after: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.agents < 2 || args.replicas == 0 || args.replicas as usize >= args.agents {
        bail!(
            "need --agents >= 2 and 1 <= --replicas < --agents (the survivors hold every replica)"
        );
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
    let results = runtime.block_on(async {
        tokio::select! {
            results = run_all(&args) => results,
            _ = tokio::signal::ctrl_c() => bail!("interrupted (every process started was stopped)"),
        }
    })?;
    report(&args, &results);
    Ok(())
}

async fn run_all(args: &Args) -> anyhow::Result<Vec<RunResult>> {
    let mut results = Vec::new();
    for run in 0..args.runs {
        let result = one_run(args, run)
            .await
            .with_context(|| format!("run {}", run + 1))?;
        eprintln!(
            "run {}/{}: killed {} ({} replicas): dead after {} ms (first survivor {} ms), \
             replacement started after {} ms, healed after {} ms, {} moved without need {:?}, \
             {} sleep processes after",
            run + 1,
            args.runs,
            result.victim,
            result.victim_replicas,
            result.detect_ms,
            result.detect_first_ms,
            result
                .started_ms
                .map_or("?".to_string(), |ms| ms.to_string()),
            result.healed_ms,
            result.moved.len(),
            result.moved,
            result.processes_after
        );
        results.push(result);
    }
    Ok(results)
}

async fn one_run(args: &Args, run: usize) -> anyhow::Result<RunResult> {
    // A marker unique to this run: its instances are `sleep MARKER`, found and killed by it.
    let marker = 1_000_000_000 + u64::from(std::process::id()) * 100 + run as u64;
    let mut mesh = Mesh::start(&args.shoal, args.agents, format!("^sleep {marker}$"))?;
    let client = Client::new(&mesh.pki())?;
    mesh.wait_members(&client).await?;
    let spec = sleeper(args.replicas, marker)?;
    client
        .call(mesh.api(0), Request::Apply { specs: vec![spec] })
        .await?;
    mesh.wait_healthy(&client, args.replicas).await?;
    tokio::time::sleep(Duration::from_secs(args.settle_secs)).await;
    let before = mesh.wait_healthy(&client, args.replicas).await?;
    let placed = healthy_nodes(&before);
    // Rotate over the agents (but the first) that run a replica.
    let holders: Vec<usize> = (1..args.agents)
        .filter(|&i| placed.values().any(|n| *n == mesh.agents[i].name))
        .collect();
    if holders.is_empty() {
        bail!("no replica outside the first agent; use more --replicas");
    }
    let victim = holders[run % holders.len()];
    let victim_name = mesh.agents[victim].name.clone();
    let survivors: Vec<SocketAddr> = (0..args.agents)
        .filter(|&i| i != victim)
        .map(|i| mesh.api(i))
        .collect();

    let instances_before = pgrep(&["-f", &mesh.instance_pattern]);
    let killed_boot_s = boot_seconds();
    let killed_at = mesh.kill_host(victim);
    // When each survivor (the first agent first) saw the victim dead.
    let mut seen_dead: Vec<Option<Duration>> = vec![None; survivors.len()];
    let healed = loop {
        if killed_at.elapsed() > STAGE_TIMEOUT {
            bail!(
                "not healed within {STAGE_TIMEOUT:?} of the kill of {victim_name}{}",
                mesh.logs_hint()
            );
        }
        let views = join_all(survivors.iter().map(|&api| client.alive(api))).await;
        let now = killed_at.elapsed();
        for (seen, view) in seen_dead.iter_mut().zip(&views) {
            if let (None, Ok(alive)) = (&seen, view) {
                if !alive.is_empty() && !alive.contains(&victim_name) {
                    *seen = Some(now);
                }
            }
        }
        if let (Ok(alive), Ok(status)) = (&views[0], client.status(mesh.api(0)).await) {
            if all_healthy(&status, args.replicas, Some(&victim_name), Some(alive)) {
                break killed_at.elapsed();
            }
        }
        tokio::time::sleep(POLL).await;
    };
    let detect = seen_dead[0].unwrap_or(healed);
    let detect_first = seen_dead.iter().flatten().min().copied().unwrap_or(detect);

    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = client.status(mesh.api(0)).await?;
    // Replicas whose node survived but which no longer run healthy there, with where they are.
    let moved: Vec<String> = placed
        .iter()
        .filter(|(r, n)| {
            **n != victim_name
                && !after.instances.iter().any(|i| {
                    i.replica == **r
                        && i.node.as_deref() == Some(n.as_str())
                        && i.phase == "running"
                        && i.healthy == Some(true)
                })
        })
        .map(|(r, n)| {
            let now: Vec<String> = after
                .instances
                .iter()
                .filter(|i| i.replica == *r)
                .map(|i| format!("{}:{}", i.node.as_deref().unwrap_or("-"), i.phase))
                .collect();
            format!("replica {r} on {n} -> [{}]", now.join(" "))
        })
        .collect();
    // The start of the victim's replicas' replacements, from the processes' own start times.
    // Only instances count: an agent's children also include its guard, started long before.
    let instances_now = pgrep(&["-f", &mesh.instance_pattern]);
    let mut started_boot_s = Some(0.0f64);
    for (replica, _) in placed.iter().filter(|(_, n)| **n == victim_name) {
        let start = after
            .instances
            .iter()
            .filter(|i| i.replica == *replica && i.phase == "running")
            .filter_map(|i| {
                mesh.agents
                    .iter()
                    .find(|a| i.node.as_ref() == Some(&a.name))
            })
            .filter_map(|a| a.child.as_ref().map(Child::id))
            .flat_map(|pid| pgrep(&["-P", &pid.to_string()]))
            .filter(|pid| instances_now.contains(pid) && !instances_before.contains(pid))
            .filter_map(process_start_boot_seconds)
            .reduce(f64::min);
        started_boot_s = started_boot_s.zip(start).map(|(a, b)| a.max(b));
    }
    let started_ms = killed_boot_s
        .zip(started_boot_s)
        .map(|(kill, start)| ((start - kill) * 1000.0).round().max(0.0) as u64);
    Ok(RunResult {
        started_ms,
        victim_replicas: placed.values().filter(|n| **n == victim_name).count(),
        victim: victim_name,
        detect_ms: detect.as_millis() as u64,
        detect_first_ms: detect_first.as_millis() as u64,
        healed_ms: healed.as_millis() as u64,
        moved,
        processes_after: pgrep(&["-f", &mesh.instance_pattern]).len(),
    })
}

fn sleeper(replicas: u32, marker: u64) -> anyhow::Result<WorkloadSpec> {
    let text = format!(
        "name = \"{WORKLOAD}\"\nreplicas = {replicas}\n[process]\ncommand = [\"sleep\", \"{marker}\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[restart]\nbackoff_initial = \"1s\"\n"
    );
    WorkloadSpec::from_toml_str(&text, "bench.toml").map_err(|e| anyhow::anyhow!("{e}"))
}

/// Replica -> node of its running, healthy instance (the first listed if several).
fn healthy_nodes(status: &StatusView) -> BTreeMap<u32, String> {
    let mut nodes = BTreeMap::new();
    for i in &status.instances {
        if let (true, Some(node)) = (i.phase == "running" && i.healthy == Some(true), &i.node) {
            nodes.entry(i.replica).or_insert_with(|| node.clone());
        }
    }
    nodes
}

/// Whether every replica has a running, healthy instance on a node other than `off` that is in
/// `alive` (when given).
fn all_healthy(
    status: &StatusView,
    replicas: u32,
    off: Option<&str>,
    alive: Option<&BTreeSet<String>>,
) -> bool {
    (0..replicas).all(|r| {
        status.instances.iter().any(|i| {
            i.replica == r
                && i.phase == "running"
                && i.healthy == Some(true)
                && i.node
                    .as_deref()
                    .is_some_and(|n| Some(n) != off && alive.is_none_or(|alive| alive.contains(n)))
        })
    })
}

fn report(args: &Args, results: &[RunResult]) {
    let detect: Vec<u64> = results.iter().map(|r| r.detect_ms).collect();
    let healed: Vec<u64> = results.iter().map(|r| r.healed_ms).collect();
    let started: Vec<u64> = results.iter().filter_map(|r| r.started_ms).collect();
    let json = serde_json::json!({
        "runs": results.len(),
        "agents": args.agents,
        "replicas": args.replicas,
        "detect_ms_median": median(&detect),
        "detect_ms_worst": detect.iter().max(),
        "healed_ms_median": median(&healed),
        "healed_ms_worst": healed.iter().max(),
        "healed_ms_all": healed,
        "detect_ms_all": detect,
        "detect_first_ms_all": results.iter().map(|r| r.detect_first_ms).collect::<Vec<_>>(),
        "started_ms_median": median(&started),
        "started_ms_worst": started.iter().max(),
        "started_ms_all": results.iter().map(|r| r.started_ms).collect::<Vec<_>>(),
        "moved_without_need_total": results.iter().map(|r| r.moved.len()).sum::<usize>(),
        "settle_secs": args.settle_secs,
    });
    if !args.json {
        println!(
            "{} runs, {} agents, {} replicas: detection median {} ms (worst {}), replicas healthy \
             again median {} ms (worst {})",
            results.len(),
            args.agents,
            args.replicas,
            json["detect_ms_median"],
            json["detect_ms_worst"],
            json["healed_ms_median"],
            json["healed_ms_worst"]
        );
    }
    println!("{json}");
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

    /// Names of the nodes `api` holds alive.
    async fn alive(&self, api: SocketAddr) -> anyhow::Result<BTreeSet<String>> {
        // One page: a bench mesh has fewer members than a page holds.
        let req = Request::Nodes {
            after: None,
            limit: PAGE_ITEMS_MAX,
        };
        match self.call(api, req).await? {
            Response::Nodes {
                nodes,
                next_after: None,
            } => Ok(nodes
                .into_iter()
                .filter(|n| n.alive)
                .map(|n| n.name)
                .collect()),
            other => bail!("unexpected answer to Nodes: {other:?}"),
        }
    }

    async fn status(&self, api: SocketAddr) -> anyhow::Result<StatusView> {
        let req = Request::Status {
            name: WORKLOAD.into(),
            after: None,
            limit: PAGE_ITEMS_MAX,
        };
        match self.call(api, req).await? {
            Response::Status {
                view,
                next_after: None,
            } => Ok(view),
            other => bail!("unexpected answer to Status: {other:?}"),
        }
    }
}

struct Agent {
    name: String,
    api: SocketAddr,
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
        let dir = tempfile::Builder::new()
            .prefix("shoal-failover-")
            .tempdir()?;
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
        let addrs = free_udp_addrs(2 * n)?;
        for i in 0..n {
            let name = format!("n{}", i + 1);
            let (gossip, api) = (addrs[2 * i], addrs[2 * i + 1]);
            let mut cmd = Command::new(shoal);
            cmd.args(["agent", "--name", &name])
                .args(["--gossip", &gossip.to_string(), "--api", &api.to_string()])
                .arg("--data-dir")
                .arg(mesh.dir.path().join(format!("data-{name}")))
                .env("SHOAL_SELF_ISSUE", "true")
                .arg("--pki")
                .arg(&pki)
                .args(["--cpu", "4", "--memory", "8Gi"]);
            if i > 0 {
                cmd.args(["--seed", &addrs[0].to_string()]);
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
                child: Some(child),
            });
        }
        Ok(mesh)
    }

    fn pki(&self) -> PathBuf {
        self.dir.path().join("pki")
    }

    fn api(&self, i: usize) -> SocketAddr {
        self.agents[i].api
    }

    fn logs_hint(&self) -> String {
        let log = self.dir.path().join("n1.log");
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("; last lines of n1's log:\n{}", tail.join("\n"))
    }

    /// Waits until every agent holds every agent alive.
    async fn wait_members(&self, client: &Client) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let mut seen = Vec::new();
            for agent in &self.agents {
                seen.push(match client.alive(agent.api).await {
                    Ok(alive) => alive.len().to_string(),
                    Err(e) => format!("{e:#}"),
                });
            }
            let everyone = self.agents.len().to_string();
            if seen.iter().all(|s| *s == everyone) {
                return Ok(());
            }
            if start.elapsed() > STAGE_TIMEOUT {
                bail!(
                    "the mesh did not form within {STAGE_TIMEOUT:?}; members seen: {seen:?}{}",
                    self.logs_hint()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until every replica has a running, healthy instance.
    async fn wait_healthy(&self, client: &Client, replicas: u32) -> anyhow::Result<StatusView> {
        let start = Instant::now();
        loop {
            let status = client.status(self.api(0)).await;
            if let Ok(status) = &status {
                if all_healthy(status, replicas, None, None) {
                    return Ok(status.clone());
                }
            }
            if start.elapsed() > STAGE_TIMEOUT {
                bail!(
                    "replicas not healthy within {STAGE_TIMEOUT:?}; last status: {status:?}{}",
                    self.logs_hint()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// SIGKILLs agent `i` and the process groups of its instances; returns the time of the kill.
    fn kill_host(&mut self, i: usize) -> Instant {
        let mut child = self.agents[i].child.take().expect("the victim is running");
        let instances = pgrep(&["-P", &child.id().to_string()]);
        let killed_at = Instant::now();
        let _ = child.kill();
        for pid in instances {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = child.wait();
        killed_at
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

/// Pids that `pgrep ARGS` lists.
fn pgrep(args: &[&str]) -> Vec<i32> {
    let Ok(out) = Command::new("pgrep").args(args).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Seconds since boot (/proc/uptime), the clock of the processes' start times.
fn boot_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// When `pid` started, in seconds since boot (field 22 of /proc/PID/stat, in clock ticks).
fn process_start_boot_seconds(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start at field 3.
    let ticks: f64 = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(22 - 3)?
        .parse()
        .ok()?;
    Some(ticks / clock_ticks_per_sec())
}

fn clock_ticks_per_sec() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}
