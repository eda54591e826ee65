//! Stable hashing and rendezvous keys: the only arithmetic whose bits every agent must agree on.
//!
//! - Ids are hashed once each with xxh3-64 over their UTF-8 bytes and a fixed seed
//!   ([`node_hash`], [`workload_hash`]). Never `std::hash::Hash`: it promises no stable output.
//! - A (workload, node) pair is mixed from the two id hashes by [`pair_hash`]: xxh3's own 9-16 byte
//!   step with fixed secret words (a 64x64->128 multiply folded to 64 bits, plus both inputs,
//!   then xxh3's avalanche). About a nanosecond, and only integer operations.
//! - Replica `i` of a workload adds its own offset ([`replica_offset`], 0 for replica 0) to the
//!   pair hash, wrapping: its own rendezvous order, which does not depend on the replica count.
//! - [`unit`] maps a hash to u strictly inside (0, 1) from its top 52 bits: `(h>>12) + 0.5` is exact
//!   in an f64, so u ranges over [2^-53, 1 - 2^-53]. (Using 53 bits, `(2^53-1) + 0.5` would round
//!   up to 2^53 and give u = 1, a zero key.)
//! - [`key`] is `-ln(u) / c` with `ln` from the `libm` crate pinned to an exact version, and IEEE
//!   division: correctly rounded, no fused multiply-add, the same on every CPU and build.
//! - The weight c of a node for a workload ([`RequestScale::weight`]) is how many copies of the
//!   request its capacity holds: `min(cpu_cap / cpu_req, mem_cap / mem_req)`, a zero request
//!   counting as one unit. A node therefore wins in proportion to what it can hold of *this*
//!   workload: memory-heavy workloads lean to memory-rich nodes, CPU-heavy ones to CPU-rich nodes.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::resources::Resources;

/// Seed for node id hashes.
pub const NODE_SEED: u64 = 0x5348_4f41_4c4e_4f44;
/// Seed for zone name hashes.
pub const ZONE_SEED: u64 = 0x5348_4f41_4c5a_4f4e;
/// Seed for workload id hashes.
pub const WORKLOAD_SEED: u64 = 0x5348_4f41_4c57_4b4c;
/// Secret words of the pair mix (xxh3's default secret, bytes 24..40, little-endian).
const MIX_LO: u64 = 0x1cad_21f7_2c81_017c;
const MIX_HI: u64 = 0xdb97_9083_e96d_d4de;
/// Salt of the replica offsets (`replica_offset`), so that a replica index is never mixed like a
/// node hash.
const REPLICA_SALT: u64 = 0x9e37_79b9_7f4a_7c15;
/// 2^-52, exactly.
const TWO_POW_MINUS_52: f64 = 1.0 / 4_503_599_627_370_496.0;
/// Slack on the log-free bounds so that rounding can never make a bound lie.
const ABOVE_MARGIN: f64 = 1.0 + 1.0 / 1_048_576.0;
const BELOW_MARGIN: f64 = 1.0 - 1.0 / 1_048_576.0;

/// Hash of a node id.
pub fn node_hash(id: &str) -> u64 {
    xxh3_64_with_seed(id.as_bytes(), NODE_SEED)
}

/// Hash of a zone name.
pub fn zone_hash(zone: &str) -> u64 {
    xxh3_64_with_seed(zone.as_bytes(), ZONE_SEED)
}

/// Hash of a workload id.
pub fn workload_hash(id: &str) -> u64 {
    xxh3_64_with_seed(id.as_bytes(), WORKLOAD_SEED)
}

/// xxh3's final avalanche.
#[inline]
fn avalanche(mut x: u64) -> u64 {
    x ^= x >> 37;
    x = x.wrapping_mul(0x1656_6791_9e37_79f9);
    x ^ (x >> 32)
}

/// Mixes a workload hash and a node hash into the pair's hash.
#[inline]
pub fn pair_hash(workload: u64, node: u64) -> u64 {
    let lo = workload ^ MIX_LO;
    let hi = node ^ MIX_HI;
    let product = (lo as u128).wrapping_mul(hi as u128);
    let folded = (product as u64) ^ ((product >> 64) as u64);
    avalanche(lo.swap_bytes().wrapping_add(hi).wrapping_add(folded))
}

