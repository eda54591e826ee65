//! `shoal exec` and `[[volumes]]` with the docker runtime on real agents (both are tested with
//! the process runtime in exec_agents.rs and volumes_agents.rs): two agents on this host's
//! engine, a busybox container with a data volume (a bind mount of the agent's directory) and a
//! per-replica docker named volume. Exec through the agent that does not run it (streams, exit
//! code, stdin), the data surviving a `restart NAME/0` (a new container on the same node), both
//! volumes gone after `delete --purge-data`, and exec into a replica with no instance refused
//! plainly. Needs a reachable Docker engine and `/bin/busybox` (see runtime_docker.rs for
//! SHOAL_SKIP_DOCKER_TESTS).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{docker, docker_ready, on_a_terminal, shoal_command, stderr, wait_until, Cluster};

const NODES: [&str; 2] = ["d2a", "d2b"];
const NAME: &str = "d2vol";
/// The named volume Shoal creates for replica 0's docker volume `named` (docs/spec.md).
const NAMED: &str = "shoal-d2vol-0-named";

/// Removes this test's containers and docker volumes (also those a killed earlier run left).
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        for node in NODES {
            let label = format!("label=shoal.node={node}");
            for id in docker(&["ps", "-aq", "--filter", &label]) {
                let _ = Command::new("docker").args(["rm", "-f", &id]).output();
            }
            for name in docker(&["volume", "ls", "-q", "--filter", &label]) {
                let _ = Command::new("docker")
                    .args(["volume", "rm", "-f", &name])
                    .output();
            }
        }
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", NAMED])
            .output();
    }
}

/// The ids of the running containers of `NAME`'s replica 0.
fn container_ids() -> Vec<String> {
    containers("-q")
}

/// The ids of `NAME`'s containers with `docker ps` flag `all` (`-q` running, `-aq` any: standby
/// containers are created and never started).
fn containers(all: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for node in NODES {
        ids.extend(docker(&[
            "ps",
            all,
            "--no-trunc",
            "--filter",
            &format!("label=shoal.node={node}"),
            "--filter",
            &format!("label=shoal.workload={NAME}"),
            "--filter",
            "label=shoal.replica=0",
        ]));
    }
    ids
}

