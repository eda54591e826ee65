//! Workloads are not root by default, on real agents (`--workload-user`, default `nobody`, and
//! `--allow-root-workloads`): a process workload with no `user` runs as nobody, writes its own
//! data volume, and `shoal exec` in it runs as nobody too; a spec whose `user` is root is refused
//! at apply naming the live agents while none allows root, and once an agent started with
//! `--allow-root-workloads` is up the replica goes there and runs as uid 0; a `user` this host
//! does not know leaves the replica unstarted with the reason in `shoal status`. The flags are
//! checked at start with the flag named.
//!
//! Needs root (the agent's user in production), as CI runs: without it each test says so and
//! checks nothing else.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{shoal_bin, stderr, wait_until, Cluster};

const WAIT: Duration = Duration::from_secs(30);
/// Marks the test's processes, so that the cluster's cleanup kills them.
const MARK: &str = ": nonroot-agents-test";

fn is_root() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        eprintln!("SKIPPED: running workloads as another user needs root (CI runs as root)");
    }
    root
}

fn nobody_uid() -> String {
    let out = std::process::Command::new("id")
        .args(["-u", "nobody"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A process spec that prints its uid, writes it to its data volume and sleeps.
fn spec_text(name: &str, user: Option<&str>) -> String {
    let user = user
        .map(|u| format!("user = \"{u}\"\n"))
        .unwrap_or_default();
    format!(
        "name = \"{name}\"\n{user}[process]\n\
         command = [\"sh\", \"-c\", \"{MARK}; id -u; id -u > $SHOAL_VOLUME_DATA/uid && exec sleep 600\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[restart]\nbackoff_initial = \"1s\"\n\
         [[volumes]]\nname = \"data\"\n"
    )
}

/// Applies `text` on agent 0 until the mesh takes it or refuses it for a reason other than its
/// version still settling; the apply's output.
fn apply(c: &Cluster, name: &str, text: &str) -> std::process::Output {
    let path = c.dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let mut last = None;
    wait_until(WAIT, || {
        let out = c.cli(0, &["apply", "-f", path.to_str().unwrap()]);
        let settling = !out.status.success() && stderr(&out).contains("apply again shortly");
        last = Some(out);
        !settling
    });
    last.unwrap()
}

/// (node, phase, reason) of each row of `status NAME`.
fn rows(c: &Cluster, name: &str) -> Vec<(String, String, String)> {
    let status = c.cli_json(0, &["status", name, "-o", "json"]);
    status["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
            (s("node"), s("phase"), s("reason"))
        })
        .collect()
}

fn logs(c: &Cluster, replica: &str) -> String {
    String::from_utf8_lossy(&c.cli(0, &["logs", replica]).stdout)
        .trim()
        .to_string()
}

#[test]
fn workloads_run_as_nobody_and_root_only_where_allowed() {
    if !is_root() {
        return;
    }
    let nobody = nobody_uid();
    let mut c = Cluster::new();
    c.cleanup.push(MARK.trim_start_matches(": ").to_string());
    c.add("n1");
    c.add("n2");
    c.wait_members(2, WAIT);

    // No `user`: nobody, also for exec, and its data volume is its own.
    let out = apply(&c, "plain", &spec_text("plain", None));
    assert!(out.status.success(), "apply plain: {}", stderr(&out));
    assert!(
        wait_until(WAIT, || logs(&c, "plain/0") == nobody),
        "shoal logs plain/0: {:?}\n{}",
        logs(&c, "plain/0"),
        c.logs()
    );
    let out = c.cli(
        0,
        &[
            "exec",
            "plain/0",
            "--",
            "sh",
            "-c",
            "id -u; cat $SHOAL_VOLUME_DATA/uid",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{nobody}\n{nobody}"),
        "exec: {}",
        stderr(&out)
    );

    // Root while no agent allows it: refused at apply, the live agents named.
    let root_text = spec_text("rooty", Some("root"));
    let out = apply(&c, "rooty", &root_text);
    let said = stderr(&out);
    assert!(!out.status.success(), "a root spec was applied: {said}");
    assert!(
        said.contains("no live agent allows root workloads")
            && said.contains("n1, n2")
            && said.contains("--allow-root-workloads"),
        "{said}"
    );

    // An agent that allows root: the replica goes there and runs as uid 0.
    c.agent_args = vec!["--allow-root-workloads".to_string()];
    c.add("n3");
    c.wait_members(3, WAIT);
    let applied = wait_until(WAIT, || apply(&c, "rooty", &root_text).status.success());
    assert!(applied, "{}", c.logs());
    let on_n3 = || {
        let running: BTreeSet<_> = rows(&c, "rooty")
            .into_iter()
            .filter(|r| r.1 == "running")
            .map(|r| r.0)
            .collect();
        running == BTreeSet::from(["n3".to_string()])
    };
    assert!(
        wait_until(WAIT, || on_n3() && logs(&c, "rooty/0") == "0"),
        "rooty: {:?}, logs {:?}\n{}",
        rows(&c, "rooty"),
        logs(&c, "rooty/0"),
        c.logs()
    );

    // A user this host does not know: not started, the reason in status.
    let out = apply(&c, "ghost", &spec_text("ghost", Some("no-such-user-shoal")));
    assert!(out.status.success(), "apply ghost: {}", stderr(&out));
    let says = || {
        rows(&c, "ghost")
            .iter()
            .any(|r| r.2.contains("no-such-user-shoal") && r.2.contains("no such user"))
            || String::from_utf8_lossy(&c.cli(0, &["status", "ghost"]).stdout)
                .contains("no such user on this host")
    };
    assert!(
        wait_until(WAIT, says),
        "status ghost: {}\n{}",
        String::from_utf8_lossy(&c.cli(0, &["status", "ghost"]).stdout),
        c.logs()
    );
}

#[test]
fn the_workload_user_flags_are_checked_at_start() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(shoal_bin())
            .args([
                "agent",
                "--name",
                "n1",
                "--gossip",
                "127.0.0.1:1",
                "--api",
                "127.0.0.1:2",
            ])
            .args(["--data-dir", data.to_str().unwrap()])
            .args(["--pki", dir.path().join("pki").to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{extra:?} started");
        stderr(&out)
    };
    let said = run(&["--workload-user", "no-such-user-shoal"]);
    assert!(
        said.contains("--workload-user") && said.contains("no such user on this host"),
        "{said}"
    );
    let said = run(&["--workload-user", "root"]);
    assert!(
        said.contains("--workload-user") && said.contains("--allow-root-workloads"),
        "{said}"
    );
}
