//! The guard's in-memory model, for the simulator and in-process agents: the same lease, the same
//! timings and the same sweeps as `shoal guard` ([`super::run_guard`]), over a [`MemRuntime`]
//! instead of process groups and containers.
//!
//! It runs as a task of its own on tokio's clock, apart from the host loop, so an agent whose
//! loop is frozen (the simulator's `pause`) stops renewing while its guard keeps polling: when the
//! lease ends, the guard kills the exclusive instances in the runtime, as the real guard does to a
//! SIGSTOP'd agent's processes. The host dying takes the guard with it ([`MemGuard::stop`]); the
//! real guard would outlive the agent but not the machine.
//!
//! Not modelled: the lease file (so no tampering), adoption by a restarted agent (a simulated
//! crash is the host's death: the next incarnation starts a guard of its own).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use shoal_core::instance::ReplicaId;
use tokio::time::Instant;

use super::fired::{Fired, Killed};
use super::run::{RESWEEP_EVERY_MS, RESWEEP_FOR_MS};
use super::{GuardLease, POLL_MS};
use crate::node::runtime::mem::MemRuntime;
use crate::node::runtime::Runtime;
use crate::state::mesh::node::WallClock;

/// Records kept for the agent and for observers at most (older ones are dropped first).
const RECORDS_MAX: usize = 256;
/// The exit code of an instance the guard killed (SIGKILL).
const KILLED_EXIT_CODE: i32 = 128 + 9;

/// One instance the in-memory guard killed, for observers (the simulator's trace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemGuardKill {
    /// When, in ms since the runtime's origin (the simulation's start in the simulator).
    pub at_ms: u64,
    /// The replica.
    pub replica: ReplicaId,
    /// The runtime's handle.
    pub handle: String,
    /// Why the guard acted.
    pub reason: String,
}

/// The in-memory guard of one host. Clones share it: give one to the host
/// ([`crate::node::host::Host::attach_guard`]) and keep one to watch it or stop it with the host.
#[derive(Clone)]
pub struct MemGuard {
    shared: Arc<Mutex<Shared>>,
}

struct Shared {
    runtime: MemRuntime,
    clock: WallClock,
    origin: Instant,
    lease_ms: u64,
    exclusive: BTreeSet<String>,
    handles: BTreeSet<String>,
    /// When the lease ends, in ms since `origin`.
    expires_ms: u64,
    /// A lease with a future end was accepted and has not fired since.
    armed: bool,
    fired_at_ms: Option<u64>,
    swept_at_ms: u64,
    /// The agent released the guard (it left) or the host died: the guard is gone.
    gone: bool,
    /// Sweep once more and exit (a release).
    release_pending: bool,
    fired: Vec<Fired>,
    kills: Vec<MemGuardKill>,
}

impl MemGuard {
    /// Starts the guard of `runtime`'s host with leases of `lease_ms` (the reconciler's
    /// `self_fence_ms`, as [`super::GuardConfig::new`] gives the real guard). It guards nothing
    /// until the first renewal. `clock` dates its records.
    pub fn start(runtime: MemRuntime, lease_ms: u64, clock: WallClock) -> MemGuard {
        let shared = Arc::new(Mutex::new(Shared {
            origin: runtime.origin(),
            runtime,
            clock,
            lease_ms,
            exclusive: BTreeSet::new(),
            handles: BTreeSet::new(),
            expires_ms: 0,
            armed: false,
            fired_at_ms: None,
            swept_at_ms: 0,
            gone: false,
            release_pending: false,
            fired: Vec::new(),
            kills: Vec::new(),
        }));
        tokio::spawn(poll(Arc::downgrade(&shared)));
        MemGuard { shared }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().expect("mem guard lock")
    }

    /// The host died, and its guard with it: nothing more is killed.
    pub fn stop(&self) {
        self.lock().gone = true;
    }

    /// What the guard killed since the last call, for observers.
    pub fn take_kills(&self) -> Vec<MemGuardKill> {
        std::mem::take(&mut self.lock().kills)
    }

    /// Whether a lease is in force and has not fired.
    pub fn armed(&self) -> bool {
        self.lock().armed
    }
}

impl GuardLease for MemGuard {
    fn unavailable(&self) -> Option<String> {
        self.lock()
            .gone
            .then(|| "the guard is gone (released by the agent, or its host died)".to_string())
    }

