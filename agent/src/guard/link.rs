//! The agent's side of the guard: starts it or adopts the one already running, renews the lease,
//! notices when the guard is gone and starts it again, and takes what it did.

use std::collections::BTreeSet;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use shoal_core::reconcile::ReconcileConfig;

use super::fired::{self, Fired};
use super::lease::{boot_now_ms, GuardInfo, Lease, LEASE_VERSION};
use super::{GuardPaths, GuardRuntime};
use crate::runtime::process::state;

/// A lease that moved forward less than this is not written again (rounds come every few
/// hundred milliseconds; the lease lasts seconds).
const RENEW_STEP_MS: u64 = 1_000;
/// The guard's health is looked at most this often.
const CHECK_EVERY_MS: u64 = 250;
/// `fired.jsonl` is looked for at most this often.
const FIRED_EVERY_MS: u64 = 1_000;
/// A guard log larger than this is moved aside when a guard starts.
const LOG_BYTES_MAX: u64 = 1024 * 1024;

/// How the agent runs its guard.
#[derive(Clone, Debug)]
pub struct GuardConfig {
    /// The agent's data directory.
    pub data_dir: PathBuf,
    /// This node.
    pub node: String,
    /// The runtime whose instances the guard stops.
    pub runtime: GuardRuntime,
    /// How long a renewal holds, in milliseconds: at most the reconciler's `self_fence_ms`
    /// (see [`GuardConfig::new`]).
    pub lease_ms: u64,
    /// The `shoal` binary to run as `shoal guard`.
    pub exe: PathBuf,
    /// How long a starting guard may take to be ready.
    pub ready_timeout: Duration,
    /// How long after a failed start the next attempt is made.
    pub retry_every: Duration,
}

impl GuardConfig {
    /// The guard of an agent with `reconcile`: a lease of `self_fence_ms`, so a frozen agent's
    /// exclusive instances are killed no later than a running agent without a majority fences
    /// them, well inside `fencing_delay_ms`. Runs this very binary.
    pub fn new(
        data_dir: &std::path::Path,
        node: &str,
        runtime: GuardRuntime,
        reconcile: &ReconcileConfig,
    ) -> GuardConfig {
        GuardConfig {
            data_dir: data_dir.to_path_buf(),
            node: node.to_string(),
            runtime,
            lease_ms: reconcile.self_fence_ms,
            exe: std::env::current_exe().unwrap_or_default(),
            ready_timeout: Duration::from_secs(5),
            retry_every: Duration::from_secs(5),
        }
    }
}

/// How long the lease granted at `now_ms` (reconciler time) may last: `lease_ms`, but never past
/// the reconciler's own fencing deadline while the node lacks a majority
/// (`majority_seen_ms + self_fence_ms + fence_stop_grace_ms`), so an agent that freezes after
/// losing its majority is fenced as early as a running one would fence itself. `exempt` (an
/// operator approved running an exclusive replica without a majority) lifts the cap, as it lifts
/// self-fencing.
pub fn lease_grant_ms(
    now_ms: u64,
    lease_ms: u64,
    majority_seen_ms: u64,
    config: &ReconcileConfig,
    exempt: bool,
) -> u64 {
    if exempt {
        return lease_ms;
    }
    let fence_at = majority_seen_ms
        .saturating_add(config.self_fence_ms)
        .saturating_add(config.fence_stop_grace_ms);
    lease_ms.min(fence_at.saturating_sub(now_ms))
}

/// The agent's handle on its guard process.
pub struct GuardLink {
    config: GuardConfig,
    paths: GuardPaths,
    state: State,
    /// The lease length in use: `config.lease_ms`, or less when an adopted guard accepts less.
    lease_ms: u64,
    /// The last lease written.
    written: Option<Lease>,
    /// Why the last lease could not be written or was refused before writing.
    write_error: Option<String>,
    checked_at_ms: u64,
    fired_at_ms: u64,
    released: bool,
}

