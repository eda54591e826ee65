//! Scenarios: the mesh, the workloads and the timeline of faults, read from TOML
//! (docs/scenarios.md) and checked before anything runs.
//!
//! A scenario is data. Selectors ("one", "3", "10%", "zone=a", "owner=db", ...) stay symbolic
//! here and are resolved when their event fires, with the run's generator, so that a seed fixes
//! the concrete schedule; the report writes that concrete schedule back out.

mod hosts;
mod parse;
pub mod select;

pub use hosts::{HostCaps, HostSettings};
pub use parse::{parse_scenario, ScenarioError};
pub use select::Selector;

use shoal_core::spec::WorkloadSpec;

use crate::net::LinkFault;

/// A checked scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Short name (used in reports and file names).
    pub name: String,
    /// What it exercises.
    pub description: String,
    /// Simulated run time.
    pub duration_ms: u64,
    /// Seed used when none is given on the command line.
    pub seed: u64,
    /// The hosts.
    pub mesh: Mesh,
    /// Fault of every link from the start (loss, delay, duplication).
    pub network: LinkFault,
    /// Gossip timing, when overridden.
    pub gossip: GossipOverrides,
    /// The modelled host agent's timing.
    pub host: HostConfig,
    /// Workloads applied during the run.
    pub workloads: Vec<WorkloadEntry>,
    /// The timeline, sorted by time (stable for equal times).
    pub events: Vec<Event>,
    /// What must hold at the end.
    pub assert: Assertions,
}

/// The hosts of a scenario.
#[derive(Clone, Debug)]
pub struct Mesh {
    /// How many hosts.
    pub nodes: u32,
    /// Zones, given to hosts round-robin.
    pub zones: Vec<String>,
    /// Declared CPU of every host.
    pub cpu_millis: u64,
    /// Declared memory of every host.
    pub memory_bytes: u64,
    /// Hosts joined per simulated second at start (0: all at once).
    pub join_rate: u32,
    /// Cells `c1..cN`, given to hosts round-robin (host index `i` is in cell `i % cells`); 0:
    /// no cells, every host in the default cell (a mesh of one gossip domain, as before).
    pub cells: u32,
    /// Hosts with settings of their own (`[[hosts]]`), by index: capabilities, a late join.
    pub hosts: std::collections::BTreeMap<u32, HostSettings>,
}

impl Mesh {
    /// What host `index` can run, when the scenario says (`None`: anything, said to nobody).
    pub fn caps_of(&self, index: u32) -> Option<&HostCaps> {
        self.hosts.get(&index).and_then(|h| h.caps.as_ref())
    }

    /// When host `index` joins, when the scenario makes it join late.
    pub fn join_at_ms(&self, index: u32) -> Option<u64> {
        self.hosts.get(&index).and_then(|h| h.join_at_ms)
    }

    /// The cell of host `index`, when the scenario has cells.
    pub fn cell_of(&self, index: u32) -> Option<String> {
        (self.cells > 0).then(|| format!("c{}", index % self.cells + 1))
    }
}

/// Gossip tuning overrides (None: the agent's default).
#[derive(Clone, Debug, Default)]
pub struct GossipOverrides {
    /// Gossip interval.
    pub interval_ms: Option<u64>,
    /// Failure detector threshold.
    pub phi: Option<f64>,
}

/// Timing of the modelled host agent (the stand-in until the real host loop lands).
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Time between two reconcile rounds.
    pub reconcile_interval_ms: u64,
    /// An owner that sees no strict majority for this long stops its exclusive replicas.
    pub fence_timeout_ms: u64,
    /// A new owner of an exclusive replica whose old owner died waits this long (> fence).
    pub fence_delay_ms: u64,
    /// An orphaned normal replica is stopped at the latest this long after its owner changed.
    pub handoff_max_ms: u64,
    /// Time for a stop (the grace of a clean shutdown).
    pub stop_ms: u64,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            reconcile_interval_ms: 250,
            fence_timeout_ms: 3_000,
            fence_delay_ms: 5_000,
            handoff_max_ms: 10_000,
            stop_ms: 200,
        }
    }
}

