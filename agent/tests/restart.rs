//! `shoal restart` on real agents: a whole workload is replaced rolling (every process new, never
//! fewer than replicas - max_unavailable serving), one replica is restarted at once on its node
//! from an agent that does not run it (only its process changes), and bad input is refused
//! with exit 1.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{stderr, wait_until, Cluster};

const MARKER: &str = "sleep 3581";

/// The running `sleep 3581` processes, by the replica their environment names.
fn pids() -> BTreeMap<u32, Vec<u32>> {
    let out = std::process::Command::new("pgrep")
        .args(["-f", MARKER])
        .output()
        .expect("pgrep");
    let mut by_replica: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for pid in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
    {
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let replica = env
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .find_map(|kv| kv.strip_prefix("SHOAL_REPLICA="))
            .and_then(|r| r.parse().ok());
        if let Some(r) = replica {
            by_replica.entry(r).or_default().push(pid);
        }
    }
    by_replica
}

#[test]
fn restart_replaces_every_replica_rolling_or_one_replica_at_once() {
    let mut cluster = Cluster::new();
    cluster.cleanup.push(MARKER.to_string());
    for name in ["r1", "r2"] {
        cluster.add(name);
    }
    cluster.wait_members(2, Duration::from_secs(20));
    let path = cluster.dir.path().join("web.toml");
    // Healthy 300 ms after start: the rolling pace is visible, and the test stays short.
    std::fs::write(
        &path,
        "name = \"web\"\nreplicas = 3\n[process]\ncommand = [\"sleep\", \"3581\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\
         [health]\nexec = { command = [\"true\"] }\ninterval = \"300ms\"\ntimeout = \"250ms\"\n\
         [update]\nmax_unavailable = 1\nmax_surge = 0\n",
    )
    .unwrap();
    let out = cluster.cli(0, &["apply", "-f", path.to_str().unwrap(), "--wait"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let version = cluster.cli_json(0, &["get", "web", "-o", "json"])[0]["version"].clone();
    let before = pids();
    assert_eq!(before.len(), 3, "{before:?}");

    // The whole workload, waiting, while sampling how many serve.
    let mut fewest = usize::MAX;
    let done = std::sync::atomic::AtomicBool::new(false);
    let restart = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut fewest = usize::MAX;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                fewest = fewest.min(cluster.serving_replicas(1, "web"));
                std::thread::sleep(Duration::from_millis(100));
            }
            fewest
        });
        let out = cluster.cli(1, &["restart", "web", "--wait", "--wait-timeout", "60s"]);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        fewest = sampler.join().unwrap();
        out
    });
    assert!(
        restart.status.success(),
        "{}\n{}",
        stderr(&restart),
        cluster.logs()
    );
    let said = String::from_utf8_lossy(&restart.stdout).to_string();
    assert!(said.contains("restarting every replica"), "{said}");
    let after = pids();
    assert_eq!(after.len(), 3, "{after:?}");
    for (r, old) in &before {
        assert!(
            after[r].iter().all(|p| !old.contains(p)),
            "replica {r} still runs an old process: {old:?} then {:?}",
            after[r]
        );
    }
    assert!(
        fewest >= 2,
        "fewer than replicas - max_unavailable served: {fewest}"
    );
    let now = cluster.cli_json(0, &["get", "web", "-o", "json"]);
    assert_ne!(now[0]["version"], version, "a new version");
    let history = cluster.cli_json(0, &["history", "web", "-o", "json"]);
    assert_eq!(
        history[0]["runs"], history[1]["runs"],
        "the same program: {history}"
    );

    // One replica, through the agent that does not run it.
    let status = cluster.cli_json(0, &["status", "web", "-o", "json"]);
    let node_of_1 = status["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["replica"] == 1 && i["phase"] == "running")
        .and_then(|i| i["node"].as_str())
        .expect("replica 1 runs")
        .to_string();
    let via = if node_of_1 == "r1" { 1 } else { 0 };
    let before = pids();
    let out = cluster.cli(
        via,
        &["restart", "web/1", "--wait", "--wait-timeout", "30s"],
    );
    assert!(out.status.success(), "{}\n{}", stderr(&out), cluster.logs());
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("web/1: restarting instance"), "{said}");
    assert!(said.contains(&format!("on {node_of_1}")), "{said}");
    assert!(
        wait_until(Duration::from_secs(10), || pids()
            .get(&1)
            .is_some_and(|p| p.len() == 1 && !before[&1].contains(&p[0]))),
        "replica 1 was not restarted: {before:?} then {:?}",
        pids()
    );
    let after = pids();
    assert_eq!(after[&0], before[&0], "replica 0 untouched");
    assert_eq!(after[&2], before[&2], "replica 2 untouched");
    let status = cluster.cli_json(0, &["status", "web", "-o", "json"]);
    let restarts: Vec<u64> = status["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["restarts"].as_u64())
        .collect();
    assert!(
        restarts.iter().all(|r| *r == 0),
        "a restart is no failure: {status}"
    );

    // Bad input: exit 1 with what was wrong.
    for (args, says) in [
        (&["restart", "nope"][..], "nope"),
        (&["restart", "web/9"][..], "web/9"),
        (&["restart", "web/x"][..], "NAME/REPLICA"),
    ] {
        let out = cluster.cli(0, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}
