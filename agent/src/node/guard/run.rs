//! The guard process (`shoal guard`): takes the data directory's lock, then polls the lease every
//! [`POLL_MS`] and stops the exclusive instances when it ends without renewal or cannot be
//! trusted. Synchronous on purpose: one thread that sleeps, so it costs next to nothing while
//! idle and does not depend on an async runtime that could stall with it (docker calls get a
//! one-thread runtime of their own).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use super::fired::{self, Fired};
use super::lease::{boot_now_ms, GuardInfo, Lease, LEASE_VERSION};
use super::sweep::{Sweeper, Target};
use super::{GuardPaths, GuardRuntime, POLL_MS};
use crate::node::runtime::process::state;

/// After the lease ended, the guard sweeps again this often, for this long: a container the
/// engine was still creating for a frozen agent shows up late.
pub(super) const RESWEEP_EVERY_MS: u64 = 1_000;
pub(super) const RESWEEP_FOR_MS: u64 = 60_000;
/// A lease may end at most this much later than the guard's own maximum allows (the agent
/// computes the end a moment before the guard reads it).
const LEASE_SLACK_MS: u64 = 1_000;

/// What `shoal guard` was started with.
#[derive(Clone, Debug)]
pub struct GuardOptions {
    /// The agent's data directory (the guard's files are under `guard/`).
    pub data_dir: PathBuf,
    /// The node the agent serves.
    pub node: String,
    /// Whose instances it stops.
    pub runtime: GuardRuntime,
    /// The longest lease it accepts, in milliseconds: a lease ending later counts as tampered.
    pub lease_max_ms: u64,
}

/// Runs the guard until the agent releases it or its directory disappears. Fails at once, with
/// the reason, when another guard holds the directory or no valid lease is there to start from.
pub fn run_guard(opts: GuardOptions) -> anyhow::Result<()> {
    // Its own session and process group: a signal to the agent's group or terminal (Ctrl-C,
    // SIGSTOP of the group, a hangup) does not reach the guard. Fails only if already a leader.
    let _ = nix::unistd::setsid();
    let paths = GuardPaths::new(&opts.data_dir);
    let _lock = take_lock(&paths)?;
    let lease = Lease::read(&paths.lease(), &opts.node, opts.runtime)
        .context("the agent writes a valid lease before it starts the guard")?;
    let sweeper = Sweeper::new(paths.clone(), &opts.node, opts.runtime)?;
    let mut guard = Guard::new(opts.clone(), paths.clone(), sweeper, lease);
    let pid = std::process::id() as i32;
    let info = GuardInfo {
        version: LEASE_VERSION,
        pid,
        start_ticks: state::proc_stat(pid).map_or(0, |s| s.start_ticks),
        node: opts.node.clone(),
        runtime: opts.runtime.as_str().to_string(),
        data_dir: opts.data_dir.clone(),
        lease_max_ms: opts.lease_max_ms,
    };
    info.write(&paths.info())
        .with_context(|| format!("writing {}", paths.info().display()))?;
    tracing::info!(pid, node = %opts.node, data_dir = %opts.data_dir.display(), "guard ready");
    loop {
        std::thread::sleep(Duration::from_millis(POLL_MS));
        if let Some(why) = guard.step(boot_now_ms()) {
            tracing::info!(%why, "guard exiting");
            if GuardInfo::read(&paths.info()).is_some_and(|i| i.pid == pid) {
                let _ = std::fs::remove_file(paths.info());
            }
            return Ok(());
        }
    }
}

