//! The agents' RPC on a [`MemNetwork`]: real wire frames, answered by the real handler, each way
//! subject to the links' faults.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Carrier, Fate, FrameHandler, MemNetwork};
use crate::identity::tls::{Peer, PeerName, ANY_MEMBER};
use crate::transport::gossip::canonical;
use crate::transport::rpc::{self, Handler, RpcClient, RpcError, TransportStats};

/// Longest a handler may take on the in-memory network.
const HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

impl MemNetwork {
    /// Serves the typed RPC `handler` at `addr` as the node named `name`; returns the server's
    /// counters (`frames_rejected`, `requests_served`).
    pub fn serve_rpc<Req, Resp>(
        &self,
        addr: SocketAddr,
        name: PeerName,
        handler: Handler<Req, Resp>,
    ) -> Arc<TransportStats>
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
    {
        let stats = Arc::new(TransportStats::default());
        let server_stats = stats.clone();
        let frame_handler: FrameHandler = Arc::new(move |frame, peer| {
            let (handler, stats) = (handler.clone(), server_stats.clone());
            Box::pin(async move {
                rpc::answer_frame(&handler, &frame, peer, HANDLER_TIMEOUT, &stats).await
            })
        });
        self.state()
            .rpc_servers
            .insert(canonical(addr), (name, frame_handler));
        stats
    }

    /// Stops serving RPC at `addr` (the node crashed or left).
    pub fn stop_rpc(&self, addr: SocketAddr) {
        self.state().rpc_servers.remove(&canonical(addr));
    }

    /// An RPC client calling from `addr` as `name` (a node, or a client in tests).
    pub fn rpc_client(&self, addr: SocketAddr, name: Peer) -> MemRpcClient {
        MemRpcClient {
            net: self.clone(),
            addr: canonical(addr),
            name,
        }
    }
}

/// RPC calls over a [`MemNetwork`], subject to its faults in both directions. A request or answer
/// lost for good surfaces as a timeout, as it would over QUIC.
pub struct MemRpcClient {
    net: MemNetwork,
    addr: SocketAddr,
    name: Peer,
}

#[async_trait::async_trait]
impl RpcClient for MemRpcClient {
    async fn call_frame(
        &self,
        addr: SocketAddr,
        server_name: &str,
        request_frame: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, RpcError> {
        let to = canonical(addr);
        let server = self.net.state().rpc_servers.get(&to).cloned();
        let Some((name, handler)) = server else {
            // Nobody serves here (the host crashed or left): over QUIC the handshake goes
            // unanswered (quinn ignores ICMP), so the caller learns it only at its timeout.
            // Failing at once made the simulator judge a dead cell up to a probe timeout
            // sooner than real agents can.
            tokio::time::sleep(timeout).await;
            return Err(RpcError::Timeout(timeout));
        };
        if server_name != ANY_MEMBER && server_name != name.as_str() {
            let reason = format!("certificate is for {name}, not {server_name}");
            return Err(RpcError::Connect { addr, reason });
        }
        let exchange = async {
            let len = request_frame.len();
            let Fate::Deliver { delay, .. } = self.net.fate(self.addr, to, len, Carrier::Rpc)
            else {
                return std::future::pending().await;
            };
            tokio::time::sleep(delay).await;
            let answer = handler(request_frame, self.name.clone()).await;
            let Fate::Deliver { delay, .. } =
                self.net.fate(to, self.addr, answer.len(), Carrier::Rpc)
            else {
                return std::future::pending().await;
            };
            tokio::time::sleep(delay).await;
            self.net.state().totals.delivered += 2;
            answer
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| RpcError::Timeout(timeout))
    }
}
