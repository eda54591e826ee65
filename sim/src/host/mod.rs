//! The host loop beside each simulated agent: reads the agent's view (gossip and store), computes
//! the placement with the real core, and converges the host's simulated runtime to its slice.
//!
//! [`ModelHost`] is a stand-in written for the simulator, following docs of the host agent's
//! design (reconcile.md): restart with backoff, replace on a new spec version, stop orphans after
//! the new owner reports running (normal) or at once (exclusive), stop-before-start for exclusive
//! replicas with self-fencing and a fencing delay. The real host loop plugs in through
//! [`HostLoop`] when it lands; the invariant checkers only read the runtimes, never this code.

mod agent;
mod core;
mod model;
pub mod view;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use shoal::mesh::node::MeshNode;

use crate::runtime::HostRuntime;
use crate::scenario::{HostConfig, InstanceProfile};

pub use self::core::{reconcile_config, CoreHost};
pub use agent::AgentHost;
pub use model::ModelHost;

/// Instance behaviour per workload, changed by `instance` events while the run goes on.
pub type Profiles = Arc<Mutex<BTreeMap<String, InstanceProfile>>>;

/// What a host loop gets for one incarnation of one host.
#[derive(Clone)]
pub struct HostEnv {
    /// Host index.
    pub index: u32,
    /// The agent.
    pub node: Arc<MeshNode>,
    /// The host's model runtime (used by [`ModelHost`]).
    pub runtime: Arc<Mutex<HostRuntime>>,
    /// The agent's in-memory runtime (used by [`CoreHost`]).
    pub mem: shoal::runtime::mem::MemRuntime,
    /// The host's wall clock (skewed by clock faults).
    pub clock: shoal::mesh::node::WallClock,
    /// Instance behaviour per workload.
    pub profiles: Profiles,
    /// Timing.
    pub config: HostConfig,
    /// Set while the agent is paused: the loop does nothing.
    pub paused: Arc<AtomicBool>,
    /// The simulation's start (runtime time is `t0.elapsed()`).
    pub t0: tokio::time::Instant,
}

impl HostEnv {
    /// Simulated ms since the start of the run.
    pub fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }
}

/// A per-host loop the simulator runs beside each agent (the model now, the real one later).
pub trait HostLoop {
    /// Spawns the loop for one host incarnation; the simulator aborts it when the host dies.
    fn spawn(&self, env: HostEnv) -> tokio::task::JoinHandle<()>;
    /// Its name in reports.
    fn name(&self) -> &'static str;
}
