//! Automatic rollback on real agents (the `shoal` binary, the process runtime): a version that
//! exits at once is rolled back to the last version whose rollout completed, within
//! `progress_deadline` + 10 s, with never more than `max_unavailable` replicas down; the history,
//! `rollout status`, events and issues say what happened and why; an apply after the rollback
//! wins; a version that fails with nothing to go back to stays failed and says so.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{stderr, wait_until, Cluster};

const REPLICAS: u32 = 4;
const DEADLINE_S: u64 = 20;

fn spec(dir: &Path, file: &str, name: &str, command: &str) -> PathBuf {
    let path = dir.join(file);
    let text = format!(
        "name = \"{name}\"\nreplicas = {REPLICAS}\n[process]\ncommand = {command}\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\
         [restart]\nbackoff_initial = \"500ms\"\nbackoff_max = \"1s\"\n\
         [update]\nmax_unavailable = 1\nprogress_deadline = \"{DEADLINE_S}s\"\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Replicas with a healthy running instance of any version, and the commands they run.
fn serving(cluster: &Cluster, i: usize, name: &str) -> Option<(u32, Vec<String>)> {
    let status = cluster.cli_json(i, &["status", name, "-o", "json"]);
    let list = status["instances"].as_array()?;
    let mut replicas = std::collections::BTreeSet::new();
    let mut versions = Vec::new();
    for inst in list {
        if inst["phase"] == "running" && inst["healthy"] == true {
            replicas.insert(inst["replica"].as_u64()?);
            versions.push(inst["spec_version"].as_str()?.to_string());
        }
    }
    Some((replicas.len() as u32, versions))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_version_is_rolled_back_to_the_last_complete_one() {
    let mut cluster = Cluster::new();
    cluster.cleanup.push("sleep 359[45]".to_string());
    for name in ["n1", "n2", "n3"] {
        cluster.add(name);
    }
    cluster.wait_members(3, Duration::from_secs(20));
    let dir = cluster.dir.path().to_path_buf();
    let good = spec(&dir, "good.toml", "web", r#"["sleep", "3594"]"#);
    let bad = spec(
        &dir,
        "bad.toml",
        "web",
        r#"["sh", "-c", "echo bad version >&2; exit 3"]"#,
    );
    let rollout = |i: usize| cluster.cli_json(i, &["rollout", "status", "web", "-o", "json"]);

    let out = cluster.cli(0, &["apply", "-f", good.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Recorded complete in the store: the version a failed rollout goes back to.
    let complete = wait_until(Duration::from_secs(30), || {
        let r = rollout(1);
        r["state"] == "complete" && r["recorded"] == true
    });
    assert!(
        complete,
        "the first rollout never completed: {}",
        rollout(1)
    );
    let good_version = rollout(0)["version"].as_str().unwrap().to_string();

    // The bad version: every copy exits at once.
    let applied_at = Instant::now();
    let out = cluster.cli(0, &["apply", "-f", bad.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut min_serving = REPLICAS;
    let mut samples = 0;
    let mut rolled_back = None;
    let bound = Duration::from_secs(DEADLINE_S + 10);
    while applied_at.elapsed() < bound + Duration::from_secs(5) {
        if let Some((n, _)) = serving(&cluster, 1, "web") {
            min_serving = min_serving.min(n);
            samples += 1;
        }
        let r = rollout(2);
        if r["state"] == "rolled back" {
            rolled_back = Some((applied_at.elapsed(), r));
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some((took, mut status)) = rolled_back else {
        panic!(
            "not rolled back within {bound:?}: {}\nlogs:\n{}",
            rollout(0),
            cluster.logs()
        );
    };
    assert!(took <= bound, "rolled back after {took:?}, bound {bound:?}");
    // Its own rollout is recorded complete soon after (the next apply's history says so).
    let recorded = wait_until(Duration::from_secs(5), || {
        status = rollout(2);
        status["recorded"] == true
    });
    assert!(recorded, "{status}");
    assert!(
        min_serving + 1 >= REPLICAS,
        "{min_serving} of {REPLICAS} replicas served at the worst moment; max_unavailable is 1"
    );
    // Every replica serves the restored content (a new version, the good one's content).
    let restored = status["version"].as_str().unwrap().to_string();
    assert_ne!(restored, good_version, "a rollback is a new version");
    assert_eq!(status["updated"], REPLICAS, "{status}");
    let from = &status["rolled_back_from"];
    assert!(
        from["reason"].as_str().unwrap().contains("crash loop"),
        "{status}"
    );
    let history = cluster.cli_json(1, &["history", "web", "-o", "json"]);
    assert_eq!(history[0]["runs"], "sleep 3594", "{history}");
    assert_eq!(history[1]["outcome"], "rolled back", "{history}");
    assert!(
        history[1]["reason"]
            .as_str()
            .unwrap()
            .contains("exited with code 3"),
        "the reason carries the copy's last error: {history}"
    );
    assert_eq!(history[2]["outcome"], "complete", "{history}");
    assert!(
        history[0]["by"]
            .as_str()
            .unwrap()
            .starts_with("auto-rollback ("),
        "{history}"
    );
    // One agent wrote it, said so in its events, and raised an issue that says why.
    let mut writers = 0;
    for i in 0..3 {
        let events = cluster.cli(i, &["events", "-o", "json"]);
        let text = String::from_utf8_lossy(&events.stdout).to_string();
        writers += text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["kind"] == "rollback")
            .count();
    }
    assert_eq!(writers, 1, "exactly one rollback event across the mesh");
    let issues = || String::from_utf8_lossy(&cluster.cli(0, &["issues"]).stdout).to_string();
    let raised = wait_until(Duration::from_secs(5), || {
        let text = issues();
        text.contains("rolled-back") && text.contains("crash loop")
    });
    assert!(raised, "{}", issues());
    eprintln!(
        "{{\"bench\":\"auto_rollback_real\",\"replicas\":{REPLICAS},\"progress_deadline_s\":{DEADLINE_S},\
         \"rolled_back_ms\":{},\"min_serving\":{min_serving},\"samples\":{samples}}}",
        took.as_millis()
    );

    // The good content again is no new version; a next version wins over the rollback and
    // completes, and the rollback's own rollout is recorded complete in the history.
    let out = cluster.cli(0, &["apply", "-f", good.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let history = cluster.cli_json(0, &["history", "web", "-o", "json"]);
    assert_eq!(history[0]["version"], restored, "{history}");
    let next = spec(&dir, "next.toml", "web", r#"["sleep", "3595"]"#);
    let out = cluster.cli(0, &["apply", "-f", next.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let complete = wait_until(Duration::from_secs(30), || {
        rollout(1)["state"] == "complete"
    });
    assert!(complete, "the next rollout never completed: {}", rollout(1));
    let history = cluster.cli_json(0, &["history", "web", "-o", "json"]);
    assert_eq!(history[0]["runs"], "sleep 3595", "{history}");
    assert_eq!(history[1]["outcome"], "complete", "{history}");
    // Recorded complete before the next apply (the version a rollback goes back to).
    let recorded = wait_until(Duration::from_secs(5), || rollout(1)["recorded"] == true);
    assert!(recorded, "{}", rollout(1));

    // `apply --wait` of a bad version ends when the rollback replaces it, and says so.
    let out = cluster.cli(
        0,
        &[
            "apply",
            "-f",
            bad.to_str().unwrap(),
            "--wait",
            "--wait-timeout",
            "60s",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("rolled back"), "{}", stderr(&out));
    let history = cluster.cli_json(0, &["history", "web", "-o", "json"]);
    assert_eq!(history[0]["runs"], "sleep 3595", "{history}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_version_with_nothing_to_go_back_to_stays_failed_and_says_why() {
    let mut cluster = Cluster::new();
    cluster.add("n1");
    cluster.add("n2");
    cluster.wait_members(2, Duration::from_secs(20));
    let dir = cluster.dir.path().to_path_buf();
    let bad = spec(&dir, "bad.toml", "crashy", r#"["sh", "-c", "exit 4"]"#);
    let out = cluster.cli(0, &["apply", "-f", bad.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rollout = || cluster.cli_json(1, &["rollout", "status", "crashy", "-o", "json"]);
    let failed = wait_until(Duration::from_secs(DEADLINE_S + 10), || {
        rollout()["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no earlier version"))
    });
    assert!(failed, "never recorded failed: {}", rollout());
    assert_eq!(rollout()["state"], "failed");
    let history = cluster.cli_json(0, &["history", "crashy", "-o", "json"]);
    assert_eq!(
        history.as_array().map(Vec::len),
        Some(1),
        "nothing was written but the record: {history}"
    );
    let issues = || String::from_utf8_lossy(&cluster.cli(1, &["issues"]).stdout).to_string();
    let raised = wait_until(Duration::from_secs(5), || {
        issues().contains("rollout-failed")
    });
    assert!(raised, "{}", issues());
    // Bad input: a clear error, exit 1.
    let out = cluster.cli(0, &["rollout", "pause", "nothing-here"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no workload named"),
        "{}",
        stderr(&out)
    );
}
