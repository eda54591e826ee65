//! The placement engine's inputs (nodes, workloads) and outputs (a placement with the reason for
//! every replica that could not be placed, and the inputs that were rejected).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::constraint::Constraint;
use crate::resources::{format_cpu_millis, format_memory_bytes, human_memory_bytes, Resources};

/// Largest CPU capacity a node may declare: one million cores. Anything above is a typo or a lie.
pub const NODE_CPU_MILLIS_MAX: u64 = 1_000_000 * 1000;
/// Largest memory capacity a node may declare: 1 PiB.
pub const NODE_MEMORY_BYTES_MAX: u64 = 1 << 50;
/// Longest node or workload id accepted (a DNS name's length).
pub const ID_LEN_MAX: usize = 253;
/// Most replicas one workload may ask for.
pub const WORKLOAD_REPLICAS_MAX: u32 = 10_000;

/// A member of the mesh as placement sees it: live nodes, and nodes recently down (failed or
/// left) with `down` set, which keep their place in every ranking but take no replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Unique, stable id (ties in the ranking break on it).
    pub id: String,
    /// Declared capacity, never live load (live load differs between agents).
    pub capacity: Resources,
    /// Labels that constraints match.
    pub labels: BTreeMap<String, String>,
    /// Failure domain; the empty string is a zone of its own like any other name.
    pub zone: String,
    /// A draining node keeps its place in the rankings but is never chosen.
    pub draining: bool,
    /// A node that is down (failed or left, not yet forgotten) keeps its place in the rankings
    /// but is never chosen: its replicas wait in the room others leave, and nobody else moves
    /// for them beyond what higher priorities take; when it comes back, the placement is the one
    /// it had before.
    #[serde(default)]
    pub down: bool,
    /// What the node can run (placement algorithm 7). `None`: it said nothing, as every node of
    /// a mesh before version 9, and it can run anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<Capabilities>,
}

impl Node {
    /// Up and not draining: the node may be given replicas.
    pub fn available(&self) -> bool {
        !self.draining && !self.down
    }
}

/// A kind of runtime: what a replica needs and a node may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// Processes started by the agent.
    Process,
    /// Containers run by a container engine (Docker).
    Container,
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Runtime::Process => "process",
            Runtime::Container => "container",
        })
    }
}

/// A host port with its protocol (`8080/tcp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostPort {
    /// The port number.
    pub port: u16,
    /// TCP or UDP.
    pub protocol: crate::spec::Protocol,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.port, self.protocol.as_str())
    }
}

/// Most volume roots, or taken ports, a node's capabilities may list.
pub const CAPABILITY_ITEMS_MAX: usize = 1024;

/// What a node can run, as it gossips it (placement algorithm 7): a replica is only eligible on a
/// node whose capabilities meet its [`Needs`].
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Capabilities {
    /// The runtimes present and usable.
    pub runtimes: Vec<Runtime>,
    /// The directories host-path volumes may be under (`--volume-root`).
    pub volume_roots: Vec<String>,
    /// Fixed host ports held by something other than this mesh's replicas.
    pub ports_taken: Vec<HostPort>,
    /// The agent runs workloads as root when their spec asks (`--allow-root-workloads`;
    /// placement algorithm 8). Absent in what older builds gossip: not allowed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub root_allowed: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What a replica needs of a node beyond room (placement algorithm 7). Empty for a workload of a
/// mesh before version 9, which is placed as algorithm 6 placed it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Needs {
    /// The runtime its spec runs in.
    pub runtime: Option<Runtime>,
    /// Host paths of its volumes: each must be under one of the node's volume roots. Sorted.
    pub host_paths: Vec<String>,
    /// Host ports it fixes: none may be taken on the node by something else. Sorted.
    pub fixed_ports: Vec<HostPort>,
    /// Its spec's `user` is root: only a node allowing root workloads takes it (placement
    /// algorithm 8; cleared for older algorithms by `for_algorithm`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub root: bool,
}

