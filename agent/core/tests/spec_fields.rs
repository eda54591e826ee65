//! No spec field that parses but does nothing.
//!
//! [`FIELDS`] names, for every field of the typed spec, the code outside `agent/core/src/spec/`
//! that reads it (a file and an identifier in it), or says that validation refuses any value but
//! its inert default. The fields are not listed by hand: they are enumerated from the serde form
//! of sample specs that together use every field and every variant, so a field added to the spec
//! types without a line here fails [`every_field_has_a_reader`], and a reader that moves away
//! fails [`every_reader_mentions_its_field`].
#![allow(
    clippy::disallowed_methods,
    reason = "the test reads the repository's sources; the no-I/O rule is for the library"
)]

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use shoal_core::spec::{Probe, ReloadHook, Run, WorkloadSpec};

/// Who makes a field mean something.
enum Reader {
    /// A file (from the repository root) and an identifier in it that reads the field. The
    /// identifier names the field (or, for an enum value, the variant).
    Code(&'static str, &'static str),
    /// Nothing reads it yet: validation refuses every value but the default. The TOML line that
    /// sets another value, and what the refusal says. No field is refused today (the last one,
    /// `update.auto_rollback`, is implemented); kept for the next field that parses before
    /// anything acts on it.
    #[allow(dead_code)]
    Refused(&'static str, &'static str),
}

use Reader::{Code, Refused};

const CONTROL: &str = "agent/src/node/runtime/process/control.rs";
const DOCKER_BODY: &str = "agent/src/node/runtime/docker/body.rs";
const DOCKER_PULL: &str = "agent/src/node/runtime/docker/pull.rs";
const SPAWN: &str = "agent/src/node/runtime/process/spawn.rs";
const VIEW: &str = "agent/src/state/mesh/view.rs";
/// Where a sticky replica waits for its data.
const DATA: &str = "agent/core/src/reconcile/data.rs";
const VOLUMES: &str = "agent/src/node/runtime/volumes.rs";
/// Where the container create body mounts volumes.
const DOCKER_MOUNTS: &str = "agent/src/node/runtime/docker/body.rs";

