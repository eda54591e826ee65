//! Image pull and start through Shoal against the Docker CLI, in the same run (issue 16's
//! target: <= 1.5x). A loopback registry (Debian's `docker-registry`, htpasswd auth; see
//! `agent/tests/registry_support`) serves busybox images (~2 MB) whose layer is their own, so
//! each pull downloads it whole. One docker agent with `--registry-auth` on loopback.
//!
//! Each run, in alternating order:
//! - shoal: `shoal apply` of a one-replica workload with a freshly pushed image, until `shoal
//!   status` shows it running (no probe: running is healthy);
//! - docker: `docker pull` of another freshly pushed image, then `docker run -d --cpus 0.05
//!   --memory 16m` of it: the limits Shoal gives the container (they cost the engine some
//!   250 ms per start here, so a comparison without them would not be of the same work); the
//!   CLI is given the same credentials in its own config.json.
//!
//! Prints one JSON object with every run's ms and the ratio of the medians.
//!
//! ```text
//! cargo build --release -p shoal --bin shoal --examples
//! target/release/examples/pull_bench [--runs 7] [--shoal target/release/shoal]
//! ```
//!
//! `PULL_BENCH_LOG=FILE` keeps the agent's log there.

mod support;

#[path = "../tests/registry_support/mod.rs"]
mod registry_support;

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use registry_support::{push_marked_image, remove_local, Registry, PASSWORD, USER};
use shoal::identity::pki::{self, IssueOptions, Role};
use support::agents::{agent_command, cli};
use support::docker::remove_containers;

const NODE: &str = "pull-bench";
const TARGET_RATIO: f64 = 1.5;

struct Agent {
    dir: tempfile::TempDir,
    shoal: PathBuf,
    child: Child,
    api: SocketAddr,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(keep) = std::env::var_os("PULL_BENCH_LOG") {
            let _ = std::fs::copy(self.dir.path().join("agent.log"), keep);
        }
        remove_containers(&format!("label=shoal.node={NODE}"));
    }
}

impl Agent {
    fn start(shoal: &Path, registry_auth: &Path) -> anyhow::Result<Agent> {
        let dir = tempfile::Builder::new().prefix("shoal-pull-").tempdir()?;
        let pki_dir = dir.path().join("pki");
        pki::init(&pki_dir)?;
        pki::issue(&pki_dir, "shoal-cli", &IssueOptions::new(Role::Client))?;
        pki::issue(&pki_dir, NODE, &IssueOptions::new(Role::Node))?;
        let addrs = support::addrs::free_udp_addrs(2)?;
        let log = File::create(dir.path().join("agent.log"))?;
        let data_dir = dir.path().join("data");
        let child = agent_command(shoal, NODE, addrs[0], addrs[1], &data_dir, &pki_dir, log)
            .args(["--runtime", "docker"])
            .arg("--registry-auth")
            .arg(registry_auth)
            .env(
                "RUST_LOG",
                std::env::var("PULL_BENCH_RUST_LOG").unwrap_or("warn,shoal=info".into()),
            )
            .spawn()
            .context("starting the agent")?;
        Ok(Agent {
            dir,
            shoal: shoal.to_path_buf(),
            child,
            api: addrs[1],
        })
    }

    fn cli(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        cli(&self.shoal, self.api, &self.dir.path().join("pki"))
            .args(args)
            .output()
            .context("running the shoal CLI")
    }

