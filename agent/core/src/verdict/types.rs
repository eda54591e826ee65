//! What the member detector exchanges with its shell and its peers: its configuration, the probe
//! messages, what the shell observed, verdicts, events and counters, and the gossiped suspects
//! list.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Longest node name a probe message may carry.
pub const NAME_MAX: usize = 255;

/// The timers and bounds of the detector. [`Default`] is what agents run.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeConfig {
    /// A member's heartbeat quiet this long starts a probe (chitchat raises a heartbeat once per
    /// gossip round, 250 ms: shorter would probe healthy members all the time). Another member
    /// gossiping that it suspects one starts a probe at once.
    pub quiet_ms: u64,
    /// Direct pings are sent again this often while a probe runs.
    pub ping_every_ms: u64,
    /// No answer this long after the first ping: ask others (indirect probes).
    pub ping_timeout_ms: u64,
    /// No answer this long after the indirect probes went out: suspect.
    pub indirect_timeout_ms: u64,
    /// Members asked to probe for this agent.
    pub indirect_k: usize,
    /// The shortest suspicion (reached with [`Self::confirmations_k`] confirmations).
    pub suspicion_min_ms: u64,
    /// The longest suspicion (no confirmation).
    pub suspicion_max_ms: u64,
    /// Independent suspicions that bring the suspicion down to its minimum.
    pub confirmations_k: u32,
    /// Highest local health score (timeouts are multiplied by `health + 1`).
    pub health_max: u32,
    /// A wake this much later than planned is a stall of this agent.
    pub stall_slack_ms: u64,
    /// Most indirect probes run for others at once; further requests are dropped and counted.
    pub relays_max: usize,
    /// Most members tracked; further ones keep the heartbeat verdict (counted).
    pub members_max: usize,
    /// Most members a suspecter tells at once (`Suspect` notices).
    pub notify_max: usize,
    /// Nobody heard from (no message, no heartbeat) for longer than this, while at least two
    /// members are held alive: this agent is deaf (its links, not theirs), and the rest of the
    /// silence counts as nobody's, as a stall's does.
    pub deaf_after_ms: u64,
    /// At most this much of one deaf stretch is excused: an agent cut off from everyone still
    /// judges in the end.
    pub deaf_max_ms: u64,
    /// Watching (compact gossip, where heartbeats no longer reach every member every round):
    /// each agent probes only the members that follow it on a ring of every member judged alive,
    /// this many, each once per [`Self::quiet_ms`] of silence; every member is watched by as
    /// many others. The rest learn of a failure from the watchers' notices and gossip.
    pub watchers: usize,
    /// Watching: a member held dead is pinged again at most this often (its answer revives it:
    /// with compact gossip its heartbeats no longer would, after a partition heals).
    pub dead_ping_ms: u64,
    /// Watching: most members held dead pinged per tick.
    pub dead_pings_per_tick: usize,
    /// Watching: the shortest suspicion, whatever the confirmations. Watching, a freeze always
    /// meets a probe (each member is pinged every [`Self::quiet_ms`]), so the path from the
    /// first unanswered ping to dead must outlast the longest freeze tolerated (0.4 s) with room
    /// for the thawed agent to run and answer under load; the members told by the watchers
    /// finish about a ping timeout after them.
    pub watch_suspicion_min_ms: u64,
    /// The last look: a suspicion that ran out ends in a death only once a ping sent at least
    /// this long before (an answer's round trip) and at most [`Self::last_look_window_ms`] before
    /// went unanswered; with none such, one more ping goes out and is waited for. Not scaled by
    /// local health: it stands for the network's round trip, not this agent's trust in itself.
    pub last_look_wait_ms: u64,
    /// See [`Self::last_look_wait_ms`]: how recent the decisive ping must be (a ping sent
    /// before a partition healed must not decide after it).
    pub last_look_window_ms: u64,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            quiet_ms: 300,
            ping_every_ms: 25,
            ping_timeout_ms: 100,
            indirect_timeout_ms: 150,
            indirect_k: 3,
            suspicion_min_ms: 200,
            suspicion_max_ms: 600,
            confirmations_k: 3,
            health_max: 8,
            stall_slack_ms: 60,
            relays_max: 256,
            members_max: 4_096,
            notify_max: 64,
            deaf_after_ms: 300,
            deaf_max_ms: 10_000,
            watchers: 2,
            dead_ping_ms: 1_000,
            dead_pings_per_tick: 2,
            watch_suspicion_min_ms: 450,
            last_look_wait_ms: 50,
            last_look_window_ms: 75,
        }
    }
}

