//! Step 3 of a level, zone repair (the rule of each pass is in the parent module's doc): moves
//! that take a zone-spread workload's replicas out of a shared zone while a zone it does not use
//! has room.

use super::{find, Pass, Rep, NONE};
use crate::placement::engine::Tracked;
use crate::placement::model::Spread;
use crate::resources::Resources;

impl Pass<'_> {
    /// Step 3: zone repair, by the rule of the pass (below). True if any replica moved.
    pub(super) fn zone_repair(
        &mut self,
        workloads: &mut [Option<Tracked>],
        order: &[u32],
        start: usize,
        first: &[u32],
        reps: &mut [Rep],
    ) -> bool {
        if self.ideal.is_some() {
            self.zone_repair_actual(workloads, order, start, first, reps)
        } else {
            self.zone_repair_ideal(workloads, order, start, first, reps)
        }
    }

    /// Step 3 in the ideal pass: in each zone-spread workload of the level, strongest first
    /// (by index), a replica that shares its zone with a stronger sibling
    /// moves to the first node of the workload's order in a zone no stronger sibling uses that
    /// has room for it (or holds a weaker sibling away from its home, which gives way and waits
    /// its turn as a guest). What a replica does depends on stronger siblings only, so scaling
    /// moves none that stays and a replica at home stays; when nothing moves any more, two
    /// replicas share a zone only if no zone the workload does not use has room. True if any
    /// moved.
    fn zone_repair_ideal(
        &mut self,
        workloads: &mut [Option<Tracked>],
        order: &[u32],
        start: usize,
        first: &[u32],
        reps: &mut [Rep],
    ) -> bool {
        let mut changed = false;
        for i in 0..first.len() - 1 {
            let t = workloads[order[start + i] as usize]
                .as_mut()
                .expect("ordered workload");
            if t.spec.spread != Spread::Zone || first[i + 1] - first[i] < 2 {
                continue;
            }
            let zones = self.classes.get(t.class).zones as usize;
            let request = t.spec.request;
            let siblings = first[i] as usize..first[i + 1] as usize;
            let mut strength: Vec<usize> = siblings.clone().collect();
            strength.sort_by_key(|&x| reps[x].strength());
            // Zones of the stronger siblings placed so far, sorted (each replica adds its own
            // once its turn is over).
            let mut lower: Vec<u32> = Vec::new();
            for (rank, &me) in strength.iter().enumerate() {
                let node = reps[me].node;
                if node == NONE {
                    continue;
                }
                let zone = self.nodes.zone[node as usize];
                if lower.binary_search(&zone).is_ok() && lower.len() < zones {
                    let w = order[start + i];
                    if let Some(to) =
                        self.repair_target((w, t), &strength[rank + 1..], &lower, reps)
                    {
                        self.repair_move(me, to, request, &mut reps[siblings.clone()], first[i]);
                        changed = true;
                    }
                }
                let zone = self.nodes.zone[reps[me].node as usize];
                if let Err(at) = lower.binary_search(&zone) {
                    lower.insert(at, zone);
                }
            }
        }
        changed
    }

    /// Where a replica sharing a zone with a stronger sibling can go: the first node of the
    /// workload's order in a zone none of `lower` is, with room, or holding a sibling of `weaker`
    /// away from its home.
    fn repair_target(
        &self,
        (w, t): (u32, &mut Tracked),
        weaker: &[usize],
        lower: &[u32],
        reps: &[Rep],
    ) -> Option<u32> {
        let mut held: Vec<(u32, bool)> = weaker
            .iter()
            .filter(|&&x| reps[x].node != NONE)
            .map(|&x| (reps[x].node, reps[x].at_home()))
            .collect();
        held.sort_unstable();
        let (room, usable, nodes) = (&self.room, &self.usable, self.nodes);
        let avoided = self.avoided(w);
        let request = t.spec.request;
        find(self.nodes, self.classes, t, 0, |e| {
            usable[e.node as usize]
                && avoided.binary_search_by_key(&e.node, |a| a.1).is_err()
                && lower.binary_search(&nodes.zone[e.node as usize]).is_err()
                && match held.binary_search_by_key(&e.node, |h| h.0) {
                    Ok(at) => !held[at].1,
                    Err(_) => request.fits_in(&room[e.node as usize]),
                }
        })
        .map(|(_, node)| node)
    }

    /// Moves replica `me` (a slot of the level) to `to`; a weaker sibling there gives way (it
    /// waits its turn as a guest) and leaves its room to `me`.
    /// `siblings` are the workload's replicas, the first of them at `first` in the level.
    fn repair_move(
        &mut self,
        me: usize,
        to: u32,
        request: Resources,
        siblings: &mut [Rep],
        first: u32,
    ) {
        let me = me - first as usize;
        let from = siblings[me].node;
        match siblings.iter_mut().find(|r| r.node == to) {
            Some(weaker) => weaker.node = NONE,
            None => self.room[to as usize] = self.room[to as usize].saturating_sub(&request),
        }
        self.room[from as usize] = self.room[from as usize].saturating_add(&request);
        self.room_grown += 1;
        siblings[me].node = to;
        self.touch(from);
        self.touch(to);
    }

    /// Step 3 in the actual pass: zone-spread workloads of the level that share a zone while a
    /// zone they do not use has a node with room move a sharing replica there, one at a time:
    /// one away from its home first, the highest index first; one at the node holding its data
    /// never. Replicas at home are where the ideal pass put them, so a node going down moves the
    /// replicas that had to leave, not those that stayed. True if any moved.
    fn zone_repair_actual(
        &mut self,
        workloads: &mut [Option<Tracked>],
        order: &[u32],
        start: usize,
        first: &[u32],
        reps: &mut [Rep],
    ) -> bool {
        let mut changed = false;
        let (mut held, mut used): (Vec<(u32, u32)>, Vec<u32>) = (Vec::new(), Vec::new());
        for i in 0..first.len() - 1 {
            let t = workloads[order[start + i] as usize]
                .as_mut()
                .expect("ordered workload");
            if t.spec.spread != Spread::Zone || first[i + 1] - first[i] < 2 {
                continue;
            }
            let request = t.spec.request;
            let siblings = first[i] as usize..first[i + 1] as usize;
            let w = order[start + i];
            loop {
                // A workload that found no target since room last grew anywhere finds none now:
                // room only shrank and its used zones only grew.
                if self
                    .repair_failed
                    .binary_search(&(w, self.room_grown))
                    .is_ok()
                {
                    break;
                }
                let zones = self.classes.get(t.class).zones as usize;
                held.clear();
                held.extend(
                    reps[siblings.clone()]
                        .iter()
                        .filter(|s| s.node != NONE)
                        .map(|s| (self.nodes.zone[s.node as usize], s.replica)),
                );
                held.sort_unstable();
                used.clear();
                used.extend(held.iter().map(|h| h.0));
                used.dedup();
                if used.len() == held.len() || used.len() >= zones {
                    break;
                }
                let mut sharing: Vec<u32> = held
                    .windows(2)
                    .filter(|p| p[0].0 == p[1].0)
                    .flat_map(|p| [p[0].1, p[1].1])
                    .collect();
                sharing.sort_unstable();
                sharing.dedup();
                // In the actual pass, a replica away from its home moves before one at home, and
                // one at the node holding its data not at all.
                let rep = |r: u32| &reps[siblings.start + r as usize];
                let away = |r: u32| rep(r).home != NONE && rep(r).home != rep(r).node;
                let Some(mover) = sharing
                    .iter()
                    .copied()
                    .filter(|&r| !(rep(r).sticky && rep(r).at_home()))
                    .max_by_key(|&r| (away(r), r))
                else {
                    break;
                };
                let (room, usable) = (&self.room, &self.usable);
                let nodes = self.nodes;
                let avoided = self.avoided(order[start + i]);
                let target = find(self.nodes, self.classes, t, 0, |e| {
                    usable[e.node as usize]
                        && avoided.binary_search_by_key(&e.node, |a| a.1).is_err()
                        && used.binary_search(&nodes.zone[e.node as usize]).is_err()
                        && request.fits_in(&room[e.node as usize])
                });
                let Some((_, node)) = target else {
                    if let Err(at) = self.repair_failed.binary_search(&(w, self.room_grown)) {
                        self.repair_failed.insert(at, (w, self.room_grown));
                    }
                    break;
                };
                let rep = &mut reps[siblings.start + mover as usize];
                let old = rep.node;
                rep.node = node;
                self.room[old as usize] = self.room[old as usize].saturating_add(&request);
                self.room_grown += 1;
                self.room[node as usize] = self.room[node as usize].saturating_sub(&request);
                self.touch(old);
                self.touch(node);
                changed = true;
            }
        }
        changed
    }
}
