//! Restart benchmark: how long a real `shoal agent` takes to replace an instance that crashed
//! (kill -9 of its main process), with the process runtime and with the docker runtime, beside
//! what the Docker engine itself takes to run a container and to restart one.
//!
//! ```text
//! cargo build --release -p shoal --bin shoal --example restart_bench
//! target/release/examples/restart_bench --runs 20 --shoal target/release/shoal --json
//! ```
//!
//! It builds nothing and uses no internal API of the agent: it runs the `shoal` binary given by
//! `--shoal` as an agent and as the CLI (`pki init`, `apply`), and watches what the agent leaves
//! on the machine. Each workload is one `sleep` replica with `[restart] backoff_reset = "1s"`, and
//! every kill comes `--pause-ms` (1.5 s) after the instance started, so each kill is a first
//! failure, which restarts at once (a second consecutive failure would wait `backoff_initial`).
//! The process series run first, `--runs` each:
//!
//! - `process`: one agent (process runtime). The kill is a SIGKILL of the instance's process (its
//!   pid from the runtime's state file, `DATA_DIR/instances/HANDLE/state.json`); the time runs
//!   until a state file of another instance names a live pid whose command line is the workload's
//!   `sleep`, polled every millisecond (the runtime writes the file right after the spawn).
//! - `process_adopted`: the same, but the agent is killed (SIGKILL) and started again before each
//!   kill, so the instance killed is one it adopted from its state file rather than its child.
//!
//! Then `--runs` rounds of the docker series, interleaved (one of each per round, in this order,
//! each after a pause of `--pause-ms` with the engine idle) so that a change of the machine's load
//! weighs on all of them alike. Every container runs the local busybox image the docker runtime's
//! tests import (`shoal-busybox:latest`, made from the host's static busybox: install Debian's
//! `busybox-static`) with the same command and limits. A kill is a SIGKILL of the container's
//! main process (`docker inspect` `State.Pid`), a crash as the engine sees it, and every end is
//! the engine's own timestamp of a `start` event (`docker events`):
//!
//! - `docker`: one agent with `--runtime docker`; from the kill to the `start` of the
//!   replacement container. Its steps, from the same kill: `docker_die`, the engine's `die` of the
//!   killed container (what the agent waits for); `docker_disconnect`, the killed container's
//!   endpoint leaving the bridge network (the engine's cleanup); `docker_connect`, the
//!   replacement's endpoint joining it (during the replacement's start);
//!   `docker_join_to_start`, from that join to the replacement's `start`.
//! - `docker_run`: `docker run -d --cpus 0.1 --memory 64m`, timed from just before the CLI is
//!   spawned until the container's `start` (`docker_run_cli`: until the CLI returned;
//!   `docker_run_join_to_start`: from its joining the network to its `start`).
//! - `docker_engine_restart`: `docker run -d --restart=always`, killed, until the `start` of the
//!   restarted container. A fresh container each round: the engine waits 100 ms before a first
//!   restart (and doubles that for a container that ran less than 10 s).
//! - `docker_oracle`: the floor for any restarter outside the engine. The bench restarts the
//!   container itself: on the engine's `die` event, read from its own subscription, it at once
//!   creates and starts the replacement through the engine API (bollard, as the agent; the body
//!   of `docker run -d` above): the agent's engine calls without its round. From the kill to the
//!   replacement's `start`; the dead container is removed after that, as the agent does, and the
//!   next round kills the replacement.
//! - `docker_oracle_precreated`: the same, but the replacement is created before the kill, so
//!   that only its start follows the `die`: the floor for a restarter keeping a created standby.
//!
//! `--skip-docker` runs the process series only, `--skip-process` the docker series only. Per-run
//! lines go to stderr; the last stdout line is one JSON object with `{median, p90, max, all}` in
//! ms per series and the ratio of each restarter's median (`docker`, `docker_oracle`,
//! `docker_oracle_precreated`) to the `docker_run` median. The figures are in
//! docs/measurements.md.
//!
//! One file per job: `agent.rs` (the agent under test), `process.rs` (the process series),
//! `rounds.rs` (the docker rounds and the agent's docker series), `engine.rs` (`docker run` and
//! the engine's own restart), `oracle.rs` (the oracles), `events.rs` (the engine's events).

#[path = "../support/mod.rs"]
mod support;

mod agent;
mod engine;
mod events;
mod oracle;
mod process;
mod rounds;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use clap::Parser;
use process::process_series;
use rounds::docker_rounds;
use support::agents::pki_init;
use support::run::require_binary;
use support::stats::{median, percentile};

