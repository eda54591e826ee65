//! The desired-state store on disk: the core's [`Store`] kept in memory, mirrored in a redb
//! database under the data dir, plus a few facts this node must remember across restarts (the
//! clock's high-water mark, the gossip generation, the last known peers).
//!
//! Every change is durable before it is visible: the core prepares a [`Plan`], the plan is written
//! in one redb transaction fsynced on commit, and only then does the in-memory store change. A
//! failed write (full disk, I/O error) returns [`StoreDbError::Write`]; memory is unchanged, and
//! the database (copy-on-write) keeps its last committed state. The next write reopens the
//! database and reloads memory from it, so memory and disk agree again even if the failure hit
//! after the data reached the disk.
//!
//! The calls block on fsync: the agent runs them on a blocking thread (`spawn_blocking`) or a task
//! of their own, never on the async runtime's worker threads.
//!
//! **Architecture Invariant:** the in-memory store never holds a change the disk does not.

mod codec;
mod db;
mod error;
mod mem_disk;
mod migrate;

use std::net::SocketAddr;
use std::path::Path;

use shoal_core::hlc::Hlc;
use shoal_core::store::{Digest, Entry, MergeOutcome, Plan, Store, StoreConfig};

pub use codec::PEERS_MAX;

/// The store layout this build reads and writes (`shoal version`, the gossiped build facts).
pub const LAYOUT: u32 = codec::SCHEMA;
/// The store layouts this build opens: older ones are migrated to [`LAYOUT`] (`migrate.rs`).
pub const LAYOUTS_READ: std::ops::RangeInclusive<u32> = codec::READS_FROM..=codec::SCHEMA;
use db::{Db, Location};
pub use error::StoreDbError;
pub use mem_disk::MemDisk;
pub use migrate::{decode_version, MeshVersionRecord, MESH_VERSION_NAME};

/// File name of the database inside the data dir.
pub const DB_FILE: &str = "desired.redb";
/// Store names starting so are the mesh's own entries (the revocation list, the capacity caps),
/// not workloads: a spec name cannot take one (':' is refused) and [`DesiredStore::list_live`]
/// skips them.
pub const RESERVED_PREFIX: &str = "shoal:";

/// One page of entries from [`DesiredStore::entries_in_buckets`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// Entries in name order.
    pub entries: Vec<Entry>,
    /// Where the next page starts (pass it as `after`), or `None` when this was the last.
    pub next_after: Option<String>,
}

/// The durable desired-state store of one node. See the module doc.
pub struct DesiredStore {
    db: Db,
    core: Store,
}

impl std::fmt::Debug for DesiredStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DesiredStore")
            .field("entries", &self.core.len())
            .finish()
    }
}

impl DesiredStore {
    /// Opens (creating if needed) the store in `dir` for node `node` and loads every entry.
    pub fn open(dir: &Path, node: &str, config: StoreConfig) -> Result<Self, StoreDbError> {
        Self::load(Location::File(dir.join(DB_FILE)), node, config)
    }

    /// Opens (creating if needed) a store on a simulated disk: for tests and the simulator.
    pub fn open_in_memory(
        disk: &MemDisk,
        node: &str,
        config: StoreConfig,
    ) -> Result<Self, StoreDbError> {
        Self::load(Location::Memory(disk.clone()), node, config)
    }

    fn load(location: Location, node: &str, config: StoreConfig) -> Result<Self, StoreDbError> {
        assert!(
            config.body_bytes_max + codec::ENTRY_OVERHEAD_BYTES <= codec::ENTRY_BYTES_MAX,
            "payload bound {} too large for the on-disk entry limit",
            config.body_bytes_max
        );
        let db = Db::open(location)?;
        let core = Self::read_core(&db, node, config, Hlc::default())?;
        Ok(DesiredStore { db, core })
    }

    /// The in-memory store rebuilt from the disk, its clock at least at `clock_floor`.
    fn read_core(
        db: &Db,
        node: &str,
        config: StoreConfig,
        clock_floor: Hlc,
    ) -> Result<Store, StoreDbError> {
        let high_water: Hlc = db.fact(codec::FACT_HLC)?.unwrap_or_default();
        let entries = db.read_entries(config.entries_max)?;
        Ok(Store::restore(
            node,
            config,
            high_water.max(clock_floor),
            entries,
        )?)
    }

