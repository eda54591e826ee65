//! The guard: a small process, `shoal guard`, that stops this node's exclusive instances when the
//! agent stops renewing its lease, even when the agent process is stopped (SIGSTOP), hung or dead.
//!
//! Why: the mesh replaces an exclusive replica once its owner has been confirmed dead for
//! `fencing_delay_ms`. A running agent that loses its majority fences itself (docs/reconcile.md),
//! but a frozen one cannot stop anything, and its instances (own process groups, containers) keep
//! running. Something that does not freeze with the agent must stop them first.
//!
//! How:
//! - The agent ([`GuardLink`]) writes `DATA_DIR/guard/lease.json` ([`Lease`]): which workloads are
//!   exclusive, which of their instances run here, and until when the lease holds, as an absolute
//!   `CLOCK_BOOTTIME` time (monotonic, the same clock in both processes, counting suspend; never
//!   wall time). It renews from
//!   its host loop's rounds, so a hung loop stops renewing just as a stopped process does. While
//!   the node lacks a majority the lease ends no later than the reconciler's own fencing deadline
//!   ([`lease_grant_ms`]).
//! - The guard ([`run_guard`]), started by the agent in its own session (so signals to the
//!   agent's process group or terminal do not reach it), polls the lease every [`POLL_MS`]. When
//!   the lease ends without renewal it SIGKILLs the process groups of those instances (pid and
//!   process start time checked, so a reused pid is never hit) or kills the containers through the
//!   engine (by the `shoal.node` and `shoal.workload` labels), records what it did in
//!   `fired.jsonl`, and keeps running. A lease file that is missing, unparseable, over its bounds
//!   or for another node counts as tampering: the guard stops the instances at once (fail safe).
//! - A restarted agent adopts the running guard (`guard.json` names its pid and start time, and
//!   the guard holds `guard.lock`), reads `fired.jsonl` into events and `self-fenced` issues, and
//!   renews. A guard that cannot start or be renewed makes the agent refuse exclusive starts with
//!   an issue that says why (`ReconcileInput::exclusive_guard_unavailable`).
//! - A graceful leave writes a lease with `release`: the guard stops any exclusive instance still
//!   running (the agent fenced them already) and exits.
//!
//! What it does not do: a suspended machine stops both processes, so nothing is fenced while it
//! sleeps (on waking, a sleep longer than the lease makes the guard kill at its first poll, racing
//! the agent's first renewal); an instance whose process-group
//! leader exited while other members run is not found by its group; a same-user process can
//! rewrite a valid lease (the guard protects against failures, not against the agent's own user).

mod fired;
mod lease;
mod link;
mod mem;
mod run;
mod sweep;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

pub use fired::{Fired, Killed, FIRED_BYTES_MAX};
pub use lease::{boot_now_ms, GuardInfo, Lease, LeaseError, GUARDED_MAX, LEASE_BYTES_MAX};
pub use link::{lease_grant_ms, GuardConfig, GuardLink};
pub use mem::{MemGuard, MemGuardKill};
pub use run::{run_guard, GuardOptions};

/// How often the guard looks at the lease, in milliseconds. The guard acts at most this long
/// after the lease ends.
pub const POLL_MS: u64 = 100;

/// What the host loop holds of its guard and renews every round: the agent's side of the
/// `shoal guard` process ([`GuardLink`]), or the simulator's in-memory guard ([`MemGuard`]),
/// which keeps running in simulated time while the agent is paused. Both are granted the same
/// leases ([`lease_grant_ms`]), so a frozen agent is fenced on the same timetable.
pub trait GuardLease: Send {
    /// Why exclusive replicas must not start here now, or `None` when the guard runs and its
    /// lease is renewed.
    fn unavailable(&self) -> Option<String>;
    /// The lease length in use, in milliseconds.
    fn lease_ms(&self) -> u64;
    /// Renews the lease for `grant_ms` from now (at most the lease length), guarding the
    /// `exclusive` workloads and the `handles` of their instances seen alive.
    fn renew(&mut self, exclusive: &BTreeSet<String>, handles: BTreeSet<String>, grant_ms: u64);
    /// What the guard did since the last call.
    fn take_fired(&mut self) -> Vec<Fired>;
    /// The agent leaves: the guard stops what still runs of the exclusive workloads and exits.
    /// No renewal after this.
    fn release(&mut self);

    /// Extends the last lease to a full lease from now, guarding the same instances (a planned
    /// restart: the next agent adopts the guard and renews).
    fn hold(&mut self);
}

/// Which runtime's instances a guard stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardRuntime {
    /// Process groups, found in the process runtime's state files.
    Process,
    /// Containers, found through the Docker engine by label.
    Docker,
}

impl GuardRuntime {
    /// The lowercase name used on the command line and in the lease.
    pub fn as_str(self) -> &'static str {
        match self {
            GuardRuntime::Process => "process",
            GuardRuntime::Docker => "docker",
        }
    }

    /// Parses [`GuardRuntime::as_str`].
    pub fn parse(text: &str) -> Option<GuardRuntime> {
        match text {
            "process" => Some(GuardRuntime::Process),
            "docker" => Some(GuardRuntime::Docker),
            _ => None,
        }
    }
}

/// The files of one data directory's guard, all under `DATA_DIR/guard/`.
#[derive(Clone, Debug)]
pub struct GuardPaths {
    /// The agent's data directory.
    pub data_dir: PathBuf,
    /// `DATA_DIR/guard`.
    pub dir: PathBuf,
}

impl GuardPaths {
    /// The guard files of `data_dir`.
    pub fn new(data_dir: &Path) -> GuardPaths {
        GuardPaths {
            data_dir: data_dir.to_path_buf(),
            dir: data_dir.join("guard"),
        }
    }

    /// The lease the agent writes and the guard reads.
    pub fn lease(&self) -> PathBuf {
        self.dir.join("lease.json")
    }

    /// Who the running guard is ([`GuardInfo`]), written by the guard once it is ready.
    pub fn info(&self) -> PathBuf {
        self.dir.join("guard.json")
    }

    /// Locked by the running guard for its whole life: at most one guard per data directory.
    pub fn lock(&self) -> PathBuf {
        self.dir.join("guard.lock")
    }

    /// What the guard did, one JSON record per line ([`Fired`]), appended by the guard and taken
    /// by the agent.
    pub fn fired(&self) -> PathBuf {
        self.dir.join("fired.jsonl")
    }

    /// The guard's own log (its stderr).
    pub fn log(&self) -> PathBuf {
        self.dir.join("guard.log")
    }

    /// The process runtime's instance directories.
    pub fn instances(&self) -> PathBuf {
        self.data_dir.join("instances")
    }
}
