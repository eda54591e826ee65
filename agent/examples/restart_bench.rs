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
//! Four series of `--runs` each, in this order:
//!
//! - `process`: one agent (process runtime). The kill is a SIGKILL of the instance's process (its
//!   pid from the runtime's state file, `DATA_DIR/instances/HANDLE/state.json`); the time runs
//!   until a state file of another instance names a live pid whose command line is the workload's
//!   `sleep`, polled every millisecond (the runtime writes the file right after the spawn).
//! - `process_adopted`: the same, but the agent is killed (SIGKILL) and started again before each
//!   kill, so the instance killed is one it adopted from its state file rather than its child.
//! - `docker`: one agent with `--runtime docker`, the local busybox image the docker runtime's
//!   tests import (`shoal-busybox:latest`, made from the host's static busybox: install Debian's
//!   `busybox-static`). The kill is a SIGKILL of the container's main process (`docker inspect`
//!   `State.Pid`), a crash as the engine sees it; the time runs until the engine's `start` event
//!   of the replacement container (its own timestamp, `docker events`).
//! - `docker_run`: `docker run -d` of the same image, command and limits (`--cpus 0.1 --memory
//!   64m`), timed from just before the CLI is spawned until the engine's `start` event of the
//!   container (`docker_run_cli` is until the CLI returned).
//! - `docker_engine_restart`: `docker run -d --restart=always`, the same SIGKILL of its main
//!   process, timed until the engine's `start` event of the restarted container. A fresh container
//!   each run: the engine waits 100 ms before a first restart and doubles that for a container
//!   that ran less than 10 s.
//!
//! `--skip-docker` runs the process series only. Per-run lines go to stderr; the last stdout line
//! is one JSON object with `{median, p90, max, all}` in ms per series and the ratio of the
//! `docker` and `docker_run` medians. The figures are in docs/measurements.md.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Parser;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

mod support;
use support::{free_udp_addrs, median, percentile};

