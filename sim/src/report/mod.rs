//! The report of one run: JSON (its last stdout line with `--json`), a terminal summary, the
//! timeline SVG and the trace, all from the world after the run.

mod charts;
mod html;
mod svg;

use serde::Serialize;

use crate::check::stats::Dist;
use crate::check::{
    EventFailure, FaultWindow, LivenessOutcome, RollbackSeen, Rollout, Sample, Violation,
};
use crate::world::World;

pub use html::{page as html_page, GLOSSARY};
pub use svg::timeline_svg;

/// One run's results.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Hash of the event trace: equal for two runs of one seed on one commit.
    pub trace_hash: String,
    /// Running = desired after the last fault, within the bound when one is asserted.
    pub converged: bool,
    /// Time from the end of the last fault to convergence.
    pub converged_after_last_fault_ms: Option<u64>,
    /// p99 of the time to a healthy copy elsewhere, over the replicas of crashed hosts.
    pub replacement_p99_ms: Option<u64>,
    /// p50 of the same.
    pub replacement_p50_ms: Option<u64>,
    /// Replacement times of normal replicas.
    pub replacement: Dist,
    /// Replacement times of exclusive replicas (they wait out the fencing delay).
    pub replacement_exclusive: Dist,
    /// Crash to dead, per observer.
    pub detection: Dist,
    /// Crash to dead in every live observer's view.
    pub detection_all: Dist,
    /// Exclusive duplicate episodes.
    pub exclusive_duplicates: u64,
    /// Longest exclusive duplicate.
    pub exclusive_duplicate_longest_ms: u64,
    /// Exclusive replicas with data started away from their data without approval or policy.
    pub data_started_empty: u64,
    /// The same by `on_data_loss = "start-empty"` after `sticky_for` (allowed).
    pub data_started_empty_by_policy: u64,
    /// Replicas with data that are not exclusive, moved to a host without it (allowed).
    pub data_moved_empty: u64,
    /// Running copies of replicas that are not exclusive stopped for a move while no copy
    /// elsewhere ran (each a `healthy-copy-stopped` violation).
    pub healthy_copies_stopped: u64,
    /// Running copies stopped for a move, judged (handoffs; the violations included).
    pub handoff_stops: u64,
    /// Samples at which a host's runtime events overflowed: its stops went unjudged.
    pub handoff_stops_unjudged: u64,
    /// Normal duplicate episodes (allowed: availability first).
    pub duplicates: u64,
    /// Longest normal duplicate.
    pub duplicate_longest_ms: u64,
    /// Replica-seconds without a healthy copy.
    pub missing_replica_seconds: f64,
    /// Replica-seconds of extra copies.
    pub extra_replica_seconds: f64,
    /// Membership changes.
    pub membership_changes: u64,
    /// Replica moves they caused.
    pub moves: u64,
    /// Moves of replicas whose host left.
    pub forced_moves: u64,
    /// Live hosts declared dead while nothing explained it.
    pub false_dead: u64,
    /// Members declared dead by an observer while that incarnation was up and reachable from
    /// it within the last second (docs/sim.md, "False verdicts").
    pub false_member_deaths: u64,
    /// Cells held down by an agent of another cell while one of their members was up and
    /// reachable from it within the last second.
    pub false_cell_downs: u64,
    /// Every member dropped from an observer's live set (true and false verdicts).
    pub member_deaths_seen: u64,
    /// Member deaths the agents' probes declared (true and false; each should be seen).
    pub member_deaths_declared: u64,
    /// Readings of an agent's member verdicts (one agent at one sample).
    pub verdict_reads: u64,
    /// Readings missed because the agent's gossip state was busy.
    pub verdict_reads_missed: u64,
    /// Every cell an agent stopped holding up (true and false verdicts).
    pub cell_downs_seen: u64,
    /// The first false verdicts (up to 200), with observer and subject.
    pub false_verdicts: Vec<crate::check::FalseVerdict>,
    /// Frozen parts of `starve` duty cycles that ran.
    pub starve_cycles: u64,
    /// Latest any agent up at the end served a reconciler timer after its deadline, ms of
    /// simulated time (the host loop wakes at `Reconciler::poll_timeout`).
    pub timer_late_max_ms: u64,
    /// Host loop rounds the agents up at the end ran, per agent per simulated s.
    pub host_rounds_per_agent_s: f64,
    /// How the placement memo the agents and the checker share served them
    /// (`shoal_core::cells::PlacementMemo`): what the run cost, not what it decided.
    pub placement_memo: shoal_core::cells::MemoStats,
    /// Ack to every live agent.
    pub spec_propagation: Dist,
    /// Automatic rollbacks seen: the mesh wrote an earlier revision's spec again.
    pub rollbacks: usize,
    /// Each of them.
    pub rollback_writes: Vec<RollbackSeen>,
    /// Per update event, in order: its send to complete or rolled back (None: neither by the
    /// end of the timeline, or superseded).
    pub rollout_ms: Vec<Option<u64>>,
    /// Per update event: its revisions, how its rollout ended and when.
    pub rollouts: Vec<Rollout>,
    /// Gossip messages per host per simulated second.
    pub gossip_messages_per_node_per_s: f64,
    /// Gossip bytes per host per simulated second.
    pub gossip_bytes_per_node_per_s: f64,
    /// Store-sync and API RPC bytes per host per simulated second.
    pub rpc_bytes_per_node_per_s: f64,
    /// Number of invariant violations.
    pub invariant_violations: usize,
    /// The violations.
    pub violations: Vec<Violation>,
    /// Scenario assertions that failed.
    pub assertion_failures: Vec<String>,
    /// Scheduled events that could not take effect (each fails the run).
    pub event_failures: Vec<EventFailure>,
    /// The liveness phase after the timeline.
    pub liveness: Option<LivenessOutcome>,
    /// What failed, one word each (sorted, distinct): a violation's kind
    /// (`exclusive-duplicate`, `over-capacity`, `acknowledged-spec-missing`,
    /// `healthy-copy-stopped`), `event-failed`,
    /// `liveness`, `assertion`.
    pub failure_kinds: Vec<String>,
    /// Refused API calls and failed starts.
    pub refused: Vec<String>,
    /// Simulated seconds.
    pub sim_seconds: f64,
    /// Wall-clock seconds.
    pub wall_seconds: f64,
    /// Simulated seconds per wall second.
    pub sim_per_wall: f64,
    /// Hosts.
    pub nodes: u32,
    /// The concrete fault schedule (resolved selectors).
    pub schedule: Vec<String>,
    /// The command that replays this run.
    pub replay: String,
    /// Passed: no violation, no failed assertion.
    pub passed: bool,
    /// Plot points (left out of the JSON line).
    #[serde(skip)]
    pub series: Vec<Sample>,
    /// Gossip and RPC bytes sent by all hosts so far, every second (left out of the JSON line).
    #[serde(skip)]
    pub traffic_series: Vec<crate::check::TrafficSample>,
    /// Replacement times of normal replicas, each (left out of the JSON line).
    #[serde(skip)]
    pub replacement_samples_ms: Vec<u64>,
    /// Replacement times of exclusive replicas, each (left out of the JSON line).
    #[serde(skip)]
    pub replacement_exclusive_samples_ms: Vec<u64>,
    /// Plot windows (left out of the JSON line).
    #[serde(skip)]
    pub windows: Vec<FaultWindow>,
    /// The kept trace lines (left out of the JSON line).
    #[serde(skip)]
    pub trace: Vec<String>,
}

