//! The benches' API client: QUIC with a client certificate, one connection per agent.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use shoal::identity::tls::{self, QuicOptions, ALPN_API, ANY_MEMBER};
use shoal::transport::rpc::{QuicRpcClient, RpcError, TransportStats};
use shoal::wire::api::{Request, Response, StatusView, PAGE_ITEMS_MAX};

/// An RPC client with one QUIC connection per agent, presenting a client certificate it issues
/// from the CA in `pki`. Must be called inside the tokio runtime (the endpoint needs it).
pub fn bench_rpc(pki: &Path) -> anyhow::Result<QuicRpcClient> {
    let identity = shoal::identity::pki::load_identity(
        pki,
        "shoal-bench",
        shoal::identity::pki::SelfIssue::As(shoal::identity::pki::Role::Client),
    )?;
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let endpoint = tls::client_endpoint(any, &identity, ALPN_API, &QuicOptions::api())?;
    Ok(QuicRpcClient::new(
        endpoint,
        Arc::new(TransportStats::default()),
    ))
}

/// An answer this example cannot decode means the agents run a binary built from other sources.
pub fn skew_hint(err: RpcError) -> anyhow::Error {
    match err {
        RpcError::Wire(e) => anyhow::anyhow!(
            "{e}: the agents' binary and this example were built from different sources; rebuild \
             both (cargo build --release -p shoal --bin shoal --examples)"
        ),
        other => other.into(),
    }
}

/// The API client of a bench: [`bench_rpc`] with one timeout for every call.
pub struct BenchClient {
    /// The client itself, for calls with a timeout of their own.
    pub rpc: QuicRpcClient,
    timeout: Duration,
}

impl BenchClient {
    /// A client of the mesh whose CA is in `pki`, each call given `timeout`. Must be called
    /// inside the tokio runtime (the endpoint needs it).
    pub fn new(pki: &Path, timeout: Duration) -> anyhow::Result<BenchClient> {
        Ok(BenchClient {
            rpc: bench_rpc(pki)?,
            timeout,
        })
    }

    /// One request; an error answer is an error.
    pub async fn call(&self, api: SocketAddr, req: Request) -> anyhow::Result<Response> {
        let answer = self.rpc.call(api, ANY_MEMBER, &req, self.timeout).await;
        match answer.map_err(skew_hint)? {
            Response::Error(e) => bail!("{}", e.message),
            other => Ok(other),
        }
    }

    /// Names of the nodes `api` holds alive.
    pub async fn alive(&self, api: SocketAddr) -> anyhow::Result<BTreeSet<String>> {
        // One page: a bench mesh has fewer members than a page holds.
        let req = Request::Nodes {
            after: None,
            limit: PAGE_ITEMS_MAX,
        };
        match self.call(api, req).await? {
            Response::Nodes {
                nodes,
                next_after: None,
            } => Ok(nodes
                .into_iter()
                .filter(|n| n.alive)
                .map(|n| n.name)
                .collect()),
            other => bail!("unexpected answer to Nodes: {other:?}"),
        }
    }

    /// `workload`'s status as `api` sees it (one page: up to `PAGE_ITEMS_MAX` replicas).
    pub async fn status(&self, api: SocketAddr, workload: &str) -> anyhow::Result<StatusView> {
        let req = Request::Status {
            name: workload.into(),
            after: None,
            limit: PAGE_ITEMS_MAX,
        };
        match self.call(api, req).await? {
            Response::Status {
                view,
                next_after: None,
            } => Ok(*view),
            other => bail!("unexpected answer to Status: {other:?}"),
        }
    }
}
