//! Translations between Shoal's vocabulary and the engine's: labels, the container create body,
//! inspect results as [`RuntimeInstance`]s, and bollard errors as [`RuntimeError`]s.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, HealthConfig,
    HostConfig, HostConfigLogConfig, Mount, MountType, PortBinding, RestartPolicy,
    RestartPolicyNameEnum,
};

use crate::core::instance::{Phase, ReplicaId, RuntimeInstance};
use crate::core::spec::{ContainerSpec, Probe, Protocol};
use crate::node::runtime::volumes::{Mounted, Source};
use crate::node::runtime::{instance_env, RuntimeError, StartRequest};

/// Marks every container Shoal manages.
pub const LABEL_MANAGED: &str = "shoal.managed";
/// The workload name.
pub const LABEL_WORKLOAD: &str = "shoal.workload";
/// The replica index.
pub const LABEL_REPLICA: &str = "shoal.replica";
/// The spec version the container was created from.
pub const LABEL_VERSION: &str = "shoal.version";
/// The node whose agent manages it (several agents may share one engine).
pub const LABEL_NODE: &str = "shoal.node";
/// An exclusive replica's fencing token (also in its environment as `SHOAL_FENCE_TOKEN`).
pub const LABEL_FENCE_TOKEN: &str = "shoal.fence-token";
/// The prefix of the labels that record the host port of each named port
/// (`shoal.port.http=20001`; also in its environment as `SHOAL_PORT_HTTP`).
pub const LABEL_PORT_PREFIX: &str = "shoal.port.";

/// The named ports recorded in a container's labels.
pub(crate) fn ports_of(labels: &HashMap<String, String>) -> BTreeMap<String, u16> {
    labels
        .iter()
        .filter_map(|(k, v)| {
            Some((
                k.strip_prefix(LABEL_PORT_PREFIX)?.to_string(),
                v.parse().ok()?,
            ))
        })
        .collect()
}

/// The label filters that select this node's containers.
pub(crate) fn node_filters(node: &str) -> HashMap<String, Vec<String>> {
    let labels = vec![
        format!("{LABEL_MANAGED}=true"),
        format!("{LABEL_NODE}={node}"),
    ];
    HashMap::from([("label".to_string(), labels)])
}

/// `80/tcp`, the engine's name for a container port.
pub(crate) fn port_key(port: u16, protocol: Protocol) -> String {
    match protocol {
        Protocol::Tcp => format!("{port}/tcp"),
        Protocol::Udp => format!("{port}/udp"),
    }
}

/// The create body: labels, environment, command, published ports, limits, no engine restarts,
/// and the spec's exec probe as the engine's health check (so `docker ps` shows health too).
/// The resolver a container is given (`--dns` of its agent, when a container can reach it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerDns {
    /// The agent's DNS address (port 53: the engine cannot give a container another port).
    pub server: std::net::IpAddr,
    /// The zone, as a search domain (`shoal`): `web` then resolves as `web.shoal.`.
    pub search: String,
}

/// The `json-file` driver within `bound`: each file at most bytes / files (the engine rotates
/// before a write would pass it), at most `files` of them. The engine's default `json-file` keeps
/// everything a container ever printed.
fn log_config(bound: super::LogBound) -> HostConfigLogConfig {
    let files = bound.files.max(1);
    let per_file = (bound.bytes_max / u64::from(files)).max(1);
    HostConfigLogConfig {
        typ: Some("json-file".to_string()),
        config: Some(HashMap::from([
            ("max-size".to_string(), per_file.to_string()),
            ("max-file".to_string(), files.to_string()),
        ])),
    }
}

/// Every container's `security_opt`.
pub(crate) const NO_NEW_PRIVILEGES: &str = "no-new-privileges";

/// Who a container runs as: the spec's `user` as written, else the agent's workload user as
/// `uid:gid` (resolved on the host, so an image's default user, often root, never applies);
/// `None` (the agent's own user, embedding and tests only) leaves the image's. A `user` that is
/// root by its form is refused where root is not allowed; a name the image maps to uid 0 is
/// the image's business (say `user = "root"` in the spec for images that need root).
pub(crate) fn container_user(
    request: &StartRequest,
    users: &crate::node::runtime::users::WorkloadUsers,
) -> Result<Option<String>, String> {
    match &request.spec.user {
        Some(text) => match request.spec.asks_root() {
            true if !users.root_allowed => Err(crate::node::runtime::users::root_refusal(
                &request.replica,
                text,
            )),
            _ => Ok(Some(text.clone())),
        },
        None => Ok(users.default.map(|r| format!("{}:{}", r.uid, r.gid))),
    }
}

