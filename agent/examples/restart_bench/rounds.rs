//! The docker rounds: each kills the agent's container, runs `docker run -d`, kills a
//! `--restart=always` container and kills each oracle's container, in that order; and the series
//! `docker`, the agent with `--runtime docker`, and its steps as the engine reports them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::agent::Agent;
use crate::engine::{
    container_pid, docker_run_once, engine_restart_once, import_image, short, Sweep,
};
use crate::events::{ContainerEvent, DockerEvents};
use crate::oracle::OracleRestarter;
use crate::{
    since_ns, wall_ns, Args, BENCH_LABEL, IMAGE_REPO, IMAGE_TAG, RESTART_TIMEOUT, SETUP_TIMEOUT,
    WORKLOAD,
};

/// The docker series, interleaved: each round kills Shoal's container, runs `docker run -d`,
/// kills a `--restart=always` container, and kills each oracle's container, in that order, so
/// that a change of the machine's load weighs on every series alike.
pub fn docker_rounds(
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