    fn lease_ms(&self) -> u64 {
        self.lock().lease_ms
    }

    fn renew(&mut self, exclusive: &BTreeSet<String>, handles: BTreeSet<String>, grant_ms: u64) {
        let mut s = self.lock();
        if s.gone || s.release_pending {
            return;
        }
        let now = s.now_ms();
        s.exclusive = exclusive.clone();
        s.handles = handles;
        s.expires_ms = now + grant_ms.min(s.lease_ms);
        // As the real guard accepts a lease: one that ends in the future arms it again.
        if s.expires_ms > now {
            s.armed = true;
            s.fired_at_ms = None;
        }
    }

    fn take_fired(&mut self) -> Vec<Fired> {
        std::mem::take(&mut self.lock().fired)
    }

    fn release(&mut self) {
        let mut s = self.lock();
        if !s.gone {
            s.release_pending = true;
        }
    }

    fn hold(&mut self) {
        let mut s = self.lock();
        if s.gone || s.release_pending || !s.armed {
            return;
        }
        s.expires_ms = s.now_ms() + s.lease_ms;
    }
}

impl Shared {
    fn now_ms(&self) -> u64 {
        Instant::now()
            .saturating_duration_since(self.origin)
            .as_millis() as u64
    }

    /// One poll, as `shoal guard` does every [`POLL_MS`]: the sweep to make now, if any, with
    /// its reason and whether to report a sweep that killed nothing.
    fn step(&mut self, now: u64) -> Option<String> {
        if self.gone {
            return None;
        }
        if self.release_pending {
            self.gone = true;
            return Some("the agent left and released its guard".into());
        }
        if self.armed && now >= self.expires_ms {
            self.armed = false;
            self.fired_at_ms = Some(now);
            let late = now - self.expires_ms;
            return Some(format!(
                "the agent did not renew its lease (ended {late} ms ago): it is stopped, hung \
                 or dead"
            ));
        }
        let resweep = self.fired_at_ms.is_some_and(|at| now < at + RESWEEP_FOR_MS)
            && now >= self.swept_at_ms + RESWEEP_EVERY_MS;
        resweep.then(|| "an instance appeared after the guard acted".into())
    }

    /// Records a sweep that killed `killed` (nothing recorded when it killed nothing).
    fn record(&mut self, now: u64, reason: String, killed: Vec<Killed>) {
        self.swept_at_ms = now;
        if killed.is_empty() {
            return;
        }
        for k in &killed {
            tracing::warn!(workload = %k.workload, replica = k.replica, handle = %k.handle,
                reason = %reason, "in-memory guard killed");
            push_bounded(
                &mut self.kills,
                MemGuardKill {
                    at_ms: now,
                    replica: ReplicaId::new(&k.workload, k.replica),
                    handle: k.handle.clone(),
                    reason: reason.clone(),
                },
            );
        }
        let record = Fired {
            at_ms: (self.clock)(),
            reason,
            killed,
            failed: Vec::new(),
        };
        push_bounded(&mut self.fired, record);
    }
}

fn push_bounded<T>(list: &mut Vec<T>, item: T) {
    if list.len() >= RECORDS_MAX {
        list.remove(0);
    }
    list.push(item);
}

/// The guard's life: polls every [`POLL_MS`] until the guard is gone or nobody holds it.
async fn poll(shared: Weak<Mutex<Shared>>) {
    loop {
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let (runtime, now, reason, exclusive, handles) = {
            let mut s = shared.lock().expect("mem guard lock");
            if s.gone {
                return;
            }
            let now = s.now_ms();
            let Some(reason) = s.step(now) else {
                continue;
            };
            let (exclusive, handles) = (s.exclusive.clone(), s.handles.clone());
            (s.runtime.clone(), now, reason, exclusive, handles)
        };
        let killed = sweep(&runtime, &exclusive, &handles).await;
        shared
            .lock()
            .expect("mem guard lock")
            .record(now, reason, killed);
    }
}

