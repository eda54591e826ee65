//! The two small files the agent and its guard share: the lease (written by the agent) and the
//! guard's identity (written by the guard). Both are JSON, written by a rename, and read with a
//! size limit and checked field by field: the guard treats a lease that fails any check as
//! tampered with.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::GuardRuntime;

/// The lease format's version; any other is refused.
pub const LEASE_VERSION: u32 = 1;
/// Largest lease file accepted, in bytes.
pub const LEASE_BYTES_MAX: u64 = 1024 * 1024;
/// Most workload names, and most instance handles, one lease may list.
pub const GUARDED_MAX: usize = 4096;
/// Longest workload name or handle accepted, in bytes.
const NAME_BYTES_MAX: usize = 255;
/// Largest guard identity file accepted, in bytes.
const INFO_BYTES_MAX: u64 = 64 * 1024;

/// What the agent grants its guard: until when the lease holds and what it guards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lease {
    /// [`LEASE_VERSION`].
    pub version: u32,
    /// The node the agent serves; a guard refuses a lease for another node.
    pub node: String,
    /// The runtime of the instances ([`GuardRuntime::as_str`]).
    pub runtime: String,
    /// When the lease ends, in milliseconds of `CLOCK_BOOTTIME` ([`boot_now_ms`]): a monotonic
    /// clock both processes read, which wall-clock steps do not move.
    pub expires_boot_ms: u64,
    /// Workloads whose instances on this node are exclusive: the guard stops any of their
    /// instances it finds (process state files, container labels), including ones started after
    /// the last renewal.
    pub exclusive: BTreeSet<String>,
    /// Handles of the exclusive instances the agent saw alive: the guard resolves them when they
    /// appear, so it can stop them even if their state files are lost later.
    pub handles: BTreeSet<String>,
    /// The agent leaves: stop what is still running of the exclusive workloads and exit.
    pub release: bool,
}

