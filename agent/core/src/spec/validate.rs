//! The rules a typed spec must satisfy: names, limits, uniqueness and cross-field consistency.
//! The same rules run after decoding a file and when a typed spec arrives from elsewhere, so a
//! spec that passed on one agent passes on every agent.

use super::check_policy;
use super::error::{SpecError, SpecErrors};
use super::reader::{index, join, Ctx};
use super::*;
use crate::resources::{format_cpu_millis, format_memory_bytes};

/// Problems found on a typed spec, by field path.
#[derive(Default)]
pub(crate) struct Report {
    problems: Vec<Problem>,
}

struct Problem {
    path: String,
    /// Other fields the problem depends on: if one of them was already reported, stay quiet.
    related: Vec<String>,
    message: String,
}

impl Report {
    pub(crate) fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.err_related(path, &[], message);
    }

    pub(crate) fn err_related(
        &mut self,
        path: impl Into<String>,
        related: &[&str],
        message: impl Into<String>,
    ) {
        self.problems.push(Problem {
            path: path.into(),
            related: related.iter().map(|r| r.to_string()).collect(),
            message: message.into(),
        });
    }

    /// Without a source: paths only.
    pub(crate) fn into_result<T>(self, ok: T) -> Result<T, SpecErrors> {
        if self.problems.is_empty() {
            return Ok(ok);
        }
        let errors = self.problems.into_iter().map(|p| SpecError {
            file: String::new(),
            location: None,
            path: p.path,
            message: p.message,
        });
        Err(SpecErrors::new(errors.collect()))
    }

    /// With a source: adds locations, and drops problems on fields already reported by decoding.
    pub(crate) fn locate_into(self, ctx: &mut Ctx) {
        for p in self.problems {
            if ctx.is_broken(&p.path) || p.related.iter().any(|r| ctx.is_broken(r)) {
                continue;
            }
            let at = ctx.locate(&p.path);
            ctx.problem(at, &p.path, p.message);
        }
    }
}

/// The message for an integer outside its bounds.
pub(crate) fn range_message(min: i128, max: i128, got: i128) -> String {
    format!("must be between {min} and {max}, got {got}")
}

/// Every rule, for a spec an operator writes now (a file, an apply): [`check`] and the rules
/// added after specs could already be stored.
pub(crate) fn check_new(spec: &WorkloadSpec, r: &mut Report) {
    check(spec, r);
    check_policy::surge_with_fixed_port(r, spec);
    if let Some(user) = &spec.user {
        if let Err(message) = super::user::check(user) {
            r.err("user", message);
        }
    }
    super::secrets::check_placeholders(spec, r);
}

/// The rules every stored spec must hold, also one applied before a newer agent added a rule:
/// a rule added later is checked at apply ([`check_new`]) and never makes a workload that runs
/// disappear from an upgraded agent's view (its instances would be stopped as orphans). Reports
/// each violation.
pub(crate) fn check(spec: &WorkloadSpec, r: &mut Report) {
    if let Err(message) = check_name(&spec.name) {
        r.err("name", message);
    }
    if spec.replicas > REPLICAS_MAX {
        r.err(
            "replicas",
            range_message(0, REPLICAS_MAX.into(), spec.replicas.into()),
        );
    }
    if let Some(stamp) = &spec.restarted_at {
        check_text(r, "restarted_at", stamp, super::RESTARTED_AT_BYTES_MAX);
    }
    if let Some(ms) = spec
        .stop_grace_ms
        .filter(|ms| *ms > super::STOP_GRACE_MS_MAX)
    {
        let (got, max) = (
            super::format_duration_ms(ms),
            super::format_duration_ms(super::STOP_GRACE_MS_MAX),
        );
        r.err(
            "stop_grace",
            format!("{got} is longer than the limit of {max}"),
        );
    }
    match &spec.run {
        Run::Process(p) => {
            check_command(r, "process.command", &p.command, true);
            check_env(r, "process.env", &p.env);
            if let Some(dir) = &p.working_dir {
                if !dir.starts_with('/') {
                    r.err(
                        "process.working_dir",
                        format!("{dir:?} is not an absolute path"),
                    );
                }
                check_text(r, "process.working_dir", dir, STRING_BYTES_MAX);
            }
            check_process_ports(r, &p.ports);
        }
        Run::Container(c) => {
            if let Err(message) = check_image(&c.image) {
                r.err("container.image", message);
            }
            check_command(r, "container.command", &c.command, false);
            check_env(r, "container.env", &c.env);
            check_ports(r, &c.ports);
        }
    }
    check_resources(r, &spec.resources);
    let placement = &spec.placement;
    if placement.constraints.len() > CONSTRAINTS_MAX {
        let n = placement.constraints.len();
        r.err(
            "placement.constraints",
            format!("has {n} constraints; at most {CONSTRAINTS_MAX}"),
        );
    }
    if !(PRIORITY_MIN..=PRIORITY_MAX).contains(&placement.priority) {
        let message = range_message(
            PRIORITY_MIN.into(),
            PRIORITY_MAX.into(),
            placement.priority.into(),
        );
        r.err("placement.priority", message);
    }
    if let Some(health) = &spec.health {
        check_policy::health(r, health, &spec.named_ports());
    }
    check_policy::restart(r, &spec.restart);
    check_policy::update(r, &spec.update, spec.health.as_ref(), placement.exclusive);
    check_policy::settings(r, &spec.settings, spec.reload.as_ref());
    super::secrets::check(spec, r);
    super::volumes::check(r, spec);
    super::sticky::check(r, spec);
}

