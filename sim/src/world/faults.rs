//! The faults in force and their ends: partitions as cuts (sets of blocked links, one per
//! partition or network flap, the network blocking their union), link faults as layers (the
//! latest layer covering a link wins), pauses with the incarnation they froze. Each fault ends
//! on its own: the end of one partition leaves another in force.
//!
//! Also the rule that every scheduled event takes effect: [`World::pick`] fails the event when
//! its selector matches fewer hosts than it names, a restart fails on a host that is up, and a
//! restart postponed behind a previous incarnation gives up after [`RESTART_TRIES_MAX`].

use std::collections::{BTreeMap, BTreeSet};

use super::{Origin, Step, World};
use crate::host::HostState;
use crate::net::LinkFault;
use crate::scenario::Selector;

/// Time between two attempts of a postponed restart.
const RESTART_RETRY_MS: u64 = 500;
/// Postponements of a restart before it fails the run (10 s in all).
pub(super) const RESTART_TRIES_MAX: u32 = 20;

/// Partitions and link faults in force.
#[derive(Default)]
pub(crate) struct Faults {
    next_id: u64,
    cuts: BTreeMap<u64, Cut>,
    layers: BTreeMap<u64, LinkLayer>,
    /// Links given a fault of their own, to clear when no layer covers them any more.
    applied: BTreeSet<(u32, u32)>,
    /// Links a link fault makes lose everything (loss 1): cut, for the false-verdict checker.
    lossy: BTreeSet<(u32, u32)>,
}

/// One partition's blocked links, and the hosts it keeps from being heard (one-way out).
struct Cut {
    links: BTreeSet<(u32, u32)>,
    unheard: Vec<u32>,
}

/// One link fault: on `links`, or on every link (`None`).
struct LinkLayer {
    links: Option<Vec<(u32, u32)>>,
    fault: LinkFault,
}

impl Faults {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

impl World {
    /// Resolves `sel` among `pool` for `origin`; fails the event (and returns None) when it
    /// matches no host or fewer than it names. `among` says what the pool is ("live hosts").
    pub(super) fn pick(
        &mut self,
        origin: &str,
        field: &str,
        sel: &Selector,
        pool: &[u32],
        among: &str,
    ) -> Option<Vec<u32>> {
        let got = self.resolve(sel, pool);
        let wanted = sel.wanted(self.hosts.len() as u32);
        if !got.is_empty() && wanted.is_none_or(|w| got.len() >= w) {
            return Some(got);
        }
        let mut why = format!(
            "{field} {sel} matched {} of the {} {among}",
            got.len(),
            pool.len()
        );
        if let Selector::Nodes(named) = sel {
            let states: Vec<String> = named
                .iter()
                .filter(|h| !pool.contains(h))
                .map(|&h| format!("n{} is {}", h + 1, self.describe(h)))
                .collect();
            why += &format!(" ({})", states.join(", "));
        }
        self.event_failed(origin, why);
        None
    }

    /// A host's state in words, for failure lines.
    pub(super) fn describe(&self, h: u32) -> &'static str {
        let host = &self.hosts[h as usize];
        match host.state {
            HostState::Down => "down",
            HostState::Starting => "starting",
            HostState::Up if !host.serving() => "paused",
            HostState::Up => "up",
        }
    }

    /// Blocks `links` until the cut's end; `unheard` are hosts the cut keeps from being heard
    /// while they still hear (for the known causes of exclusive duplicates).
    pub(super) fn add_cut(&mut self, links: BTreeSet<(u32, u32)>, unheard: Vec<u32>) -> u64 {
        let now = self.now_ms();
        for &h in &unheard {
            self.checker.episode_start(h, "one-way partition", now);
        }
        let id = self.faults.id();
        self.faults.cuts.insert(id, Cut { links, unheard });
        self.apply_cuts();
        id
    }

    pub(super) fn end_cut(&mut self, id: u64, origin: &str) {
        match self.faults.cuts.remove(&id) {
            Some(cut) => {
                let now = self.now_ms();
                for h in cut.unheard {
                    self.checker.episode_end(h, "one-way partition", now);
                }
                self.apply_cuts();
                self.log(format!("end of {origin}: its cut healed"));
            }
            None => self.log(format!("end of {origin}: already healed by a heal")),
        }
    }

