//! What the shell hands the reconciler on every tick: the desired state (specs and the placement
//! owner map), this node's runtime instances, the peers' observed instances from gossip, and the
//! membership facts of the failure detector.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::cells::CellQuorum;
use crate::instance::{PullProgress, ReplicaId, RuntimeInstance};
use crate::resources::Resources;
use crate::spec::{Run, WorkloadSpec};

use super::status::InstanceStatus;

/// One tick's view of the world. The shell builds it from its own state; the reconciler never
/// keeps a reference to it.
#[derive(Clone, Debug, Default)]
pub struct ReconcileInput {
    /// Every live (not deleted) workload spec in the desired-state store, by workload name. A
    /// workload missing here is deleted: its instances stop (unless the view is suspicious).
    pub specs: BTreeMap<String, SpecEntry>,
    /// The placement's owner map for every replica of every workload (`Placement::assigned`). This
    /// node's slice is the replicas owned by this node; the others say where a replica went.
    pub owners: BTreeMap<ReplicaId, String>,
    /// Every instance the local runtimes list, alive or exited, started by this agent or by an
    /// earlier run of it (adoption). Order does not matter.
    pub instances: Vec<RuntimeInstance>,
    /// When set, the local runtime cannot be listed or trusted right now (engine unreachable); the
    /// reconciler keeps what it knew, takes no local action and raises a runtime issue with this
    /// text. Prefer passing the last good list for a runtime that is briefly unreachable.
    pub runtime_unavailable: Option<String>,
    /// Whether this node can run container specs.
    pub supports_containers: bool,
    /// Whether this node can run process specs.
    pub supports_processes: bool,
    /// When set, nothing on this node could stop an exclusive instance if the agent froze (the
    /// shell's guard process cannot start or cannot be renewed), so exclusive replicas are not
    /// started here; the text says why. Instances already running are left to the usual rules.
    pub exclusive_guard_unavailable: Option<String>,
    /// Another live agent claims this node's name (`crate::claims`): as the later claimant this
    /// node starts nothing; as the incumbent of a disputed name, no exclusive replica. Instances
    /// already running are left to the usual rules.
    pub name_hold: crate::claims::SelfHold,
    /// In a mesh of several cells: the replicas this node runs that the cell level places in
    /// another cell, with that cell and whether it reports the replica's copy serving on the node
    /// it placed it on (the shell asks it: this cell never gossips with another's members). A
    /// replica listed here hands off as a move inside the cell does: it keeps running until its
    /// copy there serves, or until the handoff bound. Empty in a mesh of one cell.
    pub moved_to_cells: BTreeMap<ReplicaId, CellHandoff>,
    /// In a mesh of several cells: for each exclusive replica placed on this node, what the other
    /// cells said of it (see [`CellCopies`]). An exclusive replica missing here does not start
    /// while `membership.cells` is set. Empty in a mesh of one cell.
    pub cell_copies: BTreeMap<ReplicaId, CellCopies>,
    /// The peers' observed instances, as they gossip [`Reconciler::observed`](super::Reconciler::observed),
    /// by node name. A node present with an empty list has published that it runs nothing; a node
    /// absent has published nothing yet. Keep a peer's last state after it goes unreachable or
    /// dead: the exclusive rule needs to know what it ran. This node's own entry is ignored.
    pub peers: BTreeMap<String, Vec<InstanceStatus>>,
    /// The starts in flight whose image the runtime is pulling, with the progress so far: they
    /// show as `pulling`, and a start does not time out while its pull lasts (the runtime bounds
    /// a pull that makes no progress).
    pub pulling: BTreeMap<ReplicaId, PullProgress>,
    /// The failure detector's facts.
    pub membership: Membership,
    /// This node is draining (`shoal drain`): every replica leaving it is expected, so that alone
    /// does not make the view suspicious.
    pub draining: bool,
    /// This node's declared capacity. A start waits while it would take what may be alive here
    /// (instances moving away still run until their replica is served elsewhere, and starts in
    /// flight) over it; `None` sets no limit.
    pub capacity: Option<Resources>,
    /// The shell's own reason to distrust its view (store resyncing, not yet synced after start).
    /// While set, the reconciler holds every stop it would make on its own authority.
    pub view_suspect: Option<String>,
    /// The least fencing token a new owner of an exclusive replica may take: the agent passes
    /// its wall clock in ms since the Unix epoch, so that a mesh that forgot every earlier token
    /// (a full restart, the last owner's gossip gone) still issues a larger one, as long as the
    /// clocks are sane. `0` sets no floor. docs/reconcile.md, "Fencing tokens".
    pub fence_token_floor: u64,
    /// The directories under which this node lets replicas use host paths (`shoal agent
    /// --volume-root`); a spec with a host path elsewhere is not started here.
    pub volume_roots: Vec<String>,
    /// Workloads deleted on purpose: the store holds a tombstone for each (`shoal delete`). No
    /// spec at all while instances run makes the view suspicious (a wiped or unsynced store
    /// looks like that), unless every running instance's workload is one of these: a tombstone
    /// is evidence, which a lost store cannot forge.
    pub deleted: BTreeSet<String>,
    /// The node that holds each replica's data, for replicas that keep data of their own: the
    /// last node the mesh recorded running it (the store's `shoal:data:` entries). An exclusive
    /// replica placed here whose data another node holds waits for it (`data.rs`). A replica
    /// missing here has no data anywhere yet.
    pub data_holders: BTreeMap<ReplicaId, String>,
    /// Replicas placed here whose data the store records on this node but which this node no
    /// longer holds, with why (a data directory removed, a new disk): the shell checks the
    /// exclusive replicas with data placed here that have no instance. Starting one would start
    /// it empty, so it waits as if its data were elsewhere (`data.rs`).
    pub data_missing: BTreeMap<ReplicaId, String>,
    /// Specs of past versions that this node's instances still run, by (workload, version), as
    /// the store's history keeps them (`shoal:history:NAME`): an agent that restarted (an
    /// upgrade) did not see them applied, and without them an instance of a version that
    /// differs from the desired one only in `replicas` or placement would be replaced instead
    /// of carried to the new version. Only versions of instances listed here count.
    pub past_specs: BTreeMap<(String, String), Arc<WorkloadSpec>>,
}

