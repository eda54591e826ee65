//! The capacity pass (algorithm version 6): deferred acceptance over the replicas' own lists, then
//! guests into the room left, one priority level at a time.
//!
//! It runs in two [`Mode`]s. The **ideal** pass treats every known node as up and not draining.
//! The **actual** pass gives down and draining nodes nothing (they keep their place in the
//! rankings) and lets every replica first propose to its **home**, its node in the ideal pass,
//! with a claim that no proposal away from home beats; only when a higher priority's extra load
//! leaves its home too little room does it go on to its own list like the replicas whose home is
//! down. A replica with data has for home the node holding it instead (`sticky`, when that node
//! is known and eligible), with a claim of tier 0 that beats even a replica at its ideal home
//! (tier 1); zone repair never moves it off that node. With no node down or draining and no
//! holder off its replica's ideal node, the actual placement is the ideal one (the engine skips
//! the second pass).
//!
//! Within a level:
//! 1. **Deferred acceptance, in simultaneous rounds.** Every free replica proposes to the next node
//!    of its own list (see `rank`), at most [`OWN_PROPOSALS`] of them. Every node then re-chooses
//!    among what it holds and its new proposers, strongest [`Claim`] first, keeping each one that
//!    still fits in every resource; those it does not keep are free for the next round. A round's
//!    result does not depend on the order proposals are looked at, so neither does the pass.
//!    Siblings' own lists are independent orders, so two siblings meet at a node now and then:
//!    the node keeps the one of the lower `(tier, index)` (a replica at home first, then the lower
//!    index), whatever their ranks. So a replica never loses its node to a sibling of a higher
//!    index, which is what makes scaling up move nothing.
//! 2. **Guests.** Replicas no node of their first [`OWN_PROPOSALS`] own nodes kept take, in the
//!    canonical order (strength: replicas the acceptance left at home first, then replica index
//!    ascending, so every workload's replica 0 before any replica 1; then workload hash and id),
//!    the first node of their workload's whole order with room left, or holding a weaker sibling
//!    away from its home, and no stronger sibling (zone spread: first in a zone no stronger
//!    sibling uses); in the actual pass a guest first tries its home. The weaker sibling gives
//!    way and takes its turn as a guest: what a guest gets never depends on weaker siblings.
//! 3. **Zone repair.** Ideal pass: strongest first, a replica of a zone-spread workload that
//!    shares its zone with a stronger sibling moves to a node with room in a zone no stronger
//!    sibling uses (a weaker sibling away from home there gives way), so a replica's zone
//!    depends on its lower siblings only and scaling moves none that stays. Actual pass: as in
//!    version 3, a workload sharing a zone while a zone it does not use has a node with room
//!    moves a sharing replica there, one away from its home first, so replicas at home stay;
//!    one at the node holding its data never moves (data outweighs the spread).
//!    Steps 2 and 3 repeat until neither changes anything: every change places a replica or
//!    clears one of sharing with stronger ones (ideal) or adds a used zone (actual), and touches
//!    only weaker replicas besides, so this ends (a bound of four rounds per replica makes
//!    sure).
//!
//! Levels go from the highest priority down; a level's consumption is fixed room for the levels
//! below, so a lower priority never moves a higher one.

mod ports;
mod rounds;
mod zone;

use rounds::Holdings;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::engine::{Tracked, Which};
use super::model::{Spread, Unschedulable};
use super::rank::Entry;
use super::sticky;
use super::table::{eligible, ClassTable, NodeTable};
use crate::resources::Resources;

/// A guest's place in line: its strength, its workload's canonical position, its slot.
type GuestKey = ((u8, u32), u32, u32);

/// What became of one replica in a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// On the node in this slot, filled at this generation.
    Assigned { slot: u32, generation: u64 },
    /// Nowhere, for this reason.
    Unschedulable(Unschedulable),
}

