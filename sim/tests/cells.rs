//! A mesh of cells in the real-code tier: `scenarios/cells-small.toml` (30 hosts in 3 cells, a
//! host crash, then all of cell c2) passes for one seed, and the lost cell's replicas run
//! healthy in the other cells while every host of c2 is down; `cells-exclusive.toml` (the cell
//! of three exclusive replicas cut off) never runs one twice. Scenario errors about cells.

mod support;

use support::sim;

/// Runs scenario `name` with seed 1, its files written to `dir`; returns the JSON report.
fn run(name: &str, dir: &std::path::Path) -> serde_json::Value {
    support::run(name, 1, Some(dir))
}

#[test]
fn a_lost_cell_runs_in_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let r = run("cells-small", dir.path());
    assert_eq!(r["passed"], true, "{r}");
    assert_eq!(r["invariant_violations"], 0, "{r}");
    // The whole of c2 (hosts n2, n5, .. n29) crashed at 40 s and stays down to the timeline's
    // end (80 s).
    let schedule: Vec<&str> = r["schedule"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    let c2: Vec<String> = (0..10).map(|k| format!("n{}", 2 + 3 * k)).collect();
    let cell_crash = schedule
        .iter()
        .find(|s| s.contains("crash") && s.contains(&format!("node={}", c2.join(","))))
        .unwrap_or_else(|| panic!("no crash of all of c2 in {schedule:?}"));
    assert!(cell_crash.trim_start().starts_with("40."), "{cell_crash}");
    // Every desired replica healthy again well before the timeline's end, with c2 still down:
    // c2's replicas run in c1 and c3.
    let series = std::fs::read_to_string(dir.path().join("cells-small-seed1.series.json"))
        .expect("--out writes the series");
    let series: serde_json::Value = serde_json::from_str(&series).unwrap();
    let samples = series.as_array().unwrap();
    let late: Vec<&serde_json::Value> = samples
        .iter()
        .filter(|s| (70_000..=80_000).contains(&s["t_ms"].as_u64().unwrap()))
        .collect();
    assert!(!late.is_empty(), "no samples between 70 s and 80 s");
    for s in late {
        assert_eq!(s["desired"], 36, "{s}");
        assert_eq!(s["healthy"], 36, "{s}");
    }
    assert_eq!(r["converged"], true, "{r}");
    // c2's replicas were replaced after the cell was held down on evidence (mesh version 14:
    // stale 2.5 s after its last summary heard, which was up to about a round old at the
    // crash; then c1's and c3's envoys' probes of its members failed, 1 s timeout, and their
    // summaries said so), not sooner than the stale bound less that age, and within 6 s (issue
    // 28 asks 4 s p99; this seed's max is 4.2 s, docs/measurements.md).
    let replacement = &r["replacement"];
    assert!(replacement["count"].as_u64().unwrap() >= 8, "{replacement}");
    let max_ms = replacement["max_ms"].as_u64().unwrap();
    assert!((2_000..=6_000).contains(&max_ms), "{replacement}");
    // A move between cells hands off as a move inside a cell does: the old copy stops once
    // the new cell reports its copy serving, well before the 10 s handoff bound.
    let longest = r["duplicate_longest_ms"].as_u64();
    assert!(longest.is_some_and(|ms| ms < 10_000), "{r}");
}

#[test]
fn an_exclusive_replica_in_a_cell_cut_off_from_the_others_never_runs_twice() {
    let dir = tempfile::tempdir().unwrap();
    let r = run("cells-exclusive", dir.path());
    assert_eq!(r["passed"], true, "{r}");
    assert_eq!(r["exclusive_duplicates"], 0, "{r}");
    assert_eq!(r["invariant_violations"], 0, "{r}");
    // db ran in c2, stopped there after c2 was cut off (30 s), ran in another cell only 30 s
    // after the others held c2 down (about 38 s), and went back after the heal (90 s).
    let trace =
        std::fs::read_to_string(dir.path().join("cells-exclusive-seed1.trace.txt")).unwrap();
    let db0: Vec<(f64, &str)> = trace
        .lines()
        .filter(|l| l.contains("copy db/0 on"))
        .map(|l| {
            let t: f64 = l.trim().split('s').next().unwrap().parse().unwrap();
            (t, l.trim())
        })
        .collect();
    let c2 = |l: &str| {
        ["n2 ", "n5 ", "n8 ", "n11", "n14"]
            .iter()
            .any(|n| l.contains(&format!("on {n}")))
    };
    let stopped_in_c2 = db0
        .iter()
        .find(|(t, l)| *t > 30.0 && c2(l) && l.ends_with("gone"))
        .unwrap_or_else(|| panic!("db/0 never stopped in c2: {db0:?}"));
    let started_elsewhere = db0
        .iter()
        .find(|(t, l)| *t > 30.0 && !c2(l) && l.ends_with("running"))
        .unwrap_or_else(|| panic!("db/0 never ran outside c2: {db0:?}"));
    assert!(stopped_in_c2.0 < started_elsewhere.0, "{db0:?}");
    assert!(started_elsewhere.0 >= 30.0 + 8.0 + 25.0, "{db0:?}");
    assert!(
        db0.iter()
            .any(|(t, l)| *t > 90.0 && c2(l) && l.ends_with("running")),
        "{db0:?}"
    );
}

