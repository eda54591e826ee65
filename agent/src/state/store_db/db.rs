//! The redb database under the store: opening and stamping it, reading entries and facts, writing
//! a plan in one fsynced transaction, and reopening after a failed write (redb refuses every write
//! after an I/O error until the database is closed and reopened).

use std::path::PathBuf;

use redb::{Database, Durability, ReadableDatabase, ReadableTable};
use serde::de::DeserializeOwned;
use serde::Serialize;
use shoal_core::store::{Entry, Plan};

use super::codec::{self, decode, encode, ENTRIES, ENTRY_BYTES_MAX, FACTS, FACT_BYTES_MAX};
use super::error::{read_err, write_err, StoreDbError};
use super::MemDisk;

/// Where the database lives.
#[derive(Clone, Debug)]
pub(super) enum Location {
    /// A file on disk.
    File(PathBuf),
    /// A simulated disk.
    Memory(MemDisk),
}

/// The open database, or none after a failed write until the next [`Db::reopen`].
pub(super) struct Db {
    location: Location,
    db: Option<Database>,
}

impl Db {
    /// Opens (creating if needed) the database and stamps or checks its layout version.
    pub(super) fn open(location: Location) -> Result<Db, StoreDbError> {
        let path = match &location {
            Location::File(path) => path.clone(),
            Location::Memory(_) => PathBuf::from("memory"),
        };
        let open_err = |source: redb::Error| StoreDbError::Open {
            path: path.clone(),
            source,
        };
        let db = match &location {
            Location::File(path) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| open_err(e.into()))?;
                }
                let db = Database::create(path);
                // Owner-only: specs hold their environment. Tightened at every open, so a file
                // written by an older build is too.
                if db.is_ok() {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                        .map_err(|e| open_err(e.into()))?;
                }
                db
            }
            Location::Memory(disk) => Database::builder().create_with_backend(disk.backend()),
        };
        let db = Db {
            location,
            db: Some(db.map_err(|e| open_err(e.into()))?),
        };
        db.stamp().map_err(|e| match e {
            StoreDbError::Read(source) | StoreDbError::Write(source) => open_err(source),
            other => other,
        })?;
        Ok(db)
    }

    /// Creates the tables and stamps the layout on first open; checks it afterwards and migrates
    /// an older one ([`super::migrate`]).
    fn stamp(&self) -> Result<(), StoreDbError> {
        let db = self.handle()?;
        super::migrate::bring_up(db, &super::migrate::bounds(), super::migrate::MIGRATIONS)?;
        Ok(())
    }

    /// True after a failed write: the next write must [`Db::reopen`] first.
    pub(super) fn needs_reopen(&self) -> bool {
        self.db.is_none()
    }

    /// Closes and reopens the database (redb recovers to its last committed state on open).
    pub(super) fn reopen(&mut self) -> Result<(), StoreDbError> {
        // The old handle holds the file lock: it must be gone before the new open.
        self.db = None;
        *self = Db::open(self.location.clone())?;
        Ok(())
    }

    fn handle(&self) -> Result<&Database, StoreDbError> {
        self.db.as_ref().ok_or_else(|| {
            StoreDbError::Read(redb::Error::Io(std::io::Error::other(
                "the database is closed after a failed write; the next write reopens it",
            )))
        })
    }

    /// Every entry, checked to be stored under its own name; stops after `limit + 1` entries so
    /// that an oversized table is refused without being loaded whole.
    pub(super) fn read_entries(&self, limit: usize) -> Result<Vec<Entry>, StoreDbError> {
        let txn = self.handle()?.begin_read().map_err(read_err)?;
        let table = txn.open_table(ENTRIES).map_err(read_err)?;
        let mut entries = Vec::new();
        for row in table.iter().map_err(read_err)? {
            let (key, value) = row.map_err(read_err)?;
            let key = key.value();
            let entry: Entry = decode::<_, ENTRY_BYTES_MAX>("entries", key, value.value())?;
            if entry.name != key {
                return Err(StoreDbError::Corrupt {
                    table: "entries",
                    key: key.to_owned(),
                    detail: format!("holds the entry of {:?}", entry.name),
                });
            }
            entries.push(entry);
            if entries.len() > limit {
                break;
            }
        }
        Ok(entries)
    }

    /// The fact under `key`, if any.
    pub(super) fn fact<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StoreDbError> {
        let txn = self.handle()?.begin_read().map_err(read_err)?;
        let table = txn.open_table(FACTS).map_err(read_err)?;
        let value = table.get(key).map_err(read_err)?;
        value
            .map(|v| decode::<T, FACT_BYTES_MAX>("facts", key, v.value()))
            .transpose()
    }

    /// Writes one fact, fsynced before returning.
    pub(super) fn put_fact<T: Serialize>(
        &mut self,
        key: &str,
        value: &T,
    ) -> Result<(), StoreDbError> {
        let bytes = encode(value);
        self.write(|txn| {
            let mut facts = txn.open_table(FACTS)?;
            facts.insert(key, bytes.as_slice())?;
            Ok(())
        })
    }

    /// Writes a plan's puts, purges and clock high-water mark in one transaction, fsynced before
    /// returning.
    pub(super) fn write_plan(&mut self, plan: &Plan) -> Result<(), StoreDbError> {
        self.write(|txn| {
            let mut entries = txn.open_table(ENTRIES)?;
            for entry in plan.puts() {
                entries.insert(entry.name.as_str(), encode(entry).as_slice())?;
            }
            for name in plan.purges() {
                entries.remove(name)?;
            }
            let mut facts = txn.open_table(FACTS)?;
            facts.insert(codec::FACT_HLC, encode(&plan.hlc_high_water()).as_slice())?;
            Ok(())
        })
    }

    /// Removes every entry in one transaction, fsynced before returning.
    pub(super) fn clear_entries(&mut self) -> Result<(), StoreDbError> {
        self.write(|txn| {
            txn.delete_table(ENTRIES)?;
            txn.open_table(ENTRIES)?;
            Ok(())
        })
    }

    /// Runs `fill` in a durable write transaction and commits it. On any failure the transaction
    /// is rolled back and the handle dropped, so that the next write reopens the database.
    fn write(
        &mut self,
        fill: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StoreDbError> {
        let result = (|| {
            let db = self.db.as_ref().ok_or(redb::Error::DatabaseClosed)?;
            let mut txn = db.begin_write()?;
            txn.set_durability(Durability::Immediate)?;
            fill(&txn)?;
            txn.commit()?;
            Ok::<(), redb::Error>(())
        })();
        result.map_err(|e| {
            self.db = None;
            write_err(e)
        })
    }
}
