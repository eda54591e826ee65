//! The engine connection: configuration, lazy API-version negotiation, renegotiation after an
//! outage, and what the engine says it cannot enforce.

use std::sync::Mutex;
use std::time::Duration;

use bollard::Docker;

use super::body::engine_error;
use crate::node::runtime::RuntimeError;

/// How to reach the engine and how hard to try.
#[derive(Clone, Debug)]
pub struct DockerConfig {
    /// This node's id, written as `shoal.node` on every container.
    pub node: String,
    /// The engine's unix socket; `None` uses `DOCKER_HOST` or `/var/run/docker.sock`.
    pub socket: Option<String>,
    /// Longest wait for one engine answer (bollard counts it in whole seconds).
    pub request_timeout: Duration,
    /// How long to wait for an exit after the kill at the end of a stop.
    pub kill_wait: Duration,
    /// First delay before reconnecting the event stream; doubles up to `reconnect_max`.
    pub reconnect_initial: Duration,
    /// Longest delay between reconnection attempts.
    pub reconnect_max: Duration,
    /// Keep a created standby container per replica for its next restart (`docker/standby.rs`).
    pub standby: bool,
    /// The resolver every container gets (the agent's `--dns`, when containers can use it:
    /// see [`DockerConfig::container_dns`]); `None` leaves the engine's default.
    pub dns: Option<super::body::ContainerDns>,
    /// Registry credentials for pulls (`--registry-auth`); `None` pulls anonymously. Its
    /// `Debug` names the registries only.
    pub registry_auth: Option<std::sync::Arc<super::auth::RegistryAuth>>,
    /// Where replicas' data volumes are kept (the agent's data directory); `None` refuses
    /// specs with data volumes.
    pub volumes: Option<crate::node::runtime::volumes::VolumeDirs>,
    /// Who a container without `user` runs as (numeric, resolved on this host), and whether a
    /// spec asking for root runs (`--workload-user`, `--allow-root-workloads`).
    pub users: crate::node::runtime::users::WorkloadUsers,
    /// The bound on each container's log: the `json-file` driver with `max-size` = bytes / files
    /// and `max-file` = files (the agent's `--log-max-bytes` and `--log-files`, as for
    /// processes); `None` leaves logging to the engine's `daemon.json`.
    pub log_bound: Option<LogBound>,
    /// The host IP containers' ports are published on (`HostIp`); `None`: every interface.
    pub publish_ip: Option<std::net::IpAddr>,
}

/// How much of its output a container's log keeps on disk (see [`DockerConfig::log_bound`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogBound {
    /// Most bytes, all files together.
    pub bytes_max: u64,
    /// Files they are spread over (the current one and the rotated ones), at least 1.
    pub files: u32,
}

impl DockerConfig {
    /// The defaults for a node: local engine, 60 s requests, 10 s kill wait, reconnect from
    /// 250 ms up to 5 s, standby containers.
    pub fn new(node: &str) -> Self {
        DockerConfig {
            node: node.to_string(),
            socket: None,
            request_timeout: Duration::from_secs(60),
            kill_wait: Duration::from_secs(10),
            reconnect_initial: Duration::from_millis(250),
            reconnect_max: Duration::from_secs(5),
            standby: true,
            dns: None,
            registry_auth: None,
            volumes: None,
            users: crate::node::runtime::users::WorkloadUsers::agents(),
            log_bound: Some(LogBound {
                bytes_max: crate::node::runtime::logs::LOG_BYTES_MAX_DEFAULT,
                files: crate::node::runtime::logs::LOG_FILES_DEFAULT,
            }),
            publish_ip: None,
        }
    }

    /// The resolver containers can be given for an agent answering DNS on `addr` for `zone`,
    /// or why not: the engine sets a container's resolver by address only, always on port 53,
    /// and a loopback or unspecified address is the container's own, not the host's.
    pub fn container_dns(
        addr: std::net::SocketAddr,
        zone: &str,
    ) -> Result<super::body::ContainerDns, String> {
        let ip = addr.ip();
        if addr.port() != 53 {
            return Err(format!(
                "--dns {addr}: containers can only be given a resolver on port 53"
            ));
        }
        if ip.is_loopback() || ip.is_unspecified() {
            return Err(format!(
                "--dns {addr}: a container cannot reach the host's {ip} (use an address such as \
                 the docker bridge's gateway, 172.17.0.1)"
            ));
        }
        Ok(super::body::ContainerDns {
            server: ip,
            search: zone.trim_end_matches('.').to_string(),
        })
    }
}

/// A connection to the engine, negotiated lazily and again after each outage.
pub(crate) struct Client {
    base: Docker,
    negotiated: tokio::sync::Mutex<Option<Docker>>,
    /// What the engine said it cannot enforce, from its `info` at the last negotiation.
    limits_note: Mutex<Option<String>>,
}

impl Client {
    /// A client over `base` that negotiates on first use.
    pub(crate) fn new(base: Docker) -> Self {
        Client {
            base,
            negotiated: tokio::sync::Mutex::new(None),
            limits_note: Mutex::new(None),
        }
    }

    /// What the engine reported it cannot enforce, as a sentence for `status`.
    pub(crate) fn limits_note(&self) -> Option<String> {
        self.limits_note.lock().expect("note lock").clone()
    }

    /// The negotiated client, negotiating first if needed.
    pub(crate) async fn get(&self) -> Result<Docker, RuntimeError> {
        let mut negotiated = self.negotiated.lock().await;
        if let Some(docker) = negotiated.as_ref() {
            return Ok(docker.clone());
        }
        let docker = self
            .base
            .clone()
            .negotiate_version()
            .await
            .map_err(|e| engine_error("negotiate the API version", e))?;
        if let Ok(info) = docker.info().await {
            let mut missing = Vec::new();
            if info.cpu_cfs_quota == Some(false) {
                missing.push("cpu");
            }
            if info.memory_limit == Some(false) {
                missing.push("memory");
            }
            let note = (!missing.is_empty()).then(|| {
                format!(
                    "{} limits not enforced: the Docker engine reports no support",
                    missing.join("/")
                )
            });
            *self.limits_note.lock().expect("note lock") = note;
        }
        *negotiated = Some(docker.clone());
        Ok(docker)
    }

    /// Forgets the negotiated client so that the next call negotiates again.
    pub(crate) async fn invalidate(&self) {
        *self.negotiated.lock().await = None;
    }
}
