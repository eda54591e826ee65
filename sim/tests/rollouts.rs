//! Updates whose new revision fails: the faults hit that revision's instances only, a rollout
//! not rolled back fails the scenario that expects it, and `scenarios/bad-rollout.toml` is
//! rolled back on every seed (docs/sim.md, "Rollouts and automatic rollbacks").

mod support;

use std::path::Path;

/// Writes `text` as a scenario file and runs it (seed 1, `--json`, its files in `out`).
fn run_text(name: &str, text: &str, out: &Path) -> serde_json::Value {
    std::fs::create_dir_all(out).unwrap();
    let path = out.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let output = support::sim()
        .args([
            "run",
            path.to_str().unwrap(),
            "--seed",
            "1",
            "--json",
            "--out",
        ])
        .arg(out)
        .output()
        .expect("shoal-sim runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| {
        panic!(
            "{name}: no JSON report ({e}); stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Six replicas on six hosts, updated at 10 s (good) and at 25 s (its revision never starts),
/// without automatic rollback.
const NO_ROLLBACK: &str = r#"
name = "no-rollback"
duration = "45s"
[mesh]
nodes = 6
[[workloads]]
spec = """
name = "web"
replicas = 6
[process]
command = ["httpd"]
[resources]
cpu = "250m"
memory = "128Mi"
[restart]
backoff_initial = "1s"
backoff_max = "2s"
[update]
max_unavailable = 1
auto_rollback = false
"""
[[events]]
at = "10s"
action = "update"
workload = "web"
expect = "complete"
[[events]]
at = "25s"
action = "update"
workload = "web"
start_fail = 1.0
expect = "rolled-back"
[assert]
rollbacks_min = 1
"#;

#[test]
fn an_update_s_faults_hit_its_revision_only_and_a_missing_rollback_fails_the_run() {
    let dir = std::env::temp_dir().join(format!("shoal-sim-rollouts-{}", std::process::id()));
    let r = run_text("no-rollback", NO_ROLLBACK, &dir);
    assert_eq!(r["passed"], false, "{r}");
    assert_eq!(r["rollbacks"], 0, "{r}");
    let rollouts = r["rollouts"].as_array().expect("rollouts listed");
    assert_eq!(rollouts.len(), 2, "{r}");
    assert_eq!(rollouts[0]["outcome"], "complete", "{r}");
    let revisions = |o: &serde_json::Value| (o["from_revision"].as_u64(), o["revision"].as_u64());
    assert_eq!(revisions(&rollouts[0]), (Some(0), Some(1)), "{r}");
    assert_eq!(revisions(&rollouts[1]), (Some(1), Some(2)), "{r}");
    assert_eq!(rollouts[1]["outcome"], "unfinished", "{r}");
    assert!(r["rollout_ms"][0].as_u64().is_some(), "{r}");
    assert!(r["rollout_ms"][1].is_null(), "{r}");
    let failures = r["assertion_failures"].to_string();
    assert!(
        failures.contains("0 automatic rollbacks seen (min 1)"),
        "{failures}"
    );
    assert!(
        failures.contains("the rollout of web revision 2 was expected rolled-back, was unfinished"),
        "{failures}"
    );
    // Revision 2 never starts; the replicas still at revision 1 run on: one replica (the one
    // being replaced) is missing at most, from a second after the bad update to the end of the
    // timeline. The liveness phase then makes revision 2 healthy.
    let series: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("no-rollback-seed1.series.json")).unwrap(),
    )
    .unwrap();
    let during: Vec<u64> = (series.as_array().unwrap().iter())
        .filter(|p| (26_000..=45_000).contains(&p["t_ms"].as_u64().unwrap()))
        .map(|p| p["healthy"].as_u64().unwrap())
        .collect();
    assert!(!during.is_empty());
    assert_eq!(during.iter().min(), Some(&5), "{during:?}");
    let undone = r["liveness"]["undone"].to_string();
    assert!(
        undone.contains("instances of web revision 2 healthy"),
        "{undone}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_crash_looping_revision_is_rolled_back_on_every_seed() {
    for seed in 1..=5 {
        let r = support::run("bad-rollout", seed, None);
        assert_eq!(r["passed"], true, "seed {seed}: {r}");
        assert_eq!(r["rollbacks"], 1, "seed {seed}: {r}");
        let b = &r["rollback_writes"][0];
        assert_eq!(
            (b["from_revision"].as_u64(), b["to_revision"].as_u64()),
            (Some(2), Some(1)),
            "seed {seed}: {r}"
        );
        let outcomes: Vec<&str> = (r["rollouts"].as_array().unwrap().iter())
            .map(|o| o["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes, ["complete", "rolled-back"], "seed {seed}: {r}");
        assert!(r["rollout_ms"][1].as_u64().is_some(), "seed {seed}: {r}");
        assert_eq!(r["invariant_violations"], 0, "seed {seed}: {r}");
    }
}