    /// After a failed write: reopens the database and reloads memory from it.
    fn recover(&mut self) -> Result<(), StoreDbError> {
        if !self.db.needs_reopen() {
            return Ok(());
        }
        let as_write_err = |e: StoreDbError| match e {
            StoreDbError::Open { source, .. } | StoreDbError::Read(source) => {
                StoreDbError::Write(source)
            }
            other => other,
        };
        self.db.reopen().map_err(as_write_err)?;
        let (node, config, floor) = (
            self.core.node().to_owned(),
            self.core.config().clone(),
            self.core.clock().last(),
        );
        self.core = Self::read_core(&self.db, &node, config, floor).map_err(as_write_err)?;
        Ok(())
    }

    /// Writes a plan durably, then applies it in memory.
    fn persist_and_commit(&mut self, plan: Plan) -> Result<Vec<String>, StoreDbError> {
        if !plan.is_noop() {
            self.db.write_plan(&plan)?;
        }
        Ok(self.core.commit(plan))
    }

    /// Writes `body` under `name` with no proof of origin; durable when it returns. Returns the
    /// new entry.
    pub fn apply(&mut self, name: &str, body: Vec<u8>, now_ms: u64) -> Result<Entry, StoreDbError> {
        self.apply_sealed(name, body, now_ms, |_| {})
    }

    /// Writes `body` under `name`, the entry sealed by `seal` (its proof of origin); durable
    /// when it returns. Returns the new entry.
    pub fn apply_sealed(
        &mut self,
        name: &str,
        body: Vec<u8>,
        now_ms: u64,
        seal: impl FnMut(&mut Entry),
    ) -> Result<Entry, StoreDbError> {
        self.recover()?;
        let mut plan = self.core.prepare_local(name, body, now_ms)?;
        plan.seal_puts(seal);
        let entry = plan.puts()[0].clone();
        self.persist_and_commit(plan)?;
        Ok(entry)
    }

    /// Writes `body` under `name` in place of exactly version `replaces`, as the version just
    /// above it (see [`Store::prepare_local_after`]), sealed by `seal`; durable when it returns.
    pub fn apply_after_sealed(
        &mut self,
        name: &str,
        body: Vec<u8>,
        replaces: &shoal_core::hlc::Version,
        now_ms: u64,
        seal: impl FnMut(&mut Entry),
    ) -> Result<Entry, StoreDbError> {
        self.recover()?;
        let mut plan = self
            .core
            .prepare_local_after(name, body, replaces, now_ms)?;
        plan.seal_puts(seal);
        let entry = plan.puts()[0].clone();
        self.persist_and_commit(plan)?;
        Ok(entry)
    }

    /// Deletes the live entry `name` (writes a tombstone, no proof of origin); durable when it
    /// returns.
    pub fn delete(&mut self, name: &str, now_ms: u64) -> Result<Entry, StoreDbError> {
        self.delete_sealed(name, now_ms, |_| {})
    }

    /// Deletes the live entry `name` (writes a tombstone sealed by `seal`); durable when it
    /// returns.
    pub fn delete_sealed(
        &mut self,
        name: &str,
        now_ms: u64,
        seal: impl FnMut(&mut Entry),
    ) -> Result<Entry, StoreDbError> {
        self.delete_sealed_with(name, now_ms, false, seal)
    }

    /// [`Self::delete_sealed`], the tombstone asking every node to purge the workload's data
    /// when `purge_data` (`shoal delete --purge-data`).
    pub fn delete_sealed_with(
        &mut self,
        name: &str,
        now_ms: u64,
        purge_data: bool,
        seal: impl FnMut(&mut Entry),
    ) -> Result<Entry, StoreDbError> {
        self.recover()?;
        let mut plan = self.core.prepare_delete_with(name, now_ms, purge_data)?;
        plan.seal_puts(seal);
        let entry = plan.puts()[0].clone();
        self.persist_and_commit(plan)?;
        Ok(entry)
    }

    /// Merges entries received from a peer; what changed is durable when it returns. Entries the
    /// store refuses are listed in the outcome, not errors: one bad entry does not fail a batch.
    pub fn merge_remote(
        &mut self,
        entries: Vec<Entry>,
        now_ms: u64,
    ) -> Result<MergeOutcome, StoreDbError> {
        self.recover()?;
        let plan = self.core.prepare_merge(entries, now_ms);
        let rejected = plan.rejected().to_vec();
        let changed = self.persist_and_commit(plan)?;
        Ok(MergeOutcome { changed, rejected })
    }

    /// Purges tombstones past the grace period; durable when it returns. Returns the purged names.
    pub fn gc(&mut self, now_ms: u64) -> Result<Vec<String>, StoreDbError> {
        self.recover()?;
        let plan = self.core.prepare_gc(now_ms);
        self.persist_and_commit(plan)
    }

