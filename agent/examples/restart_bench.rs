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
/// The label key of the bench's own containers (not the agent's).
const BENCH_LABEL: &str = "shoal-restart-bench";
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
    /// Run the docker series only.
    #[arg(long)]
    skip_process: bool,
    /// Print only the JSON line on stdout.
    #[arg(long)]
    json: bool,
    /// Network mode of the bench's own containers (`docker_run`, `docker_engine_restart`, the
    /// oracles): the engine's default bridge, as the agent's containers, unless given (`none`
    /// shows what the bridge costs a restart).
    #[arg(long, default_value = "default")]
    network: String,
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

/// The docker series, interleaved: each round kills Shoal's container, runs `docker run -d`,
/// kills a `--restart=always` container, and kills each oracle's container, in that order, so
/// that a change of the machine's load weighs on every series alike.
fn docker_rounds(
    args: &Args,
    dir: &Path,
    pki: &Path,
    marker: u64,
) -> anyhow::Result<BTreeMap<&'static str, Vec<f64>>> {
    import_image()?;
    let events = DockerEvents::start()?;
    // Every container of the bench but the agent's carries this label (the agent's are swept by
    // their node label); declared first, dropped last.
    let _sweep = Sweep(format!("label={BENCH_LABEL}"));
    let mut shoal = ShoalDocker::start(args, dir, pki, marker, &events)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let network = args.network.as_str();
    let mut oracle = runtime.block_on(OracleRestarter::start(marker, network, false))?;
    let mut precreated = runtime.block_on(OracleRestarter::start(marker, network, true))?;
    let mut series: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut add = |name, ms| series.entry(name).or_default().push(ms);
    let pause = Duration::from_millis(args.pause_ms);
    for run in 0..args.runs {
        let round = format!("{}/{}", run + 1, args.runs);
        std::thread::sleep(pause);
        let steps = shoal.kill(&round, &events)?;
        add("docker", steps.start_ms);
        add("docker_die", steps.die_ms);
        add("docker_disconnect", steps.disconnect_ms);
        add("docker_connect", steps.connect_ms);
        add("docker_join_to_start", steps.start_ms - steps.connect_ms);
        std::thread::sleep(pause);
        let (ms, cli_ms, join_ms) = docker_run_once(&round, marker, network, &events)?;
        add("docker_run", ms);
        add("docker_run_cli", cli_ms);
        if let Some(join_ms) = join_ms {
            add("docker_run_join_to_start", ms - join_ms);
        }
        add(
            "docker_engine_restart",
            engine_restart_once(&round, pause, marker, network, &events)?,
        );
        for restarter in [&mut oracle, &mut precreated] {
            std::thread::sleep(pause);
            add(
                restarter.series(),
                runtime.block_on(restarter.kill(&round, &events))?,
            );
        }
    }
    Ok(series)
}

/// Series `docker`: one agent with `--runtime docker` and its one replica.
struct ShoalDocker {
    agent: Agent,
    /// Drops after the agent: removes its containers whatever happened.
    _sweep: Sweep,
    node: String,
    /// The start event of the container that runs now.
    current: ContainerEvent,
}

impl ShoalDocker {
    fn start(
        args: &Args,
        dir: &Path,
        pki: &Path,
        marker: u64,
        events: &DockerEvents,
    ) -> anyhow::Result<ShoalDocker> {
        let node = format!("bench-docker-{marker}");
        let sweep = Sweep(format!("label=shoal.node={node}"));
        let agent = Agent::start(args, dir, pki, "docker", marker)?;
        assert_eq!(agent.name, node);
        let spec = format!(
            "name = \"{WORKLOAD}\"\nreplicas = 1\n[container]\n\
             image = \"{IMAGE_REPO}:{IMAGE_TAG}\"\n\
             pull = \"if-not-present\"\n\
             command = [\"sleep\", \"{marker}\"]\n[resources]\ncpu = \"100m\"\nmemory = \"64Mi\"\n\
             [restart]\nbackoff_reset = \"1s\"\n"
        );
        let applied_ns = wall_ns();
        agent.apply(&spec)?;
        let ours = |e: &ContainerEvent| e.is_start() && e.labels.get("shoal.node") == Some(&node);
        let current = events
            .wait(|e| ours(e) && e.time_ns >= applied_ns, SETUP_TIMEOUT)
            .with_context(|| agent.log_tail())?;
        Ok(ShoalDocker {
            agent,
            _sweep: sweep,
            node,
            current,
        })
    }

