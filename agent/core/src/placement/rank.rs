//! Rankings: exact prefixes of weighted-rendezvous orders.
//!
//! An order sorts a set of candidate nodes by `(key, node id)`, where the key is `-ln(u) / c`
//! with u from `pair_hash(workload, node) + offset` (wrapping) and c the node's weight for the
//! request. Every replica has its own order, its **own list**: the offset is the replica's
//! (`replica_offset`; 0 for replica 0) and the candidates are the workload's eligible nodes, or
//! for a zone-spread replica those of its home zone. Each workload also has one order over all its
//! eligible nodes (offset 0), which guests and zone repair walk.
//!
//! A [`Ranking`] caches an exact prefix of one order: every candidate at or before its last entry
//! (or all of them, once `complete`). When a walk runs out it is extended by the next chunk of the
//! order (one scan of the candidates for keys past the last entry), never rebuilt. Node changes
//! insert or delete one entry. So the capacity pass sees the same order whatever the history, and
//! incremental and full results are identical.
//!
//! The orders of a workload's replicas differ only by their offsets, so [`Ranking::build_many`]
//! starts all of them from one pass over the candidates: it buckets the pair hashes by their top
//! bits, and each replica walks the buckets down from where its `hash + offset` is largest,
//! stopping when no node left can beat its last entry. A workload of R replicas costs about one
//! scan, not R.

use std::cmp::Ordering;

use super::hash::{certainly_above, certainly_below, key, pair_hash, unit, RequestScale};
use super::table::NodeTable;
use crate::resources::Resources;

/// The end of a bucket's list in [`Scratch`].
const NO_NODE: u32 = u32::MAX;

/// Buffers [`Ranking::build_many`] reuses from one call to the next (a pass over 10,000 nodes
/// would otherwise allocate and fault in a few hundred kilobytes per workload).
#[derive(Clone, Debug, Default)]
pub(crate) struct Scratch {
    /// The fitting candidates: pair hash, weight, slot.
    fitting: Vec<(u64, f64, u32)>,
    /// The next candidate in the same bucket.
    next: Vec<u32>,
    /// Each bucket's first candidate.
    head: Vec<u32>,
}

/// One node of a ranking.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Entry {
    pub key: f64,
    pub node: u32,
}

impl Entry {
    /// An entry naming only a node (for a predicate over nodes).
    pub fn at(node: u32) -> Self {
        Entry { key: 0.0, node }
    }
}

/// What a scan needs: the candidates and how to key them.
pub(crate) struct Scan<'a> {
    pub nodes: &'a NodeTable,
    /// Slots of the candidate nodes (eligible by constraints; for a zone-spread replica, those of
    /// its home zone).
    pub candidates: &'a [u32],
    /// The workload's hash.
    pub hash: u64,
    /// The replica's offset (0 for the workload's order).
    pub offset: u64,
    pub request: Resources,
    pub scale: RequestScale,
}

impl Scan<'_> {
    /// The key of `slot`, or None when the request does not fit its capacity.
    pub fn key_of(&self, slot: u32) -> Option<f64> {
        let cap = &self.nodes.capacity[slot as usize];
        if !self.request.fits_in(cap) {
            return None;
        }
        let u = unit(self.pair(slot).wrapping_add(self.offset));
        Some(key(u, self.scale.weight(cap)))
    }

    /// The workload's pair hash with a node (before the offset).
    fn pair(&self, slot: u32) -> u64 {
        pair_hash(self.hash, self.nodes.hashes[slot as usize])
    }

    fn cmp(&self, a: (f64, u32), b: (f64, u32)) -> Ordering {
        a.0.total_cmp(&b.0)
            .then_with(|| self.nodes.ids[a.1 as usize].cmp(&self.nodes.ids[b.1 as usize]))
    }

    /// The `want` first candidates of the order strictly after `after`, sorted. Fewer means no
    /// more.
    fn next_chunk(&self, after: Option<(f64, u32)>, want: usize) -> Vec<(f64, u32)> {
        assert!(want > 0);
        let mut best = Best::new(want);
        let lower = after.map_or(0.0, |a| a.0);
        for &slot in self.candidates {
            let cap = &self.nodes.capacity[slot as usize];
            if !self.request.fits_in(cap) {
                continue;
            }
            let weight = self.scale.weight(cap);
            let u = unit(self.pair(slot).wrapping_add(self.offset));
            if certainly_above(u, weight, best.threshold) || certainly_below(u, weight, lower) {
                continue;
            }
            let k = key(u, weight);
            if let Some(after) = after {
                if self.cmp((k, slot), after) != Ordering::Greater {
                    continue;
                }
            }
            best.offer(self, k, slot);
        }
        best.into_sorted(self)
    }
}