pub(crate) fn create_body(
    request: &StartRequest,
    spec: &ContainerSpec,
    dns: Option<&ContainerDns>,
    volumes: &[crate::node::runtime::volumes::Mounted],
    log_bound: Option<super::LogBound>,
    user: Option<String>,
    publish_ip: Option<std::net::IpAddr>,
) -> ContainerCreateBody {
    let replica = &request.replica;
    let mut labels = HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_WORKLOAD.to_string(), replica.workload.clone()),
        (LABEL_REPLICA.to_string(), replica.replica.to_string()),
        (LABEL_VERSION.to_string(), request.spec_version.clone()),
        (LABEL_NODE.to_string(), request.node.clone()),
    ]);
    if let Some(token) = request.fence_token {
        labels.insert(LABEL_FENCE_TOKEN.to_string(), token.to_string());
    }
    for (name, port) in &request.ports {
        labels.insert(format!("{LABEL_PORT_PREFIX}{name}"), port.to_string());
    }
    let mut env = instance_env(request, &spec.env);
    env.extend(crate::node::runtime::volumes::volume_env(volumes, true));
    let env = env.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut exposed = Vec::new();
    let mut bindings = HashMap::new();
    for port in &spec.ports {
        let key = port_key(port.container, port.protocol);
        exposed.push(key.clone());
        // A named port without a fixed host port was allocated by the agent.
        let allocated = port.name.as_ref().and_then(|n| request.ports.get(n));
        let host_port = port.host.or(allocated.copied());
        let binding = PortBinding {
            host_ip: publish_ip.map(|ip| ip.to_string()),
            host_port: Some(host_port.map(|p| p.to_string()).unwrap_or_default()),
        };
        bindings.insert(key, Some(vec![binding]));
    }
    let resources = request.spec.resources;
    let host_config = HostConfig {
        nano_cpus: Some(resources.cpu_millis.saturating_mul(1_000_000) as i64),
        memory: Some(resources.memory_bytes as i64),
        port_bindings: Some(bindings),
        mounts: (!volumes.is_empty()).then(|| mounts_of(volumes)),
        dns: dns.map(|d| vec![d.server.to_string()]),
        dns_search: dns.map(|d| vec![d.search.clone()]),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        log_config: log_bound.map(log_config),
        // No setuid binary or file capability in the image raises a process's privileges.
        security_opt: Some(vec![NO_NEW_PRIVILEGES.to_string()]),
        ..HostConfig::default()
    };
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: (!spec.command.is_empty()).then(|| spec.command.clone()),
        env: Some(env),
        labels: Some(labels),
        exposed_ports: Some(exposed),
        healthcheck: health_config(request),
        host_config: Some(host_config),
        // The spec's `user` as given (the engine resolves names inside the image, `docker run
        // --user`), or the agent's workload user as numbers ([`container_user`]).
        user,
        ..ContainerCreateBody::default()
    }
}

/// The engine's health check for an exec probe (durations in ns); none for tcp and http, which
/// the agent runs from the host.
fn health_config(request: &StartRequest) -> Option<HealthConfig> {
    let health = request.spec.health.as_ref()?;
    let Probe::Exec { command } = &health.probe else {
        return None;
    };
    let ns = |ms: u64| ms.saturating_mul(1_000_000) as i64;
    let mut test = vec!["CMD".to_string()];
    test.extend(command.iter().cloned());
    Some(HealthConfig {
        test: Some(test),
        interval: Some(ns(health.interval_ms)),
        timeout: Some(ns(health.timeout_ms)),
        retries: Some(i64::from(health.failure_threshold)),
        start_period: Some(ns(health.start_grace_ms)),
        start_interval: None,
    })
}

/// The replica and spec version recorded in a container's labels.
pub(crate) fn replica_of(labels: &HashMap<String, String>) -> Option<(ReplicaId, String)> {
    let workload = labels.get(LABEL_WORKLOAD)?;
    let replica = labels.get(LABEL_REPLICA)?.parse().ok()?;
    let version = labels.get(LABEL_VERSION).cloned().unwrap_or_default();
    Some((ReplicaId::new(workload, replica), version))
}

