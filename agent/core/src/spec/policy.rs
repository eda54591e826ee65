//! Decoding how replicas are kept alive and changed: `[health]`, `[restart]`, `[update]` and the
//! `[reload]` hook for live settings.

use super::decode::{choice, SECTIONS};
use super::doc::{Node, Value};
use super::duration::parse_duration_ms;
use super::reader::{boolean, integer, string, strings, Ctx, Fields};
use super::validate::range_message;
use super::*;

/// A duration string such as `"10s"`.
pub(crate) fn duration(ctx: &mut Ctx, path: &str, node: &Node) -> Option<u64> {
    let Value::Str(text) = &node.value else {
        ctx.wrong_type(path, node, "a duration such as \"10s\" or \"500ms\"");
        return None;
    };
    match parse_duration_ms(text) {
        Ok(ms) => Some(ms),
        Err(message) => {
            ctx.error(node.at, path, message);
            None
        }
    }
}

/// Reads an optional duration field into `slot`, leaving the default when absent or wrong.
fn duration_field(ctx: &mut Ctx, f: &mut Fields<'_>, name: &'static str, slot: &mut u64) {
    if let Some((n, p)) = f.get(ctx, name) {
        if let Some(ms) = duration(ctx, &p, n) {
            *slot = ms;
        }
    }
}

/// `[health]`: exactly one probe table (`exec`, `tcp` or `http`) and its timing.
pub(crate) fn health(ctx: &mut Ctx, path: &str, node: &Node) -> Option<HealthCheck> {
    let mut f = Fields::open(ctx, path, node)?;
    let mut probes: Vec<(Option<Probe>, &Node, String)> = Vec::new();
    if let Some((n, p)) = f.get(ctx, "exec") {
        probes.push((exec_probe(ctx, &p, n), n, p));
    }
    if let Some((n, p)) = f.get(ctx, "tcp") {
        probes.push((port_probe(ctx, &p, n, false), n, p));
    }
    if let Some((n, p)) = f.get(ctx, "http") {
        probes.push((port_probe(ctx, &p, n, true), n, p));
    }
    probes.sort_by_key(|(_, n, _)| n.at);
    let mut out = HealthCheck {
        probe: Probe::Exec {
            command: Vec::new(),
        },
        interval_ms: HEALTH_INTERVAL_MS_DEFAULT,
        timeout_ms: HEALTH_TIMEOUT_MS_DEFAULT,
        failure_threshold: HEALTH_FAILURE_THRESHOLD_DEFAULT,
        start_grace_ms: HEALTH_START_GRACE_MS_DEFAULT,
    };
    // Until a probe decodes, the placeholder above stands in; its path must stay quiet.
    let placeholder_path = super::reader::join(path, "exec");
    match probes.as_slice() {
        [] => {
            let message = "needs exactly one probe: `exec`, `tcp` or `http`";
            ctx.problem(node.at, path, message);
            ctx.broken.insert(placeholder_path);
        }
        [(probe, _, p), rest @ ..] => {
            match probe {
                Some(probe) => out.probe = probe.clone(),
                None => {
                    ctx.broken.insert(p.clone());
                    ctx.broken.insert(placeholder_path);
                }
            }
            for (_, n, p) in rest {
                let message = "only one probe per health check: `exec`, `tcp` or `http`";
                ctx.error(n.at, p, message);
            }
        }
    }
    duration_field(ctx, &mut f, "interval", &mut out.interval_ms);
    duration_field(ctx, &mut f, "timeout", &mut out.timeout_ms);
    if let Some((n, p)) = f.get(ctx, "failure_threshold") {
        let range = |v| range_message(1, HEALTH_FAILURE_THRESHOLD_MAX.into(), v);
        if let Some(t) = integer(ctx, &p, n, range) {
            out.failure_threshold = t;
        }
    }
    duration_field(ctx, &mut f, "start_grace", &mut out.start_grace_ms);
    f.finish(ctx, SECTIONS);
    Some(out)
}

fn exec_probe(ctx: &mut Ctx, path: &str, node: &Node) -> Option<Probe> {
    let mut f = Fields::open(ctx, path, node)?;
    let command = f
        .require(ctx, "command")
        .and_then(|(n, p)| strings(ctx, &p, n));
    f.finish(ctx, &[]);
    Some(Probe::Exec { command: command? })
}

/// A probe's port: a number, or the name of a port the workload declares.
fn port_ref(ctx: &mut Ctx, path: &str, node: &Node) -> Option<PortRef> {
    match &node.value {
        Value::Str(name) => Some(PortRef::Named(name.clone())),
        Value::Int(_) => {
            integer(ctx, path, node, |v| range_message(1, 65535, v)).map(PortRef::Number)
        }
        _ => {
            ctx.wrong_type(
                path,
                node,
                "a port number or a declared port's name such as \"http\"",
            );
            None
        }
    }
}

