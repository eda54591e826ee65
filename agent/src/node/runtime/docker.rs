//! The docker runtime: replicas as containers, through the engine API (bollard 0.21).
//!
//! Every container carries the labels `shoal.managed=true`, `shoal.workload`, `shoal.replica`,
//! `shoal.version` and `shoal.node`; [`Runtime::list`] selects by `shoal.managed` and this node's
//! `shoal.node` with `all=true`, so a restarted agent adopts its containers, running or exited, and
//! agents sharing one engine never see each other's. It inspects only the containers whose change
//! it has not already heard of on the event stream (`docker/observed.rs`): inspecting one that
//! just died waits for the engine's cleanup. The engine's restart policy is `no`: the agent
//! restarts, with its own backoff, and each replica keeps a created standby container for that
//! restart (`docker/standby.rs`). CPU and memory are enforced as `nano_cpus` and `memory`.
//!
//! The engine may vanish at any time: calls then fail with [`RuntimeError::EngineUnavailable`]
//! (the caller retries with backoff), the event task reports it once and reconnects, and after
//! [`RuntimeEvent::EngineAvailable`] a `list` shows what happened meanwhile. The API version is
//! negotiated on every (re)connection (a `ping` answers even without it: not a readiness check).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::sync::broadcast;
use tokio::task::AbortHandle;

use crate::core::instance::{ReplicaId, RuntimeInstance};
use crate::core::spec::{
    PortRef, Probe, Protocol, ReloadHook, ReloadSignal, Run, VolumeKind, WorkloadSpec,
};
use crate::node::runtime::{
    probe, setting_env_name, ProbeOutcome, Runtime, RuntimeError, RuntimeEvent, RuntimeKind,
    StartRequest, EVENTS_CAPACITY,
};

mod auth;
mod body;
mod client;
mod events;
mod exec;
mod image;
mod logs;
mod observed;
mod pull;
mod standby;
mod volumes;

pub use auth::{RegistryAuth, RegistryAuthError};
use body::{engine_error, instance_from_inspect};
pub(crate) use body::{node_filters, replica_of, status_of};
pub use body::{
    ContainerDns, LABEL_MANAGED, LABEL_NODE, LABEL_PORT_PREFIX, LABEL_REPLICA, LABEL_VERSION,
    LABEL_WORKLOAD,
};
pub(crate) use client::Client;
pub use client::{DockerConfig, LogBound};
pub use image::{
    ensure_busybox_image, import_marked_busybox_image, BUSYBOX_APPLETS, BUSYBOX_PATHS,
};
use observed::Observed;
use pull::Pulls;
pub use pull::{PULL_BACKOFF_INITIAL, PULL_BACKOFF_MAX, PULL_STALL};
pub use standby::LABEL_STANDBY;

/// Why the docker runtime refuses process specs.
const PROCESS_ON_DOCKER: &str =
    "a process workload needs the process runtime; this runtime runs containers only";

/// Containers through the Docker engine. Dropping it stops its event task; containers keep
/// running for the next agent to adopt.
pub struct DockerRuntime {
    config: DockerConfig,
    client: Arc<Client>,
    events: broadcast::Sender<RuntimeEvent>,
    /// What `list` needs not ask the engine again (`docker/observed.rs`).
    observed: Arc<Observed>,
    /// Image pulls in flight and failed recently (`docker/pull.rs`).
    pulls: Arc<Pulls>,
    pump: AbortHandle,
}

impl DockerRuntime {
    /// A runtime that reaches the engine when first needed (an engine that is down now is not an
    /// error: calls fail until it is up). Must be called inside a tokio runtime.
    pub fn new(config: DockerConfig) -> Result<Self, RuntimeError> {
        let timeout = config.request_timeout.as_secs().max(1);
        let base = match &config.socket {
            Some(path) => Docker::connect_with_unix(path, timeout, bollard::API_DEFAULT_VERSION),
            None => Docker::connect_with_local_defaults()
                .map(|d| d.with_timeout(Duration::from_secs(timeout))),
        }
        .map_err(|e| engine_error("configure the engine client", e))?;
        let client = Arc::new(Client::new(base));
        let (events, _) = broadcast::channel(EVENTS_CAPACITY);
        let backoff = events::Backoff {
            initial: config.reconnect_initial,
            max: config.reconnect_max,
        };
        let observed = Arc::new(Observed::default());
        let pump = events::pump(
            client.clone(),
            config.node.clone(),
            events.clone(),
            observed.clone(),
            backoff,
        );
        let pump = tokio::spawn(pump).abort_handle();
        let pulls = Pulls::new(config.registry_auth.clone());
        Ok(DockerRuntime {
            config,
            client,
            events,
            observed,
            pulls,
            pump,
        })
    }

