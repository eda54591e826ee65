//! Admission on the API endpoint, on loopback: what half-open handshakes, many connections of one
//! certificate and unfinished request frames can hold, and that a legitimate caller still gets
//! its answer. The flood tool for the full-size measurement is `tests/adversarial/`.

mod transport_support;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shoal::identity::tls::{self, QuicOptions, ALPN_API};
use shoal::transport::admission::{AdmissionConfig, CONNECTION_SUPERSEDED};
use shoal::transport::rpc::{self, Handler, RpcError, RpcServerConfig, TransportStats};
use shoal::wire::{self, FrameKind};
use tokio::net::UdpSocket;
use transport_support::TestPki;

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Echo(String);

struct Server {
    addr: SocketAddr,
    stats: Arc<TransportStats>,
    _endpoint: quinn::Endpoint,
}

fn start_server(pki: &TestPki, admission: AdmissionConfig) -> Server {
    let identity = pki.identity("server");
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let endpoint = tls::bind_endpoint(loopback, &identity, ALPN_API, &QuicOptions::api()).unwrap();
    let stats = Arc::new(TransportStats::default());
    let handler: Handler<Echo, Echo> = Arc::new(|req, _| Box::pin(async move { req }));
    let config = RpcServerConfig {
        admission,
        request_read_timeout: Duration::from_secs(5),
        ..RpcServerConfig::default()
    };
    tokio::spawn(rpc::serve(endpoint.clone(), handler, config, stats.clone()));
    Server {
        addr: endpoint.local_addr().unwrap(),
        stats,
        _endpoint: endpoint,
    }
}

fn client(pki: &TestPki, name: &str) -> quinn::Endpoint {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    tls::client_endpoint(any, &pki.identity(name), ALPN_API, &QuicOptions::api()).unwrap()
}

async fn echo(endpoint: &quinn::Endpoint, server: &Server) -> Result<Echo, RpcError> {
    let hi = Echo("hi".into());
    rpc::call(endpoint, server.addr, "server", &hi, Duration::from_secs(3)).await
}

async fn wait_for(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..100 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not within 5 s: {what}");
}

/// Whether a datagram is a QUIC v1 Retry (long header, type 3).
fn is_retry(datagram: &[u8]) -> bool {
    datagram.first().is_some_and(|b| b & 0xf0 == 0xf0)
}

