//! Watching (compact gossip): the ring each agent watches and the pings of members held dead.
//! The mode is described in the parent module's documentation.

use super::{ping, Key, Outgoing, Prober, State};

impl Prober {
    /// Watching or not (the shell turns it on with compact gossip, where heartbeats no longer
    /// reach every member every round): see [`ProbeConfig::watchers`](super::ProbeConfig::watchers).
    /// Turning it on unverifies every member: a heartbeat seen before may be a dead
    /// incarnation's, relayed late (a restarted agent reading its own earlier one), and
    /// watching, a member held alive that nobody else does is on nobody's ring but this
    /// agent's: only its own probe (one each, a few a tick) can find it dead.
    pub fn set_watching(&mut self, on: bool) {
        if self.watching != on {
            self.watching = on;
            self.ring_print = (usize::MAX, 0);
            self.ring_dirty = true;
            self.watched.clear();
            if on {
                for t in self.tracks.values_mut() {
                    t.verified = false;
                }
            }
            self.rebuild_active();
        }
    }

    /// Whether it watches (see [`Self::set_watching`]).
    pub fn watching(&self) -> bool {
        self.watching
    }

    /// The members this agent watches now, by name and generation (empty unless watching).
    pub fn watched(&self) -> Vec<(String, u64)> {
        self.watched.iter().cloned().collect()
    }

    /// Every member this detector declared dead, leaving ones included: with compact gossip the
    /// shell hands these to chitchat as its liveness, heartbeats no longer being the judge. A
    /// member only first seen not live (its state not yet come) is not one: handed to chitchat,
    /// it would stay not live there after its state came, and so here, until a ping at the dead
    /// members' pace was answered (at a joining agent of a loaded mesh of 100, tens of members
    /// for minutes).
    pub fn held_dead(&self) -> Vec<(String, u64)> {
        self.candidates()
            .filter(|(_, t)| t.probes && matches!(t.state, State::Dead(_, true)))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Watching: the members that follow this agent on a ring of itself and every member judged
    /// and not held dead (ordered by a hash of name and generation), [`ProbeConfig::watchers`](super::ProbeConfig::watchers)
    /// of them. Recomputed only when that set changed.
    pub(super) fn update_ring(&mut self) {
        if !std::mem::take(&mut self.ring_dirty) {
            #[cfg(debug_assertions)]
            assert_eq!(
                self.ring_now(),
                self.ring_print,
                "the ring moved without being flagged"
            );
            return;
        }
        let print = self.ring_now();
        if print == self.ring_print {
            return;
        }
        self.ring_print = print;
        let mut ring: Vec<(u64, &Key)> = self
            .tracks
            .iter()
            .filter(|(_, t)| self.judges(t) && !matches!(t.state, State::Dead(..)))
            .map(|(k, t)| (t.ring, k))
            .collect();
        let me = (ring_place(&self.me), &self.me);
        ring.push(me);
        ring.sort_unstable();
        let at = ring.iter().position(|r| *r == me).unwrap_or(0);
        let n = self.config.watchers.min(ring.len() - 1);
        self.watched = (1..=n)
            .map(|i| ring[(at + i) % ring.len()].1.clone())
            .collect();
        // A member newly watched is out of rest.
        self.active.extend(self.watched.iter().cloned());
    }

    /// How many members the ring holds, and the xor of their places.
    fn ring_now(&self) -> (usize, u64) {
        let mut print = (1usize, ring_place(&self.me));
        for t in self.tracks.values() {
            if self.judges(t) && !matches!(t.state, State::Dead(..)) {
                print.0 += 1;
                print.1 ^= t.ring;
            }
        }
        print
    }

    /// Watching: pings up to [`ProbeConfig::dead_pings_per_tick`] members held dead, those pinged
    /// longest ago first, each at most once per [`ProbeConfig::dead_ping_ms`]: an answer revives
    /// it (after a partition heals, nothing else would: its heartbeats no longer spread).
    pub(super) fn ping_dead(&mut self, now: u64, out: &mut Vec<Outgoing>) {
        let every = self.config.dead_ping_ms;
        let mut due: Vec<(u64, Key)> = self
            .candidates()
            .filter(|(_, t)| {
                self.judges(t)
                    && matches!(t.state, State::Dead(..))
                    && now.saturating_sub(t.probed_at) >= every
            })
            .map(|(k, t)| (t.probed_at, k.clone()))
            .collect();
        due.sort_unstable();
        for (_, key) in due.into_iter().take(self.config.dead_pings_per_tick) {
            self.ping_dead_now(&key, now, out);
        }
    }

    /// Pings `key`, held dead, naming its incarnation: only its answer revives it.
    pub(super) fn ping_dead_now(&mut self, key: &Key, now: u64, out: &mut Vec<Outgoing>) {
        let nonce = self.nonce();
        let Some(t) = self.tracks.get_mut(key) else {
            return;
        };
        t.probed_at = now;
        if let Some(old) = t.dead_nonce.replace(nonce) {
            self.pending.remove(&old);
        }
        out.push((t.addr, ping(nonce, key)));
        self.pending.insert(nonce, key.clone());
        self.counters.dead_pings += 1;
    }
}

/// A member's place on the watching ring: the same on every agent.
pub(super) fn ring_place(key: &Key) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key.0.as_bytes(), key.1)
}
