//! `--seeds A..B`: each seed in a child process of this binary (one simulation per process keeps
//! every run replayable), then the distributions across seeds and the failing seeds' replay
//! commands.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context;
use serde_json::Value;

use crate::check::stats::{show_ms, Dist};
use crate::scenario::Scenario;

/// Parses `A..B` (B excluded).
pub fn parse_range(text: &str) -> anyhow::Result<std::ops::Range<u64>> {
    let (a, b) = text
        .split_once("..")
        .context("--seeds takes A..B, e.g. 1..101")?;
    let (a, b): (u64, u64) = (a.trim().parse()?, b.trim().parse()?);
    anyhow::ensure!(a < b, "--seeds {text}: the range is empty");
    Ok(a..b)
}

/// One seed's line of `shoal-sim seeds`.
fn seed_line(seed: u64, passed: bool, hash: &str, p99: Option<u64>, report: &Value) -> String {
    let mut line = format!(
        "seed {seed:>4}: {} trace {hash} replacement p99 {}, exclusive duplicates {}, violations {}",
        if passed { "ok    " } else { "FAILED" },
        show_ms(p99),
        u64_of(report, "exclusive_duplicates").unwrap_or(0),
        u64_of(report, "invariant_violations").unwrap_or(0),
    );
    let rollouts = rollout_ms(report);
    if !rollouts.is_empty() {
        let shown: Vec<String> = rollouts.iter().map(|ms| show_ms(*ms)).collect();
        line += &format!(
            ", rollbacks {}, rollouts {}",
            u64_of(report, "rollbacks").unwrap_or(0),
            shown.join(" / ")
        );
    }
    line
}

/// A report's `rollout_ms`, one per update (None: not ended).
fn rollout_ms(report: &Value) -> Vec<Option<u64>> {
    let list = report.get("rollout_ms").and_then(Value::as_array);
    list.map_or(Vec::new(), |l| l.iter().map(Value::as_u64).collect())
}

fn u64_of(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// Runs every seed of `range`, prints one line per seed and the aggregate; exit code 1 when a
/// seed failed.
pub fn run_many(
    path: &Path,
    sc: &Scenario,
    range: &str,
    out: Option<&Path>,
    json: bool,
) -> anyhow::Result<i32> {
    let seeds = parse_range(range)?;
    let exe = std::env::current_exe().context("finding this executable")?;
    let (mut p99s, mut detections, mut failing) = (Vec::new(), Vec::new(), Vec::new());
    let (mut exclusive, mut violations, mut false_dead, mut wall, mut sim) = (0, 0, 0, 0.0, 0.0);
    let mut hashes = Vec::new();
    let (mut rollbacks, mut rollouts) = (0, Vec::new());
    for seed in seeds.clone() {
        let mut cmd = Command::new(&exe);
        cmd.arg("run")
            .arg(path)
            .arg("--seed")
            .arg(seed.to_string())
            .arg("--json");
        if let Some(dir) = out {
            cmd.arg("--out").arg(dir);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .context("running a seed")?;
        let stdout = String::from_utf8_lossy(&child.stdout);
        let Some(report) = stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
        else {
            eprintln!("seed {seed}: no report ({})", child.status);
            failing.push(seed);
            continue;
        };
        let passed = report
            .get("passed")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let p99 = u64_of(&report, "replacement_p99_ms");
        p99s.extend(p99);
        detections.extend(
            report
                .pointer("/detection_all/p99_ms")
                .and_then(Value::as_u64),
        );
        exclusive += u64_of(&report, "exclusive_duplicates").unwrap_or(0);
        violations += u64_of(&report, "invariant_violations").unwrap_or(0);
        false_dead += u64_of(&report, "false_dead").unwrap_or(0);
        rollbacks += u64_of(&report, "rollbacks").unwrap_or(0);
        rollouts.extend(rollout_ms(&report).into_iter().flatten());
        wall += report
            .get("wall_seconds")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        sim += report
            .get("sim_seconds")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let hash = report
            .get("trace_hash")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        eprintln!("{}", seed_line(seed, passed, &hash, p99, &report));
        hashes.push((seed, hash));
        if !passed {
            failing.push(seed);
        }
    }
    let replays: Vec<String> = failing
        .iter()
        .map(|s| format!("shoal-sim run {} --seed {s}", path.display()))
        .collect();
    let summary = serde_json::json!({
        "scenario": sc.name,
        "seeds": format!("{}..{}", seeds.start, seeds.end),
        "runs": seeds.end - seeds.start,
        "failed": failing.len(),
        "failing_seeds": failing,
        "replay": replays,
        "replacement_p99_ms_across_seeds": Dist::of(&p99s),
        "detection_all_p99_ms_across_seeds": Dist::of(&detections),
        "exclusive_duplicates": exclusive,
        "invariant_violations": violations,
        "false_dead": false_dead,
        "rollbacks": rollbacks,
        "rollout_ms_across_seeds": Dist::of(&rollouts),
        "sim_seconds": sim,
        "wall_seconds": (wall * 1000.0_f64).round() / 1000.0,
        "trace_hashes": hashes.iter().map(|(s, h)| format!("{s}:{h}")).collect::<Vec<_>>(),
    });
    eprintln!(
        "{}: {} of {} seeds failed; replacement p99 across seeds: {}; exclusive duplicates {exclusive}; violations {violations}; false dead {false_dead}",
        sc.name,
        failing.len(),
        seeds.end - seeds.start,
        Dist::of(&p99s).show()
    );
    if !rollouts.is_empty() || rollbacks > 0 {
        eprintln!(
            "  automatic rollbacks {rollbacks}; rollouts ended across seeds: {}",
            Dist::of(&rollouts).show()
        );
    }
    for r in &replays {
        eprintln!("  replay: {r}");
    }
    if json {
        println!("{summary}");
    }
    Ok(i32::from(!failing.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_line_shows_an_absent_p99_as_a_dash() {
        let report = serde_json::json!({ "exclusive_duplicates": 0, "invariant_violations": 1 });
        assert_eq!(
            seed_line(7, false, "00ff", None, &report),
            "seed    7: FAILED trace 00ff replacement p99 -, exclusive duplicates 0, violations 1"
        );
        assert_eq!(
            seed_line(12, true, "00ff", Some(2001), &report),
            "seed   12: ok     trace 00ff replacement p99 2001 ms, exclusive duplicates 0, \
             violations 1"
        );
    }
}
