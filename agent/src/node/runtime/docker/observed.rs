//! What the runtime already knows of this node's containers, so that [`Runtime::list`] asks the
//! engine only about what changed.
//!
//! Inspecting a container that has just died waits until the engine has finished its cleanup
//! (network, mounts), which it does holding the container's lock: 80 to 110 ms measured here
//! (docs/measurements.md), right on the path from a crash to the replacement's start. So `list`
//! takes one listing of the containers, reuses the last inspection of each one whose state did not
//! change, and completes one that died with what the event stream said of it (`die`: exit code and
//! time; `oom` before it), even while the listing, which the engine also updates only after the
//! cleanup, still shows it running. Only containers it has not seen yet, or whose change it did not hear
//! of, are inspected. Any doubt (an engine outage, a container started again) drops what was
//! known, and the next `list` inspects afresh.
//!
//! [`Runtime::list`]: crate::node::runtime::Runtime::list

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use bollard::models::{ContainerSummary, ContainerSummaryStateEnum};

use crate::core::instance::{Phase, RuntimeInstance};
use crate::node::runtime::RuntimeEvent;

/// The error an out-of-memory kill leaves on the instance.
pub(crate) const OOM_ERROR: &str = "killed by the kernel: out of memory (memory limit reached)";

/// The runtime's memory of its containers, shared with the event task.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The last observation of each container, by id.
    known: HashMap<String, RuntimeInstance>,
    /// Exits heard on the event stream and not yet folded into `known`: (exit code, ms).
    exits: HashMap<String, (Option<i32>, u64)>,
    /// Containers the engine reported out of memory.
    oom: BTreeSet<String>,
}

impl Observed {
    /// Takes in an event before it is published, so that a `list` it triggers finds it here.
    pub fn hear(&self, event: &RuntimeEvent) {
        let mut state = self.state.lock().expect("observed lock");
        match event {
            RuntimeEvent::Exited {
                handle,
                exit_code,
                at_ms,
                ..
            } => {
                state.exits.insert(handle.clone(), (*exit_code, *at_ms));
            }
            // Started again behind our back (we started it, it is known running: nothing new).
            RuntimeEvent::Started { handle, .. } => {
                let running = state
                    .known
                    .get(handle)
                    .is_some_and(|i| i.phase == Phase::Running);
                if !running || state.exits.contains_key(handle) {
                    state.forget(handle);
                }
            }
            RuntimeEvent::EngineUnavailable { .. } | RuntimeEvent::EngineAvailable => {
                *state = State::default();
            }
            RuntimeEvent::Health { .. } => {}
        }
    }

    /// The engine killed this container for want of memory (its `die` follows).
    pub fn hear_oom(&self, handle: &str) {
        let mut state = self.state.lock().expect("observed lock");
        state.oom.insert(handle.to_string());
    }

    /// The container as known without asking the engine, if its listing shows no change that
    /// was not heard of.
    pub fn lookup(&self, summary: &ContainerSummary) -> Option<RuntimeInstance> {
        let id = summary.id.as_deref()?;
        let phase = match summary.state? {
            ContainerSummaryStateEnum::RUNNING
            | ContainerSummaryStateEnum::PAUSED
            | ContainerSummaryStateEnum::RESTARTING => Phase::Running,
            _ => Phase::Exited,
        };
        let mut state = self.state.lock().expect("observed lock");
        let known = state.known.get(id)?;
        // A death heard on the stream is news the listing may not have yet: the engine updates
        // the view it lists from only after its cleanup.
        let died = known.phase == Phase::Running && state.exits.contains_key(id);
        if !died {
            return (known.phase == phase).then(|| known.clone());
        }
        let (exit_code, at_ms) = state.exits.remove(id).expect("just found");
        let oom = state.oom.remove(id);
        let known = state.known.get_mut(id).expect("just found");
        known.phase = Phase::Exited;
        known.exit_code = exit_code;
        known.exited_at_ms = Some(at_ms.max(known.started_at_ms));
        if oom {
            known.error = Some(OOM_ERROR.to_string());
        }
        Some(known.clone())
    }

    /// Keeps what an inspection (or a start) found.
    pub fn remember(&self, instance: &RuntimeInstance) {
        let mut state = self.state.lock().expect("observed lock");
        state.exits.remove(&instance.handle);
        state.oom.remove(&instance.handle);
        state
            .known
            .insert(instance.handle.clone(), instance.clone());
    }

    /// Forgets every container not in `listed` (removed), bounding the memory by the listing.
    pub fn retain(&self, listed: &BTreeSet<String>) {
        let mut state = self.state.lock().expect("observed lock");
        state.known.retain(|id, _| listed.contains(id));
        state.exits.retain(|id, _| listed.contains(id));
        state.oom.retain(|id| listed.contains(id));
    }
}

impl State {
    fn forget(&mut self, handle: &str) {
        self.known.remove(handle);
        self.exits.remove(handle);
        self.oom.remove(handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::instance::ReplicaId;

    fn running(id: &str) -> RuntimeInstance {
        RuntimeInstance {
            handle: id.into(),
            replica: ReplicaId::new("web", 0),
            spec_version: "v1".into(),
            phase: Phase::Running,
            started_at_ms: 1_000,
            exited_at_ms: None,
            exit_code: None,
            error: None,
            fence_token: None,
            ports: Default::default(),
        }
    }

    fn summary(id: &str, state: ContainerSummaryStateEnum) -> ContainerSummary {
        ContainerSummary {
            id: Some(id.into()),
            state: Some(state),
            ..ContainerSummary::default()
        }
    }

    fn exited(id: &str, code: i32, at_ms: u64) -> RuntimeEvent {
        RuntimeEvent::Exited {
            handle: id.into(),
            replica: ReplicaId::new("web", 0),
            exit_code: Some(code),
            at_ms,
        }
    }

    #[test]
    fn unchanged_is_reused_and_a_heard_death_needs_no_inspection() {
        let o = Observed::default();
        let run = summary("a", ContainerSummaryStateEnum::RUNNING);
        let dead = summary("a", ContainerSummaryStateEnum::EXITED);
        assert_eq!(o.lookup(&run), None, "never seen: inspect");
        o.remember(&running("a"));
        assert_eq!(o.lookup(&run), Some(running("a")));
        assert_eq!(o.lookup(&dead), None, "died unheard: inspect");
        o.hear_oom("a");
        o.hear(&exited("a", 137, 5_000));
        let gone = o
            .lookup(&run)
            .expect("known from the events, before the listing");
        assert_eq!(
            (gone.phase, gone.exit_code, gone.exited_at_ms),
            (Phase::Exited, Some(137), Some(5_000))
        );
        assert_eq!(gone.error.as_deref(), Some(OOM_ERROR));
        assert_eq!(o.lookup(&dead), Some(gone), "and kept");
    }

    #[test]
    fn doubt_drops_what_was_known() {
        let o = Observed::default();
        let run = summary("a", ContainerSummaryStateEnum::RUNNING);
        o.remember(&running("a"));
        o.hear(&exited("a", 0, 2_000));
        let started = RuntimeEvent::Started {
            handle: "a".into(),
            replica: ReplicaId::new("web", 0),
        };
        o.hear(&started);
        assert_eq!(o.lookup(&run), None, "exited and started again: inspect");
        o.remember(&running("a"));
        o.hear(&RuntimeEvent::EngineAvailable);
        assert_eq!(o.lookup(&run), None, "after an outage: inspect");
        o.remember(&running("a"));
        o.retain(&BTreeSet::new());
        assert_eq!(o.lookup(&run), None, "removed: forgotten");
    }
}
