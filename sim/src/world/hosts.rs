//! Hosts: one agent incarnation at a time over a disk that outlives it, a clock, a runtime and
//! the host loop; started, crashed, restarted and paused by the driver.

use std::sync::{Arc, Weak};

use shoal::agent::run::{start_node, MeshSetup, RunningNode};
use shoal::agent::Agent;
use shoal::identity::pki::Role;
use shoal::identity::tls::{Peer, PeerName};
use shoal::state::mesh::node::{MeshNode, WallClock};
use shoal::state::mesh::record::NodeRecord;
use shoal::state::store_db::{DesiredStore, MemDisk};
use shoal::transport::freeze::{Freeze, FreezeSwitch};
use shoal::wire::api::{Request, Response};
use shoal_core::store::StoreConfig;

use super::World;
use crate::check::HostView;
use crate::clock::SimClock;
use crate::host::{apply_profiles, start_agent, AgentParts, HostState};
use crate::net::{host_addr, SimNet, API_PORT, GOSSIP_PORT};
use crate::runtime::Ground;
use crate::scenario::{Mesh, Scenario};
use rand::SeedableRng;
use shoal::node::runtime::mem::MemRuntime;
use std::net::SocketAddr;

/// Hosts every agent names as seeds.
const SEED_HOSTS: u32 = 3;

/// One simulated host.
pub struct Host {
    /// Index (node name `n{index+1}`).
    pub index: u32,
    /// Node name.
    pub name: String,
    /// Its cell (`c1`..), when the scenario has cells.
    pub cell: Option<String>,
    /// Where it is in its life.
    pub state: HostState,
    /// Its agent is paused (frozen: every task of it stops at `freeze`, nothing reaches or
    /// leaves the host, its instances run on).
    pub paused: tokio::sync::watch::Sender<bool>,
    /// The gate every task of the current incarnation's agent passes (`set_frozen` closes it).
    pub freeze: Freeze,
    /// Closes and opens `freeze`; `None` while no incarnation runs.
    freeze_switch: Option<FreezeSwitch>,
    /// Its record (capacity, zone, draining).
    pub record: NodeRecord,
    /// Its disk, kept across restarts unless a crash loses it.
    pub disk: MemDisk,
    /// Its wall clock.
    pub clock: SimClock,
    /// The agent's in-memory runtime.
    pub mem: MemRuntime,
    /// The ground truth the checkers read: the in-memory runtime.
    pub ground: Ground,
    /// The running agent.
    pub running: Option<Agent>,
    /// The running agent's guard (it dies with the host).
    pub guard: Option<shoal::node::guard::MemGuard>,
    /// When the current incarnation came up (sim ms).
    pub up_since_ms: u64,
    /// Incarnations so far.
    pub incarnation: u32,
    /// Down for a planned agent restart (`upgrade`): its instances and guard run on, so they
    /// are not buried with the agent.
    pub restarting: bool,
    /// What it can run (`[[hosts]]`), gossiped and enforced by its runtime; `None`: anything,
    /// said to nobody.
    pub caps: Option<crate::scenario::HostCaps>,
    /// The same as placement reads it.
    pub placement_caps: Option<shoal_core::placement::Capabilities>,
    /// The disk must lose its unsynced writes before the next start.
    disk_crashed: bool,
    starting: Option<tokio::task::JoinHandle<anyhow::Result<RunningNode>>>,
    ghost: Option<Weak<MeshNode>>,
}

