//! One live agent per node name (issue 29, item 4), with real `shoal agent` processes each in a
//! network namespace of its own (common/netns.rs).
//!
//! A converged mesh n1, n2, n3 runs `web` (a replica on each node) and `db` (exclusive, on n2).
//! A twin `n2` starts on a fourth host with the same node certificate (the test CA issues it, as
//! a stolen key would give it) and its own data dir, its packets dropped until its start's name
//! check is over (the probe's "seed unreachable for 15 s"), then joins. Every agent of the mesh
//! must raise a `name-disputed` issue within a few seconds of the join (the figure is printed),
//! the twin must start nothing while the real n2 keeps its replicas; once the twin stops, the
//! dispute ends. Restarts (SIGTERM and SIGKILL, then a start on the same data dir) raise none.
//! Needs root, iproute2, iptables and nsenter; `SHOAL_SKIP_NETNS_TESTS=1` skips.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::netns::{self, Cut, Hosts};
use common::*;

/// Agents of the mesh whose own `name-disputed` issue names n2, by index.
fn raising(c: &Cluster, of: &[usize]) -> Vec<usize> {
    let issues = c.cli_json(0, &["issues", "-o", "json", "--timeout", "2s"]);
    of.iter()
        .copied()
        .filter(|&i| {
            issues.as_array().into_iter().flatten().any(|issue| {
                issue["kind"] == "name-disputed"
                    && issue["node"] == c.agents[i].name.as_str()
                    && issue["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("\"n2\""))
            })
        })
        .collect()
}

/// Pids of the workload processes (`sleep <marker>`) in namespace `ns`.
fn workload_pids(ns: &str, marker: u64) -> Vec<i32> {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .expect("ip netns pids");
    let want = format!("sleep\0{marker}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(want.as_bytes()))
        })
        .collect()
}

