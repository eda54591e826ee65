//! The guard process's life as the agent sees it: adopt the running guard or spawn one, watch it
//! become ready, notice its death, and try again after a failure.

use std::process::{Child, Command, Stdio};

use super::GuardLink;
use crate::node::guard::lease::{boot_now_ms, GuardInfo, LEASE_VERSION};
use crate::node::runtime::process::state;

/// A guard log larger than this is moved aside when a guard starts.
const LOG_BYTES_MAX: u64 = 1024 * 1024;
/// The guard's health is looked at most this often.
const CHECK_EVERY_MS: u64 = 250;

/// Where the guard process stands.
pub(super) enum State {
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
    /// Looks after the guard: readiness of a starting one, the death of a running one, the next
    /// attempt after a failure.
    pub(super) fn tend(&mut self, now: u64) {
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
    pub(super) fn attach(&mut self, now: u64) {
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

    pub(super) fn down(&mut self, reason: String) {
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