fn port_probe(ctx: &mut Ctx, path: &str, node: &Node, http: bool) -> Option<Probe> {
    let mut f = Fields::open(ctx, path, node)?;
    let port = f
        .require(ctx, "port")
        .and_then(|(n, p)| port_ref(ctx, &p, n));
    if !http {
        f.finish(ctx, &[]);
        return Some(Probe::Tcp { port: port? });
    }
    let probe_path = match f.get(ctx, "path") {
        Some((n, p)) => string(ctx, &p, n),
        None => Some(HEALTH_HTTP_PATH_DEFAULT.to_string()),
    };
    f.finish(ctx, &[]);
    Some(Probe::Http {
        port: port?,
        path: probe_path?,
    })
}

/// `[restart]`: the policy and its backoff.
pub(crate) fn restart(ctx: &mut Ctx, path: &str, node: &Node) -> RestartPolicy {
    let mut out = RestartPolicy::default();
    let Some(mut f) = Fields::open(ctx, path, node) else {
        return out;
    };
    if let Some((n, p)) = f.get(ctx, "policy") {
        let options = [
            ("always", RestartMode::Always),
            ("on-failure", RestartMode::OnFailure),
            ("never", RestartMode::Never),
        ];
        out.policy = choice(ctx, &p, n, "restart policy", &options).unwrap_or_default();
    }
    duration_field(ctx, &mut f, "backoff_initial", &mut out.backoff_initial_ms);
    duration_field(ctx, &mut f, "backoff_max", &mut out.backoff_max_ms);
    duration_field(ctx, &mut f, "backoff_reset", &mut out.backoff_reset_ms);
    f.finish(ctx, SECTIONS);
    out
}

/// `[update]`: rolling update bounds.
pub(crate) fn update(ctx: &mut Ctx, path: &str, node: &Node) -> UpdateStrategy {
    let mut out = UpdateStrategy::default();
    let Some(mut f) = Fields::open(ctx, path, node) else {
        return out;
    };
    let range = |v| range_message(0, REPLICAS_MAX.into(), v);
    if let Some((n, p)) = f.get(ctx, "max_unavailable") {
        out.max_unavailable = integer(ctx, &p, n, range).unwrap_or(out.max_unavailable);
    }
    if let Some((n, p)) = f.get(ctx, "max_surge") {
        out.max_surge = integer(ctx, &p, n, range).unwrap_or(out.max_surge);
    }
    if let Some((n, p)) = f.get(ctx, "auto_rollback") {
        out.auto_rollback = boolean(ctx, &p, n).unwrap_or(out.auto_rollback);
    }
    duration_field(
        ctx,
        &mut f,
        "progress_deadline",
        &mut out.progress_deadline_ms,
    );
    if let Some((n, p)) = f.get(ctx, "failure_threshold") {
        out.failure_threshold = integer(ctx, &p, n, range).unwrap_or(out.failure_threshold);
    }
    f.finish(ctx, SECTIONS);
    out
}

/// `[reload]`: exactly one of `signal` or `command`.
pub(crate) fn reload(ctx: &mut Ctx, path: &str, node: &Node) -> Option<ReloadHook> {
    let mut f = Fields::open(ctx, path, node)?;
    let signal = f
        .get(ctx, "signal")
        .map(|(n, p)| (signal_name(ctx, &p, n), n, p));
    let command = f
        .get(ctx, "command")
        .map(|(n, p)| (strings(ctx, &p, n), n, p));
    f.finish(ctx, SECTIONS);
    match (signal, command) {
        (Some((s, _, _)), None) => Some(ReloadHook::Signal(s?)),
        (None, Some((c, _, _))) => Some(ReloadHook::Exec { command: c? }),
        (Some(_), Some((_, n, p))) => {
            ctx.error(n.at, &p, "give either `signal` or `command`, not both");
            None
        }
        (None, None) => {
            ctx.error(node.at, path, "needs `signal` (e.g. \"HUP\") or `command`");
            None
        }
    }
}

fn signal_name(ctx: &mut Ctx, path: &str, node: &Node) -> Option<ReloadSignal> {
    let text = string(ctx, path, node)?;
    let upper = text.trim().to_ascii_uppercase();
    match upper.strip_prefix("SIG").unwrap_or(&upper) {
        "HUP" => Some(ReloadSignal::Hup),
        "USR1" => Some(ReloadSignal::Usr1),
        "USR2" => Some(ReloadSignal::Usr2),
        _ => {
            let message = format!("{text:?} is not a reload signal (expected HUP, USR1 or USR2)");
            ctx.error(node.at, path, message);
            None
        }
    }
}
