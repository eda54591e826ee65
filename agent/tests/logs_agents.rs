//! `shoal logs` on real agents: two agents, a process workload printing numbered lines, read
//! through the agent that does not run it (forwarded); `--tail`, `--since`; `--follow` sees each
//! new line (the latency from the write, printed as a JSON line); the agent killed and restarted
//! while the relay keeps writing; `--previous` after a crash; clear errors; and a replica
//! printing 100 MB keeps its log directory under the configured bound at every sample.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{shoal_command, stderr, wait_until, Cluster};

/// The bound the agents are started with.
const LOG_MAX_BYTES: u64 = 2 * 1024 * 1024;
/// Marks every test process, so that the cluster's cleanup kills them.
const MARK: &str = ": logs-agents-test";

/// A one-replica workload running `script` with `cpu`, and `extra` TOML after.
fn write_spec(dir: &Path, name: &str, script: &str, cpu: &str, extra: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = format!(
        "name = \"{name}\"\nreplicas = 1\n[process]\ncommand = [\"sh\", \"-c\", \"{MARK}; \
         {script}\"]\n[resources]\ncpu = \"{cpu}\"\nmemory = \"64Mi\"\n{extra}"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The node running replica 0 of `name`, as agent `i` sees it.
fn node_of(c: &Cluster, i: usize, name: &str) -> Option<String> {
    let out = c.cli(i, &["endpoints", name, "-o", "json"]);
    if !out.status.success() {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    json["endpoints"]
        .as_array()?
        .iter()
        .find(|e| e["replica"] == 0 && e["phase"] == "running")
        .and_then(|e| e["node"].as_str().map(str::to_string))
}

fn logs(c: &Cluster, i: usize, args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["logs"];
    all.extend_from_slice(args);
    let out = c.cli(i, &all);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    (out.status.success(), text, stderr(&out))
}

/// The tick numbers and their write times in `text` (`tick N NS` lines).
fn ticks(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.strip_prefix("tick ")?.split(' ');
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn logs_from_any_agent_follow_previous_and_a_bounded_flood() {
    let mut c = Cluster::new();
    c.cleanup.push(MARK.trim_start_matches(": ").to_string());
    c.agent_args = vec!["--log-max-bytes".into(), LOG_MAX_BYTES.to_string()];
    c.add("n1");
    c.add("n2");
    c.wait_members(2, Duration::from_secs(20));
    let dir = c.dir.path().to_path_buf();

    // A ticker: 100 numbered lines, one on stderr, then a tick with its write time every 200 ms.
    let ticker = write_spec(
        &dir,
        "ticker",
        "i=0; while [ $i -lt 100 ]; do echo line $i; i=$((i+1)); done; echo to-stderr >&2; \
         n=0; while :; do n=$((n+1)); echo tick $n $(date +%s%N); sleep 0.2; done",
        "100m",
        "",
    );
    let out = c.cli(0, &["apply", "-f", ticker.to_str().unwrap()]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
    let mut node = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            node = node_of(&c, 0, "ticker");
            node.is_some()
        }),
        "ticker running\n{}",
        c.logs()
    );
    let node = node.unwrap();
    let runner = c.agents.iter().position(|a| a.name == node).unwrap();
    let other = 1 - runner;

    // Through the agent that does not run it: every line, in order, stdout and stderr.
    assert!(wait_until(Duration::from_secs(10), || {
        logs(&c, other, &["ticker/0"]).1.contains("tick 2 ")
    }));
    let (ok, text, err) = logs(&c, other, &["ticker"]);
    assert!(ok, "logs ticker: {err}");
    let numbered: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
    // Two pipes: the order between the stderr line and the stdout lines around it is not kept
    // (as with any reader of two pipes); each stream's own order is.
    let lines: Vec<&str> = text.lines().filter(|l| *l != "to-stderr").collect();
    assert_eq!(lines[..100], numbered[..], "{text}");
    assert_eq!(
        text.lines().filter(|l| *l == "to-stderr").count(),
        1,
        "{text}"
    );
    std::thread::sleep(Duration::from_millis(2500));
    // --tail and --timestamps.
    let (ok, text, err) = logs(&c, other, &["ticker/0", "--tail", "3", "--timestamps"]);
    assert!(ok, "{err}");
    let tail: Vec<&str> = text.lines().collect();
    assert_eq!(tail.len(), 3, "{text}");
    assert!(tail.iter().all(|l| l.contains("Z stdout tick ")), "{text}");
    // --since: lines of the last second only (the numbered ones are older by then).
    let (ok, text, err) = logs(&c, other, &["ticker/0", "--since", "1s"]);
    assert!(ok, "{err}");
    assert!(
        !text.contains("line 0") && !ticks(&text).is_empty(),
        "{text}"
    );
    assert!(ticks(&text).len() <= 7, "{text}");
    let (_, all, _) = logs(&c, other, &["ticker/0", "--since", "1h"]);
    assert!(all.lines().any(|l| l == "line 0"), "{all}");

    // --follow from the other agent: the latency of each tick, from its write to its print.
    let mut follow = shoal_command(None)
        .args(["logs", "ticker/0", "--follow", "--tail", "0"])
        .env("SHOAL_AGENT", c.agents[other].api.to_string())
        .env("SHOAL_PKI", &c.pki)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let reader = BufReader::new(follow.stdout.take().unwrap());
    let mut latencies_ms: Vec<f64> = Vec::new();
    for line in reader.lines() {
        let line = line.unwrap();
        let arrived = now_ns();
        if let Some((_, at)) = ticks(&line).first() {
            latencies_ms.push(arrived.saturating_sub(*at) as f64 / 1e6);
        }
        if latencies_ms.len() >= 20 {
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    latencies_ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = latencies_ms[latencies_ms.len() / 2];
    let worst = *latencies_ms.last().unwrap();
    println!(
        "{}",
        serde_json::json!({
            "test": "logs_follow_latency",
            "lines": latencies_ms.len(),
            "median_ms": (median * 10.0).round() / 10.0,
            "worst_ms": (worst * 10.0).round() / 10.0,
        })
    );
    assert!(worst < 500.0, "follow latency {latencies_ms:?}");

    // --previous of a replica that never restarted, an unknown workload: clear errors.
    let (ok, _, err) = logs(&c, other, &["ticker/0", "--previous"]);
    assert!(!ok && err.contains("no previous instance"), "{err}");
    let (ok, _, err) = logs(&c, other, &["nope"]);
    assert!(!ok && err.contains("no workload named"), "{err}");
    let (ok, _, err) = logs(&c, other, &["ticker/7"]);
    assert!(!ok && err.contains("ticker/7 has no instance"), "{err}");

    // The runner's agent killed: the relay keeps writing; restarted, it reads them.
    let seed = c.agents[other].gossip;
    c.kill(runner);
    let killed_ns = now_ns();
    std::thread::sleep(Duration::from_secs(2));
    let restarted_ns = now_ns();
    c.start(runner, Some(seed));
    let mut while_down = 0;
    let readable = wait_until(Duration::from_secs(20), || {
        let (ok, text, _) = logs(&c, other, &["ticker/0", "--tail", "100"]);
        while_down = ticks(&text)
            .iter()
            .filter(|(_, at)| (killed_ns..restarted_ns).contains(at))
            .count();
        ok && while_down >= 5
    });
    assert!(
        readable,
        "ticks written while the agent was down\n{}",
        c.logs()
    );
    println!(
        "{}",
        serde_json::json!({"test": "logs_agent_restart", "ticks_while_down": while_down})
    );

    // A crasher: --previous shows the instance before the current one.
    let crasher = write_spec(
        &dir,
        "crasher",
        "echo start $$; sleep 0.5; echo boom >&2; exit 3",
        "100m",
        "[restart]\nbackoff_initial = \"100ms\"\nbackoff_max = \"200ms\"\n",
    );
    let out = c.cli(0, &["apply", "-f", crasher.to_str().unwrap()]);
    assert!(out.status.success(), "apply crasher: {}", stderr(&out));
    let mut previous = String::new();
    let shown = wait_until(Duration::from_secs(20), || {
        let (ok, text, _) = logs(&c, other, &["crasher/0", "--previous"]);
        previous = text;
        ok && previous.contains("boom")
    });
    assert!(
        shown,
        "crasher's previous instance\n{previous}\n{}",
        c.logs()
    );
    assert!(previous.starts_with("start "), "{previous}");
    assert_eq!(previous.lines().count(), 2, "{previous}");
    // --follow goes on into each new instance, from its start, and says so on stderr.
    let mut follow = shoal_command(None)
        .args(["logs", "crasher/0", "--follow", "--tail", "0"])
        .env("SHOAL_AGENT", c.agents[other].api.to_string())
        .env("SHOAL_PKI", &c.pki)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let reader = BufReader::new(follow.stdout.take().unwrap());
    let mut starts: Vec<String> = Vec::new();
    let followed = Instant::now();
    for line in reader.lines() {
        let line = line.unwrap();
        if line.starts_with("start ") && !starts.contains(&line) {
            starts.push(line);
        }
        if starts.len() >= 3 || followed.elapsed() > Duration::from_secs(15) {
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(starts.len() >= 3, "followed across restarts: {starts:?}");
    // A replica keeps its live instance's logs and its newest exited one's, no more.
    let crasher_node = node_of(&c, other, "crasher");
    for a in &c.agents {
        let kept = std::fs::read_dir(a.data_dir.join("logs/crasher/0"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert!(
            kept <= 2,
            "{kept} log dirs of crasher/0 on {} ({crasher_node:?})",
            a.name
        );
    }
    let out = c.cli(0, &["delete", "crasher"]);
    assert!(out.status.success());

    // A flood of 100 MB: the log directory stays under the bound at every sample.
    let flood = write_spec(
        &dir,
        "flood",
        "head -c 100000000 /dev/zero | tr '\\\\0' x | fold -w 999; echo flood-done; \
         sleep 86417",
        "1000m",
        "",
    );
    let out = c.cli(0, &["apply", "-f", flood.to_str().unwrap()]);
    assert!(out.status.success(), "apply flood: {}", stderr(&out));
    let started = Instant::now();
    let mut samples = 0u32;
    let mut du_max = 0u64;
    let mut done_ms = None;
    let mut rounds = 0u32;
    while started.elapsed() < Duration::from_secs(240) {
        rounds += 1;
        for a in &c.agents {
            let replica_logs = a.data_dir.join("logs/flood/0");
            let Ok(entries) = std::fs::read_dir(&replica_logs) else {
                continue;
            };
            for entry in entries.flatten() {
                let du = du_bytes(&entry.path());
                du_max = du_max.max(du);
                samples += 1;
                assert!(du <= LOG_MAX_BYTES, "{du} bytes in {:?}", entry.path());
            }
        }
        if rounds.is_multiple_of(10) {
            let (_, tail, _) = logs(&c, other, &["flood/0", "--tail", "1"]);
            if tail.contains("flood-done") {
                done_ms = Some(started.elapsed().as_millis() as u64);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let done_ms = done_ms.expect("the flood ended within 240 s");
    println!(
        "{}",
        serde_json::json!({
            "test": "logs_flood_bound",
            "printed_bytes": 100_100_000u64,
            "bound_bytes": LOG_MAX_BYTES,
            "du_max_bytes": du_max,
            "samples": samples,
            "flood_ms": done_ms,
        })
    );
    let (ok, text, _) = logs(&c, other, &["flood/0", "--tail", "2"]);
    assert!(ok && text.ends_with("flood-done\n"), "{text}");
    let out = c.cli(0, &["delete", "flood"]);
    assert!(out.status.success());

    // The ticker moves (its node drained): --follow goes on with the copy on the other node.
    let mut follow = shoal_command(None)
        .args(["logs", "ticker/0", "--follow", "--tail", "0"])
        .env("SHOAL_AGENT", c.agents[other].api.to_string())
        .env("SHOAL_PKI", &c.pki)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = c.cli(other, &["drain", &node]);
    assert!(out.status.success(), "drain: {}", stderr(&out));
    let drained = Instant::now();
    let reader = BufReader::new(follow.stdout.take().unwrap());
    let mut moved = false;
    for line in reader.lines() {
        // The new copy's output from its start: its numbered lines.
        if line.unwrap() == "line 99" {
            moved = true;
            break;
        }
        if drained.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    let mut said = String::new();
    use std::io::Read;
    let _ = follow.stderr.take().unwrap().read_to_string(&mut said);
    assert!(moved, "followed the move\n{said}\n{}", c.logs());
    let new_node = &c.agents[other].name;
    assert!(said.contains(&format!("on {new_node}")), "{said}");
    println!(
        "{}",
        serde_json::json!({
            "test": "logs_follow_move",
            "new_copy_read_ms": drained.elapsed().as_millis() as u64,
        })
    );
}

/// What `du` counts for `dir`, in bytes.
fn du_bytes(dir: &Path) -> u64 {
    let out = std::process::Command::new("du")
        .args(["-s", "-B1"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
