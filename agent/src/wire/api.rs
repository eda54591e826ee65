//! The API spoken over QUIC between the CLI and agents, and between agents for store sync.
//!
//! Frames are the versioned bincode envelope of [`crate::wire`]; these enums are its payload.
//! Every list answer is a page (see [`super::page`]), so that no store or mesh makes an answer
//! larger than a frame.
//! Output types double as the stable `-o json` shapes documented in docs/cli.md.

use serde::{Deserialize, Serialize};
use shoal_core::spec::WorkloadSpec;
use shoal_core::store::Entry;
use shoal_core::version::Since;

pub use super::page::PAGE_ITEMS_MAX;

/// Most specs in one `apply`.
pub const APPLY_SPECS_MAX: usize = 256;
/// Most entries in one replicate or sync answer page.
pub const ENTRIES_PER_MESSAGE_MAX: usize = 4096;

/// A call to an agent.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    /// Store these specs; answered once each is durable on at least two agents (while two live).
    Apply {
        /// The specs, validated again on arrival.
        specs: Vec<WorkloadSpec>,
    },
    /// One workload with its whole spec (`List` pages the summaries of all).
    Get {
        /// The workload.
        name: String,
    },
    /// Delete a workload (a tombstone, replicated like an apply).
    Delete {
        /// The workload.
        name: String,
        /// Also purge its data volumes on every node (`--purge-data`): carried by the tombstone.
        purge_data: bool,
    },
    /// A page of the membership as this agent sees it, by node name.
    Nodes {
        /// Resume after this node (the previous page's `next_after`).
        after: Option<String>,
        /// At most this many (clamped to 1..=[`PAGE_ITEMS_MAX`]).
        limit: u32,
    },
    /// Where a workload's replicas are: a page of them, by replica index.
    Status {
        /// The workload.
        name: String,
        /// Resume after this replica (the previous page's `next_after`).
        after: Option<u32>,
        /// At most this many replicas (clamped to 1..=[`PAGE_ITEMS_MAX`]).
        limit: u32,
    },
    /// A page of the issues raised by every node's reconciler (as gossiped), by node then id.
    Issues {
        /// Resume after this issue (the previous page's `next_after`).
        after: Option<IssueKey>,
        /// At most this many (clamped to 1..=[`PAGE_ITEMS_MAX`]).
        limit: u32,
    },
    /// Approve a held issue; forwarded to the node that raised it.
    Approve {
        /// The issue id.
        id: String,
        /// The node that holds it (set when forwarding).
        node: Option<String>,
        /// Who asked, when an agent forwards a client's request (ignored from clients: their
        /// certificate says who they are).
        by: Option<String>,
    },
    /// This agent's recent reconcile events after a sequence number.
    Events {
        /// Only events with a higher sequence number.
        after: u64,
        /// At most this many.
        limit: u32,
    },
    /// Drain (or undrain) a node; forwarded to that node.
    Drain {
        /// The node.
        node: String,
        /// Drain (true) or undrain (false).
        draining: bool,
        /// Who asked, when an agent forwards a client's request (ignored from clients).
        by: Option<String>,
    },
    /// A workload's current version and the ones before it, newest first.
    History {
        /// The workload.
        name: String,
    },
    /// Apply a past version's content again, as a new version (by default the one before the
    /// current).
    Undo {
        /// The workload.
        name: String,
        /// The past version (raw, as `History` lists it); `None`: the previous one.
        to: Option<String>,
    },
    /// Pause (or resume) a workload's rollout: instances of an older version are kept as they
    /// are until it resumes.
    Pause {
        /// The workload.
        name: String,
        /// Pause (true) or resume (false).
        paused: bool,
    },
    /// Set the mesh's capacity caps (the most one node may declare); all `None` clears them.
    SetCaps {
        /// The caps.
        caps: crate::identity::authority::caps::NodeCaps,
    },
    /// The mesh's capacity caps as the callee's store holds them.
    Caps,
    /// Adopt this revocation list (DER, signed by the cluster CA) and spread it to the mesh.
    PublishCrl {
        /// The CRL, at most [`crate::identity::crl::CRL_BYTES_MAX`] bytes.
        der: Vec<u8>,
    },
    /// Agent to agent: persist these entries, answer when durable.
    Replicate {
        /// Entries to merge.
        entries: Vec<Entry>,
    },
    /// Agent to agent: send me the full store digest.
    Digest,
    /// Agent to agent: send me your entries in these buckets, after this name (paging).
    Pull {
        /// Digest buckets that differ.
        buckets: Vec<u16>,
        /// Resume after this name.
        after: Option<String>,
    },
    /// Agent to agent: what does your wall clock read? (The caller's clock-skew monitor.)
    Clock,
    /// Agent to agent: does your failure detector hold me (the caller, by its certificate) live?
    /// An owner of exclusive replicas keeps them only while a majority says yes.
    Hears,
    /// Agent to agent: the cells table entries newer than what the caller holds.
    Cells {
        /// The caller's cell.
        cell: String,
        /// What the caller holds (at most [`shoal_core::cells::CELLS_MAX`]).
        known: Vec<shoal_core::cells::Known>,
    },
    /// Agent to agent (an envoy): take these entries, newer than what the callee said it holds.
    CellsPush {
        /// At most [`shoal_core::cells::CELLS_MAX`].
        entries: Vec<shoal_core::cells::CellEntry>,
    },
    /// A page of the cells this agent knows, by name, for `shoal nodes`.
    CellList {
        /// Resume after this cell (the previous page's `next_after`).
        after: Option<String>,
        /// At most this many (clamped to 1..=[`PAGE_ITEMS_MAX`]).
        limit: u32,
    },
    /// A page of a workload's replicas placed in the callee's cell only (what `Status` asks
    /// each other cell's envoy, for the same replicas).
    CellStatus {
        /// The workload.
        name: String,
        /// Resume after this replica.
        after: Option<u32>,
        /// At most this many replicas (clamped to 1..=[`PAGE_ITEMS_MAX`]).
        limit: u32,
    },
    /// Agent to agent (across cells): what of these replicas does your cell serve, run or claim?
    /// (A handoff to the callee's cell; an exclusive replica the caller's cell would start.)
    CellCopies {
        /// At most [`crate::state::cells::handoff::SERVING_ASK_MAX`].
        replicas: Vec<shoal_core::instance::ReplicaId>,
    },
    /// Agent to agent (across cells): is a live member of your cell named so? (One name per
    /// host across the mesh.)
    NameUsed {
        /// The name.
        name: String,
    },
    /// A page of the workloads, by name: summaries (`Get` has a whole spec).
    List {
        /// Resume after this workload (the previous page's `next_after`).
        after: Option<String>,
        /// At most this many (clamped to 1..=[`PAGE_ITEMS_MAX`]).
        limit: u32,
    },
    /// Every replica's instances of one workload, with node, address and health, as the
    /// callee's endpoint table holds them (what its DNS answers from).
    Endpoints {
        /// The workload.
        name: String,
    },
    /// Output of one replica's instance, read on the node that runs it (the callee forwards to
    /// it as [`Request::LogsHere`]).
    Logs {
        /// The workload.
        workload: String,
        /// The replica; `None`: the lowest-numbered replica that has an instance.
        replica: Option<u32>,
        /// The instance before the newest one on that node (after a crash or restart).
        previous: bool,
        /// What to read (a page of at most [`super::logs::PAGE_BYTES_MAX`] bytes).
        query: super::logs::LogQuery,
    },
    /// Restart a workload: every replica replaced at the pace of its `[update]` (a new version
    /// with a new `restarted_at` stamp); or, with `replica`, that replica's running instance
    /// stopped and started again at once on its node (forwarded as [`Request::RestartHere`]).
    Restart {
        /// The workload.
        workload: String,
        /// One replica only.
        replica: Option<u32>,
    },
    /// Agent to agent: restart the running instance of a replica on the callee (a `Restart` of
    /// one replica forwarded to the node running it).
    RestartHere {
        /// The replica.
        replica: shoal_core::instance::ReplicaId,
        /// Who asked.
        by: String,
    },
    /// Agent to agent: the output of a replica's instance on the callee's own runtime (a
    /// `Logs` forwarded to the node running it).
    LogsHere {
        /// The replica.
        replica: shoal_core::instance::ReplicaId,
        /// The instance before the newest one.
        previous: bool,
        /// What to read.
        query: super::logs::LogQuery,
    },
    /// Run a command in a running replica, on the node that runs it (the callee forwards to it
    /// as [`Request::ExecHere`]); answered with the session to poll with [`Request::ExecIo`].
    Exec {
        /// The workload.
        workload: String,
        /// The replica.
        replica: u32,
        /// The program and its arguments (see [`crate::node::exec`] for the bounds).
        command: Vec<String>,
        /// Give the command a stdin (else it reads `/dev/null`).
        stdin: bool,
        /// Run it on a terminal of this size (`shoal exec -t`).
        tty: Option<super::exec::TtySize>,
    },
    /// Stdin for an exec session and its output since an offset, on `node` (the callee
    /// forwards to it as [`Request::ExecIoHere`]).
    ExecIo {
        /// The node running the session (from [`Response::ExecStarted`]).
        node: String,
        /// The session.
        session: u64,
        /// What the client sends and has received.
        io: ExecInput,
    },
    /// Agent to agent: an [`Request::Exec`] forwarded to the node running the replica.
    ExecHere {
        /// The replica.
        replica: shoal_core::instance::ReplicaId,
        /// The program and its arguments.
        command: Vec<String>,
        /// Give the command a stdin.
        stdin: bool,
        /// Run it on a terminal of this size.
        tty: Option<super::exec::TtySize>,
        /// The client who asked (the session answers only its polls).
        by: String,
    },
    /// Agent to agent: an [`Request::ExecIo`] forwarded to the node running the session.
    ExecIoHere {
        /// The session.
        session: u64,
        /// What the client sends and has received.
        io: ExecInput,
        /// The client who asked.
        by: String,
    },
    /// `shoal upgrade status`: the mesh version, members per build, what waits and for whom.
    /// Since wire 8 (variants are only ever added at the end: a version's layout keeps its
    /// variants' indices).
    UpgradeStatus {
        /// Exists since wire 8.
        since: Since<8>,
    },
    /// `shoal upgrade hold` / `release`: keep the mesh version where it is, or let it move.
    UpgradeHold {
        /// Hold (true) or release (false).
        held: bool,
        /// Exists since wire 8.
        since: Since<8>,
    },
    /// `shoal plan`: where these specs' replicas would go if applied, what else would move,
    /// what would fit nowhere; nothing is written.
    Plan {
        /// The specs, validated again on arrival.
        specs: Vec<WorkloadSpec>,
        /// Exists since wire 9.
        since: Since<9>,
    },
    /// `shoal get NAME --spec --show-secrets`: the workload with its `secret_env` values, which
    /// [`Request::Get`] replaces by `<secret>`. A write; audited (an event naming the caller).
    GetSecrets {
        /// The workload.
        name: String,
        /// Exists since wire 10.
        since: Since<10>,
    },
}

