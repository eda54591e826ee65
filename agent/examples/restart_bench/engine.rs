//! The Docker engine on its own: the series `docker_run` (`docker run -d`) and
//! `docker_engine_restart` (`--restart=always` after a kill), and the CLI calls every series
//! makes.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::events::{ContainerEvent, DockerEvents};
use crate::support::docker::remove_containers;
use crate::{millis, since_ns, wall_ns, BENCH_LABEL, IMAGE_REPO, IMAGE_TAG, RESTART_TIMEOUT};

/// Series `docker_run`: `docker run -d` until the engine's start event, until the CLI returned,
/// and until the container joined its network (none without one).
pub fn docker_run_once(
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
pub fn engine_restart_once(
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
pub fn container_pid(id: &str) -> anyhow::Result<i32> {
    let out = run_ok(Command::new("docker").args(["inspect", "-f", "{{.State.Pid}}", id]))?;
    let pid: i32 = out.trim().parse().context("State.Pid")?;
    if pid <= 1 {
        bail!("container {} is not running (State.Pid {pid})", short(id));
    }
    Ok(pid)
}

/// Removes the containers matching a `docker ps` filter when dropped, on error paths too.
pub struct Sweep(pub String);

impl Drop for Sweep {
    fn drop(&mut self) {
        remove_containers(&self.0);
    }
}

/// Imports the busybox image the docker runtime's tests use, unless the engine has it.
pub fn import_image() -> anyhow::Result<()> {
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
pub fn run_ok(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("{cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A container id as `docker ps` shows it.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}
