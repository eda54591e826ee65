//! DNS load on one real agent: queries per second and latency of `--dns` under a UDP flood.
//!
//! ```text
//! cargo build --release -p shoal --bin shoal --examples
//! target/release/examples/dns_bench --shoal target/release/shoal --inflight 64 --secs 5
//! ```
//!
//! It starts one `shoal agent` (fresh PKI and data dir in a temp dir, `--dns` on loopback),
//! applies a 3-replica process workload `web`, waits until `web.shoal.` answers, then runs
//! `--inflight` client tasks for `--secs` seconds, each with its own UDP socket, sending one
//! query and waiting for its answer before the next (so `--inflight` queries are in flight at
//! any time). Names asked in turn: `web.shoal.` A, `0.web.shoal.` A, `nope.shoal.` A
//! (NXDOMAIN). A query unanswered within 1 s counts as lost. The client runs on the same
//! machine as the agent and competes for its cores. Afterwards it kills the agent and its
//! children (the instances, the guard).
//!
//! The last stdout line is one JSON object: `{queries, lost, secs, qps, p50_us, p99_us,
//! max_us, inflight}`. Targets (issue 17): at least 20,000 q/s, p99 at most 2 ms.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use support::agents::{agent_command, pki_init};
use support::procfs::stat_field;
use support::stats::percentile;
use tokio::net::UdpSocket;

#[derive(Parser)]
struct Args {
    /// The `shoal` binary to run.
    #[arg(long, default_value = "target/release/shoal")]
    shoal: PathBuf,
    /// Queries in flight (one client task and socket each).
    #[arg(long, default_value_t = 64)]
    inflight: usize,
    /// How long to flood, seconds.
    #[arg(long, default_value_t = 5)]
    secs: u64,
}

fn query_bytes(name: &str) -> Vec<u8> {
    let mut m = Message::new(0, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    m.to_vec().expect("a query encodes")
}

/// Runs the CLI against the agent.
fn cli(shoal: &Path, api: SocketAddr, pki: &Path, args: &[&str]) -> std::process::Output {
    support::agents::cli(shoal, api, pki)
        .args(args)
        .env("SHOAL_SELF_ISSUE", "true")
        .output()
        .expect("run shoal")
}

/// One query and its answer, or `None` after 1 s.
async fn ask(socket: &UdpSocket, query: &mut [u8], id: u16, buf: &mut [u8]) -> Option<Vec<u8>> {
    query[..2].copy_from_slice(&id.to_be_bytes());
    socket.send(query).await.ok()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    loop {
        let len = tokio::time::timeout_at(deadline, socket.recv(buf))
            .await
            .ok()?
            .ok()?;
        if len >= 2 && buf[..2] == id.to_be_bytes() {
            return Some(buf[..len].to_vec());
        }
    }
}

async fn client(server: SocketAddr, until: Instant, seed: u16) -> (Vec<u64>, u64) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    socket.connect(server).await.expect("connect");
    let mut queries = [
        query_bytes("web.shoal."),
        query_bytes("0.web.shoal."),
        query_bytes("nope.shoal."),
    ];
    let (mut latencies_us, mut lost) = (Vec::new(), 0);
    let mut buf = vec![0u8; 4096];
    let mut id = seed.wrapping_mul(7919);
    while Instant::now() < until {
        id = id.wrapping_add(1);
        let q = &mut queries[usize::from(id) % 3];
        let began = Instant::now();
        match ask(&socket, q, id, &mut buf).await {
            Some(_) => latencies_us.push(began.elapsed().as_micros() as u64),
            None => lost += 1,
        }
    }
    (latencies_us, lost)
}

fn start_agent(args: &Args, dir: &Path) -> anyhow::Result<(Child, SocketAddr, SocketAddr)> {
    let pki = dir.join("pki");
    pki_init(&args.shoal, &pki)?;
    let addrs = support::addrs::free_udp_addrs(3)?;
    let (gossip, api, dns) = (addrs[0], addrs[1], addrs[2]);
    let log = std::fs::File::create(dir.join("agent.log"))?;
    let child = agent_command(&args.shoal, "n1", gossip, api, &dir.join("data"), &pki, log)
        .args(["--dns", &dns.to_string()])
        .env("SHOAL_SELF_ISSUE", "true")
        .env("RUST_LOG", "warn")
        .spawn()
        .with_context(|| format!("running {}", args.shoal.display()))?;
    Ok((child, api, dns))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let (mut agent, api, dns) = start_agent(&args, dir.path())?;
    let pki = dir.path().join("pki");
    let spec = dir.path().join("web.toml");
    std::fs::write(
        &spec,
        "name = \"web\"\nreplicas = 3\n[process]\ncommand = [\"sleep\", \"86421\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n",
    )?;
    let result = flood(&args, api, dns, &pki, &spec).await;
    // Instances outlive their agent (and a delete of the only workload is a mass stop the
    // agent holds): kill the agent's children (the instances and its guard) with it.
    let children = children_of(agent.id());
    let _ = agent.kill();
    let _ = agent.wait();
    for pid in children {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    result
}

/// The processes whose parent is `parent`, from /proc.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| stat_field(pid, 4).is_ok_and(|ppid| ppid == u64::from(parent)))
        .collect()
}

async fn flood(
    args: &Args,
    api: SocketAddr,
    dns: SocketAddr,
    pki: &Path,
    spec: &Path,
) -> anyhow::Result<()> {
    let applied = (0..100).any(|_| {
        let ok = cli(
            &args.shoal,
            api,
            pki,
            &["apply", "-f", spec.to_str().unwrap()],
        )
        .status
        .success();
        if !ok {
            std::thread::sleep(Duration::from_millis(200));
        }
        ok
    });
    if !applied {
        bail!("the agent did not take the workload within 20 s");
    }
    let probe = UdpSocket::bind("127.0.0.1:0").await?;
    probe.connect(dns).await?;
    let mut q = query_bytes("web.shoal.");
    let mut buf = vec![0u8; 4096];
    let mut answered = false;
    for id in 0..200u16 {
        if let Some(bytes) = ask(&probe, &mut q, id, &mut buf).await {
            answered = Message::from_vec(&bytes).is_ok_and(|m| !m.answers.is_empty());
        }
        if answered {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !answered {
        bail!("web.shoal. never answered an address");
    }
    let began = Instant::now();
    let until = began + Duration::from_secs(args.secs);
    let tasks: Vec<_> = (0..args.inflight)
        .map(|i| tokio::spawn(client(dns, until, i as u16)))
        .collect();
    let (mut latencies, mut lost) = (Vec::new(), 0);
    for task in tasks {
        let (l, n) = task.await?;
        latencies.extend(l);
        lost += n;
    }
    let secs = began.elapsed().as_secs_f64();
    let queries = latencies.len() as u64;
    println!(
        "{}",
        serde_json::json!({
            "queries": queries,
            "lost": lost,
            "secs": (secs * 100.0).round() / 100.0,
            "qps": (queries as f64 / secs).round(),
            "p50_us": percentile(&latencies, 50),
            "p99_us": percentile(&latencies, 99),
            "max_us": latencies.iter().max(),
            "inflight": args.inflight,
        })
    );
    Ok(())
}