#[test]
fn a_cell_cut_off_briefly_keeps_what_it_runs_and_the_copies_started_elsewhere_stop() {
    let dir = tempfile::tempdir().unwrap();
    let r = run("cells-brief-loss", dir.path());
    assert_eq!(r["passed"], true, "{r}");
    assert_eq!(r["false_cell_downs"], 0, "{r}");
    assert_eq!(r["invariant_violations"], 0, "{r}");
    let trace =
        std::fs::read_to_string(dir.path().join("cells-brief-loss-seed1.trace.txt")).unwrap();
    let copies: Vec<(f64, &str)> = trace
        .lines()
        .filter(|l| l.contains("copy web/"))
        .map(|l| {
            let t: f64 = l.trim().split('s').next().unwrap().parse().unwrap();
            (t, l.trim())
        })
        .collect();
    // c2 is n2, n5, .. n29.
    let in_c2 = |l: &str| {
        let host = l.split(" on ").nth(1).unwrap().split(':').next().unwrap();
        host[1..].parse::<u32>().unwrap() % 3 == 2
    };
    // Cut off at 30 s for 5 s: the other cells held c2 down on evidence and started its
    // replicas before the heal...
    let started: Vec<&(f64, &str)> = copies
        .iter()
        .filter(|(t, l)| (30.0..35.0).contains(t) && !in_c2(l) && l.ends_with("running"))
        .collect();
    assert!(started.len() >= 5, "{copies:?}");
    assert!(started.iter().all(|(t, _)| *t >= 32.0), "{started:?}");
    // ...c2 stopped nothing it ran and started nothing of theirs...
    assert!(
        !copies
            .iter()
            .any(|(t, l)| (30.0..50.0).contains(t) && in_c2(l)),
        "{copies:?}"
    );
    // ...and every copy started elsewhere stopped again once c2 was back.
    let stopped = copies
        .iter()
        .filter(|(t, l)| (35.0..50.0).contains(t) && !in_c2(l) && l.ends_with("gone"))
        .count();
    assert_eq!(stopped, started.len(), "{copies:?}");
}

#[test]
fn the_seeds_cell_meets_the_others_and_gets_every_spec() {
    let dir = tempfile::tempdir().unwrap();
    let r = run("regress/cells-seed-cell", dir.path());
    assert_eq!(r["passed"], true, "{r}");
    assert_eq!(r["converged"], true, "{r}");
    let p99 = r["spec_propagation"]["p99_ms"].as_u64().unwrap();
    assert!(
        p99 <= 10_000,
        "a spec took {p99} ms to reach every agent: {r}"
    );
}

#[test]
fn cells_are_checked_with_their_location() {
    let dir = std::env::temp_dir().join(format!("shoal-sim-cells-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    let text = "name = \"t\"\nduration = \"10s\"\n[mesh]\nnodes = 3\ncells = 4\n\
                [[events]]\nat = \"1s\"\naction = \"crash\"\ntarget = \"cell=c9\"\n";
    std::fs::write(&path, text).unwrap();
    let out = sim()
        .args(["check", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:5:9: mesh.cells: 4 cells for 3 hosts"),
        "{err}"
    );
    // With no valid cells, a cell selector names the scenario's missing cells.
    assert!(
        err.contains("bad.toml:6:1: target: cell=c9: the scenario has no cells"),
        "{err}"
    );
}