/// The node running replica 0 of `name` healthy, as agent `i` sees it.
fn healthy_node(c: &Cluster, i: usize, name: &str) -> Option<String> {
    let out = c.cli(i, &["status", name, "-o", "json", "--timeout", "2s"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    json["instances"]
        .as_array()?
        .iter()
        .find(|x| x["replica"] == 0 && x["phase"] == "running" && x["healthy"] == true)
        .and_then(|x| x["node"].as_str().map(str::to_string))
}

/// `shoal exec` through agent `i`: (exit code, stdout, stderr).
fn exec(c: &Cluster, i: usize, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["exec"];
    all.extend_from_slice(args);
    let out = c.cli(i, &all);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        stderr(&out),
    )
}

fn container_spec(name: &str, volumes: &str) -> String {
    format!(
        "name = \"{name}\"\nreplicas = 1\n[container]\nimage = \"shoal-busybox:latest\"\n\
         pull = \"if-not-present\"\ncommand = [\"sleep\", \"3600\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"32Mi\"\n{volumes}"
    )
}

#[test]
fn container_exec_and_volumes_survive_a_restart_until_purged() {
    if !docker_ready() {
        return;
    }
    let started = Instant::now();
    drop(Cleanup);
    let _cleanup = Cleanup;
    let mut c = Cluster::new();
    c.agent_args = vec!["--runtime".into(), "docker".into()];
    for node in NODES {
        c.add(node);
    }
    c.wait_members(2, Duration::from_secs(20));
    let dir = c.dir.path().to_path_buf();
    let apply = |c: &Cluster, name: &str, text: String| {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = c.cli(0, &["apply", "-f", path.to_str().unwrap()]);
        assert!(out.status.success(), "apply {name}: {}", stderr(&out));
    };
    // Another workload lives throughout: deleting the only one would leave instances running
    // with no spec at all, a view the agent distrusts (see volumes_agents.rs).
    apply(&c, "d2keep", container_spec("d2keep", ""));
    apply(
        &c,
        NAME,
        container_spec(
            NAME,
            "[[volumes]]\nname = \"data\"\npath = \"/data\"\n\
             [[volumes]]\nname = \"named\"\nkind = \"docker\"\npath = \"/named\"\n",
        ),
    );

    // 1. Healthy, and both agents hear so.
    let mut node = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            node = healthy_node(&c, 0, NAME);
            node.is_some()
        }),
        "{NAME} healthy\n{}",
        c.logs()
    );
    let node = node.unwrap();
    let runner = c.agents.iter().position(|a| a.name == node).unwrap();
    let other = 1 - runner;
    assert!(
        wait_until(Duration::from_secs(30), || healthy_node(&c, other, NAME)
            .as_deref()
            == Some(node.as_str())),
        "{} hears of {NAME} running\n{}",
        NODES[other],
        c.logs()
    );
    let target = format!("{NAME}/0");
    let target = target.as_str();
    let before = container_ids();
    assert_eq!(before.len(), 1, "one container: {before:?}");
    // The named volume is Shoal's, labelled for the purge.
    let labelled = docker(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=shoal.workload={NAME}"),
        "--filter",
        &format!("label=shoal.node={node}"),
    ]);
    assert_eq!(labelled, vec![NAMED.to_string()], "the replica's volume");

    // 2. Exec through the agent that does not run it: both volumes written, each stream, the
    // exit code.
    let (code, out, err) = exec(
        &c,
        other,
        &[
            target,
            "--",
            "sh",
            "-c",
            "echo one >> /data/f; echo two >> /named/g; echo out; echo err >&2; exit 3",
        ],
    );
    assert_eq!((code, out.as_str(), err.as_str()), (3, "out\n", "err\n"));
    let data_file = c.agents[runner]
        .data_dir
        .join(format!("volumes/{NAME}/0/data/f"));
    assert_eq!(
        std::fs::read_to_string(&data_file).unwrap_or_default(),
        "one\n",
        "the data volume is the agent's directory {}",
        data_file.display()
    );

    // 3. -i: stdin passed through.
    let sent: Vec<u8> = (0..100_000u32)
        .map(|i| b"shoal docker exec stdin\n"[(i % 23) as usize])
        .collect();
    let mut child = shoal_command(None)
        .args(["exec", "-i", target, "--", "cat"])
        .env("SHOAL_AGENT", c.agents[other].api.to_string())
        .env("SHOAL_PKI", &c.pki)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let copy = sent.clone();
    let writer = std::thread::spawn(move || input.write_all(&copy).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "exec -i cat: {}", stderr(&out));
    assert_eq!(out.stdout.len(), sent.len());
    assert!(out.stdout == sent, "the echo differs from what was sent");

    // -t: an engine exec with a terminal, stdin through it. (Its size is not read back here:
    // this static busybox's `stty` cannot read a terminal's size; exec_agents checks it.)
    let (shown, code) = on_a_terminal(
        &c,
        other,
        &[
            "exec",
            "-t",
            target,
            "--",
            "sh",
            "-c",
            "tty; echo ready; read line; echo got-$line; exit 4",
        ],
        &[("ready", "typed-in-docker\r")],
    );
    assert_eq!(code, 4, "{shown}");
    assert!(shown.contains("/dev/pts/"), "a terminal: {shown}");
    assert!(shown.contains("got-typed-in-docker"), "{shown}");

    // 4. A new container on the same node finds both volumes' data.
    let out = c.cli(
        other,
        &["restart", target, "--wait", "--wait-timeout", "30s"],
    );
    assert!(
        out.status.success(),
        "restart: {}\n{}",
        stderr(&out),
        c.logs()
    );
    let mut after = Vec::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            after = container_ids();
            after.len() == 1 && after != before
        }),
        "a new container: {before:?} then {after:?}"
    );
    assert_eq!(healthy_node(&c, 0, NAME).as_deref(), Some(node.as_str()));
    let mut last = (0, String::new(), String::new());
    assert!(
        wait_until(Duration::from_secs(30), || {
            last = exec(&c, other, &[target, "--", "cat", "/data/f", "/named/g"]);
            last.0 == 0
        }),
        "exec after the restart: {last:?}"
    );
    assert_eq!(last.1, "one\ntwo\n", "the data survived the new container");

    // 5. delete --purge-data: the named volume and the data directory go.
    let out = c.cli(other, &["delete", NAME, "--purge-data"]);
    assert!(
        out.status.success(),
        "delete --purge-data: {}",
        stderr(&out)
    );
    let deleted = Instant::now();
    let workload_dir = c.agents[runner].data_dir.join(format!("volumes/{NAME}"));
    // `sleep` as PID 1 ignores SIGTERM: the stop takes the 10 s grace.
    let purged = wait_until(Duration::from_secs(30), || {
        containers("-aq").is_empty()
            && !workload_dir.exists()
            && docker(&["volume", "ls", "-q", "--filter", &format!("name={NAMED}")]).is_empty()
    });
    assert!(
        purged,
        "purged: containers {:?}, {} exists {}, volumes {:?}\n{}",
        containers("-aq"),
        workload_dir.display(),
        workload_dir.exists(),
        docker(&["volume", "ls", "-q"]),
        c.logs()
    );

    let purge_ms = deleted.elapsed().as_millis() as u64;

    // 6. Exec into the deleted workload, or a replica it never had, is refused plainly.
    let (code, _, err) = exec(&c, other, &[target, "--", "true"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(NAME), "{err}");
    let (code, _, err) = exec(&c, other, &["d2keep/5", "--", "true"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("d2keep/5 has no instance"), "{err}");
    println!(
        "{}",
        serde_json::json!({
            "test": "day2_docker",
            "ms": started.elapsed().as_millis() as u64,
            "purge_ms": purge_ms,
        })
    );
}
