//! How the CLI reaches the agent that `--agent` names: the name resolved to its addresses, every
//! address dialed at once with a connect timeout of its own (`--connect-timeout`, apart from the
//! call's `--timeout`), the first connection kept, and, when none connects, one hint per address
//! saying what is most likely wrong there.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use shoal::identity::pki::Identity;
use shoal::identity::tls::{self, QuicOptions, ALPN_API, ANY_MEMBER};
use shoal::transport::rpc::{QuicRpcClient, RpcError};
use shoal::transport::stats::TransportStats;

/// The port `--agent HOST` means when it names none (an agent's default `--api` port).
pub const API_PORT_DEFAULT: u16 = 7001;
/// How long the CLI waits for a handshake before it says nothing answers.
pub const CONNECT_TIMEOUT_DEFAULT: &str = "2s";
/// At most this many of a name's addresses are dialed.
const ADDRESSES_MAX: usize = 8;

/// An agent's API address as the user wrote it: an IP address or a host name, and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentAddr {
    host: String,
    port: u16,
}

impl FromStr for AgentAddr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(addr.into());
        }
        let wanted = "expected HOST:PORT or IP:PORT, the agent's --api address";
        if let Ok(ip) = text.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
            return Ok(SocketAddr::new(ip, API_PORT_DEFAULT).into());
        }
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => {
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| {
                        format!("the port {port:?} is not a number 1-65535; {wanted}")
                    })?;
                (host, port)
            }
            None => (text, API_PORT_DEFAULT),
        };
        let name_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_';
        if host.is_empty() || !host.chars().all(name_char) {
            return Err(format!(
                "{host:?} is not a host name or IP address; {wanted}"
            ));
        }
        Ok(AgentAddr {
            host: host.to_string(),
            port,
        })
    }
}

impl From<SocketAddr> for AgentAddr {
    fn from(addr: SocketAddr) -> Self {
        AgentAddr {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

impl fmt::Display for AgentAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "[{}]:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

impl AgentAddr {
    /// The addresses the name stands for (itself when it is an IP address), in the resolver's
    /// order, without repeats, at most [`ADDRESSES_MAX`].
    pub async fn resolve(&self) -> anyhow::Result<Vec<SocketAddr>> {
        if let Ok(ip) = self.host.parse::<std::net::IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, self.port)]);
        }
        let found = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot resolve --agent {self}: {e} (set --agent or SHOAL_AGENT to the \
                     agent's --api address)"
                )
            })?;
        let mut addrs: Vec<SocketAddr> = Vec::new();
        for addr in found {
            if !addrs.contains(&addr) && addrs.len() < ADDRESSES_MAX {
                addrs.push(addr);
            }
        }
        if addrs.is_empty() {
            anyhow::bail!("--agent {self}: the name has no address");
        }
        Ok(addrs)
    }
}

/// A connection to an agent: the client that holds it, its endpoint (to close on exit) and the
/// address that answered.
pub struct Dialed {
    pub client: QuicRpcClient,
    pub endpoint: quinn::Endpoint,
    pub addr: SocketAddr,
}

/// Connects to the agent at `agent` as `identity`: every address at once, each within `within`;
/// the first handshake done wins. When none is, the error holds a hint per address.
pub async fn dial(
    agent: &AgentAddr,
    identity: &Identity,
    within: Duration,
    pki: &Path,
) -> anyhow::Result<Dialed> {
    let addrs = agent.resolve().await?;
    let mut attempts = tokio::task::JoinSet::new();
    for (order, addr) in addrs.iter().copied().enumerate() {
        let endpoint = tls::client_endpoint(addr, identity, ALPN_API, &QuicOptions::api())?;
        attempts.spawn(async move {
            let stats = Arc::new(TransportStats::default());
            let client = QuicRpcClient::new(endpoint.clone(), stats);
            match client.connect_within(addr, ANY_MEMBER, within).await {
                Ok(()) => Ok(Dialed {
                    client,
                    endpoint,
                    addr,
                }),
                Err(e) => {
                    endpoint.close(0u32.into(), b"done");
                    Err((order, addr, e))
                }
            }
        });
    }
    let mut failed = Vec::new();
    while let Some(outcome) = attempts.join_next().await {
        match outcome {
            Ok(Ok(dialed)) => {
                // The other attempts end with the set; their endpoints close when dropped.
                return Ok(dialed);
            }
            Ok(Err(failure)) => failed.push(failure),
            Err(e) => anyhow::bail!("dialing {agent}: {e}"),
        }
    }
    failed.sort_by_key(|(order, _, _)| *order);
    let hints: Vec<String> = failed
        .iter()
        .map(|(_, addr, e)| not_connected(*addr, e, pki))
        .collect();
    let shown = agent.to_string();
    let named = match addrs.as_slice() {
        [one] if one.to_string() == shown => String::new(),
        _ => format!("--agent {shown}: "),
    };
    Err(anyhow::anyhow!("{named}{}", hints.join("; ")))
}