/// Takes `guard.lock` for the life of the process (released by the kernel when it exits).
fn take_lock(paths: &GuardPaths) -> anyhow::Result<File> {
    let path = paths.lock();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another guard holds {}: one guard per data directory",
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// What identifies one version of the lease file on disk; a new one is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

/// The guard's state between polls.
struct Guard {
    opts: GuardOptions,
    paths: GuardPaths,
    sweeper: Sweeper,
    /// The last lease that passed every check.
    lease: Lease,
    /// Its handles, resolved when they first appeared.
    targets: BTreeMap<String, Target>,
    /// The lease file version read last (`None`: it was missing).
    stamp: Option<Stamp>,
    /// Whether the current lease has not been acted on yet.
    armed: bool,
    /// When the guard last acted on an ended or refused lease, and last swept.
    fired_at_ms: Option<u64>,
    swept_at_ms: u64,
}

impl Guard {
    fn new(opts: GuardOptions, paths: GuardPaths, sweeper: Sweeper, lease: Lease) -> Guard {
        let stamp = stamp_of(&paths);
        let mut guard = Guard {
            opts,
            paths,
            sweeper,
            lease: lease.clone(),
            targets: BTreeMap::new(),
            stamp,
            armed: false,
            fired_at_ms: None,
            swept_at_ms: 0,
        };
        guard.accept(lease, boot_now_ms());
        guard
    }

    /// One poll at `now`; `Some(reason)` when the guard should exit.
    fn step(&mut self, now: u64) -> Option<String> {
        if std::fs::symlink_metadata(&self.paths.dir).is_err() {
            let why = format!("{} was removed", self.paths.dir.display());
            self.fire(&why, now, Report::IfActed);
            return Some(why);
        }
        let stamp = stamp_of(&self.paths);
        if stamp != self.stamp {
            self.stamp = stamp;
            match Lease::read(&self.paths.lease(), &self.opts.node, self.opts.runtime) {
                Ok(lease) if lease.release => {
                    self.lease = lease;
                    self.fire(
                        "the agent left and released its guard",
                        now,
                        Report::IfActed,
                    );
                    return Some("released by the agent".into());
                }
                Ok(lease)
                    if lease.expires_boot_ms > now + self.opts.lease_max_ms + LEASE_SLACK_MS =>
                {
                    let why = format!(
                        "the lease file was tampered with: it ends {} ms from now, more than the \
                         {} ms a lease may last",
                        lease.expires_boot_ms - now,
                        self.opts.lease_max_ms
                    );
                    self.fire(&why, now, Report::Always);
                }
                Ok(lease) => self.accept(lease, now),
                Err(e) => {
                    let why = format!("the lease file was tampered with or damaged: {e}");
                    self.fire(&why, now, Report::Always);
                }
            }
        }
        if self.armed && now >= self.lease.expires_boot_ms {
            let late = now - self.lease.expires_boot_ms;
            let why = format!(
                "the agent did not renew its lease (ended {late} ms ago): it is stopped, hung \
                 or dead"
            );
            self.fire(&why, now, Report::IfActed);
        }
        let resweep = self.fired_at_ms.is_some_and(|at| now < at + RESWEEP_FOR_MS)
            && now >= self.swept_at_ms + RESWEEP_EVERY_MS;
        if resweep {
            let why = "an instance appeared after the guard acted";
            self.sweep(why, now, Report::IfActed);
        }
        None
    }

    /// Takes a valid lease: resolves new handles and re-arms if it ends in the future.
    fn accept(&mut self, lease: Lease, now: u64) {
        self.targets.retain(|h, _| lease.handles.contains(h));
        for handle in &lease.handles {
            if !self.targets.contains_key(handle) {
                if let Some(t) = self.sweeper.resolve(handle) {
                    self.targets.insert(handle.clone(), t);
                }
            }
        }
        if lease.expires_boot_ms > now {
            self.armed = true;
            self.fired_at_ms = None;
        }
        self.lease = lease;
    }

    /// Stops every guarded instance now and records it; the lease stays unarmed until renewed.
    fn fire(&mut self, why: &str, now: u64, report: Report) {
        tracing::warn!(reason = %why, "stopping the exclusive instances");
        self.armed = false;
        self.fired_at_ms = Some(now);
        self.sweep(why, now, report);
    }

    /// Sweeps, and records the result as `report` says.
    fn sweep(&mut self, why: &str, now: u64, report: Report) {
        self.swept_at_ms = now;
        let swept = self.sweeper.sweep(&self.targets, &self.lease.exclusive);
        for k in &swept.killed {
            tracing::warn!(workload = %k.workload, replica = k.replica, handle = %k.handle,
                what = %k.what, "killed");
        }
        for f in &swept.failed {
            tracing::error!(error = %f, "could not stop an instance");
        }
        let silent = swept.killed.is_empty() && swept.failed.is_empty();
        if silent && report == Report::IfActed {
            return;
        }
        let record = Fired {
            at_ms: crate::node::runtime::wall_clock_ms(),
            reason: why.to_string(),
            killed: swept.killed,
            failed: swept.failed,
        };
        if let Err(e) = fired::append(&self.paths.fired(), &record) {
            tracing::error!(error = %e, "could not record what the guard did");
        }
    }
}

/// When a sweep is recorded for the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Report {
    /// Always: the agent must learn that its lease file was tampered with.
    Always,
    /// Only when something was stopped or could not be: an ended lease with nothing to stop is
    /// routine (a node without a majority whose agent fenced its instances itself).
    IfActed,
}

fn stamp_of(paths: &GuardPaths) -> Option<Stamp> {
    let meta = std::fs::symlink_metadata(paths.lease()).ok()?;
    Some(Stamp {
        ino: meta.ino(),
        len: meta.len(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    })
}
