//! The web UI's routes without a browser (issue 27, item 1): five in-process agents on the
//! in-memory network with the in-memory runtime, the UI served on loopback TCP from agent 0's
//! API. Pages answer, unknown paths are a 404 page, the live stream is `text/event-stream`
//! with bounded clients (a client that does not read is dropped, the 33rd is refused), no page
//! shows a secret value, a workload page of 1,000 replicas stays within its size and time
//! targets, and a non-loopback UI takes only TLS with a client certificate of the cluster.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal::agent::mem::{join_mem_node, mem_setup, tokio_clock};
use shoal::agent::Agent;
use shoal::identity::pki::{self, Role, SelfIssue};
use shoal::identity::tls::{Peer, PeerName};
use shoal::node::host::{Host, HostConfig};
use shoal::node::runtime::mem::MemRuntime;
use shoal::state::store_db::MemDisk;
use shoal::transport::gossip::mem::MemNetwork;
use shoal::ui::{UiListener, UiTls};
use shoal::wire::api::{Request, Response};
use shoal_core::spec::WorkloadSpec;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const AGENTS: usize = 5;
const SECRET: &str = "s3cr3t-value-never-on-a-page";
const BIG: u32 = 1000;

async fn start(net: &MemNetwork, i: usize, disk: &MemDisk) -> Agent {
    let setup = mem_setup(i, 30, &format!("z{}", i % 2));
    let (api, name) = (setup.record.api_addr, setup.name.clone());
    let clock = tokio_clock(1_800_000_000_000);
    let running = join_mem_node(net, setup, disk, clock.clone())
        .await
        .unwrap();
    let runtime = MemRuntime::new(&name, i as u64);
    let mono = shoal::node::host::clock::monotonic_from(&clock);
    let config = HostConfig {
        tick: Duration::from_millis(200),
        ..HostConfig::default()
    };
    let (host, host_loop) = Host::new(running.node.clone(), Arc::new(runtime), clock, mono, config);
    let agent = Agent::start(running, host, host_loop);
    net.serve_rpc(api, PeerName(name), agent.handler());
    agent
}

async fn apply(agent: &Agent, text: &str) {
    let spec = WorkloadSpec::from_toml_str(text, "test.toml").unwrap();
    let answer = agent
        .api()
        .clone()
        .handle_request(
            Request::Apply { specs: vec![spec] },
            Peer::new("test", Role::Client),
        )
        .await;
    assert!(matches!(answer, Response::Applied(_)), "{answer:?}");
}

/// One HTTP/1.1 GET: status code, head, body.
async fn get_on<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    path: &str,
) -> (u16, String, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: ui\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes).await;
    let text = String::from_utf8_lossy(&bytes).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_ascii_lowercase(), body.to_string())
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    get_on(tokio::net::TcpStream::connect(addr).await.unwrap(), path).await
}

/// The head of a response that does not end (the live stream).
async fn head_of_stream(addr: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: ui\r\n\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("the stream's head within 5 s")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase()
}

async fn running(agent: &Agent, name: &str) -> usize {
    let weak = Arc::downgrade(agent.api());
    let mut count = 0;
    let mut after = None;
    loop {
        let req = Request::Status {
            name: name.into(),
            after,
            limit: 1000,
        };
        let Some(api) = weak.upgrade() else { return 0 };
        let Response::Status { view, next_after } = api
            .handle_request(req, Peer::new("test", Role::Reader))
            .await
        else {
            return 0;
        };
        count += view
            .instances
            .iter()
            .filter(|i| i.phase == "running")
            .count();
        match next_after {
            Some(n) => after = Some(n),
            None => return count,
        }
    }
}

