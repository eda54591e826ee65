//! The anti-entropy digest: a compact summary of a store that two nodes compare to find which
//! entries differ without exchanging them.
//!
//! Names fall into [`BUCKETS`] buckets by xxh3 of the name bytes. Per bucket the digest keeps the
//! number of entries and the wrapping sum of their [`Entry::content_hash`](super::Entry::content_hash)es, so equal buckets hold
//! equal entries with overwhelming probability. The whole digest also carries the entry count and
//! the highest version. Two sizes are offered:
//! - [`DigestSummary`] (count, max version, one root hash over the buckets): 27 bytes plus the
//!   node id, small enough for a chitchat key on every node of a large cell;
//! - [`Digest`] (the summary plus every bucket): 787 bytes plus the node id (774 for an empty
//!   store), fetched when summaries differ to learn *which* buckets to pull.

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::hlc::{Hlc, Version, NODE_ID_BYTES_MAX};

/// Number of digest buckets. Changing it changes the wire format.
pub const BUCKETS: usize = 64;

/// Format byte that leads every encoded digest.
const FORMAT_FULL: u8 = 1;
/// Format byte that leads every encoded summary.
const FORMAT_SUMMARY: u8 = 2;

/// Largest encoded [`Digest`], in bytes: the size to plan chitchat values and frames for.
pub const DIGEST_BYTES_MAX: usize = 1 + 4 + 1 + 8 + 4 + 1 + NODE_ID_BYTES_MAX + BUCKETS * 12;
/// Largest encoded [`DigestSummary`], in bytes.
pub const SUMMARY_BYTES_MAX: usize = 1 + 4 + 1 + 8 + 4 + 1 + NODE_ID_BYTES_MAX + 8;

/// The bucket a name falls into: stable across nodes, platforms and releases.
pub fn bucket_of(name: &str) -> u16 {
    (xxh3_64(name.as_bytes()) % BUCKETS as u64) as u16
}

/// One bucket of a digest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BucketDigest {
    /// Entries in the bucket (live and tombstones).
    pub count: u32,
    /// Wrapping sum of the entries' content hashes.
    pub hash: u64,
}

impl BucketDigest {
    pub(crate) fn add(&mut self, hash: u64) {
        self.count += 1;
        self.hash = self.hash.wrapping_add(hash);
    }

    pub(crate) fn remove(&mut self, hash: u64) {
        assert!(self.count > 0, "removing from an empty digest bucket");
        self.count -= 1;
        self.hash = self.hash.wrapping_sub(hash);
    }
}

/// Why an encoded digest or summary did not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// Too short, too long, of an unknown format, or inconsistent.
    #[error("malformed store digest ({0}): the peer runs an incompatible version or sent garbage")]
    Malformed(&'static str),
}

/// The full digest of a store: entry count, highest version, and every bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    /// Entries in the store (live and tombstones).
    pub count: u32,
    /// The highest version in the store, `None` when it is empty.
    pub max_version: Option<Version>,
    buckets: Box<[BucketDigest; BUCKETS]>,
}

impl Digest {
    /// A digest from its parts. Asserts that the bucket counts add up to `count`.
    pub fn new(max_version: Option<Version>, buckets: [BucketDigest; BUCKETS]) -> Self {
        let count = buckets.iter().map(|b| u64::from(b.count)).sum::<u64>();
        let count = u32::try_from(count).expect("digest count fits u32");
        Self {
            count,
            max_version,
            buckets: Box::new(buckets),
        }
    }

    /// The buckets, indexed by [`bucket_of`].
    pub fn buckets(&self) -> &[BucketDigest; BUCKETS] {
        &self.buckets
    }

    /// One hash over every bucket: equal root hashes mean equal stores (with overwhelming odds).
    pub fn root_hash(&self) -> u64 {
        let mut h = Xxh3::new();
        for b in self.buckets.iter() {
            h.update(&b.count.to_le_bytes());
            h.update(&b.hash.to_le_bytes());
        }
        h.digest()
    }

    /// The small form to gossip.
    pub fn summary(&self) -> DigestSummary {
        DigestSummary {
            count: self.count,
            max_version: self.max_version.clone(),
            root_hash: self.root_hash(),
        }
    }

    /// The buckets whose count or hash differ from `theirs`, in increasing order: what to pull.
    pub fn diff_buckets(&self, theirs: &Digest) -> Vec<u16> {
        (0..BUCKETS)
            .filter(|&i| self.buckets[i] != theirs.buckets[i])
            .map(|i| i as u16)
            .collect()
    }