    /// The entry by this name, live or tombstone.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.core.get(name)
    }

    /// Every live workload entry, by name: the mesh's own entries (names starting with
    /// [`RESERVED_PREFIX`], such as the revocation list) are left out; [`Self::get`]
    /// still reads them.
    pub fn list_live(&self) -> impl Iterator<Item = &Entry> {
        self.core
            .live()
            .filter(|e| !e.name.starts_with(RESERVED_PREFIX))
    }

    /// The anti-entropy digest.
    pub fn digest(&self) -> Digest {
        self.core.digest()
    }

    /// One page of the entries in `buckets` whose name sorts after `after`, about `bytes_max`
    /// bytes encoded at most (but at least one entry, so that paging always makes progress).
    pub fn entries_in_buckets(
        &self,
        buckets: &[u16],
        after: Option<&str>,
        bytes_max: usize,
    ) -> Page {
        let mut page = Page::default();
        let mut bytes = 0;
        let wanted = self.core.entries_in_buckets(buckets);
        for entry in wanted.filter(|e| after.is_none_or(|a| e.name.as_str() > a)) {
            let size = entry.name.len()
                + entry.version.node.len()
                + entry.body.len_bytes()
                + entry.proof.len()
                + 32;
            if !page.entries.is_empty() && bytes + size > bytes_max {
                page.next_after = page.entries.last().map(|e| e.name.clone());
                break;
            }
            bytes += size;
            page.entries.push(entry.clone());
        }
        page
    }

    /// The in-memory store, for reads the methods above do not cover.
    pub fn core(&self) -> &Store {
        &self.core
    }

    /// The next gossip generation: larger than every one handed out before from this data dir,
    /// and at least `now_ms`, so that it still grows if the data dir is lost (given a sane
    /// clock). Durable when it returns.
    pub fn generation_next(&mut self, now_ms: u64) -> Result<u64, StoreDbError> {
        self.recover()?;
        let last: u64 = self.db.fact(codec::FACT_GENERATION)?.unwrap_or(0);
        let next = last.saturating_add(1).max(now_ms);
        self.db.put_fact(codec::FACT_GENERATION, &next)?;
        Ok(next)
    }

    /// The peers saved last by [`DesiredStore::peers_save`] (empty if none).
    pub fn peers_load(&self) -> Result<Vec<SocketAddr>, StoreDbError> {
        let peers: Vec<SocketAddr> = self.db.fact(codec::FACT_PEERS)?.unwrap_or_default();
        if peers.len() > PEERS_MAX {
            return Err(StoreDbError::TooManyPeers { len: peers.len() });
        }
        Ok(peers)
    }

    /// Remembers the live peers, to rejoin through them after a restart. Durable when it returns.
    pub fn peers_save(&mut self, peers: &[SocketAddr]) -> Result<(), StoreDbError> {
        if peers.len() > PEERS_MAX {
            return Err(StoreDbError::TooManyPeers { len: peers.len() });
        }
        self.recover()?;
        self.db.put_fact(codec::FACT_PEERS, &peers)
    }

    /// How many members the mesh had when this node last saw a majority of it, as saved by
    /// [`DesiredStore::members_known_save`] (`None` if never saved).
    pub fn members_known_load(&self) -> Result<Option<u64>, StoreDbError> {
        self.db.fact(codec::FACT_MEMBERS_KNOWN)
    }

    /// Remembers how many members the mesh had when this node last saw a majority of it, so that
    /// a restarted agent cut off from the mesh does not count itself a majority of the members it
    /// hears (`Reconciler::restore_members_known`). Durable when it returns.
    pub fn members_known_save(&mut self, members: u64) -> Result<(), StoreDbError> {
        self.recover()?;
        self.db.put_fact(codec::FACT_MEMBERS_KNOWN, &members)
    }

    /// How many cells the mesh had when this node's cell last held its quorum of cells, as saved
    /// by [`DesiredStore::cells_known_save`] (`None` if never saved).
    pub fn cells_known_load(&self) -> Result<Option<u64>, StoreDbError> {
        self.db.fact(codec::FACT_CELLS_KNOWN)
    }

    /// Remembers how many cells the mesh had when this node's cell last held its quorum of
    /// cells, so that a restarted agent of a cell cut off from the others does not count its
    /// cell a majority of the cells it knows (`CellState::quorum`). Durable when it returns.
    pub fn cells_known_save(&mut self, cells: u64) -> Result<(), StoreDbError> {
        self.recover()?;
        self.db.put_fact(codec::FACT_CELLS_KNOWN, &cells)
    }

    /// When this node last recorded itself in sync with the mesh ([`DesiredStore::mark_synced`]).
    pub fn synced_at_ms(&self) -> Result<Option<u64>, StoreDbError> {
        self.db.fact(codec::FACT_SYNCED_AT)
    }

    /// Records that this node is in sync with the mesh at `now_ms` (say, after an anti-entropy
    /// round that found nothing to pull; once a minute is plenty). Durable when it returns.
    pub fn mark_synced(&mut self, now_ms: u64) -> Result<(), StoreDbError> {
        self.recover()?;
        self.db.put_fact(codec::FACT_SYNCED_AT, &now_ms)
    }

    /// True when this node has been out of sync longer than the tombstone grace period at
    /// `now_ms`: its peers may have purged tombstones for entries it still holds, and merging its
    /// entries back would resurrect deleted workloads. The agent then calls
    /// [`DesiredStore::discard_all`] once a peer that is not stale is live. A store that never
    /// recorded a sync is not stale: its entries were written by this node or by peers it was in
    /// contact with, and discarding them could lose acknowledged specs (a full-mesh restart).
    pub fn is_stale(&self, now_ms: u64) -> Result<bool, StoreDbError> {
        let grace_ms = self.core.config().tombstone_grace_ms;
        Ok(match self.synced_at_ms()? {
            Some(at) => now_ms.saturating_sub(at) > grace_ms,
            None => false,
        })
    }

    /// Drops every entry, durably, to resynchronize from peers; keeps the facts (the clock's
    /// high-water mark included). Returns how many entries were dropped.
    pub fn discard_all(&mut self) -> Result<usize, StoreDbError> {
        self.recover()?;
        self.db.clear_entries()?;
        let dropped = self.core.len();
        let (node, config) = (self.core.node().to_owned(), self.core.config().clone());
        self.core = Store::restore(node, config, self.core.clock().last(), [])?;
        Ok(dropped)
    }

    /// Checks the in-memory store's invariants, that the disk holds exactly the same entries, and
    /// that the persisted clock high-water mark covers every stored version. Panics on a broken
    /// invariant. Reads the whole table: for tests and the simulator.
    pub fn check_invariants(&self) {
        self.core.check_invariants();
        if self.db.needs_reopen() {
            return; // after a failed write, the next write reloads memory from the disk
        }
        let on_disk = self
            .db
            .read_entries(usize::MAX - 1)
            .expect("read the entries back");
        let in_memory: Vec<&Entry> = self.core.iter().collect();
        assert_eq!(
            on_disk.iter().collect::<Vec<_>>(),
            in_memory,
            "disk and memory disagree"
        );
        let high_water: Hlc = self
            .db
            .fact(codec::FACT_HLC)
            .expect("read the hlc")
            .unwrap_or_default();
        let max = self
            .core
            .iter()
            .map(|e| e.version.hlc)
            .max()
            .unwrap_or_default();
        assert!(
            high_water >= max,
            "persisted hlc {high_water} below stored version {max}"
        );
    }
}

