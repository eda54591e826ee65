//! What the mesh holds of each workload, read from the agents' API: a spec version newer than
//! the last one the simulator had acknowledged that the simulator did not send is the mesh's own
//! write (an automatic rollback: the content of an earlier version written again). The checker
//! then judges convergence and the agents' stores against that write, as it judges them against
//! an acknowledged apply; a write whose content the simulator never sent is a violation.

use serde::Serialize;
use shoal::identity::pki::Role;
use shoal::identity::tls::Peer;
use shoal::wire::api::{Request, Response};
use shoal_core::hlc::{format_version, Version};
use shoal_core::spec::WorkloadSpec;

use super::{Checker, HostView};
use crate::host::revision;
use crate::trace::Trace;

/// Time between two reads of the agents' specs.
pub const WATCH_EVERY_MS: u64 = 500;
/// Agents asked per read, taken in turn (a write the mesh made reaches a majority at once).
const WATCH_AGENTS_MAX: usize = 16;

/// An automatic rollback the simulator saw.
#[derive(Clone, Debug, Serialize)]
pub struct RollbackSeen {
    /// The workload.
    pub workload: String,
    /// When the simulator first saw an agent hold it (sim ms; read every [`WATCH_EVERY_MS`]).
    pub seen_ms: u64,
    /// The version the mesh wrote.
    pub version: String,
    /// The revision of the version it replaced.
    pub from_revision: u64,
    /// The revision it restored.
    pub to_revision: u64,
}

/// The version and spec of `workload` one agent holds.
async fn held_spec(host: &HostView<'_>, workload: &str) -> Option<(String, WorkloadSpec)> {
    let api = host.api?.clone();
    let req = Request::Get {
        name: workload.to_string(),
    };
    match api
        .handle_request(req, Peer::new("shoal-sim", Role::Client))
        .await
    {
        Response::Workload(w) => Some((w.version, w.spec)),
        _ => None,
    }
}

/// Rollout events an agent records (`shoal events`).
const ROLLOUT_EVENTS: [&str; 3] = ["rollout-complete", "rollout-failed", "rollback"];

