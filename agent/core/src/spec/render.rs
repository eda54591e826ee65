//! Writing a typed spec back in the user's format: complete (every default spelled out) and
//! canonical, so that two equal specs render identically and parsing the text gives the spec back.

use toml::{Table, Value};

use super::duration::format_duration_ms;
use super::*;
use crate::resources::{format_cpu_millis, format_memory_bytes};

/// Sections in the order a person reads them (the TOML writer alone would sort them).
const ORDER: [&str; 16] = [
    "name",
    "replicas",
    "restarted_at",
    "stop_grace",
    "user",
    "process",
    "container",
    "resources",
    "placement",
    "health",
    "restart",
    "update",
    "settings",
    "secret_env",
    "reload",
    "volumes",
];

pub(crate) fn to_toml_string(spec: &WorkloadSpec) -> String {
    let table = to_table(spec);
    let mut out = String::new();
    for key in ORDER {
        let Some(value) = table.get(key) else {
            continue;
        };
        if value.is_table() || value.is_array() && key == "volumes" {
            out.push('\n');
        }
        let mut one = Table::new();
        one.insert(key.to_string(), value.clone());
        match toml::to_string(&one) {
            Ok(text) => out.push_str(&text),
            Err(e) => out.push_str(&format!("# cannot render `{key}`: {e}\n")),
        }
    }
    debug_assert!(
        table.keys().all(|k| ORDER.contains(&k.as_str())),
        "a section is missing from ORDER"
    );
    out
}

pub(crate) fn to_json_string(spec: &WorkloadSpec) -> String {
    serde_json::to_string_pretty(&to_table(spec))
        .unwrap_or_else(|e| format!("\"cannot render this spec: {e}\""))
}

fn strings(items: &[String]) -> Value {
    Value::Array(items.iter().cloned().map(Value::String).collect())
}