/// Kills every alive instance of the `exclusive` workloads, and the `handles` named, as the real
/// guard kills the process groups and containers it finds.
async fn sweep(
    runtime: &MemRuntime,
    exclusive: &BTreeSet<String>,
    handles: &BTreeSet<String>,
) -> Vec<Killed> {
    let Ok(instances) = runtime.list().await else {
        return Vec::new();
    };
    let mut killed = Vec::new();
    for i in instances.into_iter().filter(|i| i.phase.may_be_alive()) {
        let guarded = exclusive.contains(&i.replica.workload) || handles.contains(&i.handle);
        if guarded && runtime.crash(&i.handle, KILLED_EXIT_CODE) {
            killed.push(Killed {
                workload: i.replica.workload.clone(),
                replica: i.replica.replica,
                handle: i.handle.clone(),
                what: format!("in-memory instance {}", i.handle),
            });
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::runtime::StartRequest;

    fn wall() -> WallClock {
        Arc::new(|| 1_700_000_000_000)
    }

    async fn start(runtime: &MemRuntime, workload: &str) -> String {
        let toml = format!(
            "name = \"{workload}\"\n[process]\ncommand = [\"x\"]\n[resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
        );
        let spec = shoal_core::spec::WorkloadSpec::from_toml_str(&toml, "test.toml").expect("spec");
        let request = StartRequest {
            node: "n1".into(),
            replica: ReplicaId::new(workload, 0),
            spec_version: "v1".into(),
            spec: Arc::new(spec),
            fence_token: None,
            addr: std::net::IpAddr::from([127, 0, 0, 1]),
            volume_roots: Arc::from(Vec::new()),
            ports: Default::default(),
        };
        runtime.start(request).await.expect("start").handle
    }

    fn alive(runtime: &MemRuntime, workload: &str) -> bool {
        let list = futures_now(runtime);
        list.iter()
            .any(|i| i.replica.workload == workload && i.phase.may_be_alive())
    }

    fn futures_now(runtime: &MemRuntime) -> Vec<shoal_core::instance::RuntimeInstance> {
        let mut fut = std::pin::pin!(runtime.list());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::future::Future::poll(fut.as_mut(), &mut cx) {
            std::task::Poll::Ready(list) => list.expect("list"),
            std::task::Poll::Pending => panic!("MemRuntime::list waited"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_unrenewed_lease_kills_the_exclusive_instances_and_only_them() {
        let runtime = MemRuntime::new("n1", 1);
        let db = start(&runtime, "db").await;
        start(&runtime, "web").await;
        let mut guard = MemGuard::start(runtime.clone(), 3_000, wall());
        let exclusive: BTreeSet<String> = ["db".to_string()].into();
        // Renewed every 500 ms for 5 s: nothing happens.
        for _ in 0..10 {
            guard.renew(&exclusive, [db.clone()].into(), 3_000);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(alive(&runtime, "db") && guard.armed());
        // The renewals stop (the agent froze): killed within the lease plus one poll.
        tokio::time::sleep(Duration::from_millis(2_400)).await;
        assert!(alive(&runtime, "db"), "killed before the lease ended");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!alive(&runtime, "db"), "not killed once the lease ended");
        assert!(alive(&runtime, "web"), "a normal instance was killed");
        let kills = guard.take_kills();
        assert_eq!(kills.len(), 1);
        assert_eq!(kills[0].handle, db);
        let fired = guard.take_fired();
        assert_eq!(fired.len(), 1);
        assert!(fired[0].reason.contains("did not renew"), "{fired:?}");
        // A start that lands after the guard acted is swept within a second.
        start(&runtime, "db").await;
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert!(!alive(&runtime, "db"), "a late copy was not swept");
        assert_eq!(guard.take_kills().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_grant_ends_sooner_and_a_stopped_guard_kills_nothing() {
        let runtime = MemRuntime::new("n1", 1);
        let db = start(&runtime, "db").await;
        let mut guard = MemGuard::start(runtime.clone(), 3_000, wall());
        let exclusive: BTreeSet<String> = ["db".to_string()].into();
        guard.renew(&exclusive, [db.clone()].into(), 1_000);
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        assert!(!alive(&runtime, "db"), "the grant's cap was not kept");

        let runtime = MemRuntime::new("n1", 2);
        start(&runtime, "db").await;
        let mut guard = MemGuard::start(runtime.clone(), 3_000, wall());
        guard.renew(&exclusive, BTreeSet::new(), 3_000);
        guard.stop();
        assert!(guard.unavailable().is_some());
        tokio::time::sleep(Duration::from_millis(5_000)).await;
        assert!(alive(&runtime, "db"), "a dead host's guard acted");
    }
}