    /// [`DockerRuntime::new`], then checks that the engine answers now.
    pub async fn connect(config: DockerConfig) -> Result<Self, RuntimeError> {
        let runtime = Self::new(config)?;
        runtime.client.get().await?;
        Ok(runtime)
    }

    /// Image pulls this runtime has sent to the engine (each shared by every start that waited
    /// for it).
    pub fn pull_attempts(&self) -> u64 {
        self.pulls.attempts()
    }

    /// The negotiated engine client (for image preparation and diagnostics).
    pub async fn docker(&self) -> Result<Docker, RuntimeError> {
        self.client.get().await
    }

    /// Runs an engine call; a transport failure makes the next call renegotiate.
    async fn call<T>(
        &self,
        result: Result<T, bollard::errors::Error>,
        op: &'static str,
    ) -> Result<T, RuntimeError> {
        match result {
            Ok(value) => Ok(value),
            Err(e) => {
                let error = engine_error(op, e);
                if matches!(error, RuntimeError::EngineUnavailable { .. }) {
                    self.client.invalidate().await;
                }
                Err(error)
            }
        }
    }

    async fn inspect(
        &self,
        docker: &Docker,
        handle: &str,
    ) -> Result<bollard::models::ContainerInspectResponse, RuntimeError> {
        match docker
            .inspect_container(handle, None::<InspectContainerOptions>)
            .await
        {
            Err(e) if status_of(&e) == Some(404) => Err(RuntimeError::UnknownHandle {
                handle: handle.into(),
            }),
            other => self.call(other, "inspect container").await,
        }
    }

    /// Sends `signal`; a container that is not running (409) or gone (404) needs none.
    async fn kill(&self, docker: &Docker, handle: &str, signal: &str) -> Result<(), RuntimeError> {
        let options = KillContainerOptionsBuilder::new().signal(signal).build();
        match docker.kill_container(handle, Some(options)).await {
            Err(e) if matches!(status_of(&e), Some(404 | 409)) => Ok(()),
            other => self.call(other, "signal container").await,
        }
    }

    /// Waits up to `limit` for the container to stop running.
    async fn wait_stopped(&self, docker: &Docker, handle: &str, limit: Duration) -> bool {
        let options = WaitContainerOptionsBuilder::new()
            .condition("not-running")
            .build();
        let mut wait = docker.wait_container(handle, Some(options));
        match tokio::time::timeout(limit, wait.next()).await {
            // A non-zero exit arrives as DockerContainerWaitError: stopped all the same.
            Ok(Some(Ok(_)))
            | Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { .. }))) => true,
            Ok(Some(Err(e))) if status_of(&e) == Some(404) => true,
            Ok(None) => true,
            _ => false,
        }
    }

    /// The instance of container `id`, just started from `body`; then, in the background, the
    /// replica's next standby (`standby_hash` is `None` when it gets none).
    async fn started(
        &self,
        docker: &Docker,
        id: &str,
        body: bollard::models::ContainerCreateBody,
        standby_hash: Option<String>,
    ) -> Result<RuntimeInstance, RuntimeError> {
        let inspected = self.inspect(docker, id).await?;
        let instance = instance_from_inspect(&inspected).ok_or_else(|| RuntimeError::Engine {
            operation: "inspect container",
            detail: format!("container {id} lost its shoal labels"),
        })?;
        self.observed.remember(&instance);
        if let Some(hash) = standby_hash {
            let docker = docker.clone();
            let name = container_name(&instance.replica);
            tokio::spawn(async move { standby::create(&docker, &name, body, hash).await });
        }
        Ok(instance)
    }
}

/// A fresh container name for `replica`: `shoal-WORKLOAD-REPLICA-SUFFIX`.
fn container_name(replica: &crate::core::instance::ReplicaId) -> String {
    let suffix =
        xxhash_rust::xxh3::xxh3_64(format!("{:?}", std::time::SystemTime::now()).as_bytes()) as u32;
    format!(
        "shoal-{}-{}-{suffix:08x}",
        replica.workload, replica.replica
    )
}

impl Drop for DockerRuntime {
    fn drop(&mut self) {
        self.pump.abort();
    }
}