/// The record decoders of [`DesiredStore`], exactly as it reads `desired.redb` (size limit, whole
/// body consumed), for the fuzz targets (fuzz/, agent/tests/fuzz_corpus.rs). Not an API.
#[doc(hidden)]
pub mod fuzz {
    use std::net::SocketAddr;

    use shoal_core::hlc::Hlc;
    use shoal_core::store::Entry;

    use super::codec::{self, decode, ENTRY_BYTES_MAX, FACT_BYTES_MAX};
    use super::StoreDbError;

    /// A row of the entries table.
    pub fn entry(bytes: &[u8]) -> Result<Entry, StoreDbError> {
        decode::<Entry, ENTRY_BYTES_MAX>("entries", "fuzz", bytes)
    }

    /// A row of the entries table as the store writes it.
    pub fn encode_entry(entry: &Entry) -> Vec<u8> {
        codec::encode(entry)
    }

    /// The clock's high-water fact.
    pub fn fact_hlc(bytes: &[u8]) -> Result<Hlc, StoreDbError> {
        decode::<Hlc, FACT_BYTES_MAX>("facts", codec::FACT_HLC, bytes)
    }

    /// The saved peers fact.
    pub fn fact_peers(bytes: &[u8]) -> Result<Vec<SocketAddr>, StoreDbError> {
        decode::<Vec<SocketAddr>, FACT_BYTES_MAX>("facts", codec::FACT_PEERS, bytes)
    }

    /// A counter fact (generation, members or cells known, synced at).
    pub fn fact_u64(bytes: &[u8]) -> Result<u64, StoreDbError> {
        decode::<u64, FACT_BYTES_MAX>("facts", codec::FACT_GENERATION, bytes)
    }

    /// The schema fact.
    pub fn fact_schema(bytes: &[u8]) -> Result<u32, StoreDbError> {
        decode::<u32, FACT_BYTES_MAX>("facts", codec::FACT_SCHEMA, bytes)
    }
}