/// The observation of one inspected container; `None` if it lacks Shoal's labels.
pub(crate) fn instance_from_inspect(c: &ContainerInspectResponse) -> Option<RuntimeInstance> {
    let labels = c.config.as_ref()?.labels.as_ref()?;
    let (replica, spec_version) = replica_of(labels)?;
    let state = c.state.clone().unwrap_or_default();
    let status = state.status.unwrap_or(ContainerStateStatusEnum::EMPTY);
    let phase = match status {
        ContainerStateStatusEnum::RUNNING
        | ContainerStateStatusEnum::PAUSED
        | ContainerStateStatusEnum::RESTARTING => Phase::Running,
        _ => Phase::Exited,
    };
    let started_at_ms = state.started_at.as_deref().and_then(parse_rfc3339_ms);
    let finished_at_ms = state.finished_at.as_deref().and_then(parse_rfc3339_ms);
    let exited = phase == Phase::Exited;
    let mut error = state.error.filter(|e| !e.is_empty());
    if exited && state.oom_killed == Some(true) {
        error = Some(super::observed::OOM_ERROR.into());
    }
    if status == ContainerStateStatusEnum::CREATED {
        error = Some("created but never started".into());
    }
    Some(RuntimeInstance {
        handle: c.id.clone()?,
        replica,
        spec_version,
        phase,
        started_at_ms: started_at_ms.unwrap_or_default(),
        exited_at_ms: exited.then(|| finished_at_ms.or(started_at_ms).unwrap_or_default()),
        exit_code: if exited {
            state.exit_code.map(|c| c as i32)
        } else {
            None
        },
        error,
        fence_token: labels.get(LABEL_FENCE_TOKEN).and_then(|t| t.parse().ok()),
        ports: ports_of(labels),
    })
}

/// Parses the engine's UTC timestamps (`2024-05-01T12:00:00.123456789Z`) to ms since the epoch;
/// `None` for the zero time (`0001-01-01T00:00:00Z`, "never") or anything unexpected.
pub(crate) fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hour, minute, second) = (t.next()??, t.next()??, t.next()??);
    if year < 1970 || !(1..=12).contains(&month) || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm), valid for the proleptic Gregorian calendar.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let millis: i64 = format!("{fraction:0<3}")[..3].parse().ok()?;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(secs * 1000 + millis).ok()
}

/// A bollard error as a runtime error: transport failures mean the engine is unreachable; an
/// answer from the engine is a refusal of `operation`.
pub(crate) fn engine_error(operation: &'static str, e: bollard::errors::Error) -> RuntimeError {
    use bollard::errors::Error as E;
    match e {
        E::DockerResponseServerError {
            status_code,
            message,
        } => RuntimeError::Engine {
            operation,
            detail: format!("{message} (HTTP {status_code})"),
        },
        E::DockerStreamError { .. }
        | E::JsonDataError { .. }
        | E::JsonSerdeError { .. }
        | E::APIVersionParseError {}
        | E::DockerContainerWaitError { .. } => RuntimeError::Engine {
            operation,
            detail: error_chain(&e),
        },
        other => RuntimeError::EngineUnavailable {
            detail: error_chain(&other),
        },
    }
}

