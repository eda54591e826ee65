//! A healthy copy traded for one that never got healthy (issue 26): a replica that is not
//! exclusive moves (a host joined, drained or came back, capacity shifted) and its old owner
//! keeps its copy until gossip shows the new one serving. The checker fails the run
//! (`healthy-copy-stopped`) when an agent stops a running copy of such a replica, still wanted
//! at that version, for a move, while no copy elsewhere runs or ran within
//! [`REPLACEMENT_SEEN_MS`] before the stop: the replica went from serving to not serving
//! because of the move.
//!
//! What it reads is the ground truth: which copies ran at the last sample (by handle), and the
//! runtime's exit events, which tell a stop (SIGTERM, [`STOPPED_EXIT_CODE`]) from a crash or a
//! guard's kill, even when the agent removed the exited instance before the next sample (a host
//! crash takes its instances without exits). A stop is for a move when the target placement
//! puts the replica on another host, or, where the agents' view differs from the target, when
//! the stopping agent's own reason says so (its event log: `moved to ...`, `placed on ...`).
//! Not judged (allowed): exclusive replicas (stop before start, by design); a deleted or
//! scaled-away replica; a copy of a version the acknowledged spec replaced (a rolling update or
//! a rollback replaces in place, within its budget); a workload with a spec change in flight.

use std::collections::BTreeMap;

use shoal::identity::pki::Role;
use shoal::identity::tls::Peer;
use shoal::wire::api::{Request, Response};
use shoal_core::instance::{Phase, ReplicaId};

use super::truth::Copies;
use super::{Checker, HostView};
use crate::runtime::STOPPED_EXIT_CODE;
use crate::trace::Trace;

/// A copy elsewhere that ran this soon before the stop counts as the replacement having been
/// healthy: gossip (a report every round, a few hundred ms, more under loss) may still show it
/// serving to the agent that stopped the old copy.
pub const REPLACEMENT_SEEN_MS: u64 = 5_000;

/// What the checker keeps between two samples.
#[derive(Default)]
pub(crate) struct Handoffs {
    /// Copies running at the last sample, by (host, handle): (replica, version).
    running: BTreeMap<(u32, String), (ReplicaId, String)>,
    /// The last sample at which a copy of each replica ran on each host, kept
    /// [`REPLACEMENT_SEEN_MS`].
    ran: BTreeMap<(ReplicaId, u32), u64>,
}

/// One stop of a copy that ran at the last sample.
struct Stop {
    replica: ReplicaId,
    host: u32,
    handle: String,
    version: String,
    at_ms: u64,
}

/// What a stop is.
enum Verdict {
    /// Not a stop this checker judges (see the module's doc).
    Skip,
    /// A move whose replacement ran (a handoff).
    Handoff,
    /// No copy elsewhere ran: a violation if the stop was for a move. `placed`: where the
    /// target places the replica, when elsewhere (else the agent's own reason decides).
    Gap {
        placed: Option<String>,
        others: String,
    },
}

