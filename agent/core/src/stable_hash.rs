//! Hash maps without randomness: `std`'s default hasher is seeded from the operating system, so a
//! `HashMap`'s iteration order differs between runs and between agents. The core's maps hash with
//! a fixed seed instead: the same keys give the same order everywhere, and nothing asks the OS
//! for entropy. (The clippy configuration of this crate refuses `HashMap` and `HashSet` by name.)
//!
//! A fixed seed gives up SipHash's resistance to chosen-key collisions. The core's maps are keyed
//! by node and workload ids and constraint lists, which are bounded in length and count
//! (`placement::model::ID_LEN_MAX` bytes; the mesh bounds their number), so a peer choosing colliding ids can
//! slow lookups but not exhaust the agent.

#![allow(
    clippy::disallowed_types,
    reason = "the one place the core names std's hash collections, with a fixed hasher"
)]

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// A `HashMap` whose hasher has no random state.
pub type StableHashMap<K, V> = HashMap<K, V, StableState>;

/// A `HashSet` whose hasher has no random state.
pub type StableHashSet<T> = HashSet<T, StableState>;

/// Builds [`StableHasher`]s, all alike.
#[derive(Clone, Copy, Debug, Default)]
pub struct StableState;

impl BuildHasher for StableState {
    type Hasher = StableHasher;

    fn build_hasher(&self) -> StableHasher {
        StableHasher(SEED)
    }
}

/// The seed every hash starts from ("SHOALMAP").
const SEED: u64 = 0x5348_4f41_4c4d_4150;

/// xxh3-64 chained over the pieces `Hash` writes: each piece is hashed with the state so far as
/// its seed.
#[derive(Clone, Copy, Debug)]
pub struct StableHasher(u64);

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxh3_64_with_seed(bytes, self.0);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn equal_keys_hash_alike_and_distinct_keys_apart() {
        let state = StableState;
        assert_eq!(state.hash_one("n1"), StableState.hash_one("n1"));
        assert_ne!(state.hash_one("n1"), state.hash_one("n2"));
        // `str`'s Hash writes a terminator, so a pair of strings cannot run into one.
        assert_ne!(state.hash_one(("ab", "c")), state.hash_one(("a", "bc")));
    }

    #[test]
    fn iteration_order_does_not_depend_on_the_process() {
        let map: StableHashMap<String, u32> = (0..64).map(|i| (format!("n{i}"), i)).collect();
        let order: Vec<u32> = map.values().copied().collect();
        let again: StableHashMap<String, u32> = (0..64).map(|i| (format!("n{i}"), i)).collect();
        assert_eq!(order, again.values().copied().collect::<Vec<_>>());
    }
}
