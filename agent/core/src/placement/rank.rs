//! A workload's ranking: an exact prefix of its weighted-rendezvous order over the eligible nodes,
//! split into one preference list per replica.
//!
//! The full order sorts every eligible node (constraints match, not draining, request fits the
//! capacity) by `(key, node id)`. The cached prefix holds exactly the nodes at or before `bound` in
//! that order; `complete` says it holds them all. Each node of the prefix belongs to one replica's
//! list, chosen by jump consistent hashing of the pair's hash over the replica count, so a replica's
//! first choices do not collide with its siblings'. When a list runs out the prefix is extended
//! by the next chunk of the order (one scan of the eligible nodes for keys past `bound`), never
//! rebuilt. Node changes insert or delete one entry. So the prefix stays exact and the capacity pass
//! sees the same order whatever its history: incremental and full results are identical.

use std::cmp::Ordering;

use super::hash::{
    certainly_above, certainly_below, key, pair_hash, replica_class, unit, zone_replica_class,
    RequestScale,
};
use super::model::Spread;
use super::table::NodeTable;
use crate::constraint::Constraint;
use crate::resources::Resources;

/// One node of a ranking.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Entry {
    pub key: f64,
    pub node: u32,
    /// The replica whose list holds the node.
    pub replica: u32,
}

impl Entry {
    /// An entry naming only a node (for a predicate over nodes).
    pub fn at(node: u32) -> Self {
        Entry {
            key: 0.0,
            node,
            replica: 0,
        }
    }
}

/// What a scan needs of a workload.
pub(crate) struct Scan<'a> {
    pub nodes: &'a NodeTable,
    /// Slots of the nodes eligible by constraints and draining.
    pub eligible: &'a [u32],
    pub workload_hash: u64,
    pub request: Resources,
    pub scale: RequestScale,
    pub replicas: u32,
    pub spread: Spread,
    pub constraints: &'a [Constraint],
    /// For zone spread: each zone number's rank among the workload's eligible zones (u32::MAX
    /// when not eligible), and how many zones are eligible.
    pub zone_ranks: &'a [u32],
    pub zones: u32,
}

impl Scan<'_> {
    /// The key of `slot` for this workload, or None when the request does not fit its capacity.
    pub fn key_of(&self, slot: u32) -> Option<f64> {
        let cap = &self.nodes.capacity[slot as usize];
        if !self.request.fits_in(cap) {
            return None;
        }
        let u = unit(pair_hash(
            self.workload_hash,
            self.nodes.hashes[slot as usize],
        ));
        Some(key(u, self.scale.weight(cap)))
    }

    /// The replica whose own list holds `slot` (`replicas` when nobody's).
    pub fn replica_of(&self, slot: u32) -> u32 {
        let pair = pair_hash(self.workload_hash, self.nodes.hashes[slot as usize]);
        match self.spread {
            Spread::Node => replica_class(pair, self.replicas),
            Spread::Zone => {
                let zone = self.nodes.zone[slot as usize] as usize;
                let rank = self.zone_ranks.get(zone).copied().unwrap_or(u32::MAX);
                zone_replica_class(pair, self.replicas, rank, self.zones)
            }
        }
    }

    /// The number of lists: one per replica and one for nodes that are nobody's.
    fn lists(&self) -> usize {
        self.replicas.max(1) as usize + 1
    }

    fn cmp(&self, a: (f64, u32), b: (f64, u32)) -> Ordering {
        a.0.total_cmp(&b.0)
            .then_with(|| self.nodes.ids[a.1 as usize].cmp(&self.nodes.ids[b.1 as usize]))
    }

    /// The `want` first nodes of the order strictly after `after`, sorted. Fewer means no more.
    fn next_chunk(&self, after: Option<(f64, &str)>, want: usize) -> Vec<(f64, u32)> {
        assert!(want > 0);
        let mut buf: Vec<(f64, u32)> = Vec::with_capacity(2 * want);
        let mut threshold = f64::INFINITY;
        let lower = after.map_or(0.0, |a| a.0);
        for &slot in self.eligible {
            let cap = &self.nodes.capacity[slot as usize];
            if !self.request.fits_in(cap) {
                continue;
            }
            let weight = self.scale.weight(cap);
            let u = unit(pair_hash(
                self.workload_hash,
                self.nodes.hashes[slot as usize],
            ));
            if certainly_above(u, weight, threshold) || certainly_below(u, weight, lower) {
                continue;
            }
            let k = key(u, weight);
            if k > threshold {
                continue;
            }
            if let Some((after_key, after_id)) = after {
                if k < after_key
                    || (k == after_key && self.nodes.ids[slot as usize].as_str() <= after_id)
                {
                    continue;
                }
            }
            buf.push((k, slot));
            if buf.len() == 2 * want {
                buf.select_nth_unstable_by(want - 1, |a, b| self.cmp(*a, *b));
                buf.truncate(want);
                threshold = buf[want - 1].0;
            }
        }
        buf.sort_unstable_by(|a, b| self.cmp(*a, *b));
        buf.truncate(want);
        buf
    }
}

/// How many nodes a fresh ranking holds: about four per replica, plus slack.
fn initial_len(replicas: u32) -> usize {
    4 * replicas as usize + 16
}

/// An exact prefix of one workload's order, split by replica.
#[derive(Clone, Debug)]
pub(crate) struct Ranking {
    lists: Vec<Vec<Entry>>,
    len: usize,
    /// The last (key, node id) a scan admitted; every eligible node at or before it is held.
    bound: Option<(f64, String)>,
    complete: bool,
    /// The whole prefix in order (the lists are its classes).
    merged: Vec<Entry>,
}