/// Every field of the serde form of [`WorkloadSpec`], by path: `.` between fields, `[]` for the
/// elements of an array, the variant name for an enum. A listed path is a leaf: maps (env,
/// settings) and constraints (parsed from one string) are read whole.
const FIELDS: &[(&str, Reader)] = &[
    ("name", Code(VIEW, "spec.name")),
    ("replicas", Code(VIEW, "spec.replicas")),
    ("run.Process.command", Code(SPAWN, ".command")),
    ("run.Process.env", Code(SPAWN, "&spec.env")),
    ("run.Process.working_dir", Code(SPAWN, "spec.working_dir")),
    (
        "run.Process.ports[].name",
        Code("agent/src/node/dns/table.rs", "port.name.clone()"),
    ),
    (
        "run.Process.ports[].port",
        Code("agent/src/node/dns/table.rs", "port.port"),
    ),
    (
        "run.Process.ports[].protocol",
        Code("agent/src/node/dns/table.rs", "port.protocol"),
    ),
    ("run.Container.ports[].name", Code(DOCKER_BODY, "port.name")),
    ("run.Container.image", Code(DOCKER_BODY, "spec.image")),
    ("run.Container.pull", Code(DOCKER_PULL, "spec.pull")),
    ("run.Container.command", Code(DOCKER_BODY, "spec.command")),
    ("run.Container.env", Code(DOCKER_BODY, "&spec.env")),
    (
        "run.Container.ports[].container",
        Code(DOCKER_BODY, "port.container"),
    ),
    ("run.Container.ports[].host", Code(DOCKER_BODY, "port.host")),
    (
        "run.Container.ports[].protocol",
        Code(DOCKER_BODY, "port.protocol"),
    ),
    (
        "resources.cpu_millis",
        Code(DOCKER_BODY, "resources.cpu_millis"),
    ),
    (
        "resources.memory_bytes",
        Code(DOCKER_BODY, "resources.memory_bytes"),
    ),
    // Never written by a spec (the decoder has no such key): placement sets it from the
    // spec's named ports.
    ("resources.ports", Code(VIEW, "with_ports")),
    ("placement.spread", Code(VIEW, "spec.placement.spread")),
    (
        "placement.constraints",
        Code(VIEW, "spec.placement.constraints"),
    ),
    (
        "placement.exclusive",
        Code(VIEW, "spec.placement.exclusive"),
    ),
    ("placement.priority", Code(VIEW, "spec.placement.priority")),
    (
        "placement.sticky_for_ms",
        Code(DATA, "placement.sticky_for_ms()"),
    ),
    (
        "placement.on_data_loss",
        Code(DATA, "placement.on_data_loss()"),
    ),
    (
        "health.probe.Exec.command",
        Code(CONTROL, "Probe::Exec { command }"),
    ),
    (
        "health.probe.Tcp.port",
        Code(CONTROL, "Probe::Tcp { port }"),
    ),
    (
        "health.probe.Http.port",
        Code(CONTROL, "Probe::Http { port, path }"),
    ),
    (
        "health.probe.Http.path",
        Code(CONTROL, "Probe::Http { port, path }"),
    ),
    (
        "health.interval_ms",
        Code(DOCKER_BODY, "health.interval_ms"),
    ),
    ("health.timeout_ms", Code(DOCKER_BODY, "health.timeout_ms")),
    (
        "health.failure_threshold",
        Code(
            "agent/core/src/reconcile/health.rs",
            "check.failure_threshold",
        ),
    ),
    (
        "health.start_grace_ms",
        Code("agent/core/src/reconcile/health.rs", "check.start_grace_ms"),
    ),
    (
        "restart.policy",
        Code("agent/core/src/reconcile/track.rs", "policy.policy"),
    ),
    (
        "restart.backoff_initial_ms",
        Code("agent/core/src/reconcile/health.rs", ".backoff_initial_ms"),
    ),
    (
        "restart.backoff_max_ms",
        Code(
            "agent/core/src/reconcile/health.rs",
            "policy.backoff_max_ms",
        ),
    ),
    (
        "restart.backoff_reset_ms",
        Code(
            "agent/core/src/reconcile/track.rs",
            "policy.backoff_reset_ms",
        ),
    ),
    (
        "update.max_unavailable",
        Code(
            "agent/core/src/reconcile/update.rs",
            "spec.update.max_unavailable",
        ),
    ),
    (
        "update.max_surge",
        Code(
            "agent/core/src/reconcile/update.rs",
            "spec.update.max_surge",
        ),
    ),
    (
        "update.auto_rollback",
        Code(
            "agent/src/node/host/rollout.rs",
            "spec.update.auto_rollback",
        ),
    ),
    (
        "update.progress_deadline_ms",
        Code(
            "agent/core/src/rollout.rs",
            "spec.update.progress_deadline_ms",
        ),
    ),
    (
        "update.failure_threshold",
        Code("agent/core/src/rollout.rs", "spec.update.failure_threshold"),
    ),
    (
        "settings",
        Code("agent/src/node/runtime/mod.rs", "request.spec.settings"),
    ),
    (
        "restarted_at",
        Code(
            "agent/core/src/reconcile/update.rs",
            "old.restarted_at != new.restarted_at",
        ),
    ),
    (
        "stop_grace_ms",
        Code(
            "agent/core/src/reconcile/plan.rs",
            ".and_then(|spec| spec.stop_grace_ms)",
        ),
    ),
    (
        "user",
        Code(
            "agent/src/node/runtime/process/user.rs",
            "request.spec.user.as_deref()",
        ),
    ),
    (
        "secret_env",
        Code("agent/src/node/runtime/mod.rs", "request.spec.secret_env"),
    ),
    ("reload.Signal", Code(CONTROL, "ReloadHook::Signal")),
    ("volumes[].name", Code(VOLUMES, "volume.name")),
    ("volumes[].kind", Code(VOLUMES, "match volume.kind")),
    ("volumes[].path", Code(DOCKER_MOUNTS, "m.volume.path")),
    ("volumes[].host_path", Code(VOLUMES, "volume.host_path")),
    ("volumes[].source", Code(VOLUMES, "volume.source")),
    (
        "volumes[].read_only",
        Code(DOCKER_MOUNTS, "m.volume.read_only"),
    ),
    (
        "reload.Exec.command",
        Code(CONTROL, "ReloadHook::Exec { command }"),
    ),
];