impl Checker {
    /// Judges every stop of a running copy since the last sample, then remembers what runs now.
    pub(super) async fn check_handoffs(
        &mut self,
        now: u64,
        hosts: &[HostView<'_>],
        copies: &Copies,
        trace: &mut Trace,
    ) {
        let mut stops = Vec::new();
        for h in hosts {
            let (exits, lost) = h.ground.exits();
            if lost {
                self.handoff_stops_unjudged += 1;
                let line = format!(
                    "{}: runtime events lost; its stops since the last sample are not judged",
                    h.name
                );
                trace.line(now, line);
            }
            for e in exits {
                if e.exit_code != Some(STOPPED_EXIT_CODE) {
                    continue;
                }
                let key = (h.index, e.handle);
                if let Some((replica, version)) = self.handoffs.running.get(&key) {
                    stops.push(Stop {
                        replica: replica.clone(),
                        host: h.index,
                        handle: key.1,
                        version: version.clone(),
                        at_ms: e.at_ms,
                    });
                }
            }
        }
        for stop in stops {
            let (placed, others) = match self.stop_verdict(&stop, copies) {
                Verdict::Skip => continue,
                Verdict::Handoff => {
                    self.handoff_stops += 1;
                    continue;
                }
                Verdict::Gap { placed, others } => (placed, others),
            };
            let reason = stop_reason(&hosts[stop.host as usize], &stop).await;
            // Placed elsewhere by the target, or by the agent's own view (its reason says it
            // moved: a handoff or its timeout), when that view differs from the target.
            let moved = reason
                .as_deref()
                .is_some_and(|r| r.starts_with("moved to ") || r.starts_with("placed on "));
            let placed = match (placed, moved) {
                (Some(p), _) => format!("placed on {p}"),
                (None, true) => "placed elsewhere by its agent".to_string(),
                (None, false) => continue,
            };
            self.handoff_stops += 1;
            self.healthy_copies_stopped += 1;
            let said = reason.map_or(String::new(), |r| format!("; n{} said: {r}", stop.host + 1));
            let detail = format!(
                "{}: its running copy on n{} was stopped at {:.3} s, {placed}, and no copy \
                 elsewhere ran then or in the {} s before ({others}): the replica stopped \
                 serving because of a move{said}",
                stop.replica,
                stop.host + 1,
                stop.at_ms as f64 / 1000.0,
                REPLACEMENT_SEEN_MS / 1000
            );
            self.violation(trace, now, "healthy-copy-stopped", detail);
        }
        self.remember_running(now, copies);
    }

    fn remember_running(&mut self, now: u64, copies: &Copies) {
        let t = &mut self.handoffs;
        t.running.clear();
        for (r, list) in copies {
            for c in list.iter().filter(|c| c.phase == Phase::Running) {
                t.running
                    .insert((c.host, c.handle.clone()), (r.clone(), c.version.clone()));
                t.ran.insert((r.clone(), c.host), now);
            }
        }
        t.ran.retain(|_, at| *at + REPLACEMENT_SEEN_MS >= now);
    }

    /// Whether a stop is one to judge (a running, current copy of a wanted replica that is
    /// not exclusive), and whether a copy elsewhere ran by then.
    fn stop_verdict(&self, stop: &Stop, copies: &Copies) -> Verdict {
        let r = &stop.replica;
        let Some((_, Some(spec))) = self.latest.get(&r.workload) else {
            return Verdict::Skip;
        };
        if spec.placement.exclusive
            || r.replica >= spec.replicas
            || self.in_flight.contains(&r.workload)
            || !self.current(r, &stop.version)
        {
            return Verdict::Skip;
        }
        let here = format!("n{}", stop.host + 1);
        let placed = (self.truth.placement.assigned.get(r)).filter(|p| **p != here);
        let running_elsewhere =
            copies.get(r).into_iter().flatten().any(|c| {
                c.host != stop.host && c.phase == Phase::Running && c.ready_ms <= stop.at_ms
            });
        let ran_elsewhere = self.handoffs.ran.iter().any(|((r2, h), at)| {
            r2 == r && *h != stop.host && *at + REPLACEMENT_SEEN_MS >= stop.at_ms
        });
        match (running_elsewhere || ran_elsewhere, placed) {
            (true, Some(_)) => Verdict::Handoff,
            (true, None) => Verdict::Skip,
            (false, placed) => {
                let others: Vec<String> = (copies.get(r).into_iter().flatten())
                    .filter(|c| c.host != stop.host)
                    .map(|c| format!("n{} ({})", c.host + 1, c.phase))
                    .collect();
                let others = match others.as_slice() {
                    [] => "no copy elsewhere".to_string(),
                    list => format!("copies on {}", list.join(", ")),
                };
                Verdict::Gap {
                    placed: placed.cloned(),
                    others,
                }
            }
        }
    }
}

/// The reason the host's agent recorded for stopping the instance (its event log, `shoal
/// events`: `REASON (instance HANDLE)`), when it still answers.
async fn stop_reason(host: &HostView<'_>, stop: &Stop) -> Option<String> {
    let api = host.api?.clone();
    let req = Request::Events {
        after: 0,
        limit: 1_000,
    };
    let answer = api
        .handle_request(req, Peer::new("shoal-sim", Role::Client))
        .await;
    let Response::Events(events) = answer else {
        return None;
    };
    let suffix = format!(" (instance {})", stop.handle);
    events.iter().rev().find_map(|e| {
        (e.kind == "stop")
            .then(|| e.reason.strip_suffix(&suffix))
            .flatten()
            .map(str::to_string)
    })
}

#[cfg(test)]
mod tests {
    //! The checker against a synthetic trace on real in-memory runtimes: web/0 runs on n1, the
    //! target places it on n2, and n1's copy is stopped, once after n2's copy runs (a handoff)
    //! and once while n2 never starts one (what the reconciler did before issue 26).