/// What the agents say of `workload`'s rollouts, into the trace: one serving agent's history
/// (each version's outcome, the record of the current one, its assessment) and every serving
/// agent's rollout events. Read when the timeline ends, for the reader of a rollout that ended
/// otherwise than expected.
pub async fn trace_agents_rollouts(
    now: u64,
    workload: &str,
    hosts: &[HostView<'_>],
    trace: &mut Trace,
) {
    let peer = || Peer::new("shoal-sim", Role::Client);
    let serving = hosts.iter().filter(|h| h.serving());
    let mut asked_history = false;
    for host in serving {
        let Some(api) = host.api else { continue };
        if !asked_history {
            asked_history = true;
            let req = Request::History {
                name: workload.to_string(),
            };
            if let Response::History {
                versions,
                record,
                assessment,
                ..
            } = api.clone().handle_request(req, peer()).await
            {
                for v in versions.iter().take(4) {
                    let outcome = v.outcome.as_deref().unwrap_or("current");
                    trace.line(
                        now,
                        format!(
                            "  {} says {workload} version {}: {outcome} {}",
                            host.name,
                            format_version(&v.version),
                            v.reason
                        ),
                    );
                }
                trace.line(
                    now,
                    format!("  {} says {workload}'s record: {record:?}", host.name),
                );
                trace.line(
                    now,
                    format!(
                        "  {} says {workload}'s assessment: {assessment:?}",
                        host.name
                    ),
                );
            }
        }
        let req = Request::Events {
            after: 0,
            limit: 1_000,
        };
        let Response::Events(events) = api.clone().handle_request(req, peer()).await else {
            continue;
        };
        let about = events.iter().filter(|e| {
            e.replica.as_deref() == Some(workload) && ROLLOUT_EVENTS.contains(&e.kind.as_str())
        });
        for e in about {
            let at = e.at_ms.saturating_sub(crate::clock::BASE_MS) as f64 / 1000.0;
            trace.line(
                now,
                format!(
                    "  {} recorded {} {workload} at {at:.1} s (its clock): {}",
                    host.name, e.kind, e.reason
                ),
            );
        }
    }
}

impl Checker {
    /// Reads what a few serving agents hold of every live workload (every
    /// [`WATCH_EVERY_MS`]) and adopts a write the mesh made itself.
    pub(super) async fn watch_mesh_specs(
        &mut self,
        now: u64,
        hosts: &[HostView<'_>],
        trace: &mut Trace,
    ) {
        if !now.is_multiple_of(WATCH_EVERY_MS) {
            return;
        }
        let serving: Vec<&HostView<'_>> = hosts.iter().filter(|h| h.serving()).collect();
        let live = self
            .latest
            .iter()
            .filter(|(_, (v, s))| v.is_some() && s.is_some());
        let workloads: Vec<String> = live.map(|(w, _)| w.clone()).collect();
        if serving.is_empty() || workloads.is_empty() {
            return;
        }
        let asked = serving.len().min(WATCH_AGENTS_MAX);
        let first = (self.watch_round as usize * asked) % serving.len();
        self.watch_round += 1;
        for w in workloads {
            if self.in_flight.contains(&w) {
                continue;
            }
            let mut newest: Option<(Version, String, WorkloadSpec)> = None;
            for k in 0..asked {
                let host = serving[(first + k) % serving.len()];
                let Some((raw, spec)) = held_spec(host, &w).await else {
                    continue;
                };
                let Ok(version) = raw.parse::<Version>() else {
                    continue;
                };
                if newest.as_ref().is_none_or(|(v, _, _)| version > *v) {
                    newest = Some((version, raw, spec));
                }
            }
            if let Some((_, raw, spec)) = newest {
                self.mesh_holds(now, &w, &raw, spec, trace);
            }
        }
    }

    /// An agent holds `version` of `workload` with `spec`: adopted as the workload's desired
    /// state when it is newer than the acknowledged version and not a write of the simulator's.
    pub(crate) fn mesh_holds(
        &mut self,
        now: u64,
        workload: &str,
        version: &str,
        spec: WorkloadSpec,
        trace: &mut Trace,
    ) {
        let Some((Some(acked), Some(acked_spec))) = self.latest.get(workload) else {
            return;
        };
        let newer = match (version.parse::<Version>(), acked.parse::<Version>()) {
            (Ok(held), Ok(acked)) => held > acked,
            _ => false,
        };
        let key = (workload.to_string(), version.to_string());
        // The simulator's own writes: one stored but not acknowledged, or the last one sent
        // (its answer still to come).
        let ours = self.made_from.contains_key(&key) || self.last_sent.get(workload) == Some(&spec);
        if !newer || ours || self.in_flight.contains(workload) {
            return;
        }
        let (from, to) = (revision(acked_spec), revision(&spec));
        let sent_before = self
            .sent_specs
            .get(workload)
            .is_some_and(|sent| sent.contains(&spec));
        let shown = format_version(version);
        if sent_before {
            trace.line(
                now,
                format!(
                    "automatic rollback of {workload} seen: version {shown} restores revision \
                     {to} in place of revision {from} (version {})",
                    format_version(acked)
                ),
            );
            self.rollbacks.push(RollbackSeen {
                workload: workload.to_string(),
                seen_ms: now,
                version: version.to_string(),
                from_revision: from,
                to_revision: to,
            });
            self.rollout_rolled_back(workload, from, to);
        } else {
            let detail = format!(
                "{workload}: an agent holds version {shown} (revision {to}, {} replicas), \
                 newer than the acknowledged {}, whose spec the simulator never sent",
                spec.replicas,
                format_version(acked)
            );
            self.violation(trace, now, "spec-not-sent", detail);
        }
        // From now on the mesh's write is what every agent must hold and run.
        self.made_from.insert(key, spec.clone());
        self.acks.retain(|a| a.workload != workload);
        self.latest.insert(
            workload.to_string(),
            (Some(version.to_string()), Some(spec.clone())),
        );
        self.adopted.push(spec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::set_revision;

    fn spec(revision: u64) -> WorkloadSpec {
        let text = "name = \"web\"\nreplicas = 2\n[process]\ncommand = [\"web\"]\n\
                    [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";
        let mut spec = WorkloadSpec::from_toml_str(text, "test.toml").unwrap();
        if revision > 0 {
            set_revision(&mut spec, revision);
        }
        spec
    }

    /// A checker that sent revisions 0, 1 and 2, all acknowledged.
    fn sent_three() -> Checker {
        let mut c = Checker::default();
        for (r, v) in [(0, "1000.0@n1"), (1, "2000.0@n1"), (2, "3000.0@n2")] {
            c.spec_sent(&spec(r));
            c.acknowledged(0, "web", Some(v.into()), Some(spec(r)));
        }
        c
    }

    #[test]
    fn the_mesh_writing_an_earlier_revision_again_is_a_rollback_and_the_new_desired_state() {
        let mut c = sent_three();
        let mut trace = Trace::default();
        // Older than the acknowledged version, or the acknowledged one: nothing.
        c.mesh_holds(1, "web", "2000.0@n1", spec(1), &mut trace);
        c.mesh_holds(1, "web", "3000.0@n2", spec(2), &mut trace);
        assert!(c.rollbacks.is_empty() && c.adopted.is_empty());
        // The rollback: revision 1's content, just above the failed version.
        c.mesh_holds(5, "web", "3000.1@n4", spec(1), &mut trace);
        assert_eq!(c.rollbacks.len(), 1);
        let seen = &c.rollbacks[0];
        assert_eq!((seen.from_revision, seen.to_revision), (2, 1));
        assert_eq!(c.latest["web"].0.as_deref(), Some("3000.1@n4"));
        assert_eq!(c.adopted, vec![spec(1)]);
        assert!(c.violations.is_empty());
        // Seen again: nothing new.
        c.mesh_holds(6, "web", "3000.1@n4", spec(1), &mut trace);
        assert_eq!(c.rollbacks.len(), 1);
    }

    #[test]
    fn the_simulators_own_writes_are_not_the_mesh_s() {
        let mut c = sent_three();
        let mut trace = Trace::default();
        // An update sent, its answer not back yet.
        c.spec_sent(&spec(3));
        c.in_flight.insert("web".into());
        c.mesh_holds(1, "web", "4000.0@n3", spec(1), &mut trace);
        c.in_flight.clear();
        // The last spec sent, under a version whose answer was lost.
        c.mesh_holds(1, "web", "4000.0@n3", spec(3), &mut trace);
        // A write stored but refused (its version named in the refusal).
        c.stored_unacknowledged("web", "4000.1@n3", &spec(0));
        c.mesh_holds(1, "web", "4000.1@n3", spec(0), &mut trace);
        assert!(c.rollbacks.is_empty() && c.adopted.is_empty() && c.violations.is_empty());
    }

    #[test]
    fn a_newer_spec_the_simulator_never_sent_is_a_violation() {
        let mut c = sent_three();
        let mut trace = Trace::default();
        let mut strange = spec(1);
        strange.replicas = 7;
        c.mesh_holds(1, "web", "9000.0@n5", strange, &mut trace);
        assert!(c.rollbacks.is_empty());
        assert_eq!(c.violations.len(), 1);
        assert_eq!(c.violations[0].kind, "spec-not-sent");
        assert!(
            c.violations[0]
                .detail
                .contains("whose spec the simulator never sent"),
            "{:?}",
            c.violations[0]
        );
    }
}