/// The first need a node does not meet.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Unmet {
    /// The node lacks the runtime.
    Runtime(Runtime),
    /// The path is under none of the node's volume roots.
    HostPath(String),
    /// Something else holds the port there.
    PortTaken(HostPort),
    /// The workload runs as root and the node does not allow it.
    Root,
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmet::Runtime(r) => write!(f, "runtime {r}"),
            Unmet::HostPath(p) => write!(f, "host path {p} (--volume-root)"),
            Unmet::PortTaken(p) => write!(f, "host port {p} free"),
            Unmet::Root => f.write_str("root workloads allowed (--allow-root-workloads)"),
        }
    }
}

impl Needs {
    /// What a replica of `spec` needs: its runtime, its volumes' host paths, its fixed host ports.
    pub fn of_spec(spec: &crate::spec::WorkloadSpec) -> Needs {
        Needs {
            runtime: Some(match spec.run {
                crate::spec::Run::Process(_) => Runtime::Process,
                crate::spec::Run::Container(_) => Runtime::Container,
            }),
            host_paths: spec
                .volumes
                .iter()
                .filter_map(|v| v.host_path.clone())
                .collect(),
            fixed_ports: spec
                .fixed_host_ports()
                .into_iter()
                .map(|(port, protocol)| HostPort { port, protocol })
                .collect(),
            root: spec.asks_root(),
        }
        .canonical()
    }

    /// Nothing needed: every node meets it.
    pub fn is_empty(&self) -> bool {
        self.runtime.is_none()
            && self.host_paths.is_empty()
            && self.fixed_ports.is_empty()
            && !self.root
    }

    /// The first need a node with these capabilities does not meet (a node that said nothing
    /// meets every need).
    pub fn unmet(&self, caps: Option<&Capabilities>) -> Option<Unmet> {
        let caps = caps?;
        if let Some(r) = self.runtime {
            if !caps.runtimes.contains(&r) {
                return Some(Unmet::Runtime(r));
            }
        }
        if let Some(p) = self
            .host_paths
            .iter()
            .find(|p| !crate::spec::host_path_allowed(p, &caps.volume_roots))
        {
            return Some(Unmet::HostPath(p.clone()));
        }
        if self.root && !caps.root_allowed {
            return Some(Unmet::Root);
        }
        self.fixed_ports
            .iter()
            .find(|p| caps.ports_taken.contains(p))
            .map(|p| Unmet::PortTaken(*p))
    }

    /// Sorted and deduplicated, as the engine keys classes by it.
    pub fn canonical(mut self) -> Needs {
        self.host_paths.sort();
        self.host_paths.dedup();
        self.fixed_ports.sort();
        self.fixed_ports.dedup();
        self
    }
}

/// How far apart a workload's replicas must be.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Spread {
    /// Replicas on distinct nodes (always required).
    #[default]
    Node,
    /// Distinct nodes, and no two replicas in one zone while a zone the workload does not use yet
    /// has a node that can take the replica.
    Zone,
}

/// What placement needs of a workload spec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// Unique id (the spec's name).
    pub id: String,
    /// How many replicas to place, numbered 0..replicas.
    pub replicas: u32,
    /// Declared request of one replica.
    pub request: Resources,
    /// Node or zone spread.
    pub spread: Spread,
    /// Every constraint must match a node for it to be eligible.
    pub constraints: Vec<Constraint>,
    /// At most one copy of each replica may run (stateful services). Placement gives every replica
    /// exactly one node, so this holds by construction; the engine asserts it.
    pub exclusive: bool,
    /// Higher goes first in the capacity pass; a lower priority never displaces a higher one.
    pub priority: i32,
    /// The node that holds each replica's data (replica index to node id), for replicas with data
    /// volumes: in the actual pass such a replica's home is that node instead of its ideal one,
    /// while the node is known and eligible for the workload (so data stays where it is when nodes
    /// join or leave the rankings). Empty for most workloads.
    ///
    /// Never an input error: an index at or above `replicas` (or not in the share placed) and a
    /// node id no known node has are ignored, as is a node the constraints rule out; a node id
    /// that later joins takes effect then.
    #[serde(default)]
    pub sticky: BTreeMap<u32, String>,
    /// What each replica needs of a node beyond room (placement algorithm 7; empty before).
    #[serde(default, skip_serializing_if = "Needs::is_empty")]
    pub needs: Needs,
    /// When some of its replicas fit nowhere, it takes only the room the workloads of its
    /// priority that fit entirely leave (placement algorithm 7; false before): a workload too big
    /// for the mesh never pushes out the replicas of one that fits.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub yields_when_short: bool,
    /// With `yields_when_short`: it also goes after the others when none of its replicas fits
    /// (placement algorithm 9; false before, when a short workload with nothing placed stayed
    /// first, and its replicas' proposals could still push a replica of a workload that fits
    /// onto another node before they were turned away themselves).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub yields_unplaced: bool,
    /// The cell level gives its replicas only to cells whose summaries say their members offer
    /// its runtime, and root workloads if it runs as root (placement algorithm 9; false before,
    /// when the cell level ignored `needs` and a replica could go to a cell unable to run it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cell_level_needs: bool,
    /// Its fixed host ports (`Needs::fixed_ports`) are held exclusively (placement algorithm 8;
    /// false before): no node holds a replica of it beside another workload's replica fixing one
    /// of the same ports. Between two such workloads the stronger keeps the node: the higher
    /// priority, then, in the actual pass, a replica at its home, then the canonical order.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ports_exclusive: bool,
}

