//! Planned restarts on real agents (`--restart-grace`, default 10 s): a SIGTERM keeps every
//! instance running, the exclusive one under the guard's lease, and peers move nothing while the
//! agent restarts; the restarted agent adopts them, also those that run a past version of their
//! spec (found in the store's history). One that does not come back: the guard fences
//! the exclusive instance when the lease ends and another node starts it only after the grace and
//! the fencing delay, never two copies at once. The host's processes are the ground truth
//! (`pgrep`), polled every 50 ms throughout.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{stderr, wait_until, Cluster};

const DB_MARK: &str = "86421";
const WEB_MARK: &str = "86422";

fn pids(mark: &str) -> Vec<u32> {
    let out = Command::new("pgrep")
        .args(["-f", &format!("sleep {mark}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn apply(c: &Cluster, name: &str, text: &str) {
    let path = c.dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let out = c.cli(0, &["apply", "-f", path.to_str().unwrap()]);
    assert!(out.status.success(), "apply {name}: {}", stderr(&out));
}

/// The node running db/0, as agent `i` reports it.
fn db_node(c: &Cluster, i: usize) -> Option<String> {
    let json = c.cli_json(i, &["status", "db", "-o", "json", "--timeout", "3s"]);
    json["instances"]
        .as_array()?
        .iter()
        .find(|x| x["replica"] == 0 && x["phase"] == "running")?["node"]
        .as_str()
        .map(str::to_string)
}

/// Polls `f` every 50 ms for `for_how_long`, failing at once if `bad` holds at any poll.
fn watch(for_how_long: Duration, mut bad: impl FnMut() -> Option<String>) {
    let end = Instant::now() + for_how_long;
    while Instant::now() < end {
        if let Some(why) = bad() {
            panic!("{why}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_planned_restart_keeps_every_instance_and_a_missing_agent_is_replaced_only_after_its_grace() {
    let mut c = Cluster::new();
    c.cleanup.push(format!("sleep {DB_MARK}"));
    c.cleanup.push(format!("sleep {WEB_MARK}"));
    for name in ["n1", "n2", "n3"] {
        c.add(name);
    }
    c.wait_members(3, Duration::from_secs(20));
    let moved = wait_until(Duration::from_secs(20), || {
        c.cli_json(0, &["upgrade", "status", "-o", "json"])["mesh_version"]
            .as_u64()
            .is_some_and(|v| v >= 8)
    });
    assert!(
        moved,
        "the mesh version did not reach 8 or later\n{}",
        c.logs()
    );
    apply(
        &c,
        "db",
        &format!(
            "name = \"db\"\n[process]\ncommand = [\"sleep\", \"{DB_MARK}\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[placement]\nexclusive = true\n"
        ),
    );
    apply(
        &c,
        "web",
        &format!(
            "name = \"web\"\nreplicas = 3\n[process]\ncommand = [\"sleep\", \"{WEB_MARK}\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
        ),
    );
    assert!(
        wait_until(Duration::from_secs(40), || db_node(&c, 0).is_some()
            && pids(WEB_MARK).len() == 3),
        "db and web did not start\n{}",
        c.logs()
    );
    // A change that running instances are not made from (`[update]`): they are carried to the
    // new version, their runtime still says the old one. A restarted agent finds the old spec
    // in the store's history and carries them again instead of replacing them.
    apply(
        &c,
        "web",
        &format!(
            "name = \"web\"\nreplicas = 3\n[process]\ncommand = [\"sleep\", \"{WEB_MARK}\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[update]\nmax_unavailable = 2\n"
        ),
    );
    std::thread::sleep(Duration::from_secs(2));
    let holder = db_node(&c, 0).unwrap();
    let i = c.agents.iter().position(|a| a.name == holder).unwrap();
    let observer = (i + 1) % 3;
    let (db_before, web_before) = (pids(DB_MARK), pids(WEB_MARK));

    // A planned restart: SIGTERM, then the same agent again.
    let t0 = Instant::now();
    c.stop(i);
    let exited_ms = t0.elapsed().as_millis();
    let seed = c.agents[observer].gossip;
    c.start(i, Some(seed));
    let adopted = wait_until(Duration::from_secs(15), || {
        db_node(&c, i).as_deref() == Some(holder.as_str())
    });
    let adopted_ms = t0.elapsed().as_millis();
    assert!(adopted, "{holder} did not adopt db/0\n{}", c.logs());
    eprintln!(
        "planned restart of {holder}: exited in {exited_ms} ms, adopted db/0 in {adopted_ms} ms"
    );
    // Nothing moved and nothing restarted: the same processes, and no copy started elsewhere.
    watch(Duration::from_secs(3), || {
        let (db, web) = (pids(DB_MARK), pids(WEB_MARK));
        (db != db_before || web != web_before).then(|| {
            format!("instances changed across a planned restart: db {db_before:?} -> {db:?}, web {web_before:?} -> {web:?}")
        })
    });

    // The agent stops for a restart and does not come back.
    let t1 = Instant::now();
    c.stop(i);
    let (mut fenced_at, mut replaced_at) = (None, None);
    watch(Duration::from_secs(40), || {
        let db = pids(DB_MARK);
        if db.len() > 1 {
            return Some(format!(
                "two copies of db/0 after {:?}: {db:?}",
                t1.elapsed()
            ));
        }
        if db.is_empty() && fenced_at.is_none() {
            fenced_at = Some(t1.elapsed());
        }
        if !db.is_empty() && db != db_before && replaced_at.is_none() {
            if fenced_at.is_none() {
                return Some(format!(
                    "db/0 started elsewhere before its copy was fenced: {db:?}"
                ));
            }
            replaced_at = Some(t1.elapsed());
        }
        None
    });
    let fenced_at = fenced_at.expect("the guard never fenced db/0");
    assert!(
        fenced_at >= Duration::from_secs(8),
        "db/0 was stopped after {fenced_at:?}: before the grace ended"
    );
    let replaced_at =
        replaced_at.unwrap_or_else(|| panic!("db/0 was never replaced\n{}", c.logs()));
    assert!(
        replaced_at >= Duration::from_secs(28),
        "replaced after {replaced_at:?}: before the grace (10 s) and the fencing delay (20 s)"
    );
    assert!(
        db_node(&c, observer).is_some_and(|n| n != holder),
        "the agents do not report db/0 running elsewhere"
    );
    eprintln!(
        "agent gone: db/0 fenced after {fenced_at:?}, running elsewhere after {replaced_at:?}"
    );
}
