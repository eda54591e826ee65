//! Member verdicts on direct evidence (issue 28): SWIM's probes with Lifeguard's local health.
//!
//! chitchat spreads every member's heartbeat; a gap in one is only a reason to look, never a
//! verdict. An agent that sees a member's heartbeat quiet for [`ProbeConfig::quiet_ms`] probes it:
//!
//! 1. **direct**: a `Ping` to the member, repeated every [`ProbeConfig::ping_every_ms`];
//! 2. **indirect**: after [`ProbeConfig::ping_timeout_ms`] without an answer, a `PingReq` to
//!    [`ProbeConfig::indirect_k`] other members, which ping it and relay its `Ack`, or answer
//!    `Nack` when they heard nothing either (so a prober whose own links are bad can tell);
//! 3. **suspicion**: after [`ProbeConfig::indirect_timeout_ms`] more, the member is `Suspect`
//!    (published in gossip, shown by `shoal nodes`), still pinged; any `Ack`, any other message
//!    from it, or a heartbeat refutes it. The suspicion lasts from
//!    [`ProbeConfig::suspicion_max_ms`] down to [`ProbeConfig::suspicion_min_ms`] as other
//!    members independently suspect it too (Lifeguard's "dogpile": `max - (max - min) *
//!    ln(c + 1) / ln(k + 1)` for `c` confirmations of `k`);
//! 4. **dead** when the suspicion runs out unrefuted.
//!
//! **Local health** (Lifeguard's local health multiplier): every timeout above is multiplied by
//! `health + 1`. Health rises when this agent wakes late (a stall: it was starved or frozen, so
//! the silence it measured is its own), when its indirect probes get fewer answers than it asked
//! for (its own links lose), and when others suspect it; a successful probe lowers it, and so does
//! calm ([`FAILURE_CALM_MS`]). A stall also moves every running timer forward by its length: time
//! this agent did not run is no evidence. So does **deafness**: nobody at all heard for
//! [`ProbeConfig::deaf_after_ms`] is this agent's links failing, not every member at once (up to
//! [`ProbeConfig::deaf_max_ms`] a stretch, so that an agent cut off for good still judges).
//!
//! A member whose build does not speak probes keeps the heartbeat detector's verdict (the shell
//! reads chitchat's), so a mesh of mixed builds never mistakes silence for death.
//!
//! **Watching** ([`Prober::set_watching`], with compact gossip from mesh version 15): heartbeats
//! no longer reach every member every round, so a quiet heartbeat means nothing. Each agent then
//! places itself and every member it judges alive on a ring (a hash of name and generation, the
//! same on every agent) and watches the [`ProbeConfig::watchers`] members that follow it: it
//! probes each once per [`ProbeConfig::quiet_ms`] of silence (an answer, or any message, is the
//! silence's end). Every member is watched by as many others, and each agent sends a constant
//! number of probes whatever the mesh's size (SWIM's probe round, made deterministic so that no
//! member goes unprobed for long). The others learn of a failure from the watchers' `Suspect`
//! notices and gossiped suspicions, and probe it themselves before they suspect it. Members held
//! dead are pinged at a bounded pace ([`ProbeConfig::dead_ping_ms`]): after a partition heals,
//! an answer is what revives them. A leaving member is judged too (nobody's heartbeats would
//! tell that it went). Deafness waits one quiet period longer (an agent hears only its watchers'
//! pings and its own pings' answers).
//!
//! Pure: time is `now_ms` (monotonic), randomness a seed, the view what the shell read from gossip.

mod types;
mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;

pub use types::{
    format_suspects, parse_suspects, Observed, Outgoing, ProbeConfig, ProbeCounters, ProbeMsg,
    Verdict, VerdictEvent, VerdictKind, NAME_MAX,
};

#[derive(Clone, Debug)]
enum State {
    Alive,
    Probing(Probe),
    Suspect(Probe, u64),
    /// Since when, and whether this detector declared it (else: dead by the heartbeat detector
    /// when first seen, as a member that has not gossiped since this agent started).
    Dead(u64, bool),
}

#[derive(Clone, Debug)]
struct Probe {
    /// The probe's nonce: its low [`NONCE_TAG_BITS`] bits are zero, and each ping carries the
    /// ping's number in them ([`Probe::pinged`]), so that an answer tells which ping it answers
    /// (its round trip, [`Track::rtt`]); an indirect request carries [`INDIRECT_TAG`].
    nonce: u64,
    since: u64,
    /// When the last few pings went out, newest first (`sent[0]`: the last one, which paces
    /// the repeats; the rest for the last look, [`Probe::last_look`]).
    sent: [u64; PINGS_KEPT],
    /// How many pings went out (wrapping): the number of the next one.
    pings: u8,
    /// The last look is on: `look` is the ping it waits on ([`Probe::last_look`]).
    looking: bool,
    /// How many times the last look picked its ping again (at most [`LOOK_REPICKS_MAX`]).
    repicks: u8,
    look: u64,
    /// When the indirect requests went out, how many, and how many answered.
    indirect: Option<(u64, u32, u32)>,
    /// Started on another member's suspicion notice (not on this agent's own watch).
    on_notice: bool,
}

/// A last look picks its ping again at most this many times as health falls or news of a heal
/// comes ([`Probe::last_look`]): a mesh where such news never stops does not hold a death off
/// for good.
const LOOK_REPICKS_MAX: u8 = 3;

/// The low bits of a nonce that name the ping within its probe (see [`Probe::nonce`]).
const NONCE_TAG_BITS: u32 = 4;
/// A ping's number modulo this is carried in its nonce.
const PING_TAGS: u8 = 8;
/// The tag of an indirect request's nonce (its relayed answer's round trip is not the member's).
const INDIRECT_TAG: u64 = 8;

/// The base nonce of a tagged one.
fn untagged(nonce: u64) -> u64 {
    nonce & !((1 << NONCE_TAG_BITS) - 1)
}

/// Ping send times a probe keeps: enough to cover [`ProbeConfig::last_look_window_ms`] at the
/// fastest ping pace.
const PINGS_KEPT: usize = 4;

/// What a suspicion that ran out does ([`Probe::last_look`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Look {
    /// The ping the last look waits on went unanswered long enough: dead.
    Declare,
    /// The ping the last look waits on is too recent to judge: wait for it.
    Wait,
    /// No recent ping: send one and wait for it.
    Ping,
}

impl Probe {
    fn new(nonce: u64, now: u64, on_notice: bool) -> Probe {
        Probe {
            nonce,
            since: now,
            sent: [now; PINGS_KEPT],
            pings: 1,
            looking: false,
            repicks: 0,
            look: 0,
            indirect: None,
            on_notice,
        }
    }

    /// When the last ping went out.
    fn last_ping(&self) -> u64 {
        self.sent[0]
    }

    /// A ping goes out at `now`: returns its nonce (the probe's, tagged with its number).
    fn pinged(&mut self, now: u64) -> u64 {
        self.sent.rotate_right(1);
        self.sent[0] = now;
        let tag = self.pings % PING_TAGS;
        self.pings = self.pings.wrapping_add(1);
        self.nonce | u64::from(tag)
    }