const BASE: &str = "name = \"web\"\nreplicas = 2\n";
const RESOURCES: &str = "[resources]\ncpu = \"250m\"\nmemory = \"64Mi\"\n";

/// Specs that together set every field and use every variant, each field away from its default
/// where it has one.
fn samples() -> Vec<WorkloadSpec> {
    let texts = [
        // A process with an exec probe, a signal hook and live settings.
        "[process]\ncommand = [\"web\", \"--port\", \"8080\"]\nworking_dir = \"/srv\"\n\
         ports = [{ name = \"http\", port = 8080, protocol = \"udp\" }]\n\
         env = { A = \"1\" }\n\
         [placement]\nspread = \"zone\"\nconstraints = [\"disk == ssd\"]\nexclusive = true\n\
         priority = 5\nsticky_for = \"10m\"\non_data_loss = \"start-empty\"\n\
         [health]\nexec = { command = [\"true\"] }\ninterval = \"5s\"\ntimeout = \"2s\"\n\
         failure_threshold = 4\nstart_grace = \"20s\"\n\
         [restart]\npolicy = \"on-failure\"\nbackoff_initial = \"1s\"\nbackoff_max = \"1m\"\n\
         backoff_reset = \"5m\"\n\
         [update]\nmax_unavailable = 2\n\
         [settings]\nlevel = \"debug\"\n[reload]\nsignal = \"HUP\"\n\
         [[volumes]]\nname = \"data\"\n",
        // A container with ports, a tcp probe and an exec hook.
        "[container]\nimage = \"nginx:1.27\"\ncommand = [\"nginx\"]\nenv = { B = \"2\" }\n\
         ports = [{ name = \"dns\", container = 80, host = 8080, protocol = \"udp\" }]\n\
         [health.tcp]\nport = 80\n\
         [reload]\ncommand = [\"nginx\", \"-s\", \"reload\"]\n\
         [[volumes]]\nname = \"etc\"\nkind = \"host\"\nhost_path = \"/etc/nginx\"\n\
         path = \"/etc/nginx\"\nread_only = true\n\
         [[volumes]]\nname = \"cache\"\nkind = \"docker\"\nsource = \"web-cache\"\n\
         path = \"/cache\"\n",
        // An http probe, and a surge (no fixed host port: a surge copy shares the host).
        "restarted_at = \"2026-12-01 21:30:00.123Z\"\nstop_grace = \"45s\"\nuser = \"app:app\"\nsecret_env = { DB_PASSWORD = \"hunter2\" }\n[container]\nimage = \"nginx:1.27\"\n[health.http]\nport = 80\npath = \"/healthz\"\n\
         [update]\nmax_surge = 3\n",
    ];
    texts
        .iter()
        .enumerate()
        .map(|(i, rest)| {
            // Top-level fields go before the first table.
            let (top, rest) = match rest.find("\n[") {
                Some(at) if !rest.starts_with('[') => rest.split_at(at + 1),
                _ => ("", *rest),
            };
            let text = format!("{BASE}{top}{RESOURCES}{rest}");
            WorkloadSpec::from_toml_str(&text, &format!("sample {i}"))
                .unwrap_or_else(|e| panic!("sample {i} is invalid:\n{e}"))
        })
        .collect()
}

/// The variants the samples must show. Does not compile when a variant is added: add a sample
/// that uses it, and its fields to [`FIELDS`].
fn variants(spec: &WorkloadSpec) -> Vec<&'static str> {
    let mut out = vec![match spec.run {
        Run::Process(_) => "run.Process",
        Run::Container(_) => "run.Container",
    }];
    out.extend(spec.health.as_ref().map(|h| match h.probe {
        Probe::Exec { .. } => "probe.Exec",
        Probe::Tcp { .. } => "probe.Tcp",
        Probe::Http { .. } => "probe.Http",
    }));
    out.extend(spec.reload.as_ref().map(|r| match r {
        ReloadHook::Signal(_) => "reload.Signal",
        ReloadHook::Exec { .. } => "reload.Exec",
    }));
    out
}

