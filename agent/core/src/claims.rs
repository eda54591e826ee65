//! Two live agents claiming one node name (issue 29, item 4): the rule that tells a twin (a second
//! agent started with a node's certificate while that node runs) from a restart.
//!
//! Gossip gives every agent one identity per agent process: name, generation (the wall clock in ms
//! at its start, larger than every generation its data dir handed out before) and gossip address,
//! with a heartbeat counter that only a running process raises. A restart leaves the old identity
//! of a name beside the new one for an hour (chitchat's dead set) and, for up to the failure
//! detector's verdict, both may look live; but the old one's heartbeat stops when its process
//! does. So the rule reads heartbeats, not liveness:
//!
//! - an identity is **heartbeating** while its heartbeat advanced within [`FRESH_MS`] (its first
//!   sighting counts as an advance);
//! - a name is **disputed** once two of its identities (neither announcing a leave or a restart)
//!   have both been heartbeating without a break for [`DISPUTE_MS`];
//! - in a dispute, the **later claimant** is every identity but the one with the lowest
//!   generation (the incumbent: the one the membership already shows, `view::members`).
//!
//! A restart cannot make a dispute: the new process starts after the old one stopped, so the two
//! overlap only while the old one's last heartbeat is fresh, at most [`FRESH_MS`] plus how late
//! that heartbeat is relayed, well under [`DISPUTE_MS`]. An agent that sees another identity of
//! its own name with a lower generation heartbeating holds at once (no window): it is either a
//! restart that overlaps for a moment or the later claimant.
//!
//! Pure: time is `now_ms` (monotonic), the view is what the shell read from chitchat.

use std::collections::BTreeMap;

/// How long after its heartbeat last advanced an identity still counts as heartbeating: four
/// gossip rounds at the default 250 ms interval.
pub const FRESH_MS: u64 = 1_000;
/// How long two identities of one name must both heartbeat, without a break, to be a dispute:
/// three times [`FRESH_MS`], so that the overlap of a restart (at most `FRESH_MS` and the relay
/// delay of the old identity's last heartbeat) never reaches it.
pub const DISPUTE_MS: u64 = 3_000;
/// The most identities tracked; past it the oldest sightings are forgotten (a peer's digest
/// can name made-up identities: the tracker stays bounded whatever it holds).
pub const IDENTITIES_MAX: usize = 4_096;

/// One gossip identity as the shell reads it from chitchat.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Identity {
    /// The node name it claims.
    pub name: String,
    /// Its generation (start time in ms, as it gossips it).
    pub generation: u64,
    /// Its gossip address, as text.
    pub gossip_addr: String,
}

/// What the shell read of one identity this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// Who.
    pub identity: Identity,
    /// Its heartbeat counter.
    pub heartbeat: u64,
    /// It announced a graceful leave or a planned restart: it is stopping, not claiming.
    pub leaving: bool,
}

/// [`Sighting`] with a borrowed identity ([`NameClaims::handle_view_of`]).
#[derive(Clone, Copy, Debug)]
pub struct SightingRef<'a> {
    /// Who.
    pub identity: &'a Identity,
    /// Its heartbeat counter.
    pub heartbeat: u64,
    /// It announced a graceful leave or a planned restart.
    pub leaving: bool,
}

/// Two (or more) live claimants of one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispute {
    /// The name.
    pub name: String,
    /// The incumbent: the claimant with the lowest generation.
    pub earlier: Identity,
    /// The other claimants, by generation: each runs no replica.
    pub later: Vec<Identity>,
    /// Since when (monotonic ms) the claimants have all been heartbeating.
    pub since_ms: u64,
}

impl Dispute {
    /// The operator's text: the name and both addresses and generations.
    pub fn message(&self) -> String {
        let later: Vec<String> = self
            .later
            .iter()
            .map(|i| format!("{} (generation {})", i.gossip_addr, i.generation))
            .collect();
        format!(
            "two live agents claim the node name {:?}: {} (generation {}) and {}; the later one \
             runs no replica and no node starts an exclusive replica of {:?} while both run. One \
             of them holds a copy of this node's key: stop the one that should not run (if the \
             key was stolen, revoke the certificate with `shoal pki revoke` and issue a new one)",
            self.name,
            self.earlier.gossip_addr,
            self.earlier.generation,
            later.join(", "),
            self.name
        )
    }
}