    /// When the ping an answer tagged `tag` answers went out, if it is one of the kept ones.
    fn sent_at(&self, tag: u64) -> Option<u64> {
        let newest = self.pings.wrapping_sub(1);
        (0..PINGS_KEPT).find_map(|k| {
            let number = newest.wrapping_sub(k as u8);
            (u64::from(number % PING_TAGS) == tag).then_some(self.sent[k])
        })
    }

    /// The last look before a death: a suspicion ends in one only once a ping sent at most
    /// `window` before the suspicion ran out, and not before `after`, went unanswered for
    /// `wait` (the member's round trip, [`Track::look_wait`]), so that the member had a ping
    /// it could answer since the last moments the verdict rests on. Without it a suspicion
    /// formed while a partition (or a long blackout) cut the member off runs out just after
    /// the heal, before the next scheduled ping could be answered: dead, while it answers
    /// again. `after` is when local health last fell: the answers of a heal lower it, every
    /// suspicion that it had stretched runs out at once, and the pings sent before (into the
    /// cut) are no evidence of now.
    ///
    /// The ping waited on is kept in `look` (the ring of sent times may hold none old enough
    /// when the round trip is long); it is picked again, at most [`LOOK_REPICKS_MAX`] times,
    /// when `after` passes it (health fell, or news of a heal came).
    fn last_look(&mut self, now: u64, wait: u64, window: u64, after: u64) -> Look {
        let again = self.looking && self.look < after && self.repicks < LOOK_REPICKS_MAX;
        if again {
            self.repicks += 1;
        }
        if !self.looking || again {
            let age = |t: u64| now.saturating_sub(t);
            let oldest = self
                .sent
                .iter()
                .copied()
                .filter(|t| *t >= after && age(*t) <= window)
                .min();
            match oldest {
                Some(t) => {
                    self.looking = true;
                    self.look = t;
                }
                None => return Look::Ping,
            }
        }
        if now.saturating_sub(self.look) >= wait {
            Look::Declare
        } else {
            Look::Wait
        }
    }
}

#[derive(Clone, Debug)]
struct Track {
    addr: SocketAddr,
    heartbeat: u64,
    advanced_at: u64,
    probes: bool,
    leaving: bool,
    live: bool,
    suspected_by: u32,
    /// When its last probe started.
    probed_at: u64,
    /// Members that told this agent they suspect it (`Suspect` notices), at most
    /// `confirmations_k`; cleared when it is heard from.
    told_by: Vec<SocketAddr>,
    state: State,
    /// Its place on the watching ring.
    ring: u64,
    /// The nonce of the last ping sent to it while held dead (watching).
    dead_nonce: Option<u64>,
    /// Heard from since first seen: a message of its own, an answer, or (not watching) a
    /// heartbeat that advanced. Watching, one not yet heard from is probed once, since gossip
    /// carries the states of the dead as well as the living and nobody tells a newcomer
    /// which is which (its watchers declared the dead before it came).
    verified: bool,
    /// Its round trip in ms as this agent's pings measured it (0: not yet): the largest answer's
    /// time, falling by an eighth of the gap per smaller one, so that it follows a link's slow
    /// answers rather than its average ([`Track::look_wait`]).
    rtt: u16,
    /// The [`Prober::observe`] call that last listed it (those an observation did not list are
    /// gone).
    listed: u64,
}

/// A round trip estimate after one more sample: the sample when larger, else an eighth of the
/// way down to it (it follows a link's slow answers rather than its average).
fn slow_follow(estimate: u16, sample_ms: u64) -> u16 {
    let sample = sample_ms.min(u64::from(u16::MAX)) as u16;
    if sample >= estimate {
        sample
    } else {
        estimate - (estimate - sample) / 8
    }
}

/// The longest a last look waits on its ping, however slow the member's answers were.
pub const LAST_LOOK_MAX_MS: u64 = 400;

impl Track {
    /// How long the last look waits on a ping to this member, and how old that ping may be
    /// when the suspicion runs out. The wait is the round trip's part,
    /// [`ProbeConfig::last_look_wait_ms`], or one and a half of the member's measured round
    /// trip when that is longer (a slow link: a ping sent 50 ms before is still on its way), at
    /// most [`LAST_LOOK_MAX_MS`]; then one ping `pace` more, so that the ping after the one
    /// waited on went unanswered as long (two pings, not one, decide: a ping lost at 4 % loss
    /// each way decided a death in the swarm). A member never measured (this agent does not
    /// watch it) is taken to be as slow as the slowest member this agent measured (`slowest`):
    /// a slow network is slow on most of its links. The window is the wait and the config's
    /// slack ([`ProbeConfig::last_look_window_ms`] less the wait); at the fastest pace the ring
    /// of sent times then holds a ping old enough when the suspicion runs out, and a real death
    /// is not delayed.
    fn look_wait(&self, c: &ProbeConfig, slowest: u16, pace: u64) -> (u64, u64) {
        let rtt = if self.rtt == 0 { slowest } else { self.rtt };
        let measured = u64::from(rtt) * 3 / 2;
        let wait = c.last_look_wait_ms.max(measured.min(LAST_LOOK_MAX_MS)) + pace;
        let slack = c.last_look_window_ms.saturating_sub(c.last_look_wait_ms);
        (wait, wait + slack)
    }

    /// Independent evidence that it is gone: members gossiping or telling that they suspect it,
    /// or members asked to probe it that could not reach it either (their nacks).
    fn confirmations(&self, nacked: u32) -> u32 {
        self.suspected_by.max(nacked).max(self.told_by.len() as u32)
    }
}

#[derive(Clone, Debug)]
struct Relay {
    requester: SocketAddr,
    nonce: u64,
    deadline: u64,
    /// The nack went out; the relay is kept until [`RELAY_KEEP`] deadlines to pass on a late ack.
    nacked: bool,
}

/// A relay is kept this many times its deadline, so an answer after the nack still refutes.
const RELAY_KEEP: u64 = 4;

type Key = (String, u64);

