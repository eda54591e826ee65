//! Fencing tokens end to end, with real agents and processes on loopback: an exclusive replica's
//! process has `SHOAL_FENCE_TOKEN` in its environment, `shoal status` shows the same token (JSON
//! and text), it is at least the wall clock of the start, and a normal replica has none.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use serde_json::Value;

const MARKER: u32 = 36_301;

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn spec(dir: &std::path::Path, name: &str, exclusive: bool) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = format!(
        "name = \"{name}\"\n[process]\ncommand = [\"sleep\", \"{MARKER}\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[placement]\nexclusive = {exclusive}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn instances(c: &Cluster, name: &str) -> Vec<Value> {
    let out = c.cli(0, &["status", name, "-o", "json", "--timeout", "2s"]);
    let status: Option<Value> = out
        .status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten();
    status.map_or(Vec::new(), |s| s["instances"].as_array().unwrap().clone())
}

/// The `SHOAL_FENCE_TOKEN` of every `sleep MARKER` process, from `/proc/<pid>/environ`.
fn tokens_in_environments() -> Vec<Option<u64>> {
    let out = std::process::Command::new("pgrep")
        .args(["-f", &format!("^sleep {MARKER}$")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|pid| {
            let environ = std::fs::read(format!("/proc/{}/environ", pid.trim())).unwrap();
            environ
                .split(|b| *b == 0)
                .filter_map(|kv| std::str::from_utf8(kv).ok())
                .find_map(|kv| kv.strip_prefix("SHOAL_FENCE_TOKEN="))
                .map(|t| t.parse().unwrap())
        })
        .collect()
}

#[test]
fn an_exclusive_replica_sees_its_token_and_status_shows_it() {
    let mut c = Cluster::new();
    c.cleanup.push(format!("^sleep {MARKER}$"));
    for i in 1..=3 {
        c.add(&format!("n{i}"));
    }
    c.wait_members(3, Duration::from_secs(20));
    let before = wall_ms();
    for (name, exclusive) in [("db", true), ("web", false)] {
        let path = spec(c.dir.path(), name, exclusive);
        let out = c.cli(0, &["apply", "-f", path.to_str().unwrap()]);
        assert!(out.status.success(), "apply failed: {}", stderr(&out));
    }
    let running = |name: &str| {
        let list = instances(&c, name);
        list.len() == 1 && list[0]["phase"] == "running"
    };
    assert!(
        wait_until(Duration::from_secs(20), || running("db") && running("web")),
        "db and web not running: {:?} {:?}\n{}",
        instances(&c, "db"),
        instances(&c, "web"),
        c.logs()
    );
    let token = instances(&c, "db")[0]["fence_token"]
        .as_u64()
        .expect("an exclusive instance shows its token");
    assert!(
        token >= before,
        "the wall clock is the floor: {token} < {before}"
    );
    assert!(instances(&c, "web")[0]["fence_token"].is_null());

    let mut seen = tokens_in_environments();
    seen.sort();
    assert_eq!(
        seen,
        vec![None, Some(token)],
        "web has none, db has {token}"
    );

    let text = String::from_utf8_lossy(&c.cli(0, &["status", "db"]).stdout).to_string();
    assert!(
        text.contains("FENCE TOKEN") && text.contains(&token.to_string()),
        "{text}"
    );
}
