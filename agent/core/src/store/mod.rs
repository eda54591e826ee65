//! The replicated desired-state store as a pure state machine: one entry per workload,
//! last-writer-wins by [`Version`], deletions as tombstones kept for a grace period, and the
//! anti-entropy [`Digest`].
//!
//! Every change goes through a [`Plan`]: `prepare_*` checks it against the store's bounds and
//! returns what would change, the shell makes that durable, then [`Store::commit`] applies it. A
//! failed disk write therefore never advances the in-memory state. `apply_local`, `delete_local`,
//! `merge_entries` and `gc` do both steps at once for callers without a disk (tests, simulator).
//!
//! Merging is a maximum under a total order ([`Entry::supersedes`]), so it is commutative,
//! associative and idempotent: any order or duplication of deliveries converges to one state.
//! The one exception is by design: once a tombstone is purged, an older live entry that arrives
//! after the grace period can come back. Nodes offline longer than the grace period must resync
//! from scratch.
//!
//! **Architecture Invariant:** the store never interprets payloads; it does not depend on the spec
//! types. **Architecture Invariant:** every collection here is bounded by [`StoreConfig`].

mod digest;
mod entry;
mod newer;
mod plan;
pub mod skew;

use std::collections::BTreeMap;

pub use digest::{
    bucket_of, BucketDigest, Digest, DigestError, DigestSummary, BUCKETS, DIGEST_BYTES_MAX,
    SUMMARY_BYTES_MAX,
};
pub use entry::{validate_name, Body, Entry, Rejection, PROOF_BYTES_MAX};
pub use newer::{REFUSED_NEWER_NAMES_MAX, REFUSED_NEWER_TTL_MS};
pub use plan::{MergeOutcome, Plan};

use crate::hlc::{Clock, Hlc, Version, DRIFT_MS_MAX_DEFAULT, NODE_ID_BYTES_MAX};

/// The store's bounds and timing. Every node of a cluster should run the same values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Most entries (live and tombstones) the store holds.
    pub entries_max: usize,
    /// Largest payload of one entry, in bytes.
    pub body_bytes_max: usize,
    /// Largest total of all payloads, in bytes.
    pub bytes_total_max: usize,
    /// Longest workload name, in bytes.
    pub name_bytes_max: usize,
    /// How long a tombstone is kept after its deletion before [`Store::gc`] purges it, in ms.
    pub tombstone_grace_ms: u64,
    /// How far ahead of local time a remote version may be (see [`crate::hlc`]), in ms.
    pub drift_ms_max: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            entries_max: 100_000,
            body_bytes_max: 256 * 1024,
            bytes_total_max: 256 * 1024 * 1024,
            name_bytes_max: 253,
            tombstone_grace_ms: 7 * 24 * 3600 * 1000,
            drift_ms_max: DRIFT_MS_MAX_DEFAULT,
        }
    }
}

/// Why a local operation or a restore failed. The store is unchanged (the clock may have ticked).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The entry broke one of the store's bounds.
    #[error("workload {name:?}: {reason}")]
    Rejected {
        /// The workload name.
        name: String,
        /// What was wrong.
        reason: Rejection,
    },
    /// No live entry by this name.
    #[error("workload {name:?} not found")]
    NotFound {
        /// The workload name.
        name: String,
    },
    /// A peer offered a newer write of this workload that this node refused as too far ahead of
    /// its clock; a write here would get a lower version and lose to it everywhere both are
    /// stored. Nothing changed (the clock did not tick).
    #[error(
        "workload {name:?}: the mesh holds a newer write (version {}) that this agent \
         refused because it is {ahead_ms} ms ahead of this agent's clock (bound {drift_ms_max} \
         ms); a write here would lose to it. Fix the clock (NTP) of this host or of {}, or \
         apply through an agent whose clock is right",
        newer.human(),
        newer.node
    )]
    NewerVersionRefused {
        /// The workload name.
        name: String,
        /// The refused version.
        newer: Version,
        /// How far ahead of this node's clock it is now, in ms.
        ahead_ms: u64,
        /// The skew bound in force, in ms.
        drift_ms_max: u64,
    },
    /// A write meant to replace one version found another (a compare-and-set that lost).
    #[error(
        "workload {name:?}: expected version {expected} to replace, found {}",
        held.as_ref().map_or_else(|| "none".to_string(), |v| v.to_string())
    )]
    Moved {
        /// The workload name.
        name: String,
        /// The version the write was to replace.
        expected: Version,
        /// The version held instead.
        held: Option<Version>,
    },
}

/// One entry with its cached content hash.
#[derive(Clone, Debug)]
struct Slot {
    entry: Entry,
    hash: u64,
}

