//! The process runtime's state file per instance, and the `/proc` checks that make adoption safe.
//!
//! A pid alone does not name a process: after it exits the kernel may give the number to another.
//! So the state file records the process start time (field 22 of `/proc/<pid>/stat`, in clock
//! ticks since boot), and a pid is trusted only while its start time still matches.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::instance::{Phase, ReplicaId, RuntimeInstance};
use crate::node::runtime::RuntimeError;

/// The state file's name inside `<data_dir>/instances/<handle>/`.
pub(crate) const STATE_FILE: &str = "state.json";

/// What the runtime knows about one instance, persisted as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InstanceState {
    pub handle: String,
    pub replica: ReplicaId,
    pub spec_version: String,
    pub node: String,
    /// The process id, which is also its process group id.
    pub pid: i32,
    /// Start time of `pid` in clock ticks since boot, from `/proc/<pid>/stat`.
    pub proc_start_ticks: u64,
    pub started_at_ms: u64,
    pub exited_at_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    /// A stop was requested and not yet completed.
    pub stopping: bool,
    /// The environment it was started with (exec probes and reload commands reuse it).
    pub env: BTreeMap<String, String>,
    pub working_dir: PathBuf,
    /// Its cgroup v2 directory, when limits were applied.
    pub cgroup: Option<PathBuf>,
    /// The host ports it was given by name (also in `env` as `SHOAL_PORT_<NAME>`); absent in
    /// state files of agents that predate named ports.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ports: BTreeMap<String, u16>,
    /// The user and group it runs as (the spec's `user`, resolved on this host); `None`: the
    /// agent's. Exec commands run as it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<super::user::RunAs>,
}

impl InstanceState {
    /// Whether the instance has exited (as far as the runtime knows).
    pub fn exited(&self) -> bool {
        self.exited_at_ms.is_some()
    }

    /// The shared observation.
    pub fn to_instance(&self) -> RuntimeInstance {
        let phase = if self.exited() {
            Phase::Exited
        } else if self.stopping {
            Phase::Stopping
        } else {
            Phase::Running
        };
        RuntimeInstance {
            handle: self.handle.clone(),
            replica: self.replica.clone(),
            spec_version: self.spec_version.clone(),
            phase,
            started_at_ms: self.started_at_ms,
            exited_at_ms: self.exited_at_ms,
            exit_code: self.exit_code,
            error: self.error.clone(),
            // The environment is the record: the token reported is the one the process got.
            fence_token: crate::node::runtime::fence_token_of(&self.env),
            ports: self.ports.clone(),
        }
    }

    /// Writes the state file atomically (temporary file, then rename).
    pub fn save(&self, dir: &Path) -> Result<(), RuntimeError> {
        let path = dir.join(STATE_FILE);
        let tmp = dir.join(format!("{STATE_FILE}.tmp"));
        let bytes = serde_json::to_vec_pretty(self).expect("state serializes");
        // Owner-only: the environment may hold credentials.
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(&bytes)?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| RuntimeError::io(format!("writing {}", path.display()), e))
    }
}

/// Reads every instance state under `instances_dir`, sorted by handle. Unreadable or corrupt
/// files are skipped with a warning: one bad file must not hide the other instances.
pub(crate) fn load_all(instances_dir: &Path) -> Result<Vec<InstanceState>, RuntimeError> {
    let entries = match std::fs::read_dir(instances_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            let context = format!("listing {}", instances_dir.display());
            return Err(RuntimeError::io(context, e));
        }
    };
    let mut states: Vec<InstanceState> = entries
        .flatten()
        .filter_map(|e| load_one(&e.path()))
        .collect();
    states.sort_by(|a, b| a.handle.cmp(&b.handle));
    Ok(states)
}

/// Reads the state file of the instance directory `dir`; `None` (with a warning when a file is
/// there) if it is missing, corrupt or names another instance.
pub(crate) fn load_one(dir: &Path) -> Option<InstanceState> {
    let path = dir.join(STATE_FILE);
    let parsed = std::fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<InstanceState>(&b).map_err(|e| e.to_string()));
    match parsed {
        Ok(state) if dir.file_name().and_then(|n| n.to_str()) == Some(state.handle.as_str()) => {
            Some(state)
        }
        Ok(state) => {
            tracing::warn!(path = %path.display(), handle = %state.handle,
                "state file names another instance; ignored");
            None
        }
        Err(e) if path.exists() => {
            tracing::warn!(path = %path.display(), error = %e, "unreadable state file; ignored");
            None
        }
        // A directory without a state file: a start that failed before spawning.
        Err(_) => None,
    }
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// The state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// The process group id.
    pub pgrp: i32,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
}

/// Reads `/proc/<pid>/stat`; `None` when there is no such process (or no `/proc`).
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_proc_stat(&text)
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 was the state; the group is field 5 and the start time field 22.
    let pgrp = fields.nth(1)?.parse().ok()?;
    let start_ticks = fields.nth(16)?.parse().ok()?;
    Some(ProcStat {
        state,
        pgrp,
        start_ticks,
    })
}

/// Whether `pid` is still the process that was started at `start_ticks`, and not a zombie.
pub(crate) fn is_same_live_process(pid: i32, start_ticks: u64) -> bool {
    match proc_stat(pid) {
        Some(stat) => stat.start_ticks == start_ticks && stat.state != 'Z' && stat.state != 'X',
        None => false,
    }
}

/// Whether any live (non-zombie) process is still in process group `pgid`. Zombies do not count:
/// they hold nothing and wait only for their reaper.
pub(crate) fn group_has_live_members(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc_stat)
        .any(|stat| stat.pgrp == pgid && stat.state != 'Z' && stat.state != 'X')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let text = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 104 0 0 0 0 0 0 0 20 0 1 0 \
                    987654 2392064 140 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let stat = parse_proc_stat(text).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.pgrp, 4242);
        assert_eq!(stat.start_ticks, 987654);
        assert_eq!(parse_proc_stat("garbage"), None);
        assert_eq!(parse_proc_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn own_process_matches_itself_only() {
        let pid = std::process::id() as i32;
        let stat = proc_stat(pid).expect("own /proc entry");
        assert!(is_same_live_process(pid, stat.start_ticks));
        assert!(!is_same_live_process(pid, stat.start_ticks + 1));
    }
}
