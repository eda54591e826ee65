//! Step 1 of a level: deferred acceptance in simultaneous rounds (see the parent module), and
//! `Holdings`, what each node holds while it runs.

use super::{Claim, Held, Pass, Rep, NONE, NO_HELD, OWN_PROPOSALS};
use crate::placement::engine::{Tracked, Which};
use crate::placement::hash::pair_hash;
use crate::resources::Resources;

/// What each node holds during a level's acceptance, strongest claim first: ranges of one arena
/// (a node's range moves to the end when it outgrows its room), so that a pass allocates a few
/// vectors, not one per node.
#[derive(Default)]
pub(super) struct Holdings {
    arena: Vec<Held>,
    /// Per node slot: start, length and capacity of its range.
    range: Vec<(u32, u32, u32)>,
    /// Per node slot: its range is not sorted by claim yet (`set_unsorted`).
    unsorted: Vec<bool>,
}

impl Holdings {
    /// Empty holdings for `slots` node slots.
    pub(super) fn new(slots: usize) -> Holdings {
        Holdings {
            arena: Vec::new(),
            range: vec![(0, 0, 0); slots],
            unsorted: vec![false; slots],
        }
    }

    /// What the node holds, in some order.
    fn get(&self, node: u32) -> &[Held] {
        let (start, len, _) = self.range[node as usize];
        &self.arena[start as usize..(start + len) as usize]
    }

    /// What the node holds, strongest claim first.
    fn get_sorted(&mut self, node: u32) -> &[Held] {
        let (start, len, _) = self.range[node as usize];
        let held = &mut self.arena[start as usize..(start + len) as usize];
        if std::mem::take(&mut self.unsorted[node as usize]) {
            held.sort_unstable_by_key(|h| h.claim);
        }
        held
    }

    /// Replaces the node's holdings with `items`, in any order.
    fn set_unsorted(&mut self, node: u32, items: &[Held]) {
        self.set(node, items);
        self.unsorted[node as usize] = true;
    }

    /// Adds `h` to the node's holdings, in any order.
    fn push_unsorted(&mut self, node: u32, h: Held) {
        self.extend(node, &[h]);
        self.unsorted[node as usize] = true;
    }

    /// Appends `items` to the node's holdings.
    fn extend(&mut self, node: u32, items: &[Held]) {
        let (start, len, cap) = self.range[node as usize];
        let need = len + items.len() as u32;
        let start = if need <= cap {
            start
        } else {
            let at = self.arena.len() as u32;
            let cap = need.max(4) * 2;
            self.arena
                .extend_from_within(start as usize..(start + len) as usize);
            self.arena.resize(at as usize + cap as usize, NO_HELD);
            self.range[node as usize] = (at, len, cap);
            at
        };
        let at = (start + len) as usize;
        self.arena[at..at + items.len()].copy_from_slice(items);
        self.range[node as usize].1 = need;
    }

    /// Replaces the node's holdings with `items` (no more than it held plus its proposers).
    fn set(&mut self, node: u32, items: &[Held]) {
        self.range[node as usize].1 = 0;
        self.extend(node, items);
    }

    /// Forgets the node's range (the arena is cleared before the next level).
    pub(super) fn forget(&mut self, node: u32) {
        self.range[node as usize] = (0, 0, 0);
        self.unsorted[node as usize] = false;
    }
}

