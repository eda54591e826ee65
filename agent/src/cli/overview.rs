//! `shoal status` without a name: the mesh at a glance, composed from the requests the other
//! commands send (cells, nodes, workloads, each workload's status, issues).

use std::collections::BTreeSet;

use serde::Serialize;
use shoal::state::cells::CellView;
use shoal::wire::api::{NodeView, Request, Response, StatusView, PAGE_ITEMS_MAX};
use shoal_core::resources::{human_cpu_millis, human_memory_bytes};

use super::connect::{call_pages, ClientOpts};

/// Other cells whose hosts the overview asks their envoys for (one request each, within
/// [`CELL_TIMEOUT`]); past it, or for a cell that is down, a summary line.
pub const OVERVIEW_CELLS_ASKED_MAX: usize = 8;

/// How long an envoy of another cell may take to list its hosts.
const CELL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Workloads whose status the overview asks for; past it, the overview says how many more
/// there are (one status request each: a mesh of thousands is `shoal get`'s).
pub const OVERVIEW_WORKLOADS_MAX: usize = 50;

/// The mesh at a glance, as `-o json` prints it.
#[derive(Debug, Serialize)]
pub struct Overview {
    /// Every cell the agent knows (one in a mesh without cells).
    pub cells: Vec<CellLine>,
    /// The hosts of the answering agent's cell.
    pub hosts: Vec<HostLine>,
    /// The hosts of other cells, as their envoys list them (cells not asked or not answering
    /// are left out; `cells` still lists them).
    pub other_hosts: Vec<CellHosts>,
    /// The first [`OVERVIEW_WORKLOADS_MAX`] workloads, by name.
    pub workloads: Vec<WorkloadLine>,
    /// Workloads past the first [`OVERVIEW_WORKLOADS_MAX`], not shown.
    pub workloads_not_shown: usize,
    /// Open issues on every node.
    pub issues: usize,
    /// Of them, held for `shoal approve`.
    pub issues_held: usize,
}

/// One cell.
#[derive(Debug, Serialize)]
pub struct CellLine {
    /// Its name.
    pub cell: String,
    /// The answering agent's own cell.
    pub own: bool,
    /// Not heard from within its timeout.
    pub down: bool,
    /// Live members.
    pub members: u64,
}

/// The hosts of another cell, or why they are not known.
#[derive(Debug, Serialize)]
pub struct CellHosts {
    /// The cell.
    pub cell: String,
    /// Its hosts, when an envoy answered.
    pub hosts: Vec<HostLine>,
    /// Why not, when none did.
    pub error: Option<String>,
}

/// One host of a cell.
#[derive(Debug, Serialize)]
pub struct HostLine {
    /// Node name.
    pub name: String,
    /// `alive`, `drain` or `dead`.
    pub state: &'static str,
    /// Its zone.
    pub zone: String,
    /// Declared capacity, millicores.
    pub cpu_millis: u64,
    /// Declared capacity, bytes.
    pub memory_bytes: u64,
}

impl HostLine {
    fn of(n: &NodeView) -> HostLine {
        HostLine {
            name: n.name.clone(),
            state: match (n.alive, n.draining) {
                (false, _) => "dead",
                (true, true) => "drain",
                (true, false) => "alive",
            },
            zone: n.zone.clone(),
            cpu_millis: n.cpu_millis,
            memory_bytes: n.memory_bytes,
        }
    }
}

/// One workload's replicas.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct WorkloadLine {
    /// Its name.
    pub name: String,
    /// Desired replicas.
    pub desired: u32,
    /// Replicas with a running instance.
    pub running: u32,
    /// Replicas with a running, healthy instance.
    pub healthy: u32,
}

impl WorkloadLine {
    /// Counts replicas (not instances: a replica moving has two for a while).
    pub fn of(status: &StatusView) -> WorkloadLine {
        let running = |healthy: bool| -> u32 {
            let replicas: BTreeSet<u32> = status
                .instances
                .iter()
                .filter(|i| i.phase == "running" && (!healthy || i.healthy == Some(true)))
                .map(|i| i.replica)
                .collect();
            replicas.len() as u32
        };
        WorkloadLine {
            name: status.name.clone(),
            desired: status.desired,
            running: running(false),
            healthy: running(true),
        }
    }
}