impl Host {
    pub(super) fn new(index: u32, sc: &Scenario, seed: u64, t0: tokio::time::Instant) -> Self {
        let zone = sc.mesh.zones[index as usize % sc.mesh.zones.len()].clone();
        let record = NodeRecord {
            cpu_millis: sc.mesh.cpu_millis,
            memory_bytes: sc.mesh.memory_bytes,
            labels: Default::default(),
            zone,
            draining: false,
            agent_version: "sim".into(),
            placement_version: shoal_core::placement::PLACEMENT_ALGORITHM_VERSION,
            api_addr: host_addr(index, API_PORT),
            limits_note: None,
            ports: shoal::state::mesh::record::default_ports(),
        };
        let name = format!("n{}", index + 1);
        let rng = rand::rngs::ChaCha8Rng::seed_from_u64(seed ^ (u64::from(index) << 32) ^ 0x6d656d);
        let mem = MemRuntime::with_rng(&name, rng, t0).with_origin_ms(crate::clock::BASE_MS);
        // A host that can run only some kinds refuses the others, as `shoal agent --runtime`.
        let caps = sc.mesh.caps_of(index).cloned();
        if let Some(c) = &caps {
            mem.set_supported(c.processes, c.containers);
        }
        let placement_caps = caps.as_ref().map(|c| c.record().placement());
        let ground = Ground::new(mem.clone());
        Host {
            index,
            name,
            cell: sc.mesh.cell_of(index),
            state: HostState::Down,
            paused: tokio::sync::watch::Sender::new(false),
            freeze: Freeze::none(),
            freeze_switch: None,
            record,
            disk: MemDisk::new(),
            clock: SimClock::new(t0),
            mem,
            ground,
            running: None,
            guard: None,
            up_since_ms: 0,
            incarnation: 0,
            restarting: false,
            caps,
            placement_caps,
            disk_crashed: false,
            starting: None,
            ghost: None,
        }
    }

    /// The agent, when up.
    pub fn node(&self) -> Option<&Arc<MeshNode>> {
        self.running.as_ref().map(|a| a.node())
    }

    /// The agent's API, when up.
    pub fn api(&self) -> Option<&Arc<shoal::dispatch::Api>> {
        self.running.as_ref().map(|a| a.api())
    }

    /// Up and not paused.
    pub fn serving(&self) -> bool {
        self.state == HostState::Up && !*self.paused.borrow()
    }

    /// What the checkers read of this host now.
    pub(super) fn view(&self) -> HostView<'_> {
        HostView {
            index: self.index,
            name: &self.name,
            cell: self.cell.as_deref(),
            state: self.state,
            paused: *self.paused.borrow(),
            up_since_ms: self.up_since_ms,
            record: &self.record,
            caps: self.placement_caps.as_ref(),
            ground: &self.ground,
            node: self.node(),
            api: self.api(),
        }
    }

    /// The previous incarnation's agent is still referenced by a call in flight.
    pub(super) fn ghost_alive(&self) -> bool {
        self.ghost.as_ref().is_some_and(|w| w.strong_count() > 0)
    }
}

/// What the checkers read of every host, in index order (`views[i]` is host `i`).
pub(super) fn views(hosts: &[Host]) -> Vec<HostView<'_>> {
    hosts.iter().map(Host::view).collect()
}

/// Joins an agent's mesh node to the simulated network: the same `start_node` as `shoal agent`,
/// over an in-memory store on `disk`. Its API is served once the agent is assembled.
pub async fn start_sim_node(
    net: &SimNet,
    setup: MeshSetup,
    disk: &MemDisk,
    clock: WallClock,
) -> anyhow::Result<RunningNode> {
    let store = DesiredStore::open_in_memory(disk, &setup.name, StoreConfig::default())?;
    let api = setup.record.api_addr;
    let rpc = Arc::new(net.rpc_client(api, Peer::new(setup.name.clone(), Role::Node)));
    let probes = net.probe_channel(setup.gossip_addr);
    start_node(
        setup,
        store,
        &net.transport(),
        rpc,
        clock,
        true,
        Some(probes),
    )
    .await
}

/// `handler` served only while the agent is not frozen: a request that reached it before a
/// freeze is answered after the thaw, as one queued for a stopped process. (A request sent while
/// the agent is frozen is lost on the way: the network drops what reaches a paused host.)
fn gated(
    handler: shoal::transport::rpc::Handler<Request, Response>,
    freeze: Freeze,
) -> shoal::transport::rpc::Handler<Request, Response> {
    Arc::new(move |req, peer| {
        let (handler, freeze) = (handler.clone(), freeze.clone());
        Box::pin(async move { freeze.gate(handler(req, peer)).await })
    })
}

