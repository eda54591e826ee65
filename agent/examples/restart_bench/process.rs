//! The process series: kill -9 of a process instance until the agent's replacement runs, the
//! agent's own child first, then instances it adopted after a restart. The runtime's state files
//! (`DATA_DIR/instances/HANDLE/state.json`) say which process is which.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::agent::Agent;
use crate::{millis, Args, PROCESS_POLL, RESTART_TIMEOUT, SETUP_TIMEOUT, WORKLOAD};

/// Series (a): kill -9 of a process instance until its replacement runs; then the same with the
/// agent restarted before each kill, so the killed instance is adopted (not the agent's child).
pub fn process_series(
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

/// A live process instance as its state file names it.
struct ProcessInstance {
    handle: String,
    pid: i32,
}

/// One state file: handle, pid, and whether the runtime still holds it running.
pub struct StateFile {
    handle: String,
    pub pid: i32,
    pub alive: bool,
}

pub fn read_states(instances: &Path) -> Vec<StateFile> {
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
