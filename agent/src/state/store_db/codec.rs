//! The on-disk layout: two redb tables, the keys of the node facts, and bincode 2 values decoded
//! with a size limit and checked for trailing bytes.
//!
//! ```text
//! entries: workload name -> bincode(shoal_core::store::Entry)
//! facts:   "schema" -> u32, "hlc_high_water" -> Hlc, "generation" -> u64,
//!          "peers" -> Vec<SocketAddr>, "synced_at_ms" -> u64, "members_known" -> u64,
//!          "cells_known" -> u64
//! ```

use redb::TableDefinition;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::StoreDbError;

/// Workload entries by name.
pub(super) const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("entries");
/// Small facts about this node, by key.
pub(super) const FACTS: TableDefinition<&str, &[u8]> = TableDefinition::new("facts");

/// Fact: the layout version of this database.
pub(super) const FACT_SCHEMA: &str = "schema";
/// Fact: the HLC high-water mark.
pub(super) const FACT_HLC: &str = "hlc_high_water";
/// Fact: the last gossip generation handed out.
pub(super) const FACT_GENERATION: &str = "generation";
/// Fact: the last known peers.
pub(super) const FACT_PEERS: &str = "peers";
/// Fact: when this node last knew itself in sync with the mesh.
pub(super) const FACT_SYNCED_AT: &str = "synced_at_ms";
/// Fact: how many members the mesh had when this node last saw a majority of it.
pub(super) const FACT_MEMBERS_KNOWN: &str = "members_known";
/// Fact: how many cells the mesh had when this node's cell last held its quorum of cells.
pub(super) const FACT_CELLS_KNOWN: &str = "cells_known";

/// The layout this build writes and reads (2: entries carry a proof of origin; 3: specs carry
/// the rollout's deadline and failure threshold, and histories each version's outcome; 4: specs
/// carry named ports and probes may name one; 5: containers carry a pull policy; 6: specs carry
/// volumes and a restart stamp, and a tombstone whether it purges the workload's data; 7: specs
/// carry `sticky_for`, `on_data_loss` and `stop_grace`).
pub(super) const SCHEMA: u32 = 7;
/// The oldest layout this build opens: older data dirs are refused, naming the build to pass
/// through (`StoreDbError::Schema`). Raised only with a step in `migrate::MIGRATIONS` from each
/// layout between.
pub(super) const READS_FROM: u32 = 7;
/// The layouts this build reads and writes as they are: [`SCHEMA`], and an older one whose step
/// to the next waits for the mesh version (`migrate::Migration::after_mesh`).
pub(super) const WRITES: std::ops::RangeInclusive<u32> = SCHEMA..=SCHEMA;

/// Decode limit for one entry: the largest payload the store accepts plus room for the name,
/// version and framing. [`super::DesiredStore`] refuses configs whose payload bound exceeds it.
pub(super) const ENTRY_BYTES_MAX: usize = 1 << 20;
/// Room an entry needs besides its payload (name, node id, numbers, tags, its proof of origin),
/// generously.
pub(super) const ENTRY_OVERHEAD_BYTES: usize = 1024 + shoal_core::store::PROOF_BYTES_MAX;
/// Decode limit for a fact.
pub(super) const FACT_BYTES_MAX: usize = 64 << 10;
/// Most peers remembered (each at most ~20 bytes encoded: fits [`FACT_BYTES_MAX`]).
pub const PEERS_MAX: usize = 1024;

/// bincode 2 standard configuration, as everywhere on the wire and on disk.
fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes a value for storage. Encoding into memory cannot fail for the types stored here.
pub(super) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, config()).expect("in-memory bincode encoding")
}

/// Decodes a stored value of at most `LIMIT` bytes, which must be consumed whole. Any problem is
/// a [`StoreDbError::Corrupt`] naming the table and key.
pub(super) fn decode<T: DeserializeOwned, const LIMIT: usize>(
    table: &'static str,
    key: &str,
    bytes: &[u8],
) -> Result<T, StoreDbError> {
    let corrupt = |detail: String| StoreDbError::Corrupt {
        table,
        key: key.to_owned(),
        detail,
    };
    if bytes.len() > LIMIT {
        return Err(corrupt(format!(
            "{} bytes, over the limit of {LIMIT}",
            bytes.len()
        )));
    }
    let (value, used) =
        bincode::serde::decode_from_slice::<T, _>(bytes, config().with_limit::<LIMIT>())
            .map_err(|e| corrupt(e.to_string()))?;
    if used != bytes.len() {
        return Err(corrupt(format!("{} trailing bytes", bytes.len() - used)));
    }
    Ok(value)
}
