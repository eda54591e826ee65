//! Reading a scenario: TOML into raw tables (unknown keys refused), then every value checked,
//! each problem reported as `file:line:col: what is wrong`.

use serde::Deserialize;
use shoal_core::resources::{parse_cpu_millis, parse_memory_bytes};
use shoal_core::spec::{parse_duration_ms, WorkloadSpec};
use toml::Spanned;

use super::{
    Action, Assertions, Event, GossipOverrides, HostConfig, InstanceProfile, Mesh, PartitionKind,
    RevisionFaults, RolloutOutcome, Scenario, Selector, WorkloadEntry,
};
use crate::net::LinkFault;

/// Everything wrong with a scenario file.
#[derive(Debug)]
pub struct ScenarioError(pub Vec<String>);

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for ScenarioError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    #[serde(default)]
    description: String,
    duration: Spanned<String>,
    #[serde(default = "one")]
    seed: u64,
    mesh: RawMesh,
    #[serde(default)]
    hosts: Vec<Spanned<super::hosts::RawHosts>>,
    #[serde(default)]
    network: RawLink,
    #[serde(default)]
    gossip: RawGossip,
    #[serde(default)]
    host: RawHost,
    #[serde(default)]
    workloads: Vec<Spanned<RawWorkload>>,
    #[serde(default)]
    events: Vec<Spanned<RawEvent>>,
    #[serde(default)]
    assert: RawAssert,
}

