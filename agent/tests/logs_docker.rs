//! `shoal logs` of a container, read from the engine through the agent that does not run it:
//! two agents with the docker runtime on this host's engine (containers labelled by node), a
//! busybox container printing numbered lines on stdout and one on stderr; all lines, `--tail`,
//! `--follow` seeing new ones, and `--previous` refused plainly (the engine's logs go with the
//! removed container). A container printing 20 MB keeps no more than the agent's
//! `--log-max-bytes` on disk (the json-file driver within the bound). Needs a reachable Docker engine and `/bin/busybox` (see runtime_docker.rs
//! for SHOAL_SKIP_DOCKER_TESTS).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{docker_ready, shoal_command, stderr, wait_until, Cluster};

const NODES: [&str; 2] = ["ld1", "ld2"];

/// The agents' `--log-max-bytes` (2 MiB), over the default 2 files.
const LOG_BOUND: u64 = 2 << 20;

/// `docker inspect -f FORMAT` of the replica's container (any, running or not).
fn inspect(workload: &str, format: &str) -> Option<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-q",
            "--filter",
            &format!("label=shoal.workload={workload}"),
        ])
        .output()
        .ok()?;
    let id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .to_string();
    let out = Command::new("docker")
        .args(["inspect", "-f", format, &id])
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Removes this test's containers (also those a killed earlier run left).
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        for node in NODES {
            let out = Command::new("docker")
                .args(["ps", "-aq", "--filter", &format!("label=shoal.node={node}")])
                .output()
                .unwrap();
            for id in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = Command::new("docker").args(["rm", "-f", id]).output();
            }
        }
    }
}

fn logs(c: &Cluster, i: usize, args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["logs"];
    all.extend_from_slice(args);
    let out = c.cli(i, &all);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    (out.status.success(), text, stderr(&out))
}

