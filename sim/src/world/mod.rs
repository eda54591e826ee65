//! The world of one run: the hosts (agent, disk, clock, runtime, host loop), the simulated
//! network, the timeline, and the driver that steps them under paused tokio time.
//!
//! Must run inside a current_thread tokio runtime started paused, one per process
//! (docs/sim.md explains why): the driver sleeps to the next tick or event, tokio jumps its clock
//! there whenever every task is idle, and the tasks of all agents interleave in one fixed order.

mod events;
mod faults;
mod hosts;
mod liveness;
mod starve;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use shoal::transport::gossip::GossipTuning;
use shoal::wire::api::Response;
use shoal_core::spec::WorkloadSpec;
use tokio::sync::mpsc;

use crate::check::Checker;
use crate::host::{HostState, Profiles};
use crate::net::SimNet;
use crate::scenario::{Action, Scenario};
use crate::trace::Trace;

use hosts::{views, Host};

/// Time between two checker samples.
pub const TICK_MS: u64 = 100;

/// The scheduled event a step belongs to, as failure lines name it (`crash at 25.000s (line
/// 47)`).
pub(crate) type Origin = Arc<str>;

/// Timeline events and the follow-up steps they schedule (restarts, resumes, the ends of
/// partitions, link faults and flaps).
#[derive(Clone, Debug)]
enum Step {
    /// An event fires; `tries` counts its postponements so far.
    Fire {
        action: Action,
        origin: Origin,
        tries: u32,
    },
    /// Crashed hosts start again; `tries` counts postponements (a previous incarnation still
    /// referenced).
    Restart {
        hosts: Vec<u32>,
        origin: Origin,
        tries: u32,
    },
    /// Paused hosts resume (with the incarnation that was paused).
    Resume {
        hosts: Vec<(u32, u32)>,
        origin: Origin,
    },
    /// A partition (or a network flap's down phase) ends.
    EndCut { id: u64, origin: Origin },
    /// A link fault ends.
    EndLink { id: u64, origin: Origin },
    /// A starve's next switch (freeze, thaw or end).
    Starve { id: u64 },
    /// A flap's down phase: the hosts crash or are cut off for `down_ms`.
    FlapDown {
        hosts: Vec<u32>,
        crash: bool,
        down_ms: u64,
        origin: Origin,
    },
}

/// An answer from an agent's API, delivered back to the driver.
struct ApiAnswer {
    id: u64,
    sent_ms: u64,
    via: u32,
    what: String,
    workload: String,
    spec: Option<WorkloadSpec>,
    response: Response,
}

/// One run.
pub struct World {
    /// The scenario.
    pub scenario: Scenario,
    /// The seed.
    pub seed: u64,
    pub(crate) t0: tokio::time::Instant,
    pub(crate) net: SimNet,
    pub(crate) hosts: Vec<Host>,
    pub(crate) rng: rand::rngs::ChaCha8Rng,
    pub(crate) trace: Trace,
    pub(crate) profiles: Profiles,
    /// The latest spec the simulator sent per workload (for scale and update).
    pub(crate) specs: BTreeMap<String, WorkloadSpec>,
    /// Every workload the simulator ever sent a spec of (a delete needs one).
    pub(crate) sent: std::collections::BTreeSet<String>,
    /// The highest revision each workload's specs ever had (an update after a rollback takes a
    /// revision of its own, never the rolled-back one's again).
    pub(crate) revisions: BTreeMap<String, u64>,
    pub(crate) tuning: GossipTuning,
    pub(crate) checker: Checker,
    /// The concrete schedule (resolved selectors), for the report.
    pub(crate) schedule: Vec<String>,
    pub(crate) faults: faults::Faults,
    /// Starves in force, by id.
    pub(crate) starves: BTreeMap<u64, starve::Starve>,
    starve_seq: u64,
    /// Hosts a pause event holds frozen (a starve may hold them too).
    pub(crate) pause_held: std::collections::BTreeSet<u32>,
    steps: BTreeMap<(u64, u64), Step>,
    step_seq: u64,
    /// API calls sent and not answered yet: what, the event that sent it, and the workload.
    api_pending: BTreeMap<u64, (String, Origin, String)>,
    api_seq: u64,
    api_tx: mpsc::UnboundedSender<ApiAnswer>,
    api_rx: mpsc::UnboundedReceiver<ApiAnswer>,
}