/// Builds the report of a finished run.
pub fn build(world: &World, wall_seconds: f64, replay: String) -> Report {
    let c = &world.checker;
    let sc = &world.scenario;
    let sim_seconds = world.now_ms() as f64 / 1000.0;
    let n = f64::from(sc.mesh.nodes.max(1));
    let traffic = world.net.traffic();
    let per = |f: &dyn Fn(&crate::net::HostTraffic) -> u64| {
        traffic.iter().map(f).sum::<u64>() as f64 / n / sim_seconds.max(1e-9)
    };
    let all_replacements: Vec<u64> = c
        .replacement_ms
        .iter()
        .chain(&c.replacement_exclusive_ms)
        .copied()
        .collect();
    let everything = Dist::of(&all_replacements);
    let converged_after = c
        .timeline_converged_at_ms
        .map(|t| t.saturating_sub(c.last_fault_ms));
    let mut failures = Vec::new();
    let converged = match (converged_after, sc.assert.converged_within_ms) {
        (None, _) => false,
        (Some(after), Some(bound)) => after <= bound,
        (Some(_), None) => true,
    };
    if let Some(bound) = sc.assert.converged_within_ms {
        if !converged {
            let after = match converged_after {
                Some(ms) => format!("converged {ms} ms after it"),
                None => "never converged".to_string(),
            };
            failures.push(format!(
                "not converged within {bound} ms of the last fault ({after})"
            ));
        }
    }
    // Over the bound, the duplicates already fail the run as violations (kind
    // `exclusive-duplicate`); a bound above 0 tolerates some.
    let duplicates_over = c.exclusive_duplicates > sc.assert.exclusive_duplicates_max;
    if let (Some(max), Some(p99)) = (sc.assert.replacement_p99_max_ms, everything.p99_ms) {
        if p99 > max {
            failures.push(format!("replacement p99 {p99} ms over {max} ms"));
        }
    }
    if let Some(max) = sc.assert.false_dead_max {
        if c.false_dead > max {
            failures.push(format!("{} false dead verdicts (max {max})", c.false_dead));
        }
    }
    verdict_assertions(c, &sc.assert, &mut failures);
    rollback_assertions(c, &sc.assert, &mut failures);
    let liveness_failed = c.liveness.as_ref().is_some_and(|l| !l.passed);
    let kinds = failure_kinds(c, duplicates_over, &failures, liveness_failed);
    let passed = kinds.is_empty();
    Report {
        scenario: sc.name.clone(),
        seed: world.seed,
        trace_hash: world.trace.hash_hex(),
        converged,
        converged_after_last_fault_ms: converged_after,
        replacement_p99_ms: everything.p99_ms,
        replacement_p50_ms: everything.p50_ms,
        replacement: Dist::of(&c.replacement_ms),
        replacement_exclusive: Dist::of(&c.replacement_exclusive_ms),
        detection: Dist::of(&c.detection_ms),
        detection_all: Dist::of(&c.detection_all_ms),
        exclusive_duplicates: c.exclusive_duplicates,
        exclusive_duplicate_longest_ms: c.exclusive_duplicate_longest_ms,
        data_started_empty: c.data_started_empty,
        data_started_empty_by_policy: c.data_started_empty_by_policy,
        data_moved_empty: c.data_moved_empty,
        healthy_copies_stopped: c.healthy_copies_stopped,
        handoff_stops: c.handoff_stops,
        handoff_stops_unjudged: c.handoff_stops_unjudged,
        duplicates: c.duplicates,
        duplicate_longest_ms: c.duplicate_longest_ms,
        missing_replica_seconds: round3(c.missing_replica_seconds),
        extra_replica_seconds: round3(c.extra_replica_seconds),
        membership_changes: c.membership_changes,
        moves: c.moves,
        forced_moves: c.forced_moves,
        false_dead: c.false_dead,
        false_member_deaths: c.false_member_deaths,
        false_cell_downs: c.false_cell_downs,
        member_deaths_seen: c.member_deaths_seen,
        member_deaths_declared: c.member_deaths_declared,
        verdict_reads: c.verdict_reads,
        verdict_reads_missed: c.verdict_reads_missed,
        cell_downs_seen: c.cell_downs_seen,
        false_verdicts: c.false_verdicts.clone(),
        starve_cycles: c.starve_cycles,
        timer_late_max_ms: world
            .hosts
            .iter()
            .filter_map(|h| h.running.as_ref())
            .map(|a| a.host().stats().timer_late_max_ms)
            .max()
            .unwrap_or(0),
        host_rounds_per_agent_s: {
            let up = world.hosts.iter().filter_map(|h| h.running.as_ref());
            let (agents, rounds) = up.fold((0u64, 0u64), |(n, r), a| {
                (n + 1, r + a.host().stats().rounds)
            });
            let secs = world.now_ms() as f64 / 1000.0;
            match agents > 0 && secs > 0.0 {
                true => round3(rounds as f64 / agents as f64 / secs),
                false => 0.0,
            }
        },
        placement_memo: c.memo.stats(),
        spec_propagation: Dist::of(&c.propagation_ms),
        rollbacks: c.rollbacks.len(),
        rollback_writes: c.rollbacks.clone(),
        rollout_ms: c.rollouts.iter().map(|r| r.rollout_ms).collect(),
        rollouts: c.rollouts.clone(),
        gossip_messages_per_node_per_s: round3(per(&|t| t.gossip_messages)),
        gossip_bytes_per_node_per_s: round3(per(&|t| t.gossip_bytes)),
        rpc_bytes_per_node_per_s: round3(per(&|t| t.rpc_bytes)),
        invariant_violations: c.violations.len(),
        violations: c.violations.clone(),
        assertion_failures: failures,
        event_failures: c.event_failures.clone(),
        liveness: c.liveness.clone(),
        failure_kinds: kinds,
        refused: c.refused.clone(),
        sim_seconds,
        wall_seconds: round3(wall_seconds),
        sim_per_wall: round3(sim_seconds / wall_seconds.max(1e-9)),
        nodes: sc.mesh.nodes,
        schedule: world.schedule.clone(),
        replay,
        passed,
        series: c.series.clone(),
        windows: c.windows.clone(),
        traffic_series: c.traffic_series.clone(),
        replacement_samples_ms: c.replacement_ms.clone(),
        replacement_exclusive_samples_ms: c.replacement_exclusive_ms.clone(),
        trace: world.trace.lines(),
    }
}