/// What the user reads when no connection to `addr` could be made, by its most likely cause.
pub fn not_connected(addr: SocketAddr, e: &RpcError, pki: &Path) -> String {
    let reason = match e {
        RpcError::Timeout(within) => {
            let within = shoal_core::spec::format_duration_ms(within.as_millis() as u64);
            return format!(
                "nothing answers at {addr} (no handshake within {within}); is the agent \
                 running, and is this its --api address?"
            );
        }
        RpcError::Connect { reason, .. } => reason.as_str(),
        other => return format!("cannot connect to {addr}: {other}"),
    };
    let by_peer = reason.contains("aborted by peer");
    if reason.contains("error 120") || reason.contains("doesn't support any known protocol") {
        return format!(
            "{addr} is an agent's gossip port (it speaks another protocol than the API); the \
             API is at the agent's --api address"
        );
    }
    if !by_peer && reason.contains("invalid peer certificate") {
        return format!(
            "the agent at {addr} has a certificate not issued by the CA of {} ({reason}); is \
             --pki this mesh's PKI?",
            pki.join(shoal::identity::pki::CA_CERT_FILE).display()
        );
    }
    if let Some(why) = super::connect::certificate_refused(reason) {
        return format!("the agent at {addr} refused this CLI's certificate: {why}");
    }
    format!("cannot connect to {addr}: {reason}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_addresses_parse_as_ip_or_name_with_a_port() {
        let parse = |text: &str| text.parse::<AgentAddr>();
        assert_eq!(
            parse("127.0.0.1:7001").unwrap().to_string(),
            "127.0.0.1:7001"
        );
        assert_eq!(parse("[::1]:7002").unwrap().to_string(), "[::1]:7002");
        assert_eq!(
            parse("localhost:7001").unwrap().to_string(),
            "localhost:7001"
        );
        assert_eq!(
            parse("agent-1.example").unwrap().to_string(),
            "agent-1.example:7001"
        );
        assert_eq!(parse("10.0.0.1").unwrap().to_string(), "10.0.0.1:7001");
        assert!(parse("localhost:http")
            .unwrap_err()
            .contains("not a number"));
        assert!(parse("localhost:0").unwrap_err().contains("not a number"));
        assert!(parse(":7001").unwrap_err().contains("HOST:PORT"));
        assert!(parse("a b:1").unwrap_err().contains("HOST:PORT"));
    }

    #[test]
    fn every_cause_has_its_hint() {
        let addr: SocketAddr = "127.0.0.1:7002".parse().unwrap();
        let pki = Path::new("/p");
        let connect = |reason: &str| RpcError::Connect {
            addr,
            reason: reason.to_string(),
        };
        let nothing = not_connected(addr, &RpcError::Timeout(Duration::from_secs(2)), pki);
        assert!(
            nothing.contains("nothing answers at 127.0.0.1:7002"),
            "{nothing}"
        );
        assert!(nothing.contains("within 2s"), "{nothing}");
        let gossip = connect(
            "aborted by peer: the cryptographic handshake failed: error 120: peer doesn't \
             support any known protocol",
        );
        let gossip = not_connected(addr, &gossip, pki);
        assert!(gossip.contains("gossip port"), "{gossip}");
        let foreign = connect(
            "the cryptographic handshake failed: error 51: invalid peer certificate: \
             BadSignature",
        );
        let foreign = not_connected(addr, &foreign, pki);
        assert!(
            foreign.contains("not issued by the CA of /p/ca.crt"),
            "{foreign}"
        );
        let revoked = connect(
            "aborted by peer: the cryptographic handshake failed: error 44: invalid peer \
             certificate: Revoked",
        );
        let revoked = not_connected(addr, &revoked, pki);
        assert!(
            revoked.contains("refused this CLI's certificate: it is revoked"),
            "{revoked}"
        );
        let odd = not_connected(addr, &connect("endpoint stopping"), pki);
        assert_eq!(odd, "cannot connect to 127.0.0.1:7002: endpoint stopping");
    }
}
