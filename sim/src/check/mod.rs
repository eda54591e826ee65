//! Invariant checkers and metrics, sampled every tick from the ground truth (the hosts'
//! runtimes) and the agents' own views. A violation carries its time and evidence. The checkers
//! read each host through a [`HostView`] the driver fills for every call; they never see the
//! driver (`world`) itself.
//!
//! - never two alive copies of an exclusive replica;
//! - never an exclusive replica with data started away from its data without the spec's
//!   `on_data_loss = "start-empty"` (the simulator never approves);
//! - no host holds more than its declared capacity;
//! - every acknowledged spec reaches every live agent (checked at the end, timed throughout);
//! - after the last fault, running = desired within the scenario's bound (and stays so);
//! - a spec version the mesh wrote itself restores content the simulator sent (an automatic
//!   rollback), and becomes the desired state; every update's rollout is timed;
//! - never a running copy of a replica that is not exclusive stopped for a move while no copy
//!   elsewhere runs (`handoff.rs`).

mod agents;
mod cells;
mod data;
mod handoff;
mod liveness;
mod mesh_specs;
pub mod reach;
mod rollouts;
pub mod stats;
mod truth;
mod verdicts;
mod view;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use shoal_core::instance::ReplicaId;
use shoal_core::spec::WorkloadSpec;

use crate::net::SimNet;
use crate::scenario::Scenario;
use crate::trace::Trace;

pub use handoff::REPLACEMENT_SEEN_MS;
pub use liveness::{EventFailure, LivenessOutcome, LIVENESS_HOLD_MS};
pub use mesh_specs::{trace_agents_rollouts, RollbackSeen, WATCH_EVERY_MS};
pub use reach::REACHABLE_WITHIN_MS;
pub use rollouts::{Rollout, RolloutStart, ROLLOUT_HOLD_MS};
pub use truth::Copies;
pub use verdicts::FalseVerdict;
pub use view::HostView;

/// A broken invariant.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// When it was seen (sim ms).
    pub t_ms: u64,
    /// Which invariant.
    pub kind: String,
    /// The evidence.
    pub detail: String,
    /// For an exclusive duplicate: the fault that kept one of the hosts from being heard when
    /// it began (a pause, a one-way partition), if any. Context for the reader only: the
    /// duplicate is a failure either way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub during: Option<String>,
}

/// A fault that kept one host from being heard while it still ran (a pause, a one-way
/// partition): named beside an exclusive duplicate that began during it.
#[derive(Clone, Debug)]
pub(crate) struct Episode {
    pub host: u32,
    /// `pause` or `one-way partition`.
    pub kind: &'static str,
    pub start_ms: u64,
    pub end_ms: Option<u64>,
}

/// An episode is named beside a duplicate that began while it lasted or this soon after it
/// ended.
const EPISODE_AFTER_MS: u64 = 2_000;

/// One point of the timeline plot.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Sample {
    /// Sim ms.
    pub t_ms: u64,
    /// Replicas wanted.
    pub desired: u32,
    /// Replicas with an alive copy.
    pub running: u32,
    /// Replicas with a running, healthy copy.
    pub healthy: u32,
}

/// Bytes sent by all hosts so far, for the traffic chart.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct TrafficSample {
    /// Sim ms.
    pub t_ms: u64,
    /// Gossip bytes sent by every host so far.
    pub gossip_bytes: u64,
    /// RPC bytes (store sync, API) sent by every host so far.
    pub rpc_bytes: u64,
}

/// Time between two traffic samples.
const TRAFFIC_EVERY_MS: u64 = 1_000;

/// A shaded window of the plot.
#[derive(Clone, Debug, Serialize)]
pub struct FaultWindow {
    /// Start (sim ms).
    pub start_ms: u64,
    /// End (sim ms).
    pub end_ms: u64,
    /// What it was.
    pub label: String,
}

/// An acknowledged spec change.
#[derive(Clone, Debug)]
pub(crate) struct Ack {
    pub workload: String,
    /// `None` for a delete.
    pub version: Option<String>,
    pub at_ms: u64,
    /// Hosts not yet holding it (or something newer).
    pub missing: Option<BTreeSet<u32>>,
}

/// A replica whose host crashed, waiting for a healthy copy elsewhere.
#[derive(Clone, Debug)]
pub(crate) struct PendingReplacement {
    pub replica: ReplicaId,
    pub host: u32,
    pub crash_ms: u64,
    pub exclusive: bool,
}

