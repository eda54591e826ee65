//! How a data dir of an older layout becomes this build's: a chain of steps, each from one layout
//! to the next, each in one redb write transaction that rewrites what it must and stamps the new
//! layout, fsynced on commit. redb commits a transaction whole or not at all, so `kill -9` at any
//! point of a migration leaves either the old layout whole (the next start runs the step again,
//! and the build that wrote it still opens it) or the new one whole.
//!
//! A step may wait for the mesh version (`after_mesh`): until the version recorded in the store
//! reaches it, the data dir stays in the older layout, which this build then reads and writes
//! (`codec::WRITES`), so a host rolled back to the previous build before the mesh version moves
//! opens its data dir as it left it. The step runs at the first start after the move.
//!
//! This build reads layouts `codec::READS_FROM..=codec::SCHEMA` and has no step yet
//! (layout 7 is the only one); [`MIGRATIONS`] is where the next layout's step goes, with a
//! recorded data dir of the older layout in `agent/tests/compat/` (`compat.rs` fails without it).

use redb::{Database, Durability, ReadableDatabase, ReadableTable, WriteTransaction};

use super::codec::{self, decode, encode, ENTRIES, FACTS, FACT_BYTES_MAX};
use super::error::{read_err, write_err, StoreDbError};

/// One step from layout `from` to `from + 1`.
pub(super) struct Migration {
    /// The layout it starts from.
    pub from: u32,
    /// The mesh version from which it runs; `None`: at once.
    pub after_mesh: Option<u16>,
    /// Rewrites layout `from`'s tables into layout `from + 1`'s (the new stamp is written after
    /// it, in the same transaction).
    pub run: fn(&WriteTransaction) -> Result<(), redb::Error>,
}

/// The steps this build knows, by `from`.
pub(super) const MIGRATIONS: &[Migration] = &[];

/// The store name of the mesh version (`state::mesh::upgrade` moves it), read here to
/// decide which steps may run.
pub const MESH_VERSION_NAME: &str = "shoal:mesh-version";

/// The stored mesh version (JSON: small, readable).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MeshVersionRecord {
    /// The version.
    pub version: u16,
}

/// The mesh version a store body holds (`None`: unreadable or absent).
pub fn decode_version(body: Option<&[u8]>) -> Option<u16> {
    let record: MeshVersionRecord = serde_json::from_slice(body?).ok()?;
    Some(record.version)
}

/// Where a data dir's layout stands after [`bring_up`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    /// The layout the data dir is in now.
    pub now: u32,
    /// Steps run by this open.
    pub migrated: u32,
}

/// The layouts a build handles.
#[derive(Clone, Debug)]
pub(super) struct Bounds {
    /// The oldest layout it opens (and migrates).
    pub reads_from: u32,
    /// The layout it stamps on a new data dir and migrates to.
    pub schema: u32,
    /// The layouts it reads and writes as they are (a data dir waiting for the mesh version).
    pub writes: std::ops::RangeInclusive<u32>,
}

/// This build's bounds.
pub(super) fn bounds() -> Bounds {
    Bounds {
        reads_from: codec::READS_FROM,
        schema: codec::SCHEMA,
        writes: codec::WRITES,
    }
}