/// The image the docker series run (imported from the host's busybox when missing).
pub const IMAGE_REPO: &str = "shoal-busybox";
pub const IMAGE_TAG: &str = "latest";
/// The label key of the bench's own containers (not the agent's).
pub const BENCH_LABEL: &str = "shoal-restart-bench";
/// The benchmark's workload.
pub const WORKLOAD: &str = "restart-bench";
/// Time between two looks for the replacement process.
pub const PROCESS_POLL: Duration = Duration::from_millis(1);
/// Longest wait for one replacement (a restart that takes this long is a failure, not a figure).
pub const RESTART_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for an agent to answer and run its first instance.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Time from a crash to the replacement, per runtime, and the Docker engine's own figures.
#[derive(Debug, Parser)]
pub struct Args {
    /// Kills (or `docker run`s) per series.
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// The release binary to run.
    #[arg(long, default_value = "target/release/shoal")]
    pub shoal: PathBuf,
    /// How long an instance runs before it is killed, ms (more than the spec's 1 s
    /// `backoff_reset`, so every kill is a first failure).
    #[arg(long, default_value_t = 1_500)]
    pub pause_ms: u64,
    /// Run the process series only.
    #[arg(long)]
    pub skip_docker: bool,
    /// Run the docker series only.
    #[arg(long)]
    pub skip_process: bool,
    /// Print only the JSON line on stdout.
    #[arg(long)]
    pub json: bool,
    /// Network mode of the bench's own containers (`docker_run`, `docker_engine_restart`, the
    /// oracles): the engine's default bridge, as the agent's containers, unless given (`none`
    /// shows what the bridge costs a restart).
    #[arg(long, default_value = "default")]
    pub network: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if args.pause_ms <= 1_000 {
        bail!("--pause-ms must exceed the spec's 1 s backoff_reset, or kills back off");
    }
    require_binary(&args.shoal)?;
    let dir = tempfile::Builder::new()
        .prefix("shoal-restart-bench-")
        .tempdir()?;
    let pki = dir.path().join("pki");
    pki_init(&args.shoal, &pki)?;
    // Unique to this process: instance commands and node names carry it.
    let marker = 1_000_000_000 + u64::from(std::process::id());
    let mut series = BTreeMap::new();
    if !args.skip_process {
        let (own, adopted) = process_series(&args, dir.path(), &pki, marker)?;
        series.insert("process", own);
        series.insert("process_adopted", adopted);
    }
    if !args.skip_docker {
        series.extend(docker_rounds(&args, dir.path(), &pki, marker)?);
    }
    report(&args, &series);
    Ok(())
}

fn report(args: &Args, series: &BTreeMap<&str, Vec<f64>>) {
    let tenths = |v: f64| (v * 10.0).round() / 10.0;
    let mut json = serde_json::json!({ "runs": args.runs, "pause_ms": args.pause_ms });
    let mut medians = BTreeMap::new();
    for (name, times) in series {
        let summary = Summary::of(times);
        medians.insert(*name, summary.median);
        json[format!("{name}_ms")] = serde_json::json!({
            "median": tenths(summary.median),
            "p90": tenths(summary.p90),
            "max": tenths(summary.max),
            "all": times.iter().map(|&t| tenths(t)).collect::<Vec<_>>(),
        });
    }
    for restarter in ["docker", "docker_oracle", "docker_oracle_precreated"] {
        if let (Some(ours), Some(run)) = (medians.get(restarter), medians.get("docker_run")) {
            json[format!("{restarter}_vs_docker_run_median_ratio")] =
                serde_json::json!((ours / run * 100.0).round() / 100.0);
        }
    }
    if !args.json {
        for (name, times) in series {
            let s = Summary::of(times);
            println!(
                "{name}: median {:.1} ms, p90 {:.1} ms, max {:.1} ms ({} runs)",
                s.median,
                s.p90,
                s.max,
                times.len()
            );
        }
    }
    println!("{json}");
}

/// Median, 90th percentile (nearest rank) and maximum of one series, ms.
struct Summary {
    median: f64,
    p90: f64,
    max: f64,
}

impl Summary {
    fn of(times: &[f64]) -> Summary {
        // In microseconds, so the shared integer helpers apply.
        let us: Vec<u64> = times.iter().map(|t| (t * 1000.0).round() as u64).collect();
        let ms = |v: Option<u64>| v.unwrap_or_default() as f64 / 1000.0;
        Summary {
            median: ms(median(&us)),
            p90: ms(percentile(&us, 90)),
            max: ms(us.iter().max().copied()),
        }
    }
}

/// Wall-clock time, ns since the epoch (the engine's event timestamps are on this clock).
pub fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Ms from `from_ns` to `to_ns` (both wall clock), 0 if `to_ns` is earlier.
pub fn since_ns(from_ns: u128, to_ns: u128) -> f64 {
    to_ns.saturating_sub(from_ns) as f64 / 1e6
}

/// A duration in ms.
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
