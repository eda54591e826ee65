//! Workload specs: what a user declares, parsed from TOML or JSON, validated, and typed.
//!
//! [`WorkloadSpec`] is always a validated value with every default filled in, quantities parsed
//! into [`Resources`], constraints parsed into [`Constraint`]s and durations in milliseconds. Its
//! serde form is the stored and wire form, not the user's file format: use
//! [`WorkloadSpec::to_toml_string`] to show a spec to a person.
//!
//! Validation never stops at the first problem: [`SpecErrors`] lists every one, each with file,
//! line, column and field path. No function here reads files; the CLI does that and hands the
//! bytes to [`WorkloadSpec::from_bytes`].
//!
//! **Architecture Invariant:** no input, however malformed, makes these functions panic (the
//! property tests in `tests/spec_fuzz.rs` feed them arbitrary bytes).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::constraint::Constraint;
use crate::resources::Resources;

mod check_policy;
mod clash;
mod decode;
mod doc;
mod duration;
mod error;
mod image;
mod json;
mod limits;
mod policy;
mod reader;
mod render;
pub mod secrets;
mod sections;
mod sticky;
mod suggest;
pub mod user;
mod validate;
mod volumes;

pub use clash::{fixed_port_clashes, CLASHES_MAX};

pub use duration::{format_duration_ms, parse_duration_ms};
pub use error::{Location, SpecError, SpecErrors};
pub use image::{ImageRef, PullPolicy, DEFAULT_REGISTRY};
pub use limits::*;
pub use secrets::SECRET_PLACEHOLDER;
pub use sticky::{OnDataLoss, STICKY_FOR_MS_DEFAULT};
pub use volumes::{
    check_absolute_path, host_path_allowed, Volume, VolumeKind, VOLUMES_MAX, VOLUME_NAME_LEN_MAX,
    VOLUME_SOURCE_LEN_MAX,
};

/// A validated workload: what to run, how many, with what resources, where, and how to keep it
/// healthy and update it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// The workload's name, a DNS label (RFC 1123): unique in the cluster.
    pub name: String,
    /// How many replicas to run; 0 scales the workload to zero without deleting it.
    pub replicas: u32,
    /// The process or container each replica runs.
    pub run: Run,
    /// What each replica reserves on its node.
    pub resources: Resources,
    /// Where replicas may go.
    pub placement: Placement,
    /// How to tell a live replica from a stuck one; `None` means "running is healthy".
    pub health: Option<HealthCheck>,
    /// What to do when a replica exits.
    pub restart: RestartPolicy,
    /// How to replace replicas when the spec changes.
    pub update: UpdateStrategy,
    /// Settings the workload can apply without a restart, through the `reload` hook.
    pub settings: BTreeMap<String, String>,
    /// How to tell a running replica that its live settings changed.
    pub reload: Option<ReloadHook>,
    /// A restart stamp: any change of it replaces every replica at the pace of `[update]`, as a
    /// change of `run` does (`shoal restart NAME` sets it to the time of the request; like the
    /// `restartedAt` annotation `kubectl rollout restart` writes). Free text, at most
    /// [`RESTARTED_AT_BYTES_MAX`] bytes.
    pub restarted_at: Option<String>,
    /// Data each replica keeps across its instances (`[[volumes]]`, `volumes.rs`).
    pub volumes: Vec<Volume>,
    /// How long a stop waits between the polite signal (SIGTERM, `docker stop`) and the kill,
    /// for this workload's instances (Kubernetes' `terminationGracePeriodSeconds`, Nomad's
    /// `kill_timeout`); `None`: the agent's (10 s). At most [`STOP_GRACE_MS_MAX`]. A stop that
    /// fences an exclusive replica keeps the agent's short fencing grace, whatever this says.
    pub stop_grace_ms: Option<u64>,
    /// Who the replica's instances run as (`user = "nobody"`, `"1000"`, `"1000:1000"`,
    /// `"app:app"`; Docker's `--user`, Nomad's task `user`): `None`, the agent's user. A field of
    /// wire version 8: no bytes at layout 7, and refused at apply while the mesh is older
    /// ([`WorkloadSpec::fields_since`]). At most [`USER_BYTES_MAX`] bytes.
    #[serde(default, with = "crate::version::since_8")]
    pub user: Option<String>,
    /// Variables given to every instance's environment like the runtime's `env`, whose values
    /// are never shown: every answer to a client carries [`WorkloadSpec::redacted`] (the
    /// values as [`SECRET_PLACEHOLDER`]) unless a write-role client asks for them
    /// (`get --spec --show-secrets`, audited). `None` when the spec sets none (never an empty
    /// map). Same name rules and limits as `env`; a name may not be in both. A field of wire
    /// version 10: no bytes at an older layout, refused at apply while the mesh is older
    /// ([`WorkloadSpec::fields_since`]).
    #[serde(default, with = "crate::version::since_10")]
    pub secret_env: Option<BTreeMap<String, String>>,
}