/// Creates the tables and stamps the layout on a new database; on an existing one, checks its
/// layout and runs the `steps` that bring it to `bounds.schema` (those the mesh version allows).
/// A refusal changes nothing; a failed step leaves the layout before it.
pub(super) fn bring_up(
    db: &Database,
    bounds: &Bounds,
    steps: &[Migration],
) -> Result<Layout, StoreDbError> {
    let found = stamp_new(db, bounds.schema)?;
    let Some(found) = found else {
        return Ok(Layout {
            now: bounds.schema,
            migrated: 0,
        });
    };
    if found > bounds.schema || found < bounds.reads_from {
        return Err(StoreDbError::Schema {
            found,
            expected: bounds.schema,
        });
    }
    let mesh = recorded_mesh_version(db)?;
    let mut now = found;
    let mut migrated = 0;
    while now < bounds.schema {
        let Some(step) = steps.iter().find(|s| s.from == now) else {
            return Err(StoreDbError::Schema {
                found: now,
                expected: bounds.schema,
            });
        };
        if step.after_mesh.is_some_and(|v| mesh < v) {
            break;
        }
        run_step(db, step)?;
        now += 1;
        migrated += 1;
    }
    if !bounds.writes.contains(&now) {
        return Err(StoreDbError::Waiting {
            layout: now,
            mesh_version: mesh,
        });
    }
    if migrated > 0 {
        tracing::info!(from = found, to = now, "store layout migrated");
    }
    Ok(Layout { now, migrated })
}

/// Creates the tables; stamps `schema` when the database has no layout yet (returns `None`), else
/// returns the layout found without writing anything.
fn stamp_new(db: &Database, schema: u32) -> Result<Option<u32>, StoreDbError> {
    let txn = db.begin_write().map_err(write_err)?;
    let found = {
        txn.open_table(ENTRIES).map_err(write_err)?;
        let mut facts = txn.open_table(FACTS).map_err(write_err)?;
        let found = facts
            .get(codec::FACT_SCHEMA)
            .map_err(read_err)?
            .map(|v| v.value().to_vec());
        match found {
            Some(bytes) => Some(decode::<u32, FACT_BYTES_MAX>(
                "facts",
                codec::FACT_SCHEMA,
                &bytes,
            )?),
            None => {
                let schema = encode(&schema);
                facts
                    .insert(codec::FACT_SCHEMA, schema.as_slice())
                    .map_err(write_err)?;
                None
            }
        }
    };
    match found {
        // Already stamped: nothing to write (dropping the transaction aborts it).
        Some(found) => Ok(Some(found)),
        None => txn.commit().map(|_| None).map_err(write_err),
    }
}

/// One step and the new stamp, in one durable transaction.
fn run_step(db: &Database, step: &Migration) -> Result<(), StoreDbError> {
    let mut txn = db.begin_write().map_err(write_err)?;
    txn.set_durability(Durability::Immediate)
        .map_err(write_err)?;
    (step.run)(&txn).map_err(write_err)?;
    {
        let mut facts = txn.open_table(FACTS).map_err(write_err)?;
        let schema = encode(&(step.from + 1));
        facts
            .insert(codec::FACT_SCHEMA, schema.as_slice())
            .map_err(write_err)?;
    }
    txn.commit().map_err(write_err)
}