fn one() -> u64 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMesh {
    nodes: u32,
    #[serde(default)]
    zones: Vec<String>,
    #[serde(default)]
    cpu: Option<String>,
    #[serde(default)]
    memory: Option<String>,
    #[serde(default)]
    join_rate: u32,
    #[serde(default)]
    cells: Option<Spanned<i64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLink {
    loss: Option<f64>,
    delay: Option<String>,
    jitter: Option<String>,
    duplicate: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawGossip {
    interval: Option<String>,
    phi: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHost {
    reconcile_interval: Option<String>,
    fence_timeout: Option<String>,
    fence_delay: Option<String>,
    handoff_max: Option<String>,
    stop: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    start: Option<String>,
    start_fail: Option<f64>,
    crash_after: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    #[serde(default)]
    at: Option<String>,
    spec: String,
    start: Option<String>,
    start_fail: Option<f64>,
    crash_after: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    at: String,
    action: String,
    target: Option<String>,
    from: Option<String>,
    to: Option<String>,
    via: Option<String>,
    kind: Option<String>,
    keep_data: Option<bool>,
    restart_after: Option<String>,
    duration: Option<String>,
    loss: Option<f64>,
    delay: Option<String>,
    jitter: Option<String>,
    duplicate: Option<f64>,
    jump: Option<String>,
    drift_ppm: Option<i64>,
    workload: Option<String>,
    replicas: Option<u32>,
    spec: Option<String>,
    start: Option<String>,
    start_fail: Option<f64>,
    crash_after: Option<String>,
    down: Option<String>,
    up: Option<String>,
    count: Option<u32>,
    mode: Option<String>,
    expect: Option<String>,
    frozen: Option<String>,
    period: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAssert {
    converged_within: Option<String>,
    exclusive_duplicates_max: Option<u64>,
    replacement_p99_max: Option<String>,
    false_dead_max: Option<u64>,
    false_verdicts_max: Option<u64>,
    false_member_deaths_max: Option<u64>,
    false_cell_downs_max: Option<u64>,
    liveness_within: Option<String>,
    rollbacks_min: Option<u64>,
    rollbacks_max: Option<u64>,
}

/// Line and column (1-based) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (u32, u32) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() as u32 + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u32 + 1;
    (line, col)
}

/// Collects problems with their locations.
struct Check<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<String>,
    /// The scenario's cells (0: none), for `cell=` selectors.
    cells: u32,
}

impl Check<'_> {
    fn at(&mut self, offset: usize, msg: impl std::fmt::Display) {
        let (line, col) = line_col(self.text, offset);
        self.errors
            .push(format!("{}:{line}:{col}: {msg}", self.file));
    }

    fn ms(&mut self, offset: usize, field: &str, v: &Option<String>) -> Option<u64> {
        let text = v.as_deref()?;
        parse_duration_ms(text)
            .map_err(|e| self.at(offset, format!("{field}: {e}")))
            .ok()
    }

    fn prob(&mut self, offset: usize, field: &str, v: Option<f64>) -> f64 {
        match v {
            Some(p) if !(0.0..=1.0).contains(&p) => {
                self.at(
                    offset,
                    format!("{field}: {p} is not a probability (0.0 to 1.0)"),
                );
                0.0
            }
            Some(p) => p,
            None => 0.0,
        }
    }

    fn selector(&mut self, offset: usize, field: &str, v: &Option<String>, n: u32) -> Selector {
        match v.as_deref().map(|t| Selector::parse(t, n, self.cells)) {
            None => Selector::One,
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                self.at(offset, format!("{field}: {e}"));
                Selector::One
            }
        }
    }

    fn link(&mut self, offset: usize, raw: &RawLink) -> LinkFault {
        let ms = |c: &mut Self, f: &str, v: &Option<String>| c.ms(offset, f, v).unwrap_or(0);
        LinkFault {
            loss: self.prob(offset, "loss", raw.loss),
            delay: std::time::Duration::from_millis(ms(self, "delay", &raw.delay)),
            jitter: std::time::Duration::from_millis(ms(self, "jitter", &raw.jitter)),
            duplicate: self.prob(offset, "duplicate", raw.duplicate),
        }
    }

    fn profile(
        &mut self,
        offset: usize,
        raw: &RawProfile,
        base: InstanceProfile,
    ) -> InstanceProfile {
        InstanceProfile {
            start_ms: self
                .ms(offset, "start", &raw.start)
                .unwrap_or(base.start_ms),
            start_fail: raw.start_fail.map_or(base.start_fail, |p| {
                self.prob(offset, "start_fail", Some(p))
            }),
            crash_after_ms: self
                .ms(offset, "crash_after", &raw.crash_after)
                .or(base.crash_after_ms),
        }
    }

    fn spec(&mut self, offset: usize, text: &str) -> Option<WorkloadSpec> {
        let (line, _) = line_col(self.text, offset);
        let label = format!("{} (spec at line {line})", self.file);
        WorkloadSpec::from_toml_str(text, &label)
            .map_err(|e| self.errors.push(e.to_string()))
            .ok()
    }
}

/// The most hosts the real-code tier runs.
const MESH_NODES_MAX: u32 = 10_000;