/// One poll of an exec session: stdin from an offset, and how much output the client has.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecInput {
    /// The offset of `stdin`'s first byte in everything the client sent.
    pub stdin_offset: u64,
    /// Stdin bytes (at most [`crate::node::exec::STDIN_CHUNK_BYTES_MAX`]).
    pub stdin: Vec<u8>,
    /// Stdin ends after these bytes.
    pub stdin_eof: bool,
    /// The client received the output up to here: send what follows.
    pub output_offset: u64,
    /// End the session now (the command is killed).
    pub close: bool,
    /// The client's terminal has this size now (`exec -t`; ignored for pipes).
    pub resize: Option<super::exec::TtySize>,
}

/// What an exec session answers a poll.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutput {
    /// Output from the asked offset on, by stream, in the order read.
    pub chunks: Vec<(super::logs::Stream, Vec<u8>)>,
    /// The offset after these chunks (the next poll's `output_offset`).
    pub output_next: u64,
    /// Stdin bytes the session accepted since it started (send again from there).
    pub stdin_accepted: u64,
    /// Set once the command exited and all its output is in this answer: its exit code
    /// (128 + signal), `None` inside when the runtime could not learn it.
    pub exit: Option<Option<i32>>,
}

/// An agent's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Response {
    /// Specs stored.
    Applied(Vec<Applied>),
    /// A page of the workload list.
    Workloads {
        /// Summaries, by name.
        workloads: Vec<WorkloadSummary>,
        /// The last name of this page when more follow (ask again with it as `after`).
        next_after: Option<String>,
    },
    /// Deleted.
    Deleted(Applied),
    /// A page of the membership.
    Nodes {
        /// Members, by name.
        nodes: Vec<NodeView>,
        /// The last name of this page when more follow.
        next_after: Option<String>,
    },
    /// A page of one workload's replicas.
    Status {
        /// The workload and the instances of this page's replicas.
        view: Box<StatusView>,
        /// The last replica of this page when more follow.
        next_after: Option<u32>,
    },
    /// A workload's versions, newest (current) first.
    History {
        /// The workload.
        name: String,
        /// The current version, then the past ones, newest first.
        versions: Vec<VersionView>,
        /// Its rollout is paused (`Request::Pause`).
        paused: bool,
        /// What the store records of the current version's rollout (complete or failed), if
        /// anything.
        record: Option<Box<shoal_core::rollout::Record>>,
        /// The answering agent's last assessment of the rollout, when it is not settled (no
        /// record for the current version).
        assessment: Option<Box<shoal_core::rollout::Assessment>>,
    },
    /// The workload's rollout is paused, or resumed.
    Paused {
        /// The workload.
        name: String,
        /// Its rollout is paused now.
        paused: bool,
    },
    /// The mesh's capacity caps (set, or as held).
    Caps(crate::identity::authority::caps::NodeCaps),
    /// The revocation list is in force on the callee and spreading.
    CrlPublished {
        /// Its CRL number.
        number: u64,
        /// How many certificates it revokes.
        revoked: u32,
        /// The callee adopted it now (false: it held it already).
        adopted: bool,
    },
    /// Entries persisted by the callee.
    Replicated {
        /// How many entries changed the callee's store.
        changed: usize,
        /// Entries for which the callee holds a newer version than the one sent (name, version):
        /// the sent write lost last-writer-wins to a write the caller had not seen.
        newer: Vec<(String, String)>,
    },
    /// The callee's full digest, encoded by `shoal_core::store::Digest::encode`.
    Digest(Vec<u8>),
    /// A page of entries.
    Entries {
        /// Entries in the asked buckets.
        entries: Vec<Entry>,
        /// Where the next page starts, if any.
        next_after: Option<String>,
    },
    /// A page of the issues.
    Issues {
        /// Issues, by node then id. Encoded in a layout before 10, the kinds that layout lacks
        /// (`unplaceable`) are left out.
        #[serde(with = "issues_for_layout")]
        issues: Vec<shoal_core::reconcile::Issue>,
        /// The last issue of this page when more follow.
        next_after: Option<IssueKey>,
    },
    /// The issue was approved on `node`.
    Approved {
        /// The issue id.
        id: String,
        /// Where it was approved.
        node: String,
    },
    /// Recent events.
    Events(Vec<super::events::Event>),
    /// The node's draining flag is set.
    Drained {
        /// The node.
        node: String,
        /// Its new draining flag.
        draining: bool,
    },
    /// The request failed.
    Error(ApiError),
    /// The callee's wall clock when it answered, ms since the Unix epoch.
    Clock {
        /// Its reading.
        now_ms: u64,
    },
    /// Whether the callee's failure detector holds the caller live.
    Hears {
        /// It does.
        live: bool,
    },
    /// The callee's cells table entries newer than the caller's.
    Cells {
        /// The callee's cell.
        cell: String,
        /// Entries the caller lacks.
        entries: Vec<shoal_core::cells::CellEntry>,
        /// What the callee holds (so the caller can push what the callee lacks).
        known: Vec<shoal_core::cells::Known>,
        /// The callee's store digest summary (hex), to compare across cells.
        store: String,
    },
    /// Entries taken; how many were refused.
    CellsPushed {
        /// Entries refused (and counted).
        refused: u32,
    },
    /// A page of the cells this agent knows.
    CellList {
        /// Cells, by name.
        cells: Vec<super::cells::CellView>,
        /// The last name of this page when more follow.
        next_after: Option<String>,
    },
    /// Of the replicas asked, what the callee's cell serves, runs and claims.
    CellCopies(super::cells::CopiesAnswer),
    /// Whether a live member of the callee's cell has the name asked.
    NameUsed {
        /// It does.
        live: bool,
    },
    /// One workload with its whole spec (boxed: a spec is large beside the other answers).
    Workload(Box<WorkloadView>),
    /// One workload's endpoints.
    Endpoints(Box<super::endpoints::WorkloadEndpoints>),
    /// A page of one instance's output.
    Logs(Box<LogsAnswer>),
    /// One replica's instance is being restarted.
    Restarted {
        /// The replica, `NAME/INDEX`.
        replica: String,
        /// The node running it.
        node: String,
        /// The instance being stopped (its replacement starts once it is gone).
        instance: String,
    },
    /// An exec session started.
    ExecStarted {
        /// The node running it (poll there through any agent).
        node: String,
        /// The session.
        session: u64,
    },
    /// An exec session's output since the asked offset.
    ExecOutput(Box<ExecOutput>),
    /// The mesh version and the builds of its members (since wire 8).
    Upgrade(Box<super::build::UpgradeView>),
    /// What applying some specs would do (since wire 9).
    Plan(Box<super::plan::PlanView>),
}