/// Which of the two passes runs.
#[derive(Clone, Copy)]
pub(crate) enum Mode<'a> {
    /// The ideal placement: every known node as if it were up and not draining.
    Ideal,
    /// The actual placement: down and draining nodes take nothing; every replica first claims
    /// its node in the ideal placement (its home), where only a higher priority's extra load can
    /// turn it away, and the others take the room left.
    Actual { ideal: &'a [Vec<Outcome>] },
}

/// How many nodes of its own list a replica proposes to before it becomes a guest. Bounds the
/// work of a pass to this many proposals per replica.
pub(crate) const OWN_PROPOSALS: u32 = 32;

const NONE: u32 = u32::MAX;

/// A replica's claim on a node of its own list; the smaller claim is the stronger. Total, because
/// (order, replica) names one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Claim {
    /// In the actual pass, 0 for a replica claiming the node that holds its data (its home), 1
    /// for one claiming its node in the ideal placement (its home); 2 otherwise. A replica at
    /// home is never displaced by one that is not, and data stays before a replica returns.
    tier: u8,
    /// Position of the node in the replica's own list (0: its first choice).
    rank: u32,
    /// Bitwise complement of the pair hash: a higher hash (a larger u, a smaller `-ln u`) is a
    /// stronger claim. Integer, so every agent compares it alike.
    affinity: u64,
    /// The workload's position in the canonical order.
    order: u32,
    /// The replica's index.
    replica: u32,
}

/// One replica during a level.
#[derive(Clone, Debug)]
struct Rep {
    /// The workload's hash.
    hash: u64,
    /// Its offset: its own list ranks `pair_hash(hash, node) + offset`, which its claims'
    /// affinity uses too.
    offset: u64,
    /// The workload's slot.
    workload: u32,
    /// The workload's position in the canonical order.
    order: u32,
    /// Its position among the workload's replicas placed here.
    replica: u32,
    /// Its index (the replica's number in the workload).
    index: u32,
    request: Resources,
    /// Own-list proposals made so far.
    proposed: u32,
    /// The node holding it, or NONE.
    node: u32,
    /// Its node in the ideal placement, or the node holding its data (actual pass only), or NONE.
    home: u32,
    /// Its home is the node holding its data (`sticky::holder`).
    sticky: bool,
    /// It has proposed to its home (first, before its own list).
    tried_home: bool,
    /// 0 when the acceptance left it at its home (actual pass), else 1: with the index, its
    /// strength among its siblings for the rest of the level (`strength`).
    tier: u8,
    /// A node held it at some point of the level (if only until a stronger proposer came): a
    /// workload none of whose replicas ever held one changed nobody else's placement.
    held_once: bool,
}

impl Rep {
    /// Smaller is stronger: replicas the acceptance left at home, then by index. Fixed for the
    /// guest and repair steps of a level, so that every move there improves the mover and
    /// touches only weaker siblings, which is why those steps end.
    fn strength(&self) -> (u8, u32) {
        (self.tier, self.index)
    }

    fn at_home(&self) -> bool {
        self.home != NONE && self.node == self.home
    }
}

/// A replica a node holds or is proposed, with its claim there.
#[derive(Clone, Copy, Debug)]
struct Held {
    claim: Claim,
    rep: u32,
}

const NO_HELD: Held = Held {
    claim: Claim {
        tier: 0,
        rank: 0,
        affinity: 0,
        order: 0,
        replica: 0,
    },
    rep: NONE,
};

/// The pass's state over nodes.
struct Pass<'a> {
    /// The ideal placement's outcomes, in the actual pass.
    ideal: Option<&'a [Vec<Outcome>]>,
    /// Per node slot: may take replicas in this pass.
    usable: Vec<bool>,
    nodes: &'a NodeTable,
    classes: &'a ClassTable,
    /// Room left by the levels already done.
    base: Vec<Resources>,
    /// Room left now.
    room: Vec<Resources>,
    /// What each node holds in the current level's acceptance.
    held: Holdings,
    /// Nodes whose room or holdings changed in the current level.
    touched: Vec<u32>,
    is_touched: Vec<bool>,
    /// Fixed host ports held by the replicas of the levels already done (`ports`): (port, node),
    /// sorted, without duplicates.
    ports_held: Vec<(super::model::HostPort, u32)>,
    /// (workload slot, node) pairs of the current level: nodes a workload may not take for a
    /// fixed port held there (`ports`). Sorted.
    avoid: Vec<(u32, u32)>,
    /// Per workload slot: some replica of it held a node at some point of its level's last
    /// placement (`Rep::held_once`).
    held_once: Vec<bool>,
    /// Times room grew at some node during the current level (zone repair moves a replica off
    /// a node); room only shrinks otherwise.
    room_grown: u64,
    /// (workload slot, `room_grown`) of the current level's zone repairs (actual pass) that
    /// found no target; sorted.
    repair_failed: Vec<(u32, u64)>,
}

