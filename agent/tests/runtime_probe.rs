//! Probe execution against small local servers: tcp connect, the minimal HTTP/1.1 GET (status
//! classes, garbage, silence, an endless line), and host commands (exit status, missing program,
//! timeout killing the whole process group).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use shoal::node::runtime::probe;
use shoal::node::runtime::ProbeOutcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const TIMEOUT: Duration = Duration::from_millis(500);

/// A server that answers according to the request path, and reports each request's head.
async fn http_server() -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (heads, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let heads = heads.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut len = 0;
                while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf[len..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => len += n,
                    }
                }
                let head = String::from_utf8_lossy(&buf[..len]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                let _ = heads.send(head);
                let reply: Vec<u8> = match path.as_str() {
                    "/ok" => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
                    "/moved" => b"HTTP/1.0 302 Found\r\nLocation: /ok\r\n\r\n".to_vec(),
                    "/broken" => b"HTTP/1.1 500 Internal Server Error\r\n\r\n".to_vec(),
                    "/garbage" => b"SSH-2.0-OpenSSH_9.2\r\n".to_vec(),
                    "/endless" => vec![b'x'; 64 * 1024],
                    "/silent" => {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        return;
                    }
                    _ => b"HTTP/1.1 404 Not Found\r\n\r\n".to_vec(),
                };
                let _ = stream.write_all(&reply).await;
            });
        }
    });
    (addr, rx)
}

fn reason(outcome: &ProbeOutcome) -> &str {
    match outcome {
        ProbeOutcome::Healthy => panic!("expected a failure"),
        ProbeOutcome::Unhealthy { reason } => reason,
    }
}

#[tokio::test]
async fn tcp_connects_or_says_why_not() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = listener.local_addr().unwrap();
    assert_eq!(probe::tcp(open, TIMEOUT).await, ProbeOutcome::Healthy);
    drop(listener);
    let closed = probe::tcp(open, TIMEOUT).await;
    assert!(
        reason(&closed).starts_with(&format!("tcp connect to {open}: ")),
        "{closed:?}"
    );
}

#[tokio::test]
async fn http_status_classes_and_hostile_servers() {
    let (addr, mut heads) = http_server().await;
    assert_eq!(
        probe::http(addr, "/ok", TIMEOUT).await,
        ProbeOutcome::Healthy
    );
    let head = heads.recv().await.unwrap();
    assert!(head.starts_with("GET /ok HTTP/1.1\r\n"), "{head}");
    assert!(head.contains(&format!("\r\nHost: {addr}\r\n")), "{head}");
    assert!(head.contains("\r\nConnection: close\r\n"), "{head}");

    assert_eq!(
        probe::http(addr, "/moved", TIMEOUT).await,
        ProbeOutcome::Healthy
    );
    let broken = probe::http(addr, "/broken", TIMEOUT).await;
    assert_eq!(
        reason(&broken),
        format!("http GET {addr}/broken: status 500")
    );
    assert!(reason(&probe::http(addr, "/nope", TIMEOUT).await).ends_with("status 404"));
    let garbage = probe::http(addr, "/garbage", TIMEOUT).await;
    assert!(
        reason(&garbage).contains("not an HTTP/1.x status line"),
        "{garbage:?}"
    );
    let endless = probe::http(addr, "/endless", TIMEOUT).await;
    assert!(
        reason(&endless).contains("no status line in the first 4096 bytes"),
        "{endless:?}"
    );
    let t0 = Instant::now();
    let silent = probe::http(addr, "/silent", TIMEOUT).await;
    assert!(reason(&silent).contains("no answer within"), "{silent:?}");
    assert!(t0.elapsed() < TIMEOUT * 3);
}

#[tokio::test]
async fn host_commands_exit_status_missing_program_and_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let env = BTreeMap::from([
        ("PATH".to_string(), std::env::var("PATH").unwrap()),
        ("GREETING".to_string(), "hi".to_string()),
    ]);
    let run = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let ok = probe::exec_host(
        &[],
        &run(&["sh", "-c", "test \"$GREETING\" = hi && test -z \"$HOME\""]),
        &env,
        dir.path(),
        TIMEOUT,
    )
    .await;
    assert_eq!(ok, ProbeOutcome::Healthy, "exactly the given environment");
    let missing =
        probe::exec_host(&[], &run(&["no-such-probe-cmd"]), &env, dir.path(), TIMEOUT).await;
    assert_eq!(reason(&missing), "command \"no-such-probe-cmd\" not found");
    let killed = probe::exec_host(
        &[],
        &run(&["sh", "-c", "kill -9 $$"]),
        &env,
        dir.path(),
        TIMEOUT,
    )
    .await;
    assert!(reason(&killed).contains("killed by signal 9"), "{killed:?}");

    // On timeout the whole group dies, background children included.
    let t0 = Instant::now();
    let script = "sleep 30 & echo $! > bg.pid; wait";
    let slow = probe::exec_host(&[], &run(&["sh", "-c", script]), &env, dir.path(), TIMEOUT).await;
    assert!(reason(&slow).contains("did not finish within"), "{slow:?}");
    assert!(t0.elapsed() < Duration::from_secs(3));
    let bg: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{bg}/stat")).unwrap_or_default();
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        if stat.is_empty() || state.starts_with('Z') {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "background sleep {bg} survived the probe timeout"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