impl World {
    /// Builds the world (no host started yet). Call inside the paused runtime.
    pub fn new(scenario: Scenario, seed: u64) -> Self {
        let t0 = tokio::time::Instant::now();
        let n = scenario.mesh.nodes;
        let net = SimNet::new(seed ^ 0x6e65_7477_6f72_6b00, n);
        net.set_default_fault(scenario.network);
        let mut tuning = GossipTuning::default();
        if let Some(ms) = scenario.gossip.interval_ms {
            tuning.gossip_interval = Duration::from_millis(ms);
            tuning.initial_interval = tuning.gossip_interval;
        }
        if let Some(phi) = scenario.gossip.phi {
            tuning.phi_threshold = phi;
        }
        let hosts = (0..n).map(|i| Host::new(i, &scenario, seed, t0)).collect();
        let profiles = crate::host::ProfileTable {
            workloads: (scenario.workloads.iter())
                .map(|w| (w.spec.name.clone(), w.profile))
                .collect(),
            revisions: BTreeMap::new(),
        };
        let (api_tx, api_rx) = mpsc::unbounded_channel();
        let mut checker = Checker::new(&scenario);
        let delay = scenario.network.delay.as_millis() as u64;
        checker.reach.set_delays(delay, Default::default());
        let mut world = World {
            t0,
            net,
            hosts,
            rng: rand::rngs::ChaCha8Rng::seed_from_u64(seed),
            trace: Trace::default(),
            profiles: Arc::new(Mutex::new(profiles)),
            specs: BTreeMap::new(),
            sent: Default::default(),
            revisions: BTreeMap::new(),
            tuning,
            checker,
            schedule: Vec::new(),
            faults: faults::Faults::default(),
            starves: BTreeMap::new(),
            starve_seq: 0,
            pause_held: Default::default(),
            steps: BTreeMap::new(),
            step_seq: 0,
            api_pending: BTreeMap::new(),
            api_seq: 0,
            api_tx,
            api_rx,
            scenario,
            seed,
        };
        for w in world.scenario.workloads.clone() {
            let at_ms = w.at_ms.max(1);
            let origin = format!("apply of workload {} at {}", w.spec.name, secs(at_ms));
            let action = Action::Apply {
                spec: Box::new(w.spec),
                via: crate::scenario::Selector::One,
            };
            world.schedule_fire(at_ms, action, origin.into());
        }
        for e in world.scenario.events.clone() {
            let origin = format!("{} at {} (line {})", e.action.name(), secs(e.at_ms), e.line);
            world.schedule_fire(e.at_ms, e.action, origin.into());
        }
        world
    }

    /// Shares `memo` with the run's agents and checker instead of the checker's own (the caller
    /// reads its counts while the run goes on). Before [`World::run`]: an agent started already
    /// keeps the memo it was given.
    pub fn share_placement_memo(&mut self, memo: Arc<shoal_core::cells::PlacementMemo>) {
        self.checker.memo = memo;
    }

    /// Simulated ms since the start.
    pub fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    fn schedule_step(&mut self, at_ms: u64, step: Step) {
        self.step_seq += 1;
        self.steps.insert((at_ms, self.step_seq), step);
    }

    fn schedule_fire(&mut self, at_ms: u64, action: Action, origin: Origin) {
        let step = Step::Fire {
            action,
            origin,
            tries: 0,
        };
        self.schedule_step(at_ms, step);
    }

