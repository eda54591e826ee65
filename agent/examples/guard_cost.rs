//! Guard cost benchmark: memory and CPU of a real `shoal guard` process guarding a few exclusive
//! `sleep` instances, renewed as an agent renews it, with nothing to do.
//!
//! ```text
//! cargo build --release -p shoal --bin shoal --examples
//! cargo run --release -p shoal --example guard_cost -- \
//!     --instances 5 --seconds 60 --shoal target/release/shoal --json
//! ```
//!
//! It builds nothing: it runs `--shoal guard` through the agent's own `GuardLink` (lease of the
//! default fence timeout, 10 s), starts `--instances` process-runtime instances of one exclusive
//! workload in a temp dir, renews every 500 ms (the host loop's tick) for `--settle-secs` and then
//! `--seconds`, and samples the guard: `VmRSS` once a second (highest and mean; and the highest
//! `RssAnon`, its private part: the file-backed rest is the `shoal` binary's pages, which the page
//! cache shares with the agent running the same file), CPU time over the
//! window from `/proc/PID/schedstat` (nanoseconds on a CPU), as a percentage of one core. It also
//! times the renewals in this process, which is what the agent spends on its side. The last stdout
//! line is one JSON object. The figures are in docs/measurements.md.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use shoal::core::instance::ReplicaId;
use shoal::core::reconcile::ReconcileConfig;
use shoal::core::spec::WorkloadSpec;
use shoal::node::guard::{GuardConfig, GuardLink, GuardRuntime};
use shoal::node::runtime::process::{ProcessConfig, ProcessRuntime};
use shoal::node::runtime::{Runtime, StartRequest};
use support::procfs::{schedstat_ns, status_kib};

/// The guard's RSS and CPU while it guards idle instances.
#[derive(Debug, Parser)]
struct Args {
    /// Exclusive instances guarded.
    #[arg(long, default_value_t = 5)]
    instances: u32,
    /// Length of the measurement window.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Renewals before the window.
    #[arg(long, default_value_t = 5)]
    settle_secs: u64,
    /// The `shoal` binary to run as the guard.
    #[arg(long)]
    shoal: PathBuf,
    /// Print only the JSON line.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(measure(&args))
}

async fn measure(args: &Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let node = "bench";
    let rt = ProcessRuntime::open(ProcessConfig::new(dir.path(), node)).await?;
    let spec = WorkloadSpec::from_toml_str(
        "name = \"db\"\n[process]\ncommand = [\"sleep\", \"3600\"]\n[placement]\nexclusive = true\n\
         [resources]\ncpu = \"10m\"\nmemory = \"8Mi\"\n",
        "db.toml",
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let spec = std::sync::Arc::new(spec);
    let mut handles = BTreeSet::new();
    for replica in 0..args.instances {
        let request = StartRequest {
            replica: ReplicaId::new("db", replica),
            spec: spec.clone(),
            spec_version: "v1".into(),
            node: node.into(),
            fence_token: Some(1 + u64::from(replica)),
            addr: std::net::IpAddr::from([127, 0, 0, 1]),
            ports: Default::default(),
            volume_roots: std::sync::Arc::from(Vec::new()),
        };
        handles.insert(rt.start(request).await?.handle);
    }
    let reconcile = ReconcileConfig::default();
    let mut config = GuardConfig::new(dir.path(), node, GuardRuntime::Process, &reconcile);
    config.exe = args.shoal.clone();
    let mut link = GuardLink::start(config);
    link.wait_ready(Duration::from_secs(5)).await;
    if let Some(why) = link.unavailable() {
        anyhow::bail!("the guard did not start: {why}");
    }
    let pid = link.pid().context("guard pid")?;
    let exclusive = BTreeSet::from(["db".to_string()]);
    let renew = |link: &mut GuardLink| {
        let t = Instant::now();
        link.renew(&exclusive, handles.clone(), reconcile.self_fence_ms);
        t.elapsed()
    };

    let settle_until = Instant::now() + Duration::from_secs(args.settle_secs);
    while Instant::now() < settle_until {
        renew(&mut link);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (cpu0, t0) = (cpu_ns(pid)?, Instant::now());
    let mut rss = Vec::new();
    let mut renew_time = Duration::ZERO;
    let mut next_sample = Instant::now();
    while t0.elapsed() < Duration::from_secs(args.seconds) {
        renew_time += renew(&mut link);
        if Instant::now() >= next_sample {
            rss.push(rss_kib(pid)?);
            next_sample += Duration::from_secs(1);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (cpu1, elapsed) = (cpu_ns(pid)?, t0.elapsed().as_secs_f64());
    let alive = rt
        .list()
        .await?
        .iter()
        .filter(|i| i.phase.may_be_alive())
        .count();
    anyhow::ensure!(
        alive == args.instances as usize,
        "an instance died during the run"
    );
    link.release();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let cpu_percent = (cpu1 - cpu0) as f64 / 1e9 / elapsed * 100.0;
    let rss_max = rss.iter().map(|r| r.0).max().unwrap_or(0);
    let rss_mean = rss.iter().map(|r| r.0).sum::<u64>() / rss.len().max(1) as u64;
    let anon_max = rss.iter().map(|r| r.1).max().unwrap_or(0);
    let renew_us_per_sec = renew_time.as_secs_f64() * 1e6 / elapsed;
    if !args.json {
        eprintln!(
            "guard pid {pid}: RSS {rss_mean} KiB mean, {rss_max} KiB max, {anon_max} KiB of it \
             private (max); CPU {cpu_percent:.4} % of a core; renewals in the agent \
             {renew_us_per_sec:.1} us/s"
        );
    }
    let round = |x: f64, digits: i32| (x * 10f64.powi(digits)).round() / 10f64.powi(digits);
    println!(
        "{}",
        serde_json::json!({
            "instances": args.instances,
            "seconds": args.seconds,
            "lease_ms": reconcile.self_fence_ms,
            "guard_rss_kib_max": rss_max,
            "guard_rss_kib_mean": rss_mean,
            "guard_rss_anon_kib_max": anon_max,
            "guard_cpu_percent": round(cpu_percent, 4),
            "agent_renew_us_per_sec": round(renew_us_per_sec, 1),
        })
    );
    Ok(())
}

/// `VmRSS` of `pid` and its private part (`RssAnon`: what the guard adds; the file-backed rest
/// is the `shoal` binary's pages, shared with the agent that runs the same file), in KiB.
fn rss_kib(pid: i32) -> anyhow::Result<(u64, u64)> {
    Ok((status_kib(pid, "VmRSS:")?, status_kib(pid, "RssAnon:")?))
}

/// Time `pid` spent on a CPU, in nanoseconds.
fn cpu_ns(pid: i32) -> anyhow::Result<u64> {
    schedstat_ns(&format!("/proc/{pid}/schedstat"))
}
