//! The simulated runtime of one host: the ground truth of which instances exist and in what
//! phase, as the invariant checkers see it. Starts take the workload's start time, may fail, and
//! may crash-loop; stops take a grace. Time is the simulation's (tokio's paused clock, in ms since
//! the run began), never a host's skewed wall clock: processes age in physical time.
//!
//! This is the stand-in for `shoal::runtime::mem` until it lands; its surface is the small set of
//! calls a host loop needs (`start`, `stop`, `instances`), so the swap is local.

use std::collections::BTreeMap;

use rand::{RngExt, SeedableRng};
use shoal_core::instance::{Phase, ReplicaId};
use shoal_core::Resources;

use crate::scenario::InstanceProfile;

/// One instance on a host.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// The replica it runs.
    pub replica: ReplicaId,
    /// The spec version it was started from.
    pub spec_version: String,
    /// Its phase as of the last [`HostRuntime::advance`].
    pub phase: Phase,
    /// What it reserves.
    pub request: Resources,
    /// Whether its workload is exclusive.
    pub exclusive: bool,
    /// When it was started (sim ms).
    pub started_ms: u64,
    /// When it is (or was) running and healthy, if the start succeeds.
    pub ready_ms: u64,
    /// When it fails or exits by itself, if it does.
    pub exit_ms: Option<u64>,
    /// When a stop completes, once asked.
    pub stop_done_ms: Option<u64>,
}

impl Instance {
    /// Alive and counted as a copy (starting, running or stopping).
    pub fn alive(&self) -> bool {
        self.phase.may_be_alive()
    }
}

/// What a host loop asks for a start.
#[derive(Clone, Debug)]
pub struct StartRequest {
    /// The replica.
    pub replica: ReplicaId,
    /// The spec version.
    pub spec_version: String,
    /// Its request.
    pub request: Resources,
    /// Exclusive workload.
    pub exclusive: bool,
}

/// The instances of one host.
#[derive(Debug)]
pub struct HostRuntime {
    instances: BTreeMap<ReplicaId, Instance>,
    rng: rand::rngs::ChaCha8Rng,
    stop_ms: u64,
    /// Starts so far (for the report).
    pub starts: u64,
}

impl HostRuntime {
    /// An empty host; `seed` decides its start failures.
    pub fn new(seed: u64, stop_ms: u64) -> Self {
        HostRuntime {
            instances: BTreeMap::new(),
            rng: rand::rngs::ChaCha8Rng::seed_from_u64(seed),
            stop_ms,
            starts: 0,
        }
    }

    /// Moves every instance to its phase at `now_ms`; removes completed stops.
    pub fn advance(&mut self, now_ms: u64) {
        self.instances
            .retain(|_, i| i.stop_done_ms.is_none_or(|t| t > now_ms));
        for i in self.instances.values_mut() {
            i.phase = if i.stop_done_ms.is_some() {
                Phase::Stopping
            } else if i.exit_ms.is_some_and(|t| t <= now_ms) {
                if i.exit_ms == Some(i.ready_ms) {
                    Phase::Failed
                } else {
                    Phase::Exited
                }
            } else if i.ready_ms <= now_ms {
                Phase::Running
            } else {
                Phase::Starting
            };
        }
    }

    /// Starts (or restarts) a replica under `profile`. An alive copy here is left alone.
    pub fn start(&mut self, req: StartRequest, profile: &InstanceProfile, now_ms: u64) {
        if self
            .instances
            .get(&req.replica)
            .is_some_and(Instance::alive)
        {
            return;
        }
        self.starts += 1;
        let ready_ms = now_ms + profile.start_ms;
        let fails = profile.start_fail > 0.0 && self.rng.random::<f64>() < profile.start_fail;
        let exit_ms = if fails {
            Some(ready_ms)
        } else {
            profile.crash_after_ms.map(|d| ready_ms + d.max(1))
        };
        let inst = Instance {
            replica: req.replica.clone(),
            spec_version: req.spec_version,
            phase: Phase::Starting,
            request: req.request,
            exclusive: req.exclusive,
            started_ms: now_ms,
            ready_ms,
            exit_ms,
            stop_done_ms: None,
        };
        self.instances.insert(req.replica, inst);
    }

    /// Asks a replica's instance to stop; it is gone after the stop grace.
    pub fn stop(&mut self, replica: &ReplicaId, now_ms: u64) {
        if let Some(i) = self.instances.get_mut(replica) {
            if i.alive() && i.stop_done_ms.is_none() {
                i.stop_done_ms = Some(now_ms + self.stop_ms);
                i.phase = Phase::Stopping;
            } else if !i.alive() {
                self.instances.remove(replica);
            }
        }
    }