/// Runs the pass over every workload and brings `outcomes` (each workload slot's outcomes by
/// replica index) up to date; `changed` receives every (workload slot, replica) whose outcome
/// changed or that no longer exists.
pub(crate) fn run(
    tables: (&NodeTable, &ClassTable),
    workloads: &mut [Option<Tracked>],
    order: &[u32],
    node_epoch: u64,
    outcomes: &mut [Vec<Outcome>],
    changed: &mut Vec<(u32, u32)>,
    mode: Mode,
) {
    let (nodes, classes) = tables;
    let slots = nodes.capacity.len();
    let mut usable = vec![false; slots];
    let mut room = nodes.capacity.clone();
    for s in nodes.live_slots() {
        usable[s as usize] = match mode {
            Mode::Ideal => true,
            Mode::Actual { .. } => nodes.spec(s).available(),
        };
        if !usable[s as usize] {
            room[s as usize] = Resources::default();
        }
    }
    let mut pass = Pass {
        nodes,
        classes,
        ideal: match mode {
            Mode::Ideal => None,
            Mode::Actual { ideal } => Some(ideal),
        },
        usable,
        base: room.clone(),
        room,
        held: Holdings::new(slots),
        touched: Vec::new(),
        is_touched: vec![false; slots],
        ports_held: Vec::new(),
        avoid: Vec::new(),
        held_once: vec![false; workloads.len()],
        room_grown: 0,
        repair_failed: Vec::new(),
    };
    let priority = |w: u32| {
        workloads[w as usize]
            .as_ref()
            .map_or(0, |t| t.spec.priority)
    };
    let mut levels = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let level = priority(order[start]);
        let end = start
            + order[start..]
                .iter()
                .take_while(|&&w| priority(w) == level)
                .count();
        levels.push((start, end));
        start = end;
    }
    for (start, end) in levels {
        let yields: Vec<bool> = order[start..end]
            .iter()
            .map(|&w| {
                workloads[w as usize]
                    .as_ref()
                    .is_some_and(|t| t.spec.yields_when_short)
            })
            .collect();
        if yields.len() < 2 || !yields.contains(&true) {
            pass.level_exclusive(workloads, order, start..end, node_epoch, outcomes, changed);
            continue;
        }
        // A workload that yields when short and is too big for the mesh (more of its replicas fit
        // nowhere than fit) goes after the others of its level, into the room they leave: the
        // one with the most such replicas first (then by first position), and again while
        // another is (at most DEMOTIONS_MAX times), each time the level placed anew from the
        // room before it. A workload's stacking layers (`NAME~K`, `crate::stacking`) count as
        // one. Nothing of this runs unless a yielding workload of the level is short.
        let (room, base) = (pass.room.clone(), pass.base.clone());
        let ports_held = pass.ports_held.clone();
        pass.level_exclusive(workloads, order, start..end, node_epoch, outcomes, changed);
        let short_of = |outcomes: &[Vec<Outcome>], w: u32| {
            outcomes[w as usize]
                .iter()
                .filter(|o| matches!(o, Outcome::Unschedulable(_)))
                .count()
        };
        let any_short = order[start..end]
            .iter()
            .zip(&yields)
            .any(|(&w, &y)| y && short_of(outcomes, w) > 0);
        if !any_short {
            continue;
        }
        // Family numbers in order of first position.
        let family: Vec<u32> = {
            let mut numbers: crate::stable_hash::StableHashMap<&str, u32> = Default::default();
            order[start..end]
                .iter()
                .map(|&w| {
                    let id = &workloads[w as usize]
                        .as_ref()
                        .expect("ordered workload")
                        .spec
                        .id;
                    let name = id.split('~').next().unwrap_or(id);
                    let next = numbers.len() as u32;
                    *numbers.entry(name).or_insert(next)
                })
                .collect()
        };
        let families = family.iter().max().map_or(0, |&f| f as usize + 1);
        let mut demoted = vec![false; families];
        let mut arranged = order.to_vec();
        for _ in 0..DEMOTIONS_MAX {
            // Per family still placed first: replicas short, placed.
            let mut tally = vec![(0usize, 0usize, false); families];
            for (i, &w) in order[start..end].iter().enumerate() {
                let f = family[i] as usize;
                if yields[i] && !demoted[f] {
                    let short = short_of(outcomes, w);
                    tally[f].0 += short;
                    tally[f].1 += outcomes[w as usize].len() - short;
                    // Since algorithm 9 one with nothing placed counts when some replica of it
                    // held a node during the pass (and so may have pushed another off it).
                    tally[f].2 |= pass.held_once[w as usize]
                        && workloads[w as usize]
                            .as_ref()
                            .is_some_and(|t| t.spec.yields_unplaced);
                }
            }
            // The family too big for the mesh (more replicas short than placed), short of the
            // most. Under algorithm 8 only one with some replica placed (it holds room others of
            // the level might have had); since 9 also one with none placed whose replicas held a
            // node on the way: turned away in the end, they may still have pushed others'
            // replicas off their nodes. One whose replicas never held a node changed nothing.
            let mut worst: Option<(usize, usize)> = None;
            for (f, &(short, placed, unplaced)) in tally.iter().enumerate() {
                if short > placed
                    && (placed > 0 || unplaced)
                    && worst.is_none_or(|(most, _)| short > most)
                {
                    worst = Some((short, f));
                }
            }
            let Some((_, f)) = worst else {
                break;
            };
            demoted[f] = true;
            if demoted.iter().all(|&d| d) {
                break; // nobody left to go first
            }
            let first = (0..end - start).filter(|&i| !demoted[family[i] as usize]);
            let last = (0..end - start).filter(|&i| demoted[family[i] as usize]);
            for (at, i) in first.chain(last).enumerate() {
                arranged[start + at] = order[start + i];
            }
            let mid = end
                - (0..end - start)
                    .filter(|&i| demoted[family[i] as usize])
                    .count();
            pass.room.clone_from(&room);
            pass.base.clone_from(&base);
            pass.ports_held.clone_from(&ports_held);
            pass.level_exclusive(
                workloads,
                &arranged,
                start..mid,
                node_epoch,
                outcomes,
                changed,
            );
            pass.level_exclusive(
                workloads,
                &arranged,
                mid..end,
                node_epoch,
                outcomes,
                changed,
            );
        }
    }
}