/// Paused time: the agents' gossip runs on tokio's clock, so a loaded machine cannot make them
/// think each other dead; HTTP goes over real loopback sockets, and the page's server time is
/// measured on the real clock.
#[tokio::test(start_paused = true)]
async fn pages_live_stream_secrets_and_a_thousand_replicas() {
    let net = MemNetwork::new(7);
    let disks: Vec<MemDisk> = (0..AGENTS).map(|_| MemDisk::new()).collect();
    let mut agents = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        agents.push(start(&net, i, disk).await);
    }
    let listener = UiListener::bind("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    assert!(!listener.is_tls(), "loopback is plain HTTP");
    let ui = tokio::spawn(shoal::ui::serve(listener, Arc::downgrade(agents[0].api())));

    // The mesh forms; the overview lists every host alive.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (code, _, body) = get(addr, "/").await;
        assert_eq!(code, 200);
        if body.contains(&format!("{AGENTS} of {AGENTS} hosts alive")) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the mesh did not form: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Live clients are bounded: one that never reads is dropped once its queue fills, one that
    // reads keeps receiving; the 33rd is refused.
    let hub = shoal::ui::live::Hub::start(Arc::downgrade(agents[0].api()));
    let _stuck = hub.join(None).unwrap();
    let mut reader = hub.join(None).unwrap();
    let received = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = received.clone();
    let reading = tokio::spawn(async move {
        while reader.recv().await.is_some() {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let mut more = Vec::new();
    for _ in 2..shoal::ui::live::CLIENTS_MAX {
        more.push(hub.join(None).unwrap());
    }
    assert!(
        hub.join(None).is_err(),
        "a client past CLIENTS_MAX is refused"
    );
    drop(more);

    apply(
        &agents[0],
        &format!(
            "name = \"sec\"\nreplicas = 2\nsecret_env = {{ DB_PASSWORD = \"{SECRET}\" }}\n\
             [process]\ncommand = [\"sleep\", \"9\"]\nenv = {{ MODE = \"test\" }}\n\
             [resources]\ncpu = \"10m\"\nmemory = \"1Mi\"\n"
        ),
    )
    .await;
    apply(
        &agents[0],
        &format!(
            "name = \"big\"\nreplicas = {BIG}\n[process]\ncommand = [\"sleep\", \"9\"]\n\
             [resources]\ncpu = \"1m\"\nmemory = \"1Mi\"\n"
        ),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let now_running = running(&agents[0], "big").await;
        if now_running == BIG as usize {
            break;
        }
        let (_, _, page) = get(addr, "/workloads/big?part=main").await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "{now_running} of 1000 replicas run after 40 s: {}",
            &page[..page.len().min(3000)]
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while hub.counts().1 == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stuck client was not dropped: {:?}",
            hub.counts()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        received.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the reading client got events"
    );
    reading.abort();

    // Pages: every one answers, and none shows the secret value.
    for path in [
        "/",
        "/workloads",
        "/workloads/sec",
        "/workloads/big",
        "/issues",
        "/events",
        "/workloads/sec?part=main",
    ] {
        let (code, head, body) = get(addr, path).await;
        assert_eq!(code, 200, "{path}: {head}");
        assert!(head.contains("content-type: text/html"), "{path}: {head}");
        assert!(!body.contains(SECRET), "{path} shows the secret value");
    }
    // The in-memory runtime keeps no output: the log page says what the API said, as a page.
    let (code, _, body) = get(addr, "/workloads/sec/replicas/0/logs").await;
    assert!(
        code == 200 || (code == 404 && body.contains("<h1>404</h1>")),
        "{code}: {body}"
    );
    assert!(!body.contains(SECRET));
    let (_, _, sec) = get(addr, "/workloads/sec").await;
    assert!(
        sec.contains("DB_PASSWORD") && sec.contains("&lt;secret&gt;"),
        "{sec}"
    );
    let (_, _, part) = get(addr, "/workloads/sec?part=main").await;
    assert!(
        !part.contains("<html") && part.contains("<h1>sec</h1>"),
        "{part}"
    );
    let (_, _, list) = get(addr, "/workloads").await;
    assert!(
        list.contains("href=\"/workloads/big\"") && list.contains(&format!("<td>{BIG}</td>")),
        "{list}"
    );

    // Unknown paths: a 404 page; a missing workload: 404 with the API's words.
    for path in [
        "/nope",
        "/workloads/none-such",
        "/workloads/big/replicas/x/logs",
        "/assets/x.js",
    ] {
        let (code, head, body) = get(addr, path).await;
        assert_eq!(code, 404, "{path}");
        assert!(
            head.contains("content-type: text/html") && body.contains("<h1>404</h1>"),
            "{path}: {body}"
        );
    }
    // The live stream and the assets.
    let head = head_of_stream(addr, "/live?watch=big").await;
    assert!(
        head.starts_with("http/1.1 200") && head.contains("content-type: text/event-stream"),
        "{head}"
    );
    let (code, head, _) = get(addr, "/assets/live.js").await;
    assert!(code == 200 && head.contains("text/javascript"), "{head}");

    // A workload page of 1,000 replicas: size and server time (the median of 5 loads).
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..5 {
        let at = Instant::now();
        let (code, _, body) = get(addr, "/workloads/big").await;
        times.push(at.elapsed());
        assert_eq!(code, 200);
        assert_eq!(
            body.matches("/logs\">").count(),
            BIG as usize,
            "one row per replica"
        );
        size = body.len();
    }
    times.sort();
    let median = times[2];
    println!("workload page, {BIG} replicas: {size} bytes, median {median:?} (of {times:?})");
    assert!(size <= 200 * 1024, "{size} bytes");
    // The target (300 ms) holds for the release build; a debug build is given 5x.
    let bound = if cfg!(debug_assertions) { 1500 } else { 300 };
    assert!(median <= Duration::from_millis(bound), "{median:?}");
    ui.abort();
}

fn identity(dir: &std::path::Path, name: &str, role: Role) -> pki::Identity {
    pki::load_identity(dir, name, SelfIssue::As(role)).unwrap()
}

/// A TLS client of the UI: `client` presents that identity's certificate, `None` none at all.
async fn tls_get(
    addr: SocketAddr,
    ca: &pki::Identity,
    client: Option<&pki::Identity>,
) -> Result<(u16, String, String), String> {
    let config = match client {
        Some(id) => shoal::identity::tls::client_config(id, b"http/1.1").unwrap(),
        None => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.ca_certs[0].clone()).unwrap();
            let mut c = rustls::ClientConfig::builder_with_provider(
                shoal::identity::tls::crypto_provider(),
            )
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            c
        }
    };
    let server = match client {
        Some(_) => shoal::identity::tls::ANY_MEMBER.to_string(),
        None => "uinode".to_string(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(server).unwrap();
    let stream = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(Duration::from_secs(5), get_on(stream, "/nope"))
        .await
        .map_err(|_| "no answer".to_string())?;
    match answer.0 {
        0 => Err("refused".into()),
        _ => Ok(answer),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_only_tls_with_a_client_certificate() {
    // Without TLS a non-loopback address is refused at start.
    let refused = UiListener::bind("0.0.0.0:0".parse().unwrap(), None).await;
    let message = refused.err().expect("refused").to_string();
    assert!(
        message.contains("needs TLS with a client certificate"),
        "{message}"
    );
    assert!(shoal::ui::check_addr("10.1.2.3:8080".parse().unwrap(), false).is_err());
    assert!(shoal::ui::check_addr("[::1]:8080".parse().unwrap(), false).is_ok());

    let dir = tempfile::tempdir().unwrap();
    pki::init(dir.path()).unwrap();
    let node = identity(dir.path(), "uinode", Role::Node);
    let reader = identity(dir.path(), "alice", Role::Reader);
    let operator = identity(dir.path(), "bob", Role::Client);
    let other_node = identity(dir.path(), "n9", Role::Node);
    let other = tempfile::tempdir().unwrap();
    pki::init(other.path()).unwrap();
    let stranger = identity(other.path(), "mallory", Role::Client);

    let net = MemNetwork::new(8);
    let disk = MemDisk::new();
    let agent = start(&net, 0, &disk).await;
    let authority = Arc::new(shoal::identity::authority::Authority::certified(&node).unwrap());
    let tls = UiTls::new(&node, authority);
    let listener = UiListener::bind("0.0.0.0:0".parse().unwrap(), Some(tls))
        .await
        .unwrap();
    assert!(listener.is_tls());
    let addr = SocketAddr::from(([127, 0, 0, 1], listener.local_addr().unwrap().port()));
    let ui = tokio::spawn(shoal::ui::serve(listener, Arc::downgrade(agent.api())));

    for (who, id) in [("reader", &reader), ("client", &operator)] {
        let (code, _, body) = tls_get(addr, &node, Some(id))
            .await
            .unwrap_or_else(|e| panic!("{who}: {e}"));
        assert_eq!(code, 404, "{who}");
        assert!(body.contains("<h1>404</h1>"), "{who}");
    }
    assert!(
        tls_get(addr, &node, None).await.is_err(),
        "no client certificate: refused at TLS"
    );
    assert!(
        tls_get(addr, &node, Some(&other_node)).await.is_err(),
        "a node certificate is refused"
    );
    assert!(
        tls_get(addr, &node, Some(&stranger)).await.is_err(),
        "another CA's certificate is refused"
    );
    // Plain HTTP on the TLS port gets no page.
    let (code, _, _) = get(addr, "/").await;
    assert_eq!(code, 0, "plain HTTP is not answered on a TLS UI");
    ui.abort();
}
