//! From text to a validated [`WorkloadSpec`]: size and encoding checks, parsing into the located
//! tree, decoding the top level, then the typed rules of [`super::validate`], all problems kept.

use crate::constraint::Constraint;
use crate::resources::{parse_cpu_millis, parse_memory_bytes, Resources};

use super::doc::{parse_toml, Format, Node, Value};
use super::error::{LineIndex, SpecError, SpecErrors};
use super::json::parse_json;
use super::reader::{boolean, index, integer, string, string_map, Ctx, Fields};
use super::validate::{range_message, Report};
use super::{
    policy, sections, Placement, Run, Spread, WorkloadSpec, REPLICAS_DEFAULT, SPEC_BYTES_MAX,
};

/// Every table and its fields, for "did you mean `resources.cpu`?" on a field in the wrong place.
pub(crate) const SECTIONS: &[(&str, &[&str])] = &[
    ("process", &["command", "env", "working_dir"]),
    ("container", &["image", "command", "env", "ports", "pull"]),
    ("resources", &["cpu", "memory"]),
    (
        "placement",
        &[
            "spread",
            "constraints",
            "exclusive",
            "priority",
            "sticky_for",
            "on_data_loss",
        ],
    ),
    (
        "health",
        &[
            "exec",
            "tcp",
            "http",
            "interval",
            "timeout",
            "failure_threshold",
            "start_grace",
        ],
    ),
    (
        "restart",
        &["policy", "backoff_initial", "backoff_max", "backoff_reset"],
    ),
    (
        "update",
        &[
            "max_unavailable",
            "max_surge",
            "auto_rollback",
            "progress_deadline",
            "failure_threshold",
        ],
    ),
    ("reload", &["signal", "command"]),
];

pub(crate) fn from_bytes(bytes: &[u8], file: &str) -> Result<WorkloadSpec, SpecErrors> {
    check_size(bytes.len(), file)?;
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let valid = std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default();
        let at = LineIndex::new(valid).locate(valid.len());
        SpecErrors::new(vec![SpecError {
            file: file.to_string(),
            location: Some(at),
            path: String::new(),
            message: "not valid UTF-8: a spec is a text file".to_string(),
        }])
    })?;
    let lower = file.to_ascii_lowercase();
    let format = if lower.ends_with(".json") {
        Format::Json
    } else if lower.ends_with(".toml") || !text.trim_start().starts_with('{') {
        Format::Toml
    } else {
        Format::Json
    };
    from_text(text, file, format)
}

fn check_size(len: usize, file: &str) -> Result<(), SpecErrors> {
    if len > SPEC_BYTES_MAX {
        return Err(SpecErrors::single(
            file,
            format!(
                "the file is {len} bytes; a spec may be at most {SPEC_BYTES_MAX} bytes (1 MiB)"
            ),
        ));
    }
    Ok(())
}

pub(crate) fn from_text(
    text: &str,
    file: &str,
    format: Format,
) -> Result<WorkloadSpec, SpecErrors> {
    check_size(text.len(), file)?;
    let lines = LineIndex::new(text);
    let syntax = |at, message| SpecError {
        file: file.to_string(),
        location: at,
        path: String::new(),
        message,
    };
    let root = match format {
        Format::Toml => parse_toml(text, &lines).map_err(|errs| {
            errs.into_iter()
                .map(|e| syntax(e.at, e.message))
                .collect::<Vec<_>>()
        }),
        Format::Json => parse_json(text, &lines).map_err(|e| vec![syntax(e.at, e.message)]),
    }
    .map_err(SpecErrors::new)?;
    let mut ctx = Ctx::new(file, format);
    if let Some(spec) = workload(&mut ctx, &root) {
        let mut report = Report::default();
        super::validate::check_new(&spec, &mut report);
        report.locate_into(&mut ctx);
        if ctx.errors.is_empty() {
            return Ok(spec);
        }
    }
    Err(SpecErrors::new(ctx.errors))
}

