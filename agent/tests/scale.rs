//! `shoal scale NAME N` on real agents: the spec the mesh holds gets another replica count as a
//! new version (the rest of the spec kept), the replicas follow, and bad input is refused with
//! exit 1: an unknown workload, a count past the limit. Deleting it then (the only workload)
//! stops its instance without an approval. And `stop_grace`: each workload's stops wait its own
//! grace.

mod common;

use std::time::Duration;

use common::{stderr, wait_until, Cluster};

#[test]
fn scale_changes_only_the_replica_count_and_refuses_bad_input() {
    let mut cluster = Cluster::new();
    cluster.cleanup.push("sleep 3593".to_string());
    for name in ["s1", "s2"] {
        cluster.add(name);
    }
    cluster.wait_members(2, Duration::from_secs(20));
    let path = cluster.dir.path().join("web.toml");
    std::fs::write(
        &path,
        "name = \"web\"\nreplicas = 2\n[process]\ncommand = [\"sleep\", \"3593\"]\n\
         env = { COLOUR = \"blue\" }\n[resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n",
    )
    .unwrap();
    let out = cluster.cli(0, &["apply", "-f", path.to_str().unwrap(), "--wait"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let before = cluster.cli_json(1, &["get", "web", "-o", "json"]);

    // Through the other agent, waiting for the new replicas.
    let out = cluster.cli(1, &["scale", "web", "4", "--wait", "--wait-timeout", "30s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("scaled from 2 to 4 replicas"), "{said}");
    assert_eq!(cluster.serving_replicas(0, "web"), 4, "{}", cluster.logs());
    let after = cluster.cli_json(0, &["get", "web", "-o", "json"]);
    assert_eq!(after[0]["replicas"], 4, "{after}");
    assert_ne!(after[0]["version"], before[0]["version"], "a new version");
    // The whole spec as the mesh holds it, in TOML that apply takes back: the new count, the
    // rest as applied.
    let out = cluster.cli(1, &["get", "web", "--spec"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let held = shoal_core::spec::WorkloadSpec::from_toml_str(&text, "get --spec").unwrap();
    let mut applied = shoal_core::spec::WorkloadSpec::from_toml_str(
        &std::fs::read_to_string(&path).unwrap(),
        "web.toml",
    )
    .unwrap();
    applied.replicas = 4;
    assert_eq!(held, applied, "{text}");
    let out = cluster.cli(1, &["get", "--spec"]);
    assert!(!out.status.success(), "--spec without NAME is refused");
    // The rest of the spec is what was applied: history's current entry still runs the same.
    let history = cluster.cli_json(0, &["history", "web", "-o", "json"]);
    assert_eq!(history[0]["runs"], history[1]["runs"], "{history}");

    // Down again; the same count again is no new version.
    let out = cluster.cli(0, &["scale", "web", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        wait_until(Duration::from_secs(20), || cluster
            .serving_replicas(1, "web")
            == 1),
        "scaled down to 1\n{}",
        cluster.logs()
    );
    let out = cluster.cli(0, &["scale", "web", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("unchanged"));

    // Bad input: exit 1 with what was wrong.
    let out = cluster.cli(0, &["scale", "nope", "3"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));
    let out = cluster.cli(0, &["scale", "web", "10001"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("replicas"), "{}", stderr(&out));

    // Deleting the only workload stops its instance with no approval: the tombstone says it was
    // deleted on purpose (an empty store without one would hold the stop as suspicious).
    let out = cluster.cli(0, &["delete", "web"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let running = || {
        std::process::Command::new("pgrep")
            .args(["-f", "sleep 3593"])
            .output()
            .is_ok_and(|o| !o.stdout.is_empty())
    };
    assert!(
        wait_until(Duration::from_secs(20), || !running()),
        "the deleted workload's instance still runs\n{}",
        cluster.logs()
    );
    let issues = String::from_utf8_lossy(&cluster.cli(0, &["issues"]).stdout).to_string();
    assert!(!issues.contains("suspicious"), "{issues}");
}

/// `stop_grace` on a real agent: two workloads whose processes need 3 s to shut down after
/// SIGTERM; deleted, the one given 8 s finishes its shutdown, the one given 1 s is killed first.
#[test]
fn a_stop_gives_each_workload_its_own_grace() {
    let mut cluster = Cluster::new();
    cluster.cleanup.push("stop-grace-test".to_string());
    cluster.add("g1");
    cluster.wait_members(1, Duration::from_secs(20));
    let dir = cluster.dir.path().to_path_buf();
    // The workloads run as nobody: their markers go in a directory anyone may write.
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    std::fs::set_permissions(&marks, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    for (name, grace) in [("slow", "8s"), ("quick", "1s")] {
        let done = marks.join(format!("{name}-done"));
        let text = format!(
            "name = \"{name}\"\nstop_grace = \"{grace}\"\n[process]\ncommand = [\"sh\", \"-c\", \
             \": stop-grace-test; trap 'sleep 3; echo done > {}; exit 0' TERM; \
             while :; do sleep 0.2; done\"]\n[resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n",
            done.display()
        );
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = cluster.cli(0, &["apply", "-f", path.to_str().unwrap(), "--wait"]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    for name in ["slow", "quick"] {
        let out = cluster.cli(0, &["delete", name]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // Gone when no process of theirs is left (status has no rows for a deleted workload).
    let gone = wait_until(Duration::from_secs(30), || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", "stop-grace-tes[t]"])
            .output()
            .unwrap();
        out.stdout.is_empty()
    });
    assert!(gone, "both stopped\n{}", cluster.logs());
    assert!(
        marks.join("slow-done").exists(),
        "8 s of grace: the shutdown finished\n{}",
        cluster.logs()
    );
    assert!(
        !marks.join("quick-done").exists(),
        "1 s of grace: killed before its 3 s shutdown ended"
    );
}