/// How the simulated runtime treats a workload's instances.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InstanceProfile {
    /// Time from start to running and healthy.
    pub start_ms: u64,
    /// Probability that a start fails.
    pub start_fail: f64,
    /// A running instance exits after this long (a crash loop), if set.
    pub crash_after_ms: Option<u64>,
}

impl Default for InstanceProfile {
    fn default() -> Self {
        InstanceProfile {
            start_ms: 500,
            start_fail: 0.0,
            crash_after_ms: None,
        }
    }
}

/// Instance faults of one revision of a workload (an `update` event's `start`, `start_fail`,
/// `crash_after`): the fields given replace the workload's profile for the instances started
/// from that revision only.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RevisionFaults {
    /// Start latency.
    pub start_ms: Option<u64>,
    /// Probability that a start fails.
    pub start_fail: Option<f64>,
    /// A running instance exits after this long.
    pub crash_after_ms: Option<u64>,
}

impl RevisionFaults {
    /// No field given: the revision behaves as the workload does.
    pub fn is_empty(&self) -> bool {
        *self == RevisionFaults::default()
    }

    /// The revision's profile: these fields over the workload's `base`.
    pub fn over(&self, base: InstanceProfile) -> InstanceProfile {
        InstanceProfile {
            start_ms: self.start_ms.unwrap_or(base.start_ms),
            start_fail: self.start_fail.unwrap_or(base.start_fail),
            crash_after_ms: self.crash_after_ms.or(base.crash_after_ms),
        }
    }
}

/// How the rollout of an `update` ended (docs/sim.md, "Rollouts and automatic rollbacks").
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutOutcome {
    /// Every replica ran healthy at the new revision (and stayed so for the hold).
    Complete,
    /// The mesh wrote the content of an earlier revision back, and every replica ran healthy at
    /// it.
    RolledBack,
    /// Another update or a delete of the workload came first.
    Superseded,
    /// Neither by the end of the timeline.
    Unfinished,
}

impl RolloutOutcome {
    /// The name in scenario files and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutOutcome::Complete => "complete",
            RolloutOutcome::RolledBack => "rolled-back",
            RolloutOutcome::Superseded => "superseded",
            RolloutOutcome::Unfinished => "unfinished",
        }
    }
}

/// A workload and when it is applied.
#[derive(Clone, Debug)]
pub struct WorkloadEntry {
    /// When it is applied.
    pub at_ms: u64,
    /// The spec (the `shoal apply` format).
    pub spec: WorkloadSpec,
    /// Its instances' behaviour.
    pub profile: InstanceProfile,
}

/// One timeline entry.
#[derive(Clone, Debug)]
pub struct Event {
    /// When it fires.
    pub at_ms: u64,
    /// Line in the scenario file.
    pub line: u32,
    /// What happens.
    pub action: Action,
}

/// Which way a partition cuts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionKind {
    /// Two halves at random.
    Bisect,
    /// The target against everyone else.
    Isolate,
    /// A minority (containing the target, if given) against the majority.
    Minority,
    /// A majority (containing the target, if given) against the minority.
    Majority,
    /// The target's messages to everyone else are lost; it still hears them.
    OneWay,
    /// Everyone's messages to the target are lost; it is still heard.
    OneWayIn,
    /// Two halves that only the target (one host) still joins.
    Bridge,
}