/// One agent's detector. Feed it [`Prober::tick`] on a timer and [`Prober::receive`] per
/// message; send what they return.
#[derive(Clone, Debug)]
pub struct Prober {
    config: ProbeConfig,
    me: Key,
    /// Where this agent answers probes, once the shell said ([`Prober::set_addr`]).
    addr: Option<SocketAddr>,
    tracks: BTreeMap<Key, Track>,
    by_addr: BTreeMap<SocketAddr, Key>,
    /// How many times [`Prober::observe`] ran (`Track::listed`).
    observations: u64,
    pending: BTreeMap<u64, Key>,
    relays: BTreeMap<u64, Relay>,
    next_nonce: u64,
    rng: u64,
    health: u32,
    /// Local health raised by stalls of this agent (decays with time on time).
    stall_health: u32,
    /// When health last rose or decayed: it decays by one per [`HEALTH_DECAY_MS`] without a rise.
    health_moved_at: u64,
    /// When health last rose.
    health_raised_at: u64,
    /// When an answered probe (or calm) last lowered the failure part of health.
    health_down_at: u64,
    /// The failure part of health rose since the last tick...
    failure_raised: bool,
    /// ...and when it last did.
    failure_raised_at: u64,
    suspected_me: bool,
    /// Health rose since the last tick.
    health_raised: bool,
    counters: ProbeCounters,
    events: Vec<VerdictEvent>,
    /// When any member was last heard from (a message or a heartbeat that advanced).
    heard_at: u64,
    /// When local health last fell (the multiplier of every timeout with it): pings sent before
    /// are no last look ([`Probe::last_look`]).
    health_fell_at: u64,
    /// When a member held suspect or dead was last heard from again (refuted or revived): a
    /// partition may have healed, and pings sent before are no last look for the others either
    /// ([`Probe::last_look`]).
    news_at: u64,
    /// The previous tick's time.
    ticked_at: u64,
    /// The round trip of the slowest members' answers, as [`Track::rtt`] follows one member's:
    /// the last look's wait on a member never measured ([`Track::look_wait`]).
    slowest: u16,
    /// How much of the current deaf stretch was excused so far.
    deaf_excused: u64,
    /// Watching (compact gossip): probe only the members that follow this agent on the ring.
    watching: bool,
    /// The members this agent watches.
    watched: std::collections::BTreeSet<Key>,
    /// How many members the ring held, and the xor of their places, when `watched` was computed.
    ring_print: (usize, u64),
    /// Watching: the ring's members may have changed since `ring_print` was taken (a member came,
    /// went, or moved into or out of dead): only then is the ring walked again.
    ring_dirty: bool,
    /// Watching: every member that may be anything but at rest ([`Prober::at_rest`]), and maybe
    /// some that are: the walks of a tick ([`Prober::drive`], [`Prober::next_due`], the dead
    /// pings, the suspects and the dead handed to the shell) go over these instead of every
    /// member, so that a tick of a mesh at rest costs the same at 30 members as at 3,000. Every
    /// change that can take a member out of rest adds it; [`Prober::drive`] drops those back at
    /// rest. Debug builds check it each tick against a walk over every member.
    active: std::collections::BTreeSet<Key>,
    /// Some member's verdict may have moved since [`Prober::verdicts_moved`] last answered.
    verdicts_dirty: bool,
    /// What [`Prober::verdicts_moved`] last returned (debug builds: checks that no change went
    /// unflagged).
    #[cfg(debug_assertions)]
    verdicts_last: Vec<(String, u64, Verdict)>,
}

/// How long a member this agent declared dead stays in what it gossips as suspected (a
/// confirmation for the others still suspecting it).
pub const CONFIRMS_FOR_MS: u64 = 10_000;

/// Watching, at most this many members never heard from since first seen start their one probe
/// per tick (a newcomer to a mesh of thousands spreads its first look over seconds).
pub const VERIFY_PER_TICK: u32 = 8;

/// Local health starts to decay once nothing raised it for this long...
pub const HEALTH_CALM_MS: u64 = 1_000;
/// ...then by one each this long.
pub const HEALTH_DECAY_MS: u64 = 250;

/// The part of local health that failed probes raised falls by one per [`FAILURE_DECAY_MS`]
/// once nothing raised it for this long.
pub const FAILURE_CALM_MS: u64 = 5_000;
/// See [`FAILURE_CALM_MS`].
pub const FAILURE_DECAY_MS: u64 = 1_000;

/// Most events kept until drained.
const EVENTS_MAX: usize = 1_024;

impl Prober {
    /// A detector for `name` of generation `generation`; `seed` picks the indirect probers and
    /// the first nonce.
    pub fn new(config: ProbeConfig, name: &str, generation: u64, seed: u64) -> Self {
        Prober {
            config,
            me: (name.to_string(), generation),
            addr: None,
            tracks: BTreeMap::new(),
            by_addr: BTreeMap::new(),
            observations: 0,
            pending: BTreeMap::new(),
            relays: BTreeMap::new(),
            next_nonce: untagged(splitmix(seed)),
            rng: seed,
            health: 0,
            stall_health: 0,
            health_moved_at: 0,
            health_raised_at: 0,
            health_down_at: 0,
            failure_raised: false,
            failure_raised_at: 0,
            suspected_me: false,
            health_raised: false,
            counters: ProbeCounters::default(),
            events: Vec::new(),
            heard_at: 0,
            health_fell_at: 0,
            ticked_at: 0,
            news_at: 0,
            slowest: 0,
            deaf_excused: 0,
            watching: false,
            watched: std::collections::BTreeSet::new(),
            ring_print: (usize::MAX, 0),
            ring_dirty: true,
            active: std::collections::BTreeSet::new(),
            verdicts_dirty: true,
            #[cfg(debug_assertions)]
            verdicts_last: Vec::new(),
        }
    }

    /// Where this agent answers probes. Another incarnation of its own name gossiped at this
    /// address is its earlier one (its pings come back here); one at another address is a twin
    /// (a copied key or data dir) and is judged by its answers like any member, so that the
    /// name dispute sees it alive. Unset, every other incarnation of its name is taken for an
    /// earlier one.
    pub fn set_addr(&mut self, addr: SocketAddr) {
        self.addr = Some(addr);
        self.index_addrs();
    }

    /// Whether this detector runs `t`'s probes: a member whose build speaks them, and not one
    /// leaving, unless watching (then nobody else's heartbeats would tell that it went).
    fn judges(&self, t: &Track) -> bool {
        t.probes && (!t.leaving || self.watching)
    }

    /// The configuration.
    pub fn config(&self) -> &ProbeConfig {
        &self.config
    }

    /// The local health score: timeouts are multiplied by one more than it.
    pub fn health(&self) -> u32 {
        (self.health + self.stall_health).min(self.config.health_max)
    }

    /// What was counted so far.
    pub fn counters(&self) -> ProbeCounters {
        self.counters
    }

    /// The verdict on `name` of `generation`, when the detector judges it (`None`: a member this
    /// detector leaves to the heartbeat verdict: unknown, an older build, or leaving).
    pub fn verdict(&self, name: &str, generation: u64) -> Option<Verdict> {
        let track = self.tracks.get(&(name.to_string(), generation))?;
        if !track.probes || track.leaving {
            return None;
        }
        Some(shown(&track.state))
    }

    /// Every judged member's verdict, by name and generation.
    pub fn verdicts(&self) -> Vec<(String, u64, Verdict)> {
        self.tracks
            .keys()
            .filter_map(|(n, g)| self.verdict(n, *g).map(|v| (n.clone(), *g, v)))
            .collect()
    }

    /// Every judged member's verdict ([`Self::verdicts`]) when one may have moved since the last
    /// call, else `None`: the shell rebuilds its view only then, not every tick.
    pub fn verdicts_moved(&mut self) -> Option<Vec<(String, u64, Verdict)>> {
        if !std::mem::take(&mut self.verdicts_dirty) {
            #[cfg(debug_assertions)]
            assert_eq!(
                self.verdicts(),
                self.verdicts_last,
                "a verdict moved without being flagged"
            );
            return None;
        }
        let now = self.verdicts();
        #[cfg(debug_assertions)]
        {
            self.verdicts_last = now.clone();
        }
        Some(now)
    }

