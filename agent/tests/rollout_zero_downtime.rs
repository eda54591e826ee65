//! Zero downtime, proven (issue 15, item 4): a rolling update on real agents with an HTTP
//! workload, behind a client that requests every copy of every replica every 50 ms
//! (`rollout_support`). With `max_unavailable = 0, max_surge = 1` no request fails and every
//! replica answers in every round, on the process runtime and on the docker runtime; with
//! `max_unavailable = 1` no request fails and at most one replica is silent at a time.
//!
//! Each replica says its version (`VERSION`, which the update changes, so every replica is
//! replaced). There are no dynamic ports in Shoal and a surge runs two copies of a replica on
//! one host, so each process copy binds an ephemeral port and publishes it as an endpoint file;
//! containers get a host port the engine picks, which the client learns from the engine's events,
//! and are admitted once they answer (`rollout_support::DockerDiscovery`).
//!
//! Deregister first, then stop: on SIGTERM a copy withdraws its endpoint (the process removes its
//! file; for a container the engine's `kill` event unlists it) and serves on for `DRAIN_S` before
//! it exits, as copies behind a real load balancer must: a request sent just before the
//! withdrawal is still answered. The agent's stop grace (10 s before SIGKILL) covers the drain.
//! What is tested is the update logic: an old copy is stopped only once the new one answers.
//!
//! The docker case needs a reachable Docker engine and `/bin/busybox` (see runtime_docker.rs);
//! `SHOAL_SKIP_DOCKER_TESTS=1` skips it. The cases run one at a time.
//!
//! Each case prints its figures as one JSON line on stderr (docs/measurements.md, "Zero-downtime
//! rolling update").

mod common;
mod rollout_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use rollout_support::{Client, DirDiscovery, Discovery, DockerDiscovery, Figures};
use serde_json::Value;

/// The replicas of every case, one per agent.
const REPLICAS: u32 = 3;
/// How long a copy serves on after SIGTERM, its endpoint already withdrawn.
const DRAIN_S: u32 = 1;
/// How long an update may take before the test gives up.
const UPDATE_WITHIN: Duration = Duration::from_secs(60);
/// How long the client goes on after the update, to see that it stays done.
const AFTER_UPDATE: Duration = Duration::from_millis(1000);

/// The cases share two cores: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The process workload: an HTTP server on an ephemeral port that answers
/// `version=V replica=R pid=P` and publishes `<port> <version>` in
/// `<endpoints>/<workload>-<replica>-<pid>` while it serves (written aside and renamed, so a
/// listed file is complete). On SIGTERM it removes the file, serves on for the drain, then exits.
const SERVER_PY: &str = r#"
import http.server, os, signal, sys, threading

endpoints, drain_s = sys.argv[1], float(sys.argv[2])
version, replica, pid = os.environ["VERSION"], os.environ["SHOAL_REPLICA"], os.getpid()
body = f"version={version} replica={replica} pid={pid}\n".encode()

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
name = f"{os.environ['SHOAL_WORKLOAD']}-{replica}-{pid}"
path, aside = os.path.join(endpoints, name), os.path.join(endpoints, "." + name)
with open(aside, "w") as f:
    f.write(f"{server.server_address[1]} {version}\n")
os.rename(aside, path)

def withdraw_then_stop(*_):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    threading.Timer(drain_s, server.shutdown).start()

signal.signal(signal.SIGTERM, withdraw_then_stop)
server.serve_forever(poll_interval=0.05)
"#;

/// The process workload's health check (bash, argument: the endpoints directory): healthy when a
/// copy of this replica at this version answers `GET /` with 200.
const PROBE_SH: &str = r#"
for f in "$1/$SHOAL_WORKLOAD-$SHOAL_REPLICA"-*; do
  read -r port version < "$f" || continue
  [ "$version" = "$VERSION" ] || continue
  if { printf 'GET / HTTP/1.0\r\n\r\n' >&3; read -r proto code rest <&3; } 3<>"/dev/tcp/127.0.0.1/$port" \
    && [ "$code" = 200 ]; then exit 0; fi
done 2>/dev/null
exit 1
"#;

/// The container workload (busybox): httpd on port 8080 serving `version=V replica=R`; on SIGTERM
/// (it runs as PID 1, so only a trapped signal reaches it) it serves on for the drain, then exits.
fn container_server() -> String {
    format!(
        "mkdir -p /tmp/www && echo \"version=$VERSION replica=$SHOAL_REPLICA\" > /tmp/www/index.html; \
         httpd -f -p 8080 -h /tmp/www & pid=$!; trap \"sleep {DRAIN_S}; kill $pid; exit 0\" TERM; wait $pid"
    )
}

/// One rolling update to run: version `a` to `b` of a 3-replica workload.
struct Case {
    workload: &'static str,
    runtime: &'static str,
    max_unavailable: u32,
    max_surge: u32,
}