/// Asks the agent at `client` for everything the overview shows.
pub fn gather(client: &ClientOpts) -> anyhow::Result<Overview> {
    let cells: Vec<CellView> = call_pages(
        client,
        |after| Request::CellList {
            after,
            limit: PAGE_ITEMS_MAX,
        },
        |answer| match answer {
            Response::CellList { cells, next_after } => Some((cells, next_after)),
            _ => None,
        },
    )?;
    let nodes: Vec<NodeView> = call_pages(
        client,
        |after| Request::Nodes {
            after,
            limit: PAGE_ITEMS_MAX,
        },
        |answer| match answer {
            Response::Nodes { nodes, next_after } => Some((nodes, next_after)),
            _ => None,
        },
    )?;
    let workloads = call_pages(
        client,
        |after| Request::List {
            after,
            limit: PAGE_ITEMS_MAX,
        },
        |answer| match answer {
            Response::Workloads {
                workloads,
                next_after,
            } => Some((workloads, next_after)),
            _ => None,
        },
    )?;
    let mut lines = Vec::new();
    for w in workloads.iter().take(OVERVIEW_WORKLOADS_MAX) {
        let status = super::workloads::status_pages(client, &w.name)?;
        lines.push(WorkloadLine::of(&status));
    }
    let issues = call_pages(
        client,
        |after| Request::Issues {
            after,
            limit: PAGE_ITEMS_MAX,
        },
        |answer| match answer {
            Response::Issues { issues, next_after } => Some((issues, next_after)),
            _ => None,
        },
    )?;
    let asked = ClientOpts {
        timeout: client.timeout.min(CELL_TIMEOUT),
        ..client.clone()
    };
    let other_hosts = cells
        .iter()
        .filter(|c| !c.own && !c.down)
        .take(OVERVIEW_CELLS_ASKED_MAX)
        .map(|c| {
            let answer = super::nodes::nodes_of_other_cell(&asked, c);
            CellHosts {
                cell: c.summary.cell.clone(),
                hosts: answer
                    .as_ref()
                    .map(|nodes| nodes.iter().map(HostLine::of).collect())
                    .unwrap_or_default(),
                error: answer.err().map(|e| format!("{e:#}")),
            }
        })
        .collect();
    Ok(Overview {
        other_hosts,
        cells: cells
            .iter()
            .map(|c| CellLine {
                cell: c.summary.cell.clone(),
                own: c.own,
                down: c.down,
                members: c.summary.members as u64,
            })
            .collect(),
        hosts: nodes.iter().map(HostLine::of).collect(),
        workloads_not_shown: workloads.len().saturating_sub(lines.len()),
        workloads: lines,
        issues: issues.len(),
        issues_held: issues.iter().filter(|i| i.held.is_some()).count(),
    })
}

/// One cell's hosts: a title line, then a line per host.
fn host_lines(out: &mut String, cell: &str, hosts: &[HostLine]) {
    use std::fmt::Write;
    let alive = hosts.iter().filter(|h| h.state != "dead").count();
    let _ = writeln!(out, "HOSTS: {alive} of {} up in cell {cell}", hosts.len());
    for h in hosts {
        let _ = writeln!(
            out,
            "  {:<24} {:<6} {:<12} {:>10} {:>9}",
            h.name,
            h.state,
            h.zone,
            human_cpu_millis(h.cpu_millis),
            human_memory_bytes(h.memory_bytes)
        );
    }
}