    /// The members this agent suspects now, or declared dead within the last
    /// [`CONFIRMS_FOR_MS`], by name and generation: what it gossips, each a confirmation for
    /// the others' suspicions.
    pub fn suspects(&self, now_ms: u64) -> Vec<(String, u64)> {
        self.candidates()
            .filter(|(_, t)| t.probes && !t.leaving)
            .filter(|(_, t)| match t.state {
                State::Suspect(..) => true,
                State::Dead(since, true) => now_ms.saturating_sub(since) < CONFIRMS_FOR_MS,
                _ => false,
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The verdict changes since the last call (at most [`EVENTS_MAX`] kept).
    pub fn drain_events(&mut self) -> Vec<VerdictEvent> {
        std::mem::take(&mut self.events)
    }

    fn multiplier(&self) -> u64 {
        u64::from(self.health()) + 1
    }

    fn nonce(&mut self) -> u64 {
        self.next_nonce = self.next_nonce.wrapping_add(1 << NONCE_TAG_BITS);
        self.next_nonce
    }

    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        splitmix(self.rng)
    }

    fn raise_health(&mut self) {
        self.health = (self.health + 1).min(self.config.health_max);
        self.failure_raised = true;
    }

    fn event(&mut self, key: &Key, kind: VerdictKind, at_ms: u64) {
        if matches!(kind, VerdictKind::Refuted | VerdictKind::Revived) {
            self.news_at = at_ms;
        }
        if self.events.len() < EVENTS_MAX {
            self.events.push(VerdictEvent {
                name: key.0.clone(),
                generation: key.1,
                kind,
                at_ms,
            });
        }
    }

    /// One tick: `members` is every other identity gossip holds (not this agent), `stall_ms` how
    /// much later than planned this tick came (0 when on time), `suspected_me` how many live
    /// members gossip that they suspect this agent. Returns the messages to send.
    pub fn tick(
        &mut self,
        now_ms: u64,
        stall_ms: u64,
        suspected_me: u32,
        members: &[Observed],
    ) -> Vec<Outgoing> {
        self.tick_with(now_ms, stall_ms, suspected_me, Some(members))
    }

    /// [`Self::tick`] where `members` is `None` when the shell read exactly what it passed last
    /// (taking the same view again changes nothing, and costs a walk over every member).
    pub fn tick_with(
        &mut self,
        now_ms: u64,
        stall_ms: u64,
        suspected_me: u32,
        members: Option<&[Observed]>,
    ) -> Vec<Outgoing> {
        let mut out = Vec::new();
        // A wake within the slack is on time.
        let stalled = if stall_ms > self.config.stall_slack_ms {
            stall_ms
        } else {
            0
        };
        if stalled > 0 {
            self.counters.stalls += 1;
            self.stall_health = (self.stall_health + 1).min(self.config.health_max);
            self.health_raised = true;
            self.shift(stalled, now_ms, true);
        }
        if suspected_me > 0 && !self.suspected_me {
            self.raise_health();
        }
        self.suspected_me = suspected_me > 0;
        // The part of health stalls raised decays once the agent runs on time again (it may have
        // nobody to probe, so no answered probe would lower it).
        if std::mem::take(&mut self.health_raised) {
            self.health_raised_at = now_ms;
            self.health_moved_at = now_ms;
        } else if self.stall_health > 0
            && now_ms.saturating_sub(self.health_raised_at) >= HEALTH_CALM_MS
            && now_ms.saturating_sub(self.health_moved_at) >= HEALTH_DECAY_MS
        {
            self.stall_health -= 1;
            self.health_moved_at = now_ms;
            self.health_fell_at = now_ms;
        }
        // The part failed probes raised falls as probes are answered; in a calm mesh nothing is
        // probed, so it also falls once nothing raised it for FAILURE_CALM_MS (Lifeguard probes
        // all the time, and its successes bring the score back to 0 in steady state).
        if std::mem::take(&mut self.failure_raised) {
            self.failure_raised_at = now_ms;
        } else if self.health > 0
            && !self.suspected_me
            && now_ms.saturating_sub(self.failure_raised_at) >= FAILURE_CALM_MS
            && now_ms.saturating_sub(self.health_down_at) >= FAILURE_DECAY_MS
        {
            self.health -= 1;
            self.health_down_at = now_ms;
            self.health_fell_at = now_ms;
        }
        if let Some(members) = members {
            self.observe(now_ms, members);
        }
        // A stall is excused above; deafness only over the time this agent ran.
        self.excuse_deafness(now_ms, now_ms.saturating_sub(stalled));
        self.drive(now_ms, &mut out);
        self.expire_relays(now_ms, &mut out);
        out
    }

    /// The earliest time a timer of a running probe or relay falls due (`None` when none runs):
    /// the shell ticks then instead of waiting for its next regular tick.
    pub fn next_due(&self) -> Option<u64> {
        let m = self.multiplier();
        let c = &self.config;
        let mut due: Option<u64> = None;
        let mut at = |t: u64| due = Some(due.map_or(t, |d| d.min(t)));
        for (_, t) in self.candidates() {
            if !self.judges(t) {
                continue;
            }
            match &t.state {
                State::Probing(p) => {
                    at(p.last_ping() + c.ping_every_ms * m);
                    at(p.since + c.ping_timeout_ms * m);
                    at(p.since + (c.ping_timeout_ms + c.indirect_timeout_ms) * m);
                }
                State::Suspect(p, since) => {
                    at(p.last_ping() + c.ping_every_ms * m);
                    let nacked = p.indirect.map_or(0, |(_, _, answered)| answered);
                    let ends =
                        since + c.suspicion_in_mode_ms(t.confirmations(nacked), self.watching) * m;
                    at(ends);
                    // The last look: a ping that may decide once the suspicion ran out.
                    let (wait, _) = t.look_wait(c, self.slowest, c.ping_every_ms * m);
                    if p.looking {
                        at(p.look + wait);
                    } else {
                        for sent in p.sent {
                            let decides = sent + wait;
                            if decides >= ends {
                                at(decides);
                            }
                        }
                    }
                }
                State::Alive | State::Dead(..) => {}
            }
        }
        for r in self.relays.values() {
            if !r.nacked {
                at(r.deadline);
            }
        }
        due
    }

    /// Deafness (Lifeguard's lossy observer, taken further): when nobody at all was heard from
    /// for [`ProbeConfig::deaf_after_ms`] while at least two members are held alive, what
    /// fails is this agent's links, not every member at once; the silence past that point, up to
    /// [`ProbeConfig::deaf_max_ms`] per stretch, moves every timer forward as a stall does.
    fn excuse_deafness(&mut self, now: u64, ran_until: u64) {
        let since = std::mem::replace(&mut self.ticked_at, now);
        // Watching, an agent hears only its watchers' pings and its own pings' answers, each
        // once per quiet period: a silence that long is the mesh's rhythm, not deafness.
        let after = if self.watching {
            self.config.deaf_after_ms + self.config.quiet_ms
        } else {
            self.config.deaf_after_ms
        };
        let deaf_from = self.heard_at.saturating_add(after);
        if now <= deaf_from {
            self.deaf_excused = 0;
            return;
        }
        let alive = self
            .tracks
            .values()
            .filter(|t| t.probes && !t.leaving && !matches!(t.state, State::Dead(..)))
            .count();
        if alive < 2 || self.deaf_excused >= self.config.deaf_max_ms {
            return;
        }
        let excuse = ran_until
            .saturating_sub(since.max(deaf_from))
            .min(self.config.deaf_max_ms - self.deaf_excused);
        if excuse > 0 {
            self.deaf_excused += excuse;
            self.counters.deaf_ms += excuse;
            self.shift(excuse, now, false);
        }
    }

    /// Moves every running timer forward by a stall of this agent. `pings`: the repeated pings'
    /// timer too (a stall: the agent did not run, so it sent none); a deaf agent keeps pinging,
    /// its pings are how it finds its links back.
    fn shift(&mut self, stall: u64, now: u64, pings: bool) {
        for track in self.tracks.values_mut() {
            track.advanced_at = track.advanced_at.saturating_add(stall).min(now);
            if let State::Probing(p) | State::Suspect(p, _) = &mut track.state {
                p.since = p.since.saturating_add(stall).min(now);
                if pings {
                    for t in &mut p.sent {
                        *t = t.saturating_add(stall).min(now);
                    }
                    p.look = p.look.saturating_add(stall).min(now);
                }
                if let Some((sent, _, _)) = &mut p.indirect {
                    *sent = sent.saturating_add(stall).min(now);
                }
            }
            if let State::Suspect(_, since) = &mut track.state {
                *since = since.saturating_add(stall).min(now);
            }
        }
        for relay in self.relays.values_mut() {
            relay.deadline = relay.deadline.saturating_add(stall);
        }
    }

    /// Takes this tick's view: new identities, heartbeats that advanced, identities gone.
    fn observe(&mut self, now: u64, members: &[Observed]) {
        // Every track this observation lists is marked with it; the unmarked are gone. The
        // addresses are indexed again only when a track came, went or moved (each was a copy of
        // every member's name per call, and the verdict task calls this every tick in which
        // chitchat's states moved: every tick while a mesh forms).
        self.observations += 1;
        let mut addrs_moved = false;
        for m in members {
            let key = (m.name.clone(), m.generation);
            if key == self.me {
                continue;
            }
            let Some(track) = self.tracks.get_mut(&key) else {
                if self.tracks.len() >= self.config.members_max {
                    self.counters.untracked += 1;
                    continue;
                }
                if m.live {
                    self.heard_at = now;
                }
                let state = if m.live {
                    State::Alive
                } else {
                    State::Dead(now.saturating_sub(CONFIRMS_FOR_MS), false)
                };
                let ring = watch::ring_place(&key);
                self.verdicts_dirty = true;
                addrs_moved = true;
                self.tracks.insert(
                    key,
                    Track {
                        addr: m.addr,
                        heartbeat: m.heartbeat,
                        advanced_at: now,
                        probes: m.probes,
                        leaving: m.leaving,
                        live: m.live,
                        suspected_by: m.suspected_by,
                        probed_at: 0,
                        told_by: Vec::new(),
                        state,
                        ring,
                        dead_nonce: None,
                        verified: false,
                        rtt: 0,
                        listed: self.observations,
                    },
                );
                continue;
            };
            track.listed = self.observations;
            addrs_moved |= track.addr != m.addr;
            track.addr = m.addr;
            if (track.probes, track.leaving) != (m.probes, m.leaving) {
                self.verdicts_dirty = true;
            }
            track.probes = m.probes;
            track.leaving = m.leaving;
            track.live = m.live;
            track.suspected_by = m.suspected_by;
            // Watching, a member first seen not live (named by a digest before its state came,
            // or seen while heartbeats judged) that chitchat now holds live is a member like
            // any other: alive until its watchers' probes say otherwise. Never declared, it was
            // never handed to chitchat as dead ([`Prober::held_dead`]), so chitchat's liveness
            // is its state's arrival, not this agent's own judgement fed back.
            if self.watching && m.live && matches!(track.state, State::Dead(_, false)) {
                track.state = State::Alive;
                track.advanced_at = now;
                track.verified = false;
                self.heard_at = now;
                self.verdicts_dirty = true;
            }
            // Watching, a heartbeat arrives only with a bucket that differed, relayed from
            // whoever held it, however old: no evidence of now.
            if self.watching {
                track.heartbeat = track.heartbeat.max(m.heartbeat);
            } else if m.heartbeat > track.heartbeat {
                self.heard_at = now;
                track.heartbeat = m.heartbeat;
                track.advanced_at = now;
                track.verified = true;
                track.told_by.clear();
                let was = std::mem::replace(&mut track.state, State::Alive);
                self.verdicts_dirty |= shown(&was) != Verdict::Alive;
                match was {
                    State::Suspect(p, _) => {
                        self.pending.remove(&p.nonce);
                        self.event(&key, VerdictKind::Refuted, now);
                    }
                    State::Probing(p) => {
                        self.pending.remove(&p.nonce);
                    }
                    State::Dead(_, true) => self.event(&key, VerdictKind::Revived, now),
                    State::Dead(_, false) => {}
                    State::Alive => {}
                }
            }
        }
        let gone: Vec<Key> = self
            .tracks
            .iter()
            .filter(|(_, t)| t.listed != self.observations)
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.verdicts_dirty = true;
            addrs_moved = true;
            if let Some(Track {
                state: State::Probing(p) | State::Suspect(p, _),
                ..
            }) = self.tracks.remove(&key)
            {
                self.pending.remove(&p.nonce);
            }
        }
        if addrs_moved {
            self.index_addrs();
        }
        #[cfg(debug_assertions)]
        {
            let indexed = std::mem::take(&mut self.by_addr);
            self.index_addrs();
            assert_eq!(
                indexed, self.by_addr,
                "the addresses moved without being indexed"
            );
        }
        self.ring_dirty = true;
        if self.watching {
            self.rebuild_active();
        }
    }

    /// Indexes the tracks by address.
    fn index_addrs(&mut self) {
        self.by_addr.clear();
        for (key, track) in &self.tracks {
            // Another incarnation of this agent's own name at this agent's address speaks for
            // nobody there: it is an earlier one, and its pings come back to this agent. A twin
            // at another address speaks for itself: its pings are answered, and it is judged
            // by its answers (which name their incarnation), so both stay alive and the name
            // dispute sees them.
            if key.0 == self.me.0 && self.addr.is_none_or(|a| a == track.addr) {
                continue;
            }
            // Where two identities share an address, the newer generation answers there.
            self.by_addr.insert(track.addr, key.clone());
        }
    }

    /// Whether `t` is at rest: nothing [`Self::drive`] would do to it, now or later, without
    /// some change first (alive, heard from, nobody's suspect, and not watched; or not judged).
    fn at_rest(&self, key: &Key, t: &Track) -> bool {
        !self.judges(t)
            || (matches!(t.state, State::Alive)
                && t.verified
                && t.confirmations(0) == 0
                && !self.watched.contains(key))
    }

    /// How many members a tick walks: watching, those not at rest (and some that came to rest
    /// this tick); otherwise every member.
    pub fn walked(&self) -> usize {
        if self.watching {
            self.active.len()
        } else {
            self.tracks.len()
        }
    }

    /// Every member not at rest, from a walk over all of them.
    fn rebuild_active(&mut self) {
        self.active = self
            .tracks
            .iter()
            .filter(|(key, t)| !self.at_rest(key, t))
            .map(|(key, _)| key.clone())
            .collect();
    }

    /// The members a tick must look at: watching, the active ones (a superset of those not at
    /// rest, in the same order as every member); otherwise every member.
    fn candidates(&self) -> impl Iterator<Item = (&Key, &Track)> + '_ {
        let active = self.watching.then(|| {
            self.active
                .iter()
                .filter_map(|k| self.tracks.get_key_value(k))
        });
        let all = (!self.watching).then(|| self.tracks.iter());
        active
            .into_iter()
            .flatten()
            .chain(all.into_iter().flatten())
    }

