//! Real `shoal agent` processes on loopback in two cells, every one seeded through the first
//! agent (of cell c1): agents of c2 find each other through its directory, each cell gossips
//! only within itself, both know both cells, a workload applied in c1 runs once per replica
//! across the cells and `status` agrees on every agent, and when c2 dies whole its replicas run
//! in c1.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{stderr, wait_until, write_spec, Cluster};

const WORKLOAD: &str = "cellsagents";

fn cell_of(i: usize) -> &'static str {
    ["c1", "c2"][i % 2]
}

/// Replica -> its instances as (node, phase, healthy).
type Placed = BTreeMap<u64, Vec<(String, String, bool)>>;

/// What `status -o json` on agent `i` shows.
fn status(cluster: &Cluster, i: usize) -> Option<Placed> {
    let out = cluster.cli(i, &["status", WORKLOAD, "-o", "json", "--timeout", "8s"]);
    if !out.status.success() {
        eprintln!("status on agent {i}: {}", stderr(&out));
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let mut at: Placed = BTreeMap::new();
    for inst in v["instances"].as_array()? {
        at.entry(inst["replica"].as_u64()?).or_default().push((
            inst["node"].as_str().unwrap_or("-").to_string(),
            inst["phase"].as_str()?.to_string(),
            inst["healthy"].as_bool() == Some(true),
        ));
    }
    Some(at)
}

/// Every replica of 6 has exactly one instance, running and healthy, on one of `nodes`.
fn all_running_once_on(at: &Placed, nodes: &[&str]) -> bool {
    at.len() == 6
        && at.values().all(|list| {
            list.len() == 1
                && list[0].1 == "running"
                && list[0].2
                && nodes.contains(&list[0].0.as_str())
        })
}

fn cells(cluster: &Cluster, i: usize) -> Option<Vec<(String, bool)>> {
    let out = cluster.cli(i, &["nodes", "--cells", "-o", "json", "--timeout", "2s"]);
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v.as_array()?
        .iter()
        .map(|c| {
            Some((
                c["summary"]["cell"].as_str()?.to_string(),
                c["down"].as_bool()?,
            ))
        })
        .collect()
}

#[test]
fn two_cells_join_through_one_seed_place_across_and_survive_the_loss_of_one() {
    let mut cluster = Cluster::new();
    // A duration no other test uses: the processes are this test's (pkill'd on drop).
    cluster.cleanup.push("sleep 3593".to_string());
    let names = ["a1", "a2", "a3", "a4", "a5", "a6"];
    for (i, name) in names.iter().enumerate() {
        cluster.agent_args = vec!["--cell".into(), cell_of(i).into()];
        cluster.add(name);
    }
    let members_of = |cell: &str| -> Vec<String> {
        names
            .iter()
            .enumerate()
            .filter(|(i, _)| cell_of(*i) == cell)
            .map(|(_, n)| n.to_string())
            .collect()
    };
    // Each cell forms on its own, every agent of c2 seeded only through a1 of c1.
    let formed = wait_until(Duration::from_secs(60), || {
        (0..names.len()).all(|i| {
            cluster.alive_nodes(i).is_some_and(|mut alive| {
                alive.sort();
                alive == members_of(cell_of(i))
            })
        })
    });
    assert!(formed, "cells did not form:\n{}", cluster.logs());
    let known = wait_until(Duration::from_secs(30), || {
        (0..names.len()).all(|i| {
            cells(&cluster, i)
                .is_some_and(|c| c == vec![("c1".to_string(), false), ("c2".to_string(), false)])
        })
    });
    assert!(
        known,
        "not every agent knows both cells up:\n{}",
        cluster.logs()
    );

    // An agent of c2 named as a live member of c1 is refused, as inside a cell.
    cluster.agent_args = vec!["--cell".into(), "c2".into()];
    let twin = cluster.add("a1");
    let exited = wait_until(Duration::from_secs(30), || {
        cluster.agents[twin]
            .child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some_and(|s| !s.success()))
    });
    let log = std::fs::read_to_string(&cluster.agents[twin].log).unwrap_or_default();
    assert!(exited, "a second a1 (in c2) still runs:\n{log}");
    assert!(
        log.contains("already used by a live agent of cell c1"),
        "{log}"
    );
    cluster.agents[twin].child = None;

    // A workload applied in c1 runs once per replica across both cells; status agrees everywhere.
    let spec = write_spec(cluster.dir.path(), WORKLOAD, 6);
    let spec_text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("\"3600\"", "\"3593\"");
    std::fs::write(&spec, spec_text).unwrap();
    let out = cluster.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
    let everywhere = names.to_vec();
    let placed = wait_until(Duration::from_secs(60), || {
        let first = status(&cluster, 0);
        first
            .as_ref()
            .is_some_and(|s| all_running_once_on(s, &everywhere))
            && (1..names.len()).all(|i| status(&cluster, i) == first)
    });
    assert!(placed, "{:?}\n{}", status(&cluster, 0), cluster.logs());
    let at = status(&cluster, 0).unwrap();
    let cells_used: std::collections::BTreeSet<&str> = at
        .values()
        .map(|l| cell_of(names.iter().position(|n| *n == l[0].0).unwrap()))
        .collect();
    assert_eq!(cells_used.len(), 2, "replicas in both cells: {at:?}");

    // c2 dies whole (agents SIGKILLed; their instances with them): its replicas run in c1.
    for i in (0..names.len()).filter(|i| cell_of(*i) == "c2") {
        cluster.kill(i);
        let node = names[i];
        let _ = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "for p in $(pgrep -f 'sleep 3593'); do \
                 tr '\\0' '\\n' < /proc/$p/environ | grep -qx 'SHOAL_NODE={node}' && kill -9 $p; \
                 done; true"
            ))
            .status();
    }
    let c1 = ["a1", "a3", "a5"];
    let moved = wait_until(Duration::from_secs(45), || {
        status(&cluster, 0).is_some_and(|s| all_running_once_on(&s, &c1))
    });
    assert!(moved, "{:?}\n{}", status(&cluster, 0), cluster.logs());
    assert_eq!(
        cells(&cluster, 2),
        Some(vec![("c1".to_string(), false), ("c2".to_string(), true)]),
        "c1 holds c2 down"
    );
}