/// A page of one replica's instance output, and where it was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogsAnswer {
    /// The node whose runtime answered.
    pub node: String,
    /// The replica.
    pub replica: u32,
    /// The lines and the cursor to continue with.
    pub page: super::logs::LogPage,
}

/// A failure, with a kind the CLI maps to a message and exit code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// For humans: what was wrong and what to do.
    pub message: String,
}

/// Kinds of API failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// The request itself was wrong (invalid spec, unknown name).
    Invalid,
    /// No such workload.
    NotFound,
    /// Stored here but not yet durable on a second agent.
    NotDurable,
    /// The local store failed (e.g. disk full); nothing was acknowledged.
    Storage,
    /// The write lost to a newer write of the same workload made elsewhere (clock skew or a
    /// concurrent apply); look at the current version and apply again if yours should win.
    Conflict,
    /// Anything else.
    Internal,
    /// Refused because of clock skew: this agent's clock disagrees with its peers', it refused a
    /// newer write of the workload as too far ahead of its clock, or the peers refused the write
    /// as too far ahead of theirs. Nothing was acknowledged; fix NTP or use another agent.
    ClockSkew,
    /// The caller's certificate role may not make this request (a read-only client writing, a
    /// client calling an agent-to-agent request).
    Unauthorized,
}

