//! The model tier (`shoal-sim model`) drives the real reconciler: a crashed host's replicas run
//! elsewhere within the replacement bound, an exclusive replica waits for the fencing delay and
//! never runs twice, and a seed replays.

use shoal_sim::model::{simulate, Delays, ModelReport};
use shoal_sim::scenario::{parse_scenario, Scenario};

fn shipped(name: &str) -> Scenario {
    let path = format!("{}/../scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("scenario file");
    parse_scenario(&text, &path).expect("scenario parses")
}

fn run(sc: &Scenario, seed: u64) -> ModelReport {
    simulate(sc, seed, &Delays::default())
}

#[test]
fn a_crashed_hosts_replicas_run_elsewhere_within_the_bound() {
    let sc = shipped("node-crash-100");
    for seed in 1..=3 {
        let r = run(&sc, seed);
        // owner=web and owner=api hold at least one replica each; the random third may not.
        assert!(r.replacement.count >= 2, "seed {seed}: {r:?}");
        assert_eq!(r.unreplaced, 0, "seed {seed}: {r:?}");
        assert_eq!(r.missing_at_end, 0, "seed {seed}: {r:?}");
        let p99 = r.replacement_p99_ms.expect("replacements measured");
        // Detection (>= 600 ms base) plus the 500 ms start at the least; the scenario's target
        // at the most.
        assert!((1_100..=5_000).contains(&p99), "seed {seed}: p99 {p99} ms");
        // Churn is the placement's diff: one start per replica and per move, one stop per move
        // whose old owner is alive (handed off once the new copy is healthy).
        assert!(
            r.forced_moves >= r.replacement.count as u64,
            "seed {seed}: {r:?}"
        );
        assert_eq!(r.starts, r.replicas + r.moves, "seed {seed}: {r:?}");
        assert_eq!(r.stops, r.moves - r.forced_moves, "seed {seed}: {r:?}");
    }
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let sc = shipped("quickstart");
    let mut a = serde_json::to_value(run(&sc, 7)).unwrap();
    let mut b = serde_json::to_value(run(&sc, 7)).unwrap();
    a["wall_seconds"] = 0.into();
    b["wall_seconds"] = 0.into();
    assert_eq!(a, b);
    let mut c = serde_json::to_value(run(&sc, 8)).unwrap();
    c["wall_seconds"] = 0.into();
    assert_ne!(a["detection"], c["detection"], "another seed, other draws");
}

#[test]
fn a_restarted_host_takes_its_replicas_back_without_a_gap() {
    let sc = shipped("quickstart");
    for seed in 1..=3 {
        let r = run(&sc, seed);
        assert_eq!(r.unreplaced, 0, "seed {seed}: {r:?}");
        assert_eq!(r.missing_at_end, 0, "seed {seed}: {r:?}");
        assert_eq!(r.exclusive_duplicates, 0, "seed {seed}: {r:?}");
        // Each replica the restarted host takes back starts there and is handed off once healthy.
        assert_eq!(
            r.starts - r.replicas,
            2 * r.replacement.count as u64,
            "seed {seed}: {r:?}"
        );
        assert_eq!(r.stops, r.replacement.count as u64, "seed {seed}: {r:?}");
    }
}

const EXCLUSIVE: &str = r#"
name = "exclusive-owner-crash"
duration = "60s"
[mesh]
nodes = 12
zones = ["a", "b", "c"]
[[workloads]]
start = "1s"
spec = """
name = "db"
replicas = 2
[process]
command = ["postgres"]
[resources]
cpu = "2"
memory = "4Gi"
[placement]
exclusive = true
"""
[[workloads]]
spec = """
name = "web"
replicas = 6
[process]
command = ["httpd"]
[resources]
cpu = "250m"
memory = "256Mi"
"""
[[events]]
at = "10s"
action = "crash"
target = "owner=db"
restart_after = "20s"
"#;

#[test]
fn an_exclusive_replica_waits_for_the_fencing_delay_and_never_runs_twice() {
    let sc = parse_scenario(EXCLUSIVE, "inline").expect("scenario parses");
    let fencing_delay_ms = sc.host.fence_delay_ms;
    for seed in 1..=5 {
        let r = run(&sc, seed);
        assert_eq!(r.exclusive_duplicates, 0, "seed {seed}: {r:?}");
        assert_eq!(r.missing_at_end, 0, "seed {seed}: {r:?}");
        assert_eq!(r.unreplaced, 0, "seed {seed}: {r:?}");
        let d = r.replacement_exclusive;
        assert!(d.count >= 1, "seed {seed}: {r:?}");
        // Detection, then the fencing delay counted from it, then the start.
        assert!(
            d.p50_ms.unwrap_or(0) > fencing_delay_ms + 600,
            "seed {seed}: {d:?}"
        );
        assert!(
            d.max_ms.unwrap_or(0) < fencing_delay_ms + 5_000,
            "seed {seed}: {d:?}"
        );
        // After the restart the replica moves back: stopped before it starts again.
        assert!(r.stops >= 1, "seed {seed}: {r:?}");
    }
}

#[test]
fn a_lost_cell_runs_in_the_other_cells() {
    let sc = shipped("cells-small");
    for seed in 1..=3 {
        let r = run(&sc, seed);
        assert_eq!(r.unreplaced, 0, "seed {seed}: {r:?}");
        assert_eq!(r.missing_at_end, 0, "seed {seed}: {r:?}");
        // c2 held about a third of the 36 replicas (7 to 9 in these seeds): every one moved,
        // forced, to c1 and c3, and ran there.
        let lost = &r.replacement_cell_lost;
        assert!(lost.count >= 5, "seed {seed}: {r:?}");
        assert!(r.forced_moves >= lost.count as u64, "seed {seed}: {r:?}");
        // The other cells hold c2 down on evidence (stale 2.5 s from their last fresh entry,
        // less its age, then a probe round and its 1 s timeout, then an exchange round or two),
        // and place its replicas at once; issue 28's target for a lost cell is 4 s p99.
        let p99 = lost.p99_ms.expect("replacements measured");
        assert!((2_500..=7_000).contains(&p99), "seed {seed}: p99 {p99} ms");
        // A host crash inside a cell that survives is replaced as in a mesh of one cell.
        if let Some(p99) = r.replacement_host.p99_ms {
            assert!(p99 <= 3_000, "seed {seed}: {r:?}");
        }
        // Only c2's own hosts watched their cell's members (10 hosts): per observer, the host
        // crash at 20 s and the cell's own deaths (seen by none, they died together).
        assert!(r.detection.count <= 9, "seed {seed}: {r:?}");
    }
}

#[test]
fn exclusive_replicas_across_cells_are_refused_by_the_model_tier() {
    let path = format!(
        "{}/../scenarios/cells-exclusive.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shoal-sim"))
        .arg("model")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("is exclusive in a mesh of"), "{err}");
    assert!(err.contains("shoal-sim run"), "{err}");
}
