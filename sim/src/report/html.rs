//! The report as one self-contained page (`report.html` with `--out`): the verdict, the
//! timeline (replicas over time, fault windows, events and false verdicts marked), the
//! replacement-time distribution, gossip and RPC bytes over time, false verdicts over time,
//! the violations, the summary with every term of its jargon explained, the concrete schedule
//! and the JSON report. Inline SVG and a little CSS; no script, no external asset, readable
//! offline.

use std::fmt::Write as _;

use super::charts::{esc, histogram, line_chart, Line, Mark, Window};
use super::Report;

/// Schedule lines shown at most (the JSON holds them all).
const SCHEDULE_SHOWN_MAX: usize = 2_000;

/// The terms of the summary, each explained (the page's glossary). Every word the summary
/// prints that a newcomer could not guess is here; a test checks the summary's terms appear.
pub const GLOSSARY: &[(&str, &str)] = &[
    ("desired / running / healthy", "The timeline's three lines, sampled every 100 ms of simulated time. Desired: replicas the acknowledged specs ask for. Running: replicas with at least one alive copy on some host (the hosts' runtimes are the ground truth, not what agents say). Healthy: replicas with a copy that runs and passes its health check."),
    ("fault window", "A shaded band on the timeline: a fault from when it fired to when it ended (a crash until its restart, a pause, a partition, a link fault, a starve, a slow link)."),
    ("converged", "Running = desired from some time after the last fault to the end of the timeline (and within the scenario's converged_within when it asserts one). \"N ms after the last fault\" counts from the end of the last fault, apply or late join."),
    ("failure detection (per observer)", "For each host crash, per live agent of its cell: the time from the crash until that agent's failure detector no longer lists the crashed incarnation as live."),
    ("failure detection (all observers)", "For each host crash: the time until every live agent of its cell holds it dead."),
    ("replacement (normal) / (exclusive)", "For each replica a crashed host ran: the time from the crash to the first running, healthy copy elsewhere. Exclusive replicas wait out the fencing delay (fence_delay) by design, so they are shown apart."),
    ("p50 / p99 / max (n=)", "Median, 99th percentile (nearest rank) and largest of n samples, in simulated ms. \"no samples\": nothing of that kind happened in the run."),
    ("spec propagation", "From an apply, scale, update or delete the simulator sent being acknowledged to every live agent holding that version (or something newer)."),
    ("rollout / automatic rollbacks", "Each update event's rollout: complete (every replica healthy at the new revision), rolled-back (the mesh wrote the earlier revision's spec again), superseded or unfinished. An automatic rollback is such a write by the mesh."),
    ("handoffs", "Running copies an agent stopped because their replica moved. \"Before a copy elsewhere ran\" counts the stops with no running copy anywhere else in the moment before: each is a healthy-copy-stopped violation."),
    ("exclusive duplicates", "Episodes of two alive copies of one exclusive replica at once: always a violation (the longest episode in ms)."),
    ("normal duplicates", "Episodes of two copies of one replica that is not exclusive (allowed: availability first, e.g. on both sides of a partition), and the longest."),
    ("replica-seconds missing", "The area between desired and healthy: for every 100 ms sample, the replicas without a healthy copy times 0.1 s, summed. 10 replica-seconds is one replica down for 10 s, or ten replicas for 1 s."),
    ("extra (replica-seconds)", "The same area for copies beyond one per desired replica (duplicates, orphans waiting for their handoff)."),
    ("moves (forced) over membership changes", "Replica assignment changes caused by hosts joining or leaving agents' views; forced moves are those of replicas whose host left."),
    ("reconciler timers served late", "How much later than its deadline any agent up at the end ran a reconciler timer (the host loop's own lateness; a starved agent's is large)."),
    ("false dead verdicts", "The older, narrower count: a host up 10 s dropped from the live set of an observer up 10 s while no partition and no pause was in force anywhere."),
    ("false verdicts: member deaths", "An observer's failure detector dropped a member whose same incarnation was up, and the two had an instant in the last 0.5 s when neither was frozen (paused or starved) and no partition cut them either way (a link fault that loses every message counts as a cut; lower loss and delay do not). Read only from agents that are not frozen. Counted always; a failure only under [assert] false_verdicts_max or false_member_deaths_max (which also fails when the agents' probes declared deaths the checker did not see)."),
    ("false verdicts: cell downs", "An agent stopped holding another cell up while some member of that cell was up and reachable from it (as above) within the last 0.5 s. A failure only under [assert] false_verdicts_max or false_cell_downs_max."),
    ("of N seen", "Every such verdict, true or false: members dropped from live sets, cells an agent stopped holding up."),
    ("starve cycles", "Frozen parts of starve duty cycles that ran (a starve freezes its hosts for frozen ms of every period)."),
    ("gossip msg/s, B/s per host", "Gossip messages and bytes every host sent per simulated second, averaged over hosts and the whole run (liveness phase included)."),
    ("rpc B/s per host", "Store sync and API bytes (requests and answers) per host per simulated second."),
    ("liveness: whole", "After the timeline the simulator undoes every fault (heals, clears link faults, resumes, ends starves, restarts crashed hosts, makes instances healthy) and waits for the mesh to be whole: every host up and serving, running = desired, every agent holding every acknowledged spec, every agent's live set holding every host, all for 2 s. \"Whole N ms after the timeline ended\" is when that began; the bound is liveness_within. \"after: ...\" lists what was undone."),
    ("LIVENESS FAILED", "The mesh was not whole within the bound; what was still missing follows (a host down, a replica running where it is not desired, an agent not seeing another live)."),
    ("VIOLATION", "A broken invariant, with when and the evidence: exclusive-duplicate, started-empty, over-capacity, acknowledged-spec-missing, spec-not-sent, healthy-copy-stopped."),
    ("EVENT FAILED", "A scheduled event that could not take effect (its selector matched too few hosts, nothing to heal, a restart of a host that is up ...): a fault that did not happen fails the run."),
    ("ASSERTION FAILED", "A bound of the scenario's [assert] table that the run missed."),
    ("trace_hash", "A hash of the event trace: two runs of one seed on one commit have equal hashes (the run replays from its seed)."),
    ("simulated s in wall s (x)", "Simulated time covered, the wall time it took, and their ratio."),
    ("replay", "The command that runs this exact run again."),
];

