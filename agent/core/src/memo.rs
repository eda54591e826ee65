//! A bounded, shared cache of a pure function's results by their inputs ([`Memo`]): what the
//! simulator's agents share their placements through ([`crate::cells::PlacementMemo`]).
//!
//! An entry is found by a hash of its inputs and taken only when the inputs are equal to the
//! ones it was computed from, so a hit returns exactly what the function returns. Bounded: the
//! least recently used entry goes first. Named by no other module of the core but the ones that
//! place (a leaf).

use std::hash::Hasher;
use std::sync::{Arc, Mutex};

struct Entry<I, O> {
    hash: u64,
    inputs: I,
    out: Arc<O>,
    used: u64,
}

struct Table<I, O> {
    entries: Vec<Entry<I, O>>,
    cap: usize,
}

impl<I, O> Table<I, O> {
    fn new(cap: usize) -> Self {
        Table {
            entries: Vec::new(),
            cap,
        }
    }

    fn find(&mut self, hash: u64, tick: u64, same: impl Fn(&I) -> bool) -> Option<Arc<O>> {
        let e = self
            .entries
            .iter_mut()
            .find(|e| e.hash == hash && same(&e.inputs))?;
        e.used = tick;
        Some(e.out.clone())
    }

    fn insert(&mut self, hash: u64, inputs: I, out: Arc<O>, tick: u64) {
        if self.entries.len() >= self.cap {
            let oldest = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used);
            if let Some(i) = oldest {
                self.entries.swap_remove(i);
            }
        }
        self.entries.push(Entry {
            hash,
            inputs,
            out,
            used: tick,
        });
    }
}

struct Inner<I, O> {
    table: Table<I, O>,
    tick: u64,
    hits: u64,
    misses: u64,
}

/// Results of one pure function by input, shared (module doc).
pub struct Memo<I, O> {
    inner: Mutex<Inner<I, O>>,
}

impl<I, O> Memo<I, O> {
    /// An empty memo of at most `cap` results.
    pub fn new(cap: usize) -> Self {
        Memo {
            inner: Mutex::new(Inner {
                table: Table::new(cap),
                tick: 0,
                hits: 0,
                misses: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<I, O>> {
        // A panic while held leaves only a cache behind: its entries are whole or absent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The result kept for inputs of this `hash` that are `same` as the caller's, counted as a
    /// hit; else `None`, counted as a miss.
    pub fn find(&self, hash: u64, same: impl Fn(&I) -> bool) -> Option<Arc<O>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let found = inner.table.find(hash, tick, same);
        match found {
            Some(_) => inner.hits += 1,
            None => inner.misses += 1,
        }
        found
    }

    /// Keeps `out`, computed from `inputs` of this `hash`.
    pub fn keep(&self, hash: u64, inputs: I, out: Arc<O>) {
        let mut inner = self.lock();
        let tick = inner.tick;
        inner.table.insert(hash, inputs, out, tick);
    }

    /// The result kept for inputs of this `hash` that are `same` as the caller's, else
    /// `compute`'s, kept with `inputs()` (computed without the lock: another thread may compute
    /// the same meanwhile, and then both entries are equal).
    pub fn get_or(
        &self,
        hash: u64,
        same: impl Fn(&I) -> bool,
        inputs: impl FnOnce() -> I,
        compute: impl FnOnce() -> O,
    ) -> Arc<O> {
        if let Some(out) = self.find(hash, same) {
            return out;
        }
        let out = Arc::new(compute());
        self.keep(hash, inputs(), out.clone());
        out
    }

    /// Hits and misses so far.
    pub fn counts(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.hits, inner.misses)
    }
}

/// A hash of two values' serialized forms (equal values, equal hashes).
pub fn hash_serialized<A: serde::Serialize + ?Sized, B: serde::Serialize + ?Sized>(
    a: &A,
    b: &B,
) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let a = serde_json::to_vec(a).expect("placement inputs always serialize");
    h.write_u64(a.len() as u64);
    h.write(&a);
    h.write(&serde_json::to_vec(b).expect("placement inputs always serialize"));
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries with equal hashes are told apart by their inputs, and the least recently used
    /// goes first when full.
    #[test]
    fn a_table_takes_only_equal_inputs_and_stays_bounded() {
        let mut t: Table<u32, u32> = Table::new(2);
        t.insert(7, 1, Arc::new(10), 1);
        t.insert(7, 2, Arc::new(20), 2);
        assert_eq!(t.find(7, 3, |i| *i == 2).as_deref(), Some(&20));
        assert_eq!(t.find(7, 4, |i| *i == 1).as_deref(), Some(&10));
        assert_eq!(t.find(7, 5, |i| *i == 3), None);
        // 2 was used last at tick 3, 1 at tick 4: 2 goes.
        t.insert(8, 3, Arc::new(30), 6);
        assert_eq!(t.entries.len(), 2);
        assert_eq!(t.find(7, 7, |i| *i == 2), None);
        assert_eq!(t.find(7, 8, |i| *i == 1).as_deref(), Some(&10));
        assert_eq!(t.find(8, 9, |i| *i == 3).as_deref(), Some(&30));
    }

    /// A memo counts what it served and what it did not.
    #[test]
    fn a_memo_counts_hits_and_misses() {
        let m: Memo<u32, u32> = Memo::new(4);
        assert_eq!(m.find(1, |i| *i == 1), None);
        m.keep(1, 1, Arc::new(5));
        assert_eq!(m.find(1, |i| *i == 1).as_deref(), Some(&5));
        assert_eq!(m.counts(), (1, 1));
    }
}
