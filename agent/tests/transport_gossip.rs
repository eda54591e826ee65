//! chitchat over the QUIC transport (loopback, real time) and over the in-memory network (paused
//! time): convergence, refusal of strangers, partitions and healing.
//!
//! `cargo test -p shoal --test transport_gossip -- --ignored --nocapture` also runs the
//! measurement of failure detection (SHOAL_MEASURE_NODES nodes, default 20).

mod transport_support;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use chitchat::transport::Transport;
use chitchat::{spawn_chitchat, ChitchatHandle};
use shoal::identity::tls::{self, PeerName, QuicOptions, ALPN_GOSSIP, ANY_MEMBER};
use shoal::transport::gossip::chitchat_config;
use shoal::transport::gossip::mem::{LinkFault, MemNetwork};
use shoal::transport::gossip::quic::{QuicGossipConfig, QuicTransport};
use shoal::transport::rpc::{self, Handler, RpcError};
use shoal::wire::{self, FrameKind, GOSSIP_FRAME_MAX_BYTES};
use tokio::time::Instant;
use transport_support::TestPki;

const CLUSTER: &str = "test-cluster";

/// Free loopback UDP ports (bound together so they differ, then released).
fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let sockets: Vec<_> = (0..n)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    sockets.iter().map(|s| s.local_addr().unwrap()).collect()
}

async fn start(
    name: &str,
    addr: SocketAddr,
    seeds: &[SocketAddr],
    transport: &dyn Transport,
) -> ChitchatHandle {
    let mut config = chitchat_config(name, 1, addr, seeds, CLUSTER);
    // Measurements may try another threshold.
    if let Some(phi) = std::env::var("SHOAL_MEASURE_PHI")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.failure_detector_config.phi_threshold = phi;
    }
    spawn_chitchat(config, vec![], transport).await.unwrap()
}

async fn live_names(node: &ChitchatHandle) -> BTreeSet<String> {
    let chitchat = node.chitchat();
    let guard = chitchat.lock().await;
    guard
        .live_nodes()
        .map(|id| id.node_id.to_string())
        .collect()
}

async fn key_everywhere(nodes: &[ChitchatHandle], owner: &str, key: &str, value: &str) -> bool {
    for node in nodes {
        let chitchat = node.chitchat();
        let guard = chitchat.lock().await;
        let seen = guard
            .node_states()
            .iter()
            .any(|(id, state)| &*id.node_id == owner && state.get(key) == Some(value));
        if !seen {
            return false;
        }
    }
    true
}