/// Why a lease file was refused. Each means the guard cannot trust what it guards, so it stops
/// the instances.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The file could not be read (missing, permissions, I/O).
    #[error("cannot read {path}: {source}")]
    Io {
        /// The lease file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Not a regular file (a symlink, a directory).
    #[error("{path} is not a regular file")]
    NotAFile {
        /// The lease file.
        path: PathBuf,
    },
    /// Larger than [`LEASE_BYTES_MAX`].
    #[error("{path} is {len} bytes, more than the {LEASE_BYTES_MAX} allowed")]
    TooLarge {
        /// The lease file.
        path: PathBuf,
        /// Its size.
        len: u64,
    },
    /// Not JSON of the lease's shape.
    #[error("{path} does not parse as a lease: {reason}")]
    Parse {
        /// The lease file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// Parsed, but a field is out of bounds or names another node, runtime or version.
    #[error("{path}: {reason}")]
    Invalid {
        /// The lease file.
        path: PathBuf,
        /// Which field and why.
        reason: String,
    },
}

impl Lease {
    /// A lease for `node` ending at `expires_boot_ms`.
    pub fn new(node: &str, runtime: GuardRuntime, expires_boot_ms: u64) -> Lease {
        Lease {
            version: LEASE_VERSION,
            node: node.to_string(),
            runtime: runtime.as_str().to_string(),
            expires_boot_ms,
            exclusive: BTreeSet::new(),
            handles: BTreeSet::new(),
            release: false,
        }
    }

    /// Checks every field against the guard's own node and runtime and the bounds.
    pub fn check(&self, node: &str, runtime: GuardRuntime) -> Result<(), String> {
        if self.version != LEASE_VERSION {
            return Err(format!(
                "version {} (this guard reads version {LEASE_VERSION})",
                self.version
            ));
        }
        if self.node != node {
            return Err(format!(
                "lease for node {:?}, this guard serves {node:?}",
                self.node
            ));
        }
        if self.runtime != runtime.as_str() {
            return Err(format!(
                "lease for the {} runtime, this guard stops {} instances",
                self.runtime,
                runtime.as_str()
            ));
        }
        for (field, names) in [("exclusive", &self.exclusive), ("handles", &self.handles)] {
            if names.len() > GUARDED_MAX {
                return Err(format!(
                    "{field} lists {} names, more than {GUARDED_MAX}",
                    names.len()
                ));
            }
            if let Some(bad) = names.iter().find(|n| !is_plain_name(n)) {
                return Err(format!("{field} holds {bad:?}, which is not a plain name"));
            }
        }
        Ok(())
    }

    /// Writes the lease to `path` by a rename (a reader sees the old or the new file, never a
    /// part), owner-only.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).expect("a lease serializes");
        write_atomically(path, &bytes)
    }

    /// Reads and checks the lease at `path` for a guard of `node` and `runtime`.
    pub fn read(path: &Path, node: &str, runtime: GuardRuntime) -> Result<Lease, LeaseError> {
        let bytes = read_bounded(path, LEASE_BYTES_MAX).map_err(|e| match e {
            Bounded::Io(source) => LeaseError::Io {
                path: path.to_path_buf(),
                source,
            },
            Bounded::NotAFile => LeaseError::NotAFile {
                path: path.to_path_buf(),
            },
            Bounded::TooLarge(len) => LeaseError::TooLarge {
                path: path.to_path_buf(),
                len,
            },
        })?;
        let lease: Lease = serde_json::from_slice(&bytes).map_err(|e| LeaseError::Parse {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        lease
            .check(node, runtime)
            .map_err(|reason| LeaseError::Invalid {
                path: path.to_path_buf(),
                reason,
            })?;
        Ok(lease)
    }
}

/// Who the running guard is: written by the guard once it holds the lock and has read a valid
/// lease; the agent adopts a guard only if every field matches it and the live process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardInfo {
    /// [`LEASE_VERSION`].
    pub version: u32,
    /// The guard's pid.
    pub pid: i32,
    /// Its start time in clock ticks since boot (`/proc/<pid>/stat`), so a reused pid is not
    /// mistaken for it.
    pub start_ticks: u64,
    /// The node it serves.
    pub node: String,
    /// The runtime whose instances it stops.
    pub runtime: String,
    /// The data directory it guards.
    pub data_dir: PathBuf,
    /// The longest lease it accepts, in milliseconds.
    pub lease_max_ms: u64,
}

impl GuardInfo {
    /// Writes the identity file by a rename.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).expect("guard info serializes");
        write_atomically(path, &bytes)
    }

    /// Reads the identity file; `None` if it is missing or does not parse.
    pub fn read(path: &Path) -> Option<GuardInfo> {
        let bytes = read_bounded(path, INFO_BYTES_MAX).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Milliseconds of `CLOCK_BOOTTIME`: the same clock for every process on this machine, monotonic
/// (it never jumps with the wall clock), and, unlike `CLOCK_MONOTONIC`, it counts the time the
/// machine was suspended: the lease measures the time the rest of the mesh sees pass.
pub fn boot_now_ms() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    let now = clock_gettime(ClockId::CLOCK_BOOTTIME).expect("CLOCK_BOOTTIME is always readable");
    (now.tv_sec() as u64) * 1000 + (now.tv_nsec() as u64) / 1_000_000
}

/// A workload name or handle that is safe as a path component and in a label filter.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

enum Bounded {
    Io(std::io::Error),
    NotAFile,
    TooLarge(u64),
}

/// Reads a regular file (not following a symlink) of at most `max` bytes.
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, Bounded> {
    let meta = std::fs::symlink_metadata(path).map_err(Bounded::Io)?;
    if !meta.file_type().is_file() {
        return Err(Bounded::NotAFile);
    }
    if meta.len() > max {
        return Err(Bounded::TooLarge(meta.len()));
    }
    let bytes = std::fs::read(path).map_err(Bounded::Io)?;
    match bytes.len() as u64 {
        len if len > max => Err(Bounded::TooLarge(len)),
        _ => Ok(bytes),
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, mode 0600.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> Lease {
        let mut lease = Lease::new("n1", GuardRuntime::Process, 5_000);
        lease.exclusive.insert("db".into());
        lease.handles.insert("db-0-0123abcd".into());
        lease
    }

    #[test]
    fn a_lease_round_trips_and_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lease.json");
        lease().write(&path).unwrap();
        let read = Lease::read(&path, "n1", GuardRuntime::Process).unwrap();
        assert_eq!(read, lease());
        let other = Lease::read(&path, "n2", GuardRuntime::Process).unwrap_err();
        assert!(
            other.to_string().contains("this guard serves \"n2\""),
            "{other}"
        );
        let runtime = Lease::read(&path, "n1", GuardRuntime::Docker).unwrap_err();
        assert!(runtime.to_string().contains("process runtime"), "{runtime}");
    }

    #[test]
    fn bad_leases_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lease.json");
        let read = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            Lease::read(&path, "n1", GuardRuntime::Process)
                .unwrap_err()
                .to_string()
        };
        assert!(read(b"{\"version\":1").contains("does not parse"));
        assert!(read(b"garbage").contains("does not parse"));
        let mut l = lease();
        l.version = 2;
        assert!(read(&serde_json::to_vec(&l).unwrap()).contains("version 2"));
        let mut l = lease();
        l.handles.insert("../../etc".into());
        assert!(read(&serde_json::to_vec(&l).unwrap()).contains("not a plain name"));
        let mut l = lease();
        l.exclusive = (0..=GUARDED_MAX).map(|i| format!("w{i}")).collect();
        assert!(read(&serde_json::to_vec(&l).unwrap()).contains("more than 4096"));
        let mut big = serde_json::to_vec(&lease()).unwrap();
        big.resize(LEASE_BYTES_MAX as usize + 1, b' ');
        assert!(read(&big).contains("more than"));
        let mut extra = serde_json::to_value(lease()).unwrap();
        extra["kill"] = serde_json::json!(false);
        assert!(read(&serde_json::to_vec(&extra).unwrap()).contains("unknown field"));
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(dir.path(), &path).unwrap();
        let err = Lease::read(&path, "n1", GuardRuntime::Process).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn the_boot_clock_moves_forward() {
        let a = boot_now_ms();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(boot_now_ms() >= a + 5);
    }
}
