//! Every scheduled event takes effect or the run fails; the liveness phase after the timeline;
//! a scale with no fault converges.

use std::process::Command;

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shoal-sim"))
}

/// Writes `text` as a scenario file and runs it (seed 1, `--json`): exit code and report.
fn run_text(name: &str, text: &str) -> (Option<i32>, serde_json::Value) {
    let dir = std::env::temp_dir().join(format!("shoal-sim-events-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let out = sim()
        .args(["run", path.to_str().unwrap(), "--seed", "1", "--json"])
        .output()
        .expect("shoal-sim runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| {
            panic!(
                "{name}: no JSON report ({e}); stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    (out.status.code(), report)
}

const MESH: &str = r#"
name = "t"
duration = "20s"
[mesh]
nodes = 5
[[workloads]]
spec = """
name = "web"
replicas = 3
[process]
command = ["httpd"]
[resources]
cpu = "250m"
memory = "128Mi"
"""
"#;

fn kinds(r: &serde_json::Value) -> Vec<String> {
    r["failure_kinds"]
        .as_array()
        .expect("failure_kinds listed")
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_scale_with_no_fault_converges() {
    let path = format!(
        "{}/../scenarios/regress/scale-no-fault.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    let (code, r) = run_text("scale", &text);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["passed"], true, "{r}");
    assert_eq!(r["converged"], true, "{r}");
    assert_eq!(r["liveness"]["passed"], true, "{r}");
}

#[test]
fn an_event_that_cannot_take_effect_fails_the_run() {
    // n2 is crashed at 5 s and again at 6 s (it is down then); nothing is partitioned when the
    // heal comes; n3, named by the restart, is up.
    let text = format!(
        "{MESH}
[[events]]
at = \"5s\"
action = \"crash\"
target = \"node=n2\"

[[events]]
at = \"6s\"
action = \"crash\"
target = \"node=n2\"

[[events]]
at = \"7s\"
action = \"heal\"

[[events]]
at = \"15s\"
action = \"restart\"
target = \"node=n3\"
"
    );
    let (code, r) = run_text("impossible", &text);
    assert_eq!(code, Some(1), "{r}");
    assert_eq!(r["passed"], false, "{r}");
    assert!(kinds(&r).contains(&"event-failed".to_string()), "{r}");
    let failures: Vec<String> = r["event_failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{}: {}",
                f["event"].as_str().unwrap(),
                f["why"].as_str().unwrap()
            )
        })
        .collect();
    assert!(failures.len() >= 3, "{failures:#?}");
    assert!(
        failures[0].starts_with("crash at 6.000s (line ")
            && failures[0].contains("target node=n2 matched 0 of the 4 live hosts (n2 is down)"),
        "{failures:#?}"
    );
    assert!(
        failures[1].starts_with("heal at 7.000s") && failures[1].contains("nothing to heal"),
        "{failures:#?}"
    );
    assert!(
        failures[2].starts_with("restart at 15.000s")
            && failures[2].contains("target node=n3 matched 0 of the 1 crashed hosts (n3 is up)"),
        "{failures:#?}"
    );
}

#[test]
fn an_event_about_an_unknown_workload_is_refused_before_the_run() {
    let text = format!(
        "{MESH}\n[[events]]\nat = \"5s\"\naction = \"scale\"\nworkload = \"db\"\nreplicas = 2\n"
    );
    let (code, _) = {
        let dir = std::env::temp_dir().join(format!("shoal-sim-unknown-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("unknown.toml");
        std::fs::write(&path, &text).unwrap();
        let out = sim()
            .args(["check", path.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            stderr.contains(
                "scale names workload \"db\", which no [[workloads]] entry or apply event defines"
            ),
            "{stderr}"
        );
        (out.status.code(), ())
    };
    assert_eq!(code, Some(1));
}

#[test]
fn the_liveness_phase_fails_a_run_whose_hosts_do_not_come_back_in_time() {
    // n2 crashes for good; the liveness phase restarts it, but an agent takes longer than 100 ms
    // to join.
    let text = format!(
        "{MESH}
[[events]]
at = \"5s\"
action = \"crash\"
target = \"node=n2\"

[assert]
liveness_within = \"100ms\"
"
    );
    let (code, r) = run_text("liveness", &text);
    assert_eq!(code, Some(1), "{r}");
    assert!(kinds(&r).contains(&"liveness".to_string()), "{r}");
    let live = &r["liveness"];
    assert_eq!(live["passed"], false, "{r}");
    assert_eq!(live["undone"][0], "n2 restarted", "{r}");
    // Still joining at the bound, or whole only after it (the join takes about 2 s).
    let gaps = live["gaps"].to_string();
    assert!(
        gaps.contains("n2 is") || gaps.contains("whole only from"),
        "{gaps}"
    );
}

#[test]
fn the_liveness_phase_undoes_the_faults_in_force() {
    // A partition and a pause still in force when the timeline ends, and a crash-looping
    // workload: the liveness phase heals, resumes and makes the instances healthy.
    let text = format!(
        "{MESH}
[[events]]
at = \"5s\"
action = \"partition\"
kind = \"isolate\"
target = \"node=n4\"

[[events]]
at = \"12s\"
action = \"pause\"
target = \"node=n5\"
duration = \"8s\"

[[events]]
at = \"14s\"
action = \"instance\"
workload = \"web\"
crash_after = \"2s\"
"
    )
    .replace("duration = \"20s\"", "duration = \"20s\"\n")
    .replace(
        "memory = \"128Mi\"\n\"\"\"",
        "memory = \"128Mi\"\n[restart]\nbackoff_initial = \"500ms\"\nbackoff_max = \"2s\"\n\"\"\"",
    );
    let (code, r) = run_text("undo", &text);
    assert_eq!(code, Some(0), "{r}");
    let undone = r["liveness"]["undone"].to_string();
    assert!(undone.contains("1 partitions healed"), "{undone}");
    assert!(undone.contains("instances of web healthy"), "{undone}");
}