    /// Every partition heals; returns how many there were.
    pub(super) fn heal_all(&mut self) -> usize {
        let now = self.now_ms();
        let cuts = std::mem::take(&mut self.faults.cuts);
        for h in cuts.values().flat_map(|c| c.unheard.iter()) {
            self.checker.episode_end(*h, "one-way partition", now);
        }
        self.apply_cuts();
        cuts.len()
    }

    fn apply_cuts(&mut self) {
        let links = self.faults.cuts.values().flat_map(|c| c.links.iter());
        let links: BTreeSet<(u32, u32)> = links.copied().collect();
        self.net.set_blocked_links(links);
        self.record_reach();
    }

    /// Tells the false-verdict checker which links carry nothing now: those cut, and those a
    /// link fault makes lose every message.
    fn record_reach(&mut self) {
        let mut links: BTreeSet<(u32, u32)> = self
            .faults
            .cuts
            .values()
            .flat_map(|c| c.links.iter().copied())
            .collect();
        links.extend(self.faults.lossy.iter().copied());
        let now = self.now_ms();
        self.checker.reach.set_blocked(&links, now);
    }

    /// Puts `fault` on `links` (None: every link) until the layer's end.
    pub(super) fn add_link_layer(
        &mut self,
        links: Option<Vec<(u32, u32)>>,
        fault: LinkFault,
    ) -> u64 {
        let id = self.faults.id();
        self.faults.layers.insert(id, LinkLayer { links, fault });
        self.apply_layers();
        id
    }

    pub(super) fn end_link(&mut self, id: u64, origin: &str) {
        if self.faults.layers.remove(&id).is_some() {
            self.apply_layers();
            self.log(format!("end of {origin}: link fault cleared"));
        }
    }

    /// Every link fault ends; returns how many there were.
    pub(super) fn clear_links(&mut self) -> usize {
        let n = std::mem::take(&mut self.faults.layers).len();
        self.apply_layers();
        n
    }

    /// The network's faults from the layers in force, the latest winning.
    fn apply_layers(&mut self) {
        let mut default = self.scenario.network;
        let mut per_link: BTreeMap<(u32, u32), LinkFault> = BTreeMap::new();
        for layer in self.faults.layers.values() {
            match &layer.links {
                None => {
                    default = layer.fault;
                    per_link.clear();
                }
                Some(links) => per_link.extend(links.iter().map(|l| (*l, layer.fault))),
            }
        }
        self.net.set_default_fault(default);
        for link in &self.faults.applied {
            if !per_link.contains_key(link) {
                self.net.set_link_fault(link.0, link.1, None);
            }
        }
        for (link, fault) in &per_link {
            self.net.set_link_fault(link.0, link.1, Some(*fault));
        }
        self.faults.lossy = if default.loss >= 1.0 {
            let n = self.hosts.len() as u32;
            (0..n)
                .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
                .filter(|l| per_link.get(l).is_none_or(|f| f.loss >= 1.0))
                .collect()
        } else {
            (per_link.iter())
                .filter(|(_, f)| f.loss >= 1.0)
                .map(|(l, _)| *l)
                .collect()
        };
        let delays = (per_link.iter())
            .map(|(l, f)| (*l, f.delay.as_millis() as u64))
            .collect();
        self.checker
            .reach
            .set_delays(default.delay.as_millis() as u64, delays);
        self.faults.applied = per_link.into_keys().collect();
        self.record_reach();
    }

    /// Crashed hosts start again. A host that is not down fails the event; a host whose
    /// previous incarnation is still referenced is retried every [`RESTART_RETRY_MS`], and
    /// fails the event after [`RESTART_TRIES_MAX`] tries.
    pub(super) fn restart(&mut self, hosts: Vec<u32>, origin: Origin, tries: u32) {
        let mut later = Vec::new();
        for h in hosts {
            let host = &self.hosts[h as usize];
            if host.state != HostState::Down {
                let why = format!(
                    "n{} is already {} (a restart needs a crashed host)",
                    h + 1,
                    self.describe(h)
                );
                self.event_failed(&origin, why);
            } else if !host.ghost_alive() {
                self.start_host(h);
            } else if tries < RESTART_TRIES_MAX {
                later.push(h);
            } else {
                let why = format!(
                    "n{} could not restart: its previous incarnation was still referenced after \
                     {} ms of retries (a call in flight, or a reference cycle)",
                    h + 1,
                    u64::from(tries) * RESTART_RETRY_MS
                );
                self.event_failed(&origin, why);
            }
        }
        if later.is_empty() {
            return;
        }
        if tries == 0 {
            self.log(format!(
                "restart of {} ({origin}) postponed: the previous incarnation is still referenced",
                Selector::concrete(&later)
            ));
        }
        let now = self.now_ms();
        let step = Step::Restart {
            hosts: later,
            origin,
            tries: tries + 1,
        };
        self.schedule_step(now + RESTART_RETRY_MS, step);
    }