/// The page for `report`; `json` is the report's JSON, embedded.
pub fn page(report: &Report, json: &str) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let verdict = if report.passed { "passed" } else { "FAILED" };
    let title = format!("{} seed {}: {verdict}", report.scenario, report.seed);
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>",
        esc(&title),
        esc(&title)
    );
    let _ = writeln!(
        out,
        "<p class=\"{}\">{} hosts, {:.1} simulated s in {:.2} wall s; trace_hash <code>{}</code>; \
         failure kinds: {}</p>\n<p>replay: <code>{}</code></p>",
        if report.passed { "ok" } else { "bad" },
        report.nodes,
        report.sim_seconds,
        report.wall_seconds,
        esc(&report.trace_hash),
        if report.failure_kinds.is_empty() {
            "none".to_string()
        } else {
            esc(&report.failure_kinds.join(", "))
        },
        esc(&report.replay)
    );
    out += "<nav><a href=\"#timeline\">timeline</a> · <a href=\"#replacement\">replacement</a> · \
            <a href=\"#traffic\">traffic</a> · <a href=\"#verdicts\">false verdicts</a> · \
            <a href=\"#problems\">violations</a> · <a href=\"#summary\">summary and terms</a> · \
            <a href=\"#schedule\">schedule</a> · <a href=\"#json\">JSON</a></nav>\n";
    timeline(&mut out, report);
    replacement(&mut out, report);
    traffic(&mut out, report);
    verdicts(&mut out, report);
    problems(&mut out, report);
    summary(&mut out, report);
    schedule(&mut out, report);
    let _ = writeln!(
        out,
        "<h2 id=\"json\">The JSON report</h2>\n<p>The same as <code>{}-seed{}.json</code> beside this page.</p>\n\
         <details><summary>show</summary><pre>{}</pre></details>\n</body>\n</html>",
        esc(&report.scenario),
        report.seed,
        esc(json)
    );
    out
}

