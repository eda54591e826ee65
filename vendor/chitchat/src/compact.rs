//! Shoal patch: compact gossip's bucket hashes.
//!
//! In compact mode a Syn carries, instead of every node's digest, one hash per bucket of node
//! ids ([`BUCKETS`] of them). A bucket's hash sums, over the bucket's nodes, a mix of the node's
//! id, `max_version` and `last_gc_version`: two peers whose buckets hold the same nodes at the
//! same versions compute the same hash, whatever order they hold them in. Heartbeats are left
//! out (they change every round and would make every bucket differ every round); liveness then
//! comes from outside chitchat (`Chitchat::set_external_liveness`). Only the buckets whose hashes
//! differ are then reconciled, with the ordinary digest and delta restricted to them.

use std::net::SocketAddr;

use crate::ChitchatId;
use crate::serialize::{Deserializable, Serializable};

/// Buckets per Syn: one bit each in a [`BucketMask`].
pub const BUCKETS: usize = 32;

/// One bit per bucket.
pub type BucketMask = u32;

/// One hash per bucket.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct BucketHashes(pub [u32; BUCKETS]);

impl BucketHashes {
    /// The buckets whose hashes differ from `other`'s.
    pub fn mismatched(&self, other: &BucketHashes) -> BucketMask {
        let mut mask = 0;
        for (i, (a, b)) in self.0.iter().zip(other.0.iter()).enumerate() {
            if a != b {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// Adds one node at these versions to its bucket.
    pub(crate) fn add(&mut self, id: &ChitchatId, max_version: u64, last_gc_version: u64) {
        let h = id_hash(id);
        let bucket = bucket_of_hash(h);
        let entry = mix(h ^ mix(max_version ^ mix(last_gc_version.wrapping_add(1))));
        self.0[bucket] = self.0[bucket].wrapping_add((entry >> 32) as u32);
    }
}

impl Serializable for BucketHashes {
    fn serialize(&self, buf: &mut Vec<u8>) {
        for hash in &self.0 {
            hash.serialize(buf);
        }
    }

    fn serialized_len(&self) -> usize {
        BUCKETS * 4
    }
}

impl Deserializable for BucketHashes {
    fn deserialize(buf: &mut &[u8]) -> anyhow::Result<Self> {
        let mut hashes = [0u32; BUCKETS];
        for hash in hashes.iter_mut() {
            *hash = u32::deserialize(buf)?;
        }
        Ok(BucketHashes(hashes))
    }
}

/// The bucket of a node id: the same on every peer and every build (FNV-1a, not std's keyed
/// hasher).
pub fn bucket_of(id: &ChitchatId) -> usize {
    bucket_of_hash(id_hash(id))
}

/// Whether `id`'s bucket is in `mask`.
pub fn in_mask(id: &ChitchatId, mask: BucketMask) -> bool {
    mask & (1 << bucket_of(id)) != 0
}

fn bucket_of_hash(h: u64) -> usize {
    (mix(h) % BUCKETS as u64) as usize
}

/// FNV-1a over the id's name, generation and address, in a fixed layout.
fn id_hash(id: &ChitchatId) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(PRIME);
        }
    };
    eat(id.node_id.as_bytes());
    eat(&[0xff]);
    eat(&id.generation_id.to_le_bytes());
    match id.gossip_advertise_addr {
        SocketAddr::V4(a) => eat(&a.ip().octets()),
        SocketAddr::V6(a) => eat(&a.ip().octets()),
    }
    eat(&id.gossip_advertise_addr.port().to_le_bytes());
    h
}

/// SplitMix64's finalizer: every input bit moves every output bit.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_bucket_hashes_ignore_order_and_see_versions() {
        let ids: Vec<ChitchatId> = (0..100)
            .map(|i| ChitchatId::for_local_test(10_000 + i))
            .collect();
        let mut forward = BucketHashes::default();
        for (i, id) in ids.iter().enumerate() {
            forward.add(id, i as u64, 0);
        }
        let mut backward = BucketHashes::default();
        for (i, id) in ids.iter().enumerate().rev() {
            backward.add(id, i as u64, 0);
        }
        assert_eq!(forward, backward);
        assert_eq!(forward.mismatched(&backward), 0);

        let mut bumped = BucketHashes::default();
        for (i, id) in ids.iter().enumerate() {
            let version = if i == 7 { 8 } else { i as u64 };
            bumped.add(id, version, 0);
        }
        assert_eq!(forward.mismatched(&bumped), 1 << bucket_of(&ids[7]));

        let mut gc = BucketHashes::default();
        for (i, id) in ids.iter().enumerate() {
            gc.add(id, i as u64, u64::from(i == 9));
        }
        assert_eq!(forward.mismatched(&gc), 1 << bucket_of(&ids[9]));
    }

    #[test]
    fn test_buckets_spread_ids() {
        let mut counts = [0usize; BUCKETS];
        for i in 0..3_200 {
            counts[bucket_of(&ChitchatId::for_local_test(i))] += 1;
        }
        // 100 expected per bucket.
        assert!(counts.iter().all(|c| (50..=150).contains(c)), "{counts:?}");
    }

    const GOLDEN: u32 = 1_476_540_283;

    #[test]
    fn test_bucket_of_is_stable() {
        // The same id lands in the same bucket on every build: a changed hash would make every
        // bucket differ between two builds of one mesh.
        let id = ChitchatId::new("node-a".to_string(), 7, "10.0.0.1:7000".parse().unwrap());
        assert_eq!(id_hash(&id), id_hash(&id.clone()));
        assert_eq!(bucket_of(&id), 2);
        let mut hashes = BucketHashes::default();
        hashes.add(&id, 5, 0);
        assert_eq!(hashes.0[2], GOLDEN);
    }
}