impl Pass<'_> {
    /// Step 1: deferred acceptance in simultaneous rounds.
    pub(super) fn accept(&mut self, workloads: &mut [Option<Tracked>], reps: &mut [Rep]) {
        self.held.arena.clear();
        self.held.arena.reserve(4 * reps.len());
        let mut free: Vec<u32> = (0..reps.len() as u32).collect();
        let mut proposals: Vec<(u32, Held)> = Vec::with_capacity(reps.len());
        let mut grouped: Vec<(u32, Held)> = Vec::new();
        let mut counts: Vec<u32> = Vec::new();
        let mut scratch: Vec<Held> = Vec::new();
        let mut first_round = true;
        while !free.is_empty() {
            proposals.clear();
            for &x in &free {
                let rep = &mut reps[x as usize];
                let t = workloads[rep.workload as usize]
                    .as_mut()
                    .expect("ordered workload");
                // A replica proposes to its home first (the actual pass), then its own list.
                let next = if rep.home != NONE
                    && !rep.tried_home
                    && self.usable[rep.home as usize]
                    && !self.avoids(rep.workload, rep.home)
                {
                    rep.tried_home = true;
                    Some((rep.home, 0, u8::from(!rep.sticky)))
                } else {
                    self.next_own(t, rep).map(|(node, rank)| (node, rank, 2))
                };
                if let Some((node, rank, tier)) = next {
                    let claim = Claim {
                        tier,
                        rank,
                        affinity: !pair_hash(rep.hash, self.nodes.hashes[node as usize])
                            .wrapping_add(rep.offset),
                        order: rep.order,
                        replica: rep.index,
                    };
                    proposals.push((node, Held { claim, rep: x }));
                }
            }
            free.clear();
            // Group by node, then each group by claim: a counting sort over the nodes, or, for
            // proposals far fewer than nodes (a small level), a sort of the proposals by node
            // (stable: the same groups in the same order).
            grouped.clear();
            if proposals.len() * 16 < self.room.len() {
                grouped.extend_from_slice(&proposals);
                grouped.sort_by_key(|g| g.0);
            } else {
                if first_round {
                    // A node proposed to by replicas of distinct workloads that all fit in its
                    // room keeps them all, as `choose` would (nothing is held yet): settled
                    // here, without grouping, for most nodes of a level's first round. A
                    // workload's replicas are contiguous in the first round's proposals, so two
                    // siblings at one node follow each other among its proposers.
                    self.settle_first_round(&mut proposals, reps);
                }
                counts.clear();
                counts.resize(self.room.len() + 1, 0);
                for &(node, _) in &proposals {
                    counts[node as usize + 1] += 1;
                }
                for i in 1..counts.len() {
                    counts[i] += counts[i - 1];
                }
                grouped.resize(proposals.len(), (NONE, NO_HELD));
                for &(node, h) in &proposals {
                    let at = &mut counts[node as usize];
                    grouped[*at as usize] = (node, h);
                    *at += 1;
                }
            }
            let mut i = 0;
            while i < grouped.len() {
                let node = grouped[i].0;
                let j = i + grouped[i..].iter().take_while(|g| g.0 == node).count();
                let group = &grouped[i..j];
                scratch.clear();
                scratch.extend(group.iter().map(|g| g.1));
                self.choose(node, scratch.len(), &mut scratch, reps, &mut free);
                i = j;
            }
            first_round = false;
        }
    }

    /// The first round's nodes whose proposers are all of distinct workloads and all fit in
    /// the node's room keep them all (nothing is held in a first round); their proposals are
    /// taken out of `proposals`, which keeps the rest in order.
    fn settle_first_round(&mut self, proposals: &mut Vec<(u32, Held)>, reps: &mut [Rep]) {
        // Per node: proposers' total request, the last proposer's workload, and whether it
        // may still keep them all.
        let mut total = vec![Resources::default(); self.room.len()];
        let mut last = vec![NONE; self.room.len()];
        let mut keeps = vec![true; self.room.len()];
        for &(node, h) in proposals.iter() {
            let n = node as usize;
            debug_assert!(self.held.get(node).is_empty());
            keeps[n] &= last[n] != h.claim.order;
            last[n] = h.claim.order;
            total[n] = total[n].saturating_add(&reps[h.rep as usize].request);
        }
        for n in 0..self.room.len() {
            if last[n] != NONE {
                keeps[n] &= total[n].fits_in(&self.room[n]);
                if keeps[n] {
                    self.room[n] = self.room[n].saturating_sub(&total[n]);
                    self.touch(n as u32);
                }
            }
        }
        proposals.retain(|&(node, h)| {
            if !keeps[node as usize] {
                return true;
            }
            let rep = &mut reps[h.rep as usize];
            rep.node = node;
            rep.held_once = true;
            self.held.push_unsorted(node, h);
            false
        });
    }

    /// The next node of the replica's own list and its rank there; None once it has made
    /// [`OWN_PROPOSALS`] proposals or its list has no more nodes.
    fn next_own(&self, t: &mut Tracked, rep: &mut Rep) -> Option<(u32, u32)> {
        if rep.proposed >= OWN_PROPOSALS {
            return None;
        }
        let (scan, ranking, _) = t.parts(
            self.nodes,
            self.classes,
            Which::Replica(rep.replica as usize),
        );
        loop {
            let entry = ranking.get(&scan, rep.proposed as usize)?;
            let rank = rep.proposed;
            rep.proposed += 1;
            // A node that is down or draining keeps its rank but takes no proposal, nor one
            // holding another workload's replica fixing one of its ports.
            if self.usable[entry.node as usize] && !self.avoids(rep.workload, entry.node) {
                return Some((entry.node, rank));
            }
            if rep.proposed >= OWN_PROPOSALS {
                return None;
            }
        }
    }

    /// A node re-chooses among what it holds and its proposers (`buf[..proposers]`, strongest
    /// first): strongest claim first, keeping each that fits. Those not kept are pushed to
    /// `free`. `buf` is scratch space.
    fn choose(
        &mut self,
        node: u32,
        proposers: usize,
        buf: &mut Vec<Held>,
        reps: &mut [Rep],
        free: &mut Vec<u32>,
    ) {
        let n = node as usize;
        self.touch(node);
        let total = buf[..proposers].iter().fold(Resources::default(), |a, h| {
            a.saturating_add(&reps[h.rep as usize].request)
        });
        // Own lists of siblings overlap (each replica ranks every node), and in the actual pass a
        // home may be anywhere, so two replicas of one workload can meet here: the node then
        // keeps the one of the lowest index (a replica at home before one away), below.
        let siblings_meet = {
            let held = self.held.get(node);
            buf[..proposers].iter().enumerate().any(|(i, p)| {
                let same = |h: &Held| h.claim.order == p.claim.order;
                held.iter().any(same) || buf[..i].iter().any(same)
            })
        };
        if !siblings_meet && self.held.get(node).is_empty() && total.fits_in(&self.room[n]) {
            // The first proposers of an empty node, all fitting: kept, in any order (most nodes
            // of most rounds; sorted only if the node hears more).
            self.room[n] = self.room[n].saturating_sub(&total);
            for h in &buf[..proposers] {
                reps[h.rep as usize].node = node;
                reps[h.rep as usize].held_once = true;
            }
            self.held.set_unsorted(node, &buf[..proposers]);
            return;
        }
        buf[..proposers].sort_unstable_by_key(|h| h.claim);
        let held = self.held.get_sorted(node);
        let weakest_held = held.last().map(|h| h.claim);
        if !siblings_meet && total.fits_in(&self.room[n]) {
            // Everything fits next to what the node holds: keep it all.
            self.room[n] = self.room[n].saturating_sub(&total);
            for h in &buf[..proposers] {
                reps[h.rep as usize].node = node;
                reps[h.rep as usize].held_once = true;
            }
            if weakest_held.is_none_or(|w| w < buf[0].claim) {
                self.held.extend(node, &buf[..proposers]);
            } else {
                merge_into(buf, proposers, held);
                self.held.set(node, &buf[proposers..]);
            }
            return;
        } else if !siblings_meet && weakest_held.is_none_or(|w| w < buf[0].claim) {
            // Every proposer is weaker than everything held: what is held stays, the proposers
            // take what room is left, strongest first.
            let mut room = self.room[n];
            let kept = keep_fitting(node, buf, 0, &mut room, reps, free, false);
            self.room[n] = room;
            self.held.extend(node, &buf[..kept]);
            return;
        }
        merge_into(buf, proposers, held);
        let mut room = self.base[n];
        let kept = keep_fitting(node, buf, proposers, &mut room, reps, free, siblings_meet);
        self.room[n] = room;
        self.held.set(node, &buf[proposers..kept]);
    }
}