    use std::sync::Arc;
    use std::time::Duration;

    use rand::SeedableRng;
    use shoal::node::runtime::mem::MemRuntime;
    use shoal::node::runtime::{Runtime, StartRequest};
    use shoal::state::mesh::record::NodeRecord;
    use shoal_core::instance::ReplicaId;
    use shoal_core::spec::WorkloadSpec;

    use crate::check::{Checker, HostView};
    use crate::host::HostState;
    use crate::runtime::Ground;
    use crate::trace::Trace;

    fn spec(exclusive: bool) -> WorkloadSpec {
        let placement = if exclusive {
            "[placement]\nexclusive = true\n"
        } else {
            ""
        };
        let text = format!(
            "name = \"web\"\nreplicas = 2\n[process]\ncommand = [\"web\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n{placement}"
        );
        WorkloadSpec::from_toml_str(&text, "test.toml").unwrap()
    }

    struct Rig {
        t0: tokio::time::Instant,
        mems: Vec<MemRuntime>,
        grounds: Vec<Ground>,
        names: Vec<String>,
        record: NodeRecord,
        checker: Checker,
        trace: Trace,
        spec: Arc<WorkloadSpec>,
    }

    impl Rig {
        fn new(exclusive: bool) -> Rig {
            let t0 = tokio::time::Instant::now();
            let names: Vec<String> = (1..=2).map(|i| format!("n{i}")).collect();
            let rng = || rand::rngs::ChaCha8Rng::seed_from_u64(1);
            let mems: Vec<MemRuntime> = names
                .iter()
                .map(|n| MemRuntime::with_rng(n, rng(), t0))
                .collect();
            let grounds = mems.iter().cloned().map(Ground::new).collect();
            let record: NodeRecord = serde_json::from_value(serde_json::json!({
                "cpu_millis": 4000, "memory_bytes": 8u64 << 30, "labels": {}, "zone": "z1",
                "draining": false, "agent_version": "test", "placement_version": 7,
                "api_addr": "10.0.0.1:7001"
            }))
            .unwrap();
            let spec = spec(exclusive);
            let mut checker = Checker::default();
            checker.acknowledged(0, "web", Some("v1".into()), Some(spec.clone()));
            Rig {
                t0,
                mems,
                grounds,
                names,
                record,
                checker,
                trace: Trace::default(),
                spec: Arc::new(spec),
            }
        }

        /// The target places web/0 on `host` (as `update_truth` would).
        fn place(&mut self, host: &str) {
            let assigned = &mut self.checker.truth.placement.assigned;
            assigned.insert(ReplicaId::new("web", 0), host.to_string());
        }

        async fn start(&self, h: usize) -> String {
            let r = ReplicaId::new("web", 0);
            let request = StartRequest::new(r, self.spec.clone(), "v1", &self.names[h]);
            self.mems[h].start(request).await.unwrap().handle
        }

        async fn stop(&self, h: usize, handle: &str) {
            self.mems[h].stop(handle, Duration::ZERO).await.unwrap();
        }