/// Parses and checks a scenario; `file` only labels the messages.
pub fn parse_scenario(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
    let raw: RawScenario = toml::from_str(text).map_err(|e| {
        let at = e.span().map(|s| line_col(text, s.start));
        let msg = e.message().to_string();
        ScenarioError(vec![match at {
            Some((l, c)) => format!("{file}:{l}:{c}: {msg}"),
            None => format!("{file}: {msg}"),
        }])
    })?;
    let mut c = Check {
        file,
        text,
        errors: Vec::new(),
        cells: 0,
    };
    let n = raw.mesh.nodes;
    if n == 0 || n > MESH_NODES_MAX {
        c.at(
            0,
            format!("mesh.nodes: {n} hosts; the real-code tier runs 1 to {MESH_NODES_MAX}"),
        );
    }
    if let Some(cells) = &raw.mesh.cells {
        match u32::try_from(*cells.get_ref()) {
            Ok(k) if k >= 1 && k <= n => c.cells = k,
            _ => c.at(
                cells.span().start,
                format!(
                    "mesh.cells: {} cells for {n} hosts; give 1 to {n} (each cell needs a host)",
                    cells.get_ref()
                ),
            ),
        }
    }
    let duration_ms = c.ms(
        raw.duration.span().start,
        "duration",
        &Some(raw.duration.get_ref().clone()),
    );
    let cpu = raw.mesh.cpu.as_deref().unwrap_or("4");
    let memory = raw.mesh.memory.as_deref().unwrap_or("8Gi");
    let cpu_millis = parse_cpu_millis(cpu)
        .map_err(|e| c.at(0, format!("mesh.cpu: {e}")))
        .unwrap_or(0);
    let memory_bytes = parse_memory_bytes(memory)
        .map_err(|e| c.at(0, format!("mesh.memory: {e}")))
        .unwrap_or(0);
    let zones = if raw.mesh.zones.is_empty() {
        vec!["z1".to_string()]
    } else {
        raw.mesh.zones
    };
    let network = c.link(0, &raw.network);
    let gossip = GossipOverrides {
        interval_ms: c.ms(0, "gossip.interval", &raw.gossip.interval),
        phi: raw.gossip.phi,
    };
    let d = HostConfig::default();
    let h = &raw.host;
    let host = HostConfig {
        reconcile_interval_ms: c
            .ms(0, "host.reconcile_interval", &h.reconcile_interval)
            .unwrap_or(d.reconcile_interval_ms),
        fence_timeout_ms: c
            .ms(0, "host.fence_timeout", &h.fence_timeout)
            .unwrap_or(d.fence_timeout_ms),
        fence_delay_ms: c
            .ms(0, "host.fence_delay", &h.fence_delay)
            .unwrap_or(d.fence_delay_ms),
        handoff_max_ms: c
            .ms(0, "host.handoff_max", &h.handoff_max)
            .unwrap_or(d.handoff_max_ms),
        stop_ms: c.ms(0, "host.stop", &h.stop).unwrap_or(d.stop_ms),
    };
    if host.fence_delay_ms <= host.fence_timeout_ms {
        c.at(0, "host.fence_delay must be longer than host.fence_timeout (a new owner waits out the old one's fencing)");
    }
    let mut workloads = Vec::new();
    for w in &raw.workloads {
        let off = w.span().start;
        let w = w.get_ref();
        let at_ms = c.ms(off, "at", &w.at).unwrap_or(0);
        let raw = RawProfile {
            start: w.start.clone(),
            start_fail: w.start_fail,
            crash_after: w.crash_after.clone(),
        };
        let profile = c.profile(off, &raw, InstanceProfile::default());
        if let Some(spec) = c.spec(off, &w.spec) {
            workloads.push(WorkloadEntry {
                at_ms,
                spec,
                profile,
            });
        }
    }
    let mut events = Vec::new();
    for e in &raw.events {
        let off = e.span().start;
        if let Some(ev) = event(&mut c, off, e.get_ref(), n) {
            events.push(ev);
        }
    }
    events.sort_by_key(|e| e.at_ms);
    let a = &raw.assert;
    let assert = Assertions {
        converged_within_ms: c.ms(0, "assert.converged_within", &a.converged_within),
        exclusive_duplicates_max: a.exclusive_duplicates_max.unwrap_or(0),
        replacement_p99_max_ms: c.ms(0, "assert.replacement_p99_max", &a.replacement_p99_max),
        false_dead_max: a.false_dead_max,
        false_verdicts_max: a.false_verdicts_max,
        false_member_deaths_max: a.false_member_deaths_max,
        false_cell_downs_max: a.false_cell_downs_max,
        liveness_within_ms: c
            .ms(0, "assert.liveness_within", &a.liveness_within)
            .unwrap_or(super::LIVENESS_WITHIN_MS),
        rollbacks_min: a.rollbacks_min,
        rollbacks_max: a.rollbacks_max,
    };
    if let (Some(min), Some(max)) = (a.rollbacks_min, a.rollbacks_max) {
        if min > max {
            c.at(
                0,
                format!("assert.rollbacks_min ({min}) is above assert.rollbacks_max ({max})"),
            );
        }
    }
    let duration_ms = duration_ms.unwrap_or(0);
    for e in &events {
        let end_ms = e.at_ms + e.action.span_ms();
        if e.at_ms > duration_ms {
            c.errors.push(format!(
                "{file}:{}: event at {} ms is after the end of the run ({duration_ms} ms)",
                e.line, e.at_ms
            ));
        } else if end_ms > duration_ms {
            c.errors.push(format!(
                "{file}:{}: {} at {} ms ends at {end_ms} ms, after the end of the run \
                 ({duration_ms} ms): shorten it or lengthen `duration`",
                e.line,
                e.action.name(),
                e.at_ms
            ));
        }
    }
    unknown_workloads(&mut c, &workloads, &events);
    let raw_hosts: Vec<_> = raw
        .hosts
        .iter()
        .map(|h| (h.span().start, h.get_ref()))
        .collect();
    let hosts = {
        let errors = std::cell::RefCell::new(Vec::new());
        let settings = super::hosts::settings(
            &raw_hosts,
            n,
            |off, field, v| match v.as_deref().map(parse_duration_ms) {
                Some(Err(e)) => {
                    errors.borrow_mut().push((off, format!("{field}: {e}")));
                    None
                }
                Some(Ok(t)) => Some(t),
                None => None,
            },
            |off, msg| errors.borrow_mut().push((off, msg)),
        );
        for (off, msg) in errors.into_inner() {
            c.at(off, msg);
        }
        settings
    };
    for (i, h) in &hosts {
        if h.join_at_ms.is_some_and(|t| t >= duration_ms) {
            c.errors.push(format!(
                "{file}: hosts.join_at: n{} joins at or after the end of the run ({duration_ms} ms)",
                i + 1
            ));
        }
    }
    if !c.errors.is_empty() {
        return Err(ScenarioError(c.errors));
    }
    let mesh = Mesh {
        nodes: n,
        zones,
        cpu_millis,
        memory_bytes,
        join_rate: raw.mesh.join_rate,
        cells: c.cells,
        hosts,
    };
    Ok(Scenario {
        name: raw.name,
        description: raw.description,
        duration_ms,
        seed: raw.seed,
        mesh,
        network,
        gossip,
        host,
        workloads,
        events,
        assert,
    })
}

