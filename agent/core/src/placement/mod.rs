//! Deterministic, capacity-aware placement: which node runs which replica.
//!
//! Every agent computes the whole placement from the same gossiped inputs (known nodes with their
//! declared capacity, labels, zone and whether they are down or draining; workload specs with
//! their declared requests) and must get the same answer bit for bit on any CPU, OS and build.
//! Then each runs its own slice.
//!
//! How (docs/placement.md has the full story and the measurements):
//! 1. **Ranking** (`rank`, `hash`): each workload orders its eligible nodes by a weighted
//!    rendezvous key `-ln(u)/c` (lowest first, ties by node id), where u comes from a stable hash
//!    of the (workload, node) pair and c is how many copies of the request the node holds. Each
//!    node of the order belongs to one replica's own preference list (jump consistent hash of the
//!    pair over the replica count), so replicas rarely contend for a node and a node change moves
//!    almost only the replicas that were on it.
//! 2. **Capacity pass** (`accept`), one priority level at a time from the highest: deferred
//!    acceptance in simultaneous rounds. Free replicas propose to the next node of their own list;
//!    each node keeps, strongest claim first (rank in the replica's own list, then the pair's
//!    affinity), what fits in every resource and lets the rest go on to their next node. Replicas
//!    no node of their first 32 kept take leftover room first-fit in the canonical order
//!    (replica index ascending, workload hash, workload id); zone-spread workloads then move a
//!    replica out of a shared zone when an unused zone has room.
//!    This pass runs twice: once for the **ideal** placement, every known node as if up and
//!    not draining, and once for the **actual** one, where down and draining nodes take nothing
//!    and every replica first claims its ideal node (its home) with a claim no replica away from
//!    home can beat. So a node going down moves its own replicas into the room others leave, and
//!    others only where a higher priority's displaced replica needs their room; when it comes
//!    back, the placement is the ideal one again.
//! 3. **Incremental** (`engine`): exact cached prefixes of every ranking, extended a chunk at a
//!    time when a walk runs out, patched on node changes; the pass is replayed. The result equals
//!    [`place`] on the same inputs.
//!
//! **Architecture invariant:** no I/O, no clock, no threads, no `std::hash::Hash` anywhere an
//! output can see it; hash maps are looked up, never iterated into an output.

mod accept;
mod engine;
pub mod hash;
pub mod model;
mod rank;
mod replay;
mod table;

pub use engine::PlacementEngine;
pub use model::{
    check_node, check_workload, InputError, Node, Placement, ReplicaId, Resource, Spread,
    Unschedulable, Workload,
};

/// The version of the placement algorithm. Agents gossip it: two agents on different versions
/// may compute different placements, and must see that they do. Bump it on any change that can
/// change an output bit (hash, key, weight, order, tie-break, spread rule, reasons).
/// Version 2: the capacity pass is deferred acceptance (version 1 was first-fit in a canonical
/// order). Version 3: down and draining nodes keep their place in the rankings; the actual
/// placement repairs the ideal one (every node up) around them.
pub const PLACEMENT_ALGORITHM_VERSION: u32 = 3;

/// The placement of these workloads on these nodes: pure, and independent of the order of both
/// slices. Invalid or duplicated inputs are left out and listed in [`Placement::rejected`].
pub fn place(nodes: &[Node], workloads: &[Workload]) -> Placement {
    PlacementEngine::new(nodes, workloads).into_placement()
}