/// A crash waiting for every live observer's failure detector.
#[derive(Clone, Debug)]
pub(crate) struct PendingDetection {
    pub name: String,
    pub generation: u64,
    pub crash_ms: u64,
    pub observers: BTreeSet<u32>,
}

/// Everything measured during a run.
#[derive(Default)]
pub struct Checker {
    /// Invariant violations, in order.
    pub violations: Vec<Violation>,
    /// API calls refused and hosts that failed to start (not violations by themselves).
    pub refused: Vec<String>,
    /// The plot's points.
    pub series: Vec<Sample>,
    /// Bytes sent so far, every [`TRAFFIC_EVERY_MS`].
    pub traffic_series: Vec<TrafficSample>,
    /// The plot's shaded windows.
    pub windows: Vec<FaultWindow>,
    /// Exclusive duplicate episodes, and the longest (ms).
    pub exclusive_duplicates: u64,
    /// Longest exclusive duplicate (ms).
    pub exclusive_duplicate_longest_ms: u64,
    /// Exclusive replicas with data started away from their data without approval or policy
    /// (violations, `data.rs`).
    pub data_started_empty: u64,
    /// The same, by the spec's `on_data_loss = "start-empty"` (allowed).
    pub data_started_empty_by_policy: u64,
    /// Replicas with data that are not exclusive, moved to a host without their data (allowed).
    pub data_moved_empty: u64,
    /// Running copies of replicas that are not exclusive stopped for a move while no copy
    /// elsewhere ran (violations, `handoff.rs`).
    pub healthy_copies_stopped: u64,
    /// Running copies stopped for a move, judged (the handoffs, those violations included).
    pub handoff_stops: u64,
    /// Samples at which a host's runtime events overflowed, so its stops went unjudged.
    pub handoff_stops_unjudged: u64,
    pub(crate) handoffs: handoff::Handoffs,
    pub(crate) data: data::DataTrack,
    /// Normal duplicate episodes (two copies of one replica, e.g. during a partition).
    pub duplicates: u64,
    /// Longest normal duplicate (ms).
    pub duplicate_longest_ms: u64,
    /// Replica-seconds below desired (no healthy copy).
    pub missing_replica_seconds: f64,
    /// Replica-seconds of copies beyond one per desired replica.
    pub extra_replica_seconds: f64,
    /// Time to a healthy copy elsewhere for each replica of a crashed host (normal, exclusive).
    pub replacement_ms: Vec<u64>,
    /// The same for exclusive replicas (they wait out the fencing delay by design).
    pub replacement_exclusive_ms: Vec<u64>,
    /// Per observer: crash to "dead" in its view.
    pub detection_ms: Vec<u64>,
    /// Per crash: crash to "dead" in every live observer's view.
    pub detection_all_ms: Vec<u64>,
    /// Live, reachable hosts declared dead by a peer while no partition or pause explained it.
    pub false_dead: u64,
    /// Members dropped from an observer's live set while that incarnation was up and reachable
    /// from it within [`REACHABLE_WITHIN_MS`] (`verdicts.rs`).
    pub false_member_deaths: u64,
    /// Cells an agent of another cell stopped holding up while one of their members was up and
    /// reachable from it within [`REACHABLE_WITHIN_MS`].
    pub false_cell_downs: u64,
    /// Every member dropped from a live set (true and false verdicts).
    pub member_deaths_seen: u64,
    /// Member deaths the agents' probes declared (their counters, read with their views).
    pub member_deaths_declared: u64,
    /// Readings of an agent's member verdicts (one agent at one sample).
    pub verdict_reads: u64,
    /// Readings of member verdicts missed because the agent's gossip state was busy.
    pub verdict_reads_missed: u64,
    /// Every cell an agent stopped holding up (true and false verdicts).
    pub cell_downs_seen: u64,
    /// The first false verdicts with their evidence.
    pub false_verdicts: Vec<FalseVerdict>,
    /// Who could hear whom lately (the driver reports pauses and cuts).
    pub reach: reach::Reach,
    pub(crate) verdicts: verdicts::Verdicts,
    /// Frozen parts of starve duty cycles run (docs/scenarios.md, "Slow hosts").
    pub starve_cycles: u64,
    /// Ack to every live agent holding it.
    pub propagation_ms: Vec<u64>,
    /// Membership changes, replica moves they caused, and the moves that were forced.
    pub membership_changes: u64,
    /// Replica assignment changes caused by membership changes.
    pub moves: u64,
    /// Moves of replicas whose host left.
    pub forced_moves: u64,
    /// First time after the last fault from which running = desired held to the end.
    pub converged_at_ms: Option<u64>,
    /// When the last fault ended.
    pub last_fault_ms: u64,
    /// Running = desired since this time when the timeline ended (before the liveness phase).
    pub timeline_converged_at_ms: Option<u64>,
    /// Scheduled events that could not take effect.
    pub event_failures: Vec<EventFailure>,
    /// The liveness phase, once it ran.
    pub liveness: Option<LivenessOutcome>,
    /// Why running != desired at the last sample (None: it is equal).
    pub convergence_gap: Option<String>,
    /// Every update's rollout, in the order they were sent.
    pub rollouts: Vec<Rollout>,
    /// Automatic rollbacks seen (the mesh wrote an earlier spec's content again).
    pub rollbacks: Vec<RollbackSeen>,
    /// Workloads with a spec change sent and not answered yet (set by the driver).
    pub(crate) in_flight: BTreeSet<String>,
    /// The spec the simulator sent last for each workload.
    pub(crate) last_sent: BTreeMap<String, WorkloadSpec>,
    /// Specs the mesh wrote itself, adopted since the driver last took them.
    pub(crate) adopted: Vec<WorkloadSpec>,
    watch_round: u64,
    /// The spec behind each (workload, version) the simulator learned of: a copy made from an
    /// older version whose process and resources the newer one keeps is current (a scale).
    pub(crate) made_from: BTreeMap<(String, String), WorkloadSpec>,
    /// Every spec the simulator sent for each workload: a version the checker never heard of
    /// (its answer lost, or an error that did not name it) was made from one of them.
    pub(crate) sent_specs: BTreeMap<String, Vec<WorkloadSpec>>,
    pub(crate) episodes: Vec<Episode>,
    pub(crate) acks: Vec<Ack>,
    pub(crate) latest: BTreeMap<String, (Option<String>, Option<WorkloadSpec>)>,
    pub(crate) pending_replacements: Vec<PendingReplacement>,
    pub(crate) pending_detections: Vec<PendingDetection>,
    pub(crate) truth: truth::Truth,
    pub(crate) last_live: BTreeMap<u32, BTreeSet<u32>>,
    excl_open: BTreeMap<ReplicaId, u64>,
    dup_open: BTreeMap<ReplicaId, u64>,
    over_capacity: BTreeSet<u32>,
    last_sample_ms: u64,
    last_copies: BTreeSet<(ReplicaId, u32, String)>,
    /// Placements by input, shared with every agent of the run (`shoal_core::cells::PlacementMemo`): the
    /// target is the agents' own function of their views, each distinct input computed once.
    pub(crate) memo: std::sync::Arc<shoal_core::cells::PlacementMemo>,
}

