//! How long a revocation takes to reach every agent: starts N real agents on loopback (default
//! 20), issues a client certificate `alice` that every agent answers, revokes it with the CA, gives
//! the list to ONE agent (`Request::PublishCrl`, as `shoal pki publish-crl` does), then asks every
//! agent as alice every 100 ms until each refuses her. Prints JSON: per-agent times from the
//! publish to the first refusal, their max, and the target (10 s).
//!
//! ```text
//! cargo build --release -p shoal --bin shoal --examples
//! target/release/examples/revoke_bench [--agents 20] [--shoal target/release/shoal]
//! ```

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Parser;
use shoal::identity::pki::{self, IssueOptions, Role, SelfIssue};
use shoal::identity::tls::{self, QuicOptions, ALPN_API, ANY_MEMBER};
use shoal::wire::api::{Request, Response};
use support::agents::{Certificates, MeshBuilder};

const TARGET_MS: u128 = 10_000;

/// Time from a revocation published to one agent until every agent refuses the certificate.
#[derive(Parser)]
struct Args {
    /// Agents to start.
    #[arg(long, default_value_t = 20)]
    agents: usize,
    /// The release binary to run.
    #[arg(long, default_value = "target/release/shoal")]
    shoal: PathBuf,
}

/// One call as `id` on a fresh connection: Ok when the agent answered.
async fn ask(id: &pki::Identity, addr: SocketAddr) -> bool {
    let Ok(endpoint) = tls::client_endpoint(addr, id, ALPN_API, &QuicOptions::api()) else {
        return false;
    };
    let req = Request::Nodes {
        after: None,
        limit: 1,
    };
    let answer: Result<Response, _> =
        shoal::transport::rpc::call(&endpoint, addr, ANY_MEMBER, &req, Duration::from_secs(2))
            .await;
    endpoint.close(0u32.into(), b"done");
    let _ = tokio::time::timeout(Duration::from_millis(200), endpoint.wait_idle()).await;
    matches!(answer, Ok(Response::Nodes { .. }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args { agents, shoal } = Args::parse();
    let mesh = MeshBuilder::new(&shoal, agents, "shoal-revoke-")
        .certificates(Certificates::Issued)
        .start()?;
    let apis: Vec<SocketAddr> = mesh.agents.iter().map(|a| a.api).collect();
    let pki_dir = mesh.pki();
    // The operator's copy of the CA, apart from the agents' --pki (whose crl.pem they read).
    let admin = mesh.dir.path().join("admin");
    std::fs::create_dir_all(&admin)?;
    for file in ["ca.crt", "ca.key"] {
        std::fs::copy(pki_dir.join(file), admin.join(file))?;
    }
    pki::issue(&admin, "alice", &IssueOptions::new(Role::Client))?;
    pki::issue(&admin, "operator", &IssueOptions::new(Role::Client))?;
    let alice = pki::load_identity(&admin, "alice", SelfIssue::No)?;
    let operator = pki::load_identity(&admin, "operator", SelfIssue::No)?;
    let ready = Instant::now();
    loop {
        let mut all = true;
        for &api in &apis {
            all &= ask(&alice, api).await;
        }
        if all {
            break;
        }
        if ready.elapsed() > Duration::from_secs(60) {
            bail!("the agents did not all answer alice within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let revoked = pki::revoke(&admin, "alice")?;
    let der = shoal::identity::authority::crl::der_from_pem_or_der(&std::fs::read(&revoked.crl)?)
        .map_err(anyhow::Error::msg)?;
    let endpoint = tls::client_endpoint(apis[0], &operator, ALPN_API, &QuicOptions::api())?;
    let published = Instant::now();
    let answer: Response = shoal::transport::rpc::call(
        &endpoint,
        apis[0],
        ANY_MEMBER,
        &Request::PublishCrl { der },
        Duration::from_secs(5),
    )
    .await?;
    if !matches!(answer, Response::CrlPublished { .. }) {
        bail!("publish refused: {answer:?}");
    }
    let mut refused_ms: Vec<Option<u128>> = vec![None; apis.len()];
    while refused_ms.iter().any(Option::is_none) && published.elapsed() < Duration::from_secs(30) {
        // Every agent still answering is asked at once: a round takes one call's time.
        let pending: Vec<usize> = (0..apis.len())
            .filter(|&i| refused_ms[i].is_none())
            .collect();
        let asks = pending.iter().map(|&i| ask(&alice, apis[i]));
        let answered = futures_util::future::join_all(asks).await;
        let at = published.elapsed().as_millis();
        for (&i, answered) in pending.iter().zip(answered) {
            if !answered {
                refused_ms[i] = Some(at);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let max = refused_ms.iter().flatten().max().copied();
    let report = serde_json::json!({
        "agents": agents,
        "refused_after_ms": refused_ms,
        "max_ms": max,
        "all_refused": refused_ms.iter().all(Option::is_some),
        "target_ms": TARGET_MS,
        "met": refused_ms.iter().all(|t| t.is_some_and(|t| t <= TARGET_MS)),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