    /// Runs every member's timers.
    fn drive(&mut self, now: u64, out: &mut Vec<Outgoing>) {
        let m = self.multiplier();
        let c = self.config.clone();
        if self.watching {
            self.update_ring();
        }
        // Only members whose timers run or that may be looked at now: the loop below decides
        // each again, and what it does to one member changes none of the others' conditions
        // here, so the filter passes every member the loop would act on.
        #[cfg(debug_assertions)]
        if self.watching {
            for (key, t) in &self.tracks {
                assert!(
                    self.at_rest(key, t) || self.active.contains(key),
                    "{key:?} is not at rest but not active: {t:?}"
                );
            }
        }
        let keys: Vec<Key> = self
            .candidates()
            .filter(|(key, t)| self.judges(t) && self.may_act(key, t, now, m))
            .map(|(key, _)| key.clone())
            .collect();
        let mut verify_budget = VERIFY_PER_TICK;
        for key in keys {
            let track = &self.tracks[&key];
            if !self.judges(track) {
                continue;
            }
            let addr = track.addr;
            match track.state.clone() {
                State::Dead(..) => {}
                State::Alive => {
                    // Quiet for long enough, or another member suspects it: look now.
                    // (A suspected member is probed at most once per quiet period.) Watching,
                    // only the members this agent watches are looked at for quiet: the others'
                    // silence is what compact gossip means.
                    let quiet = now.saturating_sub(track.advanced_at) >= c.quiet_ms * m
                        && (!self.watching || self.watched.contains(&key));
                    let told = track.confirmations(0) > 0
                        && now.saturating_sub(track.probed_at) >= c.quiet_ms * m;
                    // Watching, a member never heard from since first seen may be one its
                    // watchers declared dead before this agent came: probed once, a few a tick.
                    let verify = self.watching && !track.verified && verify_budget > 0;
                    if quiet || told || verify {
                        if !(quiet || told) {
                            verify_budget -= 1;
                            self.counters.verified += 1;
                        }
                        self.start_probe(&key, now, !quiet && told, out);
                    }
                }
                State::Probing(mut p) => {
                    self.repeat_ping(&key, addr, &mut p, now, out);
                    // Told by members that probed it and failed: their probes are the indirect
                    // evidence; this agent's own direct ping failing is enough to suspect.
                    // Watching, every member is watched by `watchers`: that many notices are all
                    // the members that probed it.
                    let told_k = if self.watching {
                        c.confirmations_k.min(c.watchers as u32).max(1)
                    } else {
                        c.confirmations_k
                    };
                    let told = self.tracks[&key].told_by.len() as u32 >= told_k;
                    if !told
                        && p.indirect.is_none()
                        && now.saturating_sub(p.since) >= c.ping_timeout_ms * m
                    {
                        let asked = self.ask_others(&key, addr, p.nonce | INDIRECT_TAG, out);
                        self.counters.indirect += 1;
                        p.indirect = Some((now, asked, 0));
                    }
                    let limit = if told {
                        c.ping_timeout_ms * m
                    } else {
                        (c.ping_timeout_ms + c.indirect_timeout_ms) * m
                    };
                    if now.saturating_sub(p.since) >= limit {
                        if let Some((_, asked, answered)) = p.indirect {
                            if answered < asked {
                                // Lifeguard's missed nack: our own links may be what fails.
                                self.raise_health();
                            }
                        }
                        self.event(&key, VerdictKind::Suspect, now);
                        if self.tracks[&key].confirmations(0) < c.confirmations_k {
                            self.tell_others(&key, out);
                        }
                        // Watching and told by every watcher, the suspicion counts from when
                        // this agent was told (its own ping has failed too): every survivor
                        // then decides within about a message of the watchers.
                        // Only a probe started on the notice is backdated (a watcher's own probe
                        // keeps its full suspicion), and never by more than two ping timeouts
                        // (a late tick does not skip the suspicion).
                        let since = if told && self.watching && p.on_notice {
                            p.since.max(now.saturating_sub(2 * c.ping_timeout_ms * m))
                        } else {
                            now
                        };
                        self.set(&key, State::Suspect(p, since));
                    } else {
                        self.set(&key, State::Probing(p));
                    }
                }
                State::Suspect(mut p, since) => {
                    self.repeat_ping(&key, addr, &mut p, now, out);
                    // Confirmations: members gossiping that they suspect it, or the members
                    // asked to probe it that could not reach it either (their nacks), whichever
                    // is more.
                    let nacked = p.indirect.map_or(0, |(_, _, answered)| answered);
                    let confirmations = self.tracks[&key].confirmations(nacked);
                    let lasts = c.suspicion_in_mode_ms(confirmations, self.watching) * m;
                    let pace = c.ping_every_ms * m;
                    let (wait, window) = self.tracks[&key].look_wait(&c, self.slowest, pace);
                    let look = if now.saturating_sub(since) >= lasts {
                        let after = self.health_fell_at.max(self.news_at);
                        Some(p.last_look(now, wait, window, after))
                    } else {
                        // Not (or no longer) run out: a later look picks its ping afresh.
                        p.looking = false;
                        None
                    };
                    if look == Some(Look::Ping) {
                        let nonce = p.pinged(now);
                        self.counters.last_looks += 1;
                        out.push((addr, ping(nonce, &key)));
                    }
                    if look == Some(Look::Declare) {
                        self.pending.remove(&p.nonce);
                        self.event(&key, VerdictKind::Dead, now);
                        self.counters.declared_dead += 1;
                        self.set(&key, State::Dead(now, true));
                    } else {
                        self.set(&key, State::Suspect(p, since));
                    }
                }
            }
        }
        if self.watching {
            self.ping_dead(now, out);
            let rested: Vec<Key> = self
                .active
                .iter()
                .filter(|key| self.tracks.get(*key).is_none_or(|t| self.at_rest(key, t)))
                .cloned()
                .collect();
            for key in rested {
                self.active.remove(&key);
            }
        }
    }