/// The `want` smallest (key, node id) seen, kept in a buffer of twice that.
struct Best {
    want: usize,
    buf: Vec<(f64, u32)>,
    /// No key above this can enter (the want-th smallest once the buffer was trimmed).
    threshold: f64,
}

impl Best {
    fn new(want: usize) -> Best {
        Best {
            want,
            buf: Vec::with_capacity(2 * want),
            threshold: f64::INFINITY,
        }
    }

    fn offer(&mut self, scan: &Scan<'_>, k: f64, slot: u32) {
        if k > self.threshold {
            return;
        }
        self.buf.push((k, slot));
        if self.buf.len() == 2 * self.want {
            let want = self.want;
            self.buf
                .select_nth_unstable_by(want - 1, |a, b| scan.cmp(*a, *b));
            self.buf.truncate(want);
            self.threshold = self.buf[want - 1].0;
        }
    }

    fn into_sorted(mut self, scan: &Scan<'_>) -> Vec<(f64, u32)> {
        self.buf.sort_unstable_by(|a, b| scan.cmp(*a, *b));
        self.buf.truncate(self.want);
        self.buf
    }
}

/// An exact prefix of one order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ranking {
    /// Every candidate at or before the last entry, in order (all of them once `complete`).
    /// Holding the bound as the last entry, not as an id, keeps it valid when that node goes:
    /// the prefix is then every candidate at or before the new last entry.
    entries: Vec<Entry>,
    complete: bool,
}

impl Ranking {
    /// A ranking with nothing cached yet (not complete: the first walk extends it).
    pub fn empty() -> Ranking {
        Ranking::default()
    }

    /// The rankings of the orders of `scan` with each of these offsets (its own `offset` is not
    /// used), each with its first `want` entries: what `Ranking::extend` from empty gives, from
    /// one pass over the candidates.
    ///
    /// The pass buckets the candidates by the top bits of their pair hash (about four per
    /// bucket). Each order then walks the buckets down from the one where `hash + offset` is
    /// largest, so it meets its best nodes first, and stops at the first bucket whose largest u
    /// cannot beat its last entry even on the heaviest node. The buckets only speed the walk up:
    /// every node an order skips has a key above its prefix's last.
    pub fn build_many(
        scan: &Scan<'_>,
        offsets: &[u64],
        want: usize,
        scratch: &mut Scratch,
    ) -> Vec<Ranking> {
        assert!(want > 0);
        let Scratch {
            fitting,
            next,
            head,
        } = scratch;
        fitting.clear();
        let mut weight_max: f64 = 0.0;
        for &slot in scan.candidates {
            let cap = &scan.nodes.capacity[slot as usize];
            if scan.request.fits_in(cap) {
                let weight = scan.scale.weight(cap);
                weight_max = weight_max.max(weight);
                fitting.push((scan.pair(slot), weight, slot));
            }
        }
        let bits = (fitting.len() / 4).max(1).ilog2().min(16);
        let bucket = |x: u64| {
            if bits == 0 {
                0
            } else {
                (x >> (64 - bits)) as usize
            }
        };
        let buckets = 1usize << bits;
        // Each bucket's nodes as a list threaded through `next` (no node is moved).
        head.clear();
        head.resize(buckets, NO_NODE);
        next.clear();
        for (i, f) in fitting.iter().enumerate() {
            let b = bucket(f.0);
            next.push(head[b]);
            head[b] = i as u32;
        }
        offsets
            .iter()
            .map(|&offset| {
                // The bucket of the hash that `offset` takes to the top comes first, all of it
                // (its nodes above that hash wrap to the bottom of the order; no matter).
                let first = bucket(u64::MAX - offset);
                let mut best = Best::new(want);
                for step in 0..buckets {
                    let b = (first + buckets - step) % buckets;
                    if step > 0 {
                        // The largest u a node of this bucket, or of any later one, can have.
                        let bucket_top = ((b as u64 + 1) << (64 - bits)).wrapping_sub(1);
                        let u_max = unit(bucket_top.wrapping_add(offset));
                        if certainly_above(u_max, weight_max, best.threshold) {
                            break;
                        }
                    }
                    let mut i = head[b];
                    while i != NO_NODE {
                        let (x, weight, slot) = fitting[i as usize];
                        let u = unit(x.wrapping_add(offset));
                        if !certainly_above(u, weight, best.threshold) {
                            best.offer(scan, key(u, weight), slot);
                        }
                        i = next[i as usize];
                    }
                }
                let chunk = best.into_sorted(scan);
                Ranking {
                    complete: chunk.len() < want,
                    entries: chunk
                        .into_iter()
                        .map(|(key, node)| Entry { key, node })
                        .collect(),
                }
            })
            .collect()
    }