/// A `starve` event: `frozen` < `period`, both above zero, and a `duration`.
fn starve(c: &mut Check<'_>, off: usize, e: &RawEvent, target: Selector) -> Option<Action> {
    let need = |c: &mut Check<'_>, field: &str, v: &Option<String>| -> Option<u64> {
        if v.is_none() {
            c.at(off, format!("action \"starve\" needs `{field}`"));
            return None;
        }
        c.ms(off, field, v)
    };
    let frozen_ms = need(c, "frozen", &e.frozen);
    let period_ms = need(c, "period", &e.period);
    let duration_ms = need(c, "duration", &e.duration);
    let delay_ms = c.ms(off, "delay", &e.delay).unwrap_or(0);
    let (frozen_ms, period_ms, duration_ms) = (frozen_ms?, period_ms?, duration_ms?);
    if frozen_ms == 0 || frozen_ms >= period_ms {
        c.at(
            off,
            format!("frozen: {frozen_ms} ms must be above 0 and below the period ({period_ms} ms)"),
        );
        return None;
    }
    if e.loss.is_some() || e.jitter.is_some() || e.duplicate.is_some() {
        c.at(
            off,
            "starve takes `delay` only; loss and jitter are a `slow-link`",
        );
    }
    Some(Action::Starve {
        target,
        frozen_ms,
        period_ms,
        delay_ms,
        duration_ms,
    })
}

