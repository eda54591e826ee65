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

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Parser;
use futures_util::future::join_all;
use shoal::identity::tls::ANY_MEMBER;
use shoal::wire::api::{Request, Response, PAGE_ITEMS_MAX};
use support::agents::{LocalMesh, MeshBuilder};
use support::client::BenchClient;
use support::run::{each_run, run_bench};
use support::stats::median;

/// Longest wait for the mesh to form and for the death to be detected everywhere.
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
    /// Instead of killing the victim, freeze it (SIGSTOP) this many ms of every `--period-ms`
    /// (SIGCONT the rest) for `--freeze-secs`, and count false verdicts: survivors that ever
    /// held anyone dead, and `member-dead` events on any agent (the frozen one included).
    #[arg(long)]
    freeze_ms: Option<u64>,
    /// The freeze duty cycle's period.
    #[arg(long, default_value_t = 500)]
    period_ms: u64,
    /// How long the duty cycle runs.
    #[arg(long, default_value_t = 60)]
    freeze_secs: u64,
    /// Freeze every agent of the victim's cell at once (its cell: with `--cells`).
    #[arg(long)]
    freeze_cell: bool,
}

/// What one run measured, in ms since the kill.
struct RunResult {
    first_ms: u64,
    all_ms: u64,
    status_agreed_ms: Option<u64>,
    survivors: usize,
    /// Freeze mode: (observer, member) pairs a survivor held dead at some poll.
    false_views: usize,
    /// Freeze mode: `member-dead` events on every agent.
    false_events: usize,
    /// Freeze mode: `cell-down` events on every agent (nobody is lost: each one is false).
    false_cell_downs: usize,
    /// Freeze mode: `cell-degraded` events on every agent (a slow cell shown as such).
    cell_degraded: usize,
}