/// Some replicas of a workload, to be placed on these nodes: a cell's share of it (see
/// `cells`), or a stacking layer. [`place`](super::place) places the whole workload, the share of
/// indices `0..replicas`. A replica's ranking depends on its index (`indices`), never on which
/// siblings are placed with it, so shares of one workload placed apart rank each replica alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    /// The workload; its `replicas` is the whole count, `indices` what is placed here.
    pub workload: Workload,
    /// The indices of the replicas placed here, strictly ascending, each below
    /// `workload.replicas`.
    pub indices: Vec<u32>,
    /// For a zone-spread workload: the zones its replicas make their homes in, in order (replica
    /// `i`'s home is `home_zones[i % len]`; a home with no eligible node here leaves the replica
    /// to find a node as a guest). Empty: the eligible zones of these nodes, ranked by the
    /// workload's hash of each zone name, which is what [`place`](super::place) uses. At most
    /// [`HOME_ZONES_MAX`], distinct.
    pub home_zones: Vec<String>,
}

/// Most zones a share may name as homes.
pub const HOME_ZONES_MAX: usize = 256;

impl Share {
    /// Every replica of the workload, with the zones of the nodes as homes.
    pub fn whole(workload: Workload) -> Share {
        Share {
            indices: (0..workload.replicas).collect(),
            workload,
            home_zones: Vec::new(),
        }
    }
}

/// One replica of one workload.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaId {
    /// The workload's id.
    pub workload: String,
    /// Index in 0..replicas.
    pub replica: u32,
}

impl ReplicaId {
    /// A replica id from its parts.
    pub fn new(workload: &str, replica: u32) -> Self {
        ReplicaId {
            workload: workload.to_string(),
            replica,
        }
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.workload, self.replica)
    }
}

/// A resource placement accounts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Resource {
    /// CPU, in millicores.
    Cpu,
    /// Memory, in bytes.
    Memory,
    /// Host ports the agent allocates (named ports without a number).
    Ports,
}