/// The bounds on false verdicts (docs/sim.md, "False verdicts"): on both kinds together, on
/// member deaths (which also fails when the checker could not see them) and on cell downs.
fn verdict_assertions(
    c: &crate::check::Checker,
    a: &crate::scenario::Assertions,
    failures: &mut Vec<String>,
) {
    let (members, cells) = (c.false_member_deaths, c.false_cell_downs);
    if let Some(max) = a.false_verdicts_max {
        if members + cells > max {
            failures.push(format!(
                "{} false verdicts ({members} member deaths, {cells} cell downs; max {max})",
                members + cells
            ));
        }
    }
    if let Some(max) = a.false_member_deaths_max {
        if members > max {
            failures.push(format!("{members} false member deaths (max {max})"));
        }
        if let Some(why) = c.member_verdicts_blind() {
            failures.push(format!("false member deaths not judged: {why}"));
        }
    }
    if let Some(max) = a.false_cell_downs_max {
        if cells > max {
            failures.push(format!("{cells} false cell downs (max {max})"));
        }
    }
}

/// The scenario's bounds on automatic rollbacks and each update's `expect`.
fn rollback_assertions(
    c: &crate::check::Checker,
    a: &crate::scenario::Assertions,
    failures: &mut Vec<String>,
) {
    let seen = c.rollbacks.len() as u64;
    if let Some(min) = a.rollbacks_min.filter(|min| seen < *min) {
        failures.push(format!("{seen} automatic rollbacks seen (min {min})"));
    }
    if let Some(max) = a.rollbacks_max.filter(|max| seen > *max) {
        failures.push(format!("{seen} automatic rollbacks seen (max {max})"));
    }
    failures.extend(c.rollouts.iter().filter_map(Rollout::unexpected));
}

