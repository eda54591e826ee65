//! What `shoal` prints for people (issue 27, item 4): the built binary against a stand-in agent
//! on loopback QUIC that answers each request as a small mesh would. No host loop runs, so each
//! case takes milliseconds.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use shoal::identity::pki::{self, Role, SelfIssue};
use shoal::identity::tls::{self, QuicOptions, ALPN_API};
use shoal::transport::rpc::{self, Handler, RpcServerConfig, TransportStats};
use shoal::wire::api::{
    Applied, InstanceView, LogsAnswer, NodeView, Request, Response, StatusView, WorkloadSummary,
    WorkloadView,
};
use shoal::wire::logs::{LogCursor, LogPage};
use shoal_core::reconcile::{Issue, IssueKind, Layer};
use shoal_core::spec::WorkloadSpec;

const VERSION: &str = "1796318403563.0@n1";
const VERSION_SHOWN: &str = "2026-12-03 17:20:03.563Z by n1";
const RESOURCES: &str = "[resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";

/// Runs `shoal ARGS` against the stand-in, off the async runtime.
async fn shoal(args: &[&str], agent: SocketAddr, pki: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.args(args)
        .args(["--agent", &agent.to_string(), "--timeout", "3s"])
        .arg("--pki")
        .arg(pki)
        .args(["--client-name", "operator"]);
    tokio::task::spawn_blocking(move || cmd.output().expect("run shoal"))
        .await
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn node(name: &str, alive: bool) -> NodeView {
    NodeView {
        name: name.into(),
        alive,
        zone: "z1".into(),
        cpu_millis: 1200,
        memory_bytes: 24_683_792 * 1024,
        draining: false,
        gossip_addr: "127.0.0.1:7000".into(),
        api_addr: Some("127.0.0.1:7001".into()),
        agent_version: Some("0.1.0".into()),
        build: None,
        runtimes: Some("process".into()),
        suspect: Some(false),
    }
}

fn instance(replica: u32, node: &str, phase: &str, healthy: Option<bool>) -> InstanceView {
    InstanceView {
        replica,
        node: Some(node.into()),
        phase: phase.into(),
        healthy,
        restarts: 0,
        spec_version: Some(VERSION.into()),
        since_ms: None,
        last_error: None,
        reason: None,
        fence_token: None,
        pull: None,
        data_on: None,
    }
}

fn spec(toml: &str) -> WorkloadSpec {
    WorkloadSpec::from_toml_str(toml, "t.toml").unwrap()
}

/// The stand-in mesh: `web` (3 replicas, 2 running, 1 healthy; the same note on three nodes),
/// `db` (with a data volume), `nope` (whose image does not exist), two issues (one held);
/// every request it gets is kept in `asked`.
fn answer(req: Request) -> Response {
    let cgroup = "memory limits are not enforced (no cgroup v2 delegation)";
    match req {
        Request::CellList { .. } => Response::CellList {
            cells: vec![],
            next_after: None,
        },
        Request::Nodes { .. } => Response::Nodes {
            nodes: vec![node("n1", true), node("n2", true), node("n3", false)],
            next_after: None,
        },
        Request::List { .. } => Response::Workloads {
            workloads: ["db", "web"]
                .iter()
                .map(|n| WorkloadSummary {
                    name: n.to_string(),
                    replicas: 3,
                    version: VERSION.into(),
                    cpu_millis: 100,
                    memory_bytes: 16 << 20,
                })
                .collect(),
            next_after: None,
        },
        Request::Status { name, .. } => {
            let mut instances = vec![
                instance(0, "n1", "running", Some(true)),
                instance(1, "n2", "running", Some(false)),
                instance(2, "n2", "starting", None),
            ];
            if name == "nope" {
                instances = vec![instance(0, "n2", "failed", None)];
                instances[0].last_error = Some(
                    "pulling image \"example.invalid/nope:1\" failed: manifest unknown".into(),
                );
            }
            let notes = ["n1", "n2", "n3"]
                .iter()
                .map(|n| format!("{n}: {cgroup}"))
                .collect();
            Response::Status {
                view: Box::new(StatusView {
                    name,
                    desired: 3,
                    version: VERSION.into(),
                    instances,
                    notes,
                    fit: None,
                }),
                next_after: None,
            }
        }
        Request::Issues { .. } => {
            let issue = |id: &str, held: Option<&str>| Issue {
                id: id.into(),
                layer: Layer::Process,
                kind: IssueKind::Exited,
                replica: None,
                node: "n2".into(),
                message: "exited".into(),
                held: held.map(String::from),
                approved: false,
                since_ms: 0,
            };
            Response::Issues {
                issues: vec![issue("a1", None), issue("b2", Some("fencing"))],
                next_after: None,
            }
        }
        Request::Get { name } => {
            let volumes = match name.as_str() {
                "db" => "[[volumes]]\nname = \"state\"\n",
                _ => "",
            };
            let toml = format!(
                "name = \"{name}\"\n[process]\ncommand = [\"sleep\", \"9\"]\n{RESOURCES}{volumes}"
            );
            Response::Workload(Box::new(WorkloadView {
                name,
                replicas: 1,
                version: VERSION.into(),
                spec: spec(&toml),
            }))
        }
        Request::Delete { name, .. } => Response::Deleted(applied(&name)),
        Request::Apply { specs } => {
            Response::Applied(specs.iter().map(|s| applied(&s.name)).collect())
        }
        Request::Undo { name, .. } => Response::Applied(vec![applied(&name)]),
        Request::Logs { workload, .. } => Response::Logs(Box::new(LogsAnswer {
            node: "n2".into(),
            replica: 0,
            page: LogPage {
                instance: format!("{workload}-0"),
                running: true,
                lines: vec![],
                cursor: LogCursor::File {
                    file_id: 0,
                    offset: 0,
                },
                more: false,
                skipped: false,
            },
        })),
        _ => Response::Error(shoal::wire::api::ApiError::new(
            shoal::wire::api::ErrorKind::Invalid,
            "the stand-in does not answer that".to_string(),
        )),
    }
}

fn applied(name: &str) -> Applied {
    Applied {
        name: name.into(),
        version: VERSION.into(),
        durable_on: vec!["n1".into(), "n2".into()],
        changed: true,
        note: None,
    }
}

/// Serves [`answer`] on a loopback port; returns its address and what it was asked.
fn serve(pki: &Path) -> (SocketAddr, Arc<Mutex<Vec<Request>>>) {
    let identity = pki::load_identity(pki, "n1", SelfIssue::As(Role::Node)).unwrap();
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let endpoint = tls::bind_endpoint(loopback, &identity, ALPN_API, &QuicOptions::api()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let handler: Handler<Request, Response> = Arc::new(move |req: Request, _| {
        log.lock().unwrap().push(req.clone());
        Box::pin(async move { answer(req) })
    });
    let stats = Arc::new(TransportStats::default());
    tokio::spawn(rpc::serve(
        endpoint,
        handler,
        RpcServerConfig::default(),
        stats,
    ));
    (addr, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_speaks_plainly() {
    let dir = tempfile::tempdir().unwrap();
    pki::init(dir.path()).unwrap();
    pki::load_identity(dir.path(), "operator", SelfIssue::As(Role::Client)).unwrap();
    let (agent, asked) = serve(dir.path());
    let pki = dir.path();

    // `status` without a name: the mesh at a glance, quantities for people.
    let out = shoal(&["status"], agent, pki).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("HOSTS: 2 of 3 up"), "{stdout}");
    assert!(
        stdout.contains("1.2 cores") && stdout.contains("23.5Gi"),
        "{stdout}"
    );
    assert!(!stdout.contains("Ki "), "{stdout}");
    let web: Vec<&str> = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("web"))
        .expect("web listed")
        .split_whitespace()
        .collect();
    assert_eq!(web, ["web", "3", "2", "1", "<-"], "{stdout}");
    assert!(stdout.contains("ISSUES: 2, 1 held"), "{stdout}");
    let json = shoal(&["status", "-o", "json"], agent, pki).await;
    let overview: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(overview["workloads"][1]["healthy"], 1, "{overview}");
    assert_eq!(overview["hosts"][0]["memory_bytes"], 24_683_792u64 * 1024);

    // `nodes`: the same quantities.
    let out = shoal(&["nodes"], agent, pki).await;
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("23.5Gi") && !stdout.contains("24683792Ki"),
        "{stdout}"
    );
    let header = stdout.lines().next().unwrap_or("");
    assert!(
        header.contains("VERSION"),
        "operations.md reads it: {header}"
    );
    assert!(stdout.contains("0.1.0"), "{stdout}");

    // `status NAME`: the note three nodes share, once.
    let out = shoal(&["status", "web"], agent, pki).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.matches("note:").count(), 1, "{stdout}");
    assert!(stdout.contains("(on n1, n2 and n3)"), "{stdout}");
    assert!(
        stdout.contains(VERSION_SHOWN) && !stdout.contains(VERSION),
        "{stdout}"
    );

    // `delete`: volumes only for a workload that has some.
    let out = shoal(&["delete", "web"], agent, pki).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.contains("volume"), "{stdout}");
    let out = shoal(&["delete", "db"], agent, pki).await;
    let (stdout, _) = text(&out);
    assert!(stdout.contains("--purge-data"), "{stdout}");

    // `logs` of a silent replica says so, on stderr.
    let out = shoal(&["logs", "web/0"], agent, pki).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("(no output yet from web/0 on n2)"),
        "{stderr}"
    );

    // `rollout undo --to` takes the version as `history` shows it, and sends it raw.
    let out = shoal(
        &["rollout", "undo", "web", "--to", VERSION_SHOWN],
        agent,
        pki,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(VERSION_SHOWN), "{stdout}");
    let sent = asked.lock().unwrap().iter().rev().find_map(|r| match r {
        Request::Undo { to, .. } => Some(to.clone()),
        _ => None,
    });
    assert_eq!(sent, Some(Some(VERSION.to_string())));
    let out = shoal(
        &["rollout", "undo", "web", "--to", "last tuesday"],
        agent,
        pki,
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(
        text(&out).1.contains("is not a version"),
        "{}",
        text(&out).1
    );

    // `apply --wait` on an image that does not exist: stops at the first pull failure.
    let file = dir.path().join("nope.toml");
    std::fs::write(
        &file,
        format!("name = \"nope\"\n[container]\nimage = \"example.invalid/nope:1\"\n{RESOURCES}"),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = shoal(
        &[
            "apply",
            "-f",
            file.to_str().unwrap(),
            "--wait",
            "--wait-timeout",
            "60s",
        ],
        agent,
        pki,
    )
    .await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("replica 0 on n2 cannot start: pulling image")
            && stderr.contains("manifest unknown"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "waited {:?}",
        started.elapsed()
    );
}