fn string_map(map: &BTreeMap<String, String>) -> Value {
    Value::Table(
        map.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn duration(ms: u64) -> Value {
    Value::String(format_duration_ms(ms))
}

fn table<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Table(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn to_table(spec: &WorkloadSpec) -> Table {
    let mut t = Table::new();
    t.insert("name".into(), Value::String(spec.name.clone()));
    t.insert("replicas".into(), Value::Integer(spec.replicas.into()));
    if let Some(stamp) = &spec.restarted_at {
        t.insert("restarted_at".into(), Value::String(stamp.clone()));
    }
    if let Some(ms) = spec.stop_grace_ms {
        t.insert("stop_grace".into(), duration(ms));
    }
    if let Some(user) = &spec.user {
        t.insert("user".into(), Value::String(user.clone()));
    }
    if let Some(secrets) = &spec.secret_env {
        t.insert("secret_env".into(), string_map(secrets));
    }
    match &spec.run {
        Run::Process(p) => {
            let mut process = Table::new();
            process.insert("command".into(), strings(&p.command));
            if !p.env.is_empty() {
                process.insert("env".into(), string_map(&p.env));
            }
            if let Some(dir) = &p.working_dir {
                process.insert("working_dir".into(), Value::String(dir.clone()));
            }
            if !p.ports.is_empty() {
                let ports = p.ports.iter().map(named_port).collect();
                process.insert("ports".into(), Value::Array(ports));
            }
            t.insert("process".into(), Value::Table(process));
        }
        Run::Container(c) => {
            let mut container = Table::new();
            container.insert("image".into(), Value::String(c.image.clone()));
            if !c.command.is_empty() {
                container.insert("command".into(), strings(&c.command));
            }
            if !c.env.is_empty() {
                container.insert("env".into(), string_map(&c.env));
            }
            if !c.ports.is_empty() {
                container.insert(
                    "ports".into(),
                    Value::Array(c.ports.iter().map(port).collect()),
                );
            }
            container.insert("pull".into(), Value::String(c.pull.as_str().into()));
            t.insert("container".into(), Value::Table(container));
        }
    }
    let resources = table([
        (
            "cpu",
            Value::String(format_cpu_millis(spec.resources.cpu_millis)),
        ),
        (
            "memory",
            Value::String(format_memory_bytes(spec.resources.memory_bytes)),
        ),
    ]);
    t.insert("resources".into(), resources);
    let p = &spec.placement;
    let spread = match p.spread {
        Spread::Node => "node",
        Spread::Zone => "zone",
    };
    let mut placement = table([
        ("spread", Value::String(spread.into())),
        (
            "constraints",
            Value::Array(
                p.constraints
                    .iter()
                    .map(|c| Value::String(c.to_string()))
                    .collect(),
            ),
        ),
        ("exclusive", Value::Boolean(p.exclusive)),
        ("priority", Value::Integer(p.priority.into())),
    ]);
    if let Value::Table(placement) = &mut placement {
        if let Some(ms) = p.sticky_for_ms {
            placement.insert("sticky_for".into(), duration(ms));
        }
        if let Some(on) = p.on_data_loss {
            placement.insert("on_data_loss".into(), Value::String(on.as_str().into()));
        }
    }
    t.insert("placement".into(), placement);
    if let Some(h) = &spec.health {
        t.insert("health".into(), health(h));
    }
    t.insert("restart".into(), restart(&spec.restart));
    let u = &spec.update;
    let update = table([
        ("max_unavailable", Value::Integer(u.max_unavailable.into())),
        ("max_surge", Value::Integer(u.max_surge.into())),
        ("auto_rollback", Value::Boolean(u.auto_rollback)),
        (
            "progress_deadline",
            Value::String(format_duration_ms(u.progress_deadline_ms)),
        ),
        (
            "failure_threshold",
            Value::Integer(u.failure_threshold.into()),
        ),
    ]);
    t.insert("update".into(), update);
    if !spec.settings.is_empty() {
        t.insert("settings".into(), string_map(&spec.settings));
    }
    if let Some(hook) = &spec.reload {
        let reload = match hook {
            ReloadHook::Signal(s) => table([("signal", Value::String(signal_name(*s).into()))]),
            ReloadHook::Exec { command } => table([("command", strings(command))]),
        };
        t.insert("reload".into(), reload);
    }
    if !spec.volumes.is_empty() {
        let volumes = spec.volumes.iter().map(volume).collect();
        t.insert("volumes".into(), Value::Array(volumes));
    }
    t
}

fn volume(v: &Volume) -> Value {
    let mut t = Table::new();
    t.insert("name".into(), Value::String(v.name.clone()));
    t.insert("kind".into(), Value::String(v.kind.as_str().into()));
    let optional = [
        ("path", &v.path),
        ("host_path", &v.host_path),
        ("source", &v.source),
    ];
    for (key, value) in optional {
        if let Some(text) = value {
            t.insert(key.into(), Value::String(text.clone()));
        }
    }
    t.insert("read_only".into(), Value::Boolean(v.read_only));
    Value::Table(t)
}

fn protocol(p: Protocol) -> Value {
    Value::String(p.as_str().into())
}

fn port(p: &PortMapping) -> Value {
    let mut t = Table::new();
    if let Some(name) = &p.name {
        t.insert("name".into(), Value::String(name.clone()));
    }
    t.insert("container".into(), Value::Integer(p.container.into()));
    if let Some(host) = p.host {
        t.insert("host".into(), Value::Integer(host.into()));
    }
    t.insert("protocol".into(), protocol(p.protocol));
    Value::Table(t)
}

fn named_port(p: &NamedPort) -> Value {
    let mut t = Table::new();
    t.insert("name".into(), Value::String(p.name.clone()));
    if let Some(port) = p.port {
        t.insert("port".into(), Value::Integer(port.into()));
    }
    t.insert("protocol".into(), protocol(p.protocol));
    Value::Table(t)
}

fn port_ref(port: &PortRef) -> Value {
    match port {
        PortRef::Number(n) => Value::Integer((*n).into()),
        PortRef::Named(name) => Value::String(name.clone()),
    }
}

fn health(h: &HealthCheck) -> Value {
    let (kind, probe) = match &h.probe {
        Probe::Exec { command } => ("exec", table([("command", strings(command))])),
        Probe::Tcp { port } => ("tcp", table([("port", port_ref(port))])),
        Probe::Http { port, path } => (
            "http",
            table([
                ("port", port_ref(port)),
                ("path", Value::String(path.clone())),
            ]),
        ),
    };
    table([
        (kind, probe),
        ("interval", duration(h.interval_ms)),
        ("timeout", duration(h.timeout_ms)),
        (
            "failure_threshold",
            Value::Integer(h.failure_threshold.into()),
        ),
        ("start_grace", duration(h.start_grace_ms)),
    ])
}

fn restart(r: &RestartPolicy) -> Value {
    table([
        ("policy", Value::String(r.policy.as_str().into())),
        ("backoff_initial", duration(r.backoff_initial_ms)),
        ("backoff_max", duration(r.backoff_max_ms)),
        ("backoff_reset", duration(r.backoff_reset_ms)),
    ])
}

/// The name the `signal` field takes.
pub(crate) fn signal_name(s: ReloadSignal) -> &'static str {
    match s {
        ReloadSignal::Hup => "HUP",
        ReloadSignal::Usr1 => "USR1",
        ReloadSignal::Usr2 => "USR2",
    }
}