/// The overview as text.
pub fn render(o: &Overview) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let own = o
        .cells
        .iter()
        .find(|c| c.own)
        .map_or(shoal::state::cells::DEFAULT_CELL, |c| &c.cell);
    host_lines(&mut out, own, &o.hosts);
    for c in o.cells.iter().filter(|c| !c.own) {
        match o.other_hosts.iter().find(|h| h.cell == c.cell) {
            Some(CellHosts {
                hosts, error: None, ..
            }) => host_lines(&mut out, &c.cell, hosts),
            other => {
                let state = match (c.down, other) {
                    (true, _) => "down".to_string(),
                    (false, Some(CellHosts { error: Some(e), .. })) => {
                        format!("up, its envoys did not answer ({e})")
                    }
                    (false, _) => "up".to_string(),
                };
                let _ = writeln!(
                    out,
                    "HOSTS of cell {}: {} members, {state} (`shoal nodes --cell {}`)",
                    c.cell, c.members, c.cell
                );
            }
        }
    }
    let total = o.workloads.len() + o.workloads_not_shown;
    let _ = writeln!(out, "\nWORKLOADS: {total}");
    if !o.workloads.is_empty() {
        let _ = writeln!(
            out,
            "  {:<32} {:>7} {:>7} {:>7}",
            "NAME", "DESIRED", "RUNNING", "HEALTHY"
        );
    }
    for w in &o.workloads {
        let mark = if w.healthy < w.desired { "  <-" } else { "" };
        let _ = writeln!(
            out,
            "  {:<32} {:>7} {:>7} {:>7}{mark}",
            w.name, w.desired, w.running, w.healthy
        );
    }
    if o.workloads_not_shown > 0 {
        let _ = writeln!(
            out,
            "  ... and {} more (`shoal get` lists them all)",
            o.workloads_not_shown
        );
    }
    let issues = match (o.issues, o.issues_held) {
        (0, _) => "ISSUES: none".to_string(),
        (n, 0) => format!("ISSUES: {n} (`shoal issues` lists them)"),
        (n, held) => format!(
            "ISSUES: {n}, {held} held for approval (`shoal issues` lists them with the \
             `shoal approve` command)"
        ),
    };
    let _ = writeln!(out, "\n{issues}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal::wire::api::InstanceView;

    fn instance(replica: u32, phase: &str, healthy: Option<bool>) -> InstanceView {
        InstanceView {
            replica,
            node: Some("n1".into()),
            phase: phase.into(),
            healthy,
            restarts: 0,
            spec_version: None,
            since_ms: None,
            last_error: None,
            reason: None,
            fence_token: None,
            pull: None,
            data_on: None,
        }
    }

    #[test]
    fn replicas_are_counted_once_each() {
        let status = StatusView {
            name: "web".into(),
            desired: 3,
            version: String::new(),
            instances: vec![
                instance(0, "running", Some(true)),
                // Replica 0 moving: a second healthy instance is still one replica.
                instance(0, "running", Some(true)),
                instance(1, "running", Some(false)),
                instance(2, "pending", None),
            ],
            notes: vec![],
            fit: None,
        };
        let line = WorkloadLine::of(&status);
        assert_eq!((line.desired, line.running, line.healthy), (3, 2, 1));
    }

    #[test]
    fn the_overview_reads_as_hosts_workloads_and_issues() {
        let o = Overview {
            cells: ["default", "eu-2", "eu-3", "eu-4"]
                .iter()
                .map(|&cell| CellLine {
                    cell: cell.into(),
                    own: cell == "default",
                    down: cell == "eu-4",
                    members: 2,
                })
                .collect(),
            hosts: vec![
                HostLine {
                    name: "n1".into(),
                    state: "alive",
                    zone: "a".into(),
                    cpu_millis: 1500,
                    memory_bytes: 24_683_792 * 1024,
                },
                HostLine {
                    name: "n2".into(),
                    state: "dead",
                    zone: "b".into(),
                    cpu_millis: 4000,
                    memory_bytes: 8 << 30,
                },
            ],
            workloads: vec![WorkloadLine {
                name: "web".into(),
                desired: 3,
                running: 2,
                healthy: 1,
            }],
            other_hosts: vec![
                CellHosts {
                    cell: "eu-2".into(),
                    hosts: vec![HostLine {
                        name: "m1".into(),
                        state: "alive",
                        zone: "c".into(),
                        cpu_millis: 500,
                        memory_bytes: 1 << 30,
                    }],
                    error: None,
                },
                CellHosts {
                    cell: "eu-3".into(),
                    hosts: vec![],
                    error: Some("timed out".into()),
                },
            ],
            workloads_not_shown: 0,
            issues: 2,
            issues_held: 1,
        };
        let text = render(&o);
        assert!(text.contains("HOSTS: 1 of 2 up in cell default"), "{text}");
        assert!(
            text.contains("HOSTS: 1 of 1 up in cell eu-2\n  m1 "),
            "{text}"
        );
        assert!(
            text.contains("cell eu-3: 2 members, up, its envoys did not answer (timed out)"),
            "{text}"
        );
        assert!(text.contains("cell eu-4: 2 members, down"), "{text}");
        assert!(text.contains("1.5 cores"), "{text}");
        assert!(text.contains("23.5Gi"), "{text}");
        assert!(!text.contains("Ki"), "{text}");
        assert!(text.contains("WORKLOADS: 1"), "{text}");
        let web = text.lines().find(|l| l.contains("web")).unwrap();
        let columns: Vec<&str> = web.split_whitespace().collect();
        assert_eq!(columns, ["web", "3", "2", "1", "<-"], "{text}");
        assert!(text.contains("ISSUES: 2, 1 held for approval"), "{text}");
    }
}
