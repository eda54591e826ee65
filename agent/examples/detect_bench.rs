//! Failure detection benchmark at the agent level: the time from the SIGKILL of one `shoal agent`
//! in a mesh of real agent processes on loopback until EVERY surviving agent reports it dead.
//!
//! ```text
//! cargo build --release -p shoal
//! cargo run --release -p shoal --example detect_bench -- \
//!     --agents 20 --runs 5 --shoal target/release/shoal --json
//! ```
//!
//! It builds nothing: it runs the `shoal` binary given by `--shoal`. Each run starts a fresh mesh
//! in a temp dir (no workloads, ports from the kernel), waits until every agent holds every agent
//! alive and then `--settle-secs` (the phi detectors need heartbeat samples), SIGKILLs one agent
//! other than the seed, and asks every survivor for its membership (`Nodes` over the API, all at
//! once, every `--poll-ms`). A survivor has detected the death when the victim is absent or
//! `alive = false`; the run's figure is the time until the last survivor has. The chitchat-level
//! measurement of the same thing is `measure_failure_detection_over_quic` in
//! agent/tests/transport_gossip.rs.
//!
//! With `--cells K`, agent i is in cell `c(i mod K + 1)` (every agent joins through the first,
//! across cells through its directory), "formed" means every agent holds its own cell's members
//! alive and knows all K cells up, and the survivors asked are the victim's cell's (no other cell
//! gossips with its members; they learn of it through the cell summary). Before the kill, the
//! run applies a workload (`--replicas` sleeping processes) through the first agent, waits until
//! every replica runs healthy, and checks that `status` of it reads the same from every agent
//! (replica, node, phase, health); the JSON gains `status_agreed_ms` (from the apply).
//!
//! Per-run lines go to stderr; the last stdout line is one JSON object
//! `{agents, runs, detect_all_ms_median, detect_all_ms_worst, ...}`. The target is 3000 ms (2000
//! ms within a cell, issue 13); the figures are in docs/measurements.md.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use futures_util::future::join_all;
use shoal::identity::tls::ANY_MEMBER;
use shoal::transport::rpc::QuicRpcClient;
use shoal::wire::api::{Request, Response, PAGE_ITEMS_MAX};

/// Longest wait for the mesh to form and for the death to be detected everywhere.
mod support;
use support::{bench_rpc, free_udp_addrs, median, skew_hint};

const STAGE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait for one API call.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Time until every survivor declares a SIGKILLed agent dead.
#[derive(Debug, Parser)]
struct Args {
    /// Agents per mesh.
    #[arg(long, default_value_t = 20)]
    agents: usize,
    /// Fresh meshes to start, one kill each.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Seconds between "mesh formed" and the kill.
    #[arg(long, default_value_t = 10)]
    settle_secs: u64,
    /// Time between two polls of the survivors.
    #[arg(long, default_value_t = 50)]
    poll_ms: u64,
    /// The release binary to run.
    #[arg(long, default_value = "target/release/shoal")]
    shoal: PathBuf,
    /// Cells to spread the agents over (0: one cell, no `--cell` flag).
    #[arg(long, default_value_t = 0)]
    cells: usize,
    /// Replicas of the workload whose status must agree on every agent (0: no workload).
    #[arg(long, default_value_t = 0)]
    replicas: u32,
    /// Print only the JSON line on stdout.
    #[arg(long)]
    json: bool,
}

/// What one run measured, in ms since the kill.
struct RunResult {
    first_ms: u64,
    all_ms: u64,
    status_agreed_ms: Option<u64>,
    survivors: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.agents < 3 {
        bail!("need --agents >= 3 (a seed, a victim and a witness)");
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
            "run {}/{}: first survivor saw the death after {} ms, all {} after {} ms",
            run + 1,
            args.runs,
            result.first_ms,
            result.survivors,
            result.all_ms
        );
        results.push(result);
    }
    Ok(results)
}

/// The cell of agent `i` (`None`: one cell).
fn cell_of(args: &Args, i: usize) -> Option<String> {
    (args.cells > 0).then(|| format!("c{}", i % args.cells + 1))
}