fn failure_kinds(
    c: &crate::check::Checker,
    duplicates_over: bool,
    assertions: &[String],
    liveness: bool,
) -> Vec<String> {
    let mut kinds = std::collections::BTreeSet::new();
    for v in c
        .violations
        .iter()
        .filter(|v| duplicates_over || v.kind != "exclusive-duplicate")
    {
        kinds.insert(v.kind.clone());
    }
    if !c.event_failures.is_empty() {
        kinds.insert("event-failed".into());
    }
    if liveness {
        kinds.insert("liveness".into());
    }
    if !assertions.is_empty() {
        kinds.insert("assertion".into());
    }
    kinds.into_iter().collect()
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl Report {
    /// Whether and when the run converged after its last fault, in words.
    fn convergence(&self) -> String {
        match (self.converged, self.converged_after_last_fault_ms) {
            (_, None) => "no, not by the end of the run".to_string(),
            (true, Some(ms)) => format!("yes, {ms} ms after the last fault"),
            (false, Some(ms)) => format!("no, only {ms} ms after the last fault (over the bound)"),
        }
    }

    /// The terminal summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let verdict = if self.passed { "PASSED" } else { "FAILED" };
        s += &format!(
            "{verdict}  {} seed {}  trace_hash {}\n",
            self.scenario, self.seed, self.trace_hash
        );
        s += &format!(
            "  {} hosts, {:.1} simulated s in {:.2} wall s ({:.1}x)\n",
            self.nodes, self.sim_seconds, self.wall_seconds, self.sim_per_wall
        );
        s += &format!("  converged: {}\n", self.convergence());
        s += &format!(
            "  failure detection (per observer): {}\n",
            self.detection.show()
        );
        s += &format!(
            "  failure detection (all observers): {}\n",
            self.detection_all.show()
        );
        s += &format!("  replacement (normal): {}\n", self.replacement.show());
        s += &format!(
            "  replacement (exclusive): {}\n",
            self.replacement_exclusive.show()
        );
        s += &format!("  spec propagation: {}\n", self.spec_propagation.show());
        s += &self.rollouts_summary();
        if self.data_started_empty + self.data_started_empty_by_policy + self.data_moved_empty > 0 {
            s += &format!(
                "  data: {} exclusive replicas started empty without approval or policy, {} by \
                 on_data_loss = \"start-empty\", {} other replicas moved empty\n",
                self.data_started_empty, self.data_started_empty_by_policy, self.data_moved_empty
            );
        }
        s += &format!(
            "  handoffs: {} running copies stopped for a move, {} before a copy elsewhere ran\n",
            self.handoff_stops, self.healthy_copies_stopped
        );
        s += &format!(
            "  exclusive duplicates: {} (longest {} ms); normal duplicates: {} (longest {} ms)\n",
            self.exclusive_duplicates,
            self.exclusive_duplicate_longest_ms,
            self.duplicates,
            self.duplicate_longest_ms
        );
        s += &format!("  replica-seconds missing {:.1}, extra {:.1}; moves {} ({} forced) over {} membership changes\n", self.missing_replica_seconds, self.extra_replica_seconds, self.moves, self.forced_moves, self.membership_changes);
        s += &format!(
            "  reconciler timers served at most {} ms late\n",
            self.timer_late_max_ms
        );
        let m = &self.placement_memo;
        s += &format!(
            "  work: {:.1} host rounds per agent per simulated s; placement memo: cell level {} \
             computed of {} asked, node level {} of {}\n",
            self.host_rounds_per_agent_s,
            m.cell_misses,
            m.cell_hits + m.cell_misses,
            m.node_misses,
            m.node_hits + m.node_misses
        );
        s += &format!("  false dead verdicts: {}; gossip {:.1} msg/s, {:.0} B/s per host; rpc {:.0} B/s per host\n", self.false_dead, self.gossip_messages_per_node_per_s, self.gossip_bytes_per_node_per_s, self.rpc_bytes_per_node_per_s);
        s += &format!(
            "  false verdicts: {} member deaths (of {} seen, {} declared by probes), {} cell downs (of {} seen){}\n",
            self.false_member_deaths,
            self.member_deaths_seen,
            self.member_deaths_declared,
            self.false_cell_downs,
            self.cell_downs_seen,
            match self.starve_cycles {
                0 => String::new(),
                n => format!("; {n} starve cycles ran"),
            }
        );
        for v in &self.violations {
            s += &format!(
                "  VIOLATION at {:.3}s {}: {}\n",
                v.t_ms as f64 / 1000.0,
                v.kind,
                v.detail
            );
            if let Some(k) = &v.during {
                s += &format!("    began during the {k}\n");
            }
        }
        if let Some(l) = &self.liveness {
            s += &match (l.passed, l.converged_after_ms) {
                (true, Some(after)) => format!(
                    "  liveness: whole {after} ms after the timeline ended (bound {} ms){}\n",
                    l.within_ms,
                    undone_note(&l.undone)
                ),
                _ => format!(
                    "  LIVENESS FAILED: not whole within {} ms of the timeline's end{}: {}\n",
                    l.within_ms,
                    undone_note(&l.undone),
                    l.gaps.join("; ")
                ),
            };
        }
        for e in &self.event_failures {
            s += &format!(
                "  EVENT FAILED at {:.3}s: {}: {}\n",
                e.t_ms as f64 / 1000.0,
                e.event,
                e.why
            );
        }
        for f in &self.assertion_failures {
            s += &format!("  ASSERTION FAILED: {f}\n");
        }
        if !self.passed {
            s += &format!("  replay: {}\n", self.replay);
        }
        s
    }
}

