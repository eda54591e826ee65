//! What `shoal` prints when a call fails, as a user reads it: the built binary against a stand-in
//! agent on loopback QUIC. An agent that answers, even with a refusal, is not "not running".

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal::identity::pki::{self, Role, SelfIssue};
use shoal::identity::tls::{self, QuicOptions, ALPN_API, ALPN_GOSSIP};
use shoal::transport::rpc::{self, Handler, RpcServerConfig, TransportStats};
use shoal::wire::api::{Request, Response};
use shoal::wire::API_FRAME_MAX_BYTES;

/// Runs `shoal ARGS --agent AGENT --pki DIR --client-name operator` off the async runtime.
async fn shoal(args: &[&str], agent: SocketAddr, pki: &Path) -> Output {
    shoal_at(args, &agent.to_string(), pki).await
}

/// [`shoal`] with `--agent` as written.
async fn shoal_at(args: &[&str], agent: &str, pki: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.env_remove("SHOAL_AGENT")
        .args(args)
        .args(["--agent", agent, "--timeout", "3s"])
        .arg("--pki")
        .arg(pki)
        .args(["--client-name", "operator"]);
    tokio::task::spawn_blocking(move || cmd.output().expect("run shoal"))
        .await
        .unwrap()
}

/// A stand-in agent whose every answer is `answer`, on a loopback port.
fn serve(pki: &Path, answer: Response) -> SocketAddr {
    serve_alpn(pki, answer, ALPN_API)
}

/// [`serve`] speaking `alpn` (the gossip port's, to stand for a gossip endpoint).
fn serve_alpn(pki: &Path, answer: Response, alpn: &[u8]) -> SocketAddr {
    let identity = pki::load_identity(pki, "n1", SelfIssue::As(Role::Node)).unwrap();
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let endpoint = tls::bind_endpoint(loopback, &identity, alpn, &QuicOptions::api()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let handler: Handler<Request, Response> = Arc::new(move |_, _| {
        let answer = answer.clone();
        Box::pin(async move { answer })
    });
    let stats = Arc::new(TransportStats::default());
    tokio::spawn(rpc::serve(
        endpoint,
        handler,
        RpcServerConfig::default(),
        stats,
    ));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_frame_limit_reads_as_the_agents_refusal() {
    let dir = tempfile::tempdir().unwrap();
    pki::init(dir.path()).unwrap();
    pki::load_identity(dir.path(), "operator", SelfIssue::As(Role::Client)).unwrap();
    // What `get` did with 60 specs of 248 KB: an answer larger than a frame, which the agent
    // refuses to send.
    let agent = serve(dir.path(), Response::Digest(vec![0; API_FRAME_MAX_BYTES]));
    let out = shoal(&["get"], agent, dir.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the agent at {agent} refused the request: response not sent"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("exceeds the {API_FRAME_MAX_BYTES}-byte limit")),
        "{stderr}"
    );
    assert!(!stderr.contains("is it running"), "{stderr}");
}

/// A PKI dir with a client certificate `operator`.
fn client_pki() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    pki::init(dir.path()).unwrap();
    pki::load_identity(dir.path(), "operator", SelfIssue::As(Role::Client)).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_at_the_address_is_told_within_the_connect_timeout() {
    let dir = client_pki();
    // A port nobody serves: bound, noted, closed.
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let nobody = socket.local_addr().unwrap();
    drop(socket);
    let started = Instant::now();
    let out = shoal(&["get"], nobody, dir.path()).await;
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "nothing answers at {nobody} (no handshake within 2s); is the agent running, and is \
             this its --api address?"
        )),
        "{stderr}"
    );
    // The 2 s connect timeout, not the 3 s call timeout (and not the old 10 s).
    assert!(took < Duration::from_millis(2_900), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gossip_port_by_mistake_is_named() {
    let dir = client_pki();
    let gossip = serve_alpn(dir.path(), Response::Clock { now_ms: 0 }, ALPN_GOSSIP);
    let started = Instant::now();
    let out = shoal(&["nodes"], gossip, dir.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{gossip} is an agent's gossip port (it speaks another protocol than the API); the \
             API is at the agent's --api address"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("known protocol"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_of_another_ca_is_named_so() {
    let ours = client_pki();
    let theirs = client_pki();
    let agent = serve(theirs.path(), Response::Clock { now_ms: 0 });
    let out = shoal(&["nodes"], agent, ours.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let ca = ours.path().join("ca.crt");
    assert!(
        stderr.contains(&format!(
            "the agent at {agent} has a certificate not issued by the CA of {}",
            ca.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("is --pki this mesh's PKI?"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_is_resolved() {
    let dir = client_pki();
    let agent = serve(dir.path(), Response::Clock { now_ms: 0 });
    let by_name = format!("localhost:{}", agent.port());
    let out = shoal_at(&["get"], &by_name, dir.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // It reached the stand-in, whose answer is of the wrong kind.
    assert!(
        stderr.contains(&format!("unexpected answer from the agent at {by_name}")),
        "{stderr}"
    );
    let out = shoal_at(&["get"], "no-such-host.invalid:7001", dir.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot resolve --agent no-such-host.invalid:7001"),
        "{stderr}"
    );
    let out = shoal_at(&["get"], "localhost:api", dir.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("expected HOST:PORT or IP:PORT"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_of_the_wrong_kind_is_not_a_stopped_agent_either() {
    let dir = tempfile::tempdir().unwrap();
    pki::init(dir.path()).unwrap();
    pki::load_identity(dir.path(), "operator", SelfIssue::As(Role::Client)).unwrap();
    // An agent that answers `get` with something else entirely.
    let agent = serve(dir.path(), Response::Clock { now_ms: 0 });
    let out = shoal(&["get"], agent, dir.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("unexpected answer from the agent at {agent}")),
        "{stderr}"
    );
    assert!(!stderr.contains("is it running"), "{stderr}");
}

/// A label constraints could never match is refused at start, with the flag named.
#[test]
fn an_agent_label_constraints_cannot_match_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for (label, says) in [
        ("disk=fast ssd", "the value \"fast ssd\""),
        ("my disk=ssd", "the key \"my disk\""),
        ("disk", "expected KEY=VALUE"),
        ("os=plan9", "the key \"os\" is built in"),
        ("zone=a", "the key \"zone\" is built in"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(["agent", "--name", "n1", "--gossip", "127.0.0.1:1"])
            .args(["--api", "127.0.0.1:2", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--pki")
            .arg(dir.path().join("pki"))
            .args(["--label", label])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{label}: started");
        assert!(
            err.contains("--label") && err.contains(says),
            "{label}: {err}"
        );
    }
}

/// `pki issue --help` names the role table of docs/operations.md, and that table is there (a
/// test in agent/src/dispatch/roles.rs checks its rows against the code).
#[test]
fn pki_issue_help_points_to_the_role_table() {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["pki", "issue", "--help"])
        .output()
        .expect("run shoal");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let heading = "Who may make which request";
    assert!(
        help.contains(&format!("docs/operations.md, \"{heading}\"")),
        "{help}"
    );
    let ops = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/operations.md"
    ))
    .unwrap();
    assert!(ops.contains(&format!("**{heading}.**")));
}