    /// Records that the event `origin` could not take effect (fails the run).
    pub(crate) fn event_failed(&mut self, origin: &str, why: impl Into<String>) {
        let now = self.now_ms();
        let why = why.into();
        self.schedule.push(format!(
            "{:>9.3}s EVENT FAILED {origin}: {why}",
            secs_f(now)
        ));
        self.checker.event_failed(&mut self.trace, now, origin, why);
    }

    /// Runs the scenario's timeline, then the liveness phase (docs/sim.md); `progress` gets the
    /// simulated ms now and then.
    pub async fn run(&mut self, progress: &dyn Fn(u64)) {
        self.start_mesh().await;
        let end = self.scenario.duration_ms;
        let mut next_tick = TICK_MS;
        self.run_until(end, &mut next_tick, progress, false).await;
        self.trace_rollouts().await;
        self.end_timeline();
        self.run_liveness(&mut next_tick, progress).await;
        self.end_run();
        self.checker
            .finish(self.now_ms(), &views(&self.hosts), &mut self.trace)
            .await;
    }

    /// Steps the world until `end`; in the liveness phase, until the mesh has been whole long
    /// enough (true) or `end` (false).
    async fn run_until(
        &mut self,
        end: u64,
        next_tick: &mut u64,
        progress: &dyn Fn(u64),
        liveness: bool,
    ) -> bool {
        loop {
            let now = self.now_ms();
            while let Some((&(at, seq), _)) = self.steps.first_key_value() {
                if at > now {
                    break;
                }
                let step = self.steps.remove(&(at, seq)).expect("step present");
                self.run_step(step);
            }
            self.poll_hosts().await;
            self.trace_guards();
            self.drain_api();
            self.bury_zombies(now);
            if now >= *next_tick {
                self.checker.in_flight = self.api_pending.values().map(|p| p.2.clone()).collect();
                self.checker
                    .sample(now, &views(&self.hosts), &self.net, &mut self.trace)
                    .await;
                self.follow_mesh_writes();
                *next_tick += TICK_MS;
                if next_tick.is_multiple_of(1000) {
                    progress(now);
                }
                if liveness && self.liveness_held().await {
                    return true;
                }
            }
            if now >= end {
                return false;
            }
            let next_step = self.steps.first_key_value().map_or(u64::MAX, |(k, _)| k.0);
            let wake = (*next_tick).min(next_step).min(end).max(now + 1);
            tokio::time::sleep_until(self.t0 + Duration::from_millis(wake)).await;
        }
    }

    /// A down host runs nothing: a start its dead incarnation had in flight (the agent runs
    /// each start in a task of its own, which the crash does not abort, and `MemRuntime` lists
    /// the instance when its start latency has passed) would otherwise run on a dead host.
    /// A start still in flight when the host is up again is not caught (docs/sim.md).
    fn bury_zombies(&mut self, now: u64) {
        for h in 0..self.hosts.len() {
            let host = &self.hosts[h];
            if host.state != HostState::Down || host.restarting {
                continue;
            }
            let zombies: Vec<String> = host
                .ground
                .seen(now)
                .into_iter()
                .filter(|i| i.phase.may_be_alive())
                .map(|i| i.replica.to_string())
                .collect();
            if !zombies.is_empty() {
                host.ground.kill_all();
                let line = format!(
                    "{} is down: removed {} started by its dead incarnation",
                    host.name,
                    zombies.join(",")
                );
                self.trace.line(now, line);
            }
        }
    }

    /// What the agents say of every updated workload's rollouts, into the trace.
    async fn trace_rollouts(&mut self) {
        let mut updated: Vec<String> = (self.checker.rollouts.iter())
            .map(|r| r.workload.clone())
            .collect();
        updated.dedup();
        let now = self.now_ms();
        for w in updated {
            self.trace.line(
                now,
                format!("the agents on {w}'s rollouts at the end of the timeline:"),
            );
            let hosts = views(&self.hosts);
            crate::check::trace_agents_rollouts(now, &w, &hosts, &mut self.trace).await;
        }
    }