    /// Compact binary form, at most [`DIGEST_BYTES_MAX`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DIGEST_BYTES_MAX);
        out.push(FORMAT_FULL);
        out.extend_from_slice(&self.count.to_le_bytes());
        put_version(&mut out, self.max_version.as_ref());
        for b in self.buckets.iter() {
            out.extend_from_slice(&b.count.to_le_bytes());
            out.extend_from_slice(&b.hash.to_le_bytes());
        }
        debug_assert!(out.len() <= DIGEST_BYTES_MAX);
        out
    }

    /// Decodes [`Digest::encode`]'s output. Rejects trailing bytes and counts that do not add up.
    pub fn decode(bytes: &[u8]) -> Result<Digest, DigestError> {
        let mut r = Reader(bytes);
        if r.u8()? != FORMAT_FULL {
            return Err(DigestError::Malformed("unknown digest format"));
        }
        let count = r.u32()?;
        let max_version = r.version()?;
        let mut buckets = [BucketDigest::default(); BUCKETS];
        for b in buckets.iter_mut() {
            *b = BucketDigest {
                count: r.u32()?,
                hash: r.u64()?,
            };
        }
        r.finish()?;
        let sum = buckets.iter().map(|b| u64::from(b.count)).sum::<u64>();
        if sum != u64::from(count) || (count == 0) != max_version.is_none() {
            return Err(DigestError::Malformed(
                "bucket counts do not match the total",
            ));
        }
        Ok(Digest {
            count,
            max_version,
            buckets: Box::new(buckets),
        })
    }
}

/// The gossiped form of a digest: equal summaries mean equal stores; a differing one tells a peer
/// to fetch the full [`Digest`] and pull the differing buckets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestSummary {
    /// Entries in the store (live and tombstones).
    pub count: u32,
    /// The highest version in the store.
    pub max_version: Option<Version>,
    /// [`Digest::root_hash`].
    pub root_hash: u64,
}

impl DigestSummary {
    /// Compact binary form, at most [`SUMMARY_BYTES_MAX`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SUMMARY_BYTES_MAX);
        out.push(FORMAT_SUMMARY);
        out.extend_from_slice(&self.count.to_le_bytes());
        put_version(&mut out, self.max_version.as_ref());
        out.extend_from_slice(&self.root_hash.to_le_bytes());
        out
    }

    /// Decodes [`DigestSummary::encode`]'s output, rejecting trailing bytes.
    pub fn decode(bytes: &[u8]) -> Result<DigestSummary, DigestError> {
        let mut r = Reader(bytes);
        if r.u8()? != FORMAT_SUMMARY {
            return Err(DigestError::Malformed("unknown summary format"));
        }
        let count = r.u32()?;
        let max_version = r.version()?;
        let root_hash = r.u64()?;
        r.finish()?;
        Ok(DigestSummary {
            count,
            max_version,
            root_hash,
        })
    }
}

fn put_version(out: &mut Vec<u8>, version: Option<&Version>) {
    match version {
        None => out.push(0),
        Some(v) => {
            assert!(
                v.node.len() <= NODE_ID_BYTES_MAX,
                "node id over its bound in a digest"
            );
            out.push(1);
            out.extend_from_slice(&v.hlc.wall_ms.to_le_bytes());
            out.extend_from_slice(&v.hlc.logical.to_le_bytes());
            out.push(v.node.len() as u8);
            out.extend_from_slice(v.node.as_bytes());
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], DigestError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(DigestError::Malformed("truncated"))?;
        self.0 = rest;
        Ok(*head)
    }

    fn u8(&mut self) -> Result<u8, DigestError> {
        Ok(self.take::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, DigestError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64, DigestError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn version(&mut self) -> Result<Option<Version>, DigestError> {
        match self.u8()? {
            0 => Ok(None),
            1 => {
                let hlc = Hlc::new(self.u64()?, self.u32()?);
                let len = usize::from(self.u8()?);
                if len == 0 || len > NODE_ID_BYTES_MAX || len > self.0.len() {
                    return Err(DigestError::Malformed("bad node id length"));
                }
                let (node, rest) = self.0.split_at(len);
                self.0 = rest;
                let node = std::str::from_utf8(node)
                    .map_err(|_| DigestError::Malformed("node id is not UTF-8"))?;
                Ok(Some(Version::new(hlc, node)))
            }
            _ => Err(DigestError::Malformed("bad version tag")),
        }
    }

    fn finish(self) -> Result<(), DigestError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(DigestError::Malformed("trailing bytes"))
        }
    }
}