impl Checker {
    /// A checker for `sc`.
    pub fn new(sc: &Scenario) -> Self {
        Checker {
            last_fault_ms: sc.last_fault_end_ms(),
            ..Default::default()
        }
    }

    pub(crate) fn violation(&mut self, trace: &mut Trace, t_ms: u64, kind: &str, detail: String) {
        trace.line(t_ms, format!("VIOLATION {kind}: {detail}"));
        self.violations.push(Violation {
            t_ms,
            kind: kind.into(),
            detail,
            during: None,
        });
    }

    /// A shaded window for the plot.
    pub fn fault_window(&mut self, start_ms: u64, end_ms: u64, label: &str) {
        self.windows.push(FaultWindow {
            start_ms,
            end_ms,
            label: label.into(),
        });
    }

    /// A spec change was acknowledged (`version` None: a delete).
    pub fn acknowledged(
        &mut self,
        now: u64,
        workload: &str,
        version: Option<String>,
        spec: Option<WorkloadSpec>,
    ) {
        self.acks.push(Ack {
            workload: workload.into(),
            version: version.clone(),
            at_ms: now,
            missing: None,
        });
        if let (Some(v), Some(s)) = (&version, &spec) {
            self.made_from
                .insert((workload.to_string(), v.clone()), s.clone());
        }
        self.latest.insert(workload.into(), (version, spec));
    }

    /// The simulator sends `spec` to an agent (an apply, scale or update).
    pub fn spec_sent(&mut self, spec: &WorkloadSpec) {
        self.last_sent.insert(spec.name.clone(), spec.clone());
        let sent = self.sent_specs.entry(spec.name.clone()).or_default();
        if !sent.contains(spec) {
            sent.push(spec.clone());
        }
    }

    /// A write the agent stored but did not acknowledge (it may still spread): copies made
    /// from it are judged by its spec.
    pub fn stored_unacknowledged(&mut self, workload: &str, version: &str, spec: &WorkloadSpec) {
        self.made_from
            .insert((workload.to_string(), version.to_string()), spec.clone());
    }