impl ApiError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One stored change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The workload.
    pub name: String,
    /// Its version (HLC `wall.logical@node`).
    pub version: String,
    /// Agents known to hold it durably, this one first.
    pub durable_on: Vec<String>,
    /// False when the spec equals the stored one (nothing written).
    pub changed: bool,
    /// Something the operator should know about this write (it stopped an automatic rollback).
    pub note: Option<String>,
}

/// A workload as `shoal get` lists it (the spec stays on the agent: a list of thousands of
/// specs of up to 256 KiB each would be gigabytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSummary {
    /// The workload.
    pub name: String,
    /// Desired replicas.
    pub replicas: u32,
    /// The spec version.
    pub version: String,
    /// CPU reserved per replica, in millicores.
    pub cpu_millis: u64,
    /// Memory reserved per replica, in bytes.
    pub memory_bytes: u64,
}

/// Where a page of issues ends: the last issue's node and id (issues sort by node, then id).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IssueKey {
    /// The node that raised it.
    pub node: String,
    /// Its id.
    pub id: String,
}

impl IssueKey {
    /// The key of `issue`.
    pub fn of(issue: &shoal_core::reconcile::Issue) -> Self {
        IssueKey {
            node: issue.node.clone(),
            id: issue.id.clone(),
        }
    }
}

