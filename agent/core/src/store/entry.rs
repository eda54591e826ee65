//! One entry of the desired-state store, the last-writer-wins rule between two entries, and the
//! checks an entry from a peer or from disk must pass.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use super::StoreConfig;
use crate::hlc::{Version, NODE_ID_BYTES_MAX};

/// What an entry holds: the payload of a live workload, or the mark that it was deleted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Body {
    /// The payload, opaque to the store (the agent stores a bincode-encoded workload spec).
    Live(Vec<u8>),
    /// The workload was deleted. Kept for the tombstone grace period so that the deletion reaches
    /// every node before the tombstone is purged.
    Tombstone {
        /// When the deletion happened (ms since the Unix epoch): the HLC wall time of the delete,
        /// so never earlier than a write it overrides. The grace period counts from here.
        deleted_at_ms: u64,
        /// `shoal delete --purge-data`: every node removes the workload's data volumes once no
        /// instance of it runs there (and while this tombstone is the workload's latest entry).
        purge_data: bool,
    },
}

impl Body {
    /// The payload bytes, or `None` for a tombstone.
    pub fn live(&self) -> Option<&[u8]> {
        match self {
            Body::Live(bytes) => Some(bytes),
            Body::Tombstone { .. } => None,
        }
    }

    /// Payload size in bytes (0 for a tombstone): what the store's byte bounds count.
    pub fn len_bytes(&self) -> usize {
        self.live().map_or(0, <[u8]>::len)
    }

    /// Order between two bodies written under the same version. A version is issued once, so this
    /// only decides between corrupt or hostile duplicates; it exists so that merge stays
    /// commutative even then. A tombstone beats a live body; otherwise the larger one wins.
    fn tiebreak(&self, other: &Body) -> Ordering {
        match (self, other) {
            (
                Body::Tombstone {
                    deleted_at_ms: a,
                    purge_data: pa,
                },
                Body::Tombstone {
                    deleted_at_ms: b,
                    purge_data: pb,
                },
            ) => (a, pa).cmp(&(b, pb)),
            (Body::Tombstone { .. }, Body::Live(_)) => Ordering::Greater,
            (Body::Live(_), Body::Tombstone { .. }) => Ordering::Less,
            (Body::Live(a), Body::Live(b)) => a.cmp(b),
        }
    }
}

/// One workload's entry: its name, the version of the write that produced it, and its body.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Entry {
    /// The workload name: the store's key.
    pub name: String,
    /// The write's version (HLC timestamp and writer node).
    pub version: Version,
    /// The payload or the tombstone.
    pub body: Body,
    /// Proof of who wrote it (the agent signs each local write with its node key and checks
    /// every entry it receives; see the agent's `authority` module). Opaque to the store: not
    /// part of [`Entry::content_hash`] or of last-writer-wins, bounded by [`PROOF_BYTES_MAX`].
    pub proof: Vec<u8>,
}

/// Longest proof an entry may carry, in bytes (a certificate and a signature).
pub const PROOF_BYTES_MAX: usize = 8 * 1024;