/// The desired-state map of one node. See the module doc.
#[derive(Clone, Debug)]
pub struct Store {
    node: String,
    config: StoreConfig,
    clock: Clock,
    entries: BTreeMap<String, Slot>,
    buckets: [BucketDigest; BUCKETS],
    bytes_total: usize,
    max_version: Option<Version>,
    refused_newer: newer::RefusedNewer,
}

impl Store {
    /// An empty store for node `node`. Panics if the node id is empty or over its bound (the agent
    /// validates `--name` first).
    pub fn new(node: impl Into<String>, config: StoreConfig) -> Self {
        let node = node.into();
        assert!(
            !node.is_empty() && node.len() <= NODE_ID_BYTES_MAX,
            "node id must be 1 to {NODE_ID_BYTES_MAX} bytes"
        );
        let clock = Clock::new(config.drift_ms_max);
        Self {
            node,
            config,
            clock,
            entries: BTreeMap::new(),
            buckets: [BucketDigest::default(); BUCKETS],
            bytes_total: 0,
            max_version: None,
            refused_newer: newer::RefusedNewer::default(),
        }
    }

    /// A store rebuilt from what this node persisted: its entries and its clock's high-water mark.
    /// Entries are checked against the bounds (not against the skew bound: they were accepted
    /// once); the clock resumes above `high_water` and above every restored version.
    pub fn restore(
        node: impl Into<String>,
        config: StoreConfig,
        high_water: Hlc,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<Self, StoreError> {
        let mut store = Store::new(node, config);
        store.clock.raise_to(high_water);
        for entry in entries {
            let name = entry.name.clone();
            let rejected = |reason| StoreError::Rejected {
                name: name.clone(),
                reason,
            };
            entry.validate(&store.config).map_err(rejected)?;
            if store
                .entries
                .get(&name)
                .is_some_and(|s| !entry.supersedes(&s.entry))
            {
                continue;
            }
            store.check_room(&entry, 0, 0).map_err(rejected)?;
            store.clock.raise_to(entry.version.hlc);
            store.insert(entry);
        }
        Ok(store)
    }

    /// This node's id: the tiebreak in the versions it issues.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The bounds in force.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The clock; its [`Clock::last`] is the high-water mark to persist.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Number of entries, tombstones included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the store holds no entry at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Total payload bytes held.
    pub fn bytes_total(&self) -> usize {
        self.bytes_total
    }

    /// The entry by this name, tombstone or live.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name).map(|s| &s.entry)
    }

    /// The payload of the live entry by this name.
    pub fn get_live(&self, name: &str) -> Option<&[u8]> {
        self.get(name).and_then(|e| e.body.live())
    }

