//! A mixed fleet on real agents (issue 26's trial): three process agents run `sleeper` (3
//! replicas, healthy); three agents with `--runtime docker` join. At mesh version 9 placement
//! knows what each node can run: no sleeper replica moves onto a docker-only agent, none is ever
//! down, and a container workload lands on docker agents only. Then a process agent leaves for
//! good: its sleeper replica goes to a process agent left (two on one), never to a docker agent.
//! A process workload constrained to docker agents is unplaceable with the reason (`needs
//! runtime process`). Needs a reachable Docker engine (see runtime_docker.rs for SHOAL_SKIP_DOCKER_TESTS).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{docker, docker_ready, stderr, wait_until, write_spec, Cluster};

const PROCESS: [&str; 3] = ["mfp1", "mfp2", "mfp3"];
const DOCKER: [&str; 3] = ["mfd1", "mfd2", "mfd3"];

/// Removes this test's containers (also those a killed earlier run left).
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        for node in DOCKER {
            let label = format!("label=shoal.node={node}");
            for id in docker(&["ps", "-aq", "--filter", &label]) {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", &id])
                    .output();
            }
        }
    }
}

/// (replica, node, phase, healthy, reason) of each row of `status NAME` on agent `i`.
fn rows(c: &Cluster, i: usize, name: &str) -> Vec<(u64, String, String, bool, String)> {
    let status = c.cli_json(i, &["status", name, "-o", "json"]);
    status["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["replica"].as_u64().unwrap_or(u64::MAX),
                r["node"].as_str().unwrap_or("").to_string(),
                r["phase"].as_str().unwrap_or("").to_string(),
                r["healthy"].as_bool().unwrap_or(false),
                r["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The nodes with a running copy of `name` by agent `i`'s status.
fn running_on(c: &Cluster, i: usize, name: &str) -> BTreeSet<String> {
    rows(c, i, name)
        .into_iter()
        .filter(|r| r.2 == "running")
        .map(|r| r.1)
        .collect()
}

fn mesh_version(c: &Cluster, i: usize) -> u64 {
    c.cli_json(i, &["upgrade", "status", "-o", "json"])["mesh_version"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn placement_puts_replicas_only_where_they_can_run_and_no_healthy_copy_goes_down() {
    if !docker_ready() {
        return;
    }
    let _cleanup = Cleanup;
    Cleanup.drop_now();
    let mut c = Cluster::new();
    for name in PROCESS {
        c.add(name);
    }
    c.wait_members(3, Duration::from_secs(30));
    assert!(
        wait_until(Duration::from_secs(30), || {
            mesh_version(&c, 0) == u64::from(shoal_core::version::WIRE_CUR)
        }),
        "the mesh version did not reach this build's\n{}",
        c.logs()
    );
    let dir = c.dir.path().to_path_buf();
    let sleeper = write_spec(&dir, "sleeper", 3);
    let out = c.cli(0, &["apply", "-f", sleeper.to_str().unwrap(), "--wait"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(wait_until(Duration::from_secs(30), || c
        .serving_replicas(0, "sleeper")
        == 3));
    let before = running_on(&c, 0, "sleeper");

    c.agent_args = vec!["--runtime".into(), "docker".into()];
    for name in DOCKER {
        c.add(name);
    }
    c.wait_members(6, Duration::from_secs(30));
    // The docker agents gossip that they run containers only: nothing of sleeper moves to them,
    // and not one of its replicas stops serving, for as long as the handoff bound and more.
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(20) {
        let rows = rows(&c, 0, "sleeper");
        let serving = rows.iter().filter(|r| r.2 == "running" && r.3).count();
        assert_eq!(
            serving,
            3,
            "a sleeper replica went down: {rows:?}\n{}",
            c.logs()
        );
        assert!(
            rows.iter().all(|r| !DOCKER.contains(&r.1.as_str())),
            "sleeper placed on a docker agent: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(running_on(&c, 0, "sleeper"), before, "nothing moved");
    // `nodes` names what each node runs.
    let nodes = c.cli(0, &["nodes", "-o", "json"]);
    let nodes: serde_json::Value = serde_json::from_slice(&nodes.stdout).unwrap();
    for n in nodes.as_array().unwrap() {
        let runtimes = n["runtimes"].as_str().unwrap_or("");
        let docker_node = DOCKER.contains(&n["name"].as_str().unwrap());
        assert_eq!(
            runtimes.starts_with("container"),
            docker_node,
            "{n}: runtimes {runtimes:?}"
        );
    }

    // A container workload goes to docker agents only.
    let boxes = dir.join("boxes.toml");
    std::fs::write(
        &boxes,
        "name = \"boxes\"\nreplicas = 2\n[container]\nimage = \"shoal-busybox:latest\"\n\
         pull = \"if-not-present\"\ncommand = [\"sleep\", \"3600\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"32Mi\"\n",
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", boxes.to_str().unwrap(), "--wait"]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), c.logs());
    let on = running_on(&c, 0, "boxes");
    assert_eq!(on.len(), 2, "{on:?}");
    assert!(on.iter().all(|n| DOCKER.contains(&n.as_str())), "{on:?}");

    // A process agent leaves for good: its replica goes to another process agent (stacked, two
    // on one), never to a docker agent; the other two stay where they were.
    let gone = 2;
    c.stop(gone);
    let left = PROCESS[gone];
    let moved = wait_until(Duration::from_secs(60), || {
        let rows = rows(&c, 0, "sleeper");
        let serving: Vec<_> = rows.iter().filter(|r| r.2 == "running" && r.3).collect();
        serving.len() == 3 && serving.iter().all(|r| r.1 != left)
    });
    assert!(
        moved,
        "sleeper did not run 3 replicas on the process agents left: {:?}\n{}",
        rows(&c, 0, "sleeper"),
        c.logs()
    );
    assert!(rows(&c, 0, "sleeper")
        .iter()
        .filter(|r| r.2 == "running")
        .all(|r| !DOCKER.contains(&r.1.as_str())));
    let still: BTreeSet<String> = before.iter().filter(|n| *n != left).cloned().collect();
    assert!(running_on(&c, 0, "sleeper").is_superset(&still));

    // A process workload allowed only on docker agents has nowhere to run, and says why.
    let stuck = dir.join("stuck.toml");
    std::fs::write(
        &stuck,
        "name = \"stuck\"\nreplicas = 1\n[process]\ncommand = [\"sleep\", \"3600\"]\n\
         [placement]\nconstraints = [\"node in (mfd1, mfd2)\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n",
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", stuck.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("none of the 1 replicas of stuck fit"),
        "{said}"
    );
    let unplaceable = wait_until(Duration::from_secs(20), || {
        rows(&c, 0, "stuck")
            .iter()
            .any(|r| r.2 == "unschedulable" && r.4.contains("needs runtime process"))
    });
    assert!(unplaceable, "{:?}", rows(&c, 0, "stuck"));
}

impl Cleanup {
    /// What a killed earlier run left, removed before this one starts.
    fn drop_now(&self) {
        drop(Cleanup);
    }
}