    /// The mesh wrote a spec itself (an automatic rollback): later scales and updates start
    /// from it, as an operator's `shoal scale` would start from what the mesh holds.
    fn follow_mesh_writes(&mut self) {
        for spec in std::mem::take(&mut self.checker.adopted) {
            self.specs.insert(spec.name.clone(), spec);
        }
    }

    /// The timeline is over: what is still postponed never took effect.
    fn end_timeline(&mut self) {
        self.checker.timeline_converged_at_ms = self.checker.converged_at_ms;
        self.checker.end_rollouts();
        for step in std::mem::take(&mut self.steps).into_values() {
            match step {
                Step::Fire { origin, tries, .. } | Step::Restart { origin, tries, .. } => {
                    let why =
                        format!("still postponed when the timeline ended ({tries} postponements)");
                    self.event_failed(&origin, why);
                }
                // Ends of faults: the liveness phase undoes every fault still in force.
                Step::Resume { .. }
                | Step::EndCut { .. }
                | Step::EndLink { .. }
                | Step::Starve { .. }
                | Step::FlapDown { .. } => {}
            }
        }
    }

    /// The run is over: a spec change not answered by now, or still postponed, never took
    /// effect.
    fn end_run(&mut self) {
        for step in std::mem::take(&mut self.steps).into_values() {
            if let Step::Fire { origin, tries, .. } | Step::Restart { origin, tries, .. } = step {
                let why = format!("still postponed when the run ended ({tries} postponements)");
                self.event_failed(&origin, why);
            }
        }
        for (what, origin, _) in std::mem::take(&mut self.api_pending).into_values() {
            self.event_failed(&origin, format!("{what} sent but never answered"));
        }
    }

    /// Starts every host, all at once or at the scenario's join rate.
    async fn start_mesh(&mut self) {
        let rate = self.scenario.mesh.join_rate;
        for i in 0..self.hosts.len() as u32 {
            if let Some(at) = self.scenario.mesh.join_at_ms(i) {
                let step = Step::Restart {
                    hosts: vec![i],
                    origin: format!("join of n{} at {} ([[hosts]])", i + 1, secs(at)).into(),
                    tries: 0,
                };
                self.schedule_step(at, step);
            } else if rate > 0 && i > 0 {
                let at = u64::from(i) * 1000 / u64::from(rate);
                let step = Step::Restart {
                    hosts: vec![i],
                    origin: format!("join of n{} at {}", i + 1, secs(at)).into(),
                    tries: 0,
                };
                self.schedule_step(at, step);
            } else {
                self.start_host(i);
            }
        }
        self.trace
            .line(0, format!("mesh of {} hosts starting", self.hosts.len()));
    }

    fn run_step(&mut self, step: Step) {
        match step {
            Step::Fire {
                action,
                origin,
                tries,
            } => self.fire(action, origin, tries),
            Step::Restart {
                hosts,
                origin,
                tries,
            } => self.restart(hosts, origin, tries),
            Step::Resume { hosts, origin } => self.resume(&hosts, &origin),
            Step::EndCut { id, origin } => self.end_cut(id, &origin),
            Step::EndLink { id, origin } => self.end_link(id, &origin),
            Step::Starve { id } => self.starve_step(id),
            Step::FlapDown {
                hosts,
                crash,
                down_ms,
                origin,
            } => self.flap_down(&hosts, crash, down_ms, origin),
        }
    }

    /// Records a line in the trace and the concrete schedule.
    pub(crate) fn log(&mut self, text: impl Into<String>) {
        let now = self.now_ms();
        let text = text.into();
        self.trace.line(now, &text);
        self.schedule
            .push(format!("{:>9.3}s {text}", now as f64 / 1000.0));
    }