/// The leaf paths of `value`, stopping at paths listed in [`FIELDS`]. A `null` or an empty array
/// or map shows no field: its path goes to `empty`, and some sample must fill it.
fn leaves(value: &Value, path: &str, out: &mut BTreeSet<String>, empty: &mut BTreeSet<String>) {
    let listed = FIELDS.iter().any(|(p, _)| *p == path);
    let join = |key: &str| match path {
        "" => key.to_string(),
        _ => format!("{path}.{key}"),
    };
    match value {
        _ if listed => {
            out.insert(path.to_string());
        }
        Value::Object(map) if !map.is_empty() => {
            for (key, v) in map {
                leaves(v, &join(key), out, empty);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for v in items {
                leaves(v, &format!("{path}[]"), out, empty);
            }
        }
        Value::Null | Value::Object(_) | Value::Array(_) => {
            empty.insert(path.to_string());
        }
        _ => {
            out.insert(path.to_string());
        }
    }
}

fn repo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn every_field_has_a_reader() {
    let samples = samples();
    let shown: BTreeSet<&str> = samples.iter().flat_map(variants).collect();
    let expected = [
        "probe.Exec",
        "probe.Http",
        "probe.Tcp",
        "reload.Exec",
        "reload.Signal",
        "run.Container",
        "run.Process",
    ];
    assert_eq!(
        shown,
        expected.into_iter().collect(),
        "a variant has no sample"
    );
    let (mut found, mut empty) = (BTreeSet::new(), BTreeSet::new());
    for spec in &samples {
        leaves(
            &serde_json::to_value(spec).unwrap(),
            "",
            &mut found,
            &mut empty,
        );
    }
    let never_filled: Vec<&String> = empty
        .iter()
        .filter(|e| !found.iter().any(|f| f.starts_with(e.as_str())))
        .collect();
    assert!(
        never_filled.is_empty(),
        "no sample fills {never_filled:?}: set them in samples() so their fields show"
    );
    let listed: BTreeSet<String> = FIELDS.iter().map(|(p, _)| p.to_string()).collect();
    let unlisted: Vec<&String> = found.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "spec fields with no reader in FIELDS: {unlisted:?}. Name the code outside \
         agent/core/src/spec/ that reads each, or refuse every value but the default at \
         validation (a field that parses but does nothing misleads whoever writes it)"
    );
    let stale: Vec<&String> = listed.difference(&found).collect();
    assert!(
        stale.is_empty(),
        "FIELDS lists paths no sample spec has: {stale:?}"
    );
}

#[test]
fn every_reader_mentions_its_field() {
    for (path, reader) in FIELDS {
        let Code(file, ident) = reader else {
            continue;
        };
        assert!(
            !file.starts_with("agent/core/src/spec/"),
            "{path}: {file} is the spec's own code; name the code that acts on the field"
        );
        let field = path.rsplit('.').next().unwrap().trim_end_matches("[]");
        assert!(
            ident.contains(field),
            "{path}: the identifier {ident:?} does not name the field {field:?}"
        );
        let text = std::fs::read_to_string(repo_root().join(file))
            .unwrap_or_else(|e| panic!("{path}: cannot read {file}: {e}"));
        assert!(
            text.contains(ident),
            "{path}: {file} no longer contains {ident:?}; update FIELDS with the code that reads \
             the field now"
        );
    }
}

#[test]
fn a_field_nothing_reads_is_refused_with_a_location() {
    for (path, reader) in FIELDS {
        let Refused(toml, message) = reader else {
            continue;
        };
        let text = format!("{BASE}[process]\ncommand = [\"web\"]\n{RESOURCES}{toml}");
        let errors = WorkloadSpec::from_toml_str(&text, "web.toml")
            .expect_err(&format!("{path}: a value nothing acts on was accepted"))
            .to_string();
        let line = text.lines().count();
        assert!(
            errors.starts_with(&format!("web.toml:{line}:")) && errors.contains(message),
            "{path}: expected `web.toml:{line}:COL: {message}...`, got:\n{errors}"
        );
    }
}