impl Case {
    /// The `[update]` section and the fields every spec shares.
    fn common_toml(&self) -> String {
        format!(
            "[resources]\ncpu = \"100m\"\nmemory = \"64Mi\"\n\
             [restart]\nbackoff_initial = \"1s\"\n\
             [update]\nmax_unavailable = {}\nmax_surge = {}\n",
            self.max_unavailable, self.max_surge
        )
    }

    /// The process spec at `version`.
    fn process_spec(&self, dir: &Path, version: &str) -> PathBuf {
        let (server, endpoints) = (dir.join("server.py"), dir.join("endpoints"));
        let (server, endpoints) = (server.to_str().unwrap(), endpoints.to_str().unwrap());
        let text = format!(
            "name = \"{}\"\nreplicas = {REPLICAS}\n\
             [process]\ncommand = [\"/usr/bin/python3\", {server:?}, {endpoints:?}, \"{DRAIN_S}\"]\n\
             env = {{ VERSION = \"{version}\" }}\n\
             [health]\ninterval = \"300ms\"\ntimeout = \"300ms\"\nstart_grace = \"10s\"\n\
             [health.exec]\ncommand = [\"bash\", \"-c\", {PROBE_SH:?}, \"probe\", {endpoints:?}]\n{}",
            self.workload,
            self.common_toml()
        );
        write(dir, &format!("{}-{version}.toml", self.workload), &text)
    }