    /// Whether [`Self::drive`] may act on `t` at `now` (`m`: the health multiplier): a probe or
    /// suspicion runs, or, alive, it is quiet, told of, or not yet verified while watching.
    fn may_act(&self, key: &Key, t: &Track, now: u64, m: u64) -> bool {
        let quiet_for = self.config.quiet_ms * m;
        match t.state {
            State::Dead(..) => false,
            State::Probing(_) | State::Suspect(..) => true,
            State::Alive => {
                (now.saturating_sub(t.advanced_at) >= quiet_for
                    && (!self.watching || self.watched.contains(key)))
                    || (t.confirmations(0) > 0 && now.saturating_sub(t.probed_at) >= quiet_for)
                    || (self.watching && !t.verified)
            }
        }
    }

    /// Starts probing `key`: its first direct ping.
    fn start_probe(&mut self, key: &Key, now: u64, on_notice: bool, out: &mut Vec<Outgoing>) {
        let nonce = self.nonce();
        self.counters.probes += 1;
        let Some(t) = self.tracks.get_mut(key) else {
            return;
        };
        t.probed_at = now;
        let addr = t.addr;
        self.pending.insert(nonce, key.clone());
        // The first ping is number 0: its nonce is the probe's.
        out.push((addr, ping(nonce, key)));
        self.set(key, State::Probing(Probe::new(nonce, now, on_notice)));
    }

