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

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Parser;
use futures_util::future::join_all;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use shoal::core::spec::WorkloadSpec;
use shoal::wire::api::{Request, StatusView};
use support::agents::{LocalMesh, MeshBuilder};
use support::client::BenchClient;
use support::procfs::{clock_ticks_per_sec, pgrep, stat_field};
use support::run::{each_run, run_bench};
use support::stats::median;

/// Time between two polls of the surviving agent.
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

impl RunResult {
    /// The run's line on stderr.
    fn line(&self) -> String {
        format!(
            "killed {} ({} replicas): dead after {} ms (first survivor {} ms), replacement \
             started after {} ms, healed after {} ms, {} moved without need {:?}, {} sleep \
             processes after",
            self.victim,
            self.victim_replicas,
            self.detect_ms,
            self.detect_first_ms,
            self.started_ms.map_or("?".to_string(), |ms| ms.to_string()),
            self.healed_ms,
            self.moved.len(),
            self.moved,
            self.processes_after
        )
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.agents < 2 || args.replicas == 0 || args.replicas as usize >= args.agents {
        bail!(
            "need --agents >= 2 and 1 <= --replicas < --agents (the survivors hold every replica)"
        );
    }
    let runs = each_run(args.runs, |run| one_run(&args, run), RunResult::line);
    let results = run_bench(&args.shoal, runs)?;
    report(&args, &results);
    Ok(())
}

async fn one_run(args: &Args, run: usize) -> anyhow::Result<RunResult> {
    // A marker unique to this run: its instances are `sleep MARKER`, found and killed by it.
    let marker = 1_000_000_000 + u64::from(std::process::id()) * 100 + run as u64;
    let instance_pattern = format!("^sleep {marker}$");
    let mut mesh = MeshBuilder::new(&args.shoal, args.agents, "shoal-failover-")
        .kill_at_drop(instance_pattern.clone())
        .start()?;
    let client = BenchClient::new(&mesh.pki(), CALL_TIMEOUT)?;
    mesh.wait_members(&client, STAGE_TIMEOUT, POLL).await?;
    let spec = sleeper(args.replicas, marker)?;
    client
        .call(mesh.api(0), Request::Apply { specs: vec![spec] })
        .await?;
    wait_healthy(&mesh, &client, args.replicas).await?;
    tokio::time::sleep(Duration::from_secs(args.settle_secs)).await;
    let before = wait_healthy(&mesh, &client, args.replicas).await?;
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

    let instances_before = pgrep(&["-f", &instance_pattern]);
    let killed_boot_s = boot_seconds();
    let killed_at = kill_host(&mut mesh, victim);
    // When each survivor (the first agent first) saw the victim dead.
    let mut seen_dead: Vec<Option<Duration>> = vec![None; survivors.len()];
    let healed = loop {
        if killed_at.elapsed() > STAGE_TIMEOUT {
            bail!(
                "not healed within {STAGE_TIMEOUT:?} of the kill of {victim_name}{}",
                mesh.log_tail(0)
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
        if let (Ok(alive), Ok(status)) = (&views[0], client.status(mesh.api(0), WORKLOAD).await) {
            if all_healthy(&status, args.replicas, Some(&victim_name), Some(alive)) {
                break killed_at.elapsed();
            }
        }
        tokio::time::sleep(POLL).await;
    };
    let detect = seen_dead[0].unwrap_or(healed);
    let detect_first = seen_dead.iter().flatten().min().copied().unwrap_or(detect);

    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = client.status(mesh.api(0), WORKLOAD).await?;
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
    let instances_now = pgrep(&["-f", &instance_pattern]);
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
        processes_after: pgrep(&["-f", &instance_pattern]).len(),
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

/// Waits until every replica has a running, healthy instance.
async fn wait_healthy(
    mesh: &LocalMesh,
    client: &BenchClient,
    replicas: u32,
) -> anyhow::Result<StatusView> {
    let start = Instant::now();
    loop {
        let status = client.status(mesh.api(0), WORKLOAD).await;
        if let Ok(status) = &status {
            if all_healthy(status, replicas, None, None) {
                return Ok(status.clone());
            }
        }
        if start.elapsed() > STAGE_TIMEOUT {
            bail!(
                "replicas not healthy within {STAGE_TIMEOUT:?}; last status: {status:?}{}",
                mesh.log_tail(0)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// SIGKILLs agent `i` and the process groups of its instances; returns the time of the kill.
fn kill_host(mesh: &mut LocalMesh, i: usize) -> Instant {
    let mut child = mesh.agents[i].child.take().expect("the victim is running");
    let instances = pgrep(&["-P", &child.id().to_string()]);
    let killed_at = Instant::now();
    let _ = child.kill();
    for pid in instances {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = child.wait();
    killed_at
}

/// Seconds since boot (/proc/uptime), the clock of the processes' start times.
fn boot_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// When `pid` started, in seconds since boot (field 22 of /proc/PID/stat, in clock ticks).
fn process_start_boot_seconds(pid: i32) -> Option<f64> {
    let ticks = stat_field(pid, 22).ok()?;
    Some(ticks as f64 / clock_ticks_per_sec())
}