/// Longest `user`.
pub const USER_BYTES_MAX: usize = 64;

/// Longest `stop_grace`: 10 minutes.
pub const STOP_GRACE_MS_MAX: u64 = 10 * 60 * 1000;

/// Longest `restarted_at` stamp.
pub const RESTARTED_AT_BYTES_MAX: usize = 64;

/// What a replica runs: exactly one of a host process or a container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Run {
    /// A process started directly on the host.
    Process(ProcessSpec),
    /// A container started through the container engine.
    Container(ContainerSpec),
}

/// A host process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// Program and arguments; never empty. The program is looked up in `PATH`.
    pub command: Vec<String>,
    /// Environment variables added to the agent's minimal environment.
    pub env: BTreeMap<String, String>,
    /// Absolute working directory; `None` means the replica's own data directory.
    pub working_dir: Option<String>,
    /// Named ports: each is handed to the process as `SHOAL_PORT_<NAME>`, allocated by the agent
    /// from its port range unless the spec fixes the number.
    pub ports: Vec<NamedPort>,
}

/// A port a process declares by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedPort {
    /// The port's name: a DNS label of at most [`PORT_NAME_LEN_MAX`] characters, unique in the
    /// workload (`_NAME._tcp.WORKLOAD.shoal.` in DNS).
    pub name: String,
    /// A fixed number; `None` lets the agent allocate one from its `--port-range`.
    pub port: Option<u16>,
    /// Transport protocol (in DNS: `_tcp` or `_udp`).
    pub protocol: Protocol,
}

/// A container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// Image reference, e.g. `nginx:1.27` or `registry.local:5000/team/api@sha256:...`.
    pub image: String,
    /// Overrides the image's command when not empty.
    pub command: Vec<String>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
    /// Ports published on the host.
    pub ports: Vec<PortMapping>,
    /// When to pull the image; when the spec gives none, [`PullPolicy::default_for`] the image
    /// (`always` for `:latest` or no tag, else `if-not-present`).
    pub pull: PullPolicy,
}

/// One published port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    /// The port's name, if it has one (as [`NamedPort::name`]): a named mapping without `host`
    /// gets its host port from the agent's `--port-range` (an unnamed one from the engine).
    pub name: Option<String>,
    /// The port inside the container.
    pub container: u16,
    /// The host port; `None` lets the agent (named) or the engine (unnamed) pick one.
    pub host: Option<u16>,
    /// Transport protocol.
    pub protocol: Protocol,
}

/// A port a probe connects to: a number, or the name of a port the workload declares (resolved
/// to the instance's allocated port, or for a container mapping to its container port).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PortRef {
    /// This port number.
    Number(u16),
    /// The declared port of this name.
    Named(String),
}

impl From<u16> for PortRef {
    fn from(port: u16) -> Self {
        PortRef::Number(port)
    }
}

impl std::fmt::Display for PortRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortRef::Number(n) => write!(f, "{n}"),
            PortRef::Named(name) => write!(f, "{name:?}"),
        }
    }
}

/// Transport protocol of a port.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Protocol {
    /// TCP (the default).
    #[default]
    Tcp,
    /// UDP.
    Udp,
}

impl Protocol {
    /// `tcp` or `udp`, as specs and DNS (`_tcp`, `_udp`) write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// A port a workload declares by name, whichever way it runs ([`WorkloadSpec::named_ports`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeclaredPort<'a> {
    /// Its name.
    pub name: &'a str,
    /// The number on the host when the spec fixes it; `None`: the agent allocates one.
    pub fixed: Option<u16>,
    /// For a container mapping, the port inside the container.
    pub container: Option<u16>,
    /// Transport protocol.
    pub protocol: Protocol,
}