    fn set(&mut self, key: &Key, state: State) {
        if let Some(t) = self.tracks.get_mut(key) {
            self.verdicts_dirty |= shown(&t.state) != shown(&state);
            self.ring_dirty |=
                matches!(t.state, State::Dead(..)) != matches!(state, State::Dead(..));
            if !matches!(state, State::Alive) && !self.active.contains(key) {
                self.active.insert(key.clone());
            }
            t.state = state;
        }
    }

    fn repeat_ping(
        &mut self,
        key: &Key,
        addr: SocketAddr,
        p: &mut Probe,
        now: u64,
        out: &mut Vec<Outgoing>,
    ) {
        if now.saturating_sub(p.last_ping()) >= self.config.ping_every_ms * self.multiplier() {
            let nonce = p.pinged(now);
            out.push((addr, ping(nonce, key)));
        }
    }

    /// Sends `PingReq`s about `key` to up to `indirect_k` other members judged alive, picked at
    /// random; returns how many.
    fn ask_others(
        &mut self,
        key: &Key,
        target_addr: SocketAddr,
        nonce: u64,
        out: &mut Vec<Outgoing>,
    ) -> u32 {
        let relays = self.pick_others(key, self.config.indirect_k);
        for relay in &relays {
            out.push((
                *relay,
                ProbeMsg::PingReq {
                    nonce,
                    target: key.0.clone(),
                    target_gen: key.1,
                    target_addr,
                },
            ));
        }
        relays.len() as u32
    }

    /// Up to `n` members other than `key` judged alive (that speak probes and are not leaving),
    /// picked at random.
    fn pick_others(&mut self, key: &Key, n: usize) -> Vec<SocketAddr> {
        let mut eligible: Vec<SocketAddr> = self
            .tracks
            .iter()
            .filter(|(k, t)| {
                *k != key
                    && t.probes
                    && !t.leaving
                    && matches!(t.state, State::Alive | State::Probing(_))
            })
            .map(|(_, t)| t.addr)
            .collect();
        let n = n.min(eligible.len());
        for i in 0..n {
            let j = i + (self.random() % (eligible.len() - i) as u64) as usize;
            eligible.swap(i, j);
        }
        eligible.truncate(n);
        eligible
    }

    /// Tells up to `notify_max` members judged alive, picked at random, that this agent suspects
    /// `key`: they probe it at once instead of waiting for their own view of its heartbeat to go
    /// quiet (gossip spreads that view a round or two apart).
    fn tell_others(&mut self, key: &Key, out: &mut Vec<Outgoing>) {
        for member in self.pick_others(key, self.config.notify_max) {
            out.push((
                member,
                ProbeMsg::Suspect {
                    target: key.0.clone(),
                    target_gen: key.1,
                },
            ));
        }
    }

    fn expire_relays(&mut self, now: u64, out: &mut Vec<Outgoing>) {
        let wait = self.config.ping_timeout_ms * self.multiplier();
        let mut gone = Vec::new();
        for (n, r) in &mut self.relays {
            if !r.nacked && r.deadline <= now {
                r.nacked = true;
                out.push((r.requester, ProbeMsg::Nack { nonce: r.nonce }));
            }
            if r.deadline + wait * (RELAY_KEEP - 1) <= now {
                gone.push(*n);
            }
        }
        for n in gone {
            self.relays.remove(&n);
        }
    }