    /// The host died: every instance is gone at once.
    pub fn kill_all(&mut self) {
        self.instances.clear();
    }

    /// Every instance, by replica.
    pub fn instances(&self) -> &BTreeMap<ReplicaId, Instance> {
        &self.instances
    }

    /// Sum of the requests of alive instances.
    pub fn reserved(&self) -> Resources {
        let mut total = Resources::new(0, 0);
        for i in self.instances.values().filter(|i| i.alive()) {
            total.cpu_millis += i.request.cpu_millis;
            total.memory_bytes += i.request.memory_bytes;
        }
        total
    }
}

/// One alive (or exited) instance as the checkers see it, from either runtime.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The replica.
    pub replica: ReplicaId,
    /// Its phase.
    pub phase: Phase,
    /// When it is (or was) running (sim ms).
    pub ready_ms: u64,
    /// Its spec version.
    pub version: String,
}

/// The ground truth of a host: the model runtime, or the agent's real in-memory runtime.
#[derive(Clone)]
pub enum Ground {
    /// The simulator's model runtime (with [`crate::host::ModelHost`]).
    Model(std::sync::Arc<std::sync::Mutex<HostRuntime>>),
    /// `shoal::runtime::mem::MemRuntime` (with [`crate::host::CoreHost`]); its times are ms since
    /// the run's start.
    Mem(shoal::runtime::mem::MemRuntime),
}

impl Ground {
    /// Every instance at `now_ms`.
    pub fn seen(&self, now_ms: u64) -> Vec<Seen> {
        match self {
            Ground::Model(rt) => {
                let mut rt = rt.lock().expect("runtime");
                rt.advance(now_ms);
                rt.instances()
                    .values()
                    .map(|i| Seen {
                        replica: i.replica.clone(),
                        phase: i.phase,
                        ready_ms: i.ready_ms,
                        version: i.spec_version.clone(),
                    })
                    .collect()
            }
            Ground::Mem(rt) => list_now(rt)
                .into_iter()
                .map(|i| Seen {
                    replica: i.replica,
                    phase: i.phase,
                    ready_ms: i.started_at_ms,
                    version: i.spec_version,
                })
                .collect(),
        }
    }

    /// The host died: every instance is gone.
    pub fn kill_all(&self) {
        match self {
            Ground::Model(rt) => rt.lock().expect("runtime").kill_all(),
            Ground::Mem(rt) => rt.kill_all(),
        }
    }
}

/// `MemRuntime::list` without awaiting: it never waits (one lock, one copy), so one poll
/// finishes it; anything else would be a change in that runtime, and panics here.
fn list_now(rt: &shoal::runtime::mem::MemRuntime) -> Vec<shoal_core::instance::RuntimeInstance> {
    use shoal::runtime::Runtime;
    use std::future::Future;
    let mut fut = std::pin::pin!(rt.list());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(list) => list.unwrap_or_default(),
        std::task::Poll::Pending => {
            panic!("MemRuntime::list waited; the simulator reads it synchronously")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(w: &str) -> StartRequest {
        StartRequest {
            replica: ReplicaId::new(w, 0),
            spec_version: "v1".into(),
            request: Resources::new(100, 1 << 20),
            exclusive: false,
        }
    }

    #[test]
    fn starts_runs_crash_loops_and_stops() {
        let mut rt = HostRuntime::new(1, 200);
        let profile = InstanceProfile {
            start_ms: 500,
            start_fail: 0.0,
            crash_after_ms: Some(1000),
        };
        rt.start(req("a"), &profile, 0);
        rt.advance(499);
        assert_eq!(
            rt.instances()[&ReplicaId::new("a", 0)].phase,
            Phase::Starting
        );
        rt.advance(500);
        assert_eq!(
            rt.instances()[&ReplicaId::new("a", 0)].phase,
            Phase::Running
        );
        rt.advance(1500);
        assert_eq!(rt.instances()[&ReplicaId::new("a", 0)].phase, Phase::Exited);
        rt.start(req("a"), &InstanceProfile::default(), 1600);
        rt.stop(&ReplicaId::new("a", 0), 1700);
        rt.advance(1800);
        assert_eq!(rt.reserved(), Resources::new(100, 1 << 20));
        rt.advance(1900);
        assert!(rt.instances().is_empty());
    }
}