/// Host `h`'s cell, gossip seeds and cell seeds: without cells, the mesh's first hosts; with
/// cells, the first hosts of its own cell, and the API address of cell c1's first host to learn
/// the other cells from (c1's hosts need none).
fn seeds_of(mesh: &Mesh, h: u32) -> (String, Vec<SocketAddr>, Vec<SocketAddr>) {
    let Some(cell) = mesh.cell_of(h) else {
        let seeds = (0..SEED_HOSTS.min(mesh.nodes))
            .filter(|s| *s != h)
            .map(|s| host_addr(s, GOSSIP_PORT))
            .collect();
        return (
            shoal::state::cells::DEFAULT_CELL.to_string(),
            seeds,
            Vec::new(),
        );
    };
    let first = h % mesh.cells;
    let seeds = (0..SEED_HOSTS)
        .map(|k| first + k * mesh.cells)
        .filter(|s| *s < mesh.nodes && *s != h)
        .map(|s| host_addr(s, GOSSIP_PORT))
        .collect();
    let cell_seeds = match first {
        0 => Vec::new(),
        _ => vec![host_addr(0, API_PORT)],
    };
    (cell, seeds, cell_seeds)
}

impl World {
    pub(super) fn start_host(&mut self, h: u32) {
        let host = &mut self.hosts[h as usize];
        if host.disk_crashed {
            host.disk.crash();
            host.disk_crashed = false;
        }
        host.incarnation += 1;
        let (cell, seeds, cell_seeds) = seeds_of(&self.scenario.mesh, h);
        // A new gate per incarnation: every task of this agent, its join included, passes it.
        let (freeze, switch) = Freeze::switch();
        host.freeze = freeze.clone();
        host.freeze_switch = Some(switch);
        let setup = MeshSetup {
            name: host.name.clone(),
            gossip_addr: host_addr(h, GOSSIP_PORT),
            seeds,
            record: host.record.clone(),
            tuning: self.tuning.clone(),
            cluster_id: "shoal-sim".into(),
            cell,
            cell_seeds,
            authority: Default::default(),
            wire: shoal::state::mesh::upgrade::wire_cell(),
            capabilities: host.caps.as_ref().map(|c| c.record()),
            freeze: freeze.clone(),
        };
        let (net, disk, clock) = (self.net.clone(), host.disk.clone(), host.clock.wall_clock());
        host.starting =
            Some(freeze.spawn(async move { start_sim_node(&net, setup, &disk, clock).await }));
        host.state = HostState::Starting;
        let line = format!("{} starting (incarnation {})", host.name, host.incarnation);
        self.trace.line(self.now_ms(), line);
    }

    /// Takes the agents that finished joining and starts their host loops.
    pub(super) async fn poll_hosts(&mut self) {
        let now = self.now_ms();
        for h in 0..self.hosts.len() {
            if !self.hosts[h]
                .starting
                .as_ref()
                .is_some_and(|t| t.is_finished())
            {
                continue;
            }
            let task = self.hosts[h].starting.take().expect("checked");
            let host = &mut self.hosts[h];
            match task.await {
                Ok(Ok(running)) => {
                    apply_profiles(&host.mem, &self.profiles);
                    let (agent, guard) = start_agent(AgentParts {
                        running,
                        mem: host.mem.clone(),
                        clock: host.clock.wall_clock(),
                        t0: self.t0,
                        config: self.scenario.host.clone(),
                        guard: host.guard.take(),
                        volume_roots: host
                            .caps
                            .as_ref()
                            .map(|c| c.volume_roots.clone())
                            .unwrap_or_default(),
                        memo: self.checker.memo.clone(),
                    });
                    let api = host_addr(host.index, API_PORT);
                    let handler = gated(agent.handler(), host.freeze.clone());
                    self.net
                        .serve_rpc(api, PeerName(host.name.clone()), handler);
                    host.running = Some(agent);
                    host.guard = Some(guard);
                    host.state = HostState::Up;
                    host.restarting = false;
                    host.up_since_ms = now;
                    let line = format!("{} up", host.name);
                    self.trace.line(now, line);
                }
                Ok(Err(e)) => {
                    host.state = HostState::Down;
                    let line = format!("{} failed to start: {e:#}", host.name);
                    self.trace.line(now, &line);
                    self.checker.refused.push(line);
                }
                Err(e) => {
                    host.state = HostState::Down;
                    self.trace
                        .line(now, format!("{} start task ended: {e}", self.hosts[h].name));
                }
            }
        }
    }