impl Report {
    /// The rollouts' and rollbacks' lines of the summary (none without an update).
    fn rollouts_summary(&self) -> String {
        let mut s = String::new();
        for r in &self.rollouts {
            let to = match r.rolled_back_to {
                Some(to) => format!(" to revision {to}"),
                None => String::new(),
            };
            let took = match r.rollout_ms {
                Some(ms) => format!(" in {ms} ms"),
                None => String::new(),
            };
            s += &format!(
                "  rollout of {} revision {} -> {}: {}{to}{took} ({})\n",
                r.workload,
                r.from_revision,
                r.revision,
                r.outcome.as_str(),
                r.event
            );
        }
        if !self.rollouts.is_empty() || self.rollbacks > 0 {
            let each: Vec<String> = (self.rollback_writes.iter())
                .map(|b| {
                    format!(
                        "{} revision {} -> {} seen at {:.1} s",
                        b.workload,
                        b.from_revision,
                        b.to_revision,
                        b.seen_ms as f64 / 1000.0
                    )
                })
                .collect();
            let list = match each.is_empty() {
                true => String::new(),
                false => format!(" ({})", each.join("; ")),
            };
            s += &format!("  automatic rollbacks: {}{list}\n", self.rollbacks);
        }
        s
    }
}

fn undone_note(undone: &[String]) -> String {
    match undone.is_empty() {
        true => String::new(),
        false => format!(" after: {}", undone.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_line(report: &Report, starts: &str) -> String {
        let summary = report.summary();
        let line = summary.lines().find(|l| l.trim_start().starts_with(starts));
        line.unwrap_or_else(|| panic!("no {starts:?} line in:\n{summary}"))
            .to_string()
    }

    #[test]
    fn the_summary_says_when_the_run_converged_in_words() {
        let mut report = Report {
            converged: true,
            converged_after_last_fault_ms: Some(2001),
            ..Report::default()
        };
        assert_eq!(
            summary_line(&report, "converged"),
            "  converged: yes, 2001 ms after the last fault"
        );
        report.converged = false;
        assert_eq!(
            summary_line(&report, "converged"),
            "  converged: no, only 2001 ms after the last fault (over the bound)"
        );
        report.converged_after_last_fault_ms = None;
        assert_eq!(
            summary_line(&report, "converged"),
            "  converged: no, not by the end of the run"
        );
        assert_eq!(
            summary_line(&report, "replacement (normal)"),
            "  replacement (normal): no samples"
        );
    }

    #[test]
    fn no_debug_formatting_reaches_the_summary() {
        let report = Report::default();
        let summary = report.summary();
        for debug in ["Some(", "None", "[]", "\"\""] {
            assert!(!summary.contains(debug), "{debug} in:\n{summary}");
        }
    }
}