#[async_trait]
impl Runtime for DockerRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Docker
    }

    fn supports(&self, spec: &WorkloadSpec) -> Result<(), String> {
        match spec.run {
            Run::Container(_) => {}
            Run::Process(_) => return Err(PROCESS_ON_DOCKER.to_string()),
        }
        let data = spec.volumes.iter().find(|v| v.kind == VolumeKind::Data);
        match (data, &self.config.volumes) {
            (Some(v), None) => Err(format!(
                "volume {:?}: this docker runtime keeps no data volumes (no data directory)",
                v.name
            )),
            _ => Ok(()),
        }
    }

    async fn start(&self, request: StartRequest) -> Result<RuntimeInstance, RuntimeError> {
        if request.node != self.config.node {
            let serving = self.config.node.clone();
            return Err(RuntimeError::WrongNode {
                requested: request.node,
                serving,
            });
        }
        let Run::Container(spec) = &request.spec.run else {
            return Err(RuntimeError::Unsupported {
                reason: PROCESS_ON_DOCKER.into(),
            });
        };
        let user = body::container_user(&request, &self.config.users)
            .map_err(|reason| RuntimeError::StartFailed { reason })?;
        let docker = self.client.get().await?;
        let replica = &request.replica;
        let pull_first = Pulls::pull_first(spec);
        if pull_first {
            self.pulls.pull(&docker, &spec.image, replica).await?;
        }
        let mounts = match &self.config.volumes {
            Some(dirs) => dirs.prepare(&request)?,
            None if request.spec.volumes.is_empty() => Vec::new(),
            None => {
                let reason = self.supports(&request.spec).err().unwrap_or_default();
                return Err(RuntimeError::Unsupported { reason });
            }
        };
        let run_as = known_user(&self.config, &request);
        if let Some(run_as) = &run_as {
            give_data_dirs(&self.config, &mounts, run_as)?;
        }
        let node = &self.config.node;
        volumes::create_owned(&docker, node, &replica.workload, &mounts).await?;
        if let Some(run_as) = &run_as {
            volumes::give_owned(&docker, &mounts, run_as).await?;
        }
        let body = body::create_body(
            &request,
            spec,
            self.config.dns.as_ref(),
            &mounts,
            self.config.log_bound,
            user,
            self.config.publish_ip,
        );
        // Exclusive replicas get a fencing token per start, which no standby made earlier has; a
        // fixed (or allocated) host port is held by the dead container until the engine's cleanup, which a
        // standby started at once would race.
        let fixed_port = spec.ports.iter().any(|p| p.host.is_some()) || !request.ports.is_empty();
        // A standby made before a pull of a moving tag would run the image as it was.
        let standby_hash =
            (self.config.standby && request.fence_token.is_none() && !fixed_port && !pull_first)
                .then(|| standby::body_hash(&body));
        if let Some(hash) = &standby_hash {
            let node = &self.config.node;
            if let Some(id) = standby::find(&docker, node, replica, hash, &spec.image).await {
                match docker.start_container(&id, None).await {
                    Ok(()) => return self.started(&docker, &id, body, standby_hash).await,
                    Err(e) => {
                        let error = e.to_string();
                        tracing::info!(%id, %error, "standby did not start; creating a container");
                        standby::remove(&docker, &id).await;
                    }
                }
            }
        }
        let options = CreateContainerOptionsBuilder::new()
            .name(&container_name(replica))
            .build();
        let mut created = docker
            .create_container(Some(options.clone()), body.clone())
            .await;
        if matches!(&created, Err(e) if status_of(e) == Some(404)) {
            if !Pulls::may_pull(spec) {
                return Err(RuntimeError::ImageMissing {
                    image: spec.image.clone(),
                });
            }
            if !pull_first {
                self.pulls.pull(&docker, &spec.image, replica).await?;
                created = docker.create_container(Some(options), body.clone()).await;
            }
        }
        let created = self.call(created, "create container").await?;
        let id = created.id;
        tracing::debug!(%replica, %id, "container created");
        if let Err(e) = docker.start_container(&id, None).await {
            let message = e.to_string();
            let remove = RemoveContainerOptionsBuilder::new()
                .force(true)
                .v(true)
                .build();
            let _ = docker.remove_container(&id, Some(remove)).await;
            if message.contains("executable file not found")
                || message.contains("no such file or directory")
            {
                let command = spec
                    .command
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "(the image's command)".into());
                return Err(RuntimeError::CommandNotFound { command });
            }
            return self.call(Err(e), "start container").await;
        }
        tracing::debug!(%replica, %id, "container started");
        self.started(&docker, &id, body, standby_hash).await
    }

    async fn stop(&self, handle: &str, grace: Duration) -> Result<(), RuntimeError> {
        let docker = self.client.get().await?;
        self.inspect(&docker, handle).await?;
        self.kill(&docker, handle, "SIGTERM").await?;
        if self.wait_stopped(&docker, handle, grace).await {
            return Ok(());
        }
        tracing::info!(handle, ?grace, "grace over: SIGKILL to the container");
        self.kill(&docker, handle, "SIGKILL").await?;
        let waited = self.config.kill_wait;
        if self.wait_stopped(&docker, handle, waited).await {
            return Ok(());
        }
        Err(RuntimeError::StopTimedOut {
            handle: handle.to_string(),
            waited,
        })
    }

    async fn list(&self) -> Result<Vec<RuntimeInstance>, RuntimeError> {
        let docker = self.client.get().await?;
        let filters = body::node_filters(&self.config.node);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let summaries = self
            .call(
                docker.list_containers(Some(options)).await,
                "list containers",
            )
            .await?;
        let now_s = (crate::node::runtime::wall_clock_ms() / 1000) as i64;
        let (standbys, stale) = standby::sort_out(&summaries, now_s);
        if !stale.is_empty() {
            let docker = docker.clone();
            tokio::spawn(async move {
                for id in stale {
                    standby::remove(&docker, &id).await;
                }
            });
        }
        let summaries: Vec<_> = summaries
            .into_iter()
            .filter(|s| s.id.as_ref().is_some_and(|id| !standbys.contains(id)))
            .collect();
        let listed = summaries.iter().filter_map(|s| s.id.clone()).collect();
        self.observed.retain(&listed);
        let mut instances = Vec::with_capacity(summaries.len());
        for summary in &summaries {
            if let Some(known) = self.observed.lookup(summary) {
                instances.push(known);
                continue;
            }
            let Some(id) = summary.id.as_deref() else {
                continue;
            };
            match self.inspect(&docker, id).await {
                Ok(inspected) => {
                    let instance = instance_from_inspect(&inspected);
                    if let Some(instance) = &instance {
                        self.observed.remember(instance);
                    }
                    instances.extend(instance);
                }
                Err(RuntimeError::UnknownHandle { .. }) => {} // removed meanwhile
                Err(e) => return Err(e),
            }
        }
        instances.sort_by(|a, b| a.handle.cmp(&b.handle));
        Ok(instances)
    }

    async fn remove(&self, handle: &str) -> Result<(), RuntimeError> {
        let docker = self.client.get().await?;
        let options = RemoveContainerOptionsBuilder::new().v(true).build();
        match docker.remove_container(handle, Some(options)).await {
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) if status_of(&e) == Some(409) => Err(RuntimeError::StillRunning {
                handle: handle.into(),
            }),
            other => self.call(other, "remove container").await,
        }
    }

    async fn reload(
        &self,
        handle: &str,
        hook: &ReloadHook,
        settings: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<(), RuntimeError> {
        let docker = self.client.get().await?;
        match hook {
            ReloadHook::Signal(signal) => {
                let name = match signal {
                    ReloadSignal::Hup => "SIGHUP",
                    ReloadSignal::Usr1 => "SIGUSR1",
                    ReloadSignal::Usr2 => "SIGUSR2",
                };
                let options = KillContainerOptionsBuilder::new().signal(name).build();
                match docker.kill_container(handle, Some(options)).await {
                    Err(e) if matches!(status_of(&e), Some(404 | 409)) => {
                        Err(RuntimeError::ReloadFailed {
                            reason: format!("container {handle} is not running"),
                        })
                    }
                    other => self.call(other, "signal container").await,
                }
            }
            ReloadHook::Exec { command } => {
                let env = settings
                    .iter()
                    .map(|(k, v)| format!("{}={v}", setting_env_name(k)))
                    .collect();
                match exec::exec_in_container(&docker, handle, command, env, timeout).await {
                    ProbeOutcome::Healthy => Ok(()),
                    ProbeOutcome::Unhealthy { reason } => {
                        Err(RuntimeError::ReloadFailed { reason })
                    }
                }
            }
        }
    }

    async fn probe(&self, handle: &str, probe: &Probe, timeout: Duration) -> ProbeOutcome {
        let docker = match self.client.get().await {
            Ok(docker) => docker,
            Err(e) => return ProbeOutcome::fail(e.to_string()),
        };
        let (port, path) = match probe {
            Probe::Exec { command } => {
                return exec::exec_in_container(&docker, handle, command, Vec::new(), timeout).await
            }
            Probe::Tcp { port } => (port, None),
            Probe::Http { port, path } => (port, Some(path)),
        };
        let addr = match self.inspect(&docker, handle).await {
            Ok(inspected) => match port {
                PortRef::Number(port) => exec::published_addr(&inspected, *port, Protocol::Tcp),
                PortRef::Named(name) => exec::named_addr(&inspected, name),
            },
            Err(e) => Err(e.to_string()),
        };
        match (addr, path) {
            (Err(reason), _) => ProbeOutcome::fail(reason),
            (Ok(addr), None) => probe::tcp(addr, timeout).await,
            (Ok(addr), Some(path)) => probe::http(addr, path, timeout).await,
        }
    }

    fn events(&self) -> broadcast::Receiver<RuntimeEvent> {
        self.events.subscribe()
    }

    fn limits_note(&self) -> Option<String> {
        self.client.limits_note()
    }

    fn pulling(
        &self,
    ) -> BTreeMap<crate::core::instance::ReplicaId, crate::core::instance::PullProgress> {
        self.pulls.waiting()
    }

    async fn data_missing(&self, replica: &ReplicaId, spec: &WorkloadSpec) -> Option<String> {
        if let Some(why) = self.config.volumes.as_ref()?.missing(replica, spec) {
            return Some(why);
        }
        // An engine that cannot answer says nothing either way: the start finds out.
        let docker = self.docker().await.ok()?;
        volumes::owned_missing(&docker, replica, spec).await
    }

    async fn purge_data(&self, workload: &str) -> Result<(), RuntimeError> {
        if let Some(dirs) = self.config.volumes.clone() {
            let name = workload.to_string();
            tokio::task::spawn_blocking(move || dirs.purge(&name))
                .await
                .map_err(|e| RuntimeError::StartFailed {
                    reason: format!("purging data failed: {e}"),
                })??;
        }
        let docker = self.client.get().await?;
        volumes::purge(&docker, &self.config.node, workload).await
    }

    async fn logs(
        &self,
        replica: &crate::core::instance::ReplicaId,
        previous: bool,
        query: &crate::node::runtime::logs::LogQuery,
    ) -> Result<crate::node::runtime::logs::LogPage, RuntimeError> {
        logs::read(self, replica, previous, query).await
    }

    async fn exec(
        &self,
        handle: &str,
        request: &crate::node::runtime::exec::ExecRequest,
    ) -> Result<crate::node::runtime::exec::ExecChild, RuntimeError> {
        let docker = self.client.get().await?;
        exec::exec_session(&docker, handle, request).await
    }
}