/// A DNS label (RFC 1123): what names a workload in commands, logs and, later, DNS.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    const HELP: &str =
        "use lowercase letters, digits and '-', starting and ending with a letter or digit";
    if name.is_empty() {
        return Err("must not be empty".to_string());
    }
    if name.len() > NAME_LEN_MAX {
        return Err(format!(
            "is {} characters; a name is at most {NAME_LEN_MAX}",
            name.len()
        ));
    }
    let body_ok = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !body_ok || name.starts_with('-') || name.ends_with('-') {
        return Err(format!(
            "{name:?} is not a valid name: {HELP} (a DNS label)"
        ));
    }
    Ok(())
}

/// A container image reference (see [`super::image::ImageRef::parse`]).
fn check_image(image: &str) -> Result<(), String> {
    super::image::ImageRef::parse(image).map(|_| ())
}

/// No NUL (it would cut the string short at exec), and bounded.
pub(crate) fn check_text(r: &mut Report, path: &str, text: &str, bytes_max: usize) {
    if text.contains('\0') {
        r.err(path, "contains a NUL character");
    }
    if text.len() > bytes_max {
        r.err(
            path,
            format!("is {} bytes; at most {bytes_max}", text.len()),
        );
    }
}

pub(crate) fn check_command(r: &mut Report, path: &str, command: &[String], required: bool) {
    if command.is_empty() {
        if required {
            r.err(
                path,
                "must not be empty: give the program and its arguments, e.g. [\"sleep\", \"3600\"]",
            );
        }
        return;
    }
    if command.len() > COMMAND_ARGS_MAX {
        r.err(
            path,
            format!(
                "has {} arguments; at most {COMMAND_ARGS_MAX}",
                command.len()
            ),
        );
        return;
    }
    if command[0].trim().is_empty() {
        r.err(index(path, 0), "the program name must not be empty");
    }
    for (i, arg) in command.iter().enumerate() {
        check_text(r, &index(path, i), arg, STRING_BYTES_MAX);
    }
}

/// Environment names as POSIX shells accept them.
fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= 256
}

pub(super) fn check_env(r: &mut Report, path: &str, env: &BTreeMap<String, String>) {
    if env.len() > ENV_VARS_MAX {
        r.err(
            path,
            format!("has {} variables; at most {ENV_VARS_MAX}", env.len()),
        );
        return;
    }
    for (name, value) in env {
        let p = join(path, name);
        if !is_env_name(name) {
            r.err(&p, format!("{name:?} is not a valid variable name: use letters, digits and '_', not starting with a digit"));
        }
        check_text(r, &p, value, ENV_VALUE_BYTES_MAX);
    }
}

/// A port name: what `SHOAL_PORT_<NAME>` and `_NAME._tcp` are made of. As Kubernetes' port
/// names (an IANA service name): lowercase letters, digits and '-', a letter first, no '--'.
pub(crate) fn check_port_name(name: &str) -> Result<(), String> {
    check_label_name(name, "port", PORT_NAME_LEN_MAX, "\"http\", \"grpc-admin\"")
}

/// A short lowercase name (`what`: port, volume): lowercase letters, digits and '-', a letter
/// first, not ending with '-' and without '--', at most `len_max` characters; `example` goes
/// in the message.
pub(crate) fn check_label_name(
    name: &str,
    what: &str,
    len_max: usize,
    example: &str,
) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_string());
    }
    if name.len() > len_max {
        return Err(format!(
            "{name:?} is {} characters; a {what} name is at most {len_max}",
            name.len()
        ));
    }
    let ok = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.ends_with('-')
        && !name.contains("--");
    if !ok {
        return Err(format!(
            "{name:?} is not a valid {what} name: use lowercase letters, digits and '-', \
             starting with a letter, not ending with '-' and without '--' (e.g. {example})"
        ));
    }
    Ok(())
}

