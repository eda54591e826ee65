//! Sticky stateful replicas on real agents (issue 16, item 3). Three process agents run an
//! exclusive `db` with a data volume; each start appends a line to `$SHOAL_DATA_DIR/count`.
//! - The node running db/0 records itself as the holder of its data (`status` shows `data_on`).
//! - Its host dies (agent and instance SIGKILLed): the new owner does not start db/0 empty; it
//!   holds a `data-elsewhere` issue naming the dead holder, for as long as the test waits.
//! - `shoal approve` starts it empty on the new owner, which becomes the holder.
//! - The old holder comes back: db/0 stays on the new holder (where the newest data is) instead
//!   of going back to its ideal node, and the old node's stale copy stays untouched.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{stderr, wait_until, Cluster};
use serde_json::Value;

/// The node and phase of db/0, and the node its data is on, as agent `i` reports them.
fn db0(c: &Cluster, i: usize) -> Option<(String, String, Option<String>)> {
    let json = c.cli_json(i, &["status", "db", "-o", "json", "--timeout", "3s"]);
    let inst = json["instances"]
        .as_array()?
        .iter()
        .find(|x| x["replica"] == 0 && x["phase"] == "running")?
        .clone();
    Some((
        inst["node"].as_str()?.to_string(),
        inst["phase"].as_str()?.to_string(),
        inst["data_on"].as_str().map(str::to_string),
    ))
}

/// Applies `db`: exclusive, a data volume, each start appending a line to `count` in it.
fn apply_db(c: &Cluster, marker: &str) {
    let spec = c.dir.path().join("db.toml");
    let text = format!(
        "name = \"db\"\n[process]\n\
         command = [\"sh\", \"-c\", \"echo start >> $SHOAL_DATA_DIR/count && exec sleep {marker}\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\
         [placement]\nexclusive = true\n\
         [[volumes]]\nname = \"data\"\n"
    );
    std::fs::write(&spec, text).unwrap();
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
}