/// What this agent must hold on its own host for its own name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SelfHold {
    /// Nothing: no other live claimant of this name.
    #[default]
    None,
    /// The name is disputed and this agent is the incumbent: it starts no exclusive replica.
    Exclusive(String),
    /// Another identity of this name with a lower generation heartbeats: this agent starts
    /// nothing.
    All(String),
}

#[derive(Clone, Debug)]
struct Seen {
    heartbeat: u64,
    advanced_at_ms: u64,
    leaving: bool,
}

/// The claimants of every name over time: fed each round, asked for disputes.
#[derive(Clone, Debug, Default)]
pub struct NameClaims {
    seen: BTreeMap<Identity, Seen>,
    /// Per disputed-looking name: since when two of its identities have both been heartbeating.
    overlap_since_ms: BTreeMap<String, u64>,
    /// Two identities seen share a name.
    shared: bool,
}

impl NameClaims {
    /// Takes this round's view of every identity at `now_ms`. Identities no longer in the view
    /// are forgotten.
    pub fn handle_view(&mut self, now_ms: u64, view: impl IntoIterator<Item = Sighting>) {
        let view: Vec<Sighting> = view.into_iter().collect();
        let refs: Vec<SightingRef<'_>> = view
            .iter()
            .map(|s| SightingRef {
                identity: &s.identity,
                heartbeat: s.heartbeat,
                leaving: s.leaving,
            })
            .collect();
        self.handle_view_of(now_ms, &refs);
    }

    /// [`Self::handle_view`] from borrowed identities: a round whose view holds the identities
    /// already tracked, in order (the usual one), updates them in place and clones none.
    pub fn handle_view_of(&mut self, now_ms: u64, view: &[SightingRef<'_>]) {
        let update = |seen: &mut Seen, s: &SightingRef<'_>| {
            if s.heartbeat > seen.heartbeat {
                seen.heartbeat = s.heartbeat;
                seen.advanced_at_ms = now_ms;
            }
            seen.leaving = s.leaving;
        };
        let same = self.seen.len() == view.len()
            && self.seen.keys().zip(view).all(|(id, s)| id == s.identity);
        if same {
            for (seen, s) in self.seen.values_mut().zip(view) {
                update(seen, s);
            }
        } else {
            self.rebuild(now_ms, view, update);
        }
        self.after_view(now_ms);
    }

