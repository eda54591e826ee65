//! Finding and killing this node's exclusive instances: process groups from the process runtime's
//! state files (pid and start time checked), containers through the engine by label.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::fired::Killed;
use super::{GuardPaths, GuardRuntime};
use crate::node::runtime::process::state;

/// Longest a docker sweep waits for the engine.
const DOCKER_SWEEP_TIMEOUT: Duration = Duration::from_secs(10);

/// One instance the guard may have to stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The runtime's handle (a container id for docker).
    pub handle: String,
    /// Its workload.
    pub workload: String,
    /// Its replica index.
    pub replica: u32,
    /// The process group leader and its start time; `None` for a container.
    pub group: Option<(i32, u64)>,
}

/// Stops instances of one runtime.
pub struct Sweeper {
    paths: GuardPaths,
    node: String,
    engine: Engine,
}

enum Engine {
    Process,
    Docker(Box<tokio::runtime::Runtime>),
}

/// What one sweep did.
#[derive(Debug, Default)]
pub struct Swept {
    /// Instances stopped.
    pub killed: Vec<Killed>,
    /// What could not be stopped, and why.
    pub failed: Vec<String>,
}

impl Sweeper {
    /// A sweeper for `runtime`'s instances of `node` (docker: a one-thread async runtime for the
    /// engine client, built now so a sweep never fails for lack of one).
    pub fn new(paths: GuardPaths, node: &str, runtime: GuardRuntime) -> anyhow::Result<Sweeper> {
        let engine = match runtime {
            GuardRuntime::Process => Engine::Process,
            GuardRuntime::Docker => Engine::Docker(Box::new(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?,
            )),
        };
        Ok(Sweeper {
            paths,
            node: node.to_string(),
            engine,
        })
    }

    /// What `handle` names, read now (its state file for a process; the id for a container).
    /// `None` when there is nothing to stop under that handle.
    pub fn resolve(&self, handle: &str) -> Option<Target> {
        match self.engine {
            Engine::Process => {
                let dir = self.paths.instances().join(handle);
                let states = state::load_one(&dir)?;
                target_of(&states)
            }
            Engine::Docker(_) => Some(Target {
                handle: handle.to_string(),
                workload: String::new(),
                replica: 0,
                group: None,
            }),
        }
    }

    /// Kills every instance of the `exclusive` workloads it finds, and every `known` target.
    pub fn sweep(&self, known: &BTreeMap<String, Target>, exclusive: &BTreeSet<String>) -> Swept {
        match &self.engine {
            Engine::Process => sweep_processes(&self.paths.instances(), known, exclusive),
            Engine::Docker(rt) => {
                let swept = rt.block_on(async {
                    let sweep = sweep_containers(&self.node, known, exclusive);
                    tokio::time::timeout(DOCKER_SWEEP_TIMEOUT, sweep).await
                });
                swept.unwrap_or_else(|_| Swept {
                    killed: Vec::new(),
                    failed: vec![format!(
                        "the Docker engine did not answer within {} s",
                        DOCKER_SWEEP_TIMEOUT.as_secs()
                    )],
                })
            }
        }
    }
}

fn target_of(state: &state::InstanceState) -> Option<Target> {
    (!state.exited()).then(|| Target {
        handle: state.handle.clone(),
        workload: state.replica.workload.clone(),
        replica: state.replica.replica,
        group: Some((state.pid, state.proc_start_ticks)),
    })
}

fn sweep_processes(
    instances: &Path,
    known: &BTreeMap<String, Target>,
    exclusive: &BTreeSet<String>,
) -> Swept {
    let mut targets = known.clone();
    let mut swept = Swept::default();
    match state::load_all(instances) {
        Ok(states) => {
            for s in states
                .iter()
                .filter(|s| exclusive.contains(&s.replica.workload))
            {
                if let Some(t) = target_of(s) {
                    targets.entry(t.handle.clone()).or_insert(t);
                }
            }
        }
        Err(e) => swept.failed.push(format!("listing instances: {e}")),
    }
    for t in targets.values() {
        let Some((pid, ticks)) = t.group else {
            continue;
        };
        // Only the process that was started, never a later one that got its pid.
        if pid <= 1 || !state::is_same_live_process(pid, ticks) {
            continue;
        }
        match nix::sys::signal::killpg(Pid::from_raw(pid), Signal::SIGKILL) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => swept.killed.push(Killed {
                workload: t.workload.clone(),
                replica: t.replica,
                handle: t.handle.clone(),
                what: format!("process group {pid}"),
            }),
            Err(e) => swept
                .failed
                .push(format!("{} (process group {pid}): {e}", t.handle)),
        }
    }
    swept
}

async fn sweep_containers(
    node: &str,
    known: &BTreeMap<String, Target>,
    exclusive: &BTreeSet<String>,
) -> Swept {
    use crate::node::runtime::docker::{node_filters, replica_of, status_of};
    use bollard::query_parameters::{KillContainerOptionsBuilder, ListContainersOptionsBuilder};

    let mut swept = Swept::default();
    let docker = match bollard::Docker::connect_with_local_defaults() {
        Ok(base) => base.negotiate_version().await,
        Err(e) => Err(e),
    };
    let docker = match docker {
        Ok(docker) => docker,
        Err(e) => {
            swept
                .failed
                .push(format!("reaching the Docker engine: {e}"));
            return swept;
        }
    };
    // Running containers of this node: by label for the exclusive workloads, by id for the rest.
    let options = ListContainersOptionsBuilder::new()
        .all(false)
        .filters(&node_filters(node))
        .build();
    let mut victims: BTreeMap<String, (String, u32)> = BTreeMap::new();
    match docker.list_containers(Some(options)).await {
        Ok(list) => {
            for c in list {
                let (Some(id), Some(labels)) = (c.id, c.labels) else {
                    continue;
                };
                let Some((replica, _)) = replica_of(&labels) else {
                    continue;
                };
                if exclusive.contains(&replica.workload) || known.contains_key(&id) {
                    victims.insert(id, (replica.workload, replica.replica));
                }
            }
        }
        Err(e) => {
            // Without the list, the known containers are killed by id.
            swept.failed.push(format!("listing containers: {e}"));
            for handle in known.keys() {
                victims.insert(handle.clone(), (String::new(), 0));
            }
        }
    }
    for (id, (workload, replica)) in victims {
        let options = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
        match docker.kill_container(&id, Some(options)).await {
            Ok(()) => swept.killed.push(Killed {
                workload,
                replica,
                handle: id.clone(),
                what: format!("container {}", &id[..id.len().min(12)]),
            }),
            // Not running (409) or gone (404): nothing to stop.
            Err(e) if matches!(status_of(&e), Some(404 | 409)) => {}
            Err(e) => swept.failed.push(format!("container {id}: {e}")),
        }
    }
    swept
}