fn windows(report: &Report) -> Vec<Window> {
    report
        .windows
        .iter()
        .map(|w| (w.start_ms, w.end_ms, w.label.clone()))
        .collect()
}

/// The time of a schedule line (`   12.500s text`), in ms.
fn schedule_ms(line: &str) -> Option<u64> {
    let head = line.trim_start().split_once("s ")?.0;
    let s: f64 = head.parse().ok()?;
    Some((s * 1000.0).round() as u64)
}

fn t_max_ms(report: &Report) -> u64 {
    (report.sim_seconds * 1000.0).round() as u64
}

fn timeline(out: &mut String, report: &Report) {
    let get = |f: fn(&crate::check::Sample) -> u32| -> Vec<(u64, f64)> {
        report
            .series
            .iter()
            .map(|s| (s.t_ms, f64::from(f(s))))
            .collect()
    };
    let lines = [
        Line {
            label: "desired",
            color: "#555",
            dash: "6 3",
            points: get(|s| s.desired),
        },
        Line {
            label: "running",
            color: "#2e86de",
            dash: "",
            points: get(|s| s.running),
        },
        Line {
            label: "healthy",
            color: "#27ae60",
            dash: "",
            points: get(|s| s.healthy),
        },
    ];
    let mut marks: Vec<Mark> = report
        .schedule
        .iter()
        .filter_map(|l| Some((schedule_ms(l)?, "#8e44ad", l.trim().to_string())))
        .collect();
    marks.extend(report.violations.iter().map(|v| {
        let what = format!("VIOLATION {}: {}", v.kind, v.detail);
        (v.t_ms, "#c0392b", what)
    }));
    let _ = write!(
        out,
        "<h2 id=\"timeline\">Timeline</h2>\n<p>Replicas desired, running and healthy over simulated \
         time; faults shaded; events (purple) and violations (red) marked under the axis (hover \
         for what each was).</p>\n{}",
        line_chart(
            "replicas",
            "replicas",
            t_max_ms(report),
            &lines,
            &windows(report),
            &marks
        )
    );
}

fn replacement(out: &mut String, report: &Report) {
    let _ = write!(
        out,
        "<h2 id=\"replacement\">Replacement time</h2>\n<p>For each replica a crashed host ran: \
         crash to a healthy copy elsewhere. Normal: {}; exclusive: {}.</p>\n{}{}",
        esc(&report.replacement.show()),
        esc(&report.replacement_exclusive.show()),
        histogram(
            "replacement time, normal replicas (ms)",
            &report.replacement_samples_ms,
            report.replacement.p50_ms,
            report.replacement.p99_ms
        ),
        if report.replacement_exclusive_samples_ms.is_empty() {
            String::new()
        } else {
            histogram(
                "replacement time, exclusive replicas (ms)",
                &report.replacement_exclusive_samples_ms,
                report.replacement_exclusive.p50_ms,
                report.replacement_exclusive.p99_ms,
            )
        }
    );
}

fn traffic(out: &mut String, report: &Report) {
    let hosts = f64::from(report.nodes.max(1));
    let mut gossip = Vec::new();
    let mut rpc = Vec::new();
    for pair in report.traffic_series.windows(2) {
        let dt = (pair[1].t_ms - pair[0].t_ms) as f64 / 1000.0;
        if dt <= 0.0 {
            continue;
        }
        let per = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / dt / hosts;
        gossip.push((
            pair[1].t_ms,
            per(pair[0].gossip_bytes, pair[1].gossip_bytes),
        ));
        rpc.push((pair[1].t_ms, per(pair[0].rpc_bytes, pair[1].rpc_bytes)));
    }
    let lines = [
        Line {
            label: "gossip",
            color: "#2e86de",
            dash: "",
            points: gossip,
        },
        Line {
            label: "rpc",
            color: "#e67e22",
            dash: "",
            points: rpc,
        },
    ];
    let _ = write!(
        out,
        "<h2 id=\"traffic\">Gossip and RPC bytes</h2>\n<p>Bytes sent per host per simulated second, \
         each second (whole run: gossip {:.0} B/s and {:.1} messages/s per host, rpc {:.0} B/s).</p>\n{}",
        report.gossip_bytes_per_node_per_s,
        report.gossip_messages_per_node_per_s,
        report.rpc_bytes_per_node_per_s,
        line_chart(
            "bytes sent per host per second",
            "B/s per host",
            t_max_ms(report),
            &lines,
            &windows(report),
            &[]
        )
    );
}

