//! Sticky replicas with the docker runtime (the process runtime is in sticky_agents.rs): an
//! exclusive container whose data is the per-replica docker volume Shoal names
//! (`shoal-W-R-NAME`). Its host comes back without that volume (an engine reinstalled, the
//! volume removed): the agent does not start the replica over a new empty volume on its own, it
//! holds it (`data-elsewhere`, naming the volume) until `shoal approve`. Needs a reachable Docker
//! engine and `/bin/busybox` (see runtime_docker.rs for SHOAL_SKIP_DOCKER_TESTS).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{docker, docker_ready, stderr, wait_until, Cluster};
use serde_json::Value;

const NODE: &str = "stk1";
const NAME: &str = "stkdb";
/// The named volume Shoal creates for replica 0's docker volume `named`.
const NAMED: &str = "shoal-stkdb-0-named";

/// Removes this test's containers and its volume (also those a killed earlier run left).
fn clean() {
    let label = format!("label=shoal.node={NODE}");
    for id in docker(&["ps", "-aq", "--filter", &label]) {
        let _ = Command::new("docker").args(["rm", "-f", &id]).output();
    }
    let _ = Command::new("docker")
        .args(["volume", "rm", "-f", NAMED])
        .output();
}

struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        clean();
    }
}

/// (node, data_on) of replica 0 while it runs, as the agent reports it.
fn running(c: &Cluster) -> Option<(String, Option<String>)> {
    let json = c.cli_json(0, &["status", NAME, "-o", "json", "--timeout", "3s"]);
    let inst = json["instances"]
        .as_array()?
        .iter()
        .find(|x| x["replica"] == 0 && x["phase"] == "running")?
        .clone();
    Some((
        inst["node"].as_str()?.to_string(),
        inst["data_on"].as_str().map(str::to_string),
    ))
}

fn held_issue(c: &Cluster) -> Option<Value> {
    let out = c.cli(0, &["issues", "-o", "json", "--timeout", "3s"]);
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()?
        .as_array()?
        .iter()
        .find(|i| i["kind"] == "data-elsewhere" && i["held"].is_string())
        .cloned()
}

#[test]
fn a_container_whose_named_volume_is_gone_waits_for_approval() {
    if !docker_ready() {
        return;
    }
    clean();
    let _cleanup = Cleanup;
    let mut c = Cluster::new();
    c.agent_args = vec!["--runtime".into(), "docker".into()];
    c.add(NODE);
    c.wait_members(1, Duration::from_secs(20));
    let spec = c.dir.path().join("stkdb.toml");
    let text = format!(
        "name = \"{NAME}\"\nreplicas = 1\n[container]\nimage = \"shoal-busybox:latest\"\n\
         pull = \"if-not-present\"\ncommand = [\"sleep\", \"3600\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"32Mi\"\n\
         [placement]\nexclusive = true\n\
         [[volumes]]\nname = \"named\"\nkind = \"docker\"\npath = \"/named\"\n"
    );
    std::fs::write(&spec, text).unwrap();
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
    let recorded = wait_until(Duration::from_secs(60), || {
        running(&c).is_some_and(|(node, data)| node == NODE && data.as_deref() == Some(NODE))
    });
    assert!(
        recorded,
        "{NAME}/0 never ran with its data recorded\n{}",
        c.logs()
    );
    assert_eq!(
        docker(&["volume", "ls", "-q", "--filter", &format!("name={NAMED}")]),
        [NAMED]
    );

    // The host comes back without the volume.
    c.kill(0);
    clean();
    c.start(0, None);
    c.wait_members(1, Duration::from_secs(20));
    let mut held = None;
    let raised = wait_until(Duration::from_secs(60), || {
        held = held_issue(&c);
        held.is_some()
    });
    assert!(raised, "no held data-elsewhere issue\n{}", c.logs());
    let held = held.unwrap();
    let why = held["held"].as_str().unwrap();
    assert!(
        why.contains(&format!(
            "its docker volume \"{NAMED}\" (volume \"named\") is missing here"
        )),
        "{held}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        running(&c).is_none(),
        "started over a new empty volume without approval"
    );
    assert!(
        docker(&["volume", "ls", "-q", "--filter", &format!("name={NAMED}")]).is_empty(),
        "no volume created while held"
    );

    let out = c.cli(0, &["approve", held["id"].as_str().unwrap()]);
    assert!(out.status.success(), "approve: {}", stderr(&out));
    let back = wait_until(Duration::from_secs(60), || running(&c).is_some());
    assert!(back, "{NAME}/0 did not start after approval\n{}", c.logs());
    assert_eq!(
        docker(&["volume", "ls", "-q", "--filter", &format!("name={NAMED}")]),
        [NAMED],
        "a new volume"
    );
}