fn issues(c: &Cluster, i: usize) -> Vec<Value> {
    let out = c.cli(i, &["issues", "-o", "json", "--timeout", "3s"]);
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn kill_instance(marker: &str) {
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", &format!("sleep {marker}")])
        .status();
}

#[test]
fn exclusive_replica_waits_for_its_data_and_stays_with_it() {
    let mut c = Cluster::new();
    let marker = format!("7{}", std::process::id() % 100_000);
    c.cleanup.push(format!("sleep {marker}"));
    for n in ["n1", "n2", "n3"] {
        c.add(n);
    }
    c.wait_members(3, Duration::from_secs(30));
    apply_db(&c, &marker);

    // Running, and recorded as the holder of its data.
    let mut first = None;
    let recorded = wait_until(Duration::from_secs(60), || {
        first = db0(&c, 0).filter(|(node, _, data)| data.as_deref() == Some(node.as_str()));
        first.is_some()
    });
    assert!(
        recorded,
        "db/0 never ran with its data recorded\n{}",
        c.logs()
    );
    let holder = first.unwrap().0;
    let h = c.agents.iter().position(|a| a.name == holder).unwrap();
    let count_of = |c: &Cluster, i: usize| c.agents[i].data_dir.join("volumes/db/0/data/count");
    assert_eq!(lines(&count_of(&c, h)), 1, "one start on the holder");

    // The holder's host dies.
    c.kill(h);
    kill_instance(&marker);
    let other = (0..3).find(|&i| i != h).unwrap();
    let mut held = None;
    let raised = wait_until(Duration::from_secs(60), || {
        held = issues(&c, other)
            .into_iter()
            .find(|i| i["kind"] == "data-elsewhere" && i["held"].is_string());
        held.is_some()
    });
    assert!(raised, "no held data-elsewhere issue\n{}", c.logs());
    let held = held.unwrap();
    let owner = held["node"].as_str().unwrap().to_string();
    assert_ne!(owner, holder);
    let why = held["held"].as_str().unwrap();
    assert!(
        why.contains(&format!("db/0's data is on {holder}, which is")),
        "{held}"
    );
    // It stays held: nothing starts db/0 empty while the holder is down.
    std::thread::sleep(Duration::from_secs(10));
    assert!(db0(&c, other).is_none(), "db/0 started without approval");
    let o = c.agents.iter().position(|a| a.name == owner).unwrap();
    assert_eq!(lines(&count_of(&c, o)), 0, "nothing ran on the new owner");

    // An operator approves: it starts empty there, and the record follows it.
    let id = held["id"].as_str().unwrap();
    let approved = std::time::Instant::now();
    let out = c.cli(other, &["approve", id]);
    assert!(out.status.success(), "approve: {}", stderr(&out));
    let moved = wait_until(Duration::from_secs(60), || {
        db0(&c, other)
            .is_some_and(|(node, _, data)| node == owner && data.as_deref() == Some(&owner))
    });
    assert!(
        moved,
        "db/0 did not start on {owner} after approval\n{}",
        c.logs()
    );
    // A figure, not an assertion (docs/measurements.md, "Sticky replicas").
    let ms = approved.elapsed().as_secs_f64() * 1000.0;
    println!("{{\"test\":\"sticky_approve_to_running\",\"ms\":{ms:.0}}}");
    assert_eq!(lines(&count_of(&c, o)), 1, "started empty on the new owner");

    // The old holder comes back: db/0 stays with its newest data.
    c.start(h, Some(c.agents[other].gossip));
    c.wait_members(3, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(10));
    let now = db0(&c, h).or_else(|| db0(&c, other));
    assert_eq!(
        now.map(|(node, _, _)| node),
        Some(owner.clone()),
        "db/0 left its data\n{}",
        c.logs()
    );
    assert_eq!(lines(&count_of(&c, h)), 1, "the old copy is left as it was");
    assert_eq!(lines(&count_of(&c, o)), 1, "no restart on the holder");
}

#[test]
fn a_holder_that_comes_back_without_its_data_asks_before_starting_empty() {
    let mut c = Cluster::new();
    let marker = format!("6{}", std::process::id() % 100_000);
    c.cleanup.push(format!("sleep {marker}"));
    c.add("n1");
    c.wait_members(1, Duration::from_secs(20));
    apply_db(&c, &marker);
    let recorded = wait_until(Duration::from_secs(60), || {
        db0(&c, 0).is_some_and(|(node, _, data)| node == "n1" && data.as_deref() == Some("n1"))
    });
    assert!(
        recorded,
        "db/0 never ran with its data recorded\n{}",
        c.logs()
    );

    // The host goes down and comes back with its data directory gone (a new disk, say).
    c.kill(0);
    kill_instance(&marker);
    let data = c.agents[0].data_dir.join("volumes/db/0/data");
    std::fs::remove_dir_all(&data).unwrap();
    c.start(0, None);
    c.wait_members(1, Duration::from_secs(20));
    let mut held = None;
    let raised = wait_until(Duration::from_secs(60), || {
        held = issues(&c, 0)
            .into_iter()
            .find(|i| i["kind"] == "data-elsewhere" && i["held"].is_string());
        held.is_some()
    });
    assert!(raised, "no held data-elsewhere issue\n{}", c.logs());
    let held = held.unwrap();
    let why = held["held"].as_str().unwrap();
    assert!(
        why.starts_with("db/0's data was on this node, but its volume \"data\"")
            && why.contains("is missing here"),
        "{held}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        db0(&c, 0).is_none(),
        "started over an empty volume without approval"
    );
    assert!(!data.exists(), "nothing ran");

    let out = c.cli(0, &["approve", held["id"].as_str().unwrap()]);
    assert!(out.status.success(), "approve: {}", stderr(&out));
    let running = wait_until(Duration::from_secs(60), || db0(&c, 0).is_some());
    assert!(running, "db/0 did not start after approval\n{}", c.logs());
    assert_eq!(lines(&data.join("count")), 1, "started empty");
}
