//! The slow-host faults (`starve`, `slow-link`) really happen, a starve of a host that is not
//! up fails its event, and the false-verdict checker counts only verdicts on hosts that were up
//! and reachable, failing the run only when the scenario asserts a bound.

use std::process::Command;

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shoal-sim"))
}

/// Writes `text` as a scenario file and runs it (seed 1, `--json`): the JSON report.
fn run_text(name: &str, text: &str) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("shoal-sim-slow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let out = sim()
        .args(["run", path.to_str().unwrap(), "--seed", "1", "--json"])
        .output()
        .expect("shoal-sim runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| {
        panic!(
            "{name}: no JSON report ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

const MESH: &str = r#"
name = "t"
duration = "30s"
[mesh]
nodes = 5
[[workloads]]
spec = """
name = "web"
replicas = 3
[process]
command = ["httpd"]
[resources]
cpu = "100m"
memory = "64Mi"
"""
"#;

fn u(report: &serde_json::Value, key: &str) -> u64 {
    report[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {report}"))
}

#[test]
fn a_starve_runs_every_frozen_cycle_and_a_slow_link_takes_effect() {
    // Two hosts frozen 400 ms of every 500 ms for 5 s: 10 cycles each starve; a host losing
    // every message for 6 s is declared dead by the others, a true verdict (its links carry
    // nothing).
    let text = format!(
        "{MESH}
[[events]]
at = \"10s\"
action = \"starve\"
target = \"node=n2,n3\"
frozen = \"400ms\"
period = \"500ms\"
delay = \"5ms\"
duration = \"5s\"

[[events]]
at = \"17s\"
action = \"slow-link\"
target = \"node=n5\"
loss = 1.0
delay = \"10ms\"
duration = \"6s\"
"
    );
    let r = run_text("starve", &text);
    assert_eq!(r["passed"], true, "{r}");
    assert_eq!(u(&r, "starve_cycles"), 10, "{r}");
    let schedule = r["schedule"].to_string();
    assert!(
        schedule.contains("starve node=n2,n3: frozen 400 ms of every 500 ms"),
        "{schedule}"
    );
    assert!(schedule.contains("after 10 frozen cycles"), "{schedule}");
    assert!(schedule.contains("slow-link node=n5"), "{schedule}");
    assert!(u(&r, "member_deaths_seen") > 0, "n5 cut off by loss: {r}");
    let false_verdicts = r["false_verdicts"].as_array().unwrap();
    assert!(
        !false_verdicts.iter().any(|v| v["subject"] == "n5"
            && v["t_ms"]
                .as_u64()
                .is_some_and(|t| (18_000..23_000).contains(&t))),
        "a verdict on a host whose links lose everything is not false: {r}"
    );
}

#[test]
fn a_crash_and_a_long_pause_are_true_verdicts() {
    let text = format!(
        "{MESH}
[[events]]
at = \"8s\"
action = \"crash\"
target = \"node=n4\"
restart_after = \"6s\"

[[events]]
at = \"16s\"
action = \"pause\"
target = \"node=n2\"
duration = \"5s\"
"
    );
    let r = run_text("true-verdicts", &text);
    assert_eq!(r["passed"], true, "{r}");
    assert!(u(&r, "member_deaths_seen") >= 4, "{r}");
    assert_eq!(u(&r, "false_member_deaths"), 0, "{r}");
}

#[test]
fn a_starve_of_a_host_that_is_down_fails_its_event() {
    let text = format!(
        "{MESH}
[[events]]
at = \"8s\"
action = \"crash\"
target = \"node=n4\"

[[events]]
at = \"10s\"
action = \"starve\"
target = \"node=n4\"
frozen = \"100ms\"
period = \"1s\"
duration = \"5s\"
"
    );
    let r = run_text("starve-down", &text);
    assert_eq!(r["passed"], false, "{r}");
    let kinds = r["failure_kinds"].to_string();
    assert!(kinds.contains("event-failed"), "{kinds}");
    let why = r["event_failures"][0]["why"].as_str().unwrap_or_default();
    assert!(why.contains("n4 is down"), "{why}");
}

#[test]
fn false_verdicts_fail_the_run_only_under_the_assertion() {
    // One agent of a 5-host mesh frozen 900 ms of every second: whatever the detector makes
    // of it is counted; the run fails on it only with `false_verdicts_max`.
    let starve = "
[[events]]
at = \"8s\"
action = \"starve\"
target = \"node=n3\"
frozen = \"900ms\"
period = \"1s\"
duration = \"15s\"
";
    let free = run_text("fv-free", &format!("{MESH}{starve}"));
    assert_eq!(free["passed"], true, "counted, not failed on: {free}");
    let bounded = run_text(
        "fv-bounded",
        &format!("{MESH}{starve}\n[assert]\nfalse_verdicts_max = 0\n"),
    );
    let seen = u(&bounded, "false_member_deaths") + u(&bounded, "false_cell_downs");
    assert_eq!(
        seen,
        u(&free, "false_member_deaths") + u(&free, "false_cell_downs")
    );
    assert_eq!(bounded["passed"], seen == 0, "{bounded}");
    if seen > 0 {
        assert_eq!(bounded["failure_kinds"], serde_json::json!(["assertion"]));
        let failure = bounded["assertion_failures"][0]
            .as_str()
            .unwrap_or_default();
        assert!(failure.contains("false verdicts"), "{failure}");
    }
    // The member bound alone: it fails on false deaths, and on deaths the probes declared
    // that the checker did not see.
    let members = run_text(
        "fv-members",
        &format!("{MESH}{starve}\n[assert]\nfalse_member_deaths_max = 0\n"),
    );
    assert!(u(&members, "verdict_reads") > 0, "{members}");
    let blind = u(&members, "member_deaths_declared") > u(&members, "member_deaths_seen");
    let clean = u(&members, "false_member_deaths") == 0 && !blind;
    assert_eq!(members["passed"], clean, "{members}");
}

#[test]
fn a_bad_starve_is_refused_with_its_location() {
    let text = format!(
        "{MESH}
[[events]]
at = \"8s\"
action = \"starve\"
target = \"one\"
frozen = \"1s\"
period = \"1s\"
duration = \"5s\"
"
    );
    let dir = std::env::temp_dir().join(format!("shoal-sim-slow-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let out = sim()
        .args(["check", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("bad.toml:") && text.contains("must be above 0 and below the period"),
        "{text}"
    );
}