/// u strictly inside (0, 1) from the top 52 bits of a hash.
#[inline]
pub fn unit(hash: u64) -> f64 {
    ((hash >> 12) as f64 + 0.5) * TWO_POW_MINUS_52
}

/// The rendezvous key of a pair: `-ln(u) / weight`. Lowest wins; finite and positive.
#[inline]
pub fn key(u: f64, weight: f64) -> f64 {
    -libm::log(u) / weight
}

/// True when the key of (u, weight) is certainly above `threshold`, judged without the log:
/// `-ln u >= 1 - u`. Conservative by a relative margin far wider than any rounding error.
#[inline]
pub fn certainly_above(u: f64, weight: f64, threshold: f64) -> bool {
    1.0 - u > threshold * weight * ABOVE_MARGIN
}

/// True when the key of (u, weight) is certainly below `lower`, judged without the log:
/// `-ln u <= (1 - u) / u`.
#[inline]
pub fn certainly_below(u: f64, weight: f64, lower: f64) -> bool {
    1.0 - u < lower * weight * u * BELOW_MARGIN
}

/// Reciprocals of a request, so that a node's weight costs two multiplications.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestScale {
    cpu_inverse: f64,
    memory_inverse: f64,
}

impl RequestScale {
    /// The scale of one replica's request (a zero request counts as one millicore / one byte).
    pub fn new(request: &Resources) -> Self {
        RequestScale {
            cpu_inverse: 1.0 / request.cpu_millis.max(1) as f64,
            memory_inverse: 1.0 / request.memory_bytes.max(1) as f64,
        }
    }

    /// How many copies of the request a node of this capacity holds, as a real number (>= 1 when
    /// the request fits; callers skip nodes where it does not).
    #[inline]
    pub fn weight(&self, capacity: &Resources) -> f64 {
        let cpu = capacity.cpu_millis as f64 * self.cpu_inverse;
        let memory = capacity.memory_bytes as f64 * self.memory_inverse;
        if cpu < memory {
            cpu
        } else {
            memory
        }
    }
}

/// The hash by which replica `offset` of a workload ranks a candidate of pair hash `pair`,
/// when every candidate's key must be independent for each replica: the pair hash itself for
/// replica 0 (offset 0), else the pair hash and the offset mixed again ([`pair_hash`]). The cell
/// level ranks this way. Adding the offset alone (as the node level's rankings do, see
/// [`replica_offset`]) keeps each replica's order uniform but ties the orders of all replicas
/// together: the winner of every replica is the candidate whose hash lies just below
/// `2^64 - offset`, so each candidate wins in proportion to the gap before its hash on the ring
/// (one token per candidate, as in consistent hashing). Over 100 cells that gave one cell 2
/// replicas and another 348 of 10,000 (`cells_props`, `the_cell_level_spreads_replicas_evenly`).
#[inline]
pub fn replica_pair(pair: u64, offset: u64) -> u64 {
    if offset == 0 {
        pair
    } else {
        pair_hash(pair, offset)
    }
}

/// The offset of replica `index` of a workload: replica `i` ranks node `n` by the key of
/// `pair_hash(workload, n) + offset(i)` (wrapping), so every replica has an order of its own, a
/// weighted rendezvous order in its own right (adding a constant to uniform hashes leaves them
/// uniform and independent), and one pass over the workload's pair hashes finds the first nodes
/// of all of them (`rank`). Replica 0's offset is 0: a one-replica workload ranks nodes by the
/// workload's order. A replica's order depends on its index, never on how many siblings it has:
/// that is what lets a workload scale without moving the replicas that stay.
#[inline]
pub fn replica_offset(workload: u64, index: u32) -> u64 {
    if index == 0 {
        0
    } else {
        pair_hash(workload, REPLICA_SALT ^ u64::from(index))
    }
}
