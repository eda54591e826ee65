//! The plain CLI against two real agents (process runtime): `apply --wait` stops at the first
//! start failure no retry fixes instead of waiting out its timeout, `status` without a name is
//! the mesh at a glance, and `logs` of a silent replica says so.

mod common;

use std::time::{Duration, Instant};

use common::{stderr, wait_until, Cluster};

const RESOURCES: &str = "[resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";

#[test]
fn wait_stops_on_a_missing_command_and_the_mesh_reads_plainly() {
    let mut cluster = Cluster::new();
    cluster.cleanup.push("sleep 3594".to_string());
    for name in ["p1", "p2"] {
        cluster.add(name);
    }
    cluster.wait_members(2, Duration::from_secs(20));

    // A command that does not exist: the first failed start says why, long before the timeout.
    let broken = cluster.dir.path().join("broken.toml");
    std::fs::write(
        &broken,
        format!(
            "name = \"broken\"\n[process]\ncommand = [\"/nonexistent/shoal-test-cmd\"]\n{RESOURCES}"
        ),
    )
    .unwrap();
    let began = Instant::now();
    let out = cluster.cli(
        0,
        &[
            "apply",
            "-f",
            broken.to_str().unwrap(),
            "--wait",
            "--wait-timeout",
            "2m",
        ],
    );
    let waited = began.elapsed();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot start"), "{err}");
    assert!(err.contains("/nonexistent/shoal-test-cmd"), "{err}");
    assert!(waited < Duration::from_secs(30), "waited {waited:?}: {err}");

    // A silent replica: `logs` says there is nothing yet.
    let quiet = cluster.dir.path().join("quiet.toml");
    std::fs::write(
        &quiet,
        format!("name = \"quiet\"\n[process]\ncommand = [\"sleep\", \"3594\"]\n{RESOURCES}"),
    )
    .unwrap();
    let out = cluster.cli(0, &["apply", "-f", quiet.to_str().unwrap(), "--wait"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cluster.cli(1, &["logs", "quiet/0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("(no output yet from quiet/0 on p"),
        "{}",
        stderr(&out)
    );

    // `status` alone: both hosts, both workloads with their counts.
    let mut text = String::new();
    let settled = wait_until(Duration::from_secs(10), || {
        let out = cluster.cli(1, &["status"]);
        text = String::from_utf8_lossy(&out.stdout).to_string();
        out.status.success() && text.contains("HOSTS: 2 of 2 up")
    });
    assert!(settled, "{text}");
    let row = |name: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or("")
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    assert_eq!(row("quiet")[1..4], ["1", "1", "1"], "{text}");
    assert_eq!(row("broken")[1..4], ["1", "0", "0"], "{text}");
    assert!(text.contains("WORKLOADS: 2"), "{text}");
    assert!(text.contains("ISSUES: "), "{text}");
}