/// The HTTP status of an engine refusal, if that is what `e` is.
pub(crate) fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// An error and its sources, joined by ": " (hyper's errors say little at the top level).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// The create body's mounts for `mounts`.
fn mounts_of(mounts: &[Mounted]) -> Vec<Mount> {
    mounts
        .iter()
        .map(|m| {
            let (typ, source) = match &m.source {
                Source::Dir(dir) => (MountType::BIND, dir.display().to_string()),
                Source::Named { name, .. } => (MountType::VOLUME, name.clone()),
            };
            Mount {
                target: m.volume.path.clone(),
                source: Some(source),
                typ: Some(typ),
                read_only: Some(m.volume.read_only),
                ..Mount::default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{log_config, parse_rfc3339_ms};

    #[test]
    fn the_fencing_token_is_labelled_passed_and_read_back() {
        use super::*;
        let toml = "name = \"db\"\n[container]\nimage = \"busybox:1\"\n\
                    [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";
        let spec = crate::core::spec::WorkloadSpec::from_toml_str(toml, "test.toml").unwrap();
        let mut request = StartRequest::new(
            ReplicaId::new("db", 0),
            std::sync::Arc::new(spec),
            "v1",
            "n1",
        );
        request.fence_token = Some(42);
        let crate::core::spec::Run::Container(container) = &request.spec.run else {
            unreachable!("a container spec");
        };
        let body = create_body(&request, container, None, &[], None, None, None);
        let labels = body.labels.unwrap();
        assert_eq!(labels[LABEL_FENCE_TOKEN], "42");
        assert!(body
            .env
            .unwrap()
            .contains(&"SHOAL_FENCE_TOKEN=42".to_string()));
        let inspected = ContainerInspectResponse {
            id: Some("c1".into()),
            config: Some(bollard::models::ContainerConfig {
                labels: Some(labels),
                ..Default::default()
            }),
            ..Default::default()
        };
        let instance = instance_from_inspect(&inspected).unwrap();
        assert_eq!(instance.fence_token, Some(42), "adoption keeps it");
    }

    #[test]
    fn containers_get_the_agents_resolver_only_where_they_can_use_it() {
        use super::*;
        use crate::node::runtime::docker::DockerConfig;
        let ok = DockerConfig::container_dns("172.17.0.1:53".parse().unwrap(), "shoal.").unwrap();
        assert_eq!(ok.search, "shoal");
        let loopback = DockerConfig::container_dns("127.0.0.1:53".parse().unwrap(), "shoal.");
        assert!(loopback.unwrap_err().contains("cannot reach"));
        let port = DockerConfig::container_dns("172.17.0.1:5353".parse().unwrap(), "shoal.");
        assert!(port.unwrap_err().contains("port 53"));
        let toml = "name = \"web\"\n[container]\nimage = \"busybox:1\"\n\
                    ports = [{ name = \"http\", container = 80 }, { container = 81 }]\n\
                    [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";
        let spec = crate::core::spec::WorkloadSpec::from_toml_str(toml, "test.toml").unwrap();
        let mut request = StartRequest::new(
            ReplicaId::new("web", 0),
            std::sync::Arc::new(spec),
            "v1",
            "n1",
        );
        request.ports = std::collections::BTreeMap::from([("http".to_string(), 20001)]);
        let crate::core::spec::Run::Container(container) = &request.spec.run else {
            unreachable!("a container spec");
        };
        let body = create_body(&request, container, Some(&ok), &[], None, None, None);
        let host = body.host_config.unwrap();
        assert_eq!(host.dns, Some(vec!["172.17.0.1".to_string()]));
        assert_eq!(host.dns_search, Some(vec!["shoal".to_string()]));
        let bindings = host.port_bindings.unwrap();
        let port = |key: &str| bindings[key].as_ref().unwrap()[0].host_port.clone();
        assert_eq!(port("80/tcp"), Some("20001".to_string()), "allocated");
        assert_eq!(port("81/tcp"), Some(String::new()), "the engine picks");
        assert_eq!(body.labels.unwrap()["shoal.port.http"], "20001");
        assert_eq!(
            bindings["80/tcp"].as_ref().unwrap()[0].host_ip,
            None,
            "every interface"
        );

        // Published on the agent's address: the body says so, and the host reaches the named
        // port there (on loopback when published everywhere).
        let ip: std::net::IpAddr = "10.0.0.7".parse().unwrap();
        let body = create_body(&request, container, None, &[], None, None, Some(ip));
        let bindings = body
            .host_config
            .as_ref()
            .unwrap()
            .port_bindings
            .clone()
            .unwrap();
        for key in ["80/tcp", "81/tcp"] {
            let binding = &bindings[key].as_ref().unwrap()[0];
            assert_eq!(binding.host_ip.as_deref(), Some("10.0.0.7"), "{key}");
        }
        let inspected = |body: ContainerCreateBody| ContainerInspectResponse {
            config: Some(bollard::models::ContainerConfig {
                labels: body.labels,
                ..Default::default()
            }),
            host_config: body.host_config,
            ..Default::default()
        };
        let addr = crate::node::runtime::docker::exec::named_addr(&inspected(body), "http");
        assert_eq!(addr, Ok("10.0.0.7:20001".parse().unwrap()));
        let everywhere = create_body(&request, container, None, &[], None, None, None);
        let addr = crate::node::runtime::docker::exec::named_addr(&inspected(everywhere), "http");
        assert_eq!(addr, Ok("127.0.0.1:20001".parse().unwrap()));
    }

    #[test]
    fn a_bound_log_is_json_file_in_files_of_the_bound_over_their_count() {
        let bound = super::super::LogBound {
            bytes_max: 10 << 20,
            files: 2,
        };
        let config = log_config(bound);
        assert_eq!(config.typ.as_deref(), Some("json-file"));
        let options = config.config.unwrap();
        assert_eq!(options["max-size"], "5242880");
        assert_eq!(options["max-file"], "2");
        // Never a zero size (the engine would read it as no limit).
        let tiny = log_config(super::super::LogBound {
            bytes_max: 1,
            files: 4,
        });
        assert_eq!(tiny.config.unwrap()["max-size"], "1");
    }

    #[test]
    fn engine_timestamps() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_ms("1970-01-02T00:00:01.5Z"), Some(86_401_500));
        assert_eq!(
            parse_rfc3339_ms("2024-02-29T12:34:56.789123456Z"),
            Some(1_709_210_096_789)
        );
        assert_eq!(parse_rfc3339_ms("0001-01-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339_ms("2024-02-29T12:34:56+01:00"), None);
        assert_eq!(parse_rfc3339_ms("garbage"), None);
    }
}