fn verdicts(out: &mut String, report: &Report) {
    let mut member = vec![(0, 0.0)];
    let mut cell = vec![(0, 0.0)];
    for v in &report.false_verdicts {
        let list = if v.kind == "cell-down" {
            &mut cell
        } else {
            &mut member
        };
        let n = list.last().map_or(0.0, |p| p.1);
        list.push((v.t_ms, n));
        list.push((v.t_ms, n + 1.0));
    }
    let end = t_max_ms(report);
    for list in [&mut member, &mut cell] {
        let n = list.last().map_or(0.0, |p| p.1);
        list.push((end, n));
    }
    let lines = [
        Line {
            label: "member deaths",
            color: "#c0392b",
            dash: "",
            points: member,
        },
        Line {
            label: "cell downs",
            color: "#8e44ad",
            dash: "4 2",
            points: cell,
        },
    ];
    let _ = write!(
        out,
        "<h2 id=\"verdicts\">False verdicts</h2>\n<p>{} false member deaths (of {} members dropped \
         from a live set), {} false cell downs (of {} cells no longer held up){}. False: the \
         subject was up and reachable from its observer within the last second (see the terms \
         below).</p>\n{}",
        report.false_member_deaths,
        report.member_deaths_seen,
        report.false_cell_downs,
        report.cell_downs_seen,
        match report.starve_cycles {
            0 => String::new(),
            n => format!("; {n} starve cycles ran"),
        },
        line_chart(
            "false verdicts so far",
            "verdicts",
            end,
            &lines,
            &windows(report),
            &[]
        )
    );
    if !report.false_verdicts.is_empty() {
        out.push_str("<table><tr><th>at</th><th>kind</th><th>observer</th><th>subject</th></tr>\n");
        for v in &report.false_verdicts {
            let _ = writeln!(
                out,
                "<tr><td>{:.3} s</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                v.t_ms as f64 / 1000.0,
                v.kind,
                esc(&v.observer),
                esc(&v.subject)
            );
        }
        out.push_str("</table>\n");
    }
}

fn problems(out: &mut String, report: &Report) {
    out.push_str("<h2 id=\"problems\">Violations, failed events and assertions</h2>\n");
    let none = report.violations.is_empty()
        && report.event_failures.is_empty()
        && report.assertion_failures.is_empty()
        && report.liveness.as_ref().is_none_or(|l| l.passed);
    if none {
        out.push_str("<p class=\"ok\">None.</p>\n");
        return;
    }
    out.push_str("<table><tr><th>at</th><th>what</th><th>evidence</th></tr>\n");
    for v in &report.violations {
        let during = v
            .during
            .as_ref()
            .map_or(String::new(), |d| format!(" (began during the {})", esc(d)));
        let _ = writeln!(
            out,
            "<tr><td>{:.3} s</td><td>VIOLATION {}</td><td>{}{during}</td></tr>",
            v.t_ms as f64 / 1000.0,
            esc(&v.kind),
            esc(&v.detail)
        );
    }
    for e in &report.event_failures {
        let _ = writeln!(
            out,
            "<tr><td>{:.3} s</td><td>EVENT FAILED</td><td>{}: {}</td></tr>",
            e.t_ms as f64 / 1000.0,
            esc(&e.event),
            esc(&e.why)
        );
    }
    for a in &report.assertion_failures {
        let _ = writeln!(
            out,
            "<tr><td></td><td>ASSERTION FAILED</td><td>{}</td></tr>",
            esc(a)
        );
    }
    if let Some(l) = report.liveness.as_ref().filter(|l| !l.passed) {
        let _ = writeln!(
            out,
            "<tr><td>{:.3} s</td><td>LIVENESS FAILED</td><td>{}</td></tr>",
            l.started_ms as f64 / 1000.0,
            esc(&l.gaps.join("; "))
        );
    }
    out.push_str("</table>\n");
}

