//! A process instance's output: the log relay started beside it, the directory its files live
//! in, and reading them for `shoal logs`.
//!
//! Layout: `<data_dir>/logs/<workload>/<replica>/<started_at_ms>-<handle>/output.log[.N]`. The
//! logs live outside the instance directory because the reconciler removes an exited instance
//! as soon as a newer one of its replica exists, and `shoal logs --previous` needs the output of
//! exactly that instance. Each replica keeps the directories of its live instances and of the
//! newest exited one; the rest are deleted when the next instance of the replica starts
//! ([`Inner::prune_logs`]). So a replica holds at most (live instances + 1) x the bound on disk,
//! 2 x the bound in the steady state. The zero-padded start time makes names sort by age.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;

use super::Inner;
use crate::core::instance::ReplicaId;
use crate::node::runtime::logs::{read, LogPage, LogQuery};
use crate::node::runtime::{
    logs::{LOG_BYTES_MAX_DEFAULT, LOG_FILES_DEFAULT, LOG_FILE_BYTES_MIN},
    RuntimeError,
};

/// How the process runtime bounds and relays an instance's output.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// The `shoal` binary run as `shoal log-relay`. `None` when it could not be found: every
    /// start then fails saying so.
    pub relay_program: Option<PathBuf>,
    /// Most bytes of one instance's log files on disk.
    pub bytes_max: u64,
    /// Files the bound is spread over (the current one and `files - 1` rotated ones).
    pub files: u32,
}

impl Default for LogConfig {
    /// 10 MiB in 2 files, relayed by the running `shoal` binary (see [`default_relay_program`]).
    fn default() -> Self {
        LogConfig {
            relay_program: default_relay_program(),
            bytes_max: LOG_BYTES_MAX_DEFAULT,
            files: LOG_FILES_DEFAULT,
        }
    }
}

impl LogConfig {
    /// Checks the bound: each file must hold at least [`LOG_FILE_BYTES_MIN`] (a whole record).
    pub fn check(&self) -> Result<(), String> {
        if self.files == 0 {
            return Err("the log files count must be at least 1".into());
        }
        let per_file =
            crate::node::runtime::logs::rotate::file_bytes_for(self.bytes_max, self.files);
        if per_file < LOG_FILE_BYTES_MIN {
            return Err(format!(
                "a log bound of {} bytes over {} files leaves {per_file} bytes per file (after \
                 the directory's 4 KiB, in whole 4 KiB blocks); each needs at least \
                 {LOG_FILE_BYTES_MIN} (raise --log-max-bytes)",
                self.bytes_max, self.files
            ));
        }
        Ok(())
    }
}

/// The running executable (the agent is `shoal` itself); for a test or example binary cargo
/// built (`target/*/deps/`, `target/*/examples/`), the `shoal` binary beside its directory. An
/// executable replaced on disk while running (an upgrade: `/proc/self/exe` then reads
/// `... (deleted)`) is not a file any more: the `shoal` in its directory, the new one, is used.
pub fn default_relay_program() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    let built_by_cargo = dir.ends_with("deps") || dir.ends_with("examples");
    if !built_by_cargo && exe.is_file() {
        return Some(exe);
    }
    [dir.join("shoal"), dir.parent()?.join("shoal")]
        .into_iter()
        .find(|p| p.is_file())
}

/// The two pipes an instance writes to, their write ends for the instance, and the directory
/// its relay writes in.
pub(super) struct Outputs {
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub dir: PathBuf,
}

impl Inner {
    /// The directory of a replica's instances' logs.
    fn replica_logs(&self, replica: &ReplicaId) -> PathBuf {
        self.config
            .data_dir
            .join("logs")
            .join(&replica.workload)
            .join(replica.replica.to_string())
    }