/// The image the docker series run (imported from the host's busybox when missing).
const IMAGE_REPO: &str = "shoal-busybox";
const IMAGE_TAG: &str = "latest";
/// The benchmark's workload.
const WORKLOAD: &str = "restart-bench";
/// Time between two looks for the replacement process.
const PROCESS_POLL: Duration = Duration::from_millis(1);
/// Longest wait for one replacement (a restart that takes this long is a failure, not a figure).
const RESTART_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for an agent to answer and run its first instance.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Time from a crash to the replacement, per runtime, and the Docker engine's own figures.
#[derive(Debug, Parser)]
struct Args {
    /// Kills (or `docker run`s) per series.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// The release binary to run.
    #[arg(long, default_value = "target/release/shoal")]
    shoal: PathBuf,
    /// How long an instance runs before it is killed, ms (more than the spec's 1 s
    /// `backoff_reset`, so every kill is a first failure).
    #[arg(long, default_value_t = 1_500)]
    pause_ms: u64,
    /// Run the process series only.
    #[arg(long)]
    skip_docker: bool,
    /// Print only the JSON line on stdout.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if args.pause_ms <= 1_000 {
        bail!("--pause-ms must exceed the spec's 1 s backoff_reset, or kills back off");
    }
    if !args.shoal.is_file() {
        bail!(
            "{} not found: run cargo build --release first (or pass --shoal PATH)",
            args.shoal.display()
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("shoal-restart-bench-")
        .tempdir()?;
    let pki = dir.path().join("pki");
    run_ok(
        Command::new(&args.shoal)
            .args(["pki", "init", "--dir"])
            .arg(&pki),
    )?;
    // Unique to this process: instance commands and node names carry it.
    let marker = 1_000_000_000 + u64::from(std::process::id());
    let mut series = BTreeMap::new();
    let (own, adopted) = process_series(&args, dir.path(), &pki, marker)?;
    series.insert("process", own);
    series.insert("process_adopted", adopted);
    if !args.skip_docker {
        import_image()?;
        let events = DockerEvents::start()?;
        series.insert(
            "docker",
            docker_series(&args, dir.path(), &pki, marker, &events)?,
        );
        let (run, cli) = docker_run_series(&args, marker, &events)?;
        series.insert("docker_run", run);
        series.insert("docker_run_cli", cli);
        series.insert(
            "docker_engine_restart",
            engine_restart_series(&args, marker, &events)?,
        );
    }
    report(&args, &series);
    Ok(())
}

/// Series (a): kill -9 of a process instance until its replacement runs; then the same with the
/// agent restarted before each kill, so the killed instance is adopted (not the agent's child).
fn process_series(
    args: &Args,
    dir: &Path,
    pki: &Path,
    marker: u64,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let mut agent = Agent::start(args, dir, pki, "process", marker)?;
    let spec = format!(
        "name = \"{WORKLOAD}\"\nreplicas = 1\n[process]\ncommand = [\"sleep\", \"{marker}\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"64Mi\"\n[restart]\nbackoff_reset = \"1s\"\n"
    );
    agent.apply(&spec)?;
    let instances = agent.data_dir.join("instances");
    let mut current =
        wait_process(&instances, None, marker, SETUP_TIMEOUT).with_context(|| agent.log_tail())?;
    let (mut own, mut adopted) = (Vec::new(), Vec::new());
    for run in 0..2 * args.runs {
        let adopt = run >= args.runs;
        if adopt {
            agent.restart()?;
        }
        std::thread::sleep(Duration::from_millis(args.pause_ms));
        let killed = Instant::now();
        kill(Pid::from_raw(current.pid), Signal::SIGKILL).context("kill -9 of the instance")?;
        let next = wait_process(&instances, Some(&current.handle), marker, RESTART_TIMEOUT)
            .with_context(|| format!("run {}{}", run + 1, agent.log_tail()))?;
        let ms = millis(killed.elapsed());
        eprintln!(
            "process{} {}/{}: killed pid {}, pid {} runs after {ms:.1} ms",
            if adopt { " (adopted)" } else { "" },
            run % args.runs + 1,
            args.runs,
            current.pid,
            next.pid
        );
        match adopt {
            false => own.push(ms),
            true => adopted.push(ms),
        }
        current = next;
    }
    Ok((own, adopted))
}

/// Series (b): kill -9 of a container's main process until the engine started its replacement.
fn docker_series(
    args: &Args,
    dir: &Path,
    pki: &Path,
    marker: u64,
    events: &DockerEvents,
) -> anyhow::Result<Vec<f64>> {
    let node = format!("bench-docker-{marker}");
    // Declared first, dropped last: after the agent, whatever happened.
    let _sweep = Sweep(format!("label=shoal.node={node}"));
    let agent = Agent::start(args, dir, pki, "docker", marker)?;
    assert_eq!(agent.name, node);
    let ours = |e: &StartEvent| e.labels.get("shoal.node") == Some(&node);
    let spec = format!(
        "name = \"{WORKLOAD}\"\nreplicas = 1\n[container]\nimage = \"{IMAGE_REPO}:{IMAGE_TAG}\"\n\
         command = [\"sleep\", \"{marker}\"]\n[resources]\ncpu = \"100m\"\nmemory = \"64Mi\"\n\
         [restart]\nbackoff_reset = \"1s\"\n"
    );
    let applied_ns = wall_ns();
    agent.apply(&spec)?;
    let mut current = events
        .wait(|e| ours(e) && e.time_ns >= applied_ns, SETUP_TIMEOUT)
        .with_context(|| agent.log_tail())?;
    let mut times = Vec::new();
    for run in 0..args.runs {
        std::thread::sleep(Duration::from_millis(args.pause_ms));
        let pid = container_pid(&current.id)?;
        let killed_ns = wall_ns();
        kill(Pid::from_raw(pid), Signal::SIGKILL).context("kill -9 of the container's process")?;
        let next = events
            .wait(
                |e| ours(e) && e.id != current.id && e.time_ns > killed_ns,
                RESTART_TIMEOUT,
            )
            .with_context(|| format!("run {}{}", run + 1, agent.log_tail()))?;
        let ms = since_ns(killed_ns, next.time_ns);
        eprintln!(
            "docker {}/{}: killed pid {pid} of {}, {} started after {ms:.1} ms",
            run + 1,
            args.runs,
            short(&current.id),
            short(&next.id)
        );
        times.push(ms);
        current = next;
    }
    Ok(times)
}

/// Series (c): `docker run -d` until the engine's start event, and until the CLI returned.
fn docker_run_series(
    args: &Args,
    marker: u64,
    events: &DockerEvents,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let (mut started, mut returned) = (Vec::new(), Vec::new());
    let label = format!("shoal-restart-bench={marker}");
    let _sweep = Sweep(format!("label={label}"));
    for run in 0..args.runs {
        let spawned_ns = wall_ns();
        let spawned = Instant::now();
        let id = docker_run(&label, marker, false)?;
        let cli_ms = millis(spawned.elapsed());
        let event = events.wait(|e| e.id == id, RESTART_TIMEOUT)?;
        let ms = since_ns(spawned_ns, event.time_ns);
        eprintln!(
            "docker run {}/{}: {} started after {ms:.1} ms, the CLI returned after {cli_ms:.1} ms",
            run + 1,
            args.runs,
            short(&id)
        );
        started.push(ms);
        returned.push(cli_ms);
        remove_containers(&format!("label={label}"));
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok((started, returned))
}

/// Series (d): the engine's `--restart=always` after a kill -9 of the container's process.
fn engine_restart_series(
    args: &Args,
    marker: u64,
    events: &DockerEvents,
) -> anyhow::Result<Vec<f64>> {
    let mut times = Vec::new();
    let label = format!("shoal-restart-bench={marker}");
    let _sweep = Sweep(format!("label={label}"));
    for run in 0..args.runs {
        let id = docker_run(&label, marker, true)?;
        events.wait(|e| e.id == id, RESTART_TIMEOUT)?;
        std::thread::sleep(Duration::from_millis(args.pause_ms));
        let pid = container_pid(&id)?;
        let killed_ns = wall_ns();
        kill(Pid::from_raw(pid), Signal::SIGKILL).context("kill -9 of the container's process")?;
        let event = events.wait(|e| e.id == id && e.time_ns > killed_ns, RESTART_TIMEOUT)?;
        let ms = since_ns(killed_ns, event.time_ns);
        eprintln!(
            "docker --restart=always {}/{}: killed pid {pid}, {} restarted after {ms:.1} ms",
            run + 1,
            args.runs,
            short(&id)
        );
        times.push(ms);
        remove_containers(&format!("label={label}"));
    }
    Ok(times)
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
    if let (Some(ours), Some(run)) = (medians.get("docker"), medians.get("docker_run")) {
        json["docker_vs_docker_run_median_ratio"] =
            serde_json::json!((ours / run * 100.0).round() / 100.0);
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

/// One `shoal agent` in the bench's temp dir; dropping it kills it and its process instances.
struct Agent {
    name: String,
    runtime: &'static str,
    gossip: String,
    api: String,
    pki: PathBuf,
    shoal: PathBuf,
    data_dir: PathBuf,
    log: PathBuf,
    /// The agent process (`None` only while being set up).
    child: Option<Child>,
}

impl Agent {
    fn start(
        args: &Args,
        dir: &Path,
        pki: &Path,
        runtime: &'static str,
        marker: u64,
    ) -> anyhow::Result<Agent> {
        let addrs = free_udp_addrs(2)?;
        let log = dir.join(format!("{runtime}.log"));
        File::create(&log)?;
        let mut agent = Agent {
            name: format!("bench-{runtime}-{marker}"),
            runtime,
            gossip: addrs[0].to_string(),
            api: addrs[1].to_string(),
            pki: pki.to_path_buf(),
            shoal: args.shoal.clone(),
            data_dir: dir.join(format!("data-{runtime}")),
            log,
            child: None,
        };
        agent.child = Some(agent.spawn()?);
        Ok(agent)
    }

    fn spawn(&self) -> anyhow::Result<Child> {
        let log = File::options().append(true).open(&self.log)?;
        Command::new(&self.shoal)
            .args(["agent", "--name", &self.name, "--runtime", self.runtime])
            .args(["--gossip", &self.gossip, "--api", &self.api])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--pki")
            .arg(&self.pki)
            .args(["--cpu", "4", "--memory", "8Gi"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .env("RUST_LOG", "warn,shoal=info")
            .spawn()
            .context("starting the agent")
    }

    /// Kills the agent (its instances run on) and starts it again over the same data dir, so it
    /// adopts them; returns once it answers.
    fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        self.child = Some(self.spawn()?);
        let began = Instant::now();
        loop {
            let out = Command::new(&self.shoal)
                .args(["status", WORKLOAD, "--agent", &self.api, "--timeout", "2s"])
                .arg("--pki")
                .arg(&self.pki)
                .output()?;
            if out.status.success() {
                return Ok(());
            }
            if began.elapsed() > SETUP_TIMEOUT {
                bail!("the restarted agent does not answer{}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `shoal apply` of one spec, retried while the agent is not answering yet.
    fn apply(&self, spec: &str) -> anyhow::Result<()> {
        let file = self.data_dir.with_extension("toml");
        std::fs::write(&file, spec)?;
        let began = Instant::now();
        loop {
            let out = Command::new(&self.shoal)
                .args(["apply", "--agent", &self.api, "--timeout", "3s", "-f"])
                .arg(&file)
                .arg("--pki")
                .arg(&self.pki)
                .output()?;
            if out.status.success() {
                return Ok(());
            }
            if began.elapsed() > SETUP_TIMEOUT {
                bail!(
                    "shoal apply: {}{}",
                    String::from_utf8_lossy(&out.stderr),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(20)..];
        format!("; last lines of the agent's log:\n{}", tail.join("\n"))
    }
}

impl Agent {
    /// SIGKILL, as a crash: its instances run on.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
        // Process instances outlive their agent: stop the ones its state files name.
        let instances = self.data_dir.join("instances");
        for state in read_states(&instances) {
            if state.alive {
                let _ = nix::sys::signal::killpg(Pid::from_raw(state.pid), Signal::SIGKILL);
            }
        }
    }
}

/// A live process instance as its state file names it.
struct ProcessInstance {
    handle: String,
    pid: i32,
}

/// One state file: handle, pid, and whether the runtime still holds it running.
struct StateFile {
    handle: String,
    pid: i32,
    alive: bool,
}

fn read_states(instances: &Path) -> Vec<StateFile> {
    let Ok(entries) = std::fs::read_dir(instances) else {
        return Vec::new();
    };
    let mut states = Vec::new();
    for entry in entries.flatten() {
        let Ok(bytes) = std::fs::read(entry.path().join("state.json")) else {
            continue; // a start between its directory and its state file
        };
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            continue;
        };
        let pid = value["pid"].as_i64().unwrap_or_default() as i32;
        states.push(StateFile {
            handle: entry.file_name().to_string_lossy().into_owned(),
            pid,
            alive: pid > 1 && value["exited_at_ms"].is_null(),
        });
    }
    states
}

/// Waits until a state file other than `old`'s names a live `sleep MARKER` process.
fn wait_process(
    instances: &Path,
    old: Option<&str>,
    marker: u64,
    limit: Duration,
) -> anyhow::Result<ProcessInstance> {
    let cmdline = format!("sleep\0{marker}\0");
    let began = Instant::now();
    loop {
        let found = read_states(instances).into_iter().find(|s| {
            s.alive
                && Some(s.handle.as_str()) != old
                && std::fs::read(format!("/proc/{}/cmdline", s.pid))
                    .is_ok_and(|c| c == cmdline.as_bytes())
        });
        if let Some(s) = found {
            return Ok(ProcessInstance {
                handle: s.handle,
                pid: s.pid,
            });
        }
        if began.elapsed() > limit {
            bail!("no new instance process within {limit:?}");
        }
        std::thread::sleep(PROCESS_POLL);
    }
}

/// A container `start` event: the container, the engine's timestamp and the container's labels.
#[derive(Clone, Debug)]
struct StartEvent {
    id: String,
    time_ns: u128,
    labels: BTreeMap<String, String>,
}

/// `docker events` for container starts, read on a thread; every event is kept.
struct DockerEvents {
    child: Child,
    rx: mpsc::Receiver<StartEvent>,
    seen: std::cell::RefCell<Vec<StartEvent>>,
}

impl DockerEvents {
    fn start() -> anyhow::Result<DockerEvents> {
        let mut child = Command::new("docker")
            .args(["events", "--format", "{{json .}}"])
            .args(["--filter", "type=container", "--filter", "event=start"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("docker events")?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(event) = parse_event(&line) {
                    if tx.send(event).is_err() {
                        return;
                    }
                }
            }
        });
        // The subscription is live once the engine answers it; give it a moment.
        std::thread::sleep(Duration::from_millis(300));
        Ok(DockerEvents {
            child,
            rx,
            seen: Default::default(),
        })
    }

    /// The first start event, received so far or within `limit`, that `pred` accepts.
    fn wait(
        &self,
        pred: impl Fn(&StartEvent) -> bool,
        limit: Duration,
    ) -> anyhow::Result<StartEvent> {
        let began = Instant::now();
        loop {
            if let Some(e) = self.seen.borrow().iter().find(|e| pred(e)) {
                return Ok(e.clone());
            }
            let left = limit.saturating_sub(began.elapsed());
            match self.rx.recv_timeout(left) {
                Ok(event) => self.seen.borrow_mut().push(event),
                Err(_) => bail!("no matching container start event within {limit:?}"),
            }
        }
    }
}

impl Drop for DockerEvents {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse_event(line: &str) -> Option<StartEvent> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let attributes = v["Actor"]["Attributes"].as_object()?;
    Some(StartEvent {
        id: v["id"].as_str().or(v["Actor"]["ID"].as_str())?.to_string(),
        time_ns: u128::from(v["timeNano"].as_u64()?),
        labels: attributes
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
    })
}

/// `docker run -d` of the bench's container; returns its id.
fn docker_run(label: &str, marker: u64, restart_always: bool) -> anyhow::Result<String> {
    let mut cmd = Command::new("docker");
    cmd.args([
        "run", "-d", "--label", label, "--cpus", "0.1", "--memory", "64m",
    ]);
    if restart_always {
        cmd.arg("--restart=always");
    }
    cmd.arg(format!("{IMAGE_REPO}:{IMAGE_TAG}"))
        .args(["sleep", &marker.to_string()]);
    let out = run_ok(&mut cmd)?;
    Ok(out.trim().to_string())
}

/// The host pid of a container's main process.
fn container_pid(id: &str) -> anyhow::Result<i32> {
    let out = run_ok(Command::new("docker").args(["inspect", "-f", "{{.State.Pid}}", id]))?;
    let pid: i32 = out.trim().parse().context("State.Pid")?;
    if pid <= 1 {
        bail!("container {} is not running (State.Pid {pid})", short(id));
    }
    Ok(pid)
}

/// Removes the containers matching a `docker ps` filter when dropped, on error paths too.
struct Sweep(String);

impl Drop for Sweep {
    fn drop(&mut self) {
        remove_containers(&self.0);
    }
}

/// `docker rm -f` of every container matching a `docker ps` filter.
fn remove_containers(filter: &str) {
    let Ok(ids) = run_ok(Command::new("docker").args(["ps", "-aq", "--filter", filter])) else {
        return;
    };
    let ids: Vec<&str> = ids.split_whitespace().collect();
    if !ids.is_empty() {
        let _ = Command::new("docker")
            .args(["rm", "-f"])
            .args(&ids)
            .stdout(Stdio::null())
            .status();
    }
}

/// Imports the busybox image the docker runtime's tests use, unless the engine has it.
fn import_image() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let docker = bollard::Docker::connect_with_local_defaults()?;
        shoal::runtime::docker::ensure_busybox_image(&docker, IMAGE_REPO, IMAGE_TAG).await?;
        anyhow::Ok(())
    })
}

/// Runs a command; its stdout, or an error with its stderr.
fn run_ok(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("{cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Ms from `from_ns` to `to_ns` (both wall clock), 0 if `to_ns` is earlier.
fn since_ns(from_ns: u128, to_ns: u128) -> f64 {
    to_ns.saturating_sub(from_ns) as f64 / 1e6
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}
