//! The ground truth of one host, as the invariant checkers see it: which instances exist on the
//! agent's in-memory runtime and in what phase. Time is the simulation's (tokio's paused clock,
//! in ms since the run began; the runtime dates instances from [`crate::clock::BASE_MS`]), never
//! a host's skewed wall clock: processes age in physical time.

use shoal_core::instance::{Phase, ReplicaId};

/// One alive (or exited) instance as the checkers see it.
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
    /// The revision (`SHOAL_SIM_REVISION`) of the spec it was started from; 0 for none.
    pub revision: u64,
}

/// The ground truth of a host: the agent's in-memory runtime, whose times are its origin's
/// reading ([`crate::clock::BASE_MS`]) plus ms since the run's start; [`Ground::seen`] gives ms
/// since the run's start.
#[derive(Clone)]
pub struct Ground(shoal::node::runtime::mem::MemRuntime);

impl Ground {
    /// The ground truth of `rt`.
    pub fn new(rt: shoal::node::runtime::mem::MemRuntime) -> Self {
        Ground(rt)
    }

    /// Every instance at `now_ms`.
    pub fn seen(&self, _now_ms: u64) -> Vec<Seen> {
        let revisions = self.0.revisions();
        let base_ms = self.0.origin_ms();
        list_now(&self.0)
            .into_iter()
            .map(|i| Seen {
                revision: (revisions.get(&i.handle))
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0),
                replica: i.replica,
                phase: i.phase,
                ready_ms: i.started_at_ms.saturating_sub(base_ms),
                version: i.spec_version,
            })
            .collect()
    }

    /// The host died: every instance is gone.
    pub fn kill_all(&self) {
        self.0.kill_all()
    }
}

/// `MemRuntime::list` without awaiting: it never waits (one lock, one copy), so one poll
/// finishes it; anything else would be a change in that runtime, and panics here.
fn list_now(
    rt: &shoal::node::runtime::mem::MemRuntime,
) -> Vec<shoal_core::instance::RuntimeInstance> {
    use shoal::node::runtime::Runtime;
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
