//! How the CLI reaches an agent: `--agent ADDR` (or `SHOAL_AGENT`) over QUIC with mutual TLS,
//! presenting a client certificate from `--pki DIR` (or `SHOAL_PKI`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use shoal::identity::pki::{self, Identity, Role, SelfIssue, CA_KEY_FILE};
use shoal::identity::tls::ANY_MEMBER;
use shoal::transport::rpc::RpcError;
use shoal::wire::api::{Request, Response};
use shoal::wire::{encode_frame, FrameKind, WireError, API_FRAME_MAX_BYTES};

pub use super::dial::AgentAddr;
use super::dial::{dial, Dialed, CONNECT_TIMEOUT_DEFAULT};

/// Default agent API address.
pub const AGENT_DEFAULT: &str = "127.0.0.1:7001";
/// Name of the client certificate the CLI issues itself when the PKI dir holds the CA key.
pub const CLIENT_NAME_DEFAULT: &str = "shoal-cli";

/// Connection flags shared by every command that talks to an agent.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientOpts {
    /// The agent's API address (its --api): IP:PORT or HOST:PORT, the port 7001 when left out.
    #[arg(long, env = "SHOAL_AGENT", default_value = AGENT_DEFAULT, global = true)]
    pub agent: AgentAddr,
    /// Directory with the cluster CA certificate and a client certificate (or the CA key).
    #[arg(long, env = "SHOAL_PKI", default_value = "./pki", global = true)]
    pub pki: PathBuf,
    /// Which client certificate in --pki to present (NAME.crt / NAME.key).
    #[arg(long, env = "SHOAL_CLIENT_NAME", global = true)]
    pub client_name: Option<String>,
    /// Issue the client certificate from a ca.key in --pki when it is missing (a sandbox's
    /// convenience).
    #[arg(long, env = "SHOAL_SELF_ISSUE", global = true)]
    pub self_issue: bool,
    /// How long to wait for the agent's answer, once connected.
    #[arg(long, default_value = "10s", value_parser = parse_timeout, global = true)]
    pub timeout: Duration,
    /// How long to wait for the connection to the agent (the TLS handshake) before saying that
    /// nothing answers.
    #[arg(long, default_value = CONNECT_TIMEOUT_DEFAULT, value_parser = parse_timeout, global = true)]
    pub connect_timeout: Duration,
}

impl ClientOpts {
    /// The same options, aimed at the agent at `agent`.
    pub fn at(&self, agent: SocketAddr) -> ClientOpts {
        ClientOpts {
            agent: agent.into(),
            ..self.clone()
        }
    }

    /// Connects to the agent as the chosen client identity, within the connect timeout.
    async fn dial(&self) -> anyhow::Result<Dialed> {
        let identity = client_identity(&self.pki, self.client_name.as_deref(), self.self_issue)?;
        let within = self.connect_timeout.min(self.timeout);
        dial(&self.agent, &identity, within, &self.pki).await
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    shoal_core::spec::parse_duration_ms(text)
        .map(Duration::from_millis)
        .map_err(|e| e.to_string())
}

/// Output format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Human-readable tables.
    #[default]
    Table,
    /// Stable JSON (fields documented in docs/cli.md).
    Json,
}

/// Picks the client identity: the named one; else `shoal-cli` (issued on the spot with
/// --self-issue when the dir holds the CA key); else the only client certificate in the dir.
fn client_identity(dir: &Path, name: Option<&str>, self_issue: bool) -> anyhow::Result<Identity> {
    let self_issue = match self_issue {
        true => SelfIssue::As(Role::Client),
        false => SelfIssue::No,
    };
    if let Some(name) = name {
        return Ok(pki::load_identity(dir, name, self_issue)?);
    }
    let default_cert = dir.join(format!("{CLIENT_NAME_DEFAULT}.crt")).exists();
    if default_cert || (self_issue != SelfIssue::No && dir.join(CA_KEY_FILE).exists()) {
        return Ok(pki::load_identity(dir, CLIENT_NAME_DEFAULT, self_issue)?);
    }
    let mut found = Vec::new();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading --pki {} (set --pki or SHOAL_PKI)", dir.display()))?;
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().to_string();
        if let Some(stem) = file.strip_suffix(".crt") {
            if stem != "ca" && dir.join(format!("{stem}.key")).exists() {
                found.push(stem.to_string());
            }
        }
    }
    match found.as_slice() {
        [one] => Ok(pki::load_identity(dir, one, self_issue)?),
        [] => bail!(
            "no client certificate in {}: run `shoal pki issue --dir DIR --name NAME --role client` and copy \
             NAME.crt, NAME.key and ca.crt there",
            dir.display()
        ),
        many => bail!(
            "several certificates in {} ({}): choose one with --client-name",
            dir.display(),
            many.join(", ")
        ),
    }
}

/// Sends one request and returns the answer; an API error becomes an `Err` with its message.
pub fn call(opts: &ClientOpts, req: Request) -> anyhow::Result<Response> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(call_async(opts, req))
}

pub(super) async fn call_async(opts: &ClientOpts, req: Request) -> anyhow::Result<Response> {
    // A request over the frame limit is this side's problem, not the agent's: say so first.
    if let Err(e) = encode_frame(FrameKind::Request, &req, API_FRAME_MAX_BYTES) {
        bail!("the request is not sent: {e}; send fewer or smaller specs at once");
    }
    let Dialed {
        client,
        endpoint,
        addr,
    } = opts.dial().await?;
    let answer = client.call(addr, ANY_MEMBER, &req, opts.timeout).await;
    endpoint.close(0u32.into(), b"done");
    // Let the close go out before this process exits: else the agent keeps the connection until
    // its idle timeout, counted against this certificate's connections (shoal::transport::admission). The
    // connection's driver sends it as soon as it runs; draining all of it would take 3 PTOs.
    let _ = tokio::time::timeout(Duration::from_millis(2), endpoint.wait_idle()).await;
    match answer.map_err(|e| call_failed(addr, e))? {
        Response::Error(e) => Err(anyhow::anyhow!("{}", e.message)),
        other => Ok(other),
    }
}

