//! The pages, each the `<main>` part built from [`super::source`] answers (the layout is
//! [`super::html::page`]). Every value from the API is escaped; nothing here writes.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::html::{ago, bar, esc, now_ms, time, url_segment};
use super::source::{self, SourceError, REPLICAS_SHOWN_MAX};
use super::WeakApi;
use crate::wire::api::{InstanceView, Response, StatusView, WorkloadSummary};

/// What one workload holds and shows, for the lists.
struct WorkloadRow {
    summary: WorkloadSummary,
    status: Result<StatusView, SourceError>,
}

/// Replicas running, and running and healthy, of a status.
fn counts(status: &StatusView) -> (u32, u32) {
    let running = status
        .instances
        .iter()
        .filter(|i| i.phase == "running")
        .count() as u32;
    let healthy = status
        .instances
        .iter()
        .filter(|i| i.phase == "running" && i.healthy == Some(true))
        .count() as u32;
    (running, healthy)
}

/// CPU for people: `1.5 cores`, `250m`.
pub fn cpu(millis: u64) -> String {
    if millis >= 1000 {
        let cores = millis as f64 / 1000.0;
        if millis.is_multiple_of(1000) {
            format!("{} cores", millis / 1000)
        } else {
            format!("{cores:.1} cores")
        }
    } else {
        format!("{millis}m")
    }
}

/// Memory for people: `23.5Gi`, `512Mi`.
pub fn memory(bytes: u64) -> String {
    for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        let unit = 1u64 << shift;
        if bytes >= unit {
            let value = bytes as f64 / unit as f64;
            return if bytes.is_multiple_of(unit) || value >= 100.0 {
                format!("{value:.0}{suffix}")
            } else {
                format!("{value:.1}{suffix}")
            };
        }
    }
    format!("{bytes}B")
}

async fn workload_rows(api: &WeakApi) -> Result<(Vec<WorkloadRow>, bool), SourceError> {
    let (summaries, cut) = source::workloads(api).await?;
    let mut rows = Vec::with_capacity(summaries.len());
    for summary in summaries {
        let status = source::status(api, &summary.name, REPLICAS_SHOWN_MAX).await;
        rows.push(WorkloadRow { summary, status });
    }
    Ok((rows, cut))
}

