//! What tests and the simulator inject into the in-memory runtime: per-workload behaviour
//! ([`MemProfile`]), crashes, engine outages, host death, probe outcomes; and the invariant check.

use std::collections::BTreeMap;

use tokio::time::Duration;

use super::{MemRuntime, RuntimeEvent};
use crate::core::instance::Phase;
use crate::node::runtime::ProbeOutcome;

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
    /// Sets how `workload`'s instances behave from their next start (or stop, or probe) on;
    /// instances of a revision with a profile of its own keep that one.
    pub fn set_profile(&self, workload: &str, profile: MemProfile) {
        self.lock().profiles.insert(workload.to_string(), profile);
    }

    /// Sets how `workload`'s instances started from specs of `revision` (the value of
    /// [`super::REVISION_ENV`] in their environment) behave, from their next start (or probe)
    /// on, whatever the workload's own profile says.
    pub fn set_revision_profile(&self, workload: &str, revision: &str, profile: MemProfile) {
        let key = (workload.to_string(), revision.to_string());
        self.lock().revision_profiles.insert(key, profile);
    }

    /// The revision each instance was started from (handle to [`super::REVISION_ENV`]'s value),
    /// for the instances whose spec names one.
    pub fn revisions(&self) -> BTreeMap<String, String> {
        let state = self.lock();
        let named = state.instances.iter();
        named
            .filter_map(|(h, i)| Some((h.clone(), i.revision.clone()?)))
            .collect()
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::instance::ReplicaId;
    use crate::core::spec::WorkloadSpec;
    use crate::node::runtime::{Runtime, StartRequest};

    /// A start of replica `replica` of `web` at `revision` (none: the spec names no revision).
    fn start(replica: u32, revision: Option<&str>) -> StartRequest {
        let env = revision.map_or(String::new(), |r| {
            format!("[process.env]\n{} = \"{r}\"\n", super::super::REVISION_ENV)
        });
        let text = format!(
            "name = \"web\"\n[process]\ncommand = [\"web\"]\n{env}\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
        );
        StartRequest {
            replica: ReplicaId::new("web", replica),
            spec: Arc::new(WorkloadSpec::from_toml_str(&text, "web.toml").unwrap()),
            spec_version: format!("v{}", revision.unwrap_or("0")),
            node: "n1".into(),
            fence_token: None,
            addr: std::net::IpAddr::from([127, 0, 0, 1]),
            volume_roots: Arc::from(Vec::new()),
            ports: Default::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_revision_with_a_profile_of_its_own_fails_alone() {
        let rt = MemRuntime::new("n1", 1);
        let slow = MemProfile {
            start_latency: Duration::from_millis(200),
            ..MemProfile::default()
        };
        rt.set_profile("web", slow.clone());
        let crash_loop = MemProfile {
            exit_after: Some(Duration::from_secs(1)),
            ..slow
        };
        rt.set_revision_profile("web", "2", crash_loop);
        rt.set_revision_profile(
            "web",
            "3",
            MemProfile {
                fail_starts: Some("no such image".into()),
                ..MemProfile::default()
            },
        );
        let old = rt.start(start(0, None)).await.unwrap();
        let good = rt.start(start(1, Some("1"))).await.unwrap();
        let bad = rt.start(start(2, Some("2"))).await.unwrap();
        let refused = rt.start(start(3, Some("3"))).await.unwrap_err();
        assert!(refused.to_string().contains("no such image"), "{refused}");
        tokio::time::sleep(Duration::from_secs(5)).await;
        let phases: BTreeMap<String, Phase> = (rt.list().await.unwrap().into_iter())
            .map(|i| (i.handle, i.phase))
            .collect();
        assert_eq!(phases[&old.handle], Phase::Running);
        assert_eq!(phases[&good.handle], Phase::Running);
        assert_eq!(phases[&bad.handle], Phase::Exited, "revision 2 crash-loops");
        let revisions = rt.revisions();
        assert_eq!(revisions.get(&old.handle), None);
        assert_eq!(revisions[&good.handle], "1");
        assert_eq!(revisions[&bad.handle], "2");
        // Healed: the revision's next start follows its new profile.
        rt.set_revision_profile("web", "2", MemProfile::default());
        let again = rt.start(start(2, Some("2"))).await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let alive = rt.list().await.unwrap();
        assert!(alive
            .iter()
            .any(|i| i.handle == again.handle && i.phase == Phase::Running));
        rt.check_invariants();
    }
}