/// Why a replica has no node. Every variant names what to change to make it schedulable.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Unschedulable {
    /// No live, non-draining, valid node at all.
    NoNodes,
    /// This constraint alone matches no live, non-draining node.
    ConstraintUnsatisfiable {
        /// The constraint, in its text form.
        constraint: String,
    },
    /// Each constraint matches some node, but no node matches all of them.
    ConstraintsConflict {
        /// The constraints, in their text form.
        constraints: Vec<String>,
    },
    /// No node that matches the constraints has this much of one resource in total.
    RequestTooLarge {
        /// The resource that is short everywhere (CPU is named first when both are).
        resource: Resource,
        /// What one replica asks for.
        requested: u64,
        /// The largest capacity among the nodes that match the constraints.
        largest: u64,
    },
    /// No live node meets this need of the replica (its runtime, a host path, a free fixed
    /// port).
    Incapable {
        /// The need, in its text form (`runtime container`, ...).
        need: String,
        /// How many live nodes lack it (every live node that matches the constraints).
        nodes: u32,
    },
    /// Some nodes have enough CPU and some enough memory, but none has both.
    RequestFitsNoSingleNode {
        /// What one replica asks for.
        requested: Resources,
    },
    /// Every eligible node already holds a replica of this workload (replicas need distinct nodes).
    NotEnoughNodes {
        /// How many nodes are eligible (constraints match, request fits capacity).
        eligible: u32,
    },
    /// Eligible nodes without a replica of this workload exist, but none has room left after
    /// higher-ordered replicas took theirs. Counts are as seen by the workload's first replica that
    /// failed in the pass.
    NoRoom {
        /// Eligible nodes not holding a replica of this workload.
        candidates: u32,
        /// How many of them lack CPU room.
        cpu_short: u32,
        /// How many of them lack memory room.
        memory_short: u32,
        /// How many of them have no free port left in their range.
        #[serde(default)]
        ports_short: u32,
        /// What one replica asks for, and the most room a candidate has left in each resource
        /// with the node that has it (the first by rank among equals).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        room: Option<Box<RoomLeft>>,
    },
}

/// The request and the most room left among a replica's candidates, per resource.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RoomLeft {
    /// What one replica asks for.
    pub requested: Resources,
    /// The most CPU left on a candidate, and where.
    pub cpu: (u64, String),
    /// The most memory left on a candidate, and where.
    pub memory: (u64, String),
    /// The most free ports left on a candidate, and where.
    pub ports: (u64, String),
}

impl RoomLeft {
    /// `CPU (needs 1, most free 900m on n2)` for each resource some candidate lacks.
    fn short_parts(&self, shorts: [u32; 3]) -> Vec<String> {
        let r = &self.requested;
        let mut parts = Vec::new();
        if shorts[0] > 0 {
            parts.push(format!(
                "{} lack CPU (needs {}, most free {} on {})",
                shorts[0],
                format_cpu_millis(r.cpu_millis),
                format_cpu_millis(self.cpu.0),
                self.cpu.1
            ));
        }
        if shorts[1] > 0 {
            parts.push(format!(
                "{} lack memory (needs {}, most free {} on {})",
                shorts[1],
                format_memory_bytes(r.memory_bytes),
                // What is free is whatever the node's capacity left: an amount, not a spec's.
                human_memory_bytes(self.memory.0),
                self.memory.1
            ));
        }
        if shorts[2] > 0 {
            parts.push(format!(
                "{} have no free port in their range (needs {}, most free {} on {})",
                shorts[2], r.ports, self.ports.0, self.ports.1
            ));
        }
        parts
    }
}