/// The mesh: cells, hosts with liveness, version, runtime and capacity used against declared.
pub async fn overview(api: &WeakApi) -> Result<String, SourceError> {
    let nodes = source::nodes(api).await?;
    let cells = source::cells(api).await?;
    let (rows, cut) = workload_rows(api).await?;
    let issues = source::issues(api).await?;
    // What the replicas placed on each host reserve (CPU millis, memory bytes).
    let mut used: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for row in &rows {
        let Ok(status) = &row.status else { continue };
        for i in status
            .instances
            .iter()
            .filter(|i| source::holds_resources(i))
        {
            if let Some(node) = &i.node {
                let entry = used.entry(node.as_str()).or_default();
                entry.0 += row.summary.cpu_millis;
                entry.1 += row.summary.memory_bytes;
            }
        }
    }
    let alive = nodes.iter().filter(|n| n.alive).count();
    let mut out = String::new();
    let _ = write!(
        out,
        "<h1>Mesh</h1><p class=\"summary\"><span id=\"hosts-alive\">{alive} of {} hosts alive</span> · \
         <a href=\"/workloads\">{} workloads</a>{} · <a href=\"/issues\">{} issues</a></p>",
        nodes.len(),
        rows.len(),
        if cut { " (first shown)" } else { "" },
        issues.len()
    );
    if !cells.is_empty() {
        out.push_str(
            "<h2>Cells</h2><table><thead><tr><th>Cell</th><th>State</th><th>Members</th>\
             <th>Free CPU</th><th>Free memory</th><th>Heard</th></tr></thead><tbody>",
        );
        for c in &cells {
            let state = match c.state() {
                "own" => "up",
                other => other,
            };
            let _ = write!(
                out,
                "<tr><td>{}{}</td><td class=\"{state}\">{state}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}s ago</td></tr>",
                esc(&c.summary.cell),
                if c.own { " (this agent's)" } else { "" },
                c.summary.members,
                cpu(c.summary.free.cpu_millis),
                memory(c.summary.free.memory_bytes),
                c.heard_ms_ago / 1000
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str(
        "<h2>Hosts</h2><table id=\"hosts\"><thead><tr><th>Host</th><th>State</th><th>Zone</th>\
         <th>Version</th><th>Runtime</th><th>CPU reserved</th><th>Memory reserved</th>\
         <th>API</th></tr></thead><tbody>",
    );
    for n in &nodes {
        let (cpu_used, mem_used) = used.get(n.name.as_str()).copied().unwrap_or_default();
        let state = match (n.alive, n.draining) {
            (false, _) => "dead",
            (true, true) => "draining",
            (true, false) => "alive",
        };
        let version = n
            .build
            .as_ref()
            .map(|b| b.version.clone())
            .or_else(|| n.agent_version.clone())
            .unwrap_or_else(|| "-".into());
        let _ = write!(
            out,
            "<tr data-node=\"{name}\"><td>{name}</td><td class=\"{state}\">{state}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>",
            esc(&n.zone),
            esc(&version),
            esc(n.runtimes.as_deref().unwrap_or("-")),
            name = esc(&n.name),
        );
        let text = format!("{} of {}", cpu(cpu_used), cpu(n.cpu_millis));
        bar(&mut out, cpu_used, n.cpu_millis, &text);
        out.push_str("</td><td>");
        let text = format!("{} of {}", memory(mem_used), memory(n.memory_bytes));
        bar(&mut out, mem_used, n.memory_bytes, &text);
        let _ = write!(
            out,
            "</td><td>{}</td></tr>",
            esc(n.api_addr.as_deref().unwrap_or("-"))
        );
    }
    out.push_str("</tbody></table>");
    Ok(out)
}

/// Every workload with its replicas desired, running and healthy, and its rollout.
pub async fn workloads(api: &WeakApi) -> Result<String, SourceError> {
    let (rows, cut) = workload_rows(api).await?;
    let mut out = String::from("<h1>Workloads</h1>");
    if rows.is_empty() {
        out.push_str("<p>No workloads. Apply one with <code>shoal apply -f SPEC.toml</code>.</p>");
        return Ok(out);
    }
    out.push_str(
        "<table id=\"workloads\"><thead><tr><th>Workload</th><th>Desired</th><th>Running</th>\
         <th>Healthy</th><th>Rollout</th><th>Per replica</th><th>Version</th></tr></thead><tbody>",
    );
    for row in &rows {
        let s = &row.summary;
        let (running, healthy, rollout) = match &row.status {
            Ok(status) => {
                let (running, healthy) = counts(status);
                let rollout = rollout_state(api, status).await;
                (running.to_string(), healthy.to_string(), rollout)
            }
            Err(e) => ("?".into(), "?".into(), format!("status failed: {e}")),
        };
        let _ = write!(
            out,
            "<tr><td><a href=\"/workloads/{}\">{}</a></td><td>{}</td><td>{running}</td>\
             <td>{healthy}</td><td>{}</td><td>{} · {}</td><td>{}</td></tr>",
            url_segment(&s.name),
            esc(&s.name),
            s.replicas,
            esc(&rollout),
            cpu(s.cpu_millis),
            memory(s.memory_bytes),
            esc(&shoal_core::hlc::format_version(&s.version)),
        );
    }
    out.push_str("</tbody></table>");
    if cut {
        let _ = write!(
            out,
            "<p>The first {} workloads are shown; <code>shoal get</code> lists them all.</p>",
            source::WORKLOADS_MAX
        );
    }
    Ok(out)
}

/// Where a workload's rollout stands, in words, with its progress.
async fn rollout_state(api: &WeakApi, status: &StatusView) -> String {
    let Ok(Response::History {
        paused,
        record,
        assessment,
        ..
    }) = source::history(api, &status.name).await
    else {
        return "-".into();
    };
    let updated = status
        .instances
        .iter()
        .filter(|i| {
            i.phase == "running"
                && i.healthy == Some(true)
                && i.spec_version.as_deref() == Some(status.version.as_str())
        })
        .count() as u32;
    let progress = format!("{updated}/{} updated", status.desired);
    use shoal_core::rollout::{Outcome, RolloutPhase};
    if paused {
        return format!("paused, {progress}");
    }
    if let Some(r) = record.as_ref().filter(|r| r.version == status.version) {
        if r.outcome == Outcome::Failed {
            return format!("failed: {}", r.reason);
        }
        if updated >= status.desired {
            return "complete".into();
        }
        return format!("degraded, {progress}");
    }
    match assessment.as_ref().map(|a| a.phase) {
        Some(RolloutPhase::Failed) => format!("failing, {progress}"),
        _ if updated >= status.desired => "complete".into(),
        _ => format!("in progress, {progress}"),
    }
}

/// The status's `node: note` lines with one line per note, naming every node that has it.
fn grouped_notes(notes: &[String]) -> BTreeMap<&str, Vec<&str>> {
    let mut grouped: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for line in notes {
        let (node, note) = line.split_once(": ").unwrap_or(("-", line.as_str()));
        grouped.entry(note).or_default().push(node);
    }
    grouped
}

fn replica_row(out: &mut String, name: &str, i: &InstanceView, now: u64) {
    let health = match (i.phase.as_str(), i.healthy) {
        (_, Some(true)) => "healthy",
        (_, Some(false)) => "unhealthy",
        _ => "-",
    };
    let why = i
        .reason
        .as_deref()
        .or(i.last_error.as_deref())
        .unwrap_or("");
    let _ = write!(
        out,
        "<tr><td><a href=\"{}/replicas/{r}/logs\">{r}</a></td><td>{}</td><td class=\"{phase}\">{phase}</td>\
         <td class=\"{health}\">{health}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        url_segment(name),
        esc(i.node.as_deref().unwrap_or("-")),
        i.since_ms.map_or_else(|| "-".into(), |ms| ago(ms, now)),
        i.restarts,
        esc(why),
        r = i.replica,
        phase = esc(&i.phase),
    );
}

/// One workload: its replicas, rollout, history, this agent's recent events about it, and its
/// spec as `get` answers a read-only client (secret values redacted).
pub async fn workload(api: &WeakApi, name: &str) -> Result<String, SourceError> {
    let status = source::status(api, name, REPLICAS_SHOWN_MAX).await?;
    let now = now_ms();
    let mut out = String::with_capacity(256 + status.instances.len() * 160);
    let (running, healthy) = counts(&status);
    let rollout = rollout_state(api, &status).await;
    let _ = write!(
        out,
        "<h1>{}</h1><p class=\"summary\">{} desired · {running} running · {healthy} healthy · \
         rollout: {} · version {}</p>",
        esc(name),
        status.desired,
        esc(&rollout),
        esc(&shoal_core::hlc::format_version(&status.version)),
    );
    if let Some(fit) = &status.fit {
        let _ = write!(out, "<p class=\"warn\">{}</p>", esc(fit));
    }
    for (note, nodes) in grouped_notes(&status.notes) {
        let _ = write!(
            out,
            "<p class=\"note\">{}: {}</p>",
            esc(&nodes.join(", ")),
            esc(note)
        );
    }
    out.push_str(
        "<h2>Replicas</h2><p class=\"note\">A replica's number links to its output.</p>\
         <table id=\"replicas\"><thead><tr><th>#</th><th>Host</th><th>Phase</th><th>Health</th>\
         <th>For</th><th>Restarts</th><th>Reason</th></tr></thead><tbody>",
    );
    for i in &status.instances {
        replica_row(&mut out, name, i, now);
    }
    out.push_str("</tbody></table>");
    if status.desired > REPLICAS_SHOWN_MAX {
        let _ = write!(
            out,
            "<p>The first {REPLICAS_SHOWN_MAX} replicas are shown; <code>shoal status {}</code> \
             lists them all.</p>",
            esc(name)
        );
    }
    history_section(&mut out, api, name).await;
    events_section(&mut out, api, Some(name)).await;
    spec_section(&mut out, api, name).await;
    Ok(out)
}

async fn history_section(out: &mut String, api: &WeakApi, name: &str) {
    let Ok(Response::History { versions, .. }) = source::history(api, name).await else {
        return;
    };
    out.push_str(
        "<h2>History</h2><table><thead><tr><th>Version</th><th>Outcome</th><th>Replicas</th>\
         <th>By</th><th>Runs</th></tr></thead><tbody>",
    );
    for v in &versions {
        let outcome = match (&v.outcome, v.current) {
            (Some(o), _) => o.clone(),
            (None, true) => "current".into(),
            (None, false) => "-".into(),
        };
        let why = if v.reason.is_empty() {
            String::new()
        } else {
            format!("<br><small>{}</small>", esc(&v.reason))
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}{why}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            esc(&shoal_core::hlc::format_version(&v.version)),
            esc(&outcome),
            v.replicas,
            esc(&v.by),
            esc(&v.runs)
        );
    }
    out.push_str("</tbody></table>");
}

/// Events this agent recorded, newest first; only those of `workload` when given.
async fn events_section(out: &mut String, api: &WeakApi, workload: Option<&str>) {
    let Ok(events) = source::events(api, 0, crate::wire::api::PAGE_ITEMS_MAX).await else {
        return;
    };
    let prefix = workload.map(|w| format!("{w}/"));
    let now = now_ms();
    let shown: Vec<_> = events
        .iter()
        .rev()
        .filter(|e| match &prefix {
            None => true,
            Some(p) => e
                .replica
                .as_deref()
                .is_some_and(|r| r.starts_with(p.as_str())),
        })
        .take(50)
        .collect();
    out.push_str("<h2>Recent events on this agent</h2>");
    if shown.is_empty() {
        out.push_str("<p>None recorded by this agent.</p>");
        return;
    }
    out.push_str(
        "<table class=\"events\"><thead><tr><th>When</th><th>Node</th><th>Kind</th><th>Replica</th>\
         <th>Why</th></tr></thead><tbody>",
    );
    for e in shown {
        let _ = write!(
            out,
            "<tr><td title=\"{}\">{} ago</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            time(e.at_ms),
            ago(e.at_ms, now),
            esc(&e.node),
            esc(&e.kind),
            esc(e.replica.as_deref().unwrap_or("-")),
            esc(&e.reason)
        );
    }
    out.push_str("</tbody></table>");
}

async fn spec_section(out: &mut String, api: &WeakApi, name: &str) {
    let req = crate::wire::api::Request::Get {
        name: name.to_string(),
    };
    let Ok(Response::Workload(view)) = source::ask(api, req).await else {
        return;
    };
    let Ok(json) = serde_json::to_string_pretty(&view.spec) else {
        return;
    };
    let _ = write!(
        out,
        "<details><summary>Spec (secret values hidden)</summary><pre>{}</pre></details>",
        esc(&json)
    );
}

/// A replica's output, the last 200 lines.
pub async fn log_tail(api: &WeakApi, name: &str, replica: u32) -> Result<String, SourceError> {
    let lines = source::log_tail(api, name, replica, 200).await?;
    let mut out = String::new();
    let _ = write!(
        out,
        "<h1><a href=\"/workloads/{}\">{}</a> replica {replica}: output</h1>",
        url_segment(name),
        esc(name)
    );
    if lines.is_empty() {
        out.push_str("<p>The replica has written nothing yet.</p>");
        return Ok(out);
    }
    out.push_str("<pre class=\"log\">");
    for l in &lines {
        let _ = writeln!(
            out,
            "<span class=\"{}\">{}</span>",
            l.stream.as_str(),
            esc(&l.text)
        );
    }
    out.push_str("</pre>");
    Ok(out)
}

/// The issues of the mesh, each held one with the command that approves it.
pub async fn issues(api: &WeakApi) -> Result<String, SourceError> {
    let issues = source::issues(api).await?;
    let now = now_ms();
    let mut out = String::from("<h1>Issues</h1>");
    if issues.is_empty() {
        out.push_str("<p>No issues: every reconciler converges on its own.</p>");
        return Ok(out);
    }
    out.push_str(
        "<table id=\"issues\"><thead><tr><th>Id</th><th>Kind</th><th>Replica</th><th>Node</th>\
         <th>Since</th><th>What</th><th>To act</th></tr></thead><tbody>",
    );
    for i in &issues {
        let act = match (&i.held, i.approved) {
            (_, true) => "approved".to_string(),
            (Some(held), false) => format!(
                "held: {}<br><code>shoal approve {}</code>",
                esc(held),
                esc(&i.id)
            ),
            (None, false) => "the reconciler acts on its own".into(),
        };
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{} ago</td><td>{}</td>\
             <td>{act}</td></tr>",
            esc(&i.id),
            esc(&i.kind.to_string()),
            esc(&i.replica.as_ref().map_or_else(|| "-".into(), |r| r.to_string())),
            esc(&i.node),
            ago(i.since_ms, now),
            esc(&i.message),
        );
    }
    out.push_str("</tbody></table>");
    Ok(out)
}

/// This agent's recent events (new ones arrive live in the side panel).
pub async fn events(api: &WeakApi) -> Result<String, SourceError> {
    let mut out = String::from("<h1>Events</h1>");
    events_section(&mut out, api, None).await;
    Ok(out)
}
