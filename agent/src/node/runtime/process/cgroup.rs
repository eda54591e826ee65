//! cpu and memory limits for host processes through cgroup v2.
//!
//! Layout: `<root>/shoal/` (controllers `cpu` and `memory` enabled for its children), then one
//! directory per instance, `<root>/shoal/<node>.<handle>/`, with `cpu.max`, `memory.max` and the
//! instance's pid in `cgroup.procs`. The node is part of the name because several agents may
//! share a host in tests.
//!
//! Where cgroup v2 is not mounted at the root, lacks a controller, or is not writable, nothing is
//! enforced and [`Cgroups::note`] says so in one sentence, for `status`.
//!
//! The pid is moved in right after spawning: a child that forks in its first microseconds leaves
//! its own children outside. Closing that gap needs code between fork and exec (`pre_exec`), which
//! is `unsafe`; the crate forbids it.

use std::path::{Path, PathBuf};

use crate::core::Resources;

/// The CPU accounting period written to `cpu.max`, in microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// Whether limits can be enforced here, decided once when the runtime starts.
#[derive(Debug)]
pub(crate) enum Cgroups {
    /// Limits are enforced under this directory (`<root>/shoal`).
    Enforced {
        /// The parent of every instance's cgroup.
        parent: PathBuf,
    },
    /// Limits are not enforced, for this reason.
    Unavailable {
        /// A full sentence for `status`.
        note: String,
    },
}

impl Cgroups {
    /// Probes `root` (normally `/sys/fs/cgroup`) and prepares `<root>/shoal`.
    pub fn detect(root: &Path) -> Cgroups {
        match prepare(root) {
            Ok(parent) => Cgroups::Enforced { parent },
            Err(why) => Cgroups::Unavailable {
                note: format!("cpu/memory limits not enforced: {why}"),
            },
        }
    }

    /// The sentence for `status`, when limits are not enforced.
    pub fn note(&self) -> Option<String> {
        match self {
            Cgroups::Enforced { .. } => None,
            Cgroups::Unavailable { note } => Some(note.clone()),
        }
    }

    /// Creates the instance's cgroup with its limits and moves `pid` into it. Returns the
    /// directory, or `None` (with a warning) when limits are not enforced or this one failed:
    /// a limit that cannot be applied never prevents a start.
    pub fn apply(&self, node: &str, handle: &str, pid: i32, limits: Resources) -> Option<PathBuf> {
        let Cgroups::Enforced { parent } = self else {
            return None;
        };
        let dir = parent.join(format!("{node}.{handle}"));
        let result = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("cpu.max"), cpu_max(limits.cpu_millis)))
            .and_then(|()| std::fs::write(dir.join("memory.max"), limits.memory_bytes.to_string()))
            .and_then(|()| std::fs::write(dir.join("cgroup.procs"), pid.to_string()));
        match result {
            Ok(()) => Some(dir),
            Err(e) => {
                tracing::warn!(cgroup = %dir.display(), error = %e, "cgroup limits not applied");
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// Removes an instance's cgroup once its processes are gone (best effort: the kernel refuses
    /// while a process is still inside).
    pub fn release(dir: &Path) {
        if let Err(e) = std::fs::remove_dir(dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!(cgroup = %dir.display(), error = %e, "cgroup not removed");
            }
        }
    }
}

/// The `cpu.max` line for a CPU reservation: quota and period in microseconds.
pub(crate) fn cpu_max(cpu_millis: u64) -> String {
    let quota = (cpu_millis.saturating_mul(CPU_PERIOD_US) / 1000).max(1000);
    format!("{quota} {CPU_PERIOD_US}")
}

/// Checks that `root` is a writable cgroup v2 hierarchy with `cpu` and `memory`, and enables them
/// for `<root>/shoal`'s children.
fn prepare(root: &Path) -> Result<PathBuf, String> {
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).map_err(|_| {
        format!(
            "cgroup v2 is not mounted at {} (cgroup v1 or hybrid host)",
            root.display()
        )
    })?;
    let have: Vec<&str> = controllers.split_whitespace().collect();
    let missing: Vec<&str> = ["cpu", "memory"]
        .into_iter()
        .filter(|c| !have.contains(c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "cgroup v2 at {} lacks the {} controller(s) (available: {})",
            root.display(),
            missing.join(", "),
            if have.is_empty() {
                "none".to_string()
            } else {
                have.join(" ")
            },
        ));
    }
    let parent = root.join("shoal");
    let not_writable =
        |path: &Path, e: std::io::Error| format!("{} is not writable ({e})", path.display());
    enable_controllers(root).map_err(|e| not_writable(root, e))?;
    std::fs::create_dir_all(&parent).map_err(|e| not_writable(&parent, e))?;
    enable_controllers(&parent).map_err(|e| not_writable(&parent, e))?;
    Ok(parent)
}

/// Enables `cpu` and `memory` for the children of `dir`, unless they already are.
fn enable_controllers(dir: &Path) -> std::io::Result<()> {
    let path = dir.join("cgroup.subtree_control");
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    let enabled: Vec<&str> = current.split_whitespace().collect();
    if enabled.contains(&"cpu") && enabled.contains(&"memory") {
        return Ok(());
    }
    std::fs::write(&path, "+cpu +memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_scales_millicores_to_the_period() {
        assert_eq!(cpu_max(1000), "100000 100000");
        assert_eq!(cpu_max(250), "25000 100000");
        assert_eq!(cpu_max(2500), "250000 100000");
        // The kernel refuses quotas under 1 ms.
        assert_eq!(cpu_max(1), "1000 100000");
    }

    #[test]
    fn a_fake_v2_root_gets_limits_and_the_pid() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(
            root.path().join("cgroup.controllers"),
            "cpuset cpu io memory pids",
        )
        .unwrap();
        let cgroups = Cgroups::detect(root.path());
        assert_eq!(cgroups.note(), None);
        let dir = cgroups
            .apply("n1", "web-0-1", 4242, Resources::new(500, 64 << 20))
            .unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("cpu.max"), "50000 100000");
        assert_eq!(read("memory.max"), (64u64 << 20).to_string());
        assert_eq!(read("cgroup.procs"), "4242");
        let subtree = root.path().join("shoal/cgroup.subtree_control");
        assert_eq!(std::fs::read_to_string(subtree).unwrap(), "+cpu +memory");
    }

    #[test]
    fn missing_v2_or_controllers_is_said_plainly() {
        let root = tempfile::tempdir().unwrap();
        let note = Cgroups::detect(root.path()).note().unwrap();
        assert!(note.contains("cgroup v2 is not mounted"), "{note}");
        std::fs::write(root.path().join("cgroup.controllers"), "pids io").unwrap();
        let note = Cgroups::detect(root.path()).note().unwrap();
        assert!(
            note.contains("lacks the cpu, memory controller(s)"),
            "{note}"
        );
    }
}
