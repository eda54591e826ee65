//! The ground truth of one host, as the invariant checkers see it: which instances exist on the
//! agent's in-memory runtime and in what phase. Time is the simulation's (tokio's paused clock,
//! in ms since the run began; the runtime dates instances from [`crate::clock::BASE_MS`]), never
//! a host's skewed wall clock: processes age in physical time.

use std::sync::{Arc, Mutex};

use shoal::node::runtime::RuntimeEvent;
use shoal_core::instance::{Phase, ReplicaId};
use tokio::sync::broadcast;

/// One alive (or exited) instance as the checkers see it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The runtime's handle.
    pub handle: String,
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

/// An instance's exit, as its runtime announced it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// The runtime's handle.
    pub handle: String,
    /// The replica.
    pub replica: ReplicaId,
    /// Its exit code: 143 (SIGTERM) for a stop, 137 for a kill (a guard's, or a stop past its
    /// grace), the profile's code (1) for a crash.
    pub exit_code: Option<i32>,
    /// When (sim ms).
    pub at_ms: u64,
}

/// The exit code of an instance stopped by its agent (SIGTERM, within the grace).
pub const STOPPED_EXIT_CODE: i32 = 128 + 15;

/// The ground truth of a host: the agent's in-memory runtime, whose times are its origin's
/// reading ([`crate::clock::BASE_MS`]) plus ms since the run's start; [`Ground::seen`] gives ms
/// since the run's start. It also follows the runtime's events, to tell a stop from a crash
/// ([`Ground::exits`]): an exited instance may be removed before the next sample sees it.
#[derive(Clone)]
pub struct Ground {
    rt: shoal::node::runtime::mem::MemRuntime,
    events: Arc<Mutex<broadcast::Receiver<RuntimeEvent>>>,
}

impl Ground {
    /// The ground truth of `rt`.
    pub fn new(rt: shoal::node::runtime::mem::MemRuntime) -> Self {
        use shoal::node::runtime::Runtime;
        let events = Arc::new(Mutex::new(rt.events()));
        Ground { rt, events }
    }

    /// The exits announced since the last call, and whether some were lost (the runtime's
    /// buffer of events overflowed between two calls).
    pub fn exits(&self) -> (Vec<Exit>, bool) {
        let base_ms = self.rt.origin_ms();
        let mut rx = self.events.lock().expect("ground events");
        let (mut out, mut lost) = (Vec::new(), false);
        loop {
            match rx.try_recv() {
                Ok(RuntimeEvent::Exited {
                    handle,
                    replica,
                    exit_code,
                    at_ms,
                }) => out.push(Exit {
                    handle,
                    replica,
                    exit_code,
                    at_ms: at_ms.saturating_sub(base_ms),
                }),
                Ok(_) => {}
                Err(broadcast::error::TryRecvError::Lagged(_)) => lost = true,
                Err(_) => break,
            }
        }
        (out, lost)
    }

    /// Every instance at `now_ms`.
    pub fn seen(&self, _now_ms: u64) -> Vec<Seen> {
        let revisions = self.rt.revisions();
        let base_ms = self.rt.origin_ms();
        list_now(&self.rt)
            .into_iter()
            .map(|i| Seen {
                revision: (revisions.get(&i.handle))
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0),
                handle: i.handle,
                replica: i.replica,
                phase: i.phase,
                ready_ms: i.started_at_ms.saturating_sub(base_ms),
                version: i.spec_version,
            })
            .collect()
    }

    /// The host died: every instance is gone.
    pub fn kill_all(&self) {
        self.rt.kill_all()
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
