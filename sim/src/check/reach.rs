//! Who could hear whom, lately: the ground truth behind a false verdict (docs/sim.md, "False
//! verdicts"). The driver reports every pause and resume of a host's agent (pause events and
//! starve duty cycles alike) and every change of the blocked links (partitions, network flaps)
//! as it makes them; [`Reach::reachable_within`] says whether two hosts had an instant in the
//! last [`REACHABLE_WITHIN_MS`] when neither was frozen and no cut stood between them, either
//! way. A link fault that loses every message (loss 1) counts as a cut; lower loss, delay and
//! jitter do not make a link unreachable (a message can still get through).
//!
//! Reach counts only up to one round trip before the verdict: the links' fixed delays both
//! ways (at least 1 ms), as the driver last set them. A cut that healed later than that could
//! not have carried a ping and its answer before the verdict, whatever the detector did.
//!
//! Only spans that ended within the window are kept: the history is bounded by how often the
//! driver can pause a host (its fastest duty cycle) over one window.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A verdict about a host (or a cell) that was reachable from its observer within this long
/// is false. Half a second: the member probes (`shoal_core::verdict`) may declare a member dead
/// about 0.5 s after it went silent at the earliest (its last heartbeat up to a round before,
/// 300 ms of quiet, a failed ping and a confirmed suspicion), so a member frozen or cut off
/// longer may be told dead, and a verdict on it is not counted.
pub const REACHABLE_WITHIN_MS: u64 = 500;

/// Spans kept per host at most (older ones are dropped first; a duty cycle of 10 ms over the
/// window needs 100).
const SPANS_MAX: usize = 256;

/// A span of time: start, and end (`None`: still in force).
type Span = (u64, Option<u64>);

/// A set of blocked links in force over a span.
type CutSpan = (Span, Arc<BTreeSet<(u32, u32)>>);

/// Pause spans per host and blocked-link snapshots, over the last window.
#[derive(Default)]
pub struct Reach {
    paused: BTreeMap<u32, Vec<Span>>,
    cuts: Vec<CutSpan>,
    /// The fixed one-way delay of every link (ms), and of the links a fault names apart.
    delay_ms: u64,
    link_delay_ms: BTreeMap<(u32, u32), u64>,
}

impl Reach {
    /// Host `h`'s agent is frozen (true) or runs again (false) from `now`.
    pub fn set_paused(&mut self, h: u32, paused: bool, now: u64) {
        let spans = self.paused.entry(h).or_default();
        let open = spans.last().is_some_and(|s| s.1.is_none());
        match (paused, open) {
            (true, false) => {
                if spans.len() >= SPANS_MAX {
                    spans.remove(0);
                }
                spans.push((now, None));
            }
            (false, true) => {
                if let Some(last) = spans.last_mut() {
                    last.1 = Some(now);
                }
            }
            _ => {}
        }
    }

    /// The blocked links are `links` from `now` (the union of the cuts in force).
    pub fn set_blocked(&mut self, links: &BTreeSet<(u32, u32)>, now: u64) {
        if let Some(last) = self.cuts.last_mut().filter(|c| c.0 .1.is_none()) {
            if *last.1 == *links {
                return;
            }
            last.0 .1 = Some(now);
        }
        if !links.is_empty() {
            self.cuts.push(((now, None), Arc::new(links.clone())));
        }
    }

    /// The links' fixed one-way delays from now: `default_ms` on every link but those in
    /// `links`.
    pub fn set_delays(&mut self, default_ms: u64, links: BTreeMap<(u32, u32), u64>) {
        self.delay_ms = default_ms;
        self.link_delay_ms = links;
    }

    /// The shortest round trip between `a` and `b`: a message each way, without jitter, at
    /// least 1 ms.
    pub fn round_trip_ms(&self, a: u32, b: u32) -> u64 {
        let one_way = |l: (u32, u32)| *self.link_delay_ms.get(&l).unwrap_or(&self.delay_ms);
        (one_way((a, b)) + one_way((b, a))).max(1)
    }

    /// The instants host `h` stopped running (froze) after `since` and up to `now`: the last
    /// instants it ran before each freeze, where a verdict it holds now may have been formed.
    pub fn froze_between(&self, h: u32, since: u64, now: u64) -> Vec<u64> {
        self.paused.get(&h).map_or_else(Vec::new, |spans| {
            spans
                .iter()
                .map(|s| s.0)
                .filter(|&start| start > since && start <= now)
                .collect()
        })
    }

    /// Forgets what ended before the window of `now`.
    pub fn prune(&mut self, now: u64) {
        let from = now.saturating_sub(REACHABLE_WITHIN_MS);
        let live = |s: &Span| s.1.is_none_or(|end| end >= from);
        for spans in self.paused.values_mut() {
            spans.retain(live);
        }
        self.paused.retain(|_, s| !s.is_empty());
        self.cuts.retain(|c| live(&c.0));
    }