    /// The replica's log directories, oldest first, with their handles.
    fn log_dirs(&self, replica: &ReplicaId) -> Vec<(String, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(self.replica_logs(replica)) else {
            return Vec::new();
        };
        let mut dirs: Vec<(String, String, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                let (_, handle) = name.split_once('-')?;
                Some((name.clone(), handle.to_string(), e.path()))
            })
            .collect();
        dirs.sort();
        dirs.into_iter().map(|(_, h, p)| (h, p)).collect()
    }

    /// Deletes the replica's log directories but those of live instances and the newest exited
    /// one (what `--previous` reads).
    fn prune_logs(&self, replica: &ReplicaId) {
        let live: Vec<String> = {
            let instances = self.instances.lock().expect("instances lock");
            instances
                .values()
                .filter(|e| !e.state.exited())
                .map(|e| e.state.handle.clone())
                .collect()
        };
        let mut exited: Vec<PathBuf> = self
            .log_dirs(replica)
            .into_iter()
            .filter(|(h, _)| !live.contains(h))
            .map(|(_, p)| p)
            .collect();
        exited.pop(); // the newest exited one stays
        for dir in exited {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "could not delete old logs");
            }
        }
    }

    /// Starts the log relay of a new instance and returns the pipes the instance writes to.
    pub(super) fn start_relay(
        &self,
        replica: &ReplicaId,
        handle: &str,
        started_at_ms: u64,
    ) -> Result<Outputs, RuntimeError> {
        let logs = &self.config.logs;
        let program = logs
            .relay_program
            .as_ref()
            .ok_or_else(|| RuntimeError::StartFailed {
                reason: "no log relay: the `shoal` binary was not found beside the running \
                     executable (set the process runtime's relay_program)"
                    .into(),
            })?;
        self.prune_logs(replica);
        let dir = self
            .replica_logs(replica)
            .join(format!("{started_at_ms:013}-{handle}"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| RuntimeError::io(format!("creating {}", dir.display()), e))?;
        let pipe = |what: &str| {
            std::io::pipe().map_err(|e| RuntimeError::io(format!("creating the {what} pipe"), e))
        };
        let (stdout_read, stdout_write) = pipe("stdout")?;
        let (stderr_read, stderr_write) = pipe("stderr")?;
        // The stderr pipe's read end goes in as the relay's stdout: see `runtime/logs/relay.rs`.
        let mut relay = tokio::process::Command::new(program);
        relay
            .arg("log-relay")
            .arg("--dir")
            .arg(&dir)
            .args(["--max-bytes", &logs.bytes_max.to_string()])
            .args(["--files", &logs.files.to_string()])
            .env_clear()
            .stdin(Stdio::from(OwnedFd::from(stdout_read)))
            .stdout(Stdio::from(OwnedFd::from(stderr_read)))
            .stderr(Stdio::null())
            // Its own group: not hit by the instance's stop nor by a Ctrl-C to the agent.
            .process_group(0)
            .kill_on_drop(false);
        let mut child = relay.spawn().map_err(|e| {
            let _ = std::fs::remove_dir_all(&dir);
            RuntimeError::StartFailed {
                reason: format!("starting the log relay {}: {e}", program.display()),
            }
        })?;
        // Reaped here while this agent runs; after an agent restart, by init.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(Outputs {
            stdout: stdout_write.into(),
            stderr: stderr_write.into(),
            dir,
        })
    }

    /// Reads the output of the replica's newest instance here, or of the one before it.
    pub(super) fn logs(
        &self,
        replica: &ReplicaId,
        previous: bool,
        query: &LogQuery,
    ) -> Result<LogPage, RuntimeError> {
        let mut dirs = self.log_dirs(replica);
        let newest = dirs.pop();
        let picked = if previous { dirs.pop() } else { newest };
        let Some((handle, dir)) = picked else {
            let what = if previous {
                "no previous instance of"
            } else {
                "no instance of"
            };
            return Err(RuntimeError::NoLogs {
                reason: format!(
                    "{what} {replica} has left logs on node {}",
                    self.config.node
                ),
            });
        };
        let start = query.start_for(&handle);
        let found = read::read_from(&dir, start, query).map_err(|e| RuntimeError::NoLogs {
            reason: format!("reading the logs in {}: {e}", dir.display()),
        })?;
        let running = {
            let instances = self.instances.lock().expect("instances lock");
            instances.get(&handle).is_some_and(|e| !e.state.exited())
        };
        Ok(LogPage {
            instance: handle,
            running,
            lines: found.lines,
            cursor: found.cursor,
            more: found.more,
            skipped: found.skipped,
        })
    }

    /// The log directory of an instance, if it has one (tests, diagnostics).
    pub(super) fn log_dir(&self, replica: &ReplicaId, handle: &str) -> Option<PathBuf> {
        self.log_dirs(replica)
            .into_iter()
            .find(|(h, _)| h == handle)
            .map(|(_, p)| p)
    }
}