    /// A host is cut so that it is not heard (or paused) from `start_ms`.
    pub fn episode_start(&mut self, host: u32, kind: &'static str, start_ms: u64) {
        self.episodes.push(Episode {
            host,
            kind,
            start_ms,
            end_ms: None,
        });
    }

    /// The open episodes of `host` of `kind` end at `end_ms`.
    pub fn episode_end(&mut self, host: u32, kind: &str, end_ms: u64) {
        for e in &mut self.episodes {
            if e.host == host && e.kind == kind && e.end_ms.is_none() {
                e.end_ms = Some(end_ms);
            }
        }
    }

    /// The episode in force on one of `hosts` when an exclusive duplicate began at `t_ms`.
    fn episode_at(&self, hosts: &[u32], t_ms: u64) -> Option<String> {
        let e = self.episodes.iter().find(|e| {
            hosts.contains(&e.host)
                && e.start_ms <= t_ms
                && e.end_ms.is_none_or(|end| t_ms <= end + EPISODE_AFTER_MS)
        })?;
        let end = e.end_ms.map_or("still in force".to_string(), |t| {
            format!("to {:.1} s", t as f64 / 1000.0)
        });
        Some(format!(
            "{} of n{} (from {:.1} s, {end})",
            e.kind,
            e.host + 1,
            e.start_ms as f64 / 1000.0
        ))
    }

