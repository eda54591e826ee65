//! [`Agent`]: the composition root. It owns one agent's parts and the tasks that drive them:
//! the mesh node (store, gossip, anti-entropy), the host and its loop, and the API over both.
//! Ownership runs one way (the API holds the host and the node, the host holds the node, the
//! node holds neither), so dropping or crashing an agent frees all of it once its tasks end.

pub mod mem;
mod process;
pub mod run;

use std::sync::Arc;

use crate::agent::run::RunningNode;
use crate::dispatch::Api;
use crate::node::host::{Host, HostLoop};
use crate::state::mesh::node::MeshNode;
use crate::transport::rpc;
use crate::wire::api::{Request, Response};

pub use process::{node_record, open_runtime, run_agent, AgentOptions, RuntimeChoice};

/// One running agent.
pub struct Agent {
    running: Option<RunningNode>,
    host: Arc<Host>,
    api: Arc<Api>,
    host_task: tokio::task::JoinHandle<()>,
}

impl Agent {
    /// Assembles an agent from a started mesh node and its host, and spawns the host loop
    /// (prepared by the caller: restored state).
    pub fn start(running: RunningNode, host: Arc<Host>, host_loop: HostLoop) -> Agent {
        assert!(
            Arc::ptr_eq(host.node(), &running.node),
            "the host must serve the agent's own node"
        );
        let api = Api::new(running.node.clone(), Some(host.clone()));
        let host_task = running.node.spawn(host_loop.run());
        Agent {
            running: Some(running),
            host,
            api,
            host_task,
        }
    }

    /// The mesh node.
    pub fn node(&self) -> &Arc<MeshNode> {
        self.host.node()
    }

    /// The host.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// The API.
    pub fn api(&self) -> &Arc<Api> {
        &self.api
    }

    /// The handler to serve on the API address.
    pub fn handler(&self) -> rpc::Handler<Request, Response> {
        self.api.handler()
    }

    /// Leaves gracefully: stops the host loop, fences this node's exclusive instances (nothing
    /// supervises them once the agent is gone) and releases the guard, announces the leave in
    /// gossip, stops the rest.
    pub async fn leave(mut self) {
        self.host_task.abort();
        self.host.fence_on_leave().await;
        self.host.release_guard();
        if let Some(running) = self.running.take() {
            running.leave().await;
        }
    }

    /// Stops for a planned restart (`--restart-grace`): stops the host loop, keeps every instance
    /// running, exclusive ones included, under the guard's lease extended to a full lease from
    /// now (at most `grace_ms`: the guard fences them when it ends unless a restarted agent
    /// renews it), tells the mesh it means to be back by then, and stops. Returns the grace in
    /// force (0 and a plain [`Agent::leave`] without a guard).
    pub async fn restart(mut self, grace_ms: u64) -> u64 {
        self.host_task.abort();
        let lease_ms = self.host.hold_guard();
        if lease_ms == 0 {
            self.leave().await;
            return 0;
        }
        let grace = grace_ms.min(lease_ms);
        let until = (self.host.node().clock)() + grace;
        if let Some(running) = self.running.take() {
            running.restart(until).await;
        }
        grace
    }

    /// Stops every task at once, as a crash would: instances keep running, the store keeps what
    /// was durable.
    pub fn crash(mut self) {
        self.host_task.abort();
        if let Some(running) = self.running.take() {
            running.crash();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.host_task.abort();
    }
}
