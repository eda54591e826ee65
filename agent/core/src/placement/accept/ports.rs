//! Fixed host ports held exclusively (placement algorithm 8): no node holds replicas of two
//! workloads that fix one host port, since only one of them could bind it.
//!
//! A level's workloads are split into sub-levels, placed one after the other as levels are: in
//! the canonical order, each workload goes to the first sub-level holding no workload that fixes
//! one of its ports (a workload fixing none goes to the first). A sub-level's workloads avoid
//! every node where a replica placed before them fixes one of their ports, so two of them never
//! meet there. So between two workloads fixing one port, the one earlier in the canonical order
//! (the higher priority, then the workload hash and id) is placed first and keeps its nodes. A
//! level where no two workloads share a fixed port is one sub-level and places as algorithm 7.

use super::{Outcome, Pass};
use crate::placement::engine::Tracked;
use crate::placement::model::{HostPort, Unschedulable};

impl Pass<'_> {
    /// Whether workload slot `w` avoids `node` for a fixed port held there.
    pub(super) fn avoids(&self, w: u32, node: u32) -> bool {
        !self.avoid.is_empty() && self.avoid.binary_search(&(w, node)).is_ok()
    }

    /// The nodes workload slot `w` avoids, as (w, node) sorted by node.
    pub(super) fn avoided(&self, w: u32) -> &[(u32, u32)] {
        let from = self.avoid.partition_point(|a| a.0 < w);
        let to = self.avoid.partition_point(|a| a.0 <= w);
        &self.avoid[from..to]
    }

    /// Places the level `order[level]` (see `level`) with fixed ports held exclusively.
    pub(super) fn level_exclusive(
        &mut self,
        workloads: &mut [Option<Tracked>],
        order: &[u32],
        level: std::ops::Range<usize>,
        node_epoch: u64,
        outcomes: &mut [Vec<Outcome>],
        changed: &mut Vec<(u32, u32)>,
    ) {
        self.avoid.clear();
        let fixed = |w: u32| -> &[HostPort] {
            match workloads[w as usize].as_ref() {
                Some(t) if t.spec.ports_exclusive => &t.spec.needs.fixed_ports,
                _ => &[],
            }
        };
        if order[level.clone()].iter().all(|&w| fixed(w).is_empty()) {
            self.level(workloads, order, level, node_epoch, outcomes, changed);
            return;
        }
        // The ports each workload slot of the level fixes (few workloads fix any).
        let mut by_slot: Vec<(u32, Vec<HostPort>)> = order[level.clone()]
            .iter()
            .map(|&w| (w, fixed(w).to_vec()))
            .filter(|(_, p)| !p.is_empty())
            .collect();
        by_slot.sort_unstable();
        let fixed = |w: u32| -> &[HostPort] {
            by_slot
                .binary_search_by_key(&w, |e| e.0)
                .map_or(&[], |at| &by_slot[at].1)
        };
        // Each workload's sub-level, and the ports each sub-level's workloads fix.
        let mut ports: Vec<Vec<HostPort>> = vec![Vec::new()];
        let mut sub: Vec<usize> = Vec::with_capacity(level.len());
        for &w in &order[level.clone()] {
            let mine = fixed(w);
            let k = (0..ports.len())
                .find(|&k| mine.iter().all(|p| ports[k].binary_search(p).is_err()))
                .unwrap_or_else(|| {
                    ports.push(Vec::new());
                    ports.len() - 1
                });
            for &p in mine {
                if let Err(at) = ports[k].binary_search(&p) {
                    ports[k].insert(at, p);
                }
            }
            sub.push(k);
        }
        // The level's workloads by sub-level (stable: the canonical order within each).
        let mut bounds: Vec<std::ops::Range<usize>> = Vec::with_capacity(ports.len());
        let mut counts = vec![0usize; ports.len()];
        for &k in &sub {
            counts[k] += 1;
        }
        let mut at = level.start;
        let mut next: Vec<usize> = Vec::with_capacity(ports.len());
        for &count in &counts {
            next.push(at);
            bounds.push(at..at + count);
            at += count;
        }
        let mut arranged = order.to_vec();
        for (i, &w) in order[level.clone()].iter().enumerate() {
            arranged[next[sub[i]]] = w;
            next[sub[i]] += 1;
        }
        let mut mine_held: Vec<u32> = Vec::new();
        let mut fresh: Vec<(HostPort, u32)> = Vec::new();
        for range in bounds {
            // The nodes each workload of the sub-level avoids: those where a replica placed
            // before fixes one of its ports (`ports_held` is sorted by port, then node).
            self.avoid.clear();
            let mut with_ports: Vec<u32> = arranged[range.clone()]
                .iter()
                .copied()
                .filter(|&w| !fixed(w).is_empty())
                .collect();
            with_ports.sort_unstable();
            for w in with_ports {
                mine_held.clear();
                for &port in fixed(w) {
                    let from = self.ports_held.partition_point(|h| h.0 < port);
                    let to = self.ports_held.partition_point(|h| h.0 <= port);
                    mine_held.extend(self.ports_held[from..to].iter().map(|h| h.1));
                }
                if fixed(w).len() > 1 {
                    mine_held.sort_unstable();
                    mine_held.dedup();
                }
                self.avoid.extend(mine_held.iter().map(|&node| (w, node)));
            }
            self.level(
                workloads,
                &arranged,
                range.clone(),
                node_epoch,
                outcomes,
                changed,
            );
            fresh.clear();
            for &w in &arranged[range] {
                let mine = fixed(w);
                if mine.is_empty() {
                    continue;
                }
                for o in &outcomes[w as usize] {
                    if let Outcome::Assigned { slot, .. } = *o {
                        fresh.extend(mine.iter().map(|&p| (p, slot)));
                    }
                }
            }
            if !fresh.is_empty() {
                // Two sorted runs: the stable sort merges them in one pass.
                fresh.sort_unstable();
                self.ports_held.extend_from_slice(&fresh);
                self.ports_held.sort();
                self.ports_held.dedup();
            }
        }
        self.avoid.clear();
    }
}

/// Why a replica has no node: the nodes left for it hold a replica of another workload fixing
/// one of its ports.
pub(super) fn port_held(port: HostPort, nodes: u32) -> Unschedulable {
    Unschedulable::Incapable {
        need: format!("host port {port} free of other workloads' replicas"),
        nodes,
    }
}
