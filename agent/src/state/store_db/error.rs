//! The errors of the store on disk.

use std::path::PathBuf;

use shoal_core::store::StoreError;

use super::PEERS_MAX;

/// What went wrong with the desired-state store on disk. Each variant says what state remains.
#[derive(Debug, thiserror::Error)]
pub enum StoreDbError {
    /// The database could not be created, opened or reopened. Nothing was changed.
    #[error("cannot open the desired-state store at {path}: {source}")]
    Open {
        /// The database file (or "memory").
        path: PathBuf,
        /// The cause.
        #[source]
        source: redb::Error,
    },
    /// A write failed and was not acknowledged. The in-memory store is unchanged. The disk holds
    /// the previous state, or (when the failure hit the final sync) possibly the new one, which
    /// the store reloads when it reopens the database before its next write.
    #[error(
        "writing the desired-state store failed, the change was not acknowledged: {0} \
         (check free space and permissions under --data-dir)"
    )]
    Write(#[source] redb::Error),
    /// A read failed. Nothing was changed.
    #[error("reading the desired-state store failed: {0}")]
    Read(#[source] redb::Error),
    /// A stored value did not decode. Nothing was changed.
    #[error(
        "corrupt value in the desired-state store, table {table}, key {key:?}: {detail} \
         (move the data dir aside: the node will resynchronize from its peers)"
    )]
    Corrupt {
        /// The table.
        table: &'static str,
        /// The key.
        key: String,
        /// What was wrong.
        detail: String,
    },
    /// The database was written by an incompatible build. Nothing was changed.
    #[error(
        "the desired-state store has layout {found}, this build reads layout {expected}: {}",
        if found > expected {
            "it was written by a newer build; run that build (or a newer one) on this data dir"
        } else {
            "it was written by a build older than the oldest this one upgrades from; start the \
             data dir once with a build between (71428bd reads layouts 7), then with this one"
        }
    )]
    Schema {
        /// The layout found.
        found: u32,
        /// The layout this build reads.
        expected: u32,
    },
    /// The data dir's layout waits for the mesh version to move before its next step, and this
    /// build cannot run on it as it is. Nothing was changed.
    #[error(
        "the desired-state store has layout {layout}, whose migration waits for the mesh version \
         (recorded: {mesh_version}), and this build does not write layout {layout}: run the \
         previous build on this data dir until the mesh version moves"
    )]
    Waiting {
        /// The layout the data dir is in.
        layout: u32,
        /// The mesh version the store records.
        mesh_version: u16,
    },
    /// The store's rules refused the operation (a bound, an unknown name). Nothing was changed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// More peers than [`PEERS_MAX`] to save. Nothing was changed.
    #[error("{len} peers to remember, at most {PEERS_MAX}")]
    TooManyPeers {
        /// How many were given.
        len: usize,
    },
}

pub(super) fn write_err(e: impl Into<redb::Error>) -> StoreDbError {
    StoreDbError::Write(e.into())
}

pub(super) fn read_err(e: impl Into<redb::Error>) -> StoreDbError {
    StoreDbError::Read(e.into())
}