    /// Takes a view whose identities differ from those tracked: a new map, keeping what was
    /// seen of those still in it.
    fn rebuild(
        &mut self,
        now_ms: u64,
        view: &[SightingRef<'_>],
        update: impl Fn(&mut Seen, &SightingRef<'_>),
    ) {
        let mut next: BTreeMap<Identity, Seen> = BTreeMap::new();
        for s in view {
            let seen = match self.seen.remove(s.identity) {
                Some(mut seen) => {
                    update(&mut seen, s);
                    seen
                }
                None => Seen {
                    heartbeat: s.heartbeat,
                    advanced_at_ms: now_ms,
                    leaving: s.leaving,
                },
            };
            next.insert(s.identity.clone(), seen);
        }
        if next.len() > IDENTITIES_MAX {
            // Keep the most recently advanced ones.
            let mut by_age: Vec<(u64, Identity)> = next
                .iter()
                .map(|(id, s)| (s.advanced_at_ms, id.clone()))
                .collect();
            by_age.sort();
            for (_, id) in by_age.into_iter().take(next.len() - IDENTITIES_MAX) {
                next.remove(&id);
            }
        }
        self.seen = next;
    }

    /// The dispute clocks after a view.
    fn after_view(&mut self, now_ms: u64) {
        let overlapping = self.overlapping(now_ms);
        self.overlap_since_ms
            .retain(|name, _| overlapping.contains(name));
        for name in overlapping {
            self.overlap_since_ms.entry(name).or_insert(now_ms);
        }
        self.check_invariants();
    }

    /// The names with two or more identities heartbeating at `now_ms` and not leaving, in
    /// order. One walk: the identities of a name are adjacent (ordered by name first).
    fn overlapping(&mut self, now_ms: u64) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut run: Option<(&str, usize)> = None;
        let mut last: Option<&str> = None;
        let mut shared = false;
        for (id, seen) in &self.seen {
            shared |= last == Some(id.name.as_str());
            last = Some(&id.name);
            if !fresh(seen, now_ms) {
                continue;
            }
            run = match run {
                Some((name, count)) if name == id.name => Some((name, count + 1)),
                _ => Some((&id.name, 1)),
            };
            if let Some((name, 2)) = run {
                out.push(name.to_string());
            }
        }
        self.shared = shared;
        out
    }

    /// Whether two identities seen share a name (as of the last view): without one, no name
    /// has a [`Self::successor`] or a dispute.
    pub fn names_shared(&self) -> bool {
        self.shared
    }

    /// The identities of `name` heartbeating at `now_ms` and not leaving, by generation (then
    /// address): the identities' order within a name.
    fn claimants(&self, name: &str, now_ms: u64) -> Vec<&Identity> {
        self.of_name(name)
            .filter(|(_, seen)| fresh(seen, now_ms))
            .map(|(id, _)| id)
            .collect()
    }

    /// Every identity of `name` seen, in order.
    fn of_name(&self, name: &str) -> impl Iterator<Item = (&Identity, &Seen)> + '_ {
        let name = name.to_string();
        let from = Identity {
            name: name.clone(),
            generation: 0,
            gossip_addr: String::new(),
        };
        self.seen
            .range(from..)
            .take_while(move |(id, _)| id.name == name)
    }

    /// A newer identity of `id`'s name that heartbeats at `now_ms` while `id` does not: the one
    /// whose state stands for the name. Chitchat can hold a restarted agent's earlier identity
    /// live for seconds beside its new one (its last heartbeats relayed by members that heard it
    /// longer, after a partition heals), with its last instance list, which is stale.
    pub fn successor(&self, id: &Identity, now_ms: u64) -> Option<&Identity> {
        if self.seen.get(id).is_some_and(|s| fresh(s, now_ms)) {
            return None;
        }
        self.of_name(&id.name)
            .filter(|(other, s)| other.generation > id.generation && fresh(s, now_ms))
            .map(|(other, _)| other)
            .max_by_key(|other| other.generation)
    }

    /// The names disputed at `now_ms` (as of the last [`NameClaims::handle_view`]), by name.
    pub fn disputes(&self, now_ms: u64) -> Vec<Dispute> {
        self.overlap_since_ms
            .iter()
            .filter(|(_, since)| now_ms >= since.saturating_add(DISPUTE_MS))
            .filter_map(|(name, since)| {
                let ids = self.claimants(name, now_ms);
                if ids.len() < 2 {
                    return None;
                }
                Some(Dispute {
                    name: name.clone(),
                    earlier: ids[0].clone(),
                    later: ids[1..].iter().map(|i| (*i).clone()).collect(),
                    since_ms: *since,
                })
            })
            .collect()
    }

    /// What the agent `me` holds on its own host at `now_ms`.
    pub fn self_hold(&self, me: &Identity, now_ms: u64) -> SelfHold {
        let ids = self.claimants(&me.name, now_ms);
        let earlier = ids
            .iter()
            .find(|i| (i.generation, &i.gossip_addr) < (me.generation, &me.gossip_addr));
        if let Some(other) = earlier {
            return SelfHold::All(format!(
                "another agent with this node's name runs at {} (generation {}, this one {}): \
                 this agent starts nothing while it heartbeats",
                other.gossip_addr, other.generation, me.generation
            ));
        }
        match self
            .disputes(now_ms)
            .into_iter()
            .find(|d| d.name == me.name)
        {
            Some(d) => SelfHold::Exclusive(d.message()),
            None => SelfHold::None,
        }
    }