impl Ranking {
    /// A ranking with nothing cached yet (not complete: the first walk extends it).
    pub fn empty() -> Ranking {
        Ranking {
            lists: vec![Vec::new()],
            len: 0,
            bound: None,
            complete: false,
            merged: Vec::new(),
        }
    }

    /// A fresh ranking with its first chunk.
    pub fn build(scan: &Scan<'_>) -> Ranking {
        let mut ranking = Ranking {
            lists: vec![Vec::new(); scan.lists()],
            len: 0,
            bound: None,
            complete: false,
            merged: Vec::new(),
        };
        ranking.extend_by(scan, initial_len(scan.replicas));
        ranking
    }

    /// Replica `replica`'s own list (its class of the prefix), in order.
    pub fn list(&self, replica: u32) -> &[Entry] {
        &self.lists[replica as usize]
    }

    /// Every entry of the prefix in order.
    pub fn merged(&self) -> &[Entry] {
        &self.merged
    }

    /// Appends the next chunk of the order. Returns false when the ranking was already complete.
    pub fn extend(&mut self, scan: &Scan<'_>) -> bool {
        if self.complete {
            return false;
        }
        let want = self.len.max(initial_len(scan.replicas));
        self.extend_by(scan, want);
        true
    }

    fn extend_by(&mut self, scan: &Scan<'_>, want: usize) {
        let after = self.bound.as_ref().map(|(k, id)| (*k, id.as_str()));
        let chunk = scan.next_chunk(after, want);
        if chunk.len() < want {
            self.complete = true;
        }
        if let Some(&(k, slot)) = chunk.last() {
            self.bound = Some((k, scan.nodes.ids[slot as usize].clone()));
        }
        for (k, slot) in chunk {
            let replica = scan.replica_of(slot);
            let entry = Entry {
                key: k,
                node: slot,
                replica,
            };
            self.lists[replica as usize].push(entry);
            self.merged.push(entry);
            self.len += 1;
        }
    }

    fn covers(&self, scan: &Scan<'_>, k: f64, slot: u32) -> bool {
        if self.complete {
            return true;
        }
        match &self.bound {
            None => false,
            Some((bk, bid)) => k < *bk || (k == *bk && scan.nodes.ids[slot as usize] <= *bid),
        }
    }

    fn position(&self, scan: &Scan<'_>, list: usize, k: f64, slot: u32) -> Result<usize, usize> {
        self.lists[list].binary_search_by(|e| scan.cmp((e.key, e.node), (k, slot)))
    }

    /// Takes in a node that just became eligible (by constraints) if it belongs in the prefix.
    pub fn node_added(&mut self, scan: &Scan<'_>, slot: u32) {
        let Some(k) = scan.key_of(slot) else { return };
        if !self.covers(scan, k, slot) {
            return;
        }
        let replica = scan.replica_of(slot);
        let entry = Entry {
            key: k,
            node: slot,
            replica,
        };
        match self.position(scan, replica as usize, k, slot) {
            Ok(_) => panic!("node {} ranked twice", scan.nodes.ids[slot as usize]),
            Err(at) => self.lists[replica as usize].insert(at, entry),
        }
        let at = self
            .merged
            .binary_search_by(|e| scan.cmp((e.key, e.node), (k, slot)))
            .expect_err("node ranked twice");
        self.merged.insert(at, entry);
        self.len += 1;
    }

    /// Drops a node that is about to stop being eligible (call while its slot is still filled).
    pub fn node_removed(&mut self, scan: &Scan<'_>, slot: u32) {
        let Some(k) = scan.key_of(slot) else { return };
        if !self.covers(scan, k, slot) {
            return;
        }
        let replica = scan.replica_of(slot);
        let at = self
            .position(scan, replica as usize, k, slot)
            .unwrap_or_else(|_| {
                panic!(
                    "node {} missing from a ranking",
                    scan.nodes.ids[slot as usize]
                )
            });
        self.lists[replica as usize].remove(at);
        let at = self
            .merged
            .binary_search_by(|e| scan.cmp((e.key, e.node), (k, slot)))
            .expect("node missing from a ranking");
        self.merged.remove(at);
        self.len -= 1;
    }

    /// Re-splits the prefix for a new replica count (the order itself does not change).
    pub fn rescale(&mut self, scan: &Scan<'_>) {
        self.lists = vec![Vec::new(); scan.lists()];
        for e in &mut self.merged {
            e.replica = scan.replica_of(e.node);
            self.lists[e.replica as usize].push(*e);
        }
    }

    /// Checks that the prefix is exactly the first `len` nodes of a from-scratch order.
    pub fn check_exact(&self, scan: &Scan<'_>) {
        let mut want: Vec<(f64, u32)> = scan
            .eligible
            .iter()
            .filter_map(|&s| scan.key_of(s).map(|k| (k, s)))
            .collect();
        want.sort_unstable_by(|a, b| scan.cmp(*a, *b));
        let mut have: Vec<(f64, u32)> = self
            .lists
            .iter()
            .flatten()
            .map(|e| (e.key, e.node))
            .collect();
        have.sort_unstable_by(|a, b| scan.cmp(*a, *b));
        assert_eq!(have.len(), self.len, "ranking length out of date");
        assert_eq!(
            self.merged
                .iter()
                .map(|e| (e.key, e.node))
                .collect::<Vec<_>>(),
            have,
            "merged order out of date"
        );
        if self.complete {
            assert_eq!(have, want, "complete ranking differs from the full order");
        } else {
            assert_eq!(
                have[..],
                want[..have.len()],
                "ranking prefix differs from the full order"
            );
        }
        for (r, list) in self.lists.iter().enumerate() {
            assert!(list
                .iter()
                .all(|e| e.replica as usize == r && scan.replica_of(e.node) == e.replica));
        }
    }
}