    /// Pauses hosts until `duration_ms` from now.
    pub(super) fn pause(&mut self, hosts: &[u32], duration_ms: u64, origin: Origin) {
        let now = self.now_ms();
        self.pause_held.extend(hosts.iter().copied());
        self.set_paused(hosts, true);
        for &h in hosts {
            self.checker.episode_start(h, "pause", now);
        }
        let frozen = hosts
            .iter()
            .map(|&h| (h, self.hosts[h as usize].incarnation))
            .collect();
        let step = Step::Resume {
            hosts: frozen,
            origin,
        };
        self.schedule_step(now + duration_ms, step);
    }

    /// The end of a pause: the incarnations it froze resume (one that crashed meanwhile ended
    /// its pause by dying).
    pub(super) fn resume(&mut self, hosts: &[(u32, u32)], origin: &str) {
        let now = self.now_ms();
        let mut resumed = Vec::new();
        for &(h, incarnation) in hosts {
            self.checker.episode_end(h, "pause", now);
            let host = &self.hosts[h as usize];
            if host.incarnation == incarnation && host.state != HostState::Down {
                resumed.push(h);
            } else {
                let line = format!("end of {origin}: n{} crashed while paused", h + 1);
                self.log(line);
            }
        }
        if !resumed.is_empty() {
            self.release_pause(&resumed);
        }
    }

    /// A flap's down phase: crash the hosts (restarted after `down_ms`) or cut them off.
    pub(super) fn flap_down(&mut self, hosts: &[u32], crash: bool, down_ms: u64, origin: Origin) {
        let now = self.now_ms();
        let c = Selector::concrete;
        if !crash {
            let others: Vec<u32> = (0..self.hosts.len() as u32)
                .filter(|h| !hosts.contains(h))
                .collect();
            let mut links = BTreeSet::new();
            for &a in hosts {
                for &b in &others {
                    links.insert((a, b));
                    links.insert((b, a));
                }
            }
            let id = self.add_cut(links, Vec::new());
            self.log(format!("flap down {} (network)", c(hosts)));
            self.schedule_step(now + down_ms, Step::EndCut { id, origin });
            return;
        }
        let mut crashed = Vec::new();
        let mut waiting = Vec::new();
        for &h in hosts {
            let down = self.hosts[h as usize].state == HostState::Down;
            let restarting = || {
                self.steps
                    .values()
                    .any(|s| matches!(s, Step::Restart { hosts, .. } if hosts.contains(&h)))
            };
            if down && restarting() {
                // The previous cycle's restart was postponed (its incarnation still
                // referenced): this cycle crashes the host once that restart ran.
                waiting.push(h);
            } else if down {
                let why = format!("n{} is already down (a flap crashes a live host)", h + 1);
                self.event_failed(&origin, why);
            } else {
                self.crash_host(h, true);
                crashed.push(h);
            }
        }
        if !waiting.is_empty() {
            self.log(format!(
                "flap down of {} postponed: its restart from the previous cycle is still pending",
                c(&waiting)
            ));
            let step = Step::FlapDown {
                hosts: waiting,
                crash,
                down_ms,
                origin: origin.clone(),
            };
            self.schedule_step(now + RESTART_RETRY_MS, step);
        }
        if crashed.is_empty() {
            return;
        }
        self.log(format!("flap down {} (crash)", c(&crashed)));
        let step = Step::Restart {
            hosts: crashed,
            origin,
            tries: 0,
        };
        self.schedule_step(now + down_ms, step);
    }
}

/// `n3,n7` for trace lines.
pub(super) fn names(hosts: &[u32]) -> String {
    let names: Vec<String> = hosts.iter().map(|h| format!("n{}", h + 1)).collect();
    names.join(",")
}
