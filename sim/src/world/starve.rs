//! Slow hosts: `starve` (an agent frozen for part of every period, as SIGSTOP/SIGCONT or a
//! starved CPU leaves it, with an optional extra delay on its messages) and `slow-link` (loss and
//! delay on every link of a host). A starve freezes with the same switch as a pause (every task
//! of the agent stops at its freeze gate, as under SIGSTOP, nothing reaches or leaves the host,
//! its instances run on); a pause event and a
//! starve on one host each hold the host frozen, and it runs again when neither does.
//!
//! Every freeze of a duty cycle really happens or the trace says why not: a starve whose hosts
//! all crashed ends there (traced), and the report counts the cycles run (`starve_cycles`).

use std::collections::BTreeSet;

use super::{Origin, Step, World};
use crate::host::HostState;
use crate::net::LinkFault;
use crate::scenario::Selector;

/// One starve in force.
pub(crate) struct Starve {
    /// The hosts with the incarnation starved (one that crashed or restarted is left alone).
    hosts: Vec<(u32, u32)>,
    frozen_ms: u64,
    period_ms: u64,
    end_ms: u64,
    /// In the frozen part of a period now.
    frozen_now: bool,
    /// Frozen parts begun so far.
    cycles: u64,
    /// The link layer of its extra delay, if any.
    layer: Option<u64>,
    origin: Origin,
}

impl World {
    /// Fires a `starve`: `hosts` frozen for `frozen_ms` of every `period_ms` until
    /// `duration_ms` from now, all in step; with `delay_ms`, their links slower by that much.
    pub(super) fn starve(
        &mut self,
        hosts: Vec<u32>,
        (frozen_ms, period_ms, delay_ms, duration_ms): (u64, u64, u64, u64),
        origin: Origin,
    ) {
        let now = self.now_ms();
        let layer = (delay_ms > 0).then(|| {
            let mut fault = self.scenario.network;
            fault.delay += std::time::Duration::from_millis(delay_ms);
            self.add_link_layer(Some(self.links_of(&hosts)), fault)
        });
        self.log(format!(
            "starve {}: frozen {frozen_ms} ms of every {period_ms} ms for {duration_ms} ms, \
             messages {delay_ms} ms later",
            Selector::concrete(&hosts)
        ));
        let hosts = hosts
            .iter()
            .map(|&h| (h, self.hosts[h as usize].incarnation))
            .collect();
        self.starve_seq += 1;
        let id = self.starve_seq;
        let starve = Starve {
            hosts,
            frozen_ms,
            period_ms,
            end_ms: now + duration_ms,
            frozen_now: false,
            cycles: 0,
            layer,
            origin,
        };
        self.starves.insert(id, starve);
        self.starve_step(id);
    }

    /// The next switch of starve `id`: freeze, thaw, or its end.
    pub(super) fn starve_step(&mut self, id: u64) {
        let now = self.now_ms();
        let Some(s) = self.starves.get(&id) else {
            return; // ended by the liveness phase
        };
        let alive: Vec<u32> = s
            .hosts
            .iter()
            .filter(|&&(h, inc)| {
                let host = &self.hosts[h as usize];
                host.incarnation == inc && host.state == HostState::Up
            })
            .map(|&(h, _)| h)
            .collect();
        let (frozen_now, end_ms) = (s.frozen_now, s.end_ms);
        if now >= end_ms || (alive.is_empty() && !frozen_now) {
            self.end_starve(id, now >= end_ms);
            return;
        }
        let s = self.starves.get_mut(&id).expect("starve present");
        let next = if frozen_now {
            s.frozen_now = false;
            now + s.period_ms - s.frozen_ms
        } else {
            s.frozen_now = true;
            s.cycles += 1;
            now + s.frozen_ms
        };
        self.schedule_step(next.min(end_ms), Step::Starve { id });
        self.refreeze(&alive);
    }

    /// Ends starve `id` (at its end, or because every host it starved crashed).
    fn end_starve(&mut self, id: u64, on_time: bool) {
        let Some(s) = self.starves.remove(&id) else {
            return;
        };
        if let Some(layer) = s.layer {
            self.end_link(layer, &s.origin);
        }
        let hosts: Vec<u32> = s.hosts.iter().map(|&(h, _)| h).collect();
        self.refreeze(&hosts);
        let why = if on_time {
            "it ended"
        } else {
            "every host it starved crashed"
        };
        self.log(format!(
            "end of {}: {why} after {} frozen cycles",
            s.origin, s.cycles
        ));
        self.checker.starve_cycles += s.cycles;
    }

    /// Every starve ends now (the liveness phase); returns how many there were.
    pub(super) fn end_starves(&mut self) -> usize {
        let ids: Vec<u64> = self.starves.keys().copied().collect();
        for &id in &ids {
            self.end_starve(id, true);
        }
        ids.len()
    }

    /// Whether a starve holds `h` frozen now.
    fn starve_holds(&self, h: u32) -> bool {
        let inc = self.hosts[h as usize].incarnation;
        self.starves
            .values()
            .any(|s| s.frozen_now && s.hosts.contains(&(h, inc)))
    }

    /// Sets each of `hosts` frozen when a pause or a starve holds it, running otherwise
    /// (quietly: a duty cycle would fill the schedule).
    fn refreeze(&mut self, hosts: &[u32]) {
        for &h in hosts {
            if self.hosts[h as usize].state != HostState::Up {
                continue;
            }
            let frozen = self.pause_held.contains(&h) || self.starve_holds(h);
            let frozen_now = !self.hosts[h as usize].serving();
            if frozen != frozen_now {
                self.set_frozen(h, frozen);
            }
        }
    }

    /// Whether a pause event holds `h`; a pause's end thaws a host only when no starve holds
    /// it.
    pub(super) fn pause_holds(&self, h: u32) -> bool {
        self.pause_held.contains(&h)
    }

    /// The end of a pause of `hosts`: each runs again unless a starve holds it.
    pub(super) fn release_pause(&mut self, hosts: &[u32]) {
        for h in hosts {
            self.pause_held.remove(h);
        }
        let thaw: Vec<u32> = hosts
            .iter()
            .copied()
            .filter(|&h| !self.starve_holds(h))
            .collect();
        if !thaw.is_empty() {
            self.set_paused(&thaw, false);
        }
    }

    /// Every link to and from `hosts`.
    fn links_of(&self, hosts: &[u32]) -> Vec<(u32, u32)> {
        let n = self.hosts.len() as u32;
        let mut links = BTreeSet::new();
        for &a in hosts {
            for b in (0..n).filter(|&b| b != a) {
                links.insert((a, b));
                links.insert((b, a));
            }
        }
        links.into_iter().collect()
    }

    /// Fires a `slow-link`: `fault` on every link to and from `hosts` for `duration_ms`.
    pub(super) fn slow_link(
        &mut self,
        hosts: &[u32],
        fault: LinkFault,
        duration_ms: u64,
        origin: Origin,
    ) {
        let now = self.now_ms();
        self.log(format!(
            "slow-link {}: {fault:?} both ways for {duration_ms} ms",
            Selector::concrete(hosts)
        ));
        let id = self.add_link_layer(Some(self.links_of(hosts)), fault);
        self.schedule_step(now + duration_ms, Step::EndLink { id, origin });
    }
}