    /// Kills the container's main process; ms from the kill to each step of the restart.
    fn kill(&mut self, round: &str, events: &DockerEvents) -> anyhow::Result<Steps> {
        let current = self.current.id.clone();
        let pid = container_pid(&current)?;
        let killed_ns = wall_ns();
        kill(Pid::from_raw(pid), Signal::SIGKILL).context("kill -9 of the container's process")?;
        let replacement = |e: &ContainerEvent| {
            e.is_start()
                && e.labels.get("shoal.node") == Some(&self.node)
                && e.id != current
                && e.time_ns > killed_ns
        };
        let next = events
            .wait(replacement, RESTART_TIMEOUT)
            .with_context(|| format!("run {round}{}", self.agent.log_tail()))?;
        let step = |id: &str, action: &str| {
            let event = events.wait(|e| e.id == id && e.action == action, RESTART_TIMEOUT)?;
            anyhow::Ok(since_ns(killed_ns, event.time_ns))
        };
        let steps = Steps {
            die_ms: step(&current, "die")?,
            disconnect_ms: step(&current, "disconnect")?,
            connect_ms: step(&next.id, "connect")?,
            start_ms: since_ns(killed_ns, next.time_ns),
        };
        eprintln!(
            "docker {round}: killed pid {pid} of {}: died after {:.1} ms, left the network after \
             {:.1} ms; {} joined it after {:.1} ms, started after {:.1} ms",
            short(&current),
            steps.die_ms,
            steps.disconnect_ms,
            short(&next.id),
            steps.connect_ms,
            steps.start_ms,
        );
        self.current = next;
        Ok(steps)
    }
}

/// One restart by the agent as the engine reports it: ms from the kill to the `die` of the killed
/// container, to its endpoint leaving the bridge network (`disconnect`), to the replacement's
/// endpoint joining it (`connect`), and to the replacement's `start`.
struct Steps {
    die_ms: f64,
    disconnect_ms: f64,
    connect_ms: f64,
    start_ms: f64,
}

/// Series `docker_run`: `docker run -d` until the engine's start event, until the CLI returned,
/// and until the container joined its network (none without one).
fn docker_run_once(
    round: &str,
    marker: u64,
    network: &str,
    events: &DockerEvents,
) -> anyhow::Result<(f64, f64, Option<f64>)> {
    let label = format!("{BENCH_LABEL}={marker}-run");
    let spawned_ns = wall_ns();
    let spawned = Instant::now();
    let id = docker_run(&label, marker, network, false)?;
    let cli_ms = millis(spawned.elapsed());
    let event = events.wait(|e| e.id == id && e.is_start(), RESTART_TIMEOUT)?;
    let ms = since_ns(spawned_ns, event.time_ns);
    // The engine reports the join before the start: received already, if there was one.
    let join_ms = events
        .received(|e| e.id == id && e.action == "connect")
        .map(|e| since_ns(spawned_ns, e.time_ns));
    let joined = join_ms.map_or("no network".into(), |j| format!("joined after {j:.1} ms"));
    eprintln!(
        "docker run {round}: {} {joined}, started after {ms:.1} ms, the CLI returned after \
         {cli_ms:.1} ms",
        short(&id)
    );
    remove_containers(&format!("label={label}"));
    Ok((ms, cli_ms, join_ms))
}

/// Series `docker_engine_restart`: the engine's `--restart=always` after a kill -9 of the
/// container's process; a fresh container each time (its first restart).
fn engine_restart_once(
    round: &str,
    pause: Duration,
    marker: u64,
    network: &str,
    events: &DockerEvents,
) -> anyhow::Result<f64> {
    let label = format!("{BENCH_LABEL}={marker}-restart");
    let id = docker_run(&label, marker, network, true)?;
    events.wait(|e| e.id == id && e.is_start(), RESTART_TIMEOUT)?;
    std::thread::sleep(pause);
    let pid = container_pid(&id)?;
    let killed_ns = wall_ns();
    kill(Pid::from_raw(pid), Signal::SIGKILL).context("kill -9 of the container's process")?;
    let restarted = |e: &ContainerEvent| e.id == id && e.is_start() && e.time_ns > killed_ns;
    let event = events.wait(restarted, RESTART_TIMEOUT)?;
    let ms = since_ns(killed_ns, event.time_ns);
    eprintln!(
        "docker --restart=always {round}: killed pid {pid}, {} restarted after {ms:.1} ms",
        short(&id)
    );
    remove_containers(&format!("label={label}"));
    Ok(ms)
}

/// Series `docker_oracle` and `docker_oracle_precreated`: the floor for a restarter outside the
/// engine. The bench restarts the container itself on the engine's `die` event, with the API
/// calls the agent makes (create, start); `precreated` creates the replacement before the kill
/// and only starts it after the `die`.
struct OracleRestarter {
    docker: bollard::Docker,
    label: String,
    marker: u64,
    network: String,
    precreated: bool,
    /// Starts and deaths of this restarter's containers.
    stream: OracleEvents,
    /// The container that runs now.
    current: String,
    /// The replacement created in advance (`precreated` only).
    standby: Option<String>,
}