    fn drain_api(&mut self) {
        while let Ok(answer) = self.api_rx.try_recv() {
            let now = self.now_ms();
            let via = format!("n{}", answer.via + 1);
            let Some((_, origin, _)) = self.api_pending.remove(&answer.id) else {
                continue;
            };
            if let (Response::Error(e), Some(spec)) = (&answer.response, &answer.spec) {
                if let Some(version) = stored_version(&e.message) {
                    self.checker
                        .stored_unacknowledged(&answer.workload, &version, spec);
                }
            }
            match answer.response {
                Response::Applied(list) => {
                    for a in list {
                        self.trace.line(
                            now,
                            format!(
                                "{} {} acknowledged by {via}: version {} durable on {:?}",
                                answer.what, a.name, a.version, a.durable_on
                            ),
                        );
                        self.checker.acknowledged(
                            now,
                            &a.name,
                            Some(a.version),
                            answer.spec.clone(),
                        );
                    }
                }
                Response::Deleted(a) => {
                    self.trace.line(
                        now,
                        format!(
                            "delete {} acknowledged by {via}: version {}",
                            a.name, a.version
                        ),
                    );
                    self.checker.acknowledged(now, &a.name, None, None);
                }
                Response::Error(e)
                    if e.kind == shoal::wire::api::ErrorKind::NotFound && answer.spec.is_none() =>
                {
                    // A delete sent again after "not durable" finds the deletion already
                    // stored there: it spreads from there, as an acknowledged one would.
                    self.trace.line(
                        now,
                        format!(
                            "delete {} via {via}: {via} holds the deletion already",
                            answer.workload
                        ),
                    );
                    self.checker.acknowledged(now, &answer.workload, None, None);
                }
                Response::Error(e) if e.kind == shoal::wire::api::ErrorKind::NotDurable => {
                    // What the error tells an operator to do: run the command again.
                    let line = format!(
                        "{} {} not durable yet via {via}: sending it again in 1 s",
                        answer.what, answer.workload
                    );
                    self.trace.line(now, &line);
                    self.checker.refused.push(line);
                    let via = crate::scenario::Selector::One;
                    let action = match answer.spec {
                        Some(spec) => Action::Apply {
                            spec: Box::new(spec),
                            via,
                        },
                        None => Action::Delete {
                            workload: answer.workload,
                            via,
                        },
                    };
                    self.schedule_fire(now + 1000, action, origin);
                }
                Response::Error(e) => {
                    let line = format!(
                        "{} {} refused by {via} ({} ms after sending): {:?}: {}",
                        answer.what,
                        answer.workload,
                        now - answer.sent_ms,
                        e.kind,
                        e.message
                    );
                    self.trace.line(now, &line);
                    self.checker.refused.push(line);
                }
                other => self
                    .trace
                    .line(now, format!("unexpected API answer {other:?}")),
            }
        }
    }
}

/// `12.500s`, how failure lines name times.
pub(crate) fn secs(ms: u64) -> String {
    format!("{:.3}s", secs_f(ms))
}

fn secs_f(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// The version an agent's refusal says it stored anyway ("web (version X) is stored on n3 but
/// ..."): copies may be made from it once it spreads. The message shows it as people read it
/// (`2027-01-15 08:00:28.500Z by n3`); the checker keys copies by the raw form they carry.
fn stored_version(message: &str) -> Option<String> {
    if !message.contains("is stored on") {
        return None;
    }
    let rest = message.split_once("(version ")?.1;
    let shown = rest.split_once(')')?.0;
    shoal_core::hlc::Version::parse_any(shown)
        .ok()
        .map(|v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::stored_version;

    #[test]
    fn the_stored_version_is_read_back_raw_from_the_refusal_people_read() {
        let raw = "1800000028500.0@n3";
        let message = format!(
            "web (version {}) is stored on n3 but no second agent confirmed it within 3 s; it \
             will spread by anti-entropy, run the command again to confirm",
            shoal_core::hlc::format_version(raw)
        );
        assert!(
            !message.contains(raw),
            "the agent shows it formatted: {message}"
        );
        assert_eq!(stored_version(&message).as_deref(), Some(raw));
        assert_eq!(stored_version("web lost to a newer write"), None);
    }
}
