//! Rollouts on real agents (the `shoal` binary, the process runtime) on loopback: the two targets
//! of docs/reconcile.md, "Automatic rollback".
//!
//! 1. A good version of a 100-replica workload on 20 agents, `max_surge = 5`,
//!    `max_unavailable = 0`: the time from the apply until every replica serves the new version
//!    (and until the store records it complete), against 2 x (100 / 5) x (start + first healthy
//!    probe), the probe running every second.
//! 2. A bad version (its command exits at once) of a 10-replica workload, `max_unavailable = 1`,
//!    `progress_deadline = 30s`: the time until it is rolled back with every replica serving the
//!    restored content, against progress_deadline + 10 s, and the fewest replicas serving at any
//!    sample (every 200 ms), against replicas - max_unavailable.
//!
//! Prints one JSON object.
//!
//! ```text
//! cargo build --release -p shoal --bin shoal --examples
//! target/release/examples/rollout_bench [--agents 20] [--replicas 100] [--shoal target/release/shoal]
//! ```

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use shoal::identity::pki::{self, IssueOptions, Role};
use support::agents::{Certificates, LocalMesh, MeshBuilder};

/// Probe interval of the workloads, ms: the "first healthy probe" of the target.
const PROBE_MS: u64 = 1_000;
/// What a start costs before the first probe may run, ms (a process spawn and the next round).
const START_MS: u64 = 100;
const BAD_REPLICAS: u32 = 10;
const DEADLINE_S: u64 = 30;

/// A good rollout's time against its bound, and a bad one's rollback.
#[derive(Parser)]
struct Args {
    /// Agents to start (at least 6: the bench asks agents 1 to 5 besides the first).
    #[arg(long, default_value_t = 20)]
    agents: usize,
    /// Replicas of the good workload.
    #[arg(long, default_value_t = 100)]
    replicas: u32,
    /// The release binary to run.
    #[arg(long, default_value = "target/release/shoal")]
    shoal: PathBuf,
}

/// The agents, driven through the CLI.
struct Mesh(LocalMesh);

impl Mesh {
    fn start(shoal: &Path, n: usize) -> anyhow::Result<Mesh> {
        let mesh = MeshBuilder::new(shoal, n, "shoal-rollout-")
            .certificates(Certificates::Issued)
            .names(|i| format!("n{:02}", i + 1))
            // Instances outlive a killed agent: they run this bench's commands.
            .kill_at_drop("sleep 359[67]".into())
            .start()?;
        pki::issue(&mesh.pki(), "shoal-cli", &IssueOptions::new(Role::Client))?;
        Ok(Mesh(mesh))
    }

    fn cli(&self, via: usize, args: &[&str]) -> anyhow::Result<std::process::Output> {
        self.0
            .cli(via)
            .args(args)
            .output()
            .context("running the shoal CLI")
    }

    fn json(&self, via: usize, args: &[&str]) -> serde_json::Value {
        self.cli(via, args)
            .ok()
            .and_then(|o| serde_json::from_slice(&o.stdout).ok())
            .unwrap_or_default()
    }