/// Decodes the top level; `None` when the document is not even a table.
fn workload(ctx: &mut Ctx, root: &Node) -> Option<WorkloadSpec> {
    let mut f = Fields::open(ctx, "", root)?;
    let mut spec = WorkloadSpec {
        name: String::new(),
        replicas: REPLICAS_DEFAULT,
        run: Run::Process(Default::default()),
        resources: Resources::default(),
        placement: Placement::default(),
        health: None,
        restart: Default::default(),
        update: Default::default(),
        settings: Default::default(),
        reload: None,
        restarted_at: None,
        volumes: Vec::new(),
        stop_grace_ms: None,
        user: None,
        secret_env: None,
    };
    if let Some((n, p)) = f.require(ctx, "name") {
        spec.name = string(ctx, &p, n).unwrap_or_default();
    }
    if let Some((n, p)) = f.get(ctx, "replicas") {
        let range = |v| range_message(0, super::REPLICAS_MAX.into(), v);
        spec.replicas = integer(ctx, &p, n, range).unwrap_or(REPLICAS_DEFAULT);
    }
    spec.run = sections::run(ctx, &mut f);
    match f.get(ctx, "resources") {
        Some((n, p)) => spec.resources = resources(ctx, &p, n),
        None => {
            let message = "required section is missing: say what each replica reserves, \
                           e.g. cpu = \"250m\" and memory = \"64Mi\"";
            ctx.error(None, "resources", message);
        }
    }
    if let Some((n, p)) = f.get(ctx, "placement") {
        spec.placement = placement(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "health") {
        spec.health = policy::health(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "restart") {
        spec.restart = policy::restart(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "update") {
        spec.update = policy::update(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "settings") {
        spec.settings = string_map(ctx, &p, n).unwrap_or_default();
    }
    if let Some((n, p)) = f.get(ctx, "reload") {
        spec.reload = policy::reload(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "restarted_at") {
        spec.restarted_at = string(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "volumes") {
        spec.volumes = super::volumes::decode(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "stop_grace") {
        spec.stop_grace_ms = super::policy::duration(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "user") {
        spec.user = string(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "secret_env") {
        spec.secret_env = string_map(ctx, &p, n).filter(|m| !m.is_empty());
    }
    f.finish(ctx, SECTIONS);
    Some(spec)
}

fn resources(ctx: &mut Ctx, path: &str, node: &Node) -> Resources {
    let mut out = Resources::default();
    let Some(mut f) = Fields::open(ctx, path, node) else {
        return out;
    };
    if let Some((n, p)) = f.require(ctx, "cpu") {
        let text = match &n.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            Value::Float(x) => Some(x.to_string()),
            _ => None,
        };
        match text.map(|t| parse_cpu_millis(&t)) {
            Some(Ok(m)) => out.cpu_millis = m,
            Some(Err(e)) => ctx.error(n.at, &p, e.to_string()),
            None => ctx.wrong_type(&p, n, "a CPU quantity such as \"250m\", \"0.5\" or 2"),
        }
    }
    if let Some((n, p)) = f.require(ctx, "memory") {
        let text = match &n.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            _ => None,
        };
        match text.map(|t| parse_memory_bytes(&t)) {
            Some(Ok(b)) => out.memory_bytes = b,
            Some(Err(e)) => ctx.error(n.at, &p, e.to_string()),
            None => ctx.wrong_type(&p, n, "a memory quantity such as \"64Mi\" or \"1Gi\""),
        }
    }
    f.finish(ctx, SECTIONS);
    out
}

fn placement(ctx: &mut Ctx, path: &str, node: &Node) -> Placement {
    let mut out = Placement::default();
    let Some(mut f) = Fields::open(ctx, path, node) else {
        return out;
    };
    if let Some((n, p)) = f.get(ctx, "spread") {
        let options = [("node", Spread::Node), ("zone", Spread::Zone)];
        out.spread = choice(ctx, &p, n, "spread", &options).unwrap_or_default();
    }
    if let Some((n, p)) = f.get(ctx, "constraints") {
        out.constraints = constraints(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "exclusive") {
        out.exclusive = boolean(ctx, &p, n).unwrap_or_default();
    }
    if let Some((n, p)) = f.get(ctx, "priority") {
        let range = |v| range_message(super::PRIORITY_MIN.into(), super::PRIORITY_MAX.into(), v);
        out.priority = integer(ctx, &p, n, range).unwrap_or_default();
    }
    super::sticky::decode(ctx, &mut f, &mut out);
    f.finish(ctx, SECTIONS);
    out
}

/// Each constraint is parsed on its own, so one bad element does not hide the others.
fn constraints(ctx: &mut Ctx, path: &str, node: &Node) -> Vec<Constraint> {
    let Value::Array(items) = &node.value else {
        ctx.wrong_type(path, node, "an array of strings");
        return Vec::new();
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = index(path, i);
        match string(ctx, &p, item).map(|text| Constraint::parse(&text)) {
            Some(Ok(c)) => out.push(c),
            Some(Err(e)) => ctx.error(item.at, &p, e),
            None => {}
        }
    }
    out
}

/// One of a fixed set of words, with a suggestion when the word is a near miss.
pub(crate) fn choice<T: Copy>(
    ctx: &mut Ctx,
    path: &str,
    node: &Node,
    what: &str,
    options: &[(&str, T)],
) -> Option<T> {
    let text = string(ctx, path, node)?;
    if let Some((_, v)) = options.iter().find(|(name, _)| *name == text) {
        return Some(*v);
    }
    let names: Vec<&str> = options.iter().map(|(name, _)| *name).collect();
    let mut message = format!("{text:?} is not a valid {what}");
    match super::suggest::closest(&text, &names) {
        Some(close) => message.push_str(&format!(", did you mean {close:?}?")),
        None => message.push_str(&format!(" (expected one of: {})", names.join(", "))),
    }
    ctx.error(node.at, path, message);
    None
}