/// A handshake that never finishes, from `source` (an address on loopback): a relay between a
/// quinn client and the server passes the client's packets only until the server answers with
/// anything but a Retry. The address is then validated (the client echoed the Retry token) and
/// the server holds a handshake whose client has gone silent. Dropped with the returned tasks.
async fn half_open(pki: &TestPki, server: SocketAddr, source: Ipv4Addr) -> Vec<AbortOnDrop> {
    let front = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let back = UdpSocket::bind((source, 0)).await.unwrap();
    let relay_addr = front.local_addr().unwrap();
    let endpoint = client(pki, "flooder");
    let connecting = endpoint.connect(relay_addr, "server").unwrap();
    let client_task = tokio::spawn(async move {
        let _endpoint = endpoint;
        let _ = connecting.await;
    });
    let relay = tokio::spawn(async move {
        let (mut up, mut down) = ([0u8; 2048], [0u8; 2048]);
        let (mut client_addr, mut answered) = (None, false);
        loop {
            tokio::select! {
                Ok((n, from)) = front.recv_from(&mut up) => {
                    client_addr = Some(from);
                    if !answered {
                        let _ = back.send_to(&up[..n], server).await;
                    }
                }
                Ok((n, _)) = back.recv_from(&mut down) => {
                    answered |= !is_retry(&down[..n]);
                    if let Some(to) = client_addr {
                        let _ = front.send_to(&down[..n], to).await;
                    }
                }
            }
        }
    });
    vec![AbortOnDrop(client_task), AbortOnDrop(relay)]
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `n` client Initial datagrams, each of its own connection, captured from quinn clients that
/// dialed a socket that never answers.
async fn captured_initials(pki: &TestPki, n: usize) -> Vec<Vec<u8>> {
    let sink = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let endpoint = client(pki, "flooder");
    let dials: Vec<_> = (0..n)
        .map(|_| {
            endpoint
                .connect(sink.local_addr().unwrap(), "server")
                .unwrap()
        })
        .collect();
    let mut initials = Vec::new();
    let mut buf = [0u8; 2048];
    while initials.len() < n {
        let (len, _) = sink.recv_from(&mut buf).await.unwrap();
        initials.push(buf[..len].to_vec());
    }
    drop(dials);
    initials
}

#[tokio::test]
async fn a_spoofed_source_flood_gets_retries_and_holds_nothing() {
    let pki = TestPki::new("admit-retry");
    let admission = AdmissionConfig {
        handshakes_max: 2,
        ..AdmissionConfig::api()
    };
    let server = start_server(&pki, admission);
    // 200 Initials from one socket that never reads: far over the cap of 2 handshakes.
    let spoofer = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    // Paced, so that the server's socket buffer (shared with this test's thread) never drops.
    for (i, initial) in captured_initials(&pki, 200).await.iter().enumerate() {
        spoofer.send_to(initial, server.addr).await.unwrap();
        if i % 20 == 19 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    wait_for("a Retry for each Initial", || {
        server.stats.snapshot().retries_sent >= 200
    })
    .await;
    // Nothing was held: the legitimate caller is answered at once.
    let cli = client(&pki, "cli-1");
    assert_eq!(echo(&cli, &server).await.unwrap(), Echo("hi".into()));
    let s = server.stats.snapshot();
    assert_eq!(s.handshakes_over_max, 0, "{s:?}");
    assert_eq!(s.handshakes_timed_out, 0, "{s:?}");
}

#[tokio::test]
async fn validated_half_open_handshakes_give_way_to_new_attempts_then_time_out() {
    let pki = TestPki::new("admit-half-open");
    let admission = AdmissionConfig {
        handshakes_max: 4,
        handshakes_per_ip_max: 2,
        handshake_timeout: Duration::from_secs(2),
        ..AdmissionConfig::api()
    };
    let server = start_server(&pki, admission);
    let cli = client(&pki, "cli-1");
    let stats = || server.stats.snapshot();

    // Three from 127.0.0.2: the third pushes out the first (per-address cap).
    let mut held = Vec::new();
    for _ in 0..3 {
        held.extend(half_open(&pki, server.addr, Ipv4Addr::new(127, 0, 0, 2)).await);
    }
    wait_for("a per-address drop", || stats().handshakes_over_per_ip == 1).await;
    // Two from 127.0.0.3 fill the endpoint's cap of 4; the caller on 127.0.0.1 still gets in
    // (the oldest half-open handshake gives way) and is answered.
    for _ in 0..2 {
        held.extend(half_open(&pki, server.addr, Ipv4Addr::new(127, 0, 0, 3)).await);
    }
    wait_for("four handshakes held", || stats().retries_sent >= 5).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(echo(&cli, &server).await.unwrap(), Echo("hi".into()));
    let s = stats();
    assert_eq!(s.handshakes_over_max, 1, "{s:?}");
    assert_eq!(s.handshakes_refused, 0, "{s:?}");

    // The three half-open ones left time out.
    wait_for("the held handshakes timed out", || {
        stats().handshakes_timed_out == 3
    })
    .await;
    assert_eq!(echo(&cli, &server).await.unwrap(), Echo("hi".into()));
    drop(held);
}

#[tokio::test]
async fn one_certificate_holds_a_bounded_number_of_connections() {
    let pki = TestPki::new("admit-per-peer");
    let admission = AdmissionConfig {
        connections_per_peer_max: 2,
        ..AdmissionConfig::api()
    };
    let server = start_server(&pki, admission);
    let cli = client(&pki, "cli-1");
    let mut conns = Vec::new();
    for _ in 0..2 {
        conns.push(cli.connect(server.addr, "server").unwrap().await.unwrap());
    }
    // The third of cli-1 takes the place of its oldest, which the server closes: a peer back
    // from a partition is not locked out by its own dead connections.
    let third = cli.connect(server.addr, "server").unwrap().await.unwrap();
    match tokio::time::timeout(Duration::from_secs(3), conns[0].closed()).await {
        Ok(quinn::ConnectionError::ApplicationClosed(close)) => {
            assert_eq!(close.error_code, CONNECTION_SUPERSEDED.into())
        }
        other => panic!("expected the oldest to give way, got {other:?}"),
    }
    assert!(third.close_reason().is_none(), "the newest was closed");
    assert!(
        conns[1].close_reason().is_none(),
        "more than the oldest was closed"
    );
    assert_eq!(server.stats.snapshot().connections_superseded, 1);
    assert_eq!(server.stats.snapshot().connections_refused_per_peer, 0);
    conns.remove(0);
    conns.push(third);
    // Another certificate is not affected; a closed connection frees its place.
    assert_eq!(echo(&client(&pki, "cli-2"), &server).await.unwrap().0, "hi");
    conns.pop().unwrap().close(0u32.into(), b"done");
    let cli_again = client(&pki, "cli-1");
    wait_for_answer(&cli_again, &server).await;
}

async fn wait_for_answer(endpoint: &quinn::Endpoint, server: &Server) {
    for _ in 0..20 {
        if echo(endpoint, server).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no answer within 2 s");
}

#[tokio::test]
async fn unfinished_request_frames_hold_at_most_the_certificate_budget() {
    let pki = TestPki::new("admit-budget");
    let budget = 64 << 10;
    let admission = AdmissionConfig {
        request_bytes_per_peer_max: Some(budget),
        ..AdmissionConfig::api()
    };
    let server = start_server(&pki, admission);
    let cli = client(&pki, "cli-1");
    let conn = cli.connect(server.addr, "server").unwrap().await.unwrap();

    // A frame declaring the whole budget, sent in part: it holds the budget...
    let declared = budget - wire::LENGTH_PREFIX_BYTES;
    let (mut big, mut big_answer) = conn.open_bi().await.unwrap();
    big.write_all(&(declared as u32).to_be_bytes())
        .await
        .unwrap();
    big.write_all(&[0u8; 1024]).await.unwrap();
    // ...so a small request of the same certificate, on another connection, waits for it.
    let other = cli.connect(server.addr, "server").unwrap().await.unwrap();
    let small = wire::encode_frame(FrameKind::Request, &Echo("small".into()), 1 << 20).unwrap();
    let (mut send, mut recv) = other.open_bi().await.unwrap();
    send.write_all(&small).await.unwrap();
    send.finish().unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(500), recv.read_to_end(1 << 20));
    assert!(
        waiting.await.is_err(),
        "answered while the budget was taken"
    );
    // Another certificate does not wait on cli-1's budget.
    assert_eq!(echo(&client(&pki, "cli-2"), &server).await.unwrap().0, "hi");

    // The big frame ends (junk: rejected) and gives the budget back; the small one is answered.
    big.write_all(&vec![0u8; declared - 1024]).await.unwrap();
    big.finish().unwrap();
    let rejected = big_answer.read_to_end(1 << 20).await.unwrap();
    assert!(matches!(
        rpc::decode_answer::<Echo>(&rejected),
        Err(RpcError::Rejected(_))
    ));
    let answer = recv.read_to_end(1 << 20).await.unwrap();
    assert_eq!(rpc::decode_answer::<Echo>(&answer).unwrap().0, "small");
}

/// The datagram filter on a real endpoint (issue 29 item 5): junk long headers of a version the
/// server does not speak get no Version Negotiation answer, a junk sender's Initials past its
/// budget are dropped before quinn decrypts them, both counted, and a caller on the same IP
/// address (another port) still gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_is_dropped_before_quic_and_a_caller_still_gets_through() {
    use shoal::transport::admission::{FilterConfig, FilteredSocket};
    let pki = TestPki::new("admit-filter");
    let identity = pki.identity("server");
    let stats = Arc::new(TransportStats::default());
    let filtered = stats.clone();
    let wrap =
        move |socket| FilteredSocket::wrap(socket, FilterConfig::default(), filtered.clone());
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let endpoint =
        tls::bind_endpoint_wrapped(loopback, &identity, ALPN_API, &QuicOptions::api(), &wrap)
            .unwrap();
    let handler: Handler<Echo, Echo> = Arc::new(|req, _| Box::pin(async move { req }));
    let config = RpcServerConfig::default();
    tokio::spawn(rpc::serve(endpoint.clone(), handler, config, stats.clone()));
    let server = Server {
        addr: endpoint.local_addr().unwrap(),
        stats: stats.clone(),
        _endpoint: endpoint,
    };

    let junk = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut other_version = vec![0xC0, 0x1a, 0x2b, 0x3c, 0x4d, 8];
    other_version.resize(1_200, 7);
    // A v1 Initial-looking datagram: made-up ids and payload, which quinn would try to decrypt.
    let mut initial = vec![0xC3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 8];
    initial.extend_from_slice(&[9, 10, 11, 12, 13, 14, 15, 16, 0]);
    initial.resize(1_200, 0x5a);
    for _ in 0..50 {
        junk.send_to(&other_version, server.addr).await.unwrap();
        junk.send_to(&initial, server.addr).await.unwrap();
    }
    wait_for("the junk counted", || {
        let s = stats.snapshot();
        s.datagrams_dropped_unknown_version == 50 && s.datagrams_dropped_initial_budget >= 40
    })
    .await;
    // No Version Negotiation (nor anything else) came back to the junk sender.
    let mut buf = [0u8; 1_500];
    let answer = tokio::time::timeout(Duration::from_millis(300), junk.recv(&mut buf)).await;
    assert!(answer.is_err(), "the junk sender got an answer");
    // A caller on the same IP address is not held by the junk sender's budget.
    assert_eq!(
        echo(&client(&pki, "alice"), &server).await.unwrap(),
        Echo("hi".into())
    );
}