/// Keeps, strongest first, each of `buf[from..]` that fits in `room`, compacting the kept ones
/// to `buf[from..end]`; the others are pushed to `free`. Returns `end`. With `siblings_meet`,
/// a replica with a sibling of a lower `(tier, index)` among `buf[from..]` is not kept, fit or
/// not: so a replica never loses its node to a sibling of a higher index (scaling up moves no
/// replica), nor one at home to one away from home.
fn keep_fitting(
    node: u32,
    buf: &mut [Held],
    from: usize,
    room: &mut Resources,
    reps: &mut [Rep],
    free: &mut Vec<u32>,
    siblings_meet: bool,
) -> usize {
    let yields: Vec<bool> = if siblings_meet {
        let rank = |h: &Held| (h.claim.tier, h.claim.replica);
        buf[from..]
            .iter()
            .map(|h| {
                buf[from..]
                    .iter()
                    .any(|x| x.claim.order == h.claim.order && rank(x) < rank(h))
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut kept = from;
    for k in from..buf.len() {
        let h = buf[k];
        let rep = &mut reps[h.rep as usize];
        let yields = siblings_meet && yields[k - from];
        if !yields && rep.request.fits_in(room) {
            *room = room.saturating_sub(&rep.request);
            rep.node = node;
            rep.held_once = true;
            buf[kept] = h;
            kept += 1;
        } else {
            rep.node = NONE;
            free.push(h.rep);
        }
    }
    kept
}

/// Appends to `buf` the merge (by claim) of `buf[..proposers]` and `held`, both sorted.
fn merge_into(buf: &mut Vec<Held>, proposers: usize, held: &[Held]) {
    let (mut a, mut b) = (0, 0);
    while a < proposers || b < held.len() {
        let take_held = a == proposers || (b < held.len() && held[b].claim < buf[a].claim);
        if take_held {
            buf.push(held[b]);
            b += 1;
        } else {
            buf.push(buf[a]);
            a += 1;
        }
    }
}