    fn apply(&self, text: &str, file: &str) -> anyhow::Result<()> {
        let path = self.0.dir.path().join(file);
        std::fs::write(&path, text)?;
        let out = self.cli(0, &["apply", "-f", path.to_str().unwrap()])?;
        if !out.status.success() {
            bail!("apply failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    fn rollout(&self, via: usize, name: &str) -> serde_json::Value {
        self.json(via, &["rollout", "status", name, "-o", "json"])
    }

    /// Replicas of `name` with a running, healthy instance.
    fn serving(&self, via: usize, name: &str) -> u32 {
        let status = self.json(via, &["status", name, "-o", "json"]);
        let mut replicas = BTreeSet::new();
        for inst in status["instances"].as_array().into_iter().flatten() {
            if inst["phase"] == "running" && inst["healthy"] == true {
                replicas.insert(inst["replica"].as_u64().unwrap_or(u64::MAX));
            }
        }
        replicas.len() as u32
    }

    fn wait_for(
        &self,
        what: &str,
        within: Duration,
        mut done: impl FnMut() -> bool,
    ) -> anyhow::Result<()> {
        let began = Instant::now();
        while began.elapsed() < within {
            if done() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!(
            "{what}: not within {within:?} (logs in {})",
            self.0.dir.path().display()
        )
    }
}

fn spec(name: &str, replicas: u32, command: &str, update: &str) -> String {
    format!(
        "name = \"{name}\"\nreplicas = {replicas}\n[process]\ncommand = {command}\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\
         [health]\ninterval = \"{PROBE_MS}ms\"\nstart_grace = \"0s\"\n[health.exec]\ncommand = [\"true\"]\n\
         [restart]\nbackoff_initial = \"500ms\"\nbackoff_max = \"2s\"\n\
         [update]\n{update}\n"
    )
}

fn main() -> anyhow::Result<()> {
    let Args {
        agents,
        replicas,
        shoal,
    } = Args::parse();
    if agents < 6 {
        bail!("need --agents >= 6: the bench asks agents 1 to 5 besides the first");
    }
    let mesh = Mesh::start(&shoal, agents)?;
    mesh.wait_for(
        "every agent sees the others",
        Duration::from_secs(60),
        || {
            mesh.json(agents - 1, &["nodes", "-o", "json"])
                .as_array()
                .is_some_and(|n| n.iter().filter(|m| m["alive"] == true).count() == agents)
        },
    )?;

    // 1. A good version of `replicas` replicas with max_surge = 5.
    let surge = "max_unavailable = 0\nmax_surge = 5";
    mesh.apply(
        &spec("fleet", replicas, r#"["sleep", "3596"]"#, surge),
        "fleet1.toml",
    )?;
    let recorded = |via: usize| {
        let r = mesh.rollout(via, "fleet");
        r["state"] == "complete" && r["recorded"] == true
    };
    mesh.wait_for("fleet's first rollout", Duration::from_secs(180), || {
        recorded(1)
    })?;
    // The agent asked may not have heard of the update yet: until it reports another version,
    // its "complete" is the first rollout's.
    let first = mesh.rollout(1, "fleet")["version"].clone();
    let applied = Instant::now();
    mesh.apply(
        &spec("fleet", replicas, r#"["sleep", "3596", "3597"]"#, surge),
        "fleet2.toml",
    )?;
    let mut serving_ms = None;
    let mut min_serving = replicas;
    mesh.wait_for("fleet's update", Duration::from_secs(600), || {
        min_serving = min_serving.min(mesh.serving(2, "fleet"));
        let r = mesh.rollout(1, "fleet");
        if r["version"] == first || r["version"].is_null() {
            return false;
        }
        let updated = r["updated"].as_u64() == Some(u64::from(replicas));
        if updated && serving_ms.is_none() {
            serving_ms = Some(applied.elapsed().as_millis() as u64);
        }
        r["state"] == "complete" && r["recorded"] == true
    })?;
    let recorded_ms = applied.elapsed().as_millis() as u64;
    let good_bound_ms = 2 * u64::from(replicas.div_ceil(5)) * (START_MS + PROBE_MS);

    // 2. A bad version of a 10-replica workload: rolled back.
    let careful = format!("max_unavailable = 1\nprogress_deadline = \"{DEADLINE_S}s\"");
    mesh.apply(
        &spec("bad", BAD_REPLICAS, r#"["sleep", "3596"]"#, &careful),
        "bad1.toml",
    )?;
    mesh.wait_for("bad's first rollout", Duration::from_secs(120), || {
        let r = mesh.rollout(3, "bad");
        r["state"] == "complete" && r["recorded"] == true
    })?;
    let applied = Instant::now();
    mesh.apply(
        &spec("bad", BAD_REPLICAS, r#"["sh", "-c", "exit 3"]"#, &careful),
        "bad2.toml",
    )?;
    let mut bad_min_serving = BAD_REPLICAS;
    let mut samples = 0u32;
    mesh.wait_for(
        "bad's rollback",
        Duration::from_secs(DEADLINE_S + 60),
        || {
            bad_min_serving = bad_min_serving.min(mesh.serving(4, "bad"));
            samples += 1;
            let r = mesh.rollout(5, "bad");
            r["state"] == "rolled back" && r["updated"].as_u64() == Some(u64::from(BAD_REPLICAS))
        },
    )?;
    let rolled_back_ms = applied.elapsed().as_millis() as u64;
    let out = serde_json::json!({
        "bench": "rollout",
        "agents": agents,
        "good": {
            "replicas": replicas,
            "max_surge": 5,
            "all_serving_new_ms": serving_ms,
            "recorded_complete_ms": recorded_ms,
            "min_serving": min_serving,
            "bound_ms": good_bound_ms,
            "within_bound": serving_ms.is_some_and(|ms| ms <= good_bound_ms),
        },
        "bad": {
            "replicas": BAD_REPLICAS,
            "max_unavailable": 1,
            "progress_deadline_s": DEADLINE_S,
            "rolled_back_ms": rolled_back_ms,
            "bound_ms": (DEADLINE_S + 10) * 1000,
            "min_serving": bad_min_serving,
            "samples": samples,
        },
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