/// A workload with its whole spec, as `Get` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadView {
    /// The workload.
    pub name: String,
    /// Desired replicas.
    pub replicas: u32,
    /// The spec version.
    pub version: String,
    /// The whole spec.
    pub spec: WorkloadSpec,
}

/// A node as `nodes` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    /// Node id.
    pub name: String,
    /// Whether the failure detector holds it live.
    pub alive: bool,
    /// Its zone.
    pub zone: String,
    /// Declared CPU.
    pub cpu_millis: u64,
    /// Declared memory.
    pub memory_bytes: u64,
    /// Draining.
    pub draining: bool,
    /// Gossip address.
    pub gossip_addr: String,
    /// API address, when its record is known.
    pub api_addr: Option<String>,
    /// Agent version, when known.
    pub agent_version: Option<String>,
    /// Its build facts (since wire 8; a build before 8 gossips none and gets its defaults).
    #[serde(default, with = "shoal_core::version::since_8_lossy")]
    pub build: Option<super::build::BuildRecord>,
    /// What it runs (`process`, `container (docker 27.5.1)`), when it gossips its capabilities
    /// (since wire 9).
    #[serde(default, with = "shoal_core::version::since_9_lossy")]
    pub runtimes: Option<String>,
    /// Suspected by the answering agent's member probes: silent and unanswering, not yet declared
    /// dead (since wire 11; `None` from an older agent).
    #[serde(default, with = "shoal_core::version::since_11_lossy")]
    pub suspect: Option<bool>,
}

