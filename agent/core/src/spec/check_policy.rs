//! The rules for health checks, restarts, updates and live settings.

use super::duration::format_duration_ms;
use super::reader::{index, join};
use super::validate::{check_command, check_text, range_message, Report};
use super::*;

/// A duration within `min_ms..=DURATION_MS_MAX`.
pub(crate) fn duration(r: &mut Report, path: &str, ms: u64, min_ms: u64) {
    if ms < min_ms {
        r.err(
            path,
            format!("must be at least {}", format_duration_ms(min_ms)),
        );
    } else if ms > DURATION_MS_MAX {
        let (got, max) = (format_duration_ms(ms), format_duration_ms(DURATION_MS_MAX));
        r.err(path, format!("{got} is longer than the limit of {max}"));
    }
}

/// A probe's port: a number in range, or the name of a TCP port the workload declares.
fn probe_port(r: &mut Report, path: &str, port: &PortRef, declared: &[DeclaredPort<'_>]) {
    match port {
        PortRef::Number(0) => r.err(path, range_message(1, 65535, 0)),
        PortRef::Number(_) => {}
        PortRef::Named(name) => match declared.iter().find(|d| d.name == name) {
            Some(d) if d.protocol == Protocol::Udp => r.err(
                path,
                format!("port {name:?} is a udp port; a tcp or http probe needs a tcp port"),
            ),
            Some(_) => {}
            None => {
                let mut known: Vec<String> = declared
                    .iter()
                    .filter(|d| !d.name.is_empty())
                    .map(|d| format!("{:?}", d.name))
                    .collect();
                known.dedup();
                let hint = match known.is_empty() {
                    true => "the workload declares no named port: add it to `process.ports` \
                             (e.g. ports = [{ name = \"http\" }]) or name a container port"
                        .to_string(),
                    false => format!("the workload declares {}", known.join(", ")),
                };
                r.err(path, format!("port {name:?} is not declared: {hint}"));
            }
        },
    }
}

pub(crate) fn health(r: &mut Report, h: &HealthCheck, declared: &[DeclaredPort<'_>]) {
    match &h.probe {
        Probe::Exec { command } => check_command(r, "health.exec.command", command, true),
        Probe::Tcp { port } => probe_port(r, "health.tcp.port", port, declared),
        Probe::Http { port, path } => {
            probe_port(r, "health.http.port", port, declared);
            if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
                r.err(
                    "health.http.path",
                    format!("{path:?} is not a request path: start with '/', no spaces"),
                );
            }
            check_text(r, "health.http.path", path, STRING_BYTES_MAX);
        }
    }
    duration(r, "health.interval", h.interval_ms, 1);
    duration(r, "health.timeout", h.timeout_ms, 1);
    if h.timeout_ms > h.interval_ms {
        let message = format!(
            "{} is longer than the interval ({}): a probe must end before the next starts",
            format_duration_ms(h.timeout_ms),
            format_duration_ms(h.interval_ms)
        );
        r.err_related("health.timeout", &["health.interval"], message);
    }
    if !(1..=HEALTH_FAILURE_THRESHOLD_MAX).contains(&h.failure_threshold) {
        let message = range_message(
            1,
            HEALTH_FAILURE_THRESHOLD_MAX.into(),
            h.failure_threshold.into(),
        );
        r.err("health.failure_threshold", message);
    }
    duration(r, "health.start_grace", h.start_grace_ms, 0);
}

pub(crate) fn restart(r: &mut Report, p: &RestartPolicy) {
    duration(r, "restart.backoff_initial", p.backoff_initial_ms, 1);
    duration(r, "restart.backoff_max", p.backoff_max_ms, 1);
    duration(r, "restart.backoff_reset", p.backoff_reset_ms, 1);
    if p.backoff_initial_ms > p.backoff_max_ms {
        let message = format!(
            "{} is longer than backoff_max ({})",
            format_duration_ms(p.backoff_initial_ms),
            format_duration_ms(p.backoff_max_ms)
        );
        r.err_related("restart.backoff_initial", &["restart.backoff_max"], message);
    }
}

pub(crate) fn update(
    r: &mut Report,
    u: &UpdateStrategy,
    health: Option<&HealthCheck>,
    exclusive: bool,
) {
    for (name, value) in [
        ("max_unavailable", u.max_unavailable),
        ("max_surge", u.max_surge),
    ] {
        if value > REPLICAS_MAX {
            r.err(
                join("update", name),
                range_message(0, REPLICAS_MAX.into(), value.into()),
            );
        }
    }
    if u.max_unavailable == 0 && u.max_surge == 0 {
        let message =
            "max_unavailable and max_surge are both 0: an update could never replace a replica";
        r.err_related(
            "update",
            &["update.max_unavailable", "update.max_surge"],
            message,
        );
    }
    duration(
        r,
        "update.progress_deadline",
        u.progress_deadline_ms,
        UPDATE_PROGRESS_DEADLINE_MS_MIN,
    );
    if let Some(h) = health.filter(|h| u.progress_deadline_ms <= h.start_grace_ms) {
        let message = format!(
            "{} is not longer than health.start_grace ({}): a new copy would fail the rollout \
             before its probes count (the default deadline is {}; set a longer one)",
            format_duration_ms(u.progress_deadline_ms),
            format_duration_ms(h.start_grace_ms),
            format_duration_ms(UPDATE_PROGRESS_DEADLINE_MS_DEFAULT)
        );
        r.err_related("update.progress_deadline", &["health.start_grace"], message);
    }
    if u.failure_threshold > REPLICAS_MAX {
        r.err(
            "update.failure_threshold",
            range_message(0, REPLICAS_MAX.into(), u.failure_threshold.into()),
        );
    }
    if exclusive && u.max_surge > 0 {
        let message = "must be 0 for an exclusive workload: its replicas never run twice at once";
        r.err_related("update.max_surge", &["placement.exclusive"], message);
    }
}

/// A surge copy starts on its replica's host beside the old copy, so it cannot bind a host port
/// the spec fixes while the old copy holds it: it would fail until the rollout fails. Refused
/// rather than left to fail at the first update (Kubernetes' hostPort has the same limit).
pub(crate) fn surge_with_fixed_port(r: &mut Report, spec: &WorkloadSpec) {
    if spec.update.max_surge == 0 || spec.placement.exclusive {
        // Exclusive workloads already have max_surge refused, one error per field is enough.
        return;
    }
    let first_fixed =
        match &spec.run {
            Run::Process(p) => {
                p.ports.iter().enumerate().find_map(|(i, p)| {
                    Some((format!("{}.port", index("process.ports", i)), p.port?))
                })
            }
            Run::Container(c) => c.ports.iter().enumerate().find_map(|(i, p)| {
                Some((format!("{}.host", index("container.ports", i)), p.host?))
            }),
        };
    if let Some((path, port)) = first_fixed {
        let message = format!(
            "must be 0 while {path} fixes host port {port}: a surge copy starts on the same host \
             as the copy it replaces and could not bind the port the old copy holds (leave the number \
             out and the agent or the engine picks one per copy, or set max_surge = 0)"
        );
        r.err_related("update.max_surge", &[&path], message);
    }
}

/// Setting names become environment variables of the reload command (`SHOAL_SETTING_<NAME>`).
pub(crate) fn settings(
    r: &mut Report,
    settings: &BTreeMap<String, String>,
    reload: Option<&ReloadHook>,
) {
    if let Some(ReloadHook::Exec { command }) = reload {
        check_command(r, "reload.command", command, true);
    }
    if settings.is_empty() {
        return;
    }
    if settings.len() > SETTINGS_MAX {
        r.err(
            "settings",
            format!("has {} settings; at most {SETTINGS_MAX}", settings.len()),
        );
        return;
    }
    if reload.is_none() {
        let message = "live settings need a `reload` hook (a signal or a command) to apply them";
        r.err_related("settings", &["reload"], message);
    }
    for (name, value) in settings {
        let p = join("settings", name);
        let mut bytes = name.bytes();
        let ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase())
            && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && name.len() <= 63;
        if !ok {
            let message = format!("{name:?} is not a valid setting name: use lowercase letters, digits and '_', starting with a letter");
            r.err(&p, message);
        }
        check_text(r, &p, value, STRING_BYTES_MAX);
    }
}