    /// The cached prefix, in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Whether the prefix is the whole order.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The entry at `at`, extending the prefix as far as needed; None past the end of the order.
    pub fn get(&mut self, scan: &Scan<'_>, at: usize) -> Option<Entry> {
        loop {
            if let Some(&e) = self.entries.get(at) {
                return Some(e);
            }
            if !self.extend(scan) {
                return None;
            }
        }
    }

    /// Appends the next chunk of the order (three times as long as the prefix, at least 8 entries:
    /// each chunk is a scan of every candidate, so few and long is cheaper). Returns
    /// false when the ranking was already complete.
    pub fn extend(&mut self, scan: &Scan<'_>) -> bool {
        if self.complete {
            return false;
        }
        let want = (3 * self.entries.len()).max(8);
        let after = self.entries.last().map(|e| (e.key, e.node));
        let chunk = scan.next_chunk(after, want);
        if chunk.len() < want {
            self.complete = true;
        }
        self.entries
            .extend(chunk.into_iter().map(|(key, node)| Entry { key, node }));
        true
    }

    fn covers(&self, scan: &Scan<'_>, k: f64, slot: u32) -> bool {
        self.complete
            || self
                .entries
                .last()
                .is_some_and(|e| scan.cmp((k, slot), (e.key, e.node)) == Ordering::Less)
    }

    fn position(&self, scan: &Scan<'_>, k: f64, slot: u32) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|e| scan.cmp((e.key, e.node), (k, slot)))
    }

    /// Takes in a node that just became a candidate if it belongs in the prefix.
    pub fn node_added(&mut self, scan: &Scan<'_>, slot: u32) {
        let Some(k) = scan.key_of(slot) else { return };
        if !self.covers(scan, k, slot) {
            return;
        }
        match self.position(scan, k, slot) {
            Ok(_) => panic!("node {} ranked twice", scan.nodes.ids[slot as usize]),
            Err(at) => self.entries.insert(at, Entry { key: k, node: slot }),
        }
    }

    /// Drops a node that is about to stop being a candidate (call while its slot is still
    /// filled).
    pub fn node_removed(&mut self, scan: &Scan<'_>, slot: u32) {
        let Some(k) = scan.key_of(slot) else { return };
        if let Ok(at) = self.position(scan, k, slot) {
            self.entries.remove(at);
        } else {
            assert!(
                !self.covers(scan, k, slot),
                "node {} missing from a ranking",
                scan.nodes.ids[slot as usize]
            );
        }
    }

    /// Checks that the prefix is exactly the first entries of a from-scratch order.
    pub fn check_exact(&self, scan: &Scan<'_>) {
        let mut want: Vec<(f64, u32)> = scan
            .candidates
            .iter()
            .filter_map(|&s| scan.key_of(s).map(|k| (k, s)))
            .collect();
        want.sort_unstable_by(|a, b| scan.cmp(*a, *b));
        let have: Vec<(f64, u32)> = self.entries.iter().map(|e| (e.key, e.node)).collect();
        if self.complete {
            assert_eq!(have, want, "complete ranking differs from the full order");
        } else {
            assert!(have.len() <= want.len(), "ranking longer than its order");
            assert_eq!(
                have[..],
                want[..have.len()],
                "ranking prefix differs from the full order"
            );
        }
    }
}
