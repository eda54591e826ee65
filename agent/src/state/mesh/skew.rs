//! Clock skew: this agent samples its peers' wall clocks ([`Request::Clock`], one peer every
//! [`CLOCK_PROBE_EVERY_ROUNDS`] anti-entropy rounds), refuses applies and deletes while its own
//! clock disagrees with most of theirs ([`shoal_core::store::skew`]), raises a `clock-skew` issue
//! (gossiped under [`CLOCK_ISSUE_KEY`]) while that lasts or while it refuses newer writes as too
//! far ahead of its clock, and counts every write it refused for either reason.
//!
//! Nothing is refused silently: the caller gets [`ErrorKind::ClockSkew`] naming the offset and
//! what to do, `shoal issues` lists the condition, and `/metrics` counts the refusals.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_core::reconcile::{issue_id, Issue, IssueKind, Layer};
use shoal_core::store::skew::{SkewConfig, SkewMonitor, SkewVerdict};

use super::view::Member;
use crate::transport::rpc::{self, RpcClient};
use crate::wire::api::{ApiError, ErrorKind, Request, Response};

/// A wall clock in milliseconds since the Unix epoch; injected so the simulator controls it
/// (what clock skew is about; re-exported as `mesh::node::WallClock`).
pub type WallClock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Anti-entropy rounds between two clock samples (one peer each, in turn).
pub const CLOCK_PROBE_EVERY_ROUNDS: u64 = 3;
/// Most peers whose clocks an agent samples, in turn: its own choice of them, by a hash of its
/// name and theirs ([`clock_peers`]). 16 turns of 0.9 s come back to a peer within 15 s, inside
/// the API connection's 30 s idle timeout, so every sample rides an open connection; in turn over
/// every member, a mesh of more than about 34 paid a QUIC handshake (two certificates, about 6 KB
/// on the wire in all) for every sample, taken and given: 13.8 KB/s per agent at 50
/// (docs/measurements.md, "What goes on the wire"). 16 fresh samples are plenty for a median
/// ([`SkewConfig::samples_min`] is 3).
pub const CLOCK_PEERS_MAX: usize = 16;
/// Longest wait for a peer's clock; a slower answer would say little anyway.
pub const CLOCK_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Chitchat key holding this node's clock-skew issue (a JSON array of at most one `Issue`).
pub const CLOCK_ISSUE_KEY: &str = "clock_issue";
/// Most refused workloads named in the issue's message.
const NAMES_IN_MESSAGE_MAX: usize = 3;

/// Why a write was refused, for the counters.
#[derive(Clone, Copy, Debug)]
pub enum Refusal {
    /// This agent's clock disagrees with most of its peers'.
    ClockOffset,
    /// This agent refused a newer write of the workload as too far ahead of its clock, or a peer
    /// refused this write as too far ahead of its own.
    NewerVersion,
}

/// The clock-skew part of one agent: its peers' clock samples and the writes refused. Its
/// dependencies are explicit: the node's name, its wall clock and the RPC client it samples
/// peers with; membership and the store's refusals are passed in.
pub struct ClockSkew {
    name: String,
    clock: WallClock,
    rpc: Arc<dyn RpcClient>,
    monitor: Mutex<SkewMonitor>,
    mono_start: tokio::time::Instant,
    refused_offset: AtomicU64,
    refused_newer: AtomicU64,
    issue_since_ms: Mutex<Option<u64>>,
}

impl ClockSkew {
    /// A monitor with no samples yet.
    pub fn new(
        config: SkewConfig,
        name: String,
        clock: WallClock,
        rpc: Arc<dyn RpcClient>,
    ) -> Self {
        ClockSkew {
            name,
            clock,
            rpc,
            monitor: Mutex::new(SkewMonitor::new(config)),
            mono_start: tokio::time::Instant::now(),
            refused_offset: AtomicU64::new(0),
            refused_newer: AtomicU64::new(0),
            issue_since_ms: Mutex::new(None),
        }
    }

    fn mono_ms(&self) -> u64 {
        self.mono_start.elapsed().as_millis() as u64
    }

