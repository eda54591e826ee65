//! The host agent with the docker runtime and a local busybox image (no registry): containers
//! run and come back after a kill, a dead host's containers come back elsewhere, a missing image
//! is a clear issue. Needs a reachable Docker engine (see runtime_docker.rs for
//! SHOAL_SKIP_DOCKER_TESTS).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Container ids labelled for workload `name` on any of this test's nodes.
fn containers(prefix: &str, running_only: bool) -> Vec<String> {
    let mut args = vec!["ps", "-q", "--filter", "label=shoal.managed=true"];
    if !running_only {
        args.push("-a");
    }
    let out = Command::new("docker").args(&args).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .filter(|id| {
            let node = Command::new("docker")
                .args([
                    "inspect",
                    "-f",
                    "{{index .Config.Labels \"shoal.node\"}}",
                    id,
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&node.stdout)
                .trim()
                .starts_with(prefix)
        })
        .collect()
}

/// Each container's name, node, replica, state and start time, for a failure message.
fn describe(ids: &[String]) -> String {
    let format = "{{.Name}} node={{index .Config.Labels \"shoal.node\"}} \
                  replica={{index .Config.Labels \"shoal.replica\"}} {{.State.Status}} \
                  started={{.State.StartedAt}}";
    ids.iter()
        .map(|id| {
            let out = Command::new("docker")
                .args(["inspect", "-f", format, id])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn remove_all(prefix: &str) {
    for id in containers(prefix, false) {
        let _ = Command::new("docker").args(["rm", "-f", &id]).output();
    }
}

fn healthy(c: &Cluster, name: &str) -> usize {
    healthy_off(c, name, "")
}

/// Replicas healthy on nodes other than `off`.
fn healthy_off(c: &Cluster, name: &str, off: &str) -> usize {
    let out = c.cli(0, &["status", name, "-o", "json", "--timeout", "2s"]);
    let Ok(s) = serde_json::from_slice::<Value>(&out.stdout) else {
        return 0;
    };
    let mut replicas: Vec<u64> = s["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["phase"] == "running" && x["healthy"] == true && x["node"] != off)
        .map(|x| x["replica"].as_u64().unwrap())
        .collect();
    replicas.sort();
    replicas.dedup();
    replicas.len()
}

struct Cleanup(&'static str);

impl Drop for Cleanup {
    fn drop(&mut self) {
        remove_all(self.0);
    }
}

#[test]
fn containers_run_restart_move_off_a_dead_host_and_a_missing_image_is_an_issue() {
    if !docker_ready() {
        return;
    }
    let prefix = "dk";
    remove_all(prefix);
    let _cleanup = Cleanup("dk");
    let mut c = Cluster::new();
    c.agent_args = vec!["--runtime".into(), "docker".into()];
    for i in 1..=3 {
        c.add(&format!("{prefix}{i}"));
    }
    c.wait_members(3, Duration::from_secs(20));
    let spec = c.dir.path().join("box.toml");
    std::fs::write(
        &spec,
        "name = \"box\"\nreplicas = 2\n[container]\nimage = \"shoal-busybox:latest\"\npull = \"if-not-present\"\n\
         command = [\"sleep\", \"3600\"]\n[resources]\ncpu = \"100m\"\nmemory = \"32Mi\"\n\
         [restart]\nbackoff_initial = \"1s\"\n",
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        wait_until(Duration::from_secs(30), || healthy(&c, "box") == 2),
        "2 healthy containers not reached\n{}",
        c.logs()
    );
    let running = containers(prefix, true);
    assert_eq!(
        running.len(),
        2,
        "exactly 2 containers run: {}\nstatus: {}\n{}",
        describe(&running),
        String::from_utf8_lossy(&c.cli(0, &["status", "box", "-o", "json"]).stdout),
        c.logs()
    );

    // docker kill one container: it runs again.
    let victim = containers(prefix, true)[0].clone();
    let _ = Command::new("docker").args(["kill", &victim]).output();
    let killed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || healthy(&c, "box") == 2
            && containers(prefix, true).len() == 2),
        "the killed container did not come back"
    );
    eprintln!("killed container replaced after {:?}", killed.elapsed());

    // Host death: kill -9 an agent with a container, and its containers.
    let host = (1..3)
        .find(|&i| {
            let name = &c.agents[i].name;
            containers(name, true).iter().any(|_| true)
        })
        .expect("a container on dk2 or dk3");
    let name = c.agents[host].name.clone();
    c.kill(host);
    for id in containers(&name, true) {
        let _ = Command::new("docker").args(["kill", &id]).output();
    }
    let died = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || healthy_off(&c, "box", &name)
            == 2),
        "containers not replaced after the host death"
    );
    eprintln!(
        "containers healthy elsewhere {:?} after the host kill",
        died.elapsed()
    );

    // An image that does not exist: a clear issue, the agents keep running.
    let missing = c.dir.path().join("missing.toml");
    std::fs::write(
        &missing,
        "name = \"ghost\"\nreplicas = 1\n[container]\nimage = \"shoal-does-not-exist:1\"\n\
         [resources]\ncpu = \"100m\"\nmemory = \"32Mi\"\n",
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", missing.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let reported = wait_until(Duration::from_secs(15), || {
        let out = c.cli(0, &["issues"]);
        let text = String::from_utf8_lossy(&out.stdout);
        text.contains("ghost/0") && text.contains("shoal-does-not-exist")
    });
    let out = c.cli(0, &["issues"]);
    assert!(
        reported,
        "no issue for the missing image:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(c.running(0), "an agent died on a missing image");
}