fn event(c: &mut Check<'_>, off: usize, e: &RawEvent, n: u32) -> Option<Event> {
    let at_ms = c.ms(off, "at", &Some(e.at.clone()))?;
    let line = line_col(c.text, off).0;
    let target = c.selector(off, "target", &e.target, n);
    let via = c.selector(off, "via", &e.via, n);
    let need = |c: &mut Check<'_>, field: &str, v: &Option<String>| -> Option<String> {
        if v.is_none() {
            c.at(off, format!("action {:?} needs `{field}`", e.action));
        }
        v.clone()
    };
    if e.expect.is_some() && e.action != "update" {
        c.at(
            off,
            format!(
                "expect: only an update's rollout has an outcome to expect, not a {}",
                e.action
            ),
        );
    }
    let action = match e.action.as_str() {
        "crash" => Action::Crash {
            target,
            keep_data: e.keep_data.unwrap_or(true),
            restart_after_ms: c.ms(off, "restart_after", &e.restart_after),
        },
        "restart" => Action::Restart { target },
        "upgrade" => Action::Upgrade {
            target,
            down_ms: match &e.duration {
                Some(_) => c.ms(off, "duration", &e.duration)?,
                None => 1_000,
            },
        },
        "pause" => {
            let text = need(c, "duration", &e.duration);
            Action::Pause {
                target,
                duration_ms: c.ms(off, "duration", &text)?,
            }
        }
        "starve" => starve(c, off, e, target)?,
        "slow-link" => {
            let text = need(c, "duration", &e.duration);
            let fault = c.link(
                off,
                &RawLink {
                    loss: e.loss,
                    delay: e.delay.clone(),
                    jitter: e.jitter.clone(),
                    duplicate: e.duplicate,
                },
            );
            if fault == LinkFault::default() {
                c.at(
                    off,
                    "action \"slow-link\" needs `loss`, `delay` or `jitter`",
                );
            }
            Action::SlowLink {
                target,
                fault,
                duration_ms: c.ms(off, "duration", &text)?,
            }
        }
        "partition" => Action::Partition {
            kind: match e.kind.as_deref().unwrap_or("bisect") {
                "bisect" => PartitionKind::Bisect,
                "isolate" => PartitionKind::Isolate,
                "minority" => PartitionKind::Minority,
                "majority" => PartitionKind::Majority,
                "one_way" | "one-way" | "one_way_out" => PartitionKind::OneWay,
                "one_way_in" => PartitionKind::OneWayIn,
                "bridge" => PartitionKind::Bridge,
                other => {
                    c.at(off, format!("kind: {other:?} is not a partition (bisect, isolate, minority, majority, one_way, one_way_in, bridge)"));
                    return None;
                }
            },
            target: e.target.as_ref().map(|_| target),
            duration_ms: c.ms(off, "duration", &e.duration),
        },
        "heal" => Action::Heal,
        "link" => Action::Link {
            from: c.selector(off, "from", &e.from.clone().or(Some("all".into())), n),
            to: c.selector(off, "to", &e.to.clone().or(Some("all".into())), n),
            fault: c.link(
                off,
                &RawLink {
                    loss: e.loss,
                    delay: e.delay.clone(),
                    jitter: e.jitter.clone(),
                    duplicate: e.duplicate,
                },
            ),
            duration_ms: c.ms(off, "duration", &e.duration),
        },
        "clock" => Action::Clock {
            target,
            jump_ms: signed_ms(c, off, &e.jump),
            drift_ppm: e.drift_ppm,
        },
        "instance" => {
            let raw = RawProfile {
                start: e.start.clone(),
                start_fail: e.start_fail,
                crash_after: e.crash_after.clone(),
            };
            Action::Instance {
                workload: need(c, "workload", &e.workload)?,
                profile: c.profile(off, &raw, InstanceProfile::default()),
            }
        }
        "apply" => {
            let text = need(c, "spec", &e.spec)?;
            Action::Apply {
                spec: Box::new(c.spec(off, &text)?),
                via,
            }
        }
        "scale" => Action::Scale {
            workload: need(c, "workload", &e.workload)?,
            replicas: e.replicas.or_else(|| {
                c.at(off, "action \"scale\" needs `replicas`");
                None
            })?,
            via,
        },
        "update" => Action::Update {
            workload: need(c, "workload", &e.workload)?,
            via,
            faults: revision_faults(c, off, e),
            expect: expect(c, off, e.expect.as_deref()),
        },
        "delete" => Action::Delete {
            workload: need(c, "workload", &e.workload)?,
            via,
        },
        "drain" => Action::Drain {
            target,
            draining: true,
        },
        "undrain" => Action::Drain {
            target,
            draining: false,
        },
        "flap" => Action::Flap {
            target,
            down_ms: c.ms(off, "down", &e.down).unwrap_or(2_000),
            up_ms: c.ms(off, "up", &e.up).unwrap_or(5_000),
            count: e.count.unwrap_or(3),
            crash: match e.mode.as_deref().unwrap_or("network") {
                "crash" => true,
                "network" => false,
                other => {
                    c.at(
                        off,
                        format!("mode: {other:?} is not a flap mode (crash, network)"),
                    );
                    false
                }
            },
        },
        other => {
            c.at(off, format!("action: {other:?} is not an action (crash, restart, pause, starve, slow-link, partition, heal, link, clock, instance, apply, scale, update, delete, drain, undrain, flap)"));
            return None;
        }
    };
    Some(Event {
        at_ms,
        line,
        action,
    })
}