/// Most workloads (with their stacking layers) of one priority level placed after the others
/// for being short.
const DEMOTIONS_MAX: usize = 8;

impl Pass<'_> {
    fn touch(&mut self, node: u32) {
        if !self.is_touched[node as usize] {
            self.is_touched[node as usize] = true;
            self.touched.push(node);
        }
    }

    /// Places one priority level: the workloads `order[level]`.
    fn level(
        &mut self,
        workloads: &mut [Option<Tracked>],
        order: &[u32],
        level: std::ops::Range<usize>,
        node_epoch: u64,
        outcomes: &mut [Vec<Outcome>],
        changed: &mut Vec<(u32, u32)>,
    ) {
        let (start, end) = (level.start, level.end);
        // The level's replicas, workload by workload: `first[i]` is replica 0 of order[start + i].
        let mut reps: Vec<Rep> = Vec::new();
        let mut first: Vec<u32> = Vec::with_capacity(end - start);
        for (pos, &w) in order.iter().enumerate().take(end).skip(start) {
            first.push(reps.len() as u32);
            let t = workloads[w as usize].as_ref().expect("ordered workload");
            for (replica, &index) in t.indices.iter().enumerate() {
                let replica = replica as u32;
                let ideal = match self.ideal.and_then(|i| i[w as usize].get(replica as usize)) {
                    Some(Outcome::Assigned { slot, .. }) => *slot,
                    _ => NONE,
                };
                // In the actual pass, the node holding the replica's data is its home.
                let holder = self
                    .ideal
                    .and_then(|_| sticky::holder(self.nodes, t, index));
                reps.push(Rep {
                    hash: t.hash,
                    offset: t.offset(replica as usize),
                    workload: w,
                    order: pos as u32,
                    replica,
                    index,
                    request: t.spec.request,
                    proposed: 0,
                    node: NONE,
                    tried_home: false,
                    tier: 1,
                    held_once: false,
                    home: holder.unwrap_or(ideal),
                    sticky: holder.is_some(),
                });
            }
        }
        first.push(reps.len() as u32);

        self.repair_failed.clear();
        self.accept(workloads, &mut reps);
        for r in &mut reps {
            r.tier = u8::from(!r.at_home());
        }
        // Ends long before the bound (see the module doc); the bound only makes sure of it.
        for _ in 0..4 * reps.len() + 16 {
            let placed = self.guests(workloads, start, &first, &mut reps);
            let moved = self.zone_repair(workloads, order, start, &first, &mut reps);
            if !placed && !moved {
                break;
            }
        }

        for (i, &w) in order[start..end].iter().enumerate() {
            let t = workloads[w as usize].as_mut().expect("ordered workload");
            let siblings = &reps[first[i] as usize..first[i + 1] as usize];
            self.held_once[w as usize] = siblings.iter().any(|r| r.held_once);
            let out = &mut outcomes[w as usize];
            let mut reason: Option<Unschedulable> = None;
            for rep in siblings {
                let new = if rep.node != NONE {
                    Outcome::Assigned {
                        slot: rep.node,
                        generation: self.nodes.generation[rep.node as usize],
                    }
                } else {
                    let why = reason.get_or_insert_with(|| self.diagnose(t, siblings, node_epoch));
                    Outcome::Unschedulable(why.clone())
                };
                let r = rep.replica as usize;
                if out.get(r) != Some(&new) {
                    if r < out.len() {
                        out[r] = new;
                    } else {
                        out.push(new);
                    }
                    changed.push((w, rep.replica));
                }
            }
            for r in siblings.len()..out.len() {
                changed.push((w, r as u32));
            }
            out.truncate(siblings.len());
        }

        // The level's consumption is fixed room for the levels below.
        for &n in &self.touched {
            self.base[n as usize] = self.room[n as usize];
            self.held.forget(n);
            self.is_touched[n as usize] = false;
        }
        self.touched.clear();
    }

    /// Step 2: unplaced replicas, strongest first (then workload hash and id: every workload's
    /// replica 0 before any replica 1), take the first node of their workload's order with room
    /// left, or holding a weaker sibling away from its home (which gives way and takes its turn
    /// as a guest), and no stronger sibling; zone spread: first in a zone no stronger sibling
    /// uses. True if any was placed.
    fn guests(
        &mut self,
        workloads: &mut [Option<Tracked>],
        start: usize,
        first: &[u32],
        reps: &mut [Rep],
    ) -> bool {
        let key = |x: usize, r: &Rep| Reverse((r.strength(), r.order, x as u32));
        let mut waiting: BinaryHeap<Reverse<GuestKey>> = reps
            .iter()
            .enumerate()
            .filter(|(_, r)| r.node == NONE)
            .map(|(x, r)| key(x, r))
            .collect();
        if waiting.is_empty() {
            return false;
        }
        // Per workload (by position in the level): where the walk for any node with room and the
        // walk for one in a zone no stronger sibling uses go on from, or None once they found
        // nothing. Guests of a workload come strongest first; room only shrinks, and the stronger
        // siblings of a later guest include those of an earlier one, so a node that would not do
        // for one guest will not do for the workload's next.
        let mut cursor: Vec<(Option<usize>, Option<usize>)> =
            vec![(Some(0), Some(0)); first.len() - 1];
        // (constraint class, request) of guests that found no node with room at all: a later guest
        // of the same class asking at least as much finds none either.
        let mut no_room: Vec<(u32, Resources)> = Vec::new();
        // Per workload: (node, replica) of its placed replicas, sorted (built when first needed).
        let mut taken_by: Vec<Option<Vec<(u32, u32)>>> = vec![None; first.len() - 1];
        let mut placed = 0i64;
        while let Some(Reverse((_, _, x))) = waiting.pop() {
            let x = x as usize;
            let i = reps[x].order as usize - start;
            let Some(any_from) = cursor[i].0 else {
                continue;
            };
            let taken = taken_by[i].get_or_insert_with(|| {
                let mut taken: Vec<(u32, u32)> = (first[i]..first[i + 1])
                    .filter(|&s| reps[s as usize].node != NONE)
                    .map(|s| (reps[s as usize].node, s))
                    .collect();
                taken.sort_unstable();
                taken
            });
            let (request, me) = (reps[x].request, reps[x].strength());
            let t = workloads[reps[x].workload as usize]
                .as_mut()
                .expect("ordered workload");
            if no_room
                .iter()
                .any(|&(class, r)| class == t.class && r.fits_in(&request))
            {
                // A guest of the same constraints asking no more found no node with room.
                cursor[i] = (None, None);
                continue;
            }
            let room = &self.room;
            let usable = &self.usable;
            let avoided = self.avoided(reps[x].workload);
            let blocked = std::cell::Cell::new(false);
            let sibling = |s: u32| &reps[s as usize];
            // A node with room, or one a weaker sibling holds away from its home (it gives way,
            // and has the same request): what a guest takes does not depend on weaker siblings,
            // and a replica at home stays there.
            let fits = |e: &Entry| {
                usable[e.node as usize]
                    && (avoided.is_empty()
                        || avoided.binary_search_by_key(&e.node, |a| a.1).is_err())
                    && match taken.binary_search_by_key(&e.node, |h| h.0) {
                        Ok(at) => {
                            let holder = sibling(taken[at].1);
                            let yields = holder.strength() > me && !holder.at_home();
                            blocked.set(blocked.get() || !yields);
                            yields
                        }
                        Err(_) => request.fits_in(&room[e.node as usize]),
                    }
            };
            // A replica whose home had no room for it in the acceptance takes it if it has now.
            let home = reps[x].home;
            let mut found = (home != NONE && fits(&Entry::at(home))).then_some((usize::MAX, home));
            let zones = match t.spec.spread {
                Spread::Zone => {
                    let mut zones: Vec<u32> = taken
                        .iter()
                        .filter(|h| sibling(h.1).strength() < me)
                        .map(|h| self.nodes.zone[h.0 as usize])
                        .collect();
                    zones.sort_unstable();
                    zones.dedup();
                    zones
                }
                Spread::Node => Vec::new(),
            };
            if zones.len() >= self.classes.get(t.class).zones as usize {
                cursor[i].1 = None;
            }
            if let (Spread::Zone, Some(zone_from), None) = (t.spec.spread, cursor[i].1, found) {
                let nodes = self.nodes;
                found = find(self.nodes, self.classes, t, zone_from, |e| {
                    fits(e) && zones.binary_search(&nodes.zone[e.node as usize]).is_err()
                });
                cursor[i].1 = found.map(|(at, _)| at + 1);
            }
            if found.is_none() {
                blocked.set(false);
                found = find(self.nodes, self.classes, t, any_from, fits);
                cursor[i].0 = found.map(|(at, _)| at + 1);
            }
            let Some((_, node)) = found else {
                if any_from == 0 && !blocked.get() {
                    no_room.push((t.class, request));
                }
                continue;
            };
            placed += 1;
            reps[x].node = node;
            reps[x].held_once = true;
            match taken.binary_search_by_key(&node, |h| h.0) {
                Ok(at) => {
                    // A weaker sibling gives way and waits its turn again.
                    let s = taken[at].1 as usize;
                    taken[at].1 = x as u32;
                    reps[s].node = NONE;
                    waiting.push(key(s, &reps[s]));
                    placed -= 1;
                }
                Err(at) => {
                    taken.insert(at, (node, x as u32));
                    self.room[node as usize] = self.room[node as usize].saturating_sub(&request);
                    self.touch(node);
                }
            }
        }
        placed > 0
    }

    /// Why the workload's unplaced replicas have no node, as of the end of its level.
    fn diagnose(&self, t: &mut Tracked, siblings: &[Rep], node_epoch: u64) -> Unschedulable {
        let class = self.classes.get(t.class);
        let (constraints, needs) = (&class.constraints, &class.needs);
        let (scan, ranking, empty_reason) = t.parts(self.nodes, self.classes, Which::Order);
        while ranking.extend(&scan) {}
        let eligible_count = ranking
            .entries()
            .iter()
            .filter(|e| self.usable[e.node as usize])
            .count();
        if eligible_count == 0 {
            // Cached per node epoch and pass (the ideal pass counts every known node).
            let ideal = self.ideal.is_none();
            let key = node_epoch << 1 | u64::from(ideal);
            return match empty_reason {
                Some((k, reason)) if *k == key => reason.clone(),
                _ => {
                    let reason =
                        why_no_eligible_node(scan.nodes, (constraints, needs), scan.request, ideal);
                    *empty_reason = Some((key, reason.clone()));
                    reason
                }
            };
        }
        let mut taken: Vec<u32> = siblings
            .iter()
            .map(|s| s.node)
            .filter(|&n| n != NONE)
            .collect();
        taken.sort_unstable();
        let request = scan.request;
        let (mut candidates, mut cpu_short, mut memory_short) = (0u32, 0u32, 0u32);
        let mut ports_short = 0u32;
        // The most room left per resource and the first node (by rank) that has it.
        let mut most: [(u64, u32); 3] = [(0, NONE); 3];
        let w = siblings.first().map_or(NONE, |s| s.workload);
        let mut avoided = 0u32;
        for e in ranking.entries() {
            if !self.usable[e.node as usize] || taken.binary_search(&e.node).is_ok() {
                continue;
            }
            if self.avoids(w, e.node) {
                avoided += 1;
                continue;
            }
            candidates += 1;
            let r = &self.room[e.node as usize];
            cpu_short += u32::from(r.cpu_millis < request.cpu_millis);
            memory_short += u32::from(r.memory_bytes < request.memory_bytes);
            ports_short += u32::from(r.ports < request.ports);
            for (m, left) in most.iter_mut().zip([r.cpu_millis, r.memory_bytes, r.ports]) {
                if m.1 == NONE || left > m.0 {
                    *m = (left, e.node);
                }
            }
        }
        if candidates == 0 && avoided > 0 {
            let port = t.spec.needs.fixed_ports.first().copied();
            return ports::port_held(
                port.expect("a workload avoids nodes for its ports"),
                avoided,
            );
        }
        if candidates == 0 {
            return Unschedulable::NotEnoughNodes {
                eligible: eligible_count as u32,
            };
        }
        let on = |(left, node): (u64, u32)| (left, self.nodes.ids[node as usize].clone());
        Unschedulable::NoRoom {
            candidates,
            cpu_short,
            memory_short,
            ports_short,
            room: Some(Box::new(super::model::RoomLeft {
                requested: request,
                cpu: on(most[0]),
                memory: on(most[1]),
                ports: on(most[2]),
            })),
        }
    }
}