/// What an event does.
#[derive(Clone, Debug)]
pub enum Action {
    /// Hosts die (instances with them); they come back after `restart_after_ms` if set.
    Crash {
        /// Which hosts.
        target: Selector,
        /// Keep the data dir across the restart (false: an empty disk).
        keep_data: bool,
        /// Restart after this long.
        restart_after_ms: Option<u64>,
    },
    /// Crashed hosts come back.
    Restart {
        /// Which hosts (among the crashed ones).
        target: Selector,
    },
    /// A planned agent restart, as an upgrade makes one (`shoal agent --restart-grace`): the
    /// agent stops (its instances and its guard run on), and a new one starts over the same
    /// runtime, disk and guard `down_ms` later.
    Upgrade {
        /// Which hosts.
        target: Selector,
        /// How long no agent runs.
        down_ms: u64,
    },
    /// Agents freeze (instances keep running); nothing reaches or leaves them.
    Pause {
        /// Which hosts.
        target: Selector,
        /// For how long.
        duration_ms: u64,
    },
    /// Agents starved of CPU: each frozen (as a pause freezes it) for `frozen_ms` of every
    /// `period_ms`, all in step, from the event for `duration_ms`; with `delay_ms`, everything
    /// they send or receive is also that much later (docs/scenarios.md, "Slow hosts").
    Starve {
        /// Which hosts.
        target: Selector,
        /// Frozen part of each period.
        frozen_ms: u64,
        /// The period (`frozen_ms` < `period_ms`).
        period_ms: u64,
        /// Extra delay on every message to or from the hosts while starved (0: none).
        delay_ms: u64,
        /// For how long.
        duration_ms: u64,
    },
    /// Loss and delay on every link to and from the target hosts, restored after `duration_ms`.
    SlowLink {
        /// Which hosts.
        target: Selector,
        /// The fault on their links (both ways).
        fault: LinkFault,
        /// For how long.
        duration_ms: u64,
    },
    /// A network partition.
    Partition {
        /// Its shape.
        kind: PartitionKind,
        /// The side or host it is about.
        target: Option<Selector>,
        /// Heals by itself after this long, if set.
        duration_ms: Option<u64>,
    },
    /// Every partition heals.
    Heal,
    /// Loss, delay, jitter and duplication on the links from `from` to `to`.
    Link {
        /// Senders.
        from: Selector,
        /// Receivers.
        to: Selector,
        /// The fault.
        fault: LinkFault,
        /// Cleared after this long, if set.
        duration_ms: Option<u64>,
    },
    /// Wall clocks jump or drift (tokio's monotonic time is unaffected, as on a real host).
    Clock {
        /// Which hosts.
        target: Selector,
        /// Jump, in ms (negative: backwards).
        jump_ms: i64,
        /// Drift from now on, in parts per million.
        drift_ppm: Option<i64>,
    },
    /// A workload's instances start slowly, fail to start or crash-loop from now on.
    Instance {
        /// The workload.
        workload: String,
        /// The new profile.
        profile: InstanceProfile,
    },
    /// `shoal apply`.
    Apply {
        /// The spec.
        spec: Box<WorkloadSpec>,
        /// The agent that receives it.
        via: Selector,
    },
    /// A new replica count.
    Scale {
        /// The workload.
        workload: String,
        /// Replicas.
        replicas: u32,
        /// The agent that receives it.
        via: Selector,
    },
    /// A new spec version (a changed environment, `SHOAL_SIM_REVISION`): every replica is
    /// replaced.
    Update {
        /// The workload.
        workload: String,
        /// The agent that receives it.
        via: Selector,
        /// How the new revision's instances fail (none: as the workload's).
        faults: RevisionFaults,
        /// How its rollout must end (`expect`), checked at the end of the run.
        expect: Option<RolloutOutcome>,
    },
    /// `shoal delete`.
    Delete {
        /// The workload.
        workload: String,
        /// The agent that receives it.
        via: Selector,
    },
    /// Hosts drain (or undrain).
    Drain {
        /// Which hosts.
        target: Selector,
        /// False to undrain.
        draining: bool,
    },
    /// A host goes down and up `count` times.
    Flap {
        /// Which hosts.
        target: Selector,
        /// Down time.
        down_ms: u64,
        /// Up time between two downs.
        up_ms: u64,
        /// How many cycles.
        count: u32,
        /// Crash the host (true) or cut its network (false).
        crash: bool,
    },
}