enum State {
    /// Ready: started by this agent (`child`) or adopted from an earlier one.
    Running {
        pid: i32,
        start_ticks: u64,
        child: Option<Child>,
    },
    /// Spawned, not ready yet.
    Starting { child: Child, since_ms: u64 },
    /// Not running; the next attempt is at `retry_at_ms`.
    Down { reason: String, retry_at_ms: u64 },
}

impl GuardLink {
    /// Adopts the guard already running for this data directory, or starts one. Never fails: a
    /// guard that cannot run is reported by [`GuardLink::unavailable`] and tried again later.
    pub fn start(config: GuardConfig) -> GuardLink {
        let paths = GuardPaths::new(&config.data_dir);
        let mut link = GuardLink {
            lease_ms: config.lease_ms,
            config,
            paths,
            state: State::Down {
                reason: "the guard has not started yet".into(),
                retry_at_ms: 0,
            },
            written: None,
            write_error: None,
            checked_at_ms: 0,
            fired_at_ms: 0,
            released: false,
        };
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&link.paths.dir)
        {
            link.down(format!(
                "cannot create the guard's directory {}: {e}",
                link.paths.dir.display()
            ));
            return link;
        }
        // Until the first round says otherwise, guard what the previous agent guarded.
        let previous = Lease::read(&link.paths.lease(), &link.config.node, link.config.runtime)
            .ok()
            .filter(|l| !l.release);
        let mut lease =
            previous.unwrap_or_else(|| Lease::new(&link.config.node, link.config.runtime, 0));
        lease.expires_boot_ms = boot_now_ms() + link.lease_ms;
        link.write(lease);
        link.attach(boot_now_ms());
        link
    }

    /// Waits up to `within` for a guard being started to be ready.
    pub async fn wait_ready(&mut self, within: Duration) {
        let until = boot_now_ms() + within.as_millis() as u64;
        while matches!(self.state, State::Starting { .. }) && boot_now_ms() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.tend(boot_now_ms());
        }
    }

    /// Why exclusive replicas must not start here now, or `None` when the guard runs and its
    /// lease is renewed.
    pub fn unavailable(&self) -> Option<String> {
        if self.released {
            return Some("the agent is leaving and released its guard".into());
        }
        match &self.state {
            State::Running { .. } => self.write_error.clone(),
            State::Starting { .. } => Some("the guard process is starting".into()),
            State::Down { reason, .. } => Some(reason.clone()),
        }
    }

    /// The running guard's pid.
    pub fn pid(&self) -> Option<i32> {
        match &self.state {
            State::Running { pid, .. } => Some(*pid),
            _ => None,
        }
    }

    /// The lease length in use, in milliseconds.
    pub fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    /// Renews the lease for `grant_ms` from now (at most the lease length), guarding the
    /// `exclusive` workloads and the `handles` of their instances seen alive. Writes only when
    /// something changed or the lease moved a second; looks after the guard process on the way.
    pub fn renew(
        &mut self,
        exclusive: &BTreeSet<String>,
        handles: BTreeSet<String>,
        grant_ms: u64,
    ) {
        if self.released {
            return;
        }
        let now = boot_now_ms();
        self.tend(now);
        let mut lease = Lease::new(
            &self.config.node,
            self.config.runtime,
            now + grant_ms.min(self.lease_ms),
        );
        lease.exclusive = exclusive.clone();
        lease.handles = handles;
        let due = match &self.written {
            None => true,
            Some(w) => {
                w.exclusive != lease.exclusive
                    || w.handles != lease.handles
                    || lease.expires_boot_ms >= w.expires_boot_ms + RENEW_STEP_MS
                    || lease.expires_boot_ms + super::POLL_MS < w.expires_boot_ms
            }
        };
        if due {
            self.write(lease);
        }
    }

    /// Extends the last lease written to a full lease from now, guarding the same instances: for
    /// the agent's start, between the guard's start and the host loop's first round.
    pub fn hold(&mut self) {
        if let Some(mut lease) = self.written.clone().filter(|_| !self.released) {
            lease.expires_boot_ms = boot_now_ms() + self.lease_ms;
            self.write(lease);
        }
    }

    /// What the guard did since the last call (at most once a second).
    pub fn take_fired(&mut self) -> Vec<Fired> {
        let now = boot_now_ms();
        if now < self.fired_at_ms + FIRED_EVERY_MS {
            return Vec::new();
        }
        self.fired_at_ms = now;
        let taken = self.paths.dir.join("fired.taken.jsonl");
        fired::take(&self.paths.fired(), &taken)
    }

    /// The agent leaves: the guard stops what still runs of the exclusive workloads and exits.
    /// No renewal after this.
    pub fn release(&mut self) {
        if let Some(mut lease) = self.written.clone() {
            lease.release = true;
            lease.expires_boot_ms = boot_now_ms() + self.lease_ms;
            self.write(lease);
        }
        self.released = true;
    }

    fn write(&mut self, lease: Lease) {
        if let Err(why) = lease.check(&self.config.node, self.config.runtime) {
            self.write_error = Some(format!("the guard cannot hold this node's lease: {why}"));
            return;
        }
        match lease.write(&self.paths.lease()) {
            Ok(()) => {
                self.written = Some(lease);
                self.write_error = None;
            }
            Err(e) => {
                self.write_error = Some(format!(
                    "cannot renew the guard's lease {}: {e}",
                    self.paths.lease().display()
                ));
            }
        }
    }

    /// Looks after the guard: readiness of a starting one, the death of a running one, the next
    /// attempt after a failure.
    fn tend(&mut self, now: u64) {
        if now < self.checked_at_ms + CHECK_EVERY_MS {
            return;
        }
        self.checked_at_ms = now;
        let state = std::mem::replace(
            &mut self.state,
            State::Down {
                reason: String::new(),
                retry_at_ms: 0,
            },
        );
        self.state = match state {
            State::Running {
                pid,
                start_ticks,
                mut child,
            } => {
                let exited = match child.as_mut() {
                    Some(c) => match c.try_wait() {
                        Ok(Some(status)) => Some(format!(" ({status})")),
                        Ok(None) => None,
                        Err(e) => Some(format!(" (cannot wait for it: {e})")),
                    },
                    None => (!state::is_same_live_process(pid, start_ticks)).then(String::new),
                };
                match exited {
                    None => State::Running {
                        pid,
                        start_ticks,
                        child,
                    },
                    Some(status) => {
                        let reason =
                            format!("the guard (pid {pid}) exited{status}: {}", self.log_tail());
                        tracing::warn!(%reason, "starting the guard again");
                        State::Down {
                            reason,
                            retry_at_ms: now,
                        }
                    }
                }
            }
            State::Starting { child, since_ms } => self.starting(child, since_ms, now),
            State::Down {
                reason,
                retry_at_ms,
            } if now < retry_at_ms => State::Down {
                reason,
                retry_at_ms,
            },
            State::Down { .. } => {
                self.attach(now);
                return;
            }
        };
    }

    /// The next state of a starting guard (still `Starting` until it is ready, exits or times
    /// out).
    fn starting(&self, mut child: Child, since_ms: u64, now: u64) -> State {
        let retry_at_ms = now + self.config.retry_every.as_millis() as u64;
        if let Ok(Some(status)) = child.try_wait() {
            let reason = format!("the guard could not start ({status}): {}", self.log_tail());
            return State::Down {
                reason,
                retry_at_ms,
            };
        }
        let pid = child.id() as i32;
        if let Some(info) = GuardInfo::read(&self.paths.info()).filter(|i| i.pid == pid) {
            tracing::info!(pid, "guard ready");
            return State::Running {
                pid,
                start_ticks: info.start_ticks,
                child: Some(child),
            };
        }
        if now >= since_ms + self.config.ready_timeout.as_millis() as u64 {
            let _ = child.kill();
            let _ = child.wait();
            let reason = format!(
                "the guard was not ready within {} ms: {}",
                self.config.ready_timeout.as_millis(),
                self.log_tail()
            );
            return State::Down {
                reason,
                retry_at_ms,
            };
        }
        State::Starting { child, since_ms }
    }

    /// Adopts the running guard of this data directory, or starts one.
    fn attach(&mut self, now: u64) {
        if let Some((info, pid)) = self.running_guard() {
            tracing::info!(pid, "adopted the running guard");
            self.lease_ms = self.config.lease_ms.min(info.lease_max_ms);
            self.state = State::Running {
                pid,
                start_ticks: info.start_ticks,
                child: None,
            };
            return;
        }
        self.state = match self.spawn() {
            Ok(child) => State::Starting {
                child,
                since_ms: now,
            },
            Err(reason) => {
                tracing::error!(%reason, "the guard cannot start");
                State::Down {
                    reason,
                    retry_at_ms: now + self.config.retry_every.as_millis() as u64,
                }
            }
        };
    }

    fn down(&mut self, reason: String) {
        tracing::error!(%reason, "the guard cannot start");
        let retry_at_ms = boot_now_ms() + self.config.retry_every.as_millis() as u64;
        self.state = State::Down {
            reason,
            retry_at_ms,
        };
    }

    /// The guard already running for this data directory: its identity file matches this agent
    /// and a live process (same start time, started as `shoal guard`), and it holds the lock.
    fn running_guard(&self) -> Option<(GuardInfo, i32)> {
        let info = GuardInfo::read(&self.paths.info())?;
        let same_dir = |a: &std::path::Path, b: &std::path::Path| {
            a == b || std::fs::canonicalize(a).ok() == std::fs::canonicalize(b).ok()
        };
        let matches = info.version == LEASE_VERSION
            && info.node == self.config.node
            && info.runtime == self.config.runtime.as_str()
            && same_dir(&info.data_dir, &self.config.data_dir)
            && state::is_same_live_process(info.pid, info.start_ticks)
            && started_as_guard(info.pid);
        if !matches {
            return None;
        }
        // The lock is the last word: taking it means no guard holds it.
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.paths.lock())
            .ok()?;
        match lock.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) => Some((info.clone(), info.pid)),
            _ => None,
        }
    }

    fn spawn(&self) -> Result<Child, String> {
        let log_path = self.paths.log();
        if std::fs::metadata(&log_path).is_ok_and(|m| m.len() > LOG_BYTES_MAX) {
            let _ = std::fs::rename(&log_path, self.paths.dir.join("guard.log.old"));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("cannot open the guard's log {}: {e}", log_path.display()))?;
        Command::new(&self.config.exe)
            .arg("guard")
            .arg("--data-dir")
            .arg(&self.config.data_dir)
            .args(["--node", &self.config.node])
            .args(["--runtime", self.config.runtime.as_str()])
            .args(["--lease-max-ms", &self.config.lease_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run the guard ({} guard): {e}",
                    self.config.exe.display()
                )
            })
    }

    /// The last line of the guard's log, for messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read(self.paths.log()).unwrap_or_default();
        let tail = &text[text.len().saturating_sub(2048)..];
        String::from_utf8_lossy(tail)
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_string())
            .unwrap_or_else(|| format!("see {}", self.paths.log().display()))
    }
}

/// Whether `pid` was started as `shoal guard` (its second argument).
fn started_as_guard(pid: i32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    cmdline.split(|b| *b == 0).nth(1) == Some(b"guard".as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_never_outlasts_the_reconcilers_own_fencing() {
        let config = ReconcileConfig::default(); // self-fence 10 s, fencing stop grace 2 s
        let lease = config.self_fence_ms;
        // With a majority now: the full lease.
        assert_eq!(
            lease_grant_ms(50_000, lease, 50_000, &config, false),
            10_000
        );
        // Majority last seen 5 s ago: the running agent would fence at +7 s and be done at +9 s.
        assert_eq!(lease_grant_ms(55_000, lease, 50_000, &config, false), 7_000);
        // Past the fencing deadline: nothing left.
        assert_eq!(lease_grant_ms(70_000, lease, 50_000, &config, false), 0);
        // An operator approved running without a majority: the plain lease.
        assert_eq!(lease_grant_ms(70_000, lease, 50_000, &config, true), 10_000);
        // Either way it ends before the mesh may start another copy.
        assert!(lease + super::super::POLL_MS < config.fencing_delay_ms);
    }
}