    /// Alive copies per replica right now (for `owner=` selectors).
    pub fn owners_snapshot(&self, hosts: &[HostView<'_>], now: u64) -> Vec<(ReplicaId, u32)> {
        let mut out = Vec::new();
        for h in hosts {
            for i in h
                .ground
                .seen(now)
                .into_iter()
                .filter(|i| i.phase.may_be_alive())
            {
                out.push((i.replica, h.index));
            }
        }
        out.sort();
        out
    }

    /// Samples every invariant and metric at `now`.
    pub async fn sample(
        &mut self,
        now: u64,
        hosts: &[HostView<'_>],
        net: &SimNet,
        trace: &mut Trace,
    ) {
        let dt = now.saturating_sub(self.last_sample_ms) as f64 / 1000.0;
        self.last_sample_ms = now;
        let copies = truth::copies(now, hosts, &self.latest);
        self.trace_copies(now, &copies, trace);
        let (desired, running, healthy, extra) = truth::counts(&copies, &self.latest);
        self.missing_replica_seconds += f64::from(desired.saturating_sub(healthy)) * dt;
        self.extra_replica_seconds += f64::from(extra) * dt;
        self.series.push(Sample {
            t_ms: now,
            desired,
            running,
            healthy,
        });
        let fresh = self.check_duplicates(now, &copies, trace);
        self.track_data(now, &copies, trace);
        for (r, on) in fresh {
            agents::trace_decisions(now, &r, &on, hosts, trace).await;
        }
        self.check_capacity(now, hosts, &copies, trace);
        self.watch_mesh_specs(now, hosts, trace).await;
        self.track_rollouts(now, &copies);
        self.update_truth(now, hosts, trace);
        self.check_handoffs(now, hosts, &copies, trace).await;
        self.check_replacements(&copies);
        self.check_convergence(now, &copies, hosts);
        self.check_agents(now, hosts, net, trace).await;
        self.check_false_verdicts(now, hosts, trace);
        if now.is_multiple_of(TRAFFIC_EVERY_MS) {
            let traffic = net.traffic();
            self.traffic_series.push(TrafficSample {
                t_ms: now,
                gossip_bytes: traffic.iter().map(|t| t.gossip_bytes).sum(),
                rpc_bytes: traffic.iter().map(|t| t.rpc_bytes).sum(),
            });
        }
        let totals = net.totals();
        trace.digest(&[
            now,
            u64::from(desired),
            u64::from(running),
            u64::from(healthy),
            totals.delivered,
            totals.dropped_loss,
        ]);
    }

    /// Writes every copy that appeared, changed phase or went away since the last tick.
    fn trace_copies(&mut self, now: u64, copies: &Copies, trace: &mut Trace) {
        let current: BTreeSet<(ReplicaId, u32, String)> = copies
            .iter()
            .flat_map(|(r, list)| {
                list.iter()
                    .map(move |c| (r.clone(), c.host, c.phase.to_string()))
            })
            .collect();
        for (r, h, phase) in current.difference(&self.last_copies) {
            trace.line(now, format!("copy {r} on n{}: {phase}", h + 1));
        }
        for (r, h, _) in self.last_copies.difference(&current) {
            if !current.iter().any(|(r2, h2, _)| r2 == r && h2 == h) {
                trace.line(now, format!("copy {r} on n{}: gone", h + 1));
            }
        }
        self.last_copies = current;
    }

    /// Counts duplicates; returns the exclusive ones that began now, with their hosts.
    fn check_duplicates(
        &mut self,
        now: u64,
        copies: &Copies,
        trace: &mut Trace,
    ) -> Vec<(ReplicaId, Vec<u32>)> {
        let mut fresh = Vec::new();
        let mut excl_now = BTreeSet::new();
        let mut dup_now = BTreeSet::new();
        for (r, list) in copies {
            if list.len() < 2 {
                continue;
            }
            if list[0].exclusive {
                excl_now.insert(r.clone());
                if !self.excl_open.contains_key(r) {
                    self.excl_open.insert(r.clone(), now);
                    self.exclusive_duplicates += 1;
                    let where_: Vec<String> = list
                        .iter()
                        .map(|c| format!("n{} ({})", c.host + 1, c.phase))
                        .collect();
                    self.violation(
                        trace,
                        now,
                        "exclusive-duplicate",
                        format!("{r} alive on {}", where_.join(" and ")),
                    );
                    let on: Vec<u32> = list.iter().map(|c| c.host).collect();
                    let during = self.episode_at(&on, now);
                    if let Some(k) = &during {
                        trace.line(now, format!("that duplicate began during the {k}"));
                    }
                    if let Some(v) = self.violations.last_mut() {
                        v.during = during;
                    }
                    fresh.push((r.clone(), on));
                }
            } else {
                dup_now.insert(r.clone());
                if !self.dup_open.contains_key(r) {
                    self.dup_open.insert(r.clone(), now);
                    self.duplicates += 1;
                }
            }
        }
        for (r, since) in std::mem::take(&mut self.excl_open) {
            if excl_now.contains(&r) {
                self.excl_open.insert(r, since);
            } else {
                self.exclusive_duplicate_longest_ms =
                    self.exclusive_duplicate_longest_ms.max(now - since);
            }
        }
        for (r, since) in std::mem::take(&mut self.dup_open) {
            if dup_now.contains(&r) {
                self.dup_open.insert(r, since);
            } else {
                self.duplicate_longest_ms = self.duplicate_longest_ms.max(now - since);
            }
        }
        fresh
    }

    fn check_capacity(
        &mut self,
        now: u64,
        hosts: &[HostView<'_>],
        copies: &Copies,
        trace: &mut Trace,
    ) {
        let mut used = vec![(0u64, 0u64); hosts.len()];
        for (r, list) in copies {
            let Some(spec) = self.latest.get(&r.workload).and_then(|(_, s)| s.as_ref()) else {
                continue;
            };
            for c in list {
                used[c.host as usize].0 += spec.resources.cpu_millis;
                used[c.host as usize].1 += spec.resources.memory_bytes;
            }
        }
        for h in hosts {
            let (cpu, mem) = used[h.index as usize];
            let over = cpu > h.record.cpu_millis || mem > h.record.memory_bytes;
            if over && self.over_capacity.insert(h.index) {
                let detail = format!(
                    "{} holds {cpu} mCPU / {mem} B of {} mCPU / {} B",
                    h.name, h.record.cpu_millis, h.record.memory_bytes
                );
                self.violation(trace, now, "over-capacity", detail);
            } else if !over {
                self.over_capacity.remove(&h.index);
            }
        }
    }

    fn check_replacements(&mut self, copies: &Copies) {
        let mut still = Vec::new();
        for p in std::mem::take(&mut self.pending_replacements) {
            let wanted = self
                .latest
                .get(&p.replica.workload)
                .and_then(|(v, s)| v.as_ref().and(s.as_ref()))
                .is_some_and(|s| p.replica.replica < s.replicas);
            if !wanted {
                continue;
            }
            let ready = copies.get(&p.replica).and_then(|list| {
                list.iter()
                    .filter(|c| c.phase == shoal_core::instance::Phase::Running)
                    .map(|c| c.ready_ms)
                    .min()
            });
            match ready {
                Some(t) => {
                    let ms = t.saturating_sub(p.crash_ms);
                    if p.exclusive {
                        self.replacement_exclusive_ms.push(ms)
                    } else {
                        self.replacement_ms.push(ms)
                    }
                }
                None => still.push(p),
            }
        }
        self.pending_replacements = still;
    }
}
