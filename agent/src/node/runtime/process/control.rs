//! Acting on running processes: stop with grace, remove, reload hooks and probes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::watch;

use super::cgroup::Cgroups;
use super::state::{self, InstanceState};
use super::{signal_group, Inner};
use crate::core::spec::{PortRef, Probe, ReloadHook, ReloadSignal};
use crate::node::runtime::{probe, setting_env_name, ProbeOutcome, RuntimeError};

impl Inner {
    /// SIGTERM to the group, SIGKILL after `grace`, then waits up to `kill_wait` for the exit.
    /// Signals go out only while the pid still is the instance's process (same start time).
    pub(super) async fn stop(&self, handle: &str, grace: Duration) -> Result<(), RuntimeError> {
        let Some((state, mut exited)) = self.mark_stopping(handle)? else {
            return Ok(());
        };
        let (pid, ticks) = (state.pid, state.proc_start_ticks);
        let deadline = tokio::time::Instant::now() + grace;
        if state::is_same_live_process(pid, ticks) {
            signal_group(pid, Signal::SIGTERM);
        }
        if wait_exit(&mut exited, grace).await {
            // Members of the group that outlive the leader get the rest of the grace, then SIGKILL.
            // The group id cannot be reused while any member lives, so this reaches only them.
            while group_exists(pid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(GROUP_POLL_INTERVAL).await;
            }
            if group_exists(pid) {
                signal_group(pid, Signal::SIGKILL);
            }
            return Ok(());
        }
        tracing::info!(
            handle,
            pid,
            ?grace,
            "grace over: SIGKILL to the process group"
        );
        if state::is_same_live_process(pid, ticks) {
            signal_group(pid, Signal::SIGKILL);
        }
        let waited = self.config.kill_wait;
        if wait_exit(&mut exited, waited).await {
            return Ok(());
        }
        Err(RuntimeError::StopTimedOut {
            handle: handle.to_string(),
            waited,
        })
    }

    /// Marks a live instance as stopping (persisted, so `list` shows it); `None` if it exited.
    fn mark_stopping(
        &self,
        handle: &str,
    ) -> Result<Option<(InstanceState, watch::Receiver<bool>)>, RuntimeError> {
        let mut instances = self.instances.lock().expect("instances lock");
        let entry = instances
            .get_mut(handle)
            .ok_or_else(|| RuntimeError::UnknownHandle {
                handle: handle.to_string(),
            })?;
        if entry.state.exited() {
            return Ok(None);
        }
        if !entry.state.stopping {
            entry.state.stopping = true;
            entry.state.save(&self.instance_dir(handle))?;
        }
        Ok(Some((entry.state.clone(), entry.exited.clone())))
    }

    /// Forgets an exited instance and deletes its directory (logs included).
    pub(super) fn remove(&self, handle: &str) -> Result<(), RuntimeError> {
        let state = {
            let mut instances = self.instances.lock().expect("instances lock");
            match instances.get(handle) {
                None => return Ok(()),
                Some(entry) if !entry.state.exited() => {
                    return Err(RuntimeError::StillRunning {
                        handle: handle.to_string(),
                    })
                }
                Some(_) => instances.remove(handle).expect("present").state,
            }
        };
        let dir = self.instance_dir(handle);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(RuntimeError::io(format!("removing {}", dir.display()), e))
            }
            _ => {}
        }
        if let Some(cgroup) = &state.cgroup {
            Cgroups::release(cgroup);
        }
        Ok(())
    }

    /// Runs a reload hook against a live instance.
    pub(super) async fn reload(
        &self,
        handle: &str,
        hook: &ReloadHook,
        settings: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<(), RuntimeError> {
        let (state, _) = self.snapshot(handle)?;
        let failed = |reason: String| RuntimeError::ReloadFailed { reason };
        if state.exited() || !state::is_same_live_process(state.pid, state.proc_start_ticks) {
            return Err(failed(format!("instance {handle} is not running")));
        }
        match hook {
            ReloadHook::Signal(signal) => {
                let signal = match signal {
                    ReloadSignal::Hup => Signal::SIGHUP,
                    ReloadSignal::Usr1 => Signal::SIGUSR1,
                    ReloadSignal::Usr2 => Signal::SIGUSR2,
                };
                nix::sys::signal::kill(Pid::from_raw(state.pid), signal)
                    .map_err(|e| failed(format!("sending {signal} to pid {}: {e}", state.pid)))
            }
            ReloadHook::Exec { command } => {
                let mut env = state.env.clone();
                for (name, value) in settings {
                    env.insert(setting_env_name(name), value.clone());
                }
                let as_user = super::user::prefix(state.run_as.as_ref());
                let run = probe::exec_host(&as_user, command, &env, &state.working_dir, timeout);
                match run.await {
                    ProbeOutcome::Healthy => Ok(()),
                    ProbeOutcome::Unhealthy { reason } => Err(failed(reason)),
                }
            }
        }
    }

    /// Runs a probe in the instance's context: its environment and working directory for exec;
    /// for tcp and http, 127.0.0.1 on a port given by number, and on a named port the address
    /// and port the instance was given (`SHOAL_ADDR`, `SHOAL_PORT_<NAME>`): where DNS sends
    /// clients.
    pub(super) async fn probe(
        &self,
        handle: &str,
        probe: &Probe,
        timeout: Duration,
    ) -> ProbeOutcome {
        let state = match self.snapshot(handle) {
            Ok((state, _)) => state,
            Err(e) => return ProbeOutcome::fail(e.to_string()),
        };
        if state.exited() {
            return ProbeOutcome::fail(format!("instance {handle} has exited"));
        }
        let target = |port: &PortRef| target_addr(&state, port);
        match probe {
            Probe::Exec { command } => {
                let as_user = super::user::prefix(state.run_as.as_ref());
                probe::exec_host(&as_user, command, &state.env, &state.working_dir, timeout).await
            }
            Probe::Tcp { port } => match target(port) {
                Ok(addr) => probe::tcp(addr, timeout).await,
                Err(reason) => ProbeOutcome::fail(reason),
            },
            Probe::Http { port, path } => match target(port) {
                Ok(addr) => probe::http(addr, path, timeout).await,
                Err(reason) => ProbeOutcome::fail(reason),
            },
        }
    }
}

/// Where a tcp or http probe of this instance connects (see [`Inner::probe`]).
fn target_addr(state: &InstanceState, port: &PortRef) -> Result<SocketAddr, String> {
    let local = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let name = match port {
        PortRef::Number(n) => return Ok(local(*n)),
        PortRef::Named(name) => name,
    };
    let Some(number) = state.ports.get(name) else {
        return Err(format!(
            "instance {} has no port named {name:?} (started before the spec declared it?)",
            state.handle
        ));
    };
    let addr = state
        .env
        .get(crate::node::runtime::ADDR_ENV)
        .and_then(|a| a.parse::<std::net::IpAddr>().ok())
        .filter(|ip| !ip.is_unspecified());
    Ok(match addr {
        Some(ip) => SocketAddr::new(ip, *number),
        None => local(*number),
    })
}

/// How often a stop checks whether the rest of a process group is gone.
const GROUP_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Whether any live process is left in the group `pgid`.
fn group_exists(pgid: i32) -> bool {
    pgid > 1 && state::group_has_live_members(pgid)
}

/// Waits up to `limit` for the exit flag; false on timeout.
async fn wait_exit(exited: &mut watch::Receiver<bool>, limit: Duration) -> bool {
    matches!(
        tokio::time::timeout(limit, exited.wait_for(|done| *done)).await,
        Ok(Ok(_))
    )
}