/// An update's faults of its new revision (`start`, `start_fail`, `crash_after`), checked as the
/// `instance` event's.
fn revision_faults(c: &mut Check<'_>, off: usize, e: &RawEvent) -> RevisionFaults {
    RevisionFaults {
        start_ms: c.ms(off, "start", &e.start),
        start_fail: e.start_fail.map(|p| c.prob(off, "start_fail", Some(p))),
        crash_after_ms: c.ms(off, "crash_after", &e.crash_after),
    }
}

/// An update's `expect`: how its rollout must end.
fn expect(c: &mut Check<'_>, off: usize, text: Option<&str>) -> Option<RolloutOutcome> {
    match text? {
        "complete" => Some(RolloutOutcome::Complete),
        "rolled-back" | "rolled_back" => Some(RolloutOutcome::RolledBack),
        other => {
            let why = format!(
                "expect: {other:?} is not a rollout outcome to expect (complete, rolled-back)"
            );
            c.at(off, why);
            None
        }
    }
}

/// An event about a workload that neither `[[workloads]]` nor an `apply` event names could never
/// take effect: refused before the run.
fn unknown_workloads(c: &mut Check<'_>, workloads: &[WorkloadEntry], events: &[Event]) {
    let mut known: std::collections::BTreeSet<&str> =
        workloads.iter().map(|w| w.spec.name.as_str()).collect();
    for e in events {
        if let Action::Apply { spec, .. } = &e.action {
            known.insert(spec.name.as_str());
        }
    }
    for e in events {
        let named = match &e.action {
            Action::Instance { workload, .. }
            | Action::Scale { workload, .. }
            | Action::Update { workload, .. }
            | Action::Delete { workload, .. } => workload,
            _ => continue,
        };
        if !known.contains(named.as_str()) {
            let list: Vec<&str> = known.iter().copied().collect();
            c.errors.push(format!(
                "{}:{}: {} names workload {named:?}, which no [[workloads]] entry or apply \
                 event defines (known: {})",
                c.file,
                e.line,
                e.action.name(),
                list.join(", ")
            ));
        }
    }
}