#[test]
fn a_twin_with_a_stolen_node_key_is_disputed_everywhere_and_starts_nothing() {
    if !netns::require() {
        return;
    }
    let mut hosts = Hosts::new("twin", 4, 71);
    let mut c = Cluster::new();
    for (i, name) in ["n1", "n2", "n3"].iter().enumerate() {
        let ip = hosts.ip(i);
        c.add_at(
            name,
            SocketAddr::new(ip, 7000),
            SocketAddr::new(ip, 7001),
            Some(hosts.names[i].clone()),
        );
    }
    c.wait_members(3, Duration::from_secs(30));
    let marker = 51_000_000 + u64::from(std::process::id()) * 4;
    let spec = c.dir.path().join("twin.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"web\"\nreplicas = 3\n[process]\ncommand = [\"sleep\", \"{marker}\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
        ),
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "apply failed: {}", stderr(&out));
    let db = c.dir.path().join("db.toml");
    std::fs::write(
        &db,
        format!(
            "name = \"db\"\nreplicas = 1\n[process]\ncommand = [\"sleep\", \"{}\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[placement]\nexclusive = true\n\
             constraints = [\"node == n2\"]\n",
            marker + 1
        ),
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", db.to_str().unwrap()]);
    assert!(out.status.success(), "apply failed: {}", stderr(&out));
    let n2_ns = hosts.names[1].clone();
    let n2_pids = || {
        let mut p = workload_pids(&n2_ns, marker);
        p.extend(workload_pids(&n2_ns, marker + 1));
        p.sort();
        p
    };
    let converged = wait_until(Duration::from_secs(60), || {
        (0..3).all(|h| workload_pids(&hosts.names[h], marker).len() == 1) && n2_pids().len() == 2
    });
    assert!(
        converged,
        "web on each node and db on n2 did not start\n{}",
        c.logs()
    );
    let n2_before = n2_pids();

    // The twin: same name and PKI (its certificate issued by the CA as n2's), another host and
    // data dir, unheard during its start's name check.
    let ip = hosts.ip(3);
    c.agents.push(Agent {
        name: "n2".into(),
        gossip: SocketAddr::new(ip, 7000),
        api: SocketAddr::new(ip, 7001),
        data_dir: c.dir.path().join("data-3-n2-twin"),
        child: None,
        log: c.dir.path().join("3-n2-twin.log"),
        metrics: None,
        ui: None,
        netns: Some(hosts.names[3].clone()),
    });
    hosts.cut(3, Cut::Send);
    let seed = c.agents[0].gossip;
    c.start(3, Some(seed));
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        c.running(3),
        "the twin did not get past its start\n{}",
        c.log(3)
    );
    hosts.heal(3, Cut::Send);
    let healed = Instant::now();

    // Every agent of the mesh raises the dispute; the twin starts nothing meanwhile.
    let mut detected: [Option<Duration>; 3] = [None; 3];
    let mut twin_started = std::collections::BTreeSet::new();
    while healed.elapsed() < Duration::from_secs(20) {
        for i in raising(&c, &[0, 1, 2]) {
            detected[i].get_or_insert(healed.elapsed());
        }
        twin_started.extend(workload_pids(&hosts.names[3], marker));
        twin_started.extend(workload_pids(&hosts.names[3], marker + 1));
        if detected.iter().all(Option::is_some) && healed.elapsed() > Duration::from_secs(12) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("dispute raised after the twin's packets flowed (n1, n2, n3): {detected:?}");
    assert!(
        detected.iter().all(Option::is_some),
        "not every agent raised the dispute: {detected:?}\n{}",
        c.logs()
    );
    let slowest = detected.iter().flatten().max().copied().unwrap();
    assert!(
        slowest <= Duration::from_secs(8),
        "the dispute took {slowest:?} (the rule's window is 3 s)\n{}",
        c.logs()
    );
    assert!(
        twin_started.is_empty(),
        "the twin started replicas: {twin_started:?}\n{}",
        c.log(3)
    );
    assert_eq!(n2_pids(), n2_before, "the real n2 keeps its replicas");
    let issues = c.cli_json(0, &["issues", "-o", "json"]);
    let message = issues
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["kind"] == "name-disputed")
        .and_then(|i| i["message"].as_str())
        .unwrap_or_default()
        .to_string();
    for addr in [c.agents[1].gossip, c.agents[3].gossip] {
        assert!(message.contains(&addr.to_string()), "{message}");
    }
    assert!(
        c.log(0).contains("node name disputed"),
        "n1 logs the dispute\n{}",
        c.log(0)
    );
    // Approving cannot choose between them: refused with what to do.
    let id = issues
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["kind"] == "name-disputed")
        .and_then(|i| i["id"].as_str())
        .unwrap()
        .to_string();
    let out = c.cli(0, &["approve", &id]);
    assert!(
        !out.status.success() && stderr(&out).contains("stop the agent that should not run"),
        "{}",
        stderr(&out)
    );

    // The twin goes: the dispute ends everywhere.
    c.kill(3);
    let over = wait_until(Duration::from_secs(15), || {
        raising(&c, &[0, 1, 2]).is_empty()
    });
    assert!(
        over,
        "the dispute did not end once the twin stopped\n{}",
        c.logs()
    );
    assert_eq!(n2_pids(), n2_before, "the real n2 keeps its replicas");

    // Restarts are not disputes: n3 stopped (SIGTERM) and started again, then killed and started
    // again, on the same data dir.
    for kill in [false, true] {
        if kill {
            c.kill(2);
        } else {
            c.stop(2);
        }
        c.start(2, Some(seed));
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(12) {
            let now = raising(&c, &[0, 1, 2]);
            assert!(
                now.is_empty(),
                "a restart raised a dispute on {now:?}\n{}",
                c.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    for i in 0..3 {
        let disputes = c.log(i).matches("node name disputed").count();
        let expected = 1;
        assert_eq!(
            disputes,
            expected,
            "agent {i} saw {disputes} disputes\n{}",
            c.log(i)
        );
    }
}