impl fmt::Display for Unschedulable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unschedulable::NoNodes => f.write_str("no live, non-draining node"),
            Unschedulable::ConstraintUnsatisfiable { constraint } => {
                write!(f, "constraint `{constraint}` matches no live node")
            }
            Unschedulable::ConstraintsConflict { constraints } => write!(
                f,
                "no live node matches all of the constraints {}",
                constraints.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
            ),
            Unschedulable::Incapable { need, nodes } => write!(
                f,
                "needs {need}, which none of the {nodes} live nodes the constraints allow has"
            ),
            Unschedulable::RequestTooLarge { resource: Resource::Cpu, requested, largest } => write!(
                f,
                "requests {} CPU but the largest eligible node has {}",
                format_cpu_millis(*requested),
                format_cpu_millis(*largest)
            ),
            Unschedulable::RequestTooLarge { resource: Resource::Memory, requested, largest } => {
                write!(
                    f,
                    "requests {} memory but the largest eligible node has {}",
                    format_memory_bytes(*requested),
                    human_memory_bytes(*largest)
                )
            }
            Unschedulable::RequestTooLarge { resource: Resource::Ports, requested, largest } => {
                write!(
                    f,
                    "needs {requested} allocated ports but the largest eligible node's port range \
                     holds {largest}"
                )
            }
            Unschedulable::RequestFitsNoSingleNode { requested } if requested.ports > 0 => write!(
                f,
                "no eligible node has {} CPU, {} memory and {} free ports at once",
                format_cpu_millis(requested.cpu_millis),
                format_memory_bytes(requested.memory_bytes),
                requested.ports
            ),
            Unschedulable::RequestFitsNoSingleNode { requested } => write!(
                f,
                "no eligible node has both {} CPU and {} memory",
                format_cpu_millis(requested.cpu_millis),
                format_memory_bytes(requested.memory_bytes)
            ),
            Unschedulable::NotEnoughNodes { eligible } => write!(
                f,
                "all {eligible} eligible nodes already hold a replica (replicas need distinct nodes)"
            ),
            Unschedulable::NoRoom { candidates, cpu_short, memory_short, ports_short, room: Some(room) } => write!(
                f,
                "no room: of {candidates} candidate nodes, {}",
                room.short_parts([*cpu_short, *memory_short, *ports_short]).join(", ")
            ),
            Unschedulable::NoRoom { candidates, cpu_short, memory_short, ports_short: 0, room: None } => write!(
                f,
                "no room: of {candidates} candidate nodes, {cpu_short} lack CPU and {memory_short} lack memory"
            ),
            Unschedulable::NoRoom { candidates, cpu_short, memory_short, ports_short, room: None } => write!(
                f,
                "no room: of {candidates} candidate nodes, {cpu_short} lack CPU, {memory_short} lack \
                 memory and {ports_short} have no free port in their range"
            ),
        }
    }
}

/// An input placement refused. The placement is computed without it; nothing panics.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum InputError {
    /// Two or more nodes share this id; all of them are left out (which one is right is unknown).
    DuplicateNode {
        /// The shared id.
        id: String,
    },
    /// A node or workload id is empty or longer than [`ID_LEN_MAX`].
    InvalidId {
        /// The id (truncated to 64 bytes for display).
        id: String,
    },
    /// A node declares no CPU or no memory; it is never chosen.
    NodeCapacityZero {
        /// The node.
        id: String,
    },
    /// A node declares more than [`NODE_CPU_MILLIS_MAX`] or [`NODE_MEMORY_BYTES_MAX`].
    NodeCapacityAbsurd {
        /// The node.
        id: String,
        /// What it declared.
        capacity: Resources,
    },
    /// Two or more workloads share this id; all of them are left out.
    DuplicateWorkload {
        /// The shared id.
        id: String,
    },
    /// A workload asks for more than [`WORKLOAD_REPLICAS_MAX`] replicas.
    TooManyReplicas {
        /// The workload.
        id: String,
        /// What it asked for.
        replicas: u32,
    },
    /// An incremental change named a node the engine does not have (state unchanged).
    UnknownNode {
        /// The id.
        id: String,
    },
    /// An incremental change added a node the engine already has (state unchanged).
    NodeExists {
        /// The id.
        id: String,
    },
    /// An incremental change removed a workload the engine does not have (state unchanged).
    UnknownWorkload {
        /// The id.
        id: String,
    },
    /// A share's indices are not strictly ascending below the workload's replica count, or its
    /// home zones repeat or are too many.
    InvalidShare {
        /// The workload.
        id: String,
    },
    /// A node's capabilities or a workload's needs list more than [`CAPABILITY_ITEMS_MAX`]
    /// volume roots, host paths or ports.
    TooManyCapabilities {
        /// The node or workload.
        id: String,
    },
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::DuplicateNode { id } => {
                write!(f, "node id {id:?} appears more than once; all copies are ignored")
            }
            InputError::InvalidId { id } => {
                write!(f, "id {id:?} is empty or longer than {ID_LEN_MAX} bytes")
            }
            InputError::NodeCapacityZero { id } => {
                write!(f, "node {id:?} declares zero CPU or memory; it is never chosen")
            }
            InputError::NodeCapacityAbsurd { id, capacity } => write!(
                f,
                "node {id:?} declares {} CPU and {} memory, above the limits of 1000000 cores and 1Pi",
                format_cpu_millis(capacity.cpu_millis),
                format_memory_bytes(capacity.memory_bytes)
            ),
            InputError::DuplicateWorkload { id } => {
                write!(f, "workload id {id:?} appears more than once; all copies are ignored")
            }
            InputError::TooManyReplicas { id, replicas } => write!(
                f,
                "workload {id:?} asks for {replicas} replicas, more than {WORKLOAD_REPLICAS_MAX}"
            ),
            InputError::UnknownNode { id } => write!(f, "no node {id:?}"),
            InputError::NodeExists { id } => write!(f, "node {id:?} already exists"),
            InputError::UnknownWorkload { id } => write!(f, "no workload {id:?}"),
            InputError::InvalidShare { id } => write!(
                f,
                "the share of workload {id:?} has indices that are not strictly ascending below \
                 its replica count, or repeated or too many home zones"
            ),
            InputError::TooManyCapabilities { id } => write!(
                f,
                "{id:?} lists more than {CAPABILITY_ITEMS_MAX} volume roots, host paths or ports"
            ),
        }
    }
}