fn summary(out: &mut String, report: &Report) {
    let _ = writeln!(
        out,
        "<h2 id=\"summary\">Summary</h2>\n<p>What <code>shoal-sim run</code> printed.</p>\n<pre>{}</pre>\n\
         <h3>The terms</h3>\n<dl>",
        esc(&report.summary())
    );
    for (term, meaning) in GLOSSARY {
        let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", esc(term), esc(meaning));
    }
    out.push_str("</dl>\n");
}

fn schedule(out: &mut String, report: &Report) {
    let _ = write!(
        out,
        "<h2 id=\"schedule\">The concrete schedule</h2>\n<p>Every event as it fired, selectors \
         resolved ({} lines).</p>\n<pre>",
        report.schedule.len()
    );
    for line in report.schedule.iter().take(SCHEDULE_SHOWN_MAX) {
        out.push_str(&esc(line));
        out.push('\n');
    }
    if report.schedule.len() > SCHEDULE_SHOWN_MAX {
        let _ = writeln!(
            out,
            "... {} more lines in the JSON",
            report.schedule.len() - SCHEDULE_SHOWN_MAX
        );
    }
    out.push_str("</pre>\n");
}

const STYLE: &str = "body{font-family:sans-serif;max-width:960px;margin:1em auto;padding:0 1em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}\
.ok{color:#1e7e34}.bad{color:#c0392b;font-weight:bold}\
svg.chart{max-width:100%;height:auto;font-size:11px;background:#fff}\
rect.fault{fill:#e4572e;fill-opacity:.15}\
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}\
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.85em}\
dt{font-weight:bold;margin-top:.5em}dd{margin-left:1.5em}nav{font-size:.9em}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_summary_term_is_explained() {
        // The summary of a run with every section in it.
        let report = Report {
            starve_cycles: 3,
            liveness: Some(crate::check::LivenessOutcome {
                passed: true,
                converged_after_ms: Some(100),
                ..Default::default()
            }),
            ..Report::default()
        };
        let summary = report.summary();
        let terms = GLOSSARY
            .iter()
            .map(|(t, _)| *t)
            .collect::<Vec<_>>()
            .join(" | ");
        for used in [
            "converged",
            "failure detection (per observer)",
            "failure detection (all observers)",
            "replacement (normal)",
            "replacement (exclusive)",
            "spec propagation",
            "handoffs",
            "exclusive duplicates",
            "normal duplicates",
            "replica-seconds missing",
            "extra",
            "membership changes",
            "reconciler timers served",
            "false dead verdicts",
            "false verdicts",
            "starve cycles",
            "liveness: whole",
            "trace_hash",
        ] {
            assert!(
                summary.contains(used),
                "{used} not in the summary:\n{summary}"
            );
            let word = used.split(" (").next().unwrap_or(used);
            assert!(terms.contains(word), "{used} is not explained");
        }
    }

    #[test]
    fn schedule_lines_give_their_time() {
        assert_eq!(schedule_ms("   12.500s crash node=n3"), Some(12_500));
        assert_eq!(schedule_ms("no time here"), None);
    }

    #[test]
    fn the_page_escapes_what_it_shows() {
        let report = Report {
            scenario: "<b>".into(),
            ..Report::default()
        };
        let page = page(&report, "{\"a\":\"<script>\"}");
        assert!(!page.contains("<b>") && !page.contains("<script>"));
        assert!(page.contains("&lt;b&gt;"));
    }
}
