//! The world of one run: the hosts (agent, disk, clock, runtime, host loop), the simulated
//! network, the timeline, and the driver that steps them under paused tokio time.
//!
//! Must run inside a current_thread tokio runtime started paused, one per process
//! (docs/sim.md explains why): the driver sleeps to the next tick or event, tokio jumps its clock
//! there whenever every task is idle, and the tasks of all agents interleave in one fixed order.

mod events;
mod hosts;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use shoal::gossip::GossipTuning;
use shoal::mesh::api::Response;
use shoal_core::spec::WorkloadSpec;
use tokio::sync::mpsc;

use crate::check::Checker;
use crate::host::Profiles;
use crate::net::SimNet;
use crate::scenario::{Action, Scenario};
use crate::trace::Trace;

pub use hosts::{Host, HostState};

/// Time between two checker samples.
pub const TICK_MS: u64 = 100;

/// Follow-up steps scheduled by events (restarts, resumes, heals, flaps).
#[derive(Clone, Debug)]
enum Step {
    Fire(Action),
    Restart(Vec<u32>),
    Resume(Vec<u32>),
    Heal,
    ClearLinks(Vec<(u32, u32)>, bool),
    FlapDown(Vec<u32>, bool),
    FlapUp(Vec<u32>, bool),
}

/// An answer from an agent's API, delivered back to the driver.
struct ApiAnswer {
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
    pub(crate) tuning: GossipTuning,
    pub(crate) checker: Checker,
    /// The concrete schedule (resolved selectors), for the report.
    pub(crate) schedule: Vec<String>,
    steps: BTreeMap<(u64, u64), Step>,
    step_seq: u64,
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
        let profiles: BTreeMap<String, _> = scenario
            .workloads
            .iter()
            .map(|w| (w.spec.name.clone(), w.profile))
            .collect();
        let (api_tx, api_rx) = mpsc::unbounded_channel();
        let checker = Checker::new(&scenario);
        let mut world = World {
            t0,
            net,
            hosts,
            rng: rand::rngs::ChaCha8Rng::seed_from_u64(seed),
            trace: Trace::default(),
            profiles: Arc::new(Mutex::new(profiles)),
            specs: BTreeMap::new(),
            tuning,
            checker,
            schedule: Vec::new(),
            steps: BTreeMap::new(),
            step_seq: 0,
            api_tx,
            api_rx,
            scenario,
            seed,
        };
        for w in world.scenario.workloads.clone() {
            let via = crate::scenario::Selector::One;
            world.schedule_step(
                w.at_ms.max(1),
                Step::Fire(Action::Apply {
                    spec: Box::new(w.spec),
                    via,
                }),
            );
        }
        for e in world.scenario.events.clone() {
            world.schedule_step(e.at_ms, Step::Fire(e.action));
        }
        world
    }

    /// Simulated ms since the start.
    pub fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    fn schedule_step(&mut self, at_ms: u64, step: Step) {
        self.step_seq += 1;
        self.steps.insert((at_ms, self.step_seq), step);
    }

    /// Runs the scenario to its end; `progress` gets the simulated ms now and then.
    pub async fn run(&mut self, progress: &dyn Fn(u64)) {
        self.start_mesh().await;
        let end = self.scenario.duration_ms;
        let mut next_tick = TICK_MS;
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
            self.drain_api();
            if now >= next_tick {
                self.checker
                    .sample(now, &self.hosts, &self.net, &mut self.trace)
                    .await;
                next_tick += TICK_MS;
                if next_tick.is_multiple_of(1000) {
                    progress(now);
                }
            }
            if now >= end {
                break;
            }
            let next_step = self.steps.first_key_value().map_or(u64::MAX, |(k, _)| k.0);
            let wake = next_tick.min(next_step).min(end).max(now + 1);
            tokio::time::sleep_until(self.t0 + Duration::from_millis(wake)).await;
        }
        self.checker
            .finish(self.now_ms(), &self.hosts, &mut self.trace)
            .await;
    }

    /// Starts every host, all at once or at the scenario's join rate.
    async fn start_mesh(&mut self) {
        let rate = self.scenario.mesh.join_rate;
        for i in 0..self.hosts.len() as u32 {
            if rate > 0 && i > 0 {
                let at = u64::from(i) * 1000 / u64::from(rate);
                self.schedule_step(at, Step::Restart(vec![i]));
            } else {
                self.start_host(i);
            }
        }
        self.trace
            .line(0, format!("mesh of {} hosts starting", self.hosts.len()));
    }

    fn run_step(&mut self, step: Step) {
        let now = self.now_ms();
        match step {
            Step::Fire(action) => self.fire(action),
            Step::Restart(hosts) => {
                for h in hosts {
                    if self.hosts[h as usize].state == HostState::Down {
                        if self.hosts[h as usize].ghost_alive() {
                            // The last incarnation still has a call in flight: retry shortly.
                            self.schedule_step(now + 500, Step::Restart(vec![h]));
                        } else {
                            self.start_host(h);
                        }
                    }
                }
            }
            Step::Resume(hosts) => self.set_paused(&hosts, false),
            Step::Heal => {
                self.net.heal();
                self.log("heal: every partition healed");
            }
            Step::ClearLinks(links, default) => {
                if default {
                    self.net.set_default_fault(self.scenario.network);
                }
                for (a, b) in links {
                    self.net.set_link_fault(a, b, None);
                }
                self.log("link faults cleared");
            }
            Step::FlapDown(hosts, crash) => self.flap(&hosts, crash, true),
            Step::FlapUp(hosts, crash) => self.flap(&hosts, crash, false),
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
                    if e.kind == shoal::mesh::api::ErrorKind::NotDurable
                        && answer.spec.is_some() =>
                {
                    // What the error tells an operator to do: run the command again.
                    let line = format!(
                        "{} {} not durable yet via {via}: applying again in 1 s",
                        answer.what, answer.workload
                    );
                    self.trace.line(now, &line);
                    self.checker.refused.push(line);
                    let spec = answer.spec.expect("checked");
                    let via = crate::scenario::Selector::One;
                    self.schedule_step(
                        now + 1000,
                        Step::Fire(Action::Apply {
                            spec: Box::new(spec),
                            via,
                        }),
                    );
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
