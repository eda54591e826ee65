//! Swarm testing: a seed fixes the derived scenario, which `run` reads back.

use std::process::Command;

fn print_scenario(seed: u64) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal-sim"))
        .args(["swarm", "--seed", &seed.to_string(), "--print-scenario"])
        .output()
        .expect("shoal-sim runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_seed_derives_the_same_scenario_every_time_and_seeds_differ() {
    let a = print_scenario(7);
    assert_eq!(a, print_scenario(7), "seed 7 derived two scenarios");
    assert_ne!(a, print_scenario(8), "seeds 7 and 8 derived one scenario");
    assert!(
        a.contains("name = \"swarm-7\"") && a.contains("seed = 7"),
        "{a}"
    );
}

#[test]
fn a_derived_scenario_checks_and_runs_the_same_as_its_swarm_seed() {
    let seed = 2;
    let dir = std::env::temp_dir().join(format!("shoal-sim-swarm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("swarm-2.toml");
    std::fs::write(&path, print_scenario(seed)).unwrap();
    let run = |args: &[&str]| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal-sim"))
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| {
            panic!(
                "{args:?}: no report ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    let swarm = run(&["swarm", "--seed", "2", "--json"]);
    let saved = run(&["run", path.to_str().unwrap(), "--json"]);
    assert_eq!(swarm["trace_hash"], saved["trace_hash"], "{swarm}\n{saved}");
    assert!(swarm["liveness"].is_object(), "{swarm}");
    assert!(
        swarm["replay"]
            .as_str()
            .unwrap()
            .starts_with("shoal-sim swarm --seed 2"),
        "{swarm}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_mixed_fleet_seed_gives_hosts_capabilities_and_workloads_of_both_kinds() {
    // Seed 1 draws a mixed fleet (swarm/fleet.rs); seed 2 does not, and derives the scenario it
    // derived before mixed fleets existed (no `[[hosts]]`).
    let mixed = print_scenario(1);
    assert!(
        mixed.contains("[[hosts]]") && mixed.contains("runtimes = [\"container\"]"),
        "{mixed}"
    );
    assert!(!print_scenario(2).contains("[[hosts]]"));
    let mixed_seeds = (1..=40)
        .map(print_scenario)
        .filter(|s| s.contains("[[hosts]]"))
        .collect::<Vec<_>>();
    assert!(
        mixed_seeds.iter().any(|s| s.contains("[container]")),
        "no container workload in 40 seeds"
    );
}