impl ProbeConfig {
    /// How long a suspicion with `confirmations` independent confirmations lasts, before local
    /// health.
    pub fn suspicion_ms(&self, confirmations: u32) -> u64 {
        let (min, max) = (self.suspicion_min_ms as f64, self.suspicion_max_ms as f64);
        let k = f64::from(self.confirmations_k.max(1));
        let frac = (f64::from(confirmations) + 1.0).ln() / (k + 1.0).ln();
        (max - (max - min) * frac.min(1.0)).max(min) as u64
    }

    /// How long a suspicion lasts in the mode the prober runs (`watching`): the floor
    /// [`Self::watch_suspicion_min_ms`] applies while watching.
    pub fn suspicion_in_mode_ms(&self, confirmations: u32, watching: bool) -> u64 {
        let ms = self.suspicion_ms(confirmations);
        if watching {
            ms.max(self.watch_suspicion_min_ms)
        } else {
            ms
        }
    }

    /// The longest a member that answers nothing and gossips nothing stays undeclared, counted
    /// from its last heartbeat, at full health: the line between frozen and dead.
    pub fn dead_after_ms(&self) -> u64 {
        self.quiet_ms + self.ping_timeout_ms + self.indirect_timeout_ms + self.suspicion_max_ms
    }
}

/// A probe message between agents. Small: a name, two numbers and an address at most.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeMsg {
    /// Are you `target` of generation `target_gen`, and alive?
    Ping {
        /// Matches the answer to the probe.
        nonce: u64,
        /// The name asked about.
        target: String,
        /// Its incarnation (gossip generation) asked about.
        target_gen: u64,
    },
    /// Alive: `name` of generation `generation` answers `nonce` (directly or relayed).
    Ack {
        /// The probe answered.
        nonce: u64,
        /// Who answers.
        name: String,
        /// Its incarnation.
        generation: u64,
    },
    /// Ping `target` at `target_addr` for me and relay its answer.
    PingReq {
        /// The asker's probe.
        nonce: u64,
        /// The member to ping.
        target: String,
        /// Its incarnation.
        target_gen: u64,
        /// Its gossip address.
        target_addr: SocketAddr,
    },
    /// I pinged the member you asked about and heard nothing in time.
    Nack {
        /// The asker's probe.
        nonce: u64,
    },
    /// I suspect `target` of generation `target_gen` (its probes, direct and indirect, went
    /// unanswered): probe it yourself now. Sent by the first suspecters only.
    Suspect {
        /// The member suspected.
        target: String,
        /// Its incarnation.
        target_gen: u64,
    },
}

impl ProbeMsg {
    /// Whether the message is within bounds (names at most [`NAME_MAX`] bytes).
    pub fn valid(&self) -> bool {
        match self {
            ProbeMsg::Ping { target, .. }
            | ProbeMsg::PingReq { target, .. }
            | ProbeMsg::Suspect { target, .. } => !target.is_empty() && target.len() <= NAME_MAX,
            ProbeMsg::Ack { name, .. } => !name.is_empty() && name.len() <= NAME_MAX,
            ProbeMsg::Nack { .. } => true,
        }
    }
}