    /// Counts one refused write.
    pub fn count(&self, why: Refusal) {
        let counter = match why {
            Refusal::ClockOffset => &self.refused_offset,
            Refusal::NewerVersion => &self.refused_newer,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes refused so far: (clock offset, newer version).
    pub fn refused(&self) -> (u64, u64) {
        (
            self.refused_offset.load(Ordering::Relaxed),
            self.refused_newer.load(Ordering::Relaxed),
        )
    }

    /// The skew verdict now, given the membership.
    pub fn verdict(&self, members: &[Member]) -> SkewVerdict {
        let wall = (self.clock)();
        let mono = self.mono_ms();
        let monitor = self.monitor.lock().expect("skew lock");
        monitor.verdict(wall, mono, live_peers(members, &self.name))
    }

    /// Refuses a write (and counts it) while this agent's clock disagrees with its peers'.
    pub(crate) fn refuse_write_if_skewed(
        &self,
        what: &str,
        members: &[Member],
    ) -> Result<(), ApiError> {
        let verdict = self.verdict(members);
        if !verdict.skewed {
            return Ok(());
        }
        self.count(Refusal::ClockOffset);
        tracing::warn!(what, offset_ms = ?verdict.offset_ms, "write refused: clock skew");
        Err(ApiError::new(
            ErrorKind::ClockSkew,
            format!(
                "{what} refused: {}; a version issued with this clock could lose to an older \
                 write or override a later one, so nothing was written. Fix the clock on {} \
                 (NTP: `chronyc tracking`, `timedatectl status`) or send the command to another \
                 agent (--agent)",
                self.offset_text(&verdict),
                self.name
            ),
        ))
    }

    fn offset_text(&self, v: &SkewVerdict) -> String {
        format!(
            "the clock of {} is {} ms {} its peers (median of {} sampled, {} of them more than \
             {} ms away)",
            self.name,
            v.offset_ms.unwrap_or(0).unsigned_abs(),
            v.direction(),
            v.sampled,
            v.beyond,
            v.offset_ms_max
        )
    }

    /// One clock round, from the anti-entropy loop: sample one live peer of [`clock_peers`] in
    /// turn every [`CLOCK_PROBE_EVERY_ROUNDS`] rounds.
    pub(crate) async fn sample_round(&self, round: u64, members: &[Member]) {
        if !round.is_multiple_of(CLOCK_PROBE_EVERY_ROUNDS) {
            return;
        }
        let live: Vec<_> = members
            .iter()
            .filter(|m| m.alive && m.name != self.name)
            .filter_map(|m| m.record.as_ref().map(|r| (m.name.clone(), r.api_addr)))
            .collect();
        let peers = clock_peers(&self.name, live);
        if !peers.is_empty() {
            let (peer, addr) = &peers[(round / CLOCK_PROBE_EVERY_ROUNDS) as usize % peers.len()];
            self.sample_clock(peer, *addr).await;
        }
    }

    async fn sample_clock(&self, peer: &str, addr: std::net::SocketAddr) {
        let sent = self.mono_ms();
        let answer: Result<Response, _> = rpc::call_with(
            self.rpc.as_ref(),
            addr,
            peer,
            &Request::Clock,
            CLOCK_CALL_TIMEOUT,
        )
        .await;
        let received = self.mono_ms();
        match answer {
            Ok(Response::Clock { now_ms }) => {
                let mut monitor = self.monitor.lock().expect("skew lock");
                monitor.handle_sample(peer, now_ms, sent, received);
            }
            other => tracing::debug!(%peer, answer = ?other, "clock sample failed"),
        }
    }

    /// This node's clock-skew issue, if any: its clock disagrees with its peers', or it refuses
    /// newer writes as too far ahead of its clock (`refused`: workload, version as shown, its
    /// wall time, from the store's `refused_newer_all`).
    pub(crate) fn issue(
        &self,
        members: &[Member],
        now: u64,
        refused: &[(String, String, u64)],
    ) -> Option<Issue> {
        let verdict = self.verdict(members);
        let mut parts = Vec::new();
        if verdict.skewed {
            parts.push(format!(
                "{}: applies and deletes through it are refused",
                self.offset_text(&verdict)
            ));
        }
        if !refused.is_empty() {
            let named: Vec<String> = refused
                .iter()
                .take(NAMES_IN_MESSAGE_MAX)
                .map(|(n, v, wall)| {
                    format!("{n} version {v}, {} ms ahead", wall.saturating_sub(now))
                })
                .collect();
            parts.push(format!(
                "it refused newer writes of {} workload(s) as too far ahead of its clock ({}): \
                 writes of them through it are refused until the clocks agree",
                refused.len(),
                named.join("; ")
            ));
        }
        let mut since = self.issue_since_ms.lock().expect("issue lock");
        if parts.is_empty() {
            *since = None;
            return None;
        }
        let since_ms = *since.get_or_insert(now);
        Some(Issue {
            id: issue_id(IssueKind::ClockSkew, None, &self.name),
            layer: Layer::Safety,
            kind: IssueKind::ClockSkew,
            replica: None,
            node: self.name.clone(),
            message: format!(
                "{}. Check NTP on {} and on the writers named (`chronyc tracking`)",
                parts.join("; "),
                self.name
            ),
            held: None,
            approved: false,
            since_ms,
        })
    }
}

/// The peers whose clocks `me` samples: all of `live` up to [`CLOCK_PEERS_MAX`], else the
/// [`CLOCK_PEERS_MAX`] ranked first by a hash of `me` and the peer's name (each agent its own
/// choice, unchanged while they stay live: a member joining or leaving moves at most one), in
/// the order given.
fn clock_peers<A>(me: &str, mut live: Vec<(String, A)>) -> Vec<(String, A)> {
    if live.len() <= CLOCK_PEERS_MAX {
        return live;
    }
    let rank = |peer: &str| {
        let key = format!("{me}\0{peer}");
        (xxhash_rust::xxh3::xxh3_64(key.as_bytes()), peer.to_string())
    };
    let mut ranked: Vec<_> = live.iter().map(|(name, _)| rank(name)).collect();
    ranked.sort();
    let chosen: std::collections::BTreeSet<String> = ranked
        .into_iter()
        .take(CLOCK_PEERS_MAX)
        .map(|(_, name)| name)
        .collect();
    live.retain(|(name, _)| chosen.contains(name));
    live
}

fn live_peers(members: &[Member], me: &str) -> usize {
    members.iter().filter(|m| m.alive && m.name != me).count()
}

#[cfg(test)]
mod tests {
    use super::{clock_peers, CLOCK_PEERS_MAX};

    fn names(n: usize) -> Vec<(String, ())> {
        (0..n).map(|i| (format!("n{i}"), ())).collect()
    }

    #[test]
    fn an_agent_samples_every_peer_of_a_small_mesh_and_a_stable_few_of_a_large_one() {
        assert_eq!(
            clock_peers("n0", names(CLOCK_PEERS_MAX)).len(),
            CLOCK_PEERS_MAX
        );
        let chosen = clock_peers("n0", names(200));
        assert_eq!(chosen.len(), CLOCK_PEERS_MAX);
        let at = |name: &str| name[1..].parse::<usize>().unwrap();
        assert!(
            chosen.windows(2).all(|w| at(&w[0].0) < at(&w[1].0)),
            "in the order given"
        );
        // Another agent chooses otherwise; a member joining moves at most one of the choice.
        assert_ne!(chosen, clock_peers("n1", names(200)));
        let grown = clock_peers("n0", names(201));
        let kept = grown.iter().filter(|p| chosen.contains(p)).count();
        assert!(kept >= CLOCK_PEERS_MAX - 1, "{kept} kept");
        // A chosen member leaving is replaced; the others stay.
        let mut fewer = names(200);
        fewer.retain(|p| p.0 != chosen[0].0);
        let after = clock_peers("n0", fewer);
        assert_eq!(after.len(), CLOCK_PEERS_MAX);
        assert_eq!(
            after.iter().filter(|p| chosen.contains(p)).count(),
            CLOCK_PEERS_MAX - 1
        );
    }
}
