//! The directory on the gossip endpoint: how an agent joins through a seed of another cell.
//!
//! Cells are separate gossip domains (their chitchat cluster ids differ), so a seed of another
//! cell answers a new agent's gossip with "bad cluster" and the agent stays alone. While it is
//! alone, the agent asks each seed's directory instead, on a bidirectional QUIC stream of the
//! seed's gossip endpoint (mutual TLS as for gossip): "I am NAME of cell CELL at GOSSIP; whom of
//! CELL do you know?". The seed answers with its own cell and API address (the agent then learns
//! the mesh's cells from it) and the gossip addresses of members of CELL it knows: its own
//! members when CELL is its cell, else the agents of CELL that asked it lately and the envoys its
//! cell table lists. The agent gossips to those; once one answers, it is a member of its cell.
//!
//! Both messages are JSON, at most [`DIRECTORY_BYTES_MAX`] bytes; a malformed or oversized one is
//! refused and counted, never a panic.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::identity::pki::Identity;
use crate::identity::tls::{self, QuicOptions, ALPN_GOSSIP, ANY_MEMBER};

/// Largest directory message, either way.
pub const DIRECTORY_BYTES_MAX: usize = 8 * 1024;
/// Most gossip addresses in one answer.
pub const DIRECTORY_PEERS_MAX: usize = 8;
/// Longest wait for an answer.
pub const DIRECTORY_TIMEOUT: Duration = Duration::from_secs(3);

/// What a joining agent asks a seed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ask {
    /// The asker's name.
    pub name: String,
    /// The asker's cell.
    pub cell: String,
    /// The asker's gossip address.
    pub gossip: SocketAddr,
}

/// The seed's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The seed's cell.
    pub cell: String,
    /// The seed's API address.
    pub api: SocketAddr,
    /// Gossip addresses of members of the asked cell (at most [`DIRECTORY_PEERS_MAX`]).
    pub peers: Vec<SocketAddr>,
}

/// How a seed answers: set by the agent once its node runs.
pub type Lookup = Arc<dyn Fn(Ask) -> Pin<Box<dyn Future<Output = Answer> + Send>> + Send + Sync>;

/// Serves one directory stream: reads the ask, answers it with `lookup`.
pub(super) async fn serve(
    lookup: &Lookup,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    timeout: Duration,
) -> Result<(), String> {
    let bytes = tokio::time::timeout(timeout, recv.read_to_end(DIRECTORY_BYTES_MAX))
        .await
        .map_err(|_| "the ask did not arrive in time".to_string())?
        .map_err(|e| format!("reading the ask: {e}"))?;
    let ask: Ask = serde_json::from_slice(&bytes).map_err(|e| format!("malformed ask: {e}"))?;
    if ask.name.len() > 255 || ask.cell.len() > 255 {
        return Err("ask with an over-long name or cell".into());
    }
    let mut answer = lookup(ask).await;
    answer.peers.truncate(DIRECTORY_PEERS_MAX);
    let body = serde_json::to_vec(&answer).map_err(|e| e.to_string())?;
    send.write_all(&body)
        .await
        .map_err(|e| format!("writing the answer: {e}"))?;
    let _ = send.finish();
    // Let the answer reach the asker before the stream is dropped.
    let _ = tokio::time::timeout(timeout, send.stopped()).await;
    Ok(())
}

/// Asks the directory of the gossip endpoint at `seed`, presenting `identity`.
pub async fn ask(
    identity: &Identity,
    options: &QuicOptions,
    seed: SocketAddr,
    question: &Ask,
) -> anyhow::Result<Answer> {
    let bind: SocketAddr = match seed {
        SocketAddr::V4(_) => "0.0.0.0:0".parse()?,
        SocketAddr::V6(_) => "[::]:0".parse()?,
    };
    let endpoint = tls::bind_endpoint(bind, identity, ALPN_GOSSIP, options)?;
    let result = tokio::time::timeout(DIRECTORY_TIMEOUT, async {
        let conn = endpoint.connect(seed, ANY_MEMBER)?.await?;
        let (mut send, mut recv) = conn.open_bi().await?;
        send.write_all(&serde_json::to_vec(question)?).await?;
        send.finish()?;
        let bytes = recv.read_to_end(DIRECTORY_BYTES_MAX).await?;
        let answer: Answer = serde_json::from_slice(&bytes)?;
        conn.close(0u32.into(), b"asked");
        anyhow::Ok(answer)
    })
    .await;
    endpoint.close(0u32.into(), b"done");
    match result {
        Ok(answer) => answer,
        Err(_) => {
            anyhow::bail!("the directory at {seed} did not answer within {DIRECTORY_TIMEOUT:?}")
        }
    }
}