/// One member as the shell read it from gossip this tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Node name.
    pub name: String,
    /// Gossip generation (incarnation).
    pub generation: u64,
    /// Gossip address (where probes go).
    pub addr: SocketAddr,
    /// Its heartbeat counter as gossip last carried it.
    pub heartbeat: u64,
    /// The heartbeat detector (chitchat's phi accrual) holds it live.
    pub live: bool,
    /// Its build answers probes (wire 11 and later).
    pub probes: bool,
    /// It announced a leave or a planned restart.
    pub leaving: bool,
    /// How many other live members gossip that they suspect it.
    pub suspected_by: u32,
}

/// A verdict on one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Heard from lately, or answers probes.
    Alive,
    /// Silent and unanswering; may refute.
    Suspect,
    /// Declared dead.
    Dead,
}

/// A change of verdict, for events and counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerdictEvent {
    /// Node name.
    pub name: String,
    /// Its generation.
    pub generation: u64,
    /// What happened.
    pub kind: VerdictKind,
    /// When (the tick's `now_ms`).
    pub at_ms: u64,
}

/// What a [`VerdictEvent`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerdictKind {
    /// Probes went unanswered: suspected.
    Suspect,
    /// A suspected member answered or gossiped: alive again.
    Refuted,
    /// The suspicion ran out: dead.
    Dead,
    /// A member held dead gossiped again.
    Revived,
}

impl VerdictKind {
    /// The event's kind as operators read it (`member-suspect`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Suspect => "member-suspect",
            VerdictKind::Refuted => "member-refuted",
            VerdictKind::Dead => "member-dead",
            VerdictKind::Revived => "member-revived",
        }
    }
}

/// What the detector counted: messages ignored and why, probes, stalls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProbeCounters {
    /// Probes started (a member's heartbeat went quiet).
    pub probes: u64,
    /// Probes that went indirect.
    pub indirect: u64,
    /// Messages from an address that is no member, or naming no member: ignored.
    pub non_member: u64,
    /// Messages about another incarnation (a ping for an earlier generation, an answer from
    /// another): ignored.
    pub stale: u64,
    /// Answers to no probe running: ignored.
    pub unexpected: u64,
    /// Indirect probe requests dropped because [`ProbeConfig::relays_max`] run.
    pub relays_dropped: u64,
    /// Members left to the heartbeat verdict past [`ProbeConfig::members_max`].
    pub untracked: u64,
    /// Wakes later than the slack: this agent stalled.
    pub stalls: u64,
    /// Members this detector declared dead (the simulator checks that it saw each).
    pub declared_dead: u64,
    /// Milliseconds of silence from everyone excused as this agent's own deafness.
    pub deaf_ms: u64,
    /// Pings sent to members held dead (watching; see [`ProbeConfig::dead_ping_ms`]).
    pub dead_pings: u64,
    /// Probes of members never heard from since first seen (watching: a newcomer's first look
    /// at members its watchers may have declared dead before it came).
    pub verified: u64,
    /// Pings sent as a suspicion ran out because none recent was out (the last look,
    /// [`ProbeConfig::last_look_wait_ms`]).
    pub last_looks: u64,
}

/// An outgoing probe message.
pub type Outgoing = (SocketAddr, ProbeMsg);

/// Parses a gossiped suspects list (`name/generation` entries, comma-separated); malformed
/// entries are skipped and counted in the second value.
pub fn parse_suspects(text: &str) -> (Vec<(String, u64)>, usize) {
    let mut out = Vec::new();
    let mut bad = 0;
    for entry in text.split(',').filter(|e| !e.is_empty()) {
        match entry.rsplit_once('/') {
            Some((name, gen)) if !name.is_empty() && name.len() <= NAME_MAX => match gen.parse() {
                Ok(g) => out.push((name.to_string(), g)),
                Err(_) => bad += 1,
            },
            _ => bad += 1,
        }
    }
    (out, bad)
}

/// The gossiped form of a suspects list (at most `max` entries, in order).
pub fn format_suspects(suspects: &[(String, u64)], max: usize) -> String {
    suspects
        .iter()
        .take(max)
        .map(|(n, g)| format!("{n}/{g}"))
        .collect::<Vec<_>>()
        .join(",")
}