        /// 100 ms later, a sample.
        async fn sample(&mut self) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.t0.elapsed().as_millis() as u64;
            let views: Vec<HostView<'_>> = (0..2)
                .map(|i| HostView {
                    index: i as u32,
                    name: &self.names[i],
                    cell: None,
                    state: HostState::Up,
                    paused: false,
                    up_since_ms: 0,
                    record: &self.record,
                    caps: None,
                    ground: &self.grounds[i],
                    node: None,
                    api: None,
                })
                .collect();
            let copies = super::super::truth::copies(now, &views, &self.checker.latest);
            self.checker
                .check_handoffs(now, &views, &copies, &mut self.trace)
                .await;
        }

        fn kinds(&self) -> Vec<&str> {
            let v = &self.checker.violations;
            v.iter().map(|v| v.kind.as_str()).collect()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_healthy_copy_stopped_while_its_replacement_never_ran_fails() {
        let mut rig = Rig::new(false);
        rig.place("n1");
        let old = rig.start(0).await;
        rig.sample().await;
        // The mesh moves web/0 to n2, which never runs a copy (it cannot run it, or its starts
        // fail); the reconciler before issue 26 stopped n1's copy at the handoff bound.
        rig.place("n2");
        for _ in 0..100 {
            rig.sample().await;
        }
        rig.stop(0, &old).await;
        rig.sample().await;
        assert_eq!(
            rig.kinds(),
            ["healthy-copy-stopped"],
            "{:?}",
            rig.checker.violations
        );
        let detail = &rig.checker.violations[0].detail;
        assert!(
            detail.contains("web/0: its running copy on n1")
                && detail.contains("placed on n2")
                && detail.contains("no copy elsewhere"),
            "{detail}"
        );
        assert_eq!(rig.checker.healthy_copies_stopped, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_handoff_after_the_new_copy_runs_passes_and_is_counted() {
        let mut rig = Rig::new(false);
        rig.place("n1");
        let old = rig.start(0).await;
        rig.sample().await;
        rig.place("n2");
        rig.start(1).await;
        rig.sample().await;
        // Removed before the next sample sees it exited: the exit event still tells the stop.
        rig.stop(0, &old).await;
        rig.mems[0].remove(&old).await.unwrap();
        rig.sample().await;
        assert!(rig.kinds().is_empty(), "{:?}", rig.checker.violations);
        assert_eq!(rig.checker.handoff_stops, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_replacement_that_ran_and_crashed_just_before_counts_as_healthy() {
        let mut rig = Rig::new(false);
        rig.place("n1");
        let old = rig.start(0).await;
        rig.sample().await;
        rig.place("n2");
        let new = rig.start(1).await;
        rig.sample().await;
        rig.mems[1].crash(&new, 1);
        rig.sample().await;
        // Gossip still showed n2's copy serving when n1 stopped its own.
        rig.stop(0, &old).await;
        rig.sample().await;
        assert!(rig.kinds().is_empty(), "{:?}", rig.checker.violations);
    }

    #[tokio::test(start_paused = true)]
    async fn crashes_exclusive_replicas_and_stops_in_place_are_not_judged() {
        // A crash (exit code 1) of the only copy: not a stop.
        let mut rig = Rig::new(false);
        rig.place("n1");
        let old = rig.start(0).await;
        rig.sample().await;
        rig.place("n2");
        rig.mems[0].crash(&old, 1);
        rig.sample().await;
        // A stop of a copy the target keeps on its host (an update replaces it in place).
        rig.place("n1");
        let again = rig.start(0).await;
        rig.sample().await;
        rig.stop(0, &again).await;
        rig.sample().await;
        assert!(rig.kinds().is_empty(), "{:?}", rig.checker.violations);
        assert_eq!(rig.checker.handoff_stops, 0);
        // An exclusive replica stops before its new owner starts, by design.
        let mut rig = Rig::new(true);
        rig.place("n1");
        let old = rig.start(0).await;
        rig.sample().await;
        rig.place("n2");
        rig.stop(0, &old).await;
        rig.sample().await;
        assert!(rig.kinds().is_empty(), "{:?}", rig.checker.violations);
    }
}