impl RunResult {
    /// The run's line on stderr.
    fn line(&self) -> String {
        if self.false_views > 0 || self.false_events > 0 || self.all_ms == 0 {
            return format!(
                "freeze: {} (observer, member) pairs held dead, {} member-dead events",
                self.false_views, self.false_events
            );
        }
        format!(
            "first survivor saw the death after {} ms, all {} after {} ms",
            self.first_ms, self.survivors, self.all_ms
        )
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.agents < 3 {
        bail!("need --agents >= 3 (a seed, a victim and a witness)");
    }
    let runs = each_run(args.runs, |run| one_run(&args, run), RunResult::line);
    let results = run_bench(&args.shoal, runs)?;
    report(&args, &results);
    Ok(())
}

/// The cell of agent `i` (`None`: one cell).
fn cell_of(args: &Args, i: usize) -> Option<String> {
    (args.cells > 0).then(|| format!("c{}", i % args.cells + 1))
}

async fn one_run(args: &Args, run: usize) -> anyhow::Result<RunResult> {
    let cell = |i: usize| cell_of(args, i);
    let mut mesh = MeshBuilder::new(&args.shoal, args.agents, "shoal-detect-")
        .cells(&cell)
        .start()?;
    let client = BenchClient::new(&mesh.pki(), CALL_TIMEOUT)?;
    let everyone: Vec<usize> = (0..args.agents).collect();
    let cell_size = |i: usize| {
        (0..args.agents)
            .filter(|&j| cell_of(args, j) == cell_of(args, i))
            .count()
    };
    let start = Instant::now();
    loop {
        let views = views(&client, &mesh, &everyone).await;
        let members_seen = views
            .iter()
            .enumerate()
            .all(|(i, v)| v.as_ref().is_ok_and(|v| v.len() == cell_size(i)));
        if members_seen && cells_up(&client, &mesh, &everyone, args.cells).await {
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
        n => Some(status_agrees(&client, &mesh, &everyone, n).await?),
    };

    // Not the seed, and not always the same one.
    let victim = 1 + (run * 7) % (args.agents - 1);
    let victim_name = mesh.agents[victim].name.clone();
    let survivors: Vec<usize> = everyone
        .into_iter()
        .filter(|&i| i != victim && cell_of(args, i) == cell_of(args, victim))
        .collect();
    if let Some(frozen_ms) = args.freeze_ms {
        let frozen: Vec<usize> = if args.freeze_cell {
            (0..args.agents)
                .filter(|&i| cell_of(args, i) == cell_of(args, victim))
                .collect()
        } else {
            vec![victim]
        };
        let watchers: Vec<usize> = (0..args.agents).filter(|i| !frozen.contains(i)).collect();
        return freeze(
            args,
            &client,
            &mesh,
            &frozen,
            &watchers,
            frozen_ms,
            status_agreed_ms,
        )
        .await;
    }
    let killed_at = mesh.kill(victim);
    let mut seen_dead: Vec<Option<Duration>> = vec![None; survivors.len()];
    while seen_dead.iter().any(Option::is_none) {
        if killed_at.elapsed() > STAGE_TIMEOUT {
            bail!(
                "{} survivors still hold {victim_name} alive {STAGE_TIMEOUT:?} after the kill",
                seen_dead.iter().filter(|d| d.is_none()).count()
            );
        }
        let views = views(&client, &mesh, &survivors).await;
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
        false_views: 0,
        false_events: 0,
        false_cell_downs: 0,
        cell_degraded: 0,
    })
}

/// Freezes `frozen` (SIGSTOP/SIGCONT duty cycle) while polling `watchers`; counts false verdicts.
async fn freeze(
    args: &Args,
    client: &BenchClient,
    mesh: &LocalMesh,
    frozen: &[usize],
    watchers: &[usize],
    frozen_ms: u64,
    status_agreed_ms: Option<u64>,
) -> anyhow::Result<RunResult> {
    let pids: Vec<String> = frozen
        .iter()
        .map(|&i| {
            let child = mesh.agents[i].child.as_ref().expect("a running agent");
            child.id().to_string()
        })
        .collect();
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .args(&pids)
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("kill -{sig} failed");
        }
    };
    let everyone: BTreeSet<String> = mesh.agents.iter().map(|a| a.name.clone()).collect();
    let mut held_dead: BTreeSet<(usize, String)> = BTreeSet::new();
    let started = Instant::now();
    let running_ms = args.period_ms.saturating_sub(frozen_ms);
    while started.elapsed() < Duration::from_secs(args.freeze_secs) {
        signal("STOP");
        let poll = async {
            let views = views(client, mesh, watchers).await;
            for (&w, view) in watchers.iter().zip(views) {
                if let Ok(alive) = view {
                    let cell: BTreeSet<String> = (0..args.agents)
                        .filter(|&j| cell_of(args, j) == cell_of(args, w))
                        .map(|j| mesh.agents[j].name.clone())
                        .collect();
                    for name in everyone.intersection(&cell) {
                        if !alive.contains(name) {
                            held_dead.insert((w, name.clone()));
                        }
                    }
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(frozen_ms), poll).await;
        let elapsed = started.elapsed().as_millis() as u64 % args.period_ms;
        tokio::time::sleep(Duration::from_millis(frozen_ms.saturating_sub(elapsed))).await;
        signal("CONT");
        tokio::time::sleep(Duration::from_millis(running_ms)).await;
    }
    signal("CONT");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let req = Request::Events {
        after: 0,
        limit: PAGE_ITEMS_MAX,
    };
    let mut false_events = 0;
    let (mut false_cell_downs, mut cell_degraded) = (0, 0);
    for i in 0..args.agents {
        if let Ok(Response::Events(events)) = client
            .rpc
            .call(mesh.api(i), ANY_MEMBER, &req, CALL_TIMEOUT)
            .await
        {
            for e in events.iter().filter(|e| e.kind.starts_with("cell-")) {
                eprintln!("  {} {}: {}", e.node, e.kind, e.reason);
                false_cell_downs += usize::from(e.kind == "cell-down");
                cell_degraded += usize::from(e.kind == "cell-degraded");
            }
            for e in events.iter().filter(|e| e.kind == "member-dead") {
                eprintln!("  {}: {}", e.node, e.reason);
                false_events += 1;
            }
        }
    }
    for (w, name) in &held_dead {
        eprintln!("  {} held {name} dead", mesh.agents[*w].name);
    }
    Ok(RunResult {
        first_ms: 0,
        all_ms: 0,
        status_agreed_ms,
        survivors: watchers.len(),
        false_views: held_dead.len(),
        false_events,
        false_cell_downs,
        cell_degraded,
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
        "freeze_ms": args.freeze_ms,
        "period_ms": args.period_ms,
        "freeze_secs": args.freeze_secs,
        "freeze_cell": args.freeze_cell,
        "false_views_all": results.iter().map(|r| r.false_views).collect::<Vec<_>>(),
        "false_events_all": results.iter().map(|r| r.false_events).collect::<Vec<_>>(),
        "false_cell_downs_all": results.iter().map(|r| r.false_cell_downs).collect::<Vec<_>>(),
        "cell_degraded_all": results.iter().map(|r| r.cell_degraded).collect::<Vec<_>>(),
    });
    if !args.json && args.freeze_ms.is_some() {
        println!(
            "{} agents, {} runs of a freeze: false verdicts {} (views), {} (member-dead \
             events), {} (cell-down events); cell-degraded events {}",
            args.agents,
            results.len(),
            json["false_views_all"],
            json["false_events_all"],
            json["false_cell_downs_all"],
            json["cell_degraded_all"]
        );
    } else if !args.json {
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

/// Names of the nodes each of `agents` holds alive, asked all at once.
async fn views(
    client: &BenchClient,
    mesh: &LocalMesh,
    agents: &[usize],
) -> Vec<anyhow::Result<BTreeSet<String>>> {
    join_all(agents.iter().map(|&i| client.alive(mesh.api(i)))).await
}

/// The workload whose status is compared.
const WORKLOAD: &str = "sleepers";

/// One agent's status of it: (replica, node, phase, healthy) per instance.
type StatusRows = Vec<(u32, Option<String>, String, Option<bool>)>;

/// Whether every one of `agents` knows `cells` cells, none down (always true for 0 cells).
async fn cells_up(client: &BenchClient, mesh: &LocalMesh, agents: &[usize], cells: usize) -> bool {
    if cells == 0 {
        return true;
    }
    let req = Request::CellList {
        after: None,
        limit: PAGE_ITEMS_MAX,
    };
    let answers = join_all(
        agents
            .iter()
            .map(|&i| client.rpc.call(mesh.api(i), ANY_MEMBER, &req, CALL_TIMEOUT)),
    )
    .await;
    answers.into_iter().all(|a| {
        matches!(a, Ok(Response::CellList { cells: list, .. })
            if list.len() == cells && list.iter().all(|c| !c.down))
    })
}

/// Applies `replicas` sleeping processes through the first agent, waits until every replica runs
/// healthy, then until `status` reads the same from every agent; returns ms since the apply.
async fn status_agrees(
    client: &BenchClient,
    mesh: &LocalMesh,
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
    let first = mesh.api(0);
    match client
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
            let api = mesh.api(i);
            client
                .rpc
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
        let healthy =
            |v: &StatusRows| v.len() == replicas as usize && v.iter().all(|i| i.3 == Some(true));
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