impl std::error::Error for InputError {}

fn check_id(id: &str) -> Result<(), InputError> {
    if id.is_empty() || id.len() > ID_LEN_MAX {
        let shown: String = id.chars().take(64).collect();
        return Err(InputError::InvalidId { id: shown });
    }
    Ok(())
}

/// Checks one node on its own (duplicates are found by the caller).
pub fn check_node(node: &Node) -> Result<(), InputError> {
    check_id(&node.id)?;
    let c = node.capacity;
    if c.cpu_millis == 0 || c.memory_bytes == 0 {
        return Err(InputError::NodeCapacityZero {
            id: node.id.clone(),
        });
    }
    if c.cpu_millis > NODE_CPU_MILLIS_MAX || c.memory_bytes > NODE_MEMORY_BYTES_MAX {
        return Err(InputError::NodeCapacityAbsurd {
            id: node.id.clone(),
            capacity: c,
        });
    }
    if node.caps.as_ref().is_some_and(|c| {
        c.volume_roots.len() > CAPABILITY_ITEMS_MAX || c.ports_taken.len() > CAPABILITY_ITEMS_MAX
    }) {
        return Err(InputError::TooManyCapabilities {
            id: node.id.clone(),
        });
    }
    Ok(())
}

/// Checks one workload on its own (duplicates are found by the caller). A request larger than
/// every node is not an input error: its replicas are reported unschedulable with the reason.
pub fn check_workload(workload: &Workload) -> Result<(), InputError> {
    check_id(&workload.id)?;
    if workload.replicas > WORKLOAD_REPLICAS_MAX {
        return Err(InputError::TooManyReplicas {
            id: workload.id.clone(),
            replicas: workload.replicas,
        });
    }
    let needs = &workload.needs;
    if needs.host_paths.len() > CAPABILITY_ITEMS_MAX
        || needs.fixed_ports.len() > CAPABILITY_ITEMS_MAX
    {
        return Err(InputError::TooManyCapabilities {
            id: workload.id.clone(),
        });
    }
    Ok(())
}

/// Checks one share on its own: the workload, then its indices and home zones.
pub fn check_share(share: &Share) -> Result<(), InputError> {
    check_workload(&share.workload)?;
    let ascending = share.indices.windows(2).all(|p| p[0] < p[1]);
    let below = share
        .indices
        .last()
        .is_none_or(|&i| i < share.workload.replicas);
    let mut zones: Vec<&String> = share.home_zones.iter().collect();
    zones.sort();
    zones.dedup();
    if !ascending || !below || zones.len() != share.home_zones.len() || zones.len() > HOME_ZONES_MAX
    {
        return Err(InputError::InvalidShare {
            id: share.workload.id.clone(),
        });
    }
    Ok(())
}

/// The result of placement: every replica of every accepted workload is either assigned to
/// exactly one node or unschedulable with a reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Replica to node id.
    pub assigned: BTreeMap<ReplicaId, String>,
    /// Replicas with no node, and why.
    pub unschedulable: BTreeMap<ReplicaId, Unschedulable>,
    /// Inputs that were left out, sorted.
    pub rejected: Vec<InputError>,
}