/// The mesh version the store records (at least [`shoal_core::version::WIRE_MIN`]); an
/// unreadable entry counts as the oldest, which runs no step that waits.
fn recorded_mesh_version(db: &Database) -> Result<u16, StoreDbError> {
    let txn = db.begin_read().map_err(read_err)?;
    let table = txn.open_table(ENTRIES).map_err(read_err)?;
    let oldest = shoal_core::version::WIRE_MIN;
    let Some(value) = table.get(MESH_VERSION_NAME).map_err(read_err)? else {
        return Ok(oldest);
    };
    let entry: shoal_core::store::Entry =
        decode::<_, { codec::ENTRY_BYTES_MAX }>("entries", MESH_VERSION_NAME, value.value())?;
    let version = decode_version(entry.body.live());
    Ok(version.unwrap_or(oldest).max(oldest))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use redb::TableDefinition;
    use shoal_core::hlc::{Hlc, Version};
    use shoal_core::store::{Body, Entry};

    use super::*;
    use crate::state::store_db::MemDisk;

    /// What the synthetic steps write: a table of their own, so what a step did is visible.
    const STEPS: TableDefinition<&str, &[u8]> = TableDefinition::new("steps");

    /// Set: step 6 -> 7 writes its mark, then fails (a crash before its commit).
    static FAIL_7: AtomicBool = AtomicBool::new(false);

    fn to_6(txn: &WriteTransaction) -> Result<(), redb::Error> {
        txn.open_table(STEPS)?.insert("6", b"done".as_slice())?;
        Ok(())
    }

    fn to_7(txn: &WriteTransaction) -> Result<(), redb::Error> {
        txn.open_table(STEPS)?.insert("7", b"done".as_slice())?;
        if FAIL_7.load(Ordering::SeqCst) {
            return Err(redb::Error::Io(std::io::Error::other("killed mid-step")));
        }
        Ok(())
    }

    fn steps(after_mesh: Option<u16>) -> [Migration; 2] {
        [
            Migration {
                from: 5,
                after_mesh: None,
                run: to_6,
            },
            Migration {
                from: 6,
                after_mesh,
                run: to_7,
            },
        ]
    }

    /// A build of layout 7 that reads from 5, and writes 6 too when `writes_6`.
    fn bounds(writes_6: bool) -> Bounds {
        Bounds {
            reads_from: 5,
            schema: 7,
            writes: if writes_6 { 6..=7 } else { 7..=7 },
        }
    }

    fn open(disk: &MemDisk) -> Database {
        Database::builder()
            .create_with_backend(disk.backend())
            .unwrap()
    }

    /// A data dir of `layout`, with the mesh version recorded when given.
    fn data_dir(layout: u32, mesh_version: Option<u16>) -> MemDisk {
        let disk = MemDisk::new();
        let db = open(&disk);
        let txn = db.begin_write().unwrap();
        {
            let mut facts = txn.open_table(FACTS).unwrap();
            facts
                .insert(codec::FACT_SCHEMA, encode(&layout).as_slice())
                .unwrap();
            let mut entries = txn.open_table(ENTRIES).unwrap();
            if let Some(v) = mesh_version {
                let entry = Entry {
                    name: MESH_VERSION_NAME.into(),
                    version: Version::new(Hlc::new(1_000, 0), "n1"),
                    body: Body::Live(format!("{{\"version\":{v}}}").into_bytes()),
                    proof: Vec::new(),
                };
                entries
                    .insert(MESH_VERSION_NAME, encode(&entry).as_slice())
                    .unwrap();
            }
        }
        txn.commit().unwrap();
        disk
    }

    fn layout_of(db: &Database) -> u32 {
        let txn = db.begin_read().unwrap();
        let facts = txn.open_table(FACTS).unwrap();
        let bytes = facts.get(codec::FACT_SCHEMA).unwrap().unwrap();
        decode::<u32, FACT_BYTES_MAX>("facts", "schema", bytes.value()).unwrap()
    }

    fn marks(db: &Database) -> Vec<String> {
        let txn = db.begin_read().unwrap();
        let Ok(table) = txn.open_table(STEPS) else {
            return Vec::new();
        };
        let rows = table.iter().unwrap();
        rows.map(|r| r.unwrap().0.value().to_string()).collect()
    }

    #[test]
    fn this_builds_chain_reaches_its_layout_from_every_layout_it_reads() {
        let bounds = super::bounds();
        assert!(bounds.writes.contains(&bounds.schema));
        for from in bounds.reads_from..bounds.schema {
            let step = MIGRATIONS.iter().find(|s| s.from == from);
            let step = step.unwrap_or_else(|| panic!("no migration from layout {from}"));
            if step.after_mesh.is_some() {
                assert!(
                    bounds.writes.contains(&from),
                    "layout {from} waits but is not written"
                );
            }
        }
    }

    #[test]
    fn a_new_data_dir_is_stamped_and_an_older_one_migrates_step_by_step() {
        let disk = MemDisk::new();
        let db = open(&disk);
        let layout = bring_up(&db, &bounds(false), &steps(None)).unwrap();
        assert_eq!((layout.now, layout.migrated), (7, 0));
        assert_eq!(layout_of(&db), 7);

        let disk = data_dir(5, None);
        let db = open(&disk);
        let layout = bring_up(&db, &bounds(false), &steps(None)).unwrap();
        assert_eq!((layout.now, layout.migrated), (7, 2));
        assert_eq!(
            (layout_of(&db), marks(&db)),
            (7, vec!["6".into(), "7".into()])
        );
        // Opened again: nothing to do.
        let layout = bring_up(&db, &bounds(false), &steps(None)).unwrap();
        assert_eq!(layout.migrated, 0);
    }

    #[test]
    fn a_step_killed_midway_leaves_the_layout_before_it_and_the_next_start_finishes() {
        let disk = data_dir(5, None);
        {
            let db = open(&disk);
            FAIL_7.store(true, Ordering::SeqCst);
            let result = bring_up(&db, &bounds(false), &steps(None));
            FAIL_7.store(false, Ordering::SeqCst);
            assert!(matches!(result, Err(StoreDbError::Write(_))), "{result:?}");
            // Step 5 -> 6 committed whole; 6 -> 7 left nothing, not even its mark.
            assert_eq!((layout_of(&db), marks(&db)), (6, vec!["6".to_string()]));
        }
        disk.crash();
        let db = open(&disk);
        assert_eq!(layout_of(&db), 6, "a committed step survives a crash");
        let layout = bring_up(&db, &bounds(false), &steps(None)).unwrap();
        assert_eq!((layout.now, layout.migrated), (7, 1));
        assert_eq!(marks(&db), ["6", "7"]);
    }

    #[test]
    fn a_failing_disk_during_a_step_changes_nothing() {
        let disk = data_dir(6, None);
        let db = open(&disk);
        disk.set_failing(true);
        let result = bring_up(&db, &bounds(false), &steps(None));
        assert!(result.is_err(), "{result:?}");
        drop(db);
        disk.set_failing(false);
        disk.crash();
        let db = open(&disk);
        assert_eq!((layout_of(&db), marks(&db)), (6, Vec::<String>::new()));
    }

    #[test]
    fn a_step_that_waits_for_the_mesh_version_keeps_the_older_layout_until_it_moves() {
        // Mesh version 7 recorded: the step waits; this build writes layout 6 meanwhile.
        let disk = data_dir(6, Some(7));
        let db = open(&disk);
        let layout = bring_up(&db, &bounds(true), &steps(Some(8))).unwrap();
        assert_eq!((layout.now, layout.migrated), (6, 0));
        assert_eq!(layout_of(&db), 6, "the previous build still opens it");
        // A build that does not write layout 6 refuses it, changing nothing.
        let refused = bring_up(&db, &bounds(false), &steps(Some(8))).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("waits for the mesh version (recorded: 7)"),
            "{refused}"
        );
        assert_eq!(layout_of(&db), 6);
        drop(db);

        // Once the mesh version moved, the next start runs the step.
        let disk = data_dir(6, Some(8));
        let db = open(&disk);
        let layout = bring_up(&db, &bounds(true), &steps(Some(8))).unwrap();
        assert_eq!((layout.now, layout.migrated), (7, 1));
    }

    #[test]
    fn a_layout_too_old_or_too_new_or_without_a_step_is_refused_and_left_alone() {
        for (layout, says) in [
            (4, "older than the oldest this one upgrades from"),
            (9, "written by a newer build"),
        ] {
            let disk = data_dir(layout, None);
            let db = open(&disk);
            let err = bring_up(&db, &bounds(false), &steps(None)).unwrap_err();
            assert!(err.to_string().contains(says), "{err}");
            assert_eq!(layout_of(&db), layout);
        }
        let disk = data_dir(5, None);
        let db = open(&disk);
        let err = bring_up(&db, &bounds(false), &[]).unwrap_err();
        assert!(
            matches!(err, StoreDbError::Schema { found: 5, .. }),
            "{err}"
        );
        assert_eq!(layout_of(&db), 5);
    }
}