/// Placement rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// How replicas are spread apart.
    pub spread: Spread,
    /// Constraints on node labels; a node must satisfy all of them.
    pub constraints: Vec<Constraint>,
    /// Stateful replicas: each runs in at most one place at any time (stop before start).
    pub exclusive: bool,
    /// Higher places first and is never displaced by lower; `PRIORITY_MIN..=PRIORITY_MAX`.
    pub priority: i32,
    /// Exclusive replicas with data of their own: how long one waits for the node that holds its
    /// data while that node is down (`None`: [`STICKY_FOR_MS_DEFAULT`]; `sticky.rs`).
    pub sticky_for_ms: Option<u64>,
    /// What such a replica does once `sticky_for` has passed (`None`: wait).
    pub on_data_loss: Option<OnDataLoss>,
}

/// How replicas of one workload are spread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Spread {
    /// At most one replica per node (the default).
    #[default]
    Node,
    /// Distinct nodes, and as evenly as possible across zones.
    Zone,
}

/// A health check: one probe plus its timing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    /// What to probe.
    pub probe: Probe,
    /// Time between probes.
    pub interval_ms: u64,
    /// How long one probe may take before it counts as failed; at most `interval_ms`.
    pub timeout_ms: u64,
    /// Consecutive failures that make a replica unhealthy.
    pub failure_threshold: u32,
    /// Time after start during which failures do not count.
    pub start_grace_ms: u64,
}

/// A health probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Probe {
    /// Runs a command in the replica's context; exit status 0 is healthy.
    Exec {
        /// Program and arguments; never empty.
        command: Vec<String>,
    },
    /// Opens a TCP connection; accepted is healthy.
    Tcp {
        /// The port to connect to (the container port for containers), or a declared port's name.
        port: PortRef,
    },
    /// Sends an HTTP GET; a status in 200..=399 is healthy.
    Http {
        /// The port to connect to (the container port for containers), or a declared port's name.
        port: PortRef,
        /// The request path, starting with `/`.
        path: String,
    },
}

/// Restart behaviour with exponential backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartPolicy {
    /// When to restart.
    pub policy: RestartMode,
    /// First delay before a restart; doubles on each consecutive failure.
    pub backoff_initial_ms: u64,
    /// The delay never exceeds this.
    pub backoff_max_ms: u64,
    /// A replica that stays up this long resets the delay to `backoff_initial_ms`.
    pub backoff_reset_ms: u64,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            policy: RestartMode::Always,
            backoff_initial_ms: 10_000,
            backoff_max_ms: 300_000,
            backoff_reset_ms: 600_000,
        }
    }
}

/// When a replica that exited is restarted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RestartMode {
    /// Whatever the exit status (the default).
    #[default]
    Always,
    /// Only after a non-zero exit or a failed health check.
    OnFailure,
    /// Never: the replica stays down (for jobs).
    Never,
}

impl RestartMode {
    /// The name the `policy` field takes: `always`, `on-failure` or `never`.
    pub fn as_str(self) -> &'static str {
        match self {
            RestartMode::Always => "always",
            RestartMode::OnFailure => "on-failure",
            RestartMode::Never => "never",
        }
    }
}

impl std::fmt::Display for RestartMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Rolling update bounds, in replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateStrategy {
    /// Replicas that may be down at once during an update.
    pub max_unavailable: u32,
    /// Extra replicas that may run at once during an update; always 0 for exclusive workloads.
    pub max_surge: u32,
    /// Roll back to the last version whose rollout completed when the rollout of this one
    /// fails (docs/reconcile.md, "Automatic rollback"). Default true.
    pub auto_rollback: bool,
    /// How long a replica's copy at the new version may run (or try to start) without serving
    /// before the rollout counts it as failed, ms. Must be longer than `health.start_grace`.
    pub progress_deadline_ms: u64,
    /// The rollout fails when more than this many replicas have a failed copy at the new
    /// version (crash-looping, or not serving past `progress_deadline`). Default 0: the first
    /// failed replica fails the rollout.
    pub failure_threshold: u32,
}

impl Default for UpdateStrategy {
    fn default() -> Self {
        UpdateStrategy {
            max_unavailable: 1,
            max_surge: 0,
            auto_rollback: true,
            progress_deadline_ms: limits::UPDATE_PROGRESS_DEADLINE_MS_DEFAULT,
            failure_threshold: 0,
        }
    }
}

/// How a running replica is told that its live settings changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReloadHook {
    /// Send this signal to the process (or the container's main process).
    Signal(ReloadSignal),
    /// Run this command in the replica's context, with the settings in its environment.
    Exec {
        /// Program and arguments; never empty.
        command: Vec<String>,
    },
}