/// The numbers a container of `request` runs as, when the agent knows them: the workload user
/// (no `user`), or a numeric `user` (the gid taken as the uid when none is given). A `user` by
/// name is resolved inside the image, so its numbers are the image's.
fn known_user(
    config: &DockerConfig,
    request: &StartRequest,
) -> Option<crate::node::runtime::users::RunAs> {
    use crate::core::spec::user::Id;
    use crate::node::runtime::users::RunAs;
    match request.spec.run_as() {
        None => config.users.default,
        Some(user) => match (user.user, user.group) {
            (Id::Num(uid), Some(Id::Num(gid))) => Some(RunAs { uid, gid }),
            (Id::Num(uid), None) => Some(RunAs { uid, gid: uid }),
            _ => None,
        },
    }
}

/// Makes the replica's data directories its user's, so that a container that is not root can
/// write its own data. Host paths are the operator's and are never changed.
fn give_data_dirs(
    config: &DockerConfig,
    mounts: &[crate::node::runtime::volumes::Mounted],
    run_as: &crate::node::runtime::users::RunAs,
) -> Result<(), RuntimeError> {
    use crate::node::runtime::volumes::Source;
    let Some(dirs) = &config.volumes else {
        return Ok(());
    };
    let data = mounts
        .iter()
        .filter(|m| m.volume.kind == crate::core::spec::VolumeKind::Data);
    for m in data {
        if let Source::Dir(dir) = &m.source {
            crate::node::runtime::process::give(dir, dirs.root(), run_as)?;
        }
    }
    Ok(())
}