impl Entry {
    /// True for a tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self.body, Body::Tombstone { .. })
    }

    /// True when `self` wins over `other` (an entry of the same name) under last-writer-wins: the
    /// higher version wins; equal versions fall back to [`Body`]'s tiebreak. This order is total,
    /// so merging is a maximum: commutative, associative and idempotent.
    pub fn supersedes(&self, other: &Entry) -> bool {
        debug_assert_eq!(self.name, other.name, "compared entries of different names");
        match self.version.cmp(&other.version) {
            Ordering::Equal => self.body.tiebreak(&other.body) == Ordering::Greater,
            ord => ord == Ordering::Greater,
        }
    }

    /// When a tombstone may be purged (its `deleted_at_ms` plus the grace period), `None` for a
    /// live entry.
    pub fn purge_at_ms(&self, grace_ms: u64) -> Option<u64> {
        match self.body {
            Body::Tombstone { deleted_at_ms, .. } => Some(deleted_at_ms.saturating_add(grace_ms)),
            Body::Live(_) => None,
        }
    }

    /// A 64-bit hash of everything in the entry (name, version, body), stable across platforms and
    /// releases (xxh3 over explicit little-endian, length-prefixed bytes). The digest sums these.
    pub fn content_hash(&self) -> u64 {
        let mut h = Xxh3::new();
        self.canonical_parts(|bytes| {
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        });
        h.digest()
    }

    /// Everything in the entry but its proof, as a fixed sequence of byte strings (name, HLC wall
    /// and logical as little-endian, node, body tag, body): what [`Self::content_hash`] hashes and
    /// what a proof of origin signs. Callers length-prefix each part.
    pub fn canonical_parts(&self, mut put: impl FnMut(&[u8])) {
        put(self.name.as_bytes());
        put(&self.version.hlc.wall_ms.to_le_bytes());
        put(&self.version.hlc.logical.to_le_bytes());
        put(self.version.node.as_bytes());
        match &self.body {
            Body::Live(bytes) => {
                put(&[1]);
                put(bytes);
            }
            // A tombstone that purges data has its own tag, so a plain one hashes and signs as
            // it always did.
            Body::Tombstone {
                deleted_at_ms,
                purge_data,
            } => {
                put(if *purge_data { &[3] } else { &[2] });
                put(&deleted_at_ms.to_le_bytes());
            }
        }
    }

    /// Checks the entry's shape against the store's bounds: name, node id and payload sizes.
    pub fn validate(&self, config: &StoreConfig) -> Result<(), Rejection> {
        validate_name(&self.name, config)?;
        let node_len = self.version.node.len();
        if node_len == 0 || node_len > NODE_ID_BYTES_MAX {
            return Err(Rejection::NodeIdInvalid {
                len: node_len,
                max: NODE_ID_BYTES_MAX,
            });
        }
        if self.proof.len() > PROOF_BYTES_MAX {
            return Err(Rejection::ProofTooLarge {
                len: self.proof.len(),
                max: PROOF_BYTES_MAX,
            });
        }
        let len = self.body.len_bytes();
        if len > config.body_bytes_max {
            return Err(Rejection::BodyTooLarge {
                len,
                max: config.body_bytes_max,
            });
        }
        Ok(())
    }
}

/// Checks a workload name against the store's bound: 1 to `name_bytes_max` bytes, no control
/// characters. The spec validator is stricter; the store only keeps its keys sane.
pub fn validate_name(name: &str, config: &StoreConfig) -> Result<(), Rejection> {
    let len = name.len();
    if len == 0 || len > config.name_bytes_max || name.chars().any(char::is_control) {
        return Err(Rejection::NameInvalid {
            len,
            max: config.name_bytes_max,
        });
    }
    Ok(())
}

/// Why one entry was not accepted, locally or from a peer. Nothing about that entry changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The name is empty, longer than the bound, or contains control characters.
    #[error("name of {len} bytes is invalid (1 to {max} bytes, no control characters)")]
    NameInvalid {
        /// Its length in bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The version's node id is empty or too long.
    #[error("node id of {len} bytes in the version is invalid (1 to {max} bytes)")]
    NodeIdInvalid {
        /// Its length in bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The payload is larger than the per-entry bound.
    #[error("payload of {len} bytes exceeds the bound of {max} bytes")]
    BodyTooLarge {
        /// Its size in bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The proof of origin is larger than its bound.
    #[error("proof of origin of {len} bytes exceeds the bound of {max} bytes")]
    ProofTooLarge {
        /// Its size in bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The store holds its maximum number of entries (live and tombstones): delete workloads first
    /// (a deleted workload's entry is freed when its tombstone is purged).
    #[error(
        "the store is full: it holds its bound of {max} entries (workloads, and deleted ones \
         until their tombstones are purged after the grace period); delete workloads no longer \
         needed"
    )]
    TooManyEntries {
        /// The bound.
        max: usize,
    },
    /// The store's payloads would exceed their total size bound: delete workloads first (a
    /// tombstone has no payload: a delete frees its bytes at once).
    #[error(
        "the stored specs would total {total} bytes, over the store's bound of {max} bytes; \
         delete workloads no longer needed (their bytes are freed at once) or make specs smaller"
    )]
    TooManyBytes {
        /// What the total would have become.
        total: usize,
        /// The bound.
        max: usize,
    },
    /// The version's timestamp is too far ahead of local time (see [`crate::hlc`]).
    #[error(transparent)]
    Clock(#[from] crate::hlc::ClockError),
    /// A tombstone already past its grace period: the deletion is complete, and accepting it would
    /// only bring back what this node purged.
    #[error("tombstone past its grace period (purgeable since {purge_at_ms} ms)")]
    TombstoneExpired {
        /// When it became purgeable.
        purge_at_ms: u64,
    },
}