async fn one_run(args: &Args, run: usize) -> anyhow::Result<RunResult> {
    let mut mesh = Mesh::start(args)?;
    let client = Client::new(&mesh.dir.path().join("pki"))?;
    let everyone: Vec<usize> = (0..args.agents).collect();
    let cell_size = |i: usize| {
        (0..args.agents)
            .filter(|&j| cell_of(args, j) == cell_of(args, i))
            .count()
    };
    let start = Instant::now();
    loop {
        let views = client.views(&mesh, &everyone).await;
        let members_seen = views
            .iter()
            .enumerate()
            .all(|(i, v)| v.as_ref().is_ok_and(|v| v.len() == cell_size(i)));
        if members_seen && client.cells_up(&mesh, &everyone, args.cells).await {
            break;
        }
        if start.elapsed() > STAGE_TIMEOUT {
            let sizes: Vec<String> = views
                .iter()
                .map(|v| match v {
                    Ok(alive) => alive.len().to_string(),
                    Err(e) => format!("{e:#}"),
                })
                .collect();
            bail!("the mesh did not form within {STAGE_TIMEOUT:?}; members seen: {sizes:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "run {}: {} agents formed a mesh in {:.1} s",
        run + 1,
        args.agents,
        start.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(args.settle_secs)).await;
    let status_agreed_ms = match args.replicas {
        0 => None,
        n => Some(client.status_agrees(&mesh, &everyone, n).await?),
    };

    // Not the seed, and not always the same one.
    let victim = 1 + (run * 7) % (args.agents - 1);
    let victim_name = mesh.agents[victim].name.clone();
    let survivors: Vec<usize> = everyone
        .into_iter()
        .filter(|&i| i != victim && cell_of(args, i) == cell_of(args, victim))
        .collect();
    let killed_at = mesh.kill(victim);
    let mut seen_dead: Vec<Option<Duration>> = vec![None; survivors.len()];
    while seen_dead.iter().any(Option::is_none) {
        if killed_at.elapsed() > STAGE_TIMEOUT {
            bail!(
                "{} survivors still hold {victim_name} alive {STAGE_TIMEOUT:?} after the kill",
                seen_dead.iter().filter(|d| d.is_none()).count()
            );
        }
        let views = client.views(&mesh, &survivors).await;
        let now = killed_at.elapsed();
        for (seen, view) in seen_dead.iter_mut().zip(views) {
            if seen.is_none() && view.is_ok_and(|alive| !alive.contains(&victim_name)) {
                *seen = Some(now);
            }
        }
        tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
    }
    let times: Vec<Duration> = seen_dead.into_iter().flatten().collect();
    Ok(RunResult {
        first_ms: times.iter().min().expect("survivors").as_millis() as u64,
        all_ms: times.iter().max().expect("survivors").as_millis() as u64,
        status_agreed_ms,
        survivors: survivors.len(),
    })
}

fn report(args: &Args, results: &[RunResult]) {
    let all: Vec<u64> = results.iter().map(|r| r.all_ms).collect();
    let first: Vec<u64> = results.iter().map(|r| r.first_ms).collect();
    let json = serde_json::json!({
        "agents": args.agents,
        "runs": results.len(),
        "detect_all_ms_median": median(&all),
        "detect_all_ms_worst": all.iter().max(),
        "detect_all_ms_all": all,
        "detect_first_ms_all": first,
        "settle_secs": args.settle_secs,
        "poll_ms": args.poll_ms,
        "cells": args.cells,
        "replicas": args.replicas,
        "status_agreed_ms_all": results.iter().map(|r| r.status_agreed_ms).collect::<Vec<_>>(),
    });
    if !args.json {
        println!(
            "{} agents, {} runs: every survivor declared the killed agent dead after median {} ms \
             (worst {} ms; target 3000 ms)",
            args.agents,
            results.len(),
            json["detect_all_ms_median"],
            json["detect_all_ms_worst"]
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

    /// Names of the nodes each of `agents` holds alive, asked all at once.
    async fn views(&self, mesh: &Mesh, agents: &[usize]) -> Vec<anyhow::Result<Vec<String>>> {
        join_all(agents.iter().map(|&i| async move {
            let api = mesh.agents[i].api;
            // One page: a bench mesh has fewer members than a page holds.
            let req = Request::Nodes {
                after: None,
                limit: PAGE_ITEMS_MAX,
            };
            let answer = self.rpc.call(api, ANY_MEMBER, &req, CALL_TIMEOUT);
            match answer.await.map_err(skew_hint)? {
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
        }))
        .await
    }
}

/// The workload whose status is compared.
const WORKLOAD: &str = "sleepers";

/// One agent's status of it: (replica, node, phase, healthy) per instance.
type StatusRows = Vec<(u32, Option<String>, String, Option<bool>)>;

impl Client {
    /// Whether every one of `agents` knows `cells` cells, none down (always true for 0 cells).
    async fn cells_up(&self, mesh: &Mesh, agents: &[usize], cells: usize) -> bool {
        if cells == 0 {
            return true;
        }
        let req = Request::CellList {
            after: None,
            limit: PAGE_ITEMS_MAX,
        };
        let answers = join_all(agents.iter().map(|&i| {
            let api = mesh.agents[i].api;
            self.rpc.call(api, ANY_MEMBER, &req, CALL_TIMEOUT)
        }))
        .await;
        answers.into_iter().all(|a| {
            matches!(a, Ok(Response::CellList { cells: list, .. })
                if list.len() == cells && list.iter().all(|c| !c.down))
        })
    }

    /// Applies `replicas` sleeping processes through the first agent, waits until every replica
    /// runs healthy, then until `status` reads the same from every agent; returns ms since the
    /// apply.
    async fn status_agrees(
        &self,
        mesh: &Mesh,
        agents: &[usize],
        replicas: u32,
    ) -> anyhow::Result<u64> {
        let text = format!(
            "name = \"{WORKLOAD}\"\nreplicas = {replicas}\n[process]\ncommand = [\"sleep\", \"3600\"]\n\
             [resources]\ncpu = \"10m\"\nmemory = \"8Mi\"\n"
        );
        let spec = shoal::core::spec::WorkloadSpec::from_toml_str(&text, "bench.toml")
            .map_err(|e| anyhow::anyhow!("bench spec: {e:?}"))?;
        let apply = Request::Apply { specs: vec![spec] };
        let first = mesh.agents[0].api;
        match self
            .rpc
            .call(first, ANY_MEMBER, &apply, Duration::from_secs(10))
            .await
        {
            Ok(Response::Applied(_)) => {}
            other => bail!("apply: {other:?}"),
        }
        let applied = Instant::now();
        let mut last = String::new();
        while applied.elapsed() < STAGE_TIMEOUT {
            // One page: the whole status, up to PAGE_ITEMS_MAX replicas (more fail the bench).
            let req = Request::Status {
                name: WORKLOAD.to_string(),
                after: None,
                limit: PAGE_ITEMS_MAX,
            };
            let views = join_all(agents.iter().map(|&i| {
                let api = mesh.agents[i].api;
                self.rpc
                    .call(api, ANY_MEMBER, &req, Duration::from_secs(10))
            }))
            .await;
            let mut seen: Vec<StatusRows> = Vec::new();
            for view in views {
                match view {
                    Ok(Response::Status {
                        view,
                        next_after: None,
                    }) => seen.push(
                        view.instances
                            .into_iter()
                            .map(|i| (i.replica, i.node, i.phase, i.healthy))
                            .collect(),
                    ),
                    other => {
                        last = format!("{other:?}");
                        seen.clear();
                        break;
                    }
                }
            }
            let healthy = |v: &StatusRows| {
                v.len() == replicas as usize && v.iter().all(|i| i.3 == Some(true))
            };
            if !seen.is_empty() && seen.iter().all(healthy) && seen.iter().all(|v| *v == seen[0]) {
                return Ok(applied.elapsed().as_millis() as u64);
            }
            if let Some(v) = seen.first() {
                last = format!("first agent's view: {v:?}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        bail!("status did not agree on every agent within {STAGE_TIMEOUT:?}; {last}")
    }
}

struct Agent {
    name: String,
    api: SocketAddr,
    child: Option<Child>,
}

/// Agent processes in a temp dir; dropping it kills them.
struct Mesh {
    dir: tempfile::TempDir,
    agents: Vec<Agent>,
}

impl Mesh {
    fn start(args: &Args) -> anyhow::Result<Mesh> {
        let (shoal, n) = (&args.shoal, args.agents);
        let dir = tempfile::Builder::new().prefix("shoal-detect-").tempdir()?;
        let mut mesh = Mesh {
            dir,
            agents: Vec::new(),
        };
        let pki = mesh.dir.path().join("pki");
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
            if let Some(cell) = cell_of(args, i) {
                cmd.args(["--cell", &cell]);
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

    /// SIGKILLs agent `i`; returns the time of the kill.
    fn kill(&mut self, i: usize) -> Instant {
        let mut child = self.agents[i].child.take().expect("the victim is running");
        let killed_at = Instant::now();
        let _ = child.kill();
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
        let _ = Command::new("pkill").args(["-9", "-f", &dir]).status();
    }
}
