//! One seed, two processes, one trace: the simulator's replay promise, and the `--seeds` runner
//! printing the replay command of a failing seed.

use std::process::Command;

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shoal-sim"))
}

fn scenario(name: &str) -> String {
    format!("{}/../scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"))
}

/// Runs one seed in its own process and returns the JSON report (the last stdout line).
fn run(path: &str, seed: u64) -> serde_json::Value {
    let out = sim()
        .args(["run", path, "--seed", &seed.to_string(), "--json"])
        .output()
        .expect("shoal-sim runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "last stdout line is not JSON ({e}): {last:?}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn a_seed_replays_its_trace_in_another_process_and_another_seed_differs() {
    let path = scenario("quickstart");
    let a = run(&path, 7);
    let b = run(&path, 7);
    let c = run(&path, 8);
    for key in [
        "scenario",
        "seed",
        "trace_hash",
        "converged",
        "replacement_p99_ms",
        "exclusive_duplicates",
        "invariant_violations",
        "sim_seconds",
        "wall_seconds",
    ] {
        assert!(a.get(key).is_some(), "the JSON report lacks {key}: {a}");
    }
    assert_eq!(a["trace_hash"], b["trace_hash"], "seed 7 did not replay");
    assert_ne!(
        a["trace_hash"], c["trace_hash"],
        "seeds 7 and 8 gave one trace"
    );
    assert_eq!(a["passed"], true, "{a}");
    // The 60 s timeline, then the liveness phase (at least its hold).
    let sim_seconds = a["sim_seconds"].as_f64().unwrap();
    assert!((62.0..130.0).contains(&sim_seconds), "{a}");
}

#[test]
fn a_failing_seed_prints_its_replay_command() {
    let dir = std::env::temp_dir().join(format!("shoal-sim-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("impossible.toml");
    let text = std::fs::read_to_string(scenario("quickstart"))
        .unwrap()
        .replace("nodes = 20", "nodes = 6")
        .replace("duration = \"60s\"", "duration = \"45s\"")
        .replace(
            "replacement_p99_max = \"5s\"",
            "replacement_p99_max = \"1ms\"",
        );
    std::fs::write(&path, text).unwrap();
    let out = sim()
        .args(["run", path.to_str().unwrap(), "--seeds", "3..5", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let expected = format!("replay: shoal-sim run {} --seed 3", path.display());
    assert!(stderr.contains(&expected), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(summary["runs"], 2);
    assert_eq!(summary["failed"], 2);
    let _ = std::fs::remove_dir_all(&dir);
}