    /// One message from `from` (a gossip address; `from_name` the name its certificate carries,
    /// when the transport authenticates one). Returns the messages to send.
    pub fn receive(
        &mut self,
        now_ms: u64,
        from: SocketAddr,
        from_name: Option<&str>,
        msg: ProbeMsg,
    ) -> Vec<Outgoing> {
        let mut out = Vec::new();
        if !msg.valid() {
            self.counters.non_member += 1;
            return out;
        }
        let named = matches!(msg, ProbeMsg::Ack { .. });
        let sender = self.by_addr.get(&from).cloned();
        let member = sender
            .as_ref()
            .is_some_and(|k| from_name.is_none_or(|n| n == k.0));
        // An answer names its incarnation: from another one than gossip holds at that address
        // (a restart gossip has not carried yet), it says nothing of the one held.
        let speaks_for_sender = match &msg {
            ProbeMsg::Ack {
                name, generation, ..
            } => sender
                .as_ref()
                .is_some_and(|k| k.0 == *name && k.1 == *generation),
            _ => true,
        };
        match msg {
            ProbeMsg::Ping {
                nonce,
                target,
                target_gen,
            } => {
                if !member {
                    self.counters.non_member += 1;
                } else if (target, target_gen) != self.me {
                    self.counters.stale += 1;
                } else {
                    out.push((
                        from,
                        ProbeMsg::Ack {
                            nonce,
                            name: self.me.0.clone(),
                            generation: self.me.1,
                        },
                    ));
                }
            }
            ProbeMsg::Ack {
                nonce,
                name,
                generation,
            } => {
                if let Some(key) = self.pending.get(&untagged(nonce)).cloned() {
                    if (name, generation) != key {
                        self.counters.stale += 1;
                    } else {
                        self.round_trip(&key, nonce, now_ms);
                        self.answered(&key, now_ms);
                    }
                } else if let Some(relay) = self.relays.remove(&nonce) {
                    out.push((
                        relay.requester,
                        ProbeMsg::Ack {
                            nonce: relay.nonce,
                            name,
                            generation,
                        },
                    ));
                } else {
                    self.counters.unexpected += 1;
                }
            }
            ProbeMsg::PingReq {
                nonce,
                target,
                target_gen,
                target_addr,
            } => {
                let known = self
                    .by_addr
                    .get(&target_addr)
                    .is_some_and(|k| k.0 == target);
                if !member || !known {
                    self.counters.non_member += 1;
                } else if !self.tracks.contains_key(&(target.clone(), target_gen)) {
                    self.counters.stale += 1;
                } else if self.relays.len() >= self.config.relays_max {
                    self.counters.relays_dropped += 1;
                } else {
                    let own = self.nonce();
                    let deadline = now_ms + self.config.ping_timeout_ms * self.multiplier();
                    self.relays.insert(
                        own,
                        Relay {
                            requester: from,
                            nonce,
                            deadline,
                            nacked: false,
                        },
                    );
                    out.push((target_addr, ping(own, &(target, target_gen))));
                }
            }
            ProbeMsg::Suspect { target, target_gen } => {
                let key = (target, target_gen);
                if !member {
                    self.counters.non_member += 1;
                } else if key.0 == self.me.0 {
                    // Suspected: this agent's answers refute it; its own links may be the cause.
                    if key.1 == self.me.1 {
                        self.raise_health();
                    } else {
                        self.counters.stale += 1;
                    }
                } else if self.tracks.contains_key(&key) {
                    let quiet = self.config.quiet_ms * self.multiplier();
                    let judged = self.judges(&self.tracks[&key]);
                    let track = self.tracks.get_mut(&key).expect("checked");
                    let k = self.config.confirmations_k as usize;
                    if !track.told_by.contains(&from) && track.told_by.len() < k {
                        track.told_by.push(from);
                        self.active.insert(key.clone());
                    }
                    let idle = matches!(track.state, State::Alive)
                        && judged
                        && now_ms.saturating_sub(track.probed_at) >= quiet;
                    if idle {
                        self.start_probe(&key, now_ms, true, &mut out);
                    }
                } else {
                    self.counters.stale += 1;
                }
            }
            ProbeMsg::Nack { nonce } => {
                let key = self.pending.get(&untagged(nonce)).cloned();
                let counted = key.and_then(|k| self.tracks.get_mut(&k)).is_some_and(|t| {
                    if let State::Probing(p) | State::Suspect(p, _) = &mut t.state {
                        if let Some((_, _, answered)) = &mut p.indirect {
                            *answered += 1;
                            return true;
                        }
                    }
                    false
                });
                if !counted {
                    self.counters.unexpected += 1;
                }
            }
        }
        // Whatever a member sends, it sent it: it runs and reaches this agent now (SWIM's rule
        // that any message from a member refutes its suspicion). A member whose links black out
        // most of the time may never be pinged in its short windows, but it pings there.
        if member {
            self.heard_at = self.heard_at.max(now_ms);
        }
        if let (true, true, Some(key)) = (member, speaks_for_sender, sender) {
            self.heard_from(&key, now_ms, named, &mut out);
        }
        out
    }

    /// A message from `key` arrived: it is alive now. A probe or suspicion of it ends as if
    /// answered (its message got through: local health falls as for an answer), a dead verdict
    /// of this detector's is revived, and its quiet time restarts.
    ///
    /// `named`: the message named its incarnation (an answer). Others (pings, requests,
    /// notices) say only which address sent them, and a restarted member sends from its earlier
    /// incarnation's address before gossip carries the new one: they neither revive a dead
    /// member nor count as its first word (a ping goes to it instead, whose answer will).
    fn heard_from(&mut self, key: &Key, now: u64, named: bool, out: &mut Vec<Outgoing>) {
        let watching = self.watching;
        if !self.tracks.get(key).is_some_and(|t| self.judges(t)) {
            return;
        }
        let Some(track) = self.tracks.get_mut(key) else {
            return;
        };
        track.verified |= named;
        match track.state {
            State::Probing(_) | State::Suspect(..) => self.answered(key, now),
            State::Dead(_, declared) if !named && (declared || watching) => {
                if now.saturating_sub(track.probed_at) >= self.config.ping_timeout_ms {
                    self.ping_dead_now(key, now, out);
                }
            }
            // Watching, chitchat's liveness is this detector's: one held dead since first seen
            // is revived here too (no heartbeat detector would).
            State::Dead(_, declared) if declared || watching => {
                track.state = State::Alive;
                self.verdicts_dirty = true;
                self.ring_dirty = true;
                track.advanced_at = now;
                track.told_by.clear();
                if let Some(n) = track.dead_nonce.take() {
                    self.pending.remove(&n);
                }
                if declared {
                    self.event(key, VerdictKind::Revived, now);
                }
            }
            State::Alive | State::Dead(..) => track.advanced_at = now,
        }
    }

    /// Measures `key`'s round trip from an answer to one of its direct pings (`nonce` tagged
    /// with the ping's number; a relayed answer or one to a ping no longer kept says nothing).
    fn round_trip(&mut self, key: &Key, nonce: u64, now: u64) {
        let tag = nonce - untagged(nonce);
        let Some(track) = self.tracks.get_mut(key) else {
            return;
        };
        let sent = match &track.state {
            State::Probing(p) | State::Suspect(p, _) if tag < u64::from(PING_TAGS) => {
                p.sent_at(tag)
            }
            _ => None,
        };
        if let Some(sent) = sent {
            let rtt = now.saturating_sub(sent);
            track.rtt = slow_follow(track.rtt, rtt);
            self.slowest = slow_follow(self.slowest, rtt);
        }
    }

    /// An `Ack` for the probe of `key` arrived: alive.
    fn answered(&mut self, key: &Key, now: u64) {
        let Some(track) = self.tracks.get_mut(key) else {
            return;
        };
        let was = std::mem::replace(&mut track.state, State::Alive);
        self.verdicts_dirty |= shown(&was) != Verdict::Alive;
        self.ring_dirty |= matches!(was, State::Dead(..));
        track.advanced_at = now;
        track.verified = true;
        track.told_by.clear();
        let nonce = match &was {
            State::Probing(p) | State::Suspect(p, _) => Some(p.nonce),
            _ => None,
        };
        let dead_nonce = track.dead_nonce.take();
        for n in nonce.into_iter().chain(dead_nonce) {
            self.pending.remove(&n);
        }
        match was {
            State::Suspect(..) => self.event(key, VerdictKind::Refuted, now),
            // A ping to a member held dead (watching) was answered.
            State::Dead(_, true) => self.event(key, VerdictKind::Revived, now),
            _ => {}
        }
        // One step down per HEALTH_DECAY_MS at most (Lifeguard lowers it once per probe period):
        // a burst of answers after a blackout must not undo the failures that raised it.
        if self.health > 0 && now.saturating_sub(self.health_down_at) >= HEALTH_DECAY_MS {
            self.health -= 1;
            self.health_down_at = now;
            self.health_fell_at = now;
        }
    }
}

/// The verdict a member in `state` is shown with (when judged).
fn shown(state: &State) -> Verdict {
    match state {
        State::Alive | State::Probing(_) => Verdict::Alive,
        State::Suspect(..) => Verdict::Suspect,
        State::Dead(..) => Verdict::Dead,
    }
}

fn ping(nonce: u64, key: &Key) -> ProbeMsg {
    ProbeMsg::Ping {
        nonce,
        target: key.0.clone(),
        target_gen: key.1,
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