    /// Whether `a` and `b` had an instant within the last [`REACHABLE_WITHIN_MS`] before `now`,
    /// and at least their shortest round trip before it ([`Self::round_trip_ms`]), when neither
    /// was frozen and neither `a -> b` nor `b -> a` was blocked.
    pub fn reachable_within(&self, a: u32, b: u32, now: u64) -> bool {
        let from = now.saturating_sub(REACHABLE_WITHIN_MS);
        let now = now.saturating_sub(self.round_trip_ms(a, b)).max(from);
        let mut unreachable: Vec<(u64, u64)> = Vec::new();
        let clip = |s: &Span| (s.0, s.1.unwrap_or(u64::MAX));
        for h in [a, b] {
            if let Some(spans) = self.paused.get(&h) {
                unreachable.extend(spans.iter().map(clip));
            }
        }
        for (span, links) in &self.cuts {
            if links.contains(&(a, b)) || links.contains(&(b, a)) {
                unreachable.push(clip(span));
            }
        }
        !covers(&mut unreachable, from, now)
    }
}

/// Whether the half-open `spans` cover `[from, to)`: an instant of reach at `to` itself (a
/// host thawed this very ms, its verdicts read in the same ms) is no time to hear anything.
fn covers(spans: &mut [(u64, u64)], from: u64, to: u64) -> bool {
    spans.sort_unstable();
    let mut cursor = from;
    for &(start, end) in spans.iter() {
        if start > cursor {
            return false;
        }
        cursor = cursor.max(end);
        if cursor >= to {
            return true;
        }
    }
    cursor >= to
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duty_cycle_leaves_the_host_reachable_and_a_long_pause_does_not() {
        let mut r = Reach::default();
        // Frozen 400 of every 500 ms from 10 s.
        for k in 0..5 {
            let t = 10_000 + k * 500;
            r.set_paused(3, true, t);
            r.set_paused(3, false, t + 400);
        }
        assert!(r.reachable_within(0, 3, 12_450));
        // Paused from 20 s on: reachable until 20.5 s, not after.
        r.set_paused(3, true, 20_000);
        assert!(r.reachable_within(0, 3, 20_499));
        assert!(!r.reachable_within(0, 3, 20_501));
        assert!(!r.reachable_within(3, 0, 21_500));
        r.set_paused(3, false, 22_000);
        assert!(r.reachable_within(0, 3, 22_100));
        assert!(!r.reachable_within(0, 3, 22_000), "thawed this very ms");
    }

    #[test]
    fn a_cut_blocks_only_its_links_either_way() {
        let mut r = Reach::default();
        let links: BTreeSet<(u32, u32)> = [(1, 2)].into_iter().collect();
        r.set_blocked(&links, 5_000);
        assert!(!r.reachable_within(2, 1, 7_000), "one way cut counts");
        assert!(r.reachable_within(1, 3, 7_000));
        r.set_blocked(&BTreeSet::new(), 8_000);
        assert!(r.reachable_within(1, 2, 8_500));
        r.prune(20_000);
        assert!(r.cuts.is_empty());
    }

    #[test]
    fn the_instants_an_observer_froze_between_two_readings_are_kept() {
        let mut r = Reach::default();
        r.set_paused(2, true, 1_000);
        r.set_paused(2, false, 1_010);
        r.set_paused(2, true, 3_000);
        r.set_paused(2, false, 9_000);
        assert_eq!(r.froze_between(2, 900, 9_100), vec![1_000, 3_000]);
        assert_eq!(r.froze_between(2, 1_000, 9_100), vec![3_000]);
        // Pruned relative to the observer's last reading (2.9 s), not to now: the freeze's
        // window (2.5-3 s) still tells that host 2 reached host 4 before it froze.
        r.prune(2_900);
        assert!(r.reachable_within(2, 4, 3_000));
        assert!(!r.reachable_within(2, 4, 9_000), "frozen the whole window");
    }

    #[test]
    fn reach_later_than_a_round_trip_before_the_verdict_does_not_count() {
        let mut r = Reach::default();
        let links: BTreeSet<(u32, u32)> = [(1, 2), (2, 1)].into_iter().collect();
        r.set_blocked(&links, 5_000);
        r.set_blocked(&BTreeSet::new(), 8_000);
        // 1 ms each way by default: healed 1 ms before is no round trip, 2 ms is.
        r.set_delays(1, BTreeMap::new());
        assert!(!r.reachable_within(1, 2, 8_001));
        assert!(r.reachable_within(1, 2, 8_003));
        // 33 ms from 2 to 1 and 1 ms back: a round trip takes 34 ms.
        r.set_delays(1, [((2, 1), 33)].into_iter().collect());
        assert_eq!(r.round_trip_ms(1, 2), 34);
        assert!(!r.reachable_within(2, 1, 8_034));
        assert!(r.reachable_within(2, 1, 8_035));
        // No delay at all: still 1 ms (a verdict in the heal's own ms heard nothing).
        r.set_delays(0, BTreeMap::new());
        assert!(!r.reachable_within(1, 2, 8_001));
        assert!(r.reachable_within(1, 2, 8_002));
    }

    #[test]
    fn an_observer_frozen_the_whole_window_reaches_nobody() {
        let mut r = Reach::default();
        r.set_paused(0, true, 1_000);
        assert!(!r.reachable_within(0, 5, 1_600));
        assert!(r.reachable_within(4, 5, 2_500));
    }
}
