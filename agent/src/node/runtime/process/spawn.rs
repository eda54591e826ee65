//! Starting one process: its directory, environment, log relay, process group and cgroup.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use tokio::sync::watch;

use super::exit::watch_child;
use super::logs::Outputs;
use super::state::{self, InstanceState};
use super::{Entry, Inner, DEFAULT_PATH};
use crate::core::instance::RuntimeInstance;
use crate::core::spec::{ProcessSpec, Run, VolumeKind};
use crate::node::runtime::volumes::{volume_env, Source, VolumeDirs};
use crate::node::runtime::{instance_env, wall_clock_ms, RuntimeError, RuntimeEvent, StartRequest};

/// Handles tried before giving up (each differs: the hash input includes a counter).
const HANDLE_ATTEMPTS_MAX: usize = 16;

impl Inner {
    /// Spawns the replica's process and starts supervising it. On error nothing is left behind
    /// but the replica's (empty) working directory.
    pub(super) fn start(
        self: &Arc<Self>,
        request: StartRequest,
    ) -> Result<RuntimeInstance, RuntimeError> {
        if request.node != self.config.node {
            return Err(RuntimeError::WrongNode {
                requested: request.node.clone(),
                serving: self.config.node.clone(),
            });
        }
        let Run::Process(spec) = &request.spec.run else {
            return Err(RuntimeError::Unsupported {
                reason: super::CONTAINER_ON_PROCESS.into(),
            });
        };
        let run_as = super::user::resolve(&request, &self.config.users)?;
        let working_dir = self.working_dir(&request, spec)?;
        let volumes = VolumeDirs::new(&self.config.data_dir).prepare(&request)?;
        if let Some(run_as) = &run_as {
            // Its own directories become its user's (Kubernetes' fsGroup); a spec's working_dir
            // and host-path volumes are the operator's and stay as they are.
            let data_dir = &self.config.data_dir;
            if spec.working_dir.is_none() {
                super::user::give(&working_dir, data_dir, run_as)?;
            }
            for m in volumes.iter().filter(|m| m.volume.kind == VolumeKind::Data) {
                if let Source::Dir(dir) = &m.source {
                    super::user::give(dir, data_dir, run_as)?;
                }
            }
        }
        let (handle, dir) = self.claim_handle(&request)?;
        let mut env = child_env(&request, spec);
        env.extend(volume_env(&volumes, false));
        let started_at_ms = wall_clock_ms();
        let outputs = match self.start_relay(&request.replica, &handle, started_at_ms) {
            Ok(outputs) => outputs,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        // On a failed spawn the pipes' write ends close here: the relay sees EOF and exits. The
        // log directory goes too, or it would pass for the replica's newest instance.
        let log_dir = outputs.dir.clone();
        let child = match spawn_child(spec, &env, &working_dir, outputs, run_as.as_ref()) {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                let _ = std::fs::remove_dir_all(&log_dir);
                return Err(e);
            }
        };
        // Not polled yet, so not reaped: the pid is still ours and /proc still has it.
        let pid = child.id().map(|id| id as i32).unwrap_or_default();
        let proc_start_ticks = state::proc_stat(pid)
            .map(|s| s.start_ticks)
            .unwrap_or_default();
        let resources = request.spec.resources;
        let cgroup = self
            .cgroups
            .apply(&self.config.node, &handle, pid, resources);
        let state = InstanceState {
            handle: handle.clone(),
            replica: request.replica.clone(),
            spec_version: request.spec_version.clone(),
            node: request.node.clone(),
            pid,
            proc_start_ticks,
            started_at_ms,
            exited_at_ms: None,
            exit_code: None,
            error: None,
            stopping: false,
            env,
            working_dir,
            cgroup,
            ports: request.ports.clone(),
            run_as,
        };
        if let Err(e) = state.save(&dir) {
            // Without a state file a restarted agent could not adopt it: do not leave it running.
            super::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
            return Err(e);
        }
        let (tx, rx) = watch::channel(false);
        let instance = state.to_instance();
        {
            let mut instances = self.instances.lock().expect("instances lock");
            instances.insert(handle.clone(), Entry { state, exited: rx });
        }
        tokio::spawn(watch_child(self.clone(), handle.clone(), child, tx));
        let replica = request.replica;
        let _ = self.events.send(RuntimeEvent::Started { handle, replica });
        Ok(instance)
    }