/// Polls `check` every 20 ms (tokio time) until it holds; panics after `within`.
async fn wait_until<F, Fut>(within: Duration, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

async fn all_see(nodes: &[ChitchatHandle], names: &BTreeSet<String>) -> bool {
    for node in nodes {
        if &live_names(node).await != names {
            return false;
        }
    }
    true
}

fn names(prefix: &str, range: std::ops::Range<usize>) -> BTreeSet<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_converge_over_quic_and_strangers_stay_out() {
    let pki = TestPki::new("gossip-quic");
    let addrs = free_addrs(6);
    let mut nodes = Vec::new();
    let mut transports = Vec::new();
    for (i, addr) in addrs[..5].iter().enumerate() {
        let name = format!("n{i}");
        let transport = QuicTransport::new(pki.identity(&name), QuicGossipConfig::default());
        nodes.push(start(&name, *addr, &addrs[..1], &transport).await);
        transports.push(transport);
    }
    let everyone = names("n", 0..5);
    let took = wait_until(Duration::from_secs(10), "5 nodes live", || {
        all_see(&nodes, &everyone)
    })
    .await;
    eprintln!("quic: 5 nodes saw each other live after {took:?}");

    nodes[3]
        .with_chitchat(|c| c.self_node_state().set("role", "db"))
        .await;
    let took = wait_until(Duration::from_secs(5), "key on all", || {
        key_everywhere(&nodes, "n3", "role", "db")
    })
    .await;
    eprintln!("quic: a key set on n3 reached all 5 nodes after {took:?}");

    // Every connection is authenticated: the peers' certificate names are known.
    let peers = transports[0].peer_names();
    assert!(!peers.is_empty());
    assert!(peers.values().all(|n| n.as_str().starts_with('n')));

    // A node with a certificate from another CA gets nowhere.
    let rogue_pki = TestPki::new("gossip-rogue");
    let rogue_transport = QuicTransport::new(rogue_pki.identity("n9"), QuicGossipConfig::default());
    let rogue = start("n9", addrs[5], &addrs[..1], &rogue_transport).await;
    let stats = transports[0].stats();
    wait_until(Duration::from_secs(5), "rogue refused", || {
        let refused = stats.snapshot().handshakes_refused;
        async move { refused >= 1 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for node in &nodes {
        let chitchat = node.chitchat();
        let guard = chitchat.lock().await;
        assert!(guard.node_states().keys().all(|id| &*id.node_id != "n9"));
    }
    assert_eq!(live_names(&rogue).await, names("n", 9..10));
    eprintln!(
        "quic: n0 refused {} handshakes; the rogue counted {} failed dials",
        stats.snapshot().handshakes_refused,
        rogue_transport.stats().snapshot().dials_failed
    );

    // A member sending garbage, an oversized stream and a frame of the wrong kind.
    let member = pki.identity("n7");
    let options = QuicOptions::gossip();
    let client = tls::client_endpoint(addrs[0], &member, ALPN_GOSSIP, &options).unwrap();
    let conn = client.connect(addrs[0], "n0").unwrap().await.unwrap();
    let request = wire::encode_frame(FrameKind::Request, &1u32, 1024).unwrap();
    let junk: Vec<u8> = (0..3000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let oversized = vec![0u8; GOSSIP_FRAME_MAX_BYTES + 4096];
    for bytes in [&junk[..], &request[..], &oversized[..]] {
        let mut stream = conn.open_uni().await.unwrap();
        let _ = stream.write_all(bytes).await;
        let _ = stream.finish();
    }
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(&junk[..1200], addrs[0]).unwrap();
    let stats = transports[0].stats();
    wait_until(Duration::from_secs(5), "garbage counted", || {
        let rejected = stats.snapshot().frames_rejected;
        async move { rejected >= 3 }
    })
    .await;
    nodes[0]
        .with_chitchat(|c| c.self_node_state().set("still", "here"))
        .await;
    wait_until(Duration::from_secs(5), "n0 still gossips", || {
        key_everywhere(&nodes, "n0", "still", "here")
    })
    .await;

    let sent: u64 = transports
        .iter()
        .map(|t| t.stats().snapshot().bytes_sent)
        .sum();
    eprintln!("quic: {sent} gossip bytes sent in total");
}

#[tokio::test(start_paused = true)]
async fn mem_network_partition_and_heal() {
    let net = MemNetwork::new(7);
    net.set_default_fault(LinkFault {
        loss: 0.05,
        delay: Duration::from_millis(1),
        jitter: Duration::from_millis(19),
        duplicate: 0.0,
    });
    let addrs: Vec<SocketAddr> = (0..5)
        .map(|i| SocketAddr::from(([10, 0, 0, i as u8 + 1], 7000)))
        .collect();
    let mut nodes = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        nodes.push(start(&format!("m{i}"), *addr, &addrs[..1], &net.transport()).await);
    }
    let everyone = names("m", 0..5);
    let took = wait_until(Duration::from_secs(10), "converge", || {
        all_see(&nodes, &everyone)
    })
    .await;
    eprintln!("mem: 5 nodes converged after {took:?} (tokio time)");

    // Split {m0, m1} from {m2, m3, m4}: each side sees only itself.
    let hosts: Vec<IpAddr> = addrs.iter().map(|a| a.ip()).collect();
    net.partition(&hosts[..2], &hosts[2..]);
    let took = wait_until(Duration::from_secs(30), "partition detected", || async {
        all_see(&nodes[..2], &names("m", 0..2)).await
            && all_see(&nodes[2..], &names("m", 2..5)).await
    })
    .await;
    eprintln!("mem: partition detected on both sides after {took:?}");
    {
        let chitchat = nodes[0].chitchat();
        let guard = chitchat.lock().await;
        let dead: BTreeSet<String> = guard
            .dead_nodes()
            .map(|id| id.node_id.to_string())
            .collect();
        assert_eq!(dead, names("m", 2..5));
    }

    net.heal();
    let took = wait_until(Duration::from_secs(30), "healed", || {
        all_see(&nodes, &everyone)
    })
    .await;
    eprintln!("mem: healed after {took:?}");

    // A one-way block: m4 stops hearing from everyone; the others still hear m4's gossip replies
    // only when m4 initiates, which it does; m4 declares the others dead.
    for host in &hosts[..4] {
        net.set_blocked(*host, hosts[4], true);
    }
    wait_until(Duration::from_secs(30), "one-way block", || async {
        live_names(&nodes[4]).await == names("m", 4..5)
    })
    .await;
    net.heal();
    wait_until(Duration::from_secs(30), "healed again", || {
        all_see(&nodes, &everyone)
    })
    .await;
    let totals = net.totals();
    assert!(
        totals.dropped_loss > 0 && totals.dropped_blocked > 0,
        "{totals:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn mem_network_carries_rpc_through_its_faults() {
    let net = MemNetwork::new(1);
    let server: SocketAddr = "10.0.0.1:8000".parse().unwrap();
    let client: SocketAddr = "10.0.0.2:8000".parse().unwrap();
    let handler: Handler<u32, u32> = std::sync::Arc::new(|x, _peer| Box::pin(async move { x + 1 }));
    let server_stats = net.serve_rpc(server, PeerName("s".into()), handler);
    net.set_default_fault(LinkFault {
        delay: Duration::from_millis(50),
        ..LinkFault::default()
    });
    let caller = net.rpc_client(
        client,
        shoal::identity::tls::Peer::new("c", shoal::identity::pki::Role::Node),
    );
    let timeout = Duration::from_secs(1);
    let start = Instant::now();
    let answer: u32 = rpc::call_with(&caller, server, "s", &41u32, timeout)
        .await
        .unwrap();
    assert_eq!(answer, 42);
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    let wrong_name = rpc::call_with::<_, u32, u32>(&caller, server, "x", &1, timeout).await;
    assert!(matches!(wrong_name, Err(RpcError::Connect { .. })));
    net.set_blocked(server.ip(), client.ip(), true);
    let cut = rpc::call_with::<_, u32, u32>(&caller, server, ANY_MEMBER, &1, timeout).await;
    assert!(matches!(cut, Err(RpcError::Timeout(_))));
    // The one-way block lost the answer, not the request: the server handled it.
    assert_eq!(server_stats.snapshot().requests_served, 2);
}

/// False "dead" verdicts among live nodes under random message loss, on the in-memory network
/// (UDP-like loss: a lost message is gone, harsher than QUIC, which retransmits).
#[tokio::test(start_paused = true)]
#[ignore = "a measurement that prints figures, not a check; it runs for tens of seconds: run with --ignored --nocapture"]
async fn measure_false_positives_under_loss() {
    let env = |k: &str, default: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = env("SHOAL_MEASURE_NODES", 20) as usize;
    let loss_percent = env("SHOAL_MEASURE_LOSS_PERCENT", 10);
    let duration = Duration::from_secs(env("SHOAL_MEASURE_SECONDS", 600));
    let net = MemNetwork::new(env("SHOAL_MEASURE_SEED", 1));
    let mut fault = LinkFault {
        delay: Duration::from_micros(200),
        jitter: Duration::from_micros(4800),
        ..LinkFault::default()
    };
    net.set_default_fault(fault);
    let addrs: Vec<SocketAddr> = (0..n)
        .map(|i| SocketAddr::from(([10, 0, (i / 250) as u8, (i % 250) as u8 + 1], 7000)))
        .collect();
    let mut nodes = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        nodes.push(start(&format!("m{i}"), *addr, &addrs[..1], &net.transport()).await);
    }
    let everyone = names("m", 0..n);
    wait_until(Duration::from_secs(60), "converge", || {
        all_see(&nodes, &everyone)
    })
    .await;
    fault.loss = loss_percent as f64 / 100.0;
    net.set_default_fault(fault);
    // Count, per observer, the transitions of a live peer to "not live".
    let mut false_dead = 0usize;
    let mut previous: Vec<BTreeSet<String>> = vec![everyone.clone(); n];
    let start_at = Instant::now();
    while start_at.elapsed() < duration {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for (i, node) in nodes.iter().enumerate() {
            let live = live_names(node).await;
            false_dead += previous[i].difference(&live).count();
            previous[i] = live;
        }
    }
    eprintln!(
        "{n} nodes, {loss_percent}% loss, {duration:?} (tokio time): {false_dead} false dead verdicts; {:?}",
        net.totals()
    );
}

/// Time for every survivor to declare a killed node dead, over QUIC on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement that prints figures, not a check; it runs for tens of seconds: run with --ignored --nocapture"]
async fn measure_failure_detection_over_quic() {
    let n: usize = std::env::var("SHOAL_MEASURE_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut config = QuicGossipConfig::default();
    if std::env::var("SHOAL_MEASURE_COMPRESS").as_deref() == Ok("0") {
        config.compress_min_bytes = None;
    }
    let pki = TestPki::new("gossip-measure");
    let addrs = free_addrs(n);
    let mut nodes = Vec::new();
    let mut transports = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let name = format!("n{i}");
        let transport = QuicTransport::new(pki.identity(&name), config.clone());
        nodes.push(start(&name, *addr, &addrs[..1], &transport).await);
        transports.push(transport);
    }
    let everyone = names("n", 0..n);
    let took = wait_until(Duration::from_secs(60), "converge", || {
        all_see(&nodes, &everyone)
    })
    .await;
    eprintln!("{n} nodes converged in {took:?}");
    // Let the failure detectors gather samples.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let before: Vec<_> = transports.iter().map(|t| t.stats().snapshot()).collect();
    let window = Duration::from_secs(10);
    tokio::time::sleep(window).await;
    let bytes: u64 = transports
        .iter()
        .zip(&before)
        .map(|(t, b)| t.stats().snapshot().bytes_sent - b.bytes_sent)
        .sum();
    eprintln!(
        "{n} nodes: {:.1} KB/s sent per node",
        bytes as f64 / n as f64 / window.as_secs_f64() / 1000.0
    );
    let victim = nodes.pop().unwrap();
    victim.abort();
    drop(victim);
    let survivors = names("n", 0..n - 1);
    let took = wait_until(Duration::from_secs(60), "victim dead everywhere", || {
        all_see(&nodes, &survivors)
    })
    .await;
    eprintln!("{n} nodes: killed node declared dead by all survivors after {took:?}");
}
