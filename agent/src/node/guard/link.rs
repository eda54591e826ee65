//! The agent's side of the guard: starts it or adopts the one already running, renews the lease,
//! notices when the guard is gone and starts it again, and takes what it did.

use std::collections::BTreeSet;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::time::Duration;

use shoal_core::reconcile::ReconcileConfig;

use super::fired::{self, Fired};
use super::lease::{boot_now_ms, Lease};
use super::{GuardLease, GuardPaths, GuardRuntime};

mod supervise;

use supervise::State;

/// A lease that moved forward less than this is not written again (rounds come every few
/// hundred milliseconds; the lease lasts seconds).
const RENEW_STEP_MS: u64 = 1_000;
/// With nothing guarded (no exclusive workload, no instance), a lease is written again only once
/// this share of it has passed: it still never ends while the agent runs, and an idle agent
/// writes its lease file every few seconds instead of every second (the write, a create and a
/// rename, was 2.6 % of an idle agent's CPU). A change of what is guarded is written at once.
const IDLE_RENEW_SHARE: u64 = 2;
/// `fired.jsonl` is looked for at most this often.
const FIRED_EVERY_MS: u64 = 1_000;

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
        let step = if lease.exclusive.is_empty() && lease.handles.is_empty() {
            (self.lease_ms / IDLE_RENEW_SHARE).max(RENEW_STEP_MS)
        } else {
            RENEW_STEP_MS
        };
        let due = match &self.written {
            None => true,
            Some(w) => {
                w.exclusive != lease.exclusive
                    || w.handles != lease.handles
                    || lease.expires_boot_ms >= w.expires_boot_ms + step
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
}

impl GuardLease for GuardLink {
    fn unavailable(&self) -> Option<String> {
        GuardLink::unavailable(self)
    }

    fn lease_ms(&self) -> u64 {
        GuardLink::lease_ms(self)
    }

    fn renew(&mut self, exclusive: &BTreeSet<String>, handles: BTreeSet<String>, grant_ms: u64) {
        GuardLink::renew(self, exclusive, handles, grant_ms)
    }

    fn take_fired(&mut self) -> Vec<Fired> {
        GuardLink::take_fired(self)
    }

    fn release(&mut self) {
        GuardLink::release(self)
    }

    fn hold(&mut self) {
        GuardLink::hold(self)
    }
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