    /// A fresh handle and its new, empty directory. Creating the directory is what reserves the
    /// handle, so two starts can never share one, even after a hash collision.
    fn claim_handle(&self, request: &StartRequest) -> Result<(String, PathBuf), RuntimeError> {
        let parent = self.config.data_dir.join("instances");
        std::fs::create_dir_all(&parent)
            .map_err(|e| RuntimeError::io(format!("creating {}", parent.display()), e))?;
        for _ in 0..HANDLE_ATTEMPTS_MAX {
            let handle = self.new_handle(request);
            let dir = self.instance_dir(&handle);
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok((handle, dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(RuntimeError::io(format!("creating {}", dir.display()), e)),
            }
        }
        Err(RuntimeError::StartFailed {
            reason: format!("no free instance handle after {HANDLE_ATTEMPTS_MAX} attempts"),
        })
    }

    /// The spec's working directory, which must exist, or the replica's own data directory.
    fn working_dir(
        &self,
        request: &StartRequest,
        spec: &ProcessSpec,
    ) -> Result<PathBuf, RuntimeError> {
        if let Some(dir) = &spec.working_dir {
            if !Path::new(dir).is_dir() {
                return Err(RuntimeError::WorkingDirMissing { path: dir.clone() });
            }
            return Ok(PathBuf::from(dir));
        }
        let replica = &request.replica;
        let dir = self
            .config
            .data_dir
            .join("replicas")
            .join(&replica.workload)
            .join(replica.replica.to_string());
        std::fs::create_dir_all(&dir)
            .map_err(|e| RuntimeError::io(format!("creating {}", dir.display()), e))?;
        Ok(dir)
    }
}

/// The child's whole environment: the agent's `PATH` (nothing else of the agent's), then the
/// instance's variables.
fn child_env(request: &StartRequest, spec: &ProcessSpec) -> BTreeMap<String, String> {
    let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_string());
    let mut env = BTreeMap::from([("PATH".to_string(), path)]);
    env.extend(instance_env(request, &spec.env));
    env
}

/// Spawns the command as the leader of a new process group, output to its log relay's pipes,
/// as `run_as` when given (through util-linux's `setpriv`, which then execs the command).
fn spawn_child(
    spec: &ProcessSpec,
    env: &BTreeMap<String, String>,
    working_dir: &Path,
    outputs: Outputs,
    run_as: Option<&super::user::RunAs>,
) -> Result<tokio::process::Child, RuntimeError> {
    let (program, args) = spec
        .command
        .split_first()
        .ok_or_else(|| RuntimeError::StartFailed {
            reason: "the spec's command is empty".into(),
        })?;
    let path = env.get("PATH").map(String::as_str).unwrap_or("");
    if run_as.is_some() && !super::exec::program_exists(program, path, working_dir) {
        // Through setpriv a missing program is setpriv's exit 127: say it as without it.
        return Err(RuntimeError::CommandNotFound {
            command: program.clone(),
        });
    }
    let mut command = super::user::command(run_as, program);
    command
        .args(args)
        .env_clear()
        .envs(env)
        .current_dir(working_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(outputs.stdout))
        .stderr(Stdio::from(outputs.stderr))
        .process_group(0);
    command.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => RuntimeError::CommandNotFound {
            command: program.clone(),
        },
        std::io::ErrorKind::PermissionDenied => RuntimeError::StartFailed {
            reason: format!("{program:?} cannot be executed: permission denied"),
        },
        _ => RuntimeError::StartFailed {
            reason: format!("spawning {program:?}: {e}"),
        },
    })
}