/// Where a replica running here went, when the cell level moved it to another cell.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CellHandoff {
    /// The cell it is placed in now.
    pub cell: String,
    /// That cell reported, lately, that its copy serves on the node it placed it on.
    pub serving: bool,
}

/// A live workload spec and the store version it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecEntry {
    /// The store's version of the spec; compared for equality only.
    pub version: String,
    /// The spec.
    pub spec: Arc<WorkloadSpec>,
    /// An operator paused its rollout: instances of an older version are kept as they are (no
    /// replacement, no reload) until it resumes; missing replicas still start, at this version.
    pub paused: bool,
}

/// Membership as the failure detector sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    /// Nodes currently live, this node included (it is counted live even if left out).
    pub live: BTreeSet<String>,
    /// Nodes the failure detector has confirmed dead. A node also in `live` is live (a restarted
    /// node's earlier identity may stay dead beside its new one): its death is over.
    pub dead: BTreeSet<String>,
    /// Known members that are neither live nor confirmed dead (silent, suspected). A peer with
    /// published state that is in none of the three sets counts as unreachable too.
    pub unreachable: BTreeSet<String>,
    /// How many members the last known membership had (live, dead and unreachable; the shell may
    /// keep a high-water mark that decays only when members leave for good). A strict majority
    /// of it must be live for exclusive replicas to start or keep running.
    pub members_known: usize,
    /// Evidence that this node is heard: for each peer, the latest time (monotonic ms, on the
    /// clock of `now_ms`) at which a round trip to it began whose answer said the peer's own
    /// failure detector holds this node live. Seeing a majority is not enough to keep an
    /// exclusive replica: under a one-way partition (this node's packets lost, the others'
    /// arriving) it would see everyone while everyone declares it dead. The shell need only
    /// gather it while this node owns or runs an exclusive replica; without it, such replicas
    /// neither start nor keep running.
    pub heard_at: BTreeMap<String, u64>,
    /// Evidence that a member may still run exclusive replicas, relayed by gossip: for each
    /// member, the latest time (monotonic ms, on the clock of `now_ms`) at which this node saw
    /// its exclusive lease advance. A member keeps its lease advancing while a copy of an
    /// exclusive replica may be alive on it, and gossip carries the advance through any member that hears it, so
    /// a member that this node cannot reach (and may hold dead) but a majority still hears
    /// keeps its replicas fenced from this node (rule 5 of `reconcile::exclusive` counts the
    /// fencing delay from the later of the death and the lease). With compact gossip nothing
    /// else relays liveness: heartbeats no longer spread every round.
    pub leased_at: BTreeMap<String, u64>,
    /// In a mesh of several cells: this node's cell's standing among the cells. A node keeps or
    /// starts exclusive replicas only while it [holds](CellQuorum::holds), as it needs a
    /// two-way majority of its cell's members (docs/reconcile.md, "Exclusive replicas across
    /// cells"). `None` in a mesh of one cell.
    pub cells: Option<CellQuorum>,
}

/// What the other cells said of an exclusive replica this node owns, for the start rule across
/// cells: a copy alive there, a claim by a cell whose name sorts first, or no fresh answer from a
/// cell that is up. Cells held down are not asked: their copies fence themselves within
/// `cell_claim_ms` (docs/reconcile.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CellCopies {
    /// Cells that report a copy that may be alive (starting, running, stopping).
    pub alive_in: Vec<String>,
    /// Cells whose placement puts the replica there too and whose name sorts before this
    /// node's cell: the lower name goes first, as between two nodes.
    pub claimed_by: Vec<String>,
    /// Cells up in this agent's table that have not answered lately.
    pub unanswered: Vec<String>,
}