/// The first node of the workload's order from position `from` on that `accept` takes, and its
/// position; the cached prefix is extended a chunk at a time as the walk reaches its end.
fn find(
    nodes: &NodeTable,
    classes: &ClassTable,
    t: &mut Tracked,
    from: usize,
    mut accept: impl FnMut(&Entry) -> bool,
) -> Option<(usize, u32)> {
    let (scan, ranking, _) = t.parts(nodes, classes, Which::Order);
    let mut i = from;
    let mut looked = false;
    loop {
        let merged = ranking.entries();
        if let Some(at) = merged.get(i..).and_then(|m| m.iter().position(&mut accept)) {
            return Some((i + at, merged[i + at].node));
        }
        i = i.max(merged.len());
        if !looked && !ranking.is_complete() {
            // Extending the order ranks every candidate again; a search that will find nothing
            // (a replica with no room anywhere) need not: one look at the candidates, in any
            // order, tells. The order holds every candidate the request fits.
            looked = true;
            let fits = |n: u32| scan.request.fits_in(&nodes.capacity[n as usize]);
            if !scan
                .candidates
                .iter()
                .any(|&n| fits(n) && accept(&Entry::at(n)))
            {
                return None;
            }
        }
        if !ranking.extend(&scan) {
            return None;
        }
    }
}