#[test]
fn container_logs_through_another_agent() {
    if !docker_ready() {
        return;
    }
    drop(Cleanup);
    let _cleanup = Cleanup;
    let mut c = Cluster::new();
    c.agent_args = vec![
        "--runtime".into(),
        "docker".into(),
        "--log-max-bytes".into(),
        LOG_BOUND.to_string(),
    ];
    for node in NODES {
        c.add(node);
    }
    c.wait_members(2, Duration::from_secs(20));
    let spec = c.dir.path().join("dlog.toml");
    std::fs::write(
        &spec,
        "name = \"dlog\"\nreplicas = 1\n[container]\nimage = \"shoal-busybox:latest\"\npull = \"if-not-present\"\n\
         command = [\"sh\", \"-c\", \"i=0; while [ $i -lt 5 ]; do echo cline $i; \
         i=$((i+1)); done; echo cerr >&2; n=0; while :; do n=$((n+1)); echo ctick $n; \
         sleep 0.2; done\"]\n[resources]\ncpu = \"100m\"\nmemory = \"32Mi\"\n",
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
    let mut runner = None;
    let running = wait_until(Duration::from_secs(30), || {
        let out = c.cli(0, &["endpoints", "dlog", "-o", "json"]);
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
            return false;
        };
        runner = json["endpoints"].as_array().and_then(|list| {
            list.iter()
                .find(|e| e["phase"] == "running")
                .and_then(|e| e["node"].as_str().map(str::to_string))
        });
        runner.is_some()
    });
    assert!(running, "dlog running\n{}", c.logs());
    let runner = runner.unwrap();
    let other = if runner == NODES[0] { 1 } else { 0 };

    assert!(
        wait_until(Duration::from_secs(10), || logs(&c, other, &["dlog/0"])
            .1
            .contains("ctick 2")),
        "container output through {}\n{}",
        NODES[other],
        c.logs()
    );
    let (ok, text, err) = logs(&c, other, &["dlog"]);
    assert!(ok, "{err}");
    // Each stream in order; the engine, like any reader of two pipes, may place the stderr line
    // anywhere near.
    let lines: Vec<&str> = text.lines().filter(|l| *l != "cerr").collect();
    let numbered: Vec<String> = (0..5).map(|i| format!("cline {i}")).collect();
    assert_eq!(lines[..5], numbered[..], "{text}");
    assert!(text.lines().any(|l| l == "cerr"), "{text}");
    std::thread::sleep(Duration::from_millis(1000));
    let (ok, text, err) = logs(&c, other, &["dlog/0", "--tail", "2", "--timestamps"]);
    assert!(ok, "{err}");
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.lines().all(|l| l.contains("Z stdout ctick ")),
        "{text}"
    );

    // --follow: new ticks arrive (the engine stamps them; read after the last stamp seen).
    let mut follow = shoal_command(None)
        .args(["logs", "dlog/0", "--follow", "--tail", "1"])
        .env("SHOAL_AGENT", c.agents[other].api.to_string())
        .env("SHOAL_PKI", &c.pki)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let reader = BufReader::new(follow.stdout.take().unwrap());
    let mut seen: Vec<u64> = Vec::new();
    for line in reader.lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("ctick ").and_then(|n| n.parse().ok()) {
            seen.push(n);
        }
        if seen.len() >= 10 || started.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(seen.len() >= 10, "followed {seen:?}");
    assert!(
        seen.windows(2).all(|w| w[1] == w[0] + 1),
        "no tick lost nor repeated: {seen:?}"
    );
    println!(
        "{}",
        serde_json::json!({
            "test": "logs_docker_follow",
            "ticks": seen.len(),
            "ms": started.elapsed().as_millis() as u64,
        })
    );

    let (ok, _, err) = logs(&c, other, &["dlog/0", "--previous"]);
    assert!(!ok && err.contains("no previous container"), "{err}");
    // 20 MB printed: the engine keeps at most the agent's bound of it, in json-file files of
    // bound / 2 (the engine's default json-file would keep all 20 MB, and more in JSON).
    let flood = c.dir.path().join("dflood.toml");
    std::fs::write(
        &flood,
        "name = \"dflood\"\nreplicas = 1\n[container]\nimage = \"shoal-busybox:latest\"\n\
         pull = \"if-not-present\"\ncommand = [\"sh\", \"-c\", \"head -c 20000000 /dev/zero | \
         tr '\\\\0' x | fold -w 999; echo flood-done; exec sleep 3600\"]\n\
         [resources]\ncpu = \"500m\"\nmemory = \"32Mi\"\n",
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", flood.to_str().unwrap()]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
    let done = wait_until(Duration::from_secs(60), || {
        logs(&c, 0, &["dflood/0", "--tail", "1"])
            .1
            .contains("flood-done")
    });
    assert!(
        done,
        "the flood ends: {:?}\n{}",
        logs(&c, 0, &["dflood/0", "--tail", "2"]),
        c.logs()
    );
    let config = inspect("dflood", "{{json .HostConfig.LogConfig}}").unwrap_or_default();
    let config: serde_json::Value = serde_json::from_str(&config).unwrap_or_default();
    assert_eq!(config["Type"], "json-file", "{config}");
    assert_eq!(
        config["Config"]["max-size"],
        (LOG_BOUND / 2).to_string(),
        "{config}"
    );
    assert_eq!(config["Config"]["max-file"], "2", "{config}");
    let path = std::path::PathBuf::from(inspect("dflood", "{{.LogPath}}").unwrap_or_default());
    let (dir, name) = (
        path.parent().unwrap(),
        path.file_name().unwrap().to_str().unwrap(),
    );
    // Counted through the engine (a container that mounts the log directory), so that a test
    // user who may not read the engine's data root counts the same bytes.
    let out = Command::new("docker")
        .args(["run", "--rm", "-v", &format!("{}:/logs:ro", dir.display())])
        .args([
            "shoal-busybox:latest",
            "sh",
            "-c",
            &format!("cat /logs/{name}* | wc -c"),
        ])
        .output()
        .unwrap();
    let kept: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("counting the log files: {}", stderr(&out)));
    assert!(
        kept > LOG_BOUND / 2 && kept <= LOG_BOUND,
        "{kept} bytes of log kept for 20 MB printed; the bound is {LOG_BOUND}"
    );
    println!(
        "{}",
        serde_json::json!({"test": "logs_docker_bound", "printed_x_bytes": 20_000_000, "kept_bytes": kept, "bound_bytes": LOG_BOUND})
    );
}
