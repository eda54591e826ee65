//! Mutual TLS and RPC over QUIC on loopback: who may connect, and what bad frames do.

mod transport_support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shoal::identity::tls::{self, QuicOptions, ALPN_API, ALPN_GOSSIP, ANY_MEMBER};
use shoal::transport::rpc::{
    self, Handler, QuicRpcClient, RpcError, RpcServerConfig, TransportStats,
};
use shoal::wire::{self, FrameKind, API_FRAME_MAX_BYTES};
use transport_support::TestPki;

#[derive(Debug, Serialize, Deserialize, PartialEq)]
enum Req {
    Echo(String),
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
enum Resp {
    Echo { text: String, caller: String },
}

const CALL_TIMEOUT: Duration = Duration::from_secs(5);

struct Server {
    addr: SocketAddr,
    stats: Arc<TransportStats>,
    endpoint: quinn::Endpoint,
}

fn start_server(pki: &TestPki) -> Server {
    let identity = pki.identity("server");
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let endpoint = tls::bind_endpoint(loopback, &identity, ALPN_API, &QuicOptions::api()).unwrap();
    let stats = Arc::new(TransportStats::default());
    let handler: Handler<Req, Resp> = Arc::new(|req, peer| {
        Box::pin(async move {
            let Req::Echo(text) = req;
            Resp::Echo {
                text,
                caller: peer.name.0,
            }
        })
    });
    let config = RpcServerConfig {
        request_read_timeout: Duration::from_secs(1),
        ..RpcServerConfig::default()
    };
    tokio::spawn(rpc::serve(endpoint.clone(), handler, config, stats.clone()));
    Server {
        addr: endpoint.local_addr().unwrap(),
        stats,
        endpoint,
    }
}

fn client(pki: &TestPki, name: &str, alpn: &[u8], server: &Server) -> quinn::Endpoint {
    tls::client_endpoint(server.addr, &pki.identity(name), alpn, &QuicOptions::api()).unwrap()
}

async fn echo(endpoint: &quinn::Endpoint, server: &Server, name: &str) -> Result<Resp, RpcError> {
    rpc::call(
        endpoint,
        server.addr,
        name,
        &Req::Echo("hi".into()),
        CALL_TIMEOUT,
    )
    .await
}

#[tokio::test]
async fn ca_signed_peers_talk_and_learn_each_others_names() {
    let pki = TestPki::new("mtls-ok");
    let server = start_server(&pki);
    let cli = client(&pki, "cli-1", ALPN_API, &server);
    let expected = Resp::Echo {
        text: "hi".into(),
        caller: "cli-1".into(),
    };
    assert_eq!(echo(&cli, &server, "server").await.unwrap(), expected);
    assert_eq!(echo(&cli, &server, ANY_MEMBER).await.unwrap(), expected);

    // The name is checked when given: "server" is not "node-9".
    let err = echo(&cli, &server, "node-9").await.unwrap_err();
    assert!(matches!(err, RpcError::Connect { .. }), "{err}");

    // The peer name is visible on both sides of a raw connection.
    let conn = cli.connect(server.addr, "server").unwrap().await.unwrap();
    assert_eq!(tls::peer_name(&conn).unwrap().as_str(), "server");

    // A caching client reuses its connection.
    let stats = Arc::new(TransportStats::default());
    let cached = QuicRpcClient::new(cli.clone(), stats);
    for _ in 0..3 {
        let r: Resp = cached
            .call(server.addr, "server", &Req::Echo("hi".into()), CALL_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(r, expected);
    }
    // The one refused handshake is the client's own abort over the name mismatch.
    assert_eq!(server.stats.snapshot().handshakes_refused, 1);
    assert_eq!(server.stats.snapshot().requests_served, 5);
}

#[tokio::test]
async fn strangers_and_wrong_protocols_are_refused_and_counted() {
    let pki = TestPki::new("mtls-refuse");
    let rogue_pki = TestPki::new("mtls-rogue");
    let server = start_server(&pki);

    // A certificate from another CA: the server refuses the client...
    let rogue = client(&rogue_pki, "cli-1", ALPN_API, &server);
    assert!(echo(&rogue, &server, ANY_MEMBER).await.is_err());
    // ...and a legitimate client refuses a rogue server.
    let rogue_server = start_server(&rogue_pki);
    let cli = client(&pki, "cli-1", ALPN_API, &server);
    let err = echo(&cli, &rogue_server, "server").await.unwrap_err();
    assert!(matches!(err, RpcError::Connect { .. }), "{err}");

    // The gossip protocol at the API port.
    let wrong_alpn = client(&pki, "cli-2", ALPN_GOSSIP, &server);
    assert!(echo(&wrong_alpn, &server, "server").await.is_err());

    wait_for(|| server.stats.handshakes_refused.load(Ordering::Relaxed) >= 2).await;
    // The server still serves members.
    assert!(echo(&cli, &server, "server").await.is_ok());
}

#[tokio::test]
async fn garbage_and_oversized_frames_leave_the_server_running() {
    let pki = TestPki::new("mtls-garbage");
    let server = start_server(&pki);
    let cli = client(&pki, "cli-1", ALPN_API, &server);
    let conn = cli.connect(server.addr, "server").unwrap().await.unwrap();

    // Random bytes on a request stream: a reject, counted.
    let mut junk = vec![0u8; 1000];
    for (i, b) in junk.iter_mut().enumerate() {
        *b = (i * 7919 % 251) as u8;
    }
    let answer = raw_exchange(&conn, &junk).await.unwrap();
    assert!(matches!(
        rpc::decode_answer::<Resp>(&answer),
        Err(RpcError::Rejected(_))
    ));

    // A valid frame of the wrong version.
    let mut frame =
        wire::encode_frame(FrameKind::Request, &Req::Echo("x".into()), 1 << 20).unwrap();
    frame[7] = 99;
    let answer = raw_exchange(&conn, &frame).await.unwrap();
    let err = rpc::decode_answer::<Resp>(&answer).unwrap_err();
    assert!(err.to_string().contains("version"), "{err}");

    // An oversized request: refused without buffering it all.
    let big = vec![0u8; API_FRAME_MAX_BYTES + 64 * 1024];
    let _ = raw_exchange(&conn, &big).await;

    // A request that never finishes: given up after the read timeout.
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    send.write_all(&[0, 0, 0, 10]).await.unwrap();

    // Raw UDP garbage at the port.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for size in [1usize, 17, 1200, 1500] {
        udp.send_to(&vec![0xa5; size], server.addr).unwrap();
    }

    wait_for(|| server.stats.frames_rejected.load(Ordering::Relaxed) >= 4).await;
    assert!(echo(&cli, &server, "server").await.is_ok());
    assert!(server.endpoint.open_connections() >= 1);
}

async fn raw_exchange(conn: &quinn::Connection, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    // The server may stop reading an oversized request part-way.
    let _ = send.write_all(bytes).await;
    let _ = send.finish();
    recv.read_to_end(64 * 1024).await.map_err(|e| e.to_string())
}

async fn wait_for(cond: impl Fn() -> bool) {
    for _ in 0..100 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("condition not met within 5 s");
}