impl Action {
    /// The action's name in a scenario file.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Crash { .. } => "crash",
            Action::Restart { .. } => "restart",
            Action::Upgrade { .. } => "upgrade",
            Action::Pause { .. } => "pause",
            Action::Starve { .. } => "starve",
            Action::SlowLink { .. } => "slow-link",
            Action::Partition { .. } => "partition",
            Action::Heal => "heal",
            Action::Link { .. } => "link",
            Action::Clock { .. } => "clock",
            Action::Instance { .. } => "instance",
            Action::Apply { .. } => "apply",
            Action::Scale { .. } => "scale",
            Action::Update { .. } => "update",
            Action::Delete { .. } => "delete",
            Action::Drain { draining: true, .. } => "drain",
            Action::Drain {
                draining: false, ..
            } => "undrain",
            Action::Flap { .. } => "flap",
        }
    }

    /// Whether this event disturbs the mesh (the "last fault" that convergence is timed from):
    /// every action does, instance profile changes included (the end of a crash loop is one).
    pub fn is_fault(&self) -> bool {
        true
    }

    /// When the disturbance it starts ends, relative to its start.
    pub fn span_ms(&self) -> u64 {
        match self {
            Action::Crash {
                restart_after_ms, ..
            } => restart_after_ms.unwrap_or(0),
            Action::Pause { duration_ms, .. }
            | Action::Starve { duration_ms, .. }
            | Action::SlowLink { duration_ms, .. } => *duration_ms,
            Action::Upgrade { down_ms, .. } => *down_ms,
            Action::Partition { duration_ms, .. } | Action::Link { duration_ms, .. } => {
                duration_ms.unwrap_or(0)
            }
            Action::Flap {
                down_ms,
                up_ms,
                count,
                ..
            } => (*down_ms + *up_ms) * u64::from(*count),
            _ => 0,
        }
    }
}

/// What a scenario asserts at the end of a run.
#[derive(Clone, Debug)]
pub struct Assertions {
    /// Running = desired within this long after the last fault ended.
    pub converged_within_ms: Option<u64>,
    /// At most this many exclusive duplicates (default 0).
    pub exclusive_duplicates_max: u64,
    /// p99 of the time to replace a crashed host's replicas.
    pub replacement_p99_max_ms: Option<u64>,
    /// At most this many false dead verdicts.
    pub false_dead_max: Option<u64>,
    /// At most this many false verdicts (`false_member_deaths` + `false_cell_downs`,
    /// docs/sim.md "False verdicts"); `None`: counted, never failed on.
    pub false_verdicts_max: Option<u64>,
    /// At most this many false member deaths; the run also fails when the checker could not
    /// see the member verdicts (it read none, or the probes declared deaths it did not see).
    pub false_member_deaths_max: Option<u64>,
    /// At most this many false cell downs.
    pub false_cell_downs_max: Option<u64>,
    /// The liveness phase after the timeline: every host up and running = desired within this
    /// long (docs/sim.md).
    pub liveness_within_ms: u64,
    /// At least this many automatic rollbacks seen.
    pub rollbacks_min: Option<u64>,
    /// At most this many automatic rollbacks seen.
    pub rollbacks_max: Option<u64>,
}

/// The default bound of the liveness phase.
pub const LIVENESS_WITHIN_MS: u64 = 60_000;

impl Scenario {
    /// When the last disturbance ends (0 when there is none).
    pub fn last_fault_end_ms(&self) -> u64 {
        let events = self.events.iter().filter(|e| e.action.is_fault());
        let faults = events.map(|e| e.at_ms + e.action.span_ms());
        let applies = self.workloads.iter().map(|w| w.at_ms);
        let joins = self.mesh.hosts.values().filter_map(|h| h.join_at_ms);
        faults.chain(applies).chain(joins).max().unwrap_or(0)
    }
}