    fn running(&self, name: &str) -> bool {
        let Ok(out) = self.cli(&["status", name, "-o", "json"]) else {
            return false;
        };
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        json["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|i| i["phase"] == "running" && i["healthy"] == true)
    }

    /// Apply to running, ms, and how long of it the apply command took.
    fn pull_and_start(&self, name: &str, image: &str) -> anyhow::Result<(u64, u64)> {
        let path = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                "name = \"{name}\"\n[container]\nimage = \"{image}\"\n\
                 command = [\"sleep\", \"600\"]\n[resources]\ncpu = \"50m\"\nmemory = \"16Mi\"\n"
            ),
        )?;
        let began = Instant::now();
        let out = self.cli(&["apply", "-f", path.to_str().unwrap()])?;
        if !out.status.success() {
            bail!("apply: {}", String::from_utf8_lossy(&out.stderr));
        }
        let apply_ms = began.elapsed().as_millis() as u64;
        while !self.running(name) {
            if began.elapsed() > Duration::from_secs(60) {
                bail!(
                    "{name} not running within 60 s (log in {})",
                    self.dir.path().display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let ms = began.elapsed().as_millis() as u64;
        let out = self.cli(&["delete", name])?;
        if !out.status.success() {
            bail!("delete: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok((ms, apply_ms))
    }
}

/// `docker pull` then `docker run -d`, ms.
fn docker_pull_and_run(config_dir: &Path, image: &str) -> anyhow::Result<u64> {
    let began = Instant::now();
    for args in [
        vec!["pull", "-q", image],
        vec![
            "run",
            "-d",
            "--cpus",
            "0.05",
            "--memory",
            "16m",
            "--label",
            "shoal-pull-bench=docker",
            image,
            "sleep",
            "600",
        ],
    ] {
        let out = Command::new("docker")
            .env("DOCKER_CONFIG", config_dir)
            .args(&args)
            .output()?;
        if !out.status.success() {
            bail!(
                "docker {}: {}",
                args[0],
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let ms = began.elapsed().as_millis() as u64;
    remove_containers("label=shoal-pull-bench=docker");
    Ok(ms)
}

/// Image pull and start through Shoal against `docker pull` and `docker run -d`.
#[derive(Parser)]
struct Args {
    /// Runs, each with one pull through Shoal and one through the Docker CLI.
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// The `shoal` binary to run (by default `shoal` in this example's target directory).
    #[arg(long)]
    shoal: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let Args { runs, shoal } = Args::parse();
    let shoal = match shoal {
        Some(shoal) => shoal,
        None => std::env::current_exe()?
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("shoal"))
            .context("no target directory")?,
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let registry = Registry::start(port);
    let config = tempfile::tempdir()?;
    let auth = registry.config_json(config.path(), USER, PASSWORD);
    std::fs::copy(&auth, config.path().join("config.json"))?;
    let agent = Agent::start(&shoal, &auth)?;
    std::thread::sleep(Duration::from_secs(2));
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let docker = tokio.block_on(async {
        use shoal::node::runtime::docker::{DockerConfig, DockerRuntime};
        let rt = DockerRuntime::connect(DockerConfig::new("pull-bench-setup")).await?;
        rt.docker().await
    })?;
    let marker = format!("{}-{:?}", std::process::id(), std::time::SystemTime::now());
    let (mut shoal_ms, mut docker_ms, mut image_bytes) = (Vec::new(), Vec::new(), 0);
    let mut apply_ms = Vec::new();
    for run in 0..runs {
        let (via_shoal, via_docker) = tokio.block_on(async {
            let a = push_marked_image(
                &docker,
                &registry,
                &format!("bench-s{run}"),
                "1",
                &format!("{marker}-s{run}"),
            )
            .await;
            let b = push_marked_image(
                &docker,
                &registry,
                &format!("bench-d{run}"),
                "1",
                &format!("{marker}-d{run}"),
            )
            .await;
            (a.0, b.0)
        });
        let measure_shoal = || agent.pull_and_start(&format!("pb{run}"), &via_shoal);
        let measure_docker = || docker_pull_and_run(config.path(), &via_docker);
        let (shoal, pulled) = if run % 2 == 0 {
            let shoal = measure_shoal()?;
            (shoal, measure_docker()?)
        } else {
            let pulled = measure_docker()?;
            (measure_shoal()?, pulled)
        };
        shoal_ms.push(shoal.0);
        apply_ms.push(shoal.1);
        docker_ms.push(pulled);
        image_bytes = tokio.block_on(async {
            let size = docker
                .inspect_image(&via_docker)
                .await
                .ok()
                .and_then(|i| i.size);
            std::thread::sleep(Duration::from_millis(500)); // let the agent's delete stop it
            remove_containers(&format!("label=shoal.node={NODE}"));
            remove_local(&docker, &via_shoal).await;
            remove_local(&docker, &via_docker).await;
            size.unwrap_or(0)
        });
    }
    let shoal_median = support::stats::median(&shoal_ms).unwrap_or(0);
    let docker_median = support::stats::median(&docker_ms).unwrap_or(0).max(1);
    let ratio = shoal_median as f64 / docker_median as f64;
    let report = serde_json::json!({
        "runs": runs,
        "image_bytes": image_bytes,
        "shoal_apply_to_running_ms": shoal_ms,
        "shoal_apply_command_ms": apply_ms,
        "docker_pull_and_run_ms": docker_ms,
        "shoal_median_ms": shoal_median,
        "docker_median_ms": docker_median,
        "ratio": (ratio * 100.0).round() / 100.0,
        "target_ratio_max": TARGET_RATIO,
        "met": ratio <= TARGET_RATIO,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
