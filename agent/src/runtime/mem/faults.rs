//! What tests and the simulator inject into the in-memory runtime: per-workload behaviour
//! ([`MemProfile`]), crashes, engine outages, host death, probe outcomes; and the invariant check.

use tokio::time::Duration;

use super::{MemRuntime, RuntimeEvent};
use crate::core::instance::Phase;
use crate::runtime::ProbeOutcome;

/// How the instances of one workload behave.
#[derive(Clone, Debug, PartialEq)]
pub struct MemProfile {
    /// How long `start` takes before the instance runs (or the start fails).
    pub start_latency: Duration,
    /// Every start fails with this reason (an image that does not exist, say).
    pub fail_starts: Option<String>,
    /// Each start fails with this probability, drawn from the runtime's rng.
    pub start_fail_probability: f64,
    /// A running instance exits by itself this long after it started (a crash loop).
    pub exit_after: Option<Duration>,
    /// The exit code of those exits.
    pub exit_code: i32,
    /// The instance ignores SIGTERM: a stop takes the whole grace and ends with SIGKILL (137).
    pub ignores_sigterm: bool,
    /// Every probe fails with this reason.
    pub probe_failure: Option<String>,
}

impl Default for MemProfile {
    /// Starts at once, never fails, runs until stopped, stops at once, probes pass.
    fn default() -> Self {
        MemProfile {
            start_latency: Duration::ZERO,
            fail_starts: None,
            start_fail_probability: 0.0,
            exit_after: None,
            exit_code: 1,
            ignores_sigterm: false,
            probe_failure: None,
        }
    }
}

impl MemRuntime {
    /// Sets how `workload`'s instances behave from their next start (or stop, or probe) on.
    pub fn set_profile(&self, workload: &str, profile: MemProfile) {
        self.lock().profiles.insert(workload.to_string(), profile);
    }

    /// Which kinds of workloads this runtime accepts (both by default), to mimic a process-only
    /// or docker-only agent.
    pub fn set_supported(&self, processes: bool, containers: bool) {
        let mut state = self.lock();
        state.runs_processes = processes;
        state.runs_containers = containers;
    }

    /// Fixes the outcome of every probe of one instance (`None` restores the profile's).
    pub fn set_probe_outcome(&self, handle: &str, outcome: Option<ProbeOutcome>) {
        let mut state = self.lock();
        match outcome {
            Some(outcome) => state.probe_overrides.insert(handle.to_string(), outcome),
            None => state.probe_overrides.remove(handle),
        };
    }

    /// Makes a live instance exit now with `exit_code`; false if it was not alive.
    pub fn crash(&self, handle: &str, exit_code: i32) -> bool {
        self.exit(handle, exit_code)
    }

    /// The host died: every instance disappears without an exit event.
    pub fn kill_all(&self) {
        let mut state = self.lock();
        for (_, inst) in std::mem::take(&mut state.instances) {
            if let Some(timer) = inst.exit_timer {
                timer.abort();
            }
        }
        state.probe_overrides.clear();
    }

    /// Takes the engine away (`Some(reason)`: every call fails with
    /// [`RuntimeError::EngineUnavailable`]) or brings it back (`None`), with the matching event.
    pub fn set_engine_down(&self, reason: Option<&str>) {
        let mut state = self.lock();
        let was_down = std::mem::replace(&mut state.engine_down, reason.map(str::to_string));
        let event = match reason {
            Some(reason) => RuntimeEvent::EngineUnavailable {
                reason: reason.to_string(),
            },
            None if was_down.is_some() => RuntimeEvent::EngineAvailable,
            None => return,
        };
        let _ = self.events.send(event);
    }

    /// How many starts were attempted (including failed ones).
    pub fn starts(&self) -> u64 {
        self.lock().starts
    }

    /// How many reload hooks ran against an instance.
    pub fn reloads(&self, handle: &str) -> u32 {
        self.lock().instances.get(handle).map_or(0, |i| i.reloads)
    }

    /// Asserts what must always hold: unique handles matching their keys, exited instances (and
    /// only those) with an exit time not before their start.
    pub fn check_invariants(&self) {
        let state = self.lock();
        for (handle, inst) in &state.instances {
            let i = &inst.instance;
            assert_eq!(&i.handle, handle, "instance filed under another handle");
            assert_eq!(i.phase == Phase::Exited, i.exited_at_ms.is_some(), "{i:?}");
            assert!(i.exited_at_ms.is_none_or(|t| t >= i.started_at_ms), "{i:?}");
            assert!(
                i.phase != Phase::Pending && i.phase != Phase::Failed,
                "{i:?}"
            );
        }
    }
}