/// Each name valid and used once in the workload.
fn check_port_names<'a>(r: &mut Report, list: &str, names: impl Iterator<Item = (usize, &'a str)>) {
    let mut seen: Vec<(usize, &str)> = Vec::new();
    for (i, name) in names {
        let p = format!("{}.name", index(list, i));
        if let Err(message) = check_port_name(name) {
            r.err(&p, message);
        } else if let Some((j, _)) = seen.iter().find(|(_, n)| *n == name) {
            let message = format!("port name {name:?} is already used by ports[{j}]");
            r.err_related(&p, &[&index(list, *j)], message);
        }
        seen.push((i, name));
    }
}

fn check_process_ports(r: &mut Report, ports: &[NamedPort]) {
    const LIST: &str = "process.ports";
    if ports.len() > NAMED_PORTS_MAX {
        r.err(
            LIST,
            format!("has {} ports; at most {NAMED_PORTS_MAX}", ports.len()),
        );
        return;
    }
    check_port_names(r, LIST, ports.iter().map(|p| p.name.as_str()).enumerate());
    for (i, port) in ports.iter().enumerate() {
        let p = format!("{}.port", index(LIST, i));
        let Some(number) = port.port else { continue };
        if number == 0 {
            r.err(&p, range_message(1, 65535, 0));
        }
        let earlier = ports[..i]
            .iter()
            .position(|q| q.port == Some(number) && q.protocol == port.protocol);
        if let Some(j) = earlier {
            let proto = port.protocol.as_str();
            let message = format!("port {number}/{proto} is already declared by ports[{j}]");
            r.err_related(&p, &[&index(LIST, j)], message);
        }
    }
}

fn check_ports(r: &mut Report, ports: &[PortMapping]) {
    if ports.len() > PORTS_MAX {
        r.err(
            "container.ports",
            format!("has {} ports; at most {PORTS_MAX}", ports.len()),
        );
        return;
    }
    let named = ports
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, p.name.as_deref()?)));
    if named.clone().count() > NAMED_PORTS_MAX {
        let message = format!(
            "has {} named ports; at most {NAMED_PORTS_MAX}",
            named.clone().count()
        );
        r.err("container.ports", message);
    }
    check_port_names(r, "container.ports", named);
    for (i, port) in ports.iter().enumerate() {
        let p = index("container.ports", i);
        let proto = port.protocol.as_str();
        if port.container == 0 {
            r.err(format!("{p}.container"), range_message(1, 65535, 0));
        }
        if port.host == Some(0) {
            r.err(format!("{p}.host"), range_message(1, 65535, 0));
        }
        let earlier = &ports[..i];
        if let Some(j) = earlier
            .iter()
            .position(|q| q.container == port.container && q.protocol == port.protocol)
        {
            let message = format!(
                "container port {}/{proto} is already published by ports[{j}]",
                port.container
            );
            r.err_related(
                format!("{p}.container"),
                &[&index("container.ports", j)],
                message,
            );
        }
        if let Some(host) = port.host {
            if let Some(j) = earlier
                .iter()
                .position(|q| q.host == Some(host) && q.protocol == port.protocol)
            {
                let message = format!("host port {host}/{proto} is already used by ports[{j}]");
                r.err_related(
                    format!("{p}.host"),
                    &[&index("container.ports", j)],
                    message,
                );
            }
        }
    }
}

fn check_resources(r: &mut Report, res: &Resources) {
    if res.cpu_millis == 0 {
        r.err("resources.cpu", "must be more than 0 (e.g. \"100m\")");
    } else if res.cpu_millis > CPU_MILLIS_MAX {
        let (got, max) = (
            format_cpu_millis(res.cpu_millis),
            format_cpu_millis(CPU_MILLIS_MAX),
        );
        r.err(
            "resources.cpu",
            format!("{got} is more than the limit of {max} cores"),
        );
    }
    let mut got = format_memory_bytes(res.memory_bytes);
    if got.bytes().all(|b| b.is_ascii_digit()) {
        got.push_str(" bytes");
    }
    let (min, max) = (
        format_memory_bytes(MEMORY_BYTES_MIN),
        format_memory_bytes(MEMORY_BYTES_MAX),
    );
    if res.memory_bytes < MEMORY_BYTES_MIN {
        r.err(
            "resources.memory",
            format!("{got} is less than the minimum of {min}"),
        );
    } else if res.memory_bytes > MEMORY_BYTES_MAX {
        r.err(
            "resources.memory",
            format!("{got} is more than the limit of {max}"),
        );
    }
}
