//! Decoding what a replica runs: `[process]` or `[container]`, with environment and ports.

use super::decode::{choice, SECTIONS};
use super::doc::{Node, Value};
use super::reader::{index, integer, string, string_map, strings, Ctx, Fields};
use super::validate::range_message;
use super::{ContainerSpec, NamedPort, PortMapping, ProcessSpec, Protocol, PullPolicy, Run};

const RUN_HELP: &str =
    "each workload runs exactly one of `process` (a host command) or `container`";

/// Exactly one of `process` or `container`. With both, both are decoded (so that their own
/// problems show up too) and the later one is reported.
pub(crate) fn run(ctx: &mut Ctx, f: &mut Fields<'_>) -> Run {
    let process = f.get(ctx, "process");
    let container = f.get(ctx, "container");
    match (process, container) {
        (Some((pn, pp)), Some((cn, cp))) => {
            let p = process_spec(ctx, &pp, pn);
            container_spec(ctx, &cp, cn);
            let (later, path) = if pn.at > cn.at { (pn, pp) } else { (cn, cp) };
            ctx.error(
                later.at,
                &path,
                format!("`process` and `container` are both given: {RUN_HELP}"),
            );
            Run::Process(p)
        }
        (Some((n, p)), None) => Run::Process(process_spec(ctx, &p, n)),
        (None, Some((n, p))) => Run::Container(container_spec(ctx, &p, n)),
        (None, None) => {
            ctx.error(
                None,
                "",
                format!("missing `process` or `container`: {RUN_HELP}"),
            );
            ctx.broken.insert("process".to_string());
            Run::Process(ProcessSpec::default())
        }
    }
}

fn process_spec(ctx: &mut Ctx, path: &str, node: &Node) -> ProcessSpec {
    let mut out = ProcessSpec::default();
    let Some(mut f) = Fields::open(ctx, path, node) else {
        return out;
    };
    if let Some((n, p)) = f.require(ctx, "command") {
        out.command = strings(ctx, &p, n).unwrap_or_default();
    }
    if let Some((n, p)) = f.get(ctx, "env") {
        out.env = string_map(ctx, &p, n).unwrap_or_default();
    }
    if let Some((n, p)) = f.get(ctx, "working_dir") {
        out.working_dir = string(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "ports") {
        let example = "an array of named ports such as { name = \"http\" }";
        out.ports = elements(ctx, &p, n, example, named_port);
    }
    f.finish(ctx, SECTIONS);
    out
}

fn container_spec(ctx: &mut Ctx, path: &str, node: &Node) -> ContainerSpec {
    let mut out = ContainerSpec::default();
    let Some(mut f) = Fields::open(ctx, path, node) else {
        return out;
    };
    if let Some((n, p)) = f.require(ctx, "image") {
        out.image = string(ctx, &p, n).unwrap_or_default();
    }
    if let Some((n, p)) = f.get(ctx, "command") {
        out.command = strings(ctx, &p, n).unwrap_or_default();
    }
    if let Some((n, p)) = f.get(ctx, "env") {
        out.env = string_map(ctx, &p, n).unwrap_or_default();
    }
    if let Some((n, p)) = f.get(ctx, "ports") {
        let example = "an array of ports such as { container = 80, host = 8080 }";
        out.ports = elements(ctx, &p, n, example, port);
    }
    let pull = f
        .get(ctx, "pull")
        .and_then(|(n, p)| choice(ctx, &p, n, "pull policy", &PullPolicy::NAMES));
    out.pull = pull.unwrap_or_else(|| PullPolicy::default_for(&out.image));
    f.finish(ctx, SECTIONS);
    out
}

/// Array elements keep their source positions: one that fails to decode becomes a placeholder
/// (its path is already reported), so that `ports[i]` means the same element everywhere.
pub(crate) fn elements<T: Default>(
    ctx: &mut Ctx,
    path: &str,
    node: &Node,
    expected: &str,
    element: fn(&mut Ctx, &str, &Node) -> Option<T>,
) -> Vec<T> {
    let Value::Array(items) = &node.value else {
        ctx.wrong_type(path, node, expected);
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let p = index(path, i);
            if let Some(at) = item.at {
                ctx.located.insert(p.clone(), at);
            }
            element(ctx, &p, item).unwrap_or_else(|| {
                ctx.broken.insert(p);
                T::default()
            })
        })
        .collect()
}

/// An optional field: outer `None` when absent, inner `None` when present but reported.
type Optional<T> = Option<Option<T>>;

/// An optional field's value, or `None` (the element is broken) when it was reported.
fn settle<T>(field: Optional<T>) -> Option<Option<T>> {
    field.map_or(Some(None), |v| v.map(Some))
}

fn protocol(ctx: &mut Ctx, f: &mut Fields<'_>) -> Optional<Protocol> {
    let options = [("tcp", Protocol::Tcp), ("udp", Protocol::Udp)];
    f.get(ctx, "protocol")
        .map(|(n, p)| choice(ctx, &p, n, "protocol", &options))
}

fn port(ctx: &mut Ctx, path: &str, node: &Node) -> Option<PortMapping> {
    let mut f = Fields::open(ctx, path, node)?;
    let range = |v| range_message(1, 65535, v);
    let name = f.get(ctx, "name").map(|(n, p)| string(ctx, &p, n));
    let container = f
        .require(ctx, "container")
        .and_then(|(n, p)| integer(ctx, &p, n, range));
    let host = f.get(ctx, "host").map(|(n, p)| integer(ctx, &p, n, range));
    let protocol = protocol(ctx, &mut f);
    f.finish(ctx, &[]);
    Some(PortMapping {
        name: settle(name)?,
        container: container?,
        host: settle(host)?,
        protocol: settle(protocol)?.unwrap_or_default(),
    })
}

fn named_port(ctx: &mut Ctx, path: &str, node: &Node) -> Option<NamedPort> {
    let mut f = Fields::open(ctx, path, node)?;
    let range = |v| range_message(1, 65535, v);
    let name = f.require(ctx, "name").and_then(|(n, p)| string(ctx, &p, n));
    let port = f.get(ctx, "port").map(|(n, p)| integer(ctx, &p, n, range));
    let protocol = protocol(ctx, &mut f);
    f.finish(ctx, &[]);
    Some(NamedPort {
        name: name?,
        port: settle(port)?,
        protocol: settle(protocol)?.unwrap_or_default(),
    })
}