impl ReconcileInput {
    /// The spec entry of a workload, if it is live.
    pub fn spec(&self, workload: &str) -> Option<&SpecEntry> {
        self.specs.get(workload)
    }

    /// Whether the replica still exists: its workload is live and its index is below the spec's
    /// replica count.
    pub fn replica_exists(&self, replica: &ReplicaId) -> bool {
        self.spec(&replica.workload)
            .is_some_and(|entry| replica.replica < entry.spec.replicas)
    }

    /// Whether the local runtimes can run this spec, and if not, why.
    pub fn unsupported_reason(&self, spec: &WorkloadSpec) -> Option<String> {
        match &spec.run {
            Run::Container(c) if !self.supports_containers => Some(format!(
                "container spec (image {}) but this node has no container runtime",
                c.image
            )),
            Run::Process(_) if !self.supports_processes => {
                Some("process spec but this node does not run processes".to_string())
            }
            _ => spec
                .host_path_refused(&self.volume_roots)
                .map(|(volume, path)| host_path_refusal(volume, path, &self.volume_roots)),
        }
    }
}

/// Why a host path is refused on a node with these `--volume-root`s.
pub fn host_path_refusal(volume: &str, path: &str, roots: &[String]) -> String {
    let allowed = match roots {
        [] => "this agent allows no host paths (start it with --volume-root DIR)".to_string(),
        _ => format!(
            "this agent allows host paths under {} only (--volume-root)",
            roots.join(", ")
        ),
    };
    format!("volume {volume:?}: host path {path} is refused: {allowed}")
}

impl Membership {
    /// Live nodes counting `node` itself.
    pub fn live_count(&self, node: &str) -> usize {
        self.live.len() + usize::from(!self.live.contains(node))
    }

    /// Whether `node` sees a strict majority of the last known membership.
    pub fn has_majority(&self, node: &str) -> bool {
        let live = self.live_count(node);
        2 * live > self.members_known.max(live)
    }

    /// Whether a strict majority of the last known membership (`node` counts itself) confirmed
    /// they hold `node` live in a round trip that began at most `window_ms` before `now_ms`.
    pub fn heard_by_majority(&self, node: &str, now_ms: u64, window_ms: u64) -> bool {
        let since = now_ms.saturating_sub(window_ms);
        let heard = self
            .heard_at
            .iter()
            .filter(|(peer, at)| peer.as_str() != node && **at >= since)
            .count();
        let known = self.members_known.max(self.live_count(node));
        2 * (heard + 1) > known
    }

    /// Both directions: `node` sees a strict majority and a strict majority hears it (and, in a
    /// mesh of cells, its cell's quorum holds). What an exclusive replica needs to start or keep
    /// running.
    pub fn has_two_way_majority(&self, node: &str, now_ms: u64, window_ms: u64) -> bool {
        self.has_majority(node)
            && self.heard_by_majority(node, now_ms, window_ms)
            && self.cells.as_ref().is_none_or(CellQuorum::holds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn membership(live: &[&str], known: usize) -> Membership {
        Membership {
            live: live.iter().map(|s| s.to_string()).collect(),
            dead: BTreeSet::new(),
            unreachable: BTreeSet::new(),
            members_known: known,
            heard_at: BTreeMap::new(),
            leased_at: BTreeMap::new(),
            cells: None,
        }
    }

    #[test]
    fn heard_by_majority_counts_recent_confirmations_only() {
        let mut m = membership(&["a", "b", "c", "d", "e"], 5);
        assert!(m.has_majority("a"));
        assert!(!m.heard_by_majority("a", 10_000, 3_000), "no evidence yet");
        m.heard_at.insert("b".into(), 9_000);
        assert!(!m.heard_by_majority("a", 10_000, 3_000), "2 of 5");
        m.heard_at.insert("c".into(), 7_000);
        assert!(m.heard_by_majority("a", 10_000, 3_000), "3 of 5 within 3 s");
        assert!(
            !m.heard_by_majority("a", 10_001, 3_000),
            "c's confirmation aged out"
        );
        m.heard_at.insert("a".into(), 10_000);
        assert!(
            !m.heard_by_majority("a", 10_001, 3_000),
            "itself does not count twice"
        );
        assert!(
            membership(&["a"], 1).heard_by_majority("a", 5, 1),
            "alone: heard by itself"
        );
    }

    #[test]
    fn majority_is_strict() {
        assert!(membership(&["a", "b"], 3).has_majority("a"));
        assert!(!membership(&["a", "b"], 4).has_majority("a"));
        assert!(membership(&[], 1).has_majority("a"));
        assert!(membership(&["b"], 0).has_majority("a"));
        assert!(!membership(&[], 2).has_majority("a"));
    }
}