    /// How many identities are tracked.
    pub fn identities(&self) -> usize {
        self.seen.len()
    }

    /// Asserts the tracker's bounds.
    pub fn check_invariants(&self) {
        assert!(self.seen.len() <= IDENTITIES_MAX);
        assert!(self.overlap_since_ms.len() <= self.seen.len());
    }
}

/// Whether an identity seen so heartbeats at `now_ms` and is not leaving.
fn fresh(seen: &Seen, now_ms: u64) -> bool {
    !seen.leaving && now_ms < seen.advanced_at_ms.saturating_add(FRESH_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str, generation: u64, port: u16) -> Identity {
        Identity {
            name: name.to_string(),
            generation,
            gossip_addr: format!("127.0.0.1:{port}"),
        }
    }

    fn seen(identity: &Identity, heartbeat: u64) -> Sighting {
        Sighting {
            identity: identity.clone(),
            heartbeat,
            leaving: false,
        }
    }

    /// Feeds rounds every 250 ms from `from` to `to`; `beats(t)` says who heartbeats at t.
    fn run(
        claims: &mut NameClaims,
        from: u64,
        to: u64,
        view: impl Fn(u64) -> Vec<Sighting>,
    ) -> Option<u64> {
        let mut first = None;
        let mut t = from;
        while t <= to {
            claims.handle_view(t, view(t));
            if first.is_none() && !claims.disputes(t).is_empty() {
                first = Some(t);
            }
            t += 250;
        }
        first
    }

    /// A restarted agent's earlier identity brought back to life by relayed heartbeats (one
    /// jump, then nothing) gives way to its heartbeating successor once stale; a heartbeating
    /// earlier identity (a twin's incumbent) never does.
    #[test]
    fn a_stale_identity_gives_way_to_its_heartbeating_successor() {
        let (old, new) = (id("n2", 20, 2), id("n2", 30, 2));
        let mut claims = NameClaims::default();
        claims.handle_view(0, [seen(&old, 5), seen(&new, 1)]);
        assert_eq!(claims.successor(&old, 0), None, "both fresh at first sight");
        // The old identity's heartbeat jumps once (relayed), then stays; the new one beats.
        claims.handle_view(500, [seen(&old, 9), seen(&new, 2)]);
        claims.handle_view(1_000, [seen(&old, 9), seen(&new, 3)]);
        assert_eq!(
            claims.successor(&old, 1_000),
            None,
            "the jump is 500 ms old"
        );
        claims.handle_view(1_600, [seen(&old, 9), seen(&new, 4)]);
        assert_eq!(claims.successor(&old, 1_600), Some(&new));
        assert_eq!(claims.successor(&new, 1_600), None);
        // Both beating: the earlier keeps its state (the dispute rule decides the rest).
        claims.handle_view(1_800, [seen(&old, 10), seen(&new, 5)]);
        assert_eq!(claims.successor(&old, 1_800), None);
    }

    #[test]
    fn a_twin_is_a_dispute_after_the_window_with_the_later_generation_named() {
        let (n1, n2, twin) = (id("n1", 10, 1), id("n2", 20, 2), id("n2", 30, 9));
        let mut claims = NameClaims::default();
        let first = run(&mut claims, 0, 10_000, |t| {
            let mut v = vec![seen(&n1, t), seen(&n2, t)];
            if t >= 2_000 {
                v.push(seen(&twin, t));
            }
            v
        });
        assert_eq!(first, Some(2_000 + DISPUTE_MS));
        let d = &claims.disputes(10_000)[0];
        assert_eq!(
            (d.name.as_str(), &d.earlier, &d.later[..]),
            ("n2", &n2, &[twin.clone()][..])
        );
        assert!(d.message().contains("127.0.0.1:2") && d.message().contains("127.0.0.1:9"));
        assert!(matches!(claims.self_hold(&twin, 10_000), SelfHold::All(_)));
        assert!(matches!(
            claims.self_hold(&n2, 10_000),
            SelfHold::Exclusive(_)
        ));
        assert_eq!(claims.self_hold(&n1, 10_000), SelfHold::None);
    }

    #[test]
    fn a_crash_restart_is_never_a_dispute_whatever_the_gap() {
        // The old process stops heartbeating at `stop`; the new one starts `gap` later; its last
        // heartbeats may be relayed up to 750 ms late.
        for gap in [0, 100, 250, 1_000, 5_000] {
            for relay in [0, 250, 750] {
                let (old, new) = (id("n2", 20, 2), id("n2", 40, 2));
                let stop = 3_000;
                let mut claims = NameClaims::default();
                let first = run(&mut claims, 0, 20_000, |t| {
                    let old_beat = t.saturating_sub(relay).min(stop);
                    let mut v = vec![seen(&old, old_beat)];
                    if t >= stop + gap {
                        v.push(seen(&new, t));
                    }
                    v
                });
                assert_eq!(first, None, "gap {gap} relay {relay}");
                assert_eq!(claims.self_hold(&new, 20_000), SelfHold::None);
            }
        }
    }

    #[test]
    fn a_planned_restart_announced_leaving_holds_nothing() {
        let (old, new) = (id("n2", 20, 2), id("n2", 40, 2));
        let mut claims = NameClaims::default();
        claims.handle_view(0, [seen(&old, 1)]);
        let leaving = Sighting {
            leaving: true,
            ..seen(&old, 2)
        };
        claims.handle_view(250, [leaving, seen(&new, 1)]);
        assert_eq!(claims.self_hold(&new, 250), SelfHold::None);
    }

    #[test]
    fn the_later_claimant_holds_at_first_sight_before_any_dispute() {
        let (n2, twin) = (id("n2", 20, 2), id("n2", 30, 9));
        let mut claims = NameClaims::default();
        claims.handle_view(0, [seen(&twin, 1), seen(&n2, 7)]);
        assert!(claims.disputes(0).is_empty());
        assert!(matches!(claims.self_hold(&twin, 0), SelfHold::All(_)));
        assert_eq!(claims.self_hold(&n2, 0), SelfHold::None);
    }

    #[test]
    fn a_dispute_ends_when_one_claimant_stops_and_a_break_restarts_the_window() {
        let (n2, twin) = (id("n2", 20, 2), id("n2", 30, 9));
        let mut claims = NameClaims::default();
        let first = run(&mut claims, 0, 6_000, |t| {
            vec![seen(&n2, t), seen(&twin, t)]
        });
        assert_eq!(first, Some(DISPUTE_MS));
        // The twin stops: the dispute ends once its last heartbeat is stale.
        run(&mut claims, 6_250, 6_750, |t| {
            vec![seen(&n2, t), seen(&twin, 6_000)]
        });
        assert_eq!(
            claims.disputes(6_750).len(),
            1,
            "its last heartbeat is still fresh"
        );
        run(&mut claims, 7_000, 12_000, |t| {
            vec![seen(&n2, t), seen(&twin, 6_000)]
        });
        assert!(claims.disputes(12_000).is_empty());
        assert_eq!(claims.self_hold(&n2, 12_000), SelfHold::None);
        // It comes back: a new window.
        let back = run(&mut claims, 12_250, 20_000, |t| {
            vec![seen(&n2, t), seen(&twin, t)]
        });
        assert_eq!(back, Some(12_250 + DISPUTE_MS));
    }

    #[test]
    fn the_tracker_stays_bounded_under_made_up_identities() {
        let mut claims = NameClaims::default();
        let view: Vec<Sighting> = (0..IDENTITIES_MAX as u64 + 100)
            .map(|g| seen(&id("ghost", g, 1), 1))
            .collect();
        claims.handle_view(0, view);
        assert_eq!(claims.identities(), IDENTITIES_MAX);
        claims.check_invariants();
    }
}