/// Where a workload's replicas are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    /// The workload.
    pub name: String,
    /// Desired replicas.
    pub desired: u32,
    /// Spec version.
    pub version: String,
    /// One per instance, and one per replica without an instance.
    pub instances: Vec<InstanceView>,
    /// What the runtimes of the nodes concerned cannot enforce, as `node: note`.
    #[serde(default)]
    pub notes: Vec<String>,
    /// How much of the workload fits, when some replicas fit nowhere (`only 6 of 10000 replicas
    /// of big fit: ...`); on the first page (since wire 9).
    #[serde(default, with = "shoal_core::version::since_9_lossy")]
    pub fit: Option<String>,
}

/// One instance of a replica on one node, or a replica waiting for one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceView {
    /// Replica index.
    pub replica: u32,
    /// The node it runs on (or is placed on); `None` when unschedulable.
    pub node: Option<String>,
    /// pending, starting, running, stopping, exited, failed; `unschedulable` when no node fits;
    /// `assigned` when the node runs no host loop.
    pub phase: String,
    /// Running and passing its probe (or running without one); `None` when unknown.
    pub healthy: Option<bool>,
    /// Restarts of this replica on this node since its agent started.
    pub restarts: u32,
    /// The spec version it runs.
    pub spec_version: Option<String>,
    /// Since when it is in this phase, ms since the Unix epoch.
    pub since_ms: Option<u64>,
    /// The last thing that went wrong.
    pub last_error: Option<String>,
    /// Why it has no node, or why it is not where the placement puts it.
    pub reason: Option<String>,
    /// An exclusive replica's fencing token (`SHOAL_FENCE_TOKEN`); `None` otherwise.
    pub fence_token: Option<u64>,
    /// While `pulling`: the image and the bytes pulled so far.
    pub pull: Option<shoal_core::instance::PullProgress>,
    /// For a replica with data of its own: the node the store records holding its data
    /// (placement prefers it; `mesh/data.rs`). `None`: no data recorded anywhere yet.
    #[serde(default)]
    pub data_on: Option<String>,
}