fn signed_ms(c: &mut Check<'_>, off: usize, v: &Option<String>) -> i64 {
    let Some(text) = v.as_deref() else { return 0 };
    let (sign, body) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    c.ms(off, "jump", &Some(body.to_string()))
        .map_or(0, |ms| sign * ms as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name = \"t\"\nduration = \"10s\"\n[mesh]\nnodes = 3\n";

    #[test]
    fn a_minimal_scenario_parses_with_defaults() {
        let sc = parse_scenario(GOOD, "t.toml").unwrap();
        assert_eq!((sc.duration_ms, sc.mesh.nodes, sc.seed), (10_000, 3, 1));
        assert_eq!(sc.mesh.zones, ["z1"]);
    }

    #[test]
    fn every_problem_is_reported_with_its_location() {
        let text = format!(
            "{GOOD}[[events]]\nat = \"2s\"\naction = \"crash\"\ntarget = \"9\"\n\n\
             [[events]]\nat = \"soon\"\naction = \"explode\"\n"
        );
        let err = parse_scenario(&text, "bad.toml").unwrap_err().to_string();
        assert!(
            err.contains("bad.toml:5:1: target: \"9\": the mesh has 3 hosts"),
            "{err}"
        );
        assert!(
            err.contains("bad.toml:10:1: at: \"soon\" is not a duration"),
            "{err}"
        );
        let err = parse_scenario(&format!("{GOOD}surprise = 1\n"), "x.toml").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("x.toml:5:1: unknown field `surprise`"),
            "{err}"
        );
    }

    #[test]
    fn an_inline_spec_error_names_its_line() {
        let text = format!("{GOOD}[[workloads]]\nspec = \"\"\"\nname = \"Bad Name\"\n\"\"\"\n");
        let err = parse_scenario(&text, "w.toml").unwrap_err().to_string();
        assert!(err.contains("w.toml (spec at line 5)"), "{err}");
    }

    const WEB: &str = "[[workloads]]\nspec = \"\"\"\nname = \"web\"\n[process]\n\
                       command = [\"web\"]\n[resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\"\"\"\n";

    #[test]
    fn an_update_carries_the_faults_of_its_revision_and_what_it_expects() {
        let text = format!(
            "{GOOD}{WEB}[[events]]\nat = \"5s\"\naction = \"update\"\nworkload = \"web\"\n\
             crash_after = \"500ms\"\nexpect = \"rolled-back\"\n\
             [[events]]\nat = \"6s\"\naction = \"update\"\nworkload = \"web\"\n\
             [assert]\nrollbacks_min = 1\n"
        );
        let sc = parse_scenario(&text, "u.toml").unwrap();
        let Action::Update { faults, expect, .. } = &sc.events[0].action else {
            panic!("{:?}", sc.events[0]);
        };
        assert_eq!(faults.crash_after_ms, Some(500));
        assert_eq!((faults.start_ms, faults.start_fail), (None, None));
        assert_eq!(*expect, Some(RolloutOutcome::RolledBack));
        let base = InstanceProfile::default();
        assert_eq!(faults.over(base).crash_after_ms, Some(500));
        assert_eq!(faults.over(base).start_ms, base.start_ms);
        let Action::Update { faults, expect, .. } = &sc.events[1].action else {
            panic!("{:?}", sc.events[1]);
        };
        assert!(faults.is_empty() && expect.is_none());
        assert_eq!(sc.assert.rollbacks_min, Some(1));
    }

    #[test]
    fn a_bad_update_field_is_reported_with_its_location() {
        let text = format!(
            "{GOOD}{WEB}[[events]]\nat = \"5s\"\naction = \"update\"\nworkload = \"web\"\n\
             crash_after = \"soon\"\nstart_fail = 2.0\nexpect = \"fine\"\n\
             [[events]]\nat = \"6s\"\naction = \"crash\"\nexpect = \"complete\"\n"
        );
        let err = parse_scenario(&text, "u.toml").unwrap_err().to_string();
        for wanted in [
            "u.toml:14:1: crash_after: \"soon\" is not a duration",
            "u.toml:14:1: start_fail: 2 is not a probability (0.0 to 1.0)",
            "u.toml:14:1: expect: \"fine\" is not a rollout outcome to expect (complete, \
             rolled-back)",
            "u.toml:21:1: expect: only an update's rollout has an outcome to expect, not a crash",
        ] {
            assert!(err.contains(wanted), "{wanted:?} not in:\n{err}");
        }
    }
}
