//! Deterministic, capacity-aware placement: which node runs which replica.
//!
//! Every agent computes the whole placement from the same gossiped inputs (known nodes with their
//! declared capacity, labels, zone and whether they are down or draining; workload specs with
//! their declared requests) and must get the same answer bit for bit on any CPU, OS and build.
//! Then each runs its own slice.
//!
//! How (docs/placement.md has the full story and the measurements):
//! 1. **Ranking** (`rank`, `hash`): each replica orders its candidate nodes (the workload's
//!    eligible nodes; for zone spread, those of its home zone) by a weighted rendezvous key
//!    `-ln(u)/c` (lowest first, ties by node id), where u comes from a stable hash of the
//!    (workload, node) pair plus the replica's own offset, and c is how many copies of the request
//!    the node holds: its own preference list. The orders of different replicas are independent
//!    for all practical purposes, so siblings rarely want one node, and a node change moves almost
//!    only the replicas that were on it. A replica's list depends on its index, never on the
//!    replica count: scaling moves no replica that stays.
//! 2. **Capacity pass** (`accept`), one priority level at a time from the highest: deferred
//!    acceptance in simultaneous rounds. Free replicas propose to the next node of their own list;
//!    each node keeps, strongest claim first (rank in the replica's own list, then the pair's
//!    affinity), what fits in every resource and lets the rest go on to their next node; of two
//!    siblings it keeps the lower index (a replica at home before one away). Replicas
//!    no node of their first 32 kept take leftover room first-fit in the canonical order
//!    (replica index ascending, workload hash, workload id); zone-spread workloads then move a
//!    replica out of a shared zone when an unused zone has room.
//!    This pass runs twice: once for the **ideal** placement, every known node as if up and
//!    not draining, and once for the **actual** one, where down and draining nodes take nothing
//!    and every replica first claims its ideal node (its home) with a claim no replica away from
//!    home can beat. So a node going down moves its own replicas into the room others leave, and
//!    others only where a higher priority's displaced replica needs their room; when it comes
//!    back, the placement is the ideal one again.
//!    A replica with data (`sticky`) has for home the node holding its data instead, while that
//!    node is known and eligible, so nodes joining or leaving the rankings do not move it; its
//!    claim there beats even a replica at its ideal home. The actual pass then runs even with
//!    every node available (`sticky` has the rules).
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
mod sticky;
pub mod summary;
mod table;

pub use engine::PlacementEngine;
pub use model::{
    check_node, check_share, check_workload, Capabilities, HostPort, InputError, Needs, Node,
    Placement, ReplicaId, Resource, Runtime, Share, Spread, Unmet, Unschedulable, Workload,
};

/// The version of the placement algorithm. Agents gossip it: two agents on different versions
/// may compute different placements, and must see that they do. Bump it on any change that can
/// change an output bit (hash, key, weight, order, tie-break, spread rule, reasons).
/// Version 2: the capacity pass is deferred acceptance (version 1 was first-fit in a canonical
/// order). Version 3: down and draining nodes keep their place in the rankings; the actual
/// placement repairs the ideal one (every node up) around them. Version 4: every replica ranks
/// the nodes by its own hash (version 3 split one order per workload among the replicas by a
/// jump hash over the replica count, so scaling moved replicas that stayed), and among siblings
/// at one node the lowest index wins. Version 5: host ports the agent allocates are a resource
/// (a replica needs one per named port without a number; a node has its port range's size).
/// Version 6: a replica's data holder (`Workload::sticky`) is its home in the actual pass.
/// Version 7: a workload some of whose replicas fit nowhere (`Workload::yields_when_short`)
/// is placed, within its priority, after the workloads that fit entirely; and a replica is
/// eligible only on a node whose capabilities (`Node::caps`) meet its
/// needs (`Workload::needs`: runtime, host paths under its volume roots, its fixed host ports not
/// taken there by something else). Two workloads that fix one port may still share a node (the
/// apply notes the clash). With no capabilities and no needs it places as version 6 did,
/// which is how a mesh at a version naming 6 runs it ([`for_algorithm`]).
/// Version 8 (mesh version 10): fixed host ports are a placement resource between workloads (two
/// replicas fixing one port never share a node); a workload whose `user` is root
/// (`Needs::root`) is eligible only on a node allowing root workloads
/// (`Capabilities::root_allowed`). A mesh at a version naming 7 places as version 7 did
/// ([`for_algorithm`] clears both).
/// Version 9 (mesh version 12): a yielding workload short of more replicas than it placed goes
/// after the others of its level also when it placed none (`Workload::yields_unplaced`): under 8
/// it stayed first, and its replicas' proposals could push a replica of a workload that fits to
/// another node before being turned away themselves (a property test's counterexample). And the
/// cell level judges a replica's runtime and root need from the cells' summaries
/// (`Workload::cell_level_needs`): a cell whose members, by its summary, cannot run it takes none
/// of its replicas (before, a process replica could be given to a cell of container-only members).
pub const PLACEMENT_ALGORITHM_VERSION: u32 = 9;

/// The inputs as placement algorithm `algorithm` sees them: before 7, nodes say no capabilities
/// and workloads need nothing (version 6 had neither), so this build places as a build of that
/// algorithm does.
pub fn for_algorithm(algorithm: u32, nodes: &mut [Node], workloads: &mut [Workload]) {
    if algorithm < 9 {
        for w in workloads.iter_mut() {
            w.yields_unplaced = false;
            w.cell_level_needs = false;
        }
    }
    if algorithm < 8 {
        // Root workloads (a need and a capability) came with algorithm 8.
        for n in nodes.iter_mut() {
            if let Some(caps) = &mut n.caps {
                caps.root_allowed = false;
            }
        }
        for w in workloads.iter_mut() {
            w.ports_exclusive = false;
            w.needs.root = false;
        }
    }
    if algorithm < 7 {
        for n in nodes {
            n.caps = None;
        }
        for w in workloads {
            w.needs = Needs::default();
            w.yields_when_short = false;
        }
    }
}

/// The placement of these workloads on these nodes: pure, and independent of the order of both
/// slices. Invalid or duplicated inputs are left out and listed in [`Placement::rejected`].
pub fn place(nodes: &[Node], workloads: &[Workload]) -> Placement {
    PlacementEngine::new(nodes, workloads).into_placement()
}

/// The placement of these shares of workloads (the replicas each names) on these nodes: each
/// replica is ranked as in [`place`] of the whole workload, and only the shares' replicas compete
/// for the nodes. Pure, and independent of the order of both slices.
pub fn place_shares(nodes: &[Node], shares: &[Share]) -> Placement {
    PlacementEngine::with_shares(nodes, shares).into_placement()
}