/// One version of a workload, as `shoal history` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionView {
    /// Its version (raw `wall.logical@node`; `--to` takes it).
    pub version: String,
    /// When it was written, ms since the Unix epoch.
    pub at_ms: u64,
    /// Who asked for it (`name (role)`, from its proof of origin; `-` when unsigned).
    pub by: String,
    /// Its replica count.
    pub replicas: u32,
    /// What it runs: the image, or the command (cut to 120 characters).
    pub runs: String,
    /// Whether it is the current version.
    pub current: bool,
    /// What became of its rollout (`complete`, `failed`, `rolled back`, `superseded`); `None`
    /// for the current version.
    pub outcome: Option<String>,
    /// Why it failed or was rolled back (empty otherwise).
    pub reason: String,
}

/// The issues of an answer, without the kinds the layout it is encoded in lacks: an `unplaceable`
/// issue (wire 10) is computed by the answering agent, never stored, so an older reader loses
/// nothing it relied on.
mod issues_for_layout {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use shoal_core::reconcile::{Issue, IssueKind};

    pub fn serialize<S: Serializer>(issues: &[Issue], serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() || shoal_core::version::layout() >= 10 {
            return issues.serialize(serializer);
        }
        let older: Vec<&Issue> = issues
            .iter()
            .filter(|i| i.kind != IssueKind::Unplaceable)
            .collect();
        older.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Issue>, D::Error> {
        Vec::<Issue>::deserialize(deserializer)
    }
}

#[cfg(test)]
mod issue_layout_tests {
    use super::Response;
    use shoal_core::reconcile::{Issue, IssueKind};

    fn issue(kind: IssueKind) -> Issue {
        Issue {
            id: kind.as_str().into(),
            layer: kind.layer(),
            kind,
            replica: None,
            node: "n1".into(),
            message: "m".into(),
            held: None,
            approved: false,
            since_ms: 1,
        }
    }

    /// A wire-9 reader never sees an `unplaceable` issue (a kind it could not decode); a
    /// wire-10 reader does.
    #[test]
    fn an_answer_in_an_older_layout_leaves_out_the_newer_kinds() {
        let answer = Response::Issues {
            issues: vec![issue(IssueKind::Missing), issue(IssueKind::Unplaceable)],
            next_after: None,
        };
        let kinds = |version: u16| {
            let config = crate::wire::bincode_config();
            let bytes = shoal_core::version::with_layout(version, || {
                bincode::serde::encode_to_vec(&answer, config).unwrap()
            });
            let back: Response = shoal_core::version::with_layout(version, || {
                bincode::serde::decode_from_slice(&bytes, config).unwrap().0
            });
            match back {
                Response::Issues { issues, .. } => {
                    issues.into_iter().map(|i| i.kind).collect::<Vec<_>>()
                }
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(kinds(9), vec![IssueKind::Missing]);
        assert_eq!(kinds(10), vec![IssueKind::Missing, IssueKind::Unplaceable]);
    }
}