/// Why no node at all is eligible: no nodes, a constraint, a need, or the request's size.
pub(crate) fn why_no_eligible_node(
    nodes: &NodeTable,
    (constraints, needs): (&[crate::constraint::Constraint], &super::model::Needs),
    request: Resources,
    every_node: bool,
) -> Unschedulable {
    let live: Vec<_> = nodes
        .live_slots()
        .map(|s| nodes.spec(s))
        .filter(|n| every_node || n.available())
        .collect();
    if live.is_empty() {
        return Unschedulable::NoNodes;
    }
    for c in constraints {
        if !live.iter().any(|n| c.matches(&n.labels, &n.zone, &n.id)) {
            return Unschedulable::ConstraintUnsatisfiable {
                constraint: c.to_string(),
            };
        }
    }
    let allowed: Vec<_> = live
        .iter()
        .filter(|n| eligible(n, constraints, &Default::default()))
        .collect();
    if allowed.is_empty() {
        return Unschedulable::ConstraintsConflict {
            constraints: constraints.iter().map(|c| c.to_string()).collect(),
        };
    }
    let matching: Vec<_> = allowed
        .iter()
        .filter(|n| needs.unmet(n.caps.as_ref()).is_none())
        .collect();
    if matching.is_empty() {
        // Every allowed node lacks something: name what the most of them lack.
        let mut unmet: Vec<super::model::Unmet> = allowed
            .iter()
            .filter_map(|n| needs.unmet(n.caps.as_ref()))
            .collect();
        unmet.sort();
        let mut best: Option<(usize, &super::model::Unmet)> = None;
        for run in unmet.chunk_by(|a, b| a == b) {
            if best.is_none_or(|(count, _)| run.len() > count) {
                best = Some((run.len(), &run[0]));
            }
        }
        let need = best.map(|(_, u)| u.to_string()).unwrap_or_default();
        return Unschedulable::Incapable {
            need,
            nodes: allowed.len() as u32,
        };
    }
    let cpu_largest = matching
        .iter()
        .map(|n| n.capacity.cpu_millis)
        .max()
        .unwrap_or(0);
    let memory_largest = matching
        .iter()
        .map(|n| n.capacity.memory_bytes)
        .max()
        .unwrap_or(0);
    if request.cpu_millis > cpu_largest {
        return Unschedulable::RequestTooLarge {
            resource: super::model::Resource::Cpu,
            requested: request.cpu_millis,
            largest: cpu_largest,
        };
    }
    if request.memory_bytes > memory_largest {
        return Unschedulable::RequestTooLarge {
            resource: super::model::Resource::Memory,
            requested: request.memory_bytes,
            largest: memory_largest,
        };
    }
    let ports_largest = matching.iter().map(|n| n.capacity.ports).max().unwrap_or(0);
    if request.ports > ports_largest {
        return Unschedulable::RequestTooLarge {
            resource: super::model::Resource::Ports,
            requested: request.ports,
            largest: ports_largest,
        };
    }
    Unschedulable::RequestFitsNoSingleNode { requested: request }
}