impl OracleRestarter {
    async fn start(
        marker: u64,
        network: &str,
        precreated: bool,
    ) -> anyhow::Result<OracleRestarter> {
        let docker = bollard::Docker::connect_with_local_defaults()?
            .negotiate_version()
            .await?;
        let label = match precreated {
            false => format!("{BENCH_LABEL}={marker}-oracle"),
            true => format!("{BENCH_LABEL}={marker}-precreated"),
        };
        // The request goes out when the stream is first polled, so it asks from now on; once
        // the first start arrives on it, it is live.
        let stream = OracleEvents::subscribe(&docker, &label, wall_ns());
        let mut oracle = OracleRestarter {
            docker,
            label,
            marker,
            network: network.to_string(),
            precreated,
            stream,
            current: String::new(),
            standby: None,
        };
        oracle.current = oracle.create().await?;
        oracle.run(&oracle.current).await?;
        oracle.stream.next_of(&oracle.current, "start").await?;
        oracle.prepare().await?;
        Ok(oracle)
    }

    fn series(&self) -> &'static str {
        match self.precreated {
            false => "docker_oracle",
            true => "docker_oracle_precreated",
        }
    }

    /// Kills the container's main process and restarts it on its `die`; ms until the
    /// replacement's start event (as the `docker events` of the other series report it).
    async fn kill(&mut self, round: &str, events: &DockerEvents) -> anyhow::Result<f64> {
        let pid = container_pid(&self.current)?;
        let killed_ns = wall_ns();
        kill(Pid::from_raw(pid), Signal::SIGKILL).context("kill -9 of the container's process")?;
        self.stream.next_of(&self.current, "die").await?;
        let next = match self.standby.take() {
            Some(id) => id,
            None => self.create().await?,
        };
        self.run(&next).await?;
        let started = events.wait(|e| e.id == next && e.is_start(), RESTART_TIMEOUT)?;
        let ms = since_ns(killed_ns, started.time_ns);
        eprintln!(
            "{} {round}: killed pid {pid} of {}, {} started after {ms:.1} ms",
            self.series(),
            short(&self.current),
            short(&next)
        );
        self.stream.next_of(&next, "start").await?;
        // The dead container goes after its replacement started, as the agent removes it.
        let options = bollard::query_parameters::RemoveContainerOptionsBuilder::new()
            .force(true)
            .build();
        let _ = self
            .docker
            .remove_container(&self.current, Some(options))
            .await;
        self.current = next;
        self.prepare().await?;
        Ok(ms)
    }

    /// Creates the next replacement in advance (`precreated` only), a pause before the kill.
    async fn prepare(&mut self) -> anyhow::Result<()> {
        if self.precreated {
            self.standby = Some(self.create().await?);
        }
        Ok(())
    }

    /// What `docker run -d --cpus 0.1 --memory 64m --network NETWORK --label LABEL IMAGE sleep
    /// MARKER` creates.
    async fn create(&self) -> anyhow::Result<String> {
        let (key, value) = self.label.split_once('=').expect("key=value");
        let body = bollard::models::ContainerCreateBody {
            image: Some(format!("{IMAGE_REPO}:{IMAGE_TAG}")),
            cmd: Some(vec!["sleep".to_string(), self.marker.to_string()]),
            labels: Some([(key.to_string(), value.to_string())].into()),
            host_config: Some(bollard::models::HostConfig {
                nano_cpus: Some(100_000_000),
                memory: Some(64 << 20),
                network_mode: Some(self.network.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = None::<bollard::query_parameters::CreateContainerOptions>;
        let created = self
            .docker
            .create_container(options, body)
            .await
            .context("create container")?;
        Ok(created.id)
    }

    async fn run(&self, id: &str) -> anyhow::Result<()> {
        self.docker
            .start_container(id, None)
            .await
            .context("start container")
    }
}

/// An oracle's event subscription.
struct OracleEvents(
    std::pin::Pin<
        Box<
            dyn futures_util::Stream<
                Item = Result<bollard::models::EventMessage, bollard::errors::Error>,
            >,
        >,
    >,
);

impl OracleEvents {
    /// Starts and deaths of the containers labelled `label`, from `since_ns` on.
    fn subscribe(docker: &bollard::Docker, label: &str, since_ns: u128) -> OracleEvents {
        let filters = std::collections::HashMap::from([
            ("label".to_string(), vec![label.to_string()]),
            ("type".to_string(), vec!["container".to_string()]),
            (
                "event".to_string(),
                vec!["start".to_string(), "die".to_string()],
            ),
        ]);
        let since = format!(
            "{}.{:09}",
            since_ns / 1_000_000_000,
            since_ns % 1_000_000_000
        );
        let options = bollard::query_parameters::EventsOptionsBuilder::new()
            .since(&since)
            .filters(&filters)
            .build();
        OracleEvents(Box::pin(docker.events(Some(options))))
    }

    /// Waits for the engine's `action` event of container `id`.
    async fn next_of(&mut self, id: &str, action: &str) -> anyhow::Result<()> {
        use futures_util::StreamExt;
        let wait = async {
            while let Some(event) = self.0.next().await {
                let event = event.context("docker events")?;
                let of = event.actor.as_ref().and_then(|a| a.id.as_deref());
                if of == Some(id) && event.action.as_deref() == Some(action) {
                    return Ok(());
                }
            }
            bail!("the engine closed the event stream")
        };
        let late = || {
            format!(
                "no {action} event of {} within {RESTART_TIMEOUT:?}",
                short(id)
            )
        };
        tokio::time::timeout(RESTART_TIMEOUT, wait)
            .await
            .with_context(late)?
    }
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
            .env("SHOAL_SELF_ISSUE", "true")
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
                .env("SHOAL_SELF_ISSUE", "true")
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
                .env("SHOAL_SELF_ISSUE", "true")
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

/// A container's `start` or `die`, or its `connect` to or `disconnect` from a network: the
/// container, the action, the engine's timestamp and the container's labels (none for network
/// events).
#[derive(Clone, Debug)]
struct ContainerEvent {
    id: String,
    action: String,
    time_ns: u128,
    labels: BTreeMap<String, String>,
}

impl ContainerEvent {
    fn is_start(&self) -> bool {
        self.action == "start"
    }
}

/// `docker events` for container starts and deaths and containers joining and leaving networks,
/// read on a thread; every event is kept.
struct DockerEvents {
    child: Child,
    rx: mpsc::Receiver<ContainerEvent>,
    seen: std::cell::RefCell<Vec<ContainerEvent>>,
}

impl DockerEvents {
    fn start() -> anyhow::Result<DockerEvents> {
        let mut child = Command::new("docker")
            .args(["events", "--format", "{{json .}}"])
            .args(["--filter", "type=container", "--filter", "type=network"])
            .args(["--filter", "event=start", "--filter", "event=die"])
            .args(["--filter", "event=connect", "--filter", "event=disconnect"])
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

    /// The first event received so far that `pred` accepts.
    fn received(&self, pred: impl Fn(&ContainerEvent) -> bool) -> Option<ContainerEvent> {
        self.seen.borrow_mut().extend(self.rx.try_iter());
        self.seen.borrow().iter().find(|e| pred(e)).cloned()
    }

    /// The first event, received so far or within `limit`, that `pred` accepts.
    fn wait(
        &self,
        pred: impl Fn(&ContainerEvent) -> bool,
        limit: Duration,
    ) -> anyhow::Result<ContainerEvent> {
        let began = Instant::now();
        loop {
            if let Some(e) = self.seen.borrow().iter().find(|e| pred(e)) {
                return Ok(e.clone());
            }
            let left = limit.saturating_sub(began.elapsed());
            match self.rx.recv_timeout(left) {
                Ok(event) => self.seen.borrow_mut().push(event),
                Err(_) => bail!("no matching container event within {limit:?}"),
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

fn parse_event(line: &str) -> Option<ContainerEvent> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let attributes = v["Actor"]["Attributes"].as_object()?;
    let (id, labels) = match v["Type"].as_str() {
        // The actor is the network; the container is an attribute.
        Some("network") => (attributes.get("container")?.as_str()?, BTreeMap::new()),
        _ => {
            let labels = attributes
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect();
            (v["Actor"]["ID"].as_str()?, labels)
        }
    };
    Some(ContainerEvent {
        id: id.to_string(),
        action: v["Action"].as_str()?.to_string(),
        time_ns: u128::from(v["timeNano"].as_u64()?),
        labels,
    })
}

/// `docker run -d` of the bench's container; returns its id.
fn docker_run(
    label: &str,
    marker: u64,
    network: &str,
    restart_always: bool,
) -> anyhow::Result<String> {
    let mut cmd = Command::new("docker");
    cmd.args([
        "run",
        "-d",
        "--label",
        label,
        "--cpus",
        "0.1",
        "--memory",
        "64m",
        "--network",
        network,
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
        shoal::node::runtime::docker::ensure_busybox_image(&docker, IMAGE_REPO, IMAGE_TAG).await?;
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
