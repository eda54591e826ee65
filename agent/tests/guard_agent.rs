//! The guard with a real agent: an agent frozen with SIGSTOP cannot keep its exclusive instance
//! alive (its guard kills it within the fencing timeout), and recovers after SIGCONT; a crashed
//! and restarted agent adopts its guard and the instance survives; an agent whose guard cannot
//! start refuses exclusive replicas and says why.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A spec running `sleep <marker>` (the marker tells this test's processes from any other's).
fn sleeper(dir: &Path, name: &str, marker: u32, exclusive: bool) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let placement = if exclusive {
        "[placement]\nexclusive = true\n"
    } else {
        ""
    };
    let text = format!(
        "name = \"{name}\"\nreplicas = 1\n[process]\ncommand = [\"sleep\", \"{marker}\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[restart]\nbackoff_initial = \"1s\"\n\
         {placement}"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Live processes whose command line is exactly `sleep <marker>`.
fn pids(marker: u32) -> Vec<i32> {
    let want = format!("sleep\0{marker}\0");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'));
        if cmdline == want.as_bytes() && !zombie {
            pids.push(pid);
        }
    }
    pids
}

/// Kills this test's `sleep <marker>` processes by pid when dropped (instances outlive agents).
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for marker in &self.0 {
            for pid in pids(*marker) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn apply(c: &Cluster, path: &Path) {
    let out = c.cli(0, &["apply", "-f", path.to_str().unwrap()]);
    assert!(out.status.success(), "apply failed: {}", stderr(&out));
}

fn issues(c: &Cluster) -> Vec<Value> {
    let out = c.cli(0, &["issues", "-o", "json", "--timeout", "2s"]);
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn has_issue(c: &Cluster, kind: &str, text: &str) -> bool {
    issues(c)
        .iter()
        .any(|i| i["kind"] == kind && i["message"].as_str().is_some_and(|m| m.contains(text)))
}

fn guard_pid(data_dir: &Path) -> i32 {
    let info: Value =
        serde_json::from_slice(&std::fs::read(data_dir.join("guard/guard.json")).unwrap()).unwrap();
    info["pid"].as_i64().unwrap() as i32
}

#[test]
fn a_stopped_agent_cannot_keep_its_exclusive_instance_running() {
    let marker = 37_001;
    let _cleanup = KillOnDrop(vec![marker]);
    let mut c = Cluster::new();
    c.add("n1");
    c.wait_members(1, Duration::from_secs(20));
    apply(&c, &sleeper(c.dir.path(), "db", marker, true));
    assert!(
        wait_until(Duration::from_secs(30), || pids(marker).len() == 1),
        "the exclusive replica did not start\n{}",
        c.logs()
    );
    let guard = guard_pid(&c.agents[0].data_dir);
    let agent = c.agents[0].child.as_ref().unwrap().id();
    // A running agent keeps renewing: a fence timeout later the instance still runs.
    std::thread::sleep(Duration::from_secs(11));
    assert_eq!(pids(marker).len(), 1, "{}", c.logs());

    // Frozen: the guard kills the instance once the lease (the 10 s fence timeout) ends.
    signal(agent, "STOP");
    let t0 = Instant::now();
    let killed = wait_until(Duration::from_secs(15), || pids(marker).is_empty());
    let took = t0.elapsed();
    signal(agent, "CONT");
    eprintln!("instance killed {took:?} after SIGSTOP of the agent");
    assert!(
        killed,
        "the instance outlived its frozen agent\n{}",
        c.logs()
    );
    assert!(
        took >= Duration::from_secs(8) && took <= Duration::from_millis(10_500),
        "killed {took:?} after SIGSTOP; the lease is 10 s, renewed about every second"
    );
    assert!(
        std::fs::metadata(format!("/proc/{guard}")).is_ok(),
        "the guard keeps running"
    );

    // Thawed: the agent reports what the guard did and starts the replica again.
    assert!(
        wait_until(Duration::from_secs(20), || pids(marker).len() == 1),
        "the replica did not come back\n{}",
        c.logs()
    );
    assert!(
        wait_until(Duration::from_secs(5), || has_issue(
            &c,
            "self-fenced",
            "the guard killed this exclusive instance"
        )),
        "{:?}",
        issues(&c)
    );
    let events = c.cli(0, &["events", "-o", "json", "--timeout", "2s"]);
    let events = String::from_utf8_lossy(&events.stdout);
    assert!(
        events.contains("\"guard\"") && events.contains("did not renew"),
        "{events}"
    );
    assert_eq!(guard_pid(&c.agents[0].data_dir), guard, "the same guard");
}

#[test]
fn an_agent_without_a_guard_refuses_exclusive_replicas_and_says_why() {
    let (exclusive, normal) = (37_002, 37_003);
    let _cleanup = KillOnDrop(vec![exclusive, normal]);
    let mut c = Cluster::new();
    // The guard's directory cannot be created: a file is in the way.
    let data_dir = c.dir.path().join("data-0-n1");
    std::fs::create_dir_all(&data_dir).unwrap();
    std::fs::write(data_dir.join("guard"), b"in the way").unwrap();
    c.add("n1");
    assert_eq!(c.agents[0].data_dir, data_dir);
    c.wait_members(1, Duration::from_secs(20));
    apply(&c, &sleeper(c.dir.path(), "db", exclusive, true));
    apply(&c, &sleeper(c.dir.path(), "web", normal, false));
    assert!(
        wait_until(Duration::from_secs(20), || pids(normal).len() == 1),
        "a normal replica runs without a guard\n{}",
        c.logs()
    );
    assert!(
        wait_until(Duration::from_secs(10), || has_issue(
            &c,
            "unsupported",
            "cannot create the guard's directory"
        )),
        "{:?}\n{}",
        issues(&c),
        c.logs()
    );
    std::thread::sleep(Duration::from_secs(4)); // past the exclusive claim delay
    assert!(
        pids(exclusive).is_empty(),
        "no exclusive start without a guard"
    );
    assert!(c.log(0).contains("no guard"), "{}", c.log(0));
}

/// Live processes started as `shoal guard --data-dir DATA_DIR`.
fn guards_of(data_dir: &Path) -> Vec<i32> {
    let want = data_dir.as_os_str().as_encoded_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'));
        if args.get(1) == Some(&b"guard".as_slice()) && args.contains(&want) && !zombie {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_restarted_agent_adopts_its_guard_and_the_lease_continues() {
    let marker = 37_004;
    let _cleanup = KillOnDrop(vec![marker]);
    let mut c = Cluster::new();
    c.add("n1");
    c.wait_members(1, Duration::from_secs(20));
    apply(&c, &sleeper(c.dir.path(), "db", marker, true));
    assert!(
        wait_until(Duration::from_secs(30), || pids(marker).len() == 1),
        "the exclusive replica did not start\n{}",
        c.logs()
    );
    let instance = pids(marker);
    let data_dir = c.agents[0].data_dir.clone();
    let guard = guard_pid(&data_dir);

    // The agent crashes and comes back at once: it adopts the guard (no second one) and renews
    // the lease before it ends, so the instance survives a lease and more.
    c.kill(0);
    c.start(0, None);
    c.wait_members(1, Duration::from_secs(20));
    assert_eq!(guards_of(&data_dir), vec![guard], "{}", c.logs());
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(
        pids(marker),
        instance,
        "the instance was adopted, not killed\n{}",
        c.logs()
    );
    assert_eq!(guards_of(&data_dir), vec![guard]);
    assert!(
        c.log(0).contains("adopted the running guard"),
        "{}",
        c.log(0)
    );
}
