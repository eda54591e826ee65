//! Decoding what a replica runs: `[process]` or `[container]`, with environment and ports.

use super::decode::{choice, SECTIONS};
use super::doc::{Node, Value};
use super::reader::{index, integer, string, string_map, strings, Ctx, Fields};
use super::validate::range_message;
use super::{ContainerSpec, PortMapping, ProcessSpec, Protocol, Run};

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
        out.ports = ports(ctx, &p, n);
    }
    f.finish(ctx, SECTIONS);
    out
}

/// Ports keep their source positions: a port that fails to decode becomes a placeholder (its
/// path is already reported), so that `ports[i]` means the same element everywhere.
fn ports(ctx: &mut Ctx, path: &str, node: &Node) -> Vec<PortMapping> {
    let Value::Array(items) = &node.value else {
        ctx.wrong_type(
            path,
            node,
            "an array of ports such as { container = 80, host = 8080 }",
        );
        return Vec::new();
    };
    let placeholder = PortMapping {
        container: 0,
        host: None,
        protocol: Protocol::Tcp,
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let p = index(path, i);
            if let Some(at) = item.at {
                ctx.located.insert(p.clone(), at);
            }
            port(ctx, &p, item).unwrap_or_else(|| {
                ctx.broken.insert(p);
                placeholder
            })
        })
        .collect()
}

fn port(ctx: &mut Ctx, path: &str, node: &Node) -> Option<PortMapping> {
    let mut f = Fields::open(ctx, path, node)?;
    let range = |v| range_message(1, 65535, v);
    let container = f
        .require(ctx, "container")
        .and_then(|(n, p)| integer(ctx, &p, n, range));
    // Outer `None`: absent; inner `None`: present but reported.
    let host = f.get(ctx, "host").map(|(n, p)| integer(ctx, &p, n, range));
    let options = [("tcp", Protocol::Tcp), ("udp", Protocol::Udp)];
    let protocol = f
        .get(ctx, "protocol")
        .map(|(n, p)| choice(ctx, &p, n, "protocol", &options));
    f.finish(ctx, &[]);
    Some(PortMapping {
        container: container?,
        host: host.map_or(Some(None), |h| h.map(Some))?,
        protocol: protocol.unwrap_or(Some(Protocol::Tcp))?,
    })
}