/// A connection to one agent kept across calls (see [`session`]).
pub(super) struct Session {
    client: shoal::transport::rpc::QuicRpcClient,
    addr: SocketAddr,
}

/// A client that keeps one connection to the agent across calls (a command that calls many times,
/// like `shoal logs --follow`, makes one handshake).
pub(super) async fn session(opts: &ClientOpts) -> anyhow::Result<Session> {
    let dialed = opts.dial().await?;
    Ok(Session {
        client: dialed.client,
        addr: dialed.addr,
    })
}

/// One call over a [`session`]; an API error becomes an `Err` with its message.
pub(super) async fn session_call(
    session: &Session,
    opts: &ClientOpts,
    req: &Request,
) -> anyhow::Result<Response> {
    let answer = session
        .client
        .call(session.addr, ANY_MEMBER, req, opts.timeout)
        .await;
    match answer.map_err(|e| call_failed(session.addr, e))? {
        Response::Error(e) => Err(anyhow::anyhow!("{}", e.message)),
        other => Ok(other),
    }
}

/// What the user reads when a call to the agent at `agent` fails once connected (a failed
/// connection is told by [`super::dial::not_connected`]). Only when no answer came (none in time,
/// the connection lost mid-call) may the agent be down; a refusal or an answer this CLI cannot
/// read came from a running agent and is shown as it is.
pub(super) fn call_failed(agent: SocketAddr, e: RpcError) -> anyhow::Error {
    if let Some(why) = certificate_refused(&e.to_string()) {
        return anyhow::anyhow!("the agent at {agent} refused this CLI's certificate: {why}");
    }
    match e {
        RpcError::Timeout(within) => anyhow::anyhow!(
            "the agent at {agent} took the connection but gave no answer within {} (a busy or \
             stuck agent; --timeout waits longer)",
            shoal_core::spec::format_duration_ms(within.as_millis() as u64)
        ),
        RpcError::Connect { .. } | RpcError::Stream(_) => anyhow::Error::new(e).context(format!(
            "no answer from the agent at {agent} (is it running? set --agent or SHOAL_AGENT)"
        )),
        RpcError::Rejected(reason) => {
            anyhow::anyhow!("the agent at {agent} refused the request: {reason}")
        }
        RpcError::Wire(e @ WireError::Malformed(_)) => anyhow::anyhow!(
            "the agent at {agent} answered, but the answer cannot be read: {e} (is the agent of \
             another version than this CLI?)"
        ),
        RpcError::Wire(e) => {
            anyhow::anyhow!("the agent at {agent} answered, but the answer cannot be read: {e}")
        }
    }
}

/// Why an agent refused this CLI's certificate, from the TLS alert its connection was closed with
/// (`the cryptographic handshake failed: error N`), when it was.
pub(super) fn certificate_refused(error: &str) -> Option<String> {
    let (_, after) = error.split_once("the cryptographic handshake failed: error ")?;
    let code: u8 = after
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let why = match code {
        42 | 46 => "the agent does not accept it (bad_certificate or certificate_unknown)",
        44 => "it is revoked (certificate_revoked): issue a new one with `shoal pki issue`",
        45 => "it has expired (certificate_expired): renew it with `shoal pki renew`",
        // What an agent older than this CLI sends for a certificate of another CA whose name is
        // the same as its CA's (the signature does not verify); newer agents send unknown_ca.
        48 | 51 => {
            "it is issued by another CA than the agent's (unknown_ca): use one of this mesh's PKI"
        }
        116 => "the agent needs one and got none (certificate_required)",
        _ => {
            return Some(format!(
                "the TLS handshake failed with alert {code} ({error})"
            ))
        }
    };
    Some(why.to_string())
}

/// Follows a paged list to its end: asks `ask(after)` from `after = None`, takes the items and
/// the next `after` out of each answer with `items`, and stops when an answer names no next page.
/// Refuses an agent whose pages do not move forward (the keys must grow).
pub fn call_pages<T, K: Ord + Clone>(
    opts: &ClientOpts,
    mut ask: impl FnMut(Option<K>) -> Request,
    mut items: impl FnMut(Response) -> Option<(Vec<T>, Option<K>)>,
) -> anyhow::Result<Vec<T>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut all = Vec::new();
    let mut after: Option<K> = None;
    loop {
        let answer = runtime.block_on(call_async(opts, ask(after.clone())))?;
        let Some((page, next)) = items(answer) else {
            bail!("unexpected answer from the agent at {}", opts.agent);
        };
        all.extend(page);
        match next {
            None => return Ok(all),
            Some(next) if after.as_ref().is_some_and(|a| next <= *a) => bail!(
                "the agent at {} sent a page that does not move forward; nothing printed",
                opts.agent
            ),
            next => after = next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_certificate_is_told_as_such() {
        let lost =
            "stream failed: read error: connection lost (aborted by peer: the cryptographic \
                    handshake failed: error 44: invalid peer certificate: Revoked)";
        assert!(certificate_refused(lost).unwrap().contains("revoked"));
        let other_ca = "... the cryptographic handshake failed: error 48: invalid peer certificate";
        assert!(certificate_refused(other_ca)
            .unwrap()
            .contains("another CA"));
        let odd = "... the cryptographic handshake failed: error 80";
        assert!(certificate_refused(odd).unwrap().contains("alert 80"));
        assert_eq!(certificate_refused("connection lost (timed out)"), None);
    }
}