    /// Every entry, tombstones included, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values().map(|s| &s.entry)
    }

    /// Every live entry, by name.
    pub fn live(&self) -> impl Iterator<Item = &Entry> {
        self.iter().filter(|e| !e.is_tombstone())
    }

    /// The newest version of `name` a peer offered within [`REFUSED_NEWER_TTL_MS`] before
    /// `now_ms` that this node refused as too far ahead of its clock, and that beats what it
    /// stores (see `newer.rs`).
    pub fn refused_newer(&self, name: &str, now_ms: u64) -> Option<&Version> {
        self.refused_newer.get(name, now_ms)
    }

    /// Every such refused version, by name.
    pub fn refused_newer_all(&self, now_ms: u64) -> impl Iterator<Item = (&str, &Version)> {
        self.refused_newer.iter(now_ms)
    }

    /// The newest version of `name` this node knows of: the one it stores, or a newer one it
    /// refused. A write of `name` below it loses last-writer-wins somewhere.
    pub fn newest_known(&self, name: &str, now_ms: u64) -> Option<&Version> {
        let held = self.get(name).map(|e| &e.version);
        held.max(self.refused_newer(name, now_ms))
    }

    /// The anti-entropy digest. O(buckets): maintained as entries change.
    pub fn digest(&self) -> Digest {
        let digest = Digest::new(self.max_version.clone(), self.buckets);
        debug_assert_eq!(digest.count as usize, self.entries.len());
        digest
    }

    /// Every entry (tombstones included) in the given buckets, by name: what a peer pulls after
    /// [`Digest::diff_buckets`]. Bucket ids out of range match nothing.
    pub fn entries_in_buckets<'a>(&'a self, buckets: &[u16]) -> impl Iterator<Item = &'a Entry> {
        let mut wanted = [false; BUCKETS];
        for &b in buckets {
            if let Some(w) = wanted.get_mut(usize::from(b)) {
                *w = true;
            }
        }
        self.iter()
            .filter(move |e| wanted[usize::from(bucket_of(&e.name))])
    }

    /// Checks every internal invariant; panics on the first broken one. O(entries and bytes):
    /// for tests and the simulator.
    pub fn check_invariants(&self) {
        assert!(
            self.entries.len() <= self.config.entries_max,
            "more entries than the bound"
        );
        let mut buckets = [BucketDigest::default(); BUCKETS];
        let mut bytes_total = 0;
        for (name, slot) in &self.entries {
            let e = &slot.entry;
            assert_eq!(name, &e.name, "entry stored under another name");
            assert_eq!(
                slot.hash,
                e.content_hash(),
                "stale cached hash for {name:?}"
            );
            assert_eq!(
                e.validate(&self.config),
                Ok(()),
                "entry {name:?} breaks a bound"
            );
            buckets[usize::from(bucket_of(name))].add(slot.hash);
            bytes_total += e.body.len_bytes();
        }
        assert_eq!(
            buckets, self.buckets,
            "digest buckets drifted from the entries"
        );
        assert_eq!(
            bytes_total, self.bytes_total,
            "byte total drifted from the entries"
        );
        assert!(
            bytes_total <= self.config.bytes_total_max,
            "more bytes than the bound"
        );
        let max_version = self.iter().map(|e| &e.version).max();
        assert_eq!(
            max_version,
            self.max_version.as_ref(),
            "max version drifted"
        );
        if let Some(v) = max_version {
            assert!(self.clock.last() >= v.hlc, "clock behind a stored version");
        }
        assert!(
            self.refused_newer.len() <= newer::REFUSED_NEWER_NAMES_MAX,
            "more refused versions tracked than the bound"
        );
        for (name, version) in self.refused_newer.all() {
            assert!(
                self.get(name).is_none_or(|e| e.version < *version),
                "refused version of {name:?} not newer than the stored one"
            );
        }
    }

    /// Would `entry` fit, given `new_names` and `bytes_delta` already promised to other entries of
    /// the same plan? `entry` replaces the current entry of its name, if any.
    fn check_room(
        &self,
        entry: &Entry,
        new_names: usize,
        bytes_added: usize,
    ) -> Result<(), Rejection> {
        let current = self.entries.get(&entry.name);
        let names = self.entries.len() + new_names + usize::from(current.is_none());
        if names > self.config.entries_max {
            return Err(Rejection::TooManyEntries {
                max: self.config.entries_max,
            });
        }
        let freed = current.map_or(0, |s| s.entry.body.len_bytes());
        let total = (self.bytes_total + bytes_added + entry.body.len_bytes()).saturating_sub(freed);
        if total > self.config.bytes_total_max {
            return Err(Rejection::TooManyBytes {
                total,
                max: self.config.bytes_total_max,
            });
        }
        Ok(())
    }

    /// Puts `entry` in place of its name's current entry, keeping the digest and totals.
    fn insert(&mut self, entry: Entry) {
        let hash = entry.content_hash();
        let bucket = usize::from(bucket_of(&entry.name));
        if let Some(old) = self.entries.get(&entry.name) {
            assert!(
                entry.supersedes(&old.entry),
                "insert of an entry that does not win"
            );
            self.buckets[bucket].remove(old.hash);
            self.bytes_total -= old.entry.body.len_bytes();
        }
        self.buckets[bucket].add(hash);
        self.bytes_total += entry.body.len_bytes();
        if self.max_version.as_ref().is_none_or(|m| entry.version > *m) {
            self.max_version = Some(entry.version.clone());
        }
        self.refused_newer.settle(&entry.name, &entry.version);
        self.entries
            .insert(entry.name.clone(), Slot { entry, hash });
    }

    /// Removes the entry by this name, keeping the digest and totals. Returns true when it held
    /// the highest version: the caller then calls [`Store::recompute_max_version`] once.
    fn remove(&mut self, name: &str) -> bool {
        let Some(old) = self.entries.remove(name) else {
            return false;
        };
        self.buckets[usize::from(bucket_of(name))].remove(old.hash);
        self.bytes_total -= old.entry.body.len_bytes();
        self.max_version.as_ref() == Some(&old.entry.version)
    }

    fn recompute_max_version(&mut self) {
        self.max_version = self.iter().map(|e| e.version.clone()).max();
    }
}

/// Removes the entry of `map` with the smallest `age` (the oldest), to make room in a bounded map.
pub(crate) fn evict_oldest<K: Ord + Clone, V>(map: &mut BTreeMap<K, V>, age: impl Fn(&V) -> u64) {
    let oldest = map
        .iter()
        .min_by_key(|(_, v)| age(v))
        .map(|(k, _)| k.clone());
    if let Some(oldest) = oldest {
        map.remove(&oldest);
    }
}