    /// The host dies: agent, host loop and instances at once; the disk loses what was not
    /// synced (or everything, when `keep_data` is false).
    pub(super) fn crash_host(&mut self, h: u32, keep_data: bool) {
        let now = self.now_ms();
        let host = &mut self.hosts[h as usize];
        if host.state == HostState::Down {
            return;
        }
        let held: Vec<_> = host
            .ground
            .seen(now)
            .into_iter()
            .filter(|i| i.phase.may_be_alive())
            .map(|i| i.replica)
            .collect();
        let generation = host.node().map(|n| n.gossip().chitchat_id().generation_id);
        if let Some(task) = host.starting.take() {
            task.abort();
        }
        if let Some(agent) = host.running.take() {
            host.ghost = Some(Arc::downgrade(agent.node()));
            agent.crash();
        }
        if let Some(guard) = host.guard.take() {
            guard.stop();
        }
        host.restarting = false;
        self.net.stop_rpc(host_addr(h, API_PORT));
        self.net.set_paused(h, false);
        host.paused.send_replace(false);
        // Whatever of the agent is left dies at its gate, as a killed process's threads do:
        // the tasks a crash during the start spawned (gossip and probes, which keep the gossip
        // address bound), calls in flight, an API call it was answering.
        if let Some(switch) = host.freeze_switch.take() {
            switch.kill();
        }
        self.pause_held.remove(&h);
        self.checker.reach.set_paused(h, false, now);
        host.ground.kill_all();
        if keep_data {
            host.disk_crashed = true;
        } else {
            host.disk = MemDisk::new();
            host.disk_crashed = false;
        }
        host.state = HostState::Down;
        let name = host.name.clone();
        self.checker
            .host_crashed(now, h, &name, generation, held, &views(&self.hosts));
    }

    /// A planned agent restart (an upgrade): the agent stops as on SIGTERM with its restart
    /// grace (instances and guard run on, the mesh is told), and starts again `down_ms` later
    /// over the same runtime, disk and guard. False when the host is not up.
    pub(super) fn upgrade_host(&mut self, h: u32) -> bool {
        let host = &mut self.hosts[h as usize];
        if host.state != HostState::Up {
            return false;
        }
        let Some(agent) = host.running.take() else {
            return false;
        };
        self.net.stop_rpc(host_addr(h, API_PORT));
        // The next incarnation starts once this one is gone, as after a crash.
        host.ghost = Some(Arc::downgrade(agent.node()));
        let grace_ms = shoal::node::host::RESTART_GRACE_MS_DEFAULT;
        tokio::spawn(async move {
            agent.restart(grace_ms).await;
        });
        host.state = HostState::Down;
        host.restarting = true;
        true
    }

    /// Freezes (or thaws) one host's agent, untraced: the switch pauses and starves share.
    pub(super) fn set_frozen(&mut self, h: u32, paused: bool) {
        let now = self.now_ms();
        let host = &self.hosts[h as usize];
        if host.state == HostState::Down {
            return;
        }
        host.paused.send_replace(paused);
        if let Some(switch) = &host.freeze_switch {
            switch.set(paused);
        }
        self.net.set_paused(h, paused);
        self.checker.reach.set_paused(h, paused, now);
    }

    /// Traces what the hosts' guards killed since the last call.
    pub(super) fn trace_guards(&mut self) {
        for host in &self.hosts {
            let Some(guard) = host.guard.as_ref() else {
                continue;
            };
            for kill in guard.take_kills() {
                let line = format!(
                    "guard of {} killed {} ({}): {}",
                    host.name, kill.replica, kill.handle, kill.reason
                );
                self.trace.line(kill.at_ms, line);
            }
        }
    }

    pub(super) fn set_paused(&mut self, hosts: &[u32], paused: bool) {
        for &h in hosts {
            self.set_frozen(h, paused);
        }
        let what = if paused { "pause" } else { "resume" };
        self.log(format!(
            "{what} {}",
            crate::scenario::Selector::concrete(hosts)
        ));
    }
}