    /// The container spec at `version`: the engine picks the host port of container port 8080.
    fn container_spec(&self, dir: &Path, version: &str) -> PathBuf {
        let text = format!(
            "name = \"{}\"\nreplicas = {REPLICAS}\n\
             [container]\nimage = \"shoal-busybox:latest\"\npull = \"if-not-present\"\ncommand = [\"sh\", \"-c\", {:?}]\n\
             env = {{ VERSION = \"{version}\" }}\nports = [{{ container = 8080 }}]\n\
             [health]\ninterval = \"300ms\"\ntimeout = \"300ms\"\nstart_grace = \"10s\"\n\
             [health.http]\nport = 8080\n{}",
            self.workload,
            container_server(),
            self.common_toml()
        );
        write(dir, &format!("{}-{version}.toml", self.workload), &text)
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Three agents named `<prefix>1..3` with `args`, all seeing each other.
fn three_agents(prefix: &str, args: &[&str]) -> Cluster {
    let mut c = Cluster::new();
    c.agent_args = args.iter().map(|a| a.to_string()).collect();
    for i in 1..=3 {
        c.add(&format!("{prefix}{i}"));
    }
    c.wait_members(3, Duration::from_secs(20));
    c
}

fn apply(c: &Cluster, spec: &Path) {
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "apply failed: {}", stderr(&out));
}

/// Replicas with a running, healthy instance, as agent 1's status shows.
fn healthy(c: &Cluster, name: &str) -> usize {
    let out = c.cli(0, &["status", name, "-o", "json", "--timeout", "2s"]);
    let Ok(s) = serde_json::from_slice::<Value>(&out.stdout) else {
        return 0;
    };
    let mut replicas: Vec<u64> = s["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|x| x["phase"] == "running" && x["healthy"] == true)
        .filter_map(|x| x["replica"].as_u64())
        .collect();
    replicas.sort();
    replicas.dedup();
    replicas.len()
}

/// What the agents say about `name`, for failure messages.
fn report(c: &Cluster, name: &str) -> String {
    let text = |args: &[&str]| String::from_utf8_lossy(&c.cli(0, args).stdout).to_string();
    format!(
        "status:\n{}\nissues:\n{}",
        text(&["status", name]),
        text(&["issues"])
    )
}

/// Runs `case` on the cluster: version `a` up and answering, then the client counts from the
/// apply of version `b` until every replica answers `b` (and `AFTER_UPDATE` more), and the
/// figures are checked and printed.
fn run(c: &Cluster, case: &Case, spec_at: impl Fn(&str) -> PathBuf, discovery: impl Discovery) {
    let client = Client::start(discovery);
    apply(c, &spec_at("a"));
    let up = wait_until(Duration::from_secs(60), || {
        client.figures().last.all_at("a", REPLICAS)
            && healthy(c, case.workload) == REPLICAS as usize
    });
    assert!(
        up,
        "version a did not come up: the client's last round {:?}\n{}\n{}",
        client.figures().last,
        report(c, case.workload),
        c.logs()
    );

    client.reset();
    let applied = client.started.elapsed();
    apply(c, &spec_at("b"));
    let mut done_at = None;
    let done = wait_until(UPDATE_WITHIN, || {
        let last = client.figures().last;
        done_at = Some(last.at).filter(|_| last.all_at("b", REPLICAS));
        done_at.is_some()
    });
    // From the apply to the first round in which only new copies, one per replica, answered.
    let update = done_at.unwrap_or_default().saturating_sub(applied);
    assert!(
        done,
        "the update to b did not finish within {UPDATE_WITHIN:?}: the client's last round {:?}\n{}",
        client.figures().last,
        report(c, case.workload)
    );
    std::thread::sleep(AFTER_UPDATE);
    let figures = client.finish();
    print_figures(case, &figures, update);
    check(case, &figures);
}

/// The figures as one JSON line.
fn print_figures(case: &Case, f: &Figures, update: Duration) {
    let line = serde_json::json!({
        "test": "rollout_zero_downtime",
        "runtime": case.runtime,
        "replicas": REPLICAS,
        "max_unavailable": case.max_unavailable,
        "max_surge": case.max_surge,
        "requests": f.requests,
        "failed": f.failed,
        "rounds": f.rounds,
        "min_answering_replicas": f.min_answering.as_ref().map(|(n, _)| *n),
        "max_listed_copies": f.max_listed,
        "update_ms": update.as_millis() as u64,
    });
    eprintln!("{line}");
}

fn check(case: &Case, f: &Figures) {
    let failures: Vec<String> = f
        .failures
        .iter()
        .map(|x| {
            let e = &x.endpoint;
            format!(
                "  {:?} into the update: replica {} at version {} ({} at {}): {}",
                x.at.saturating_sub(f.counted_from),
                e.replica,
                e.version,
                e.name,
                e.addr,
                x.reason
            )
        })
        .collect();
    assert_eq!(
        f.failed,
        0,
        "{}: {} of {} requests failed during the update; the first:\n{}",
        case.workload,
        f.failed,
        f.requests,
        failures.join("\n")
    );
    let floor = (REPLICAS - case.max_unavailable) as usize;
    let (fewest, round) = f.min_answering.clone().expect("the client ran rounds");
    assert!(
        fewest >= floor,
        "{}: only {fewest} replicas answered {:?} into the update (want at least {floor}): {:?}",
        case.workload,
        round.at.saturating_sub(f.counted_from),
        round.answers
    );
    // Without a surge a replica's new copy starts only once the old one is stopped, so the
    // client never sees more copies than replicas.
    assert!(
        case.max_surge > 0 || f.max_listed <= REPLICAS as usize,
        "{}: {} copies listed at once without a surge",
        case.workload,
        f.max_listed
    );
    assert!(f.last.all_at("b", REPLICAS), "{:?}", f.last);
}

/// A process case: the server script, the endpoints directory, three agents.
fn process_case(case: Case) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = three_agents(&format!("{}-", case.workload), &[]);
    let dir = c.dir.path().to_path_buf();
    std::fs::write(dir.join("server.py"), SERVER_PY).unwrap();
    std::fs::create_dir(dir.join("endpoints")).unwrap();
    // The servers run as the agents' workload user (nobody): they write their endpoints here.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("endpoints"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    // Instances outlive their agents: the cluster kills the servers of this directory at the end.
    c.cleanup
        .push(dir.join("server.py").to_str().unwrap().to_string());
    let discovery = DirDiscovery {
        dir: dir.join("endpoints"),
    };
    run(&c, &case, |v| case.process_spec(&dir, v), discovery);
}

#[test]
fn a_surge_update_of_processes_fails_no_request_and_keeps_every_replica_answering() {
    process_case(Case {
        workload: "zd-surge",
        runtime: "process",
        max_unavailable: 0,
        max_surge: 1,
    });
}

#[test]
fn an_update_of_processes_one_unavailable_at_a_time_fails_no_request() {
    process_case(Case {
        workload: "zd-unavailable",
        runtime: "process",
        max_unavailable: 1,
        max_surge: 0,
    });
}

/// Removes the containers of `workload` (every node), at the start and the end of the case.
struct Containers(&'static str);

impl Containers {
    fn remove(&self) {
        let label = format!("label=shoal.workload={}", self.0);
        let out = Command::new("docker")
            .args(["ps", "-aq", "--filter", &label])
            .output()
            .unwrap();
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("docker").args(["rm", "-f", id]).output();
        }
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        self.remove();
    }
}

#[test]
fn a_surge_update_of_containers_fails_no_request_and_keeps_every_replica_answering() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !docker_ready() {
        return;
    }
    let case = Case {
        workload: "zd-docker",
        runtime: "docker",
        max_unavailable: 0,
        max_surge: 1,
    };
    let containers = Containers(case.workload);
    containers.remove();
    let c = three_agents("zd-docker-", &["--runtime", "docker"]);
    let dir = c.dir.path().to_path_buf();
    let discovery = DockerDiscovery::start(case.workload, 8080);
    run(&c, &case, |v| case.container_spec(&dir, v), discovery);
}