/// Signals a reload hook may send. Termination signals are deliberately absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReloadSignal {
    /// SIGHUP, the conventional "reload your configuration".
    Hup,
    /// SIGUSR1.
    Usr1,
    /// SIGUSR2.
    Usr2,
}

impl WorkloadSpec {
    /// Parses and validates a TOML spec. `file_name` only labels the messages.
    pub fn from_toml_str(text: &str, file_name: &str) -> Result<WorkloadSpec, SpecErrors> {
        decode::from_text(text, file_name, doc::Format::Toml)
    }

    /// Parses and validates a JSON spec. `file_name` only labels the messages.
    pub fn from_json_str(text: &str, file_name: &str) -> Result<WorkloadSpec, SpecErrors> {
        decode::from_text(text, file_name, doc::Format::Json)
    }

    /// Parses and validates a spec from raw bytes: enforces [`SPEC_BYTES_MAX`] and UTF-8, then
    /// picks the format from the file extension (`.json`, `.toml`), or from the content when the
    /// name has neither (a document starting with `{` is JSON).
    pub fn from_bytes(bytes: &[u8], file_name: &str) -> Result<WorkloadSpec, SpecErrors> {
        decode::from_bytes(bytes, file_name)
    }

    /// Re-checks every rule on an already typed spec, e.g. one an apply request carries.
    /// Problems carry field paths but no file or location.
    pub fn validate(&self) -> Result<(), SpecErrors> {
        let mut report = validate::Report::default();
        validate::check_new(self, &mut report);
        report.into_result(())
    }

    /// The rules a spec read back from the store must hold: [`WorkloadSpec::validate`] without
    /// the rules added after specs could be stored (today: no `max_surge` with a fixed host
    /// port), so that a workload applied under an older agent keeps running on a newer one.
    pub fn validate_stored(&self) -> Result<(), SpecErrors> {
        let mut report = validate::Report::default();
        validate::check(self, &mut report);
        report.into_result(())
    }

    /// The spec in the user's TOML format, canonical and complete (defaults written out).
    /// Parsing it back gives an equal spec.
    pub fn to_toml_string(&self) -> String {
        render::to_toml_string(self)
    }

    /// The spec in the user's JSON format, as [`WorkloadSpec::to_toml_string`] does for TOML.
    pub fn to_json_string(&self) -> String {
        render::to_json_string(self)
    }

    /// The ports it declares by name, in spec order: a process's `ports`, a container's named
    /// mappings.
    pub fn named_ports(&self) -> Vec<DeclaredPort<'_>> {
        match &self.run {
            Run::Process(p) => p
                .ports
                .iter()
                .map(|p| DeclaredPort {
                    name: &p.name,
                    fixed: p.port,
                    container: None,
                    protocol: p.protocol,
                })
                .collect(),
            Run::Container(c) => c
                .ports
                .iter()
                .filter_map(|p| {
                    Some(DeclaredPort {
                        name: p.name.as_deref()?,
                        fixed: p.host,
                        container: Some(p.container),
                        protocol: p.protocol,
                    })
                })
                .collect(),
        }
    }

    /// The host ports the spec fixes (a process port's `port`, a container port's `host`, named
    /// or not), with their protocol, in declaration order.
    pub fn fixed_host_ports(&self) -> Vec<(u16, Protocol)> {
        match &self.run {
            Run::Process(p) => p
                .ports
                .iter()
                .filter_map(|p| Some((p.port?, p.protocol)))
                .collect(),
            Run::Container(c) => c
                .ports
                .iter()
                .filter_map(|p| Some((p.host?, p.protocol)))
                .collect(),
        }
    }

    /// The names of the ports the agent allocates for each instance (declared without a number).
    pub fn ports_to_allocate(&self) -> Vec<&str> {
        self.named_ports()
            .into_iter()
            .filter(|p| p.fixed.is_none())
            .map(|p| p.name)
            .collect()
    }

    /// True when `newer` differs from `self` only in `settings`: the change can be applied to
    /// running replicas through the reload hook, without replacing them.
    pub fn is_live_change(&self, newer: &WorkloadSpec) -> bool {
        let mut same = newer.clone();
        same.settings = self.settings.clone();
        self.reload.is_some() && &same == self && self.settings != newer.settings
    }
}
