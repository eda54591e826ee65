//! What the checkers read of a host: a [`HostView`], which the driver fills for every host before
//! each call into the checker, borrowing from its own hosts. The checkers see a host's identity,
//! its life, its record, its runtime (the ground truth) and its agent's node and API; never the
//! driver's handles (disk, clock, guard, start task), and never the driver itself.

use std::sync::Arc;

use shoal::dispatch::Api;
use shoal::state::mesh::node::MeshNode;
use shoal::state::mesh::record::NodeRecord;

use crate::host::HostState;
use crate::runtime::Ground;

/// One host as the checkers see it during one call. A slice of them is indexed by host index.
#[derive(Clone, Copy)]
pub struct HostView<'a> {
    /// Index (node name `n{index+1}`).
    pub index: u32,
    /// Node name.
    pub name: &'a str,
    /// Its cell, when the scenario has cells.
    pub cell: Option<&'a str>,
    /// Where it is in its life.
    pub state: HostState,
    /// Its agent is paused (frozen; its instances run on).
    pub paused: bool,
    /// When the current incarnation came up (sim ms).
    pub up_since_ms: u64,
    /// Its record (capacity, zone, draining).
    pub record: &'a NodeRecord,
    /// What it can run as placement reads its gossip (`[[hosts]]`); `None`: it gossips nothing.
    pub caps: Option<&'a shoal_core::placement::Capabilities>,
    /// The ground truth: its in-memory runtime.
    pub ground: &'a Ground,
    /// Its agent's mesh node, when up.
    pub node: Option<&'a Arc<MeshNode>>,
    /// Its agent's API, when up.
    pub api: Option<&'a Arc<Api>>,
}

impl HostView<'_> {
    /// Up and not paused.
    pub fn serving(&self) -> bool {
        self.state == HostState::Up && !self.paused
    }
}
