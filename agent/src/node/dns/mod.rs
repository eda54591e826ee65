//! DNS on every agent: names of workloads and replicas answered from what this agent knows from
//! gossip, with no registry in the middle (`shoal agent --dns IP:PORT`).
//!
//! `table.rs`: [`EndpointTable`], every replica's instances with their node, address and health,
//! built by the host loop when something moved; `answer.rs`: [`answer`], one query's bytes to
//! the response's (pure, hickory-proto for the wire format); `limit.rs`: [`limit::ResponseLimiter`],
//! per-source rate limiting of amplifying UDP responses (pure); `server.rs`: the UDP and TCP tasks,
//! which only read the last table published.
//!
//! **Architecture Invariant:** the DNS tasks never wait for the host loop nor hold a lock across
//! an answer: they clone the `Arc` of the last table and answer from it. What they do not do:
//! recursion, forwarding, zone transfers, dynamic updates, DNSSEC.

pub mod answer;
pub mod limit;
pub mod server;
pub mod table;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub use answer::{answer, Dropped, Outcome, Transport, Zone};
pub use server::{DnsConfig, DnsServer, TableSource};
pub use table::{Endpoint, EndpointTable, HostInfo, TableInput, WorkloadEndpoints};

use crate::transport::metrics::{Family, Kind};
use hickory_proto::op::ResponseCode;

/// What the DNS server did, for `/metrics`.
#[derive(Debug, Default)]
pub struct DnsStats {
    udp: AtomicU64,
    tcp: AtomicU64,
    noerror: AtomicU64,
    nxdomain: AtomicU64,
    refused: AtomicU64,
    formerr: AtomicU64,
    other: AtomicU64,
    truncated: AtomicU64,
    short: AtomicU64,
    oversized: AtomicU64,
    not_query: AtomicU64,
    tcp_refused: AtomicU64,
    tcp_timeouts: AtomicU64,
    slipped: AtomicU64,
}

impl DnsStats {
    /// Counts one query and what came of it.
    pub fn count(&self, transport: Transport, outcome: &Outcome) {
        match transport {
            Transport::Udp => &self.udp,
            Transport::Tcp => &self.tcp,
        }
        .fetch_add(1, Relaxed);
        let counter = match outcome {
            Outcome::Reply {
                rcode, truncated, ..
            } => {
                if *truncated {
                    self.truncated.fetch_add(1, Relaxed);
                }
                match *rcode {
                    ResponseCode::NoError => &self.noerror,
                    ResponseCode::NXDomain => &self.nxdomain,
                    ResponseCode::Refused => &self.refused,
                    ResponseCode::FormErr => &self.formerr,
                    _ => &self.other,
                }
            }
            Outcome::Drop(Dropped::Short) => &self.short,
            Outcome::Drop(Dropped::Oversized) => &self.oversized,
            Outcome::Drop(Dropped::NotQuery) => &self.not_query,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// A TCP connection refused at the connection cap.
    pub fn count_tcp_refused(&self) {
        self.tcp_refused.fetch_add(1, Relaxed);
    }

    /// A TCP connection closed for its idle or write timeout.
    pub fn count_tcp_timeout(&self) {
        self.tcp_timeouts.fetch_add(1, Relaxed);
    }

    /// A UDP response sent truncated because its source was over its rate ([`limit`]).
    pub fn count_slipped(&self) {
        self.slipped.fetch_add(1, Relaxed);
    }

    /// UDP responses slipped so far (tests read it).
    pub fn slipped(&self) -> u64 {
        self.slipped.load(Relaxed)
    }

    /// Queries answered with NXDOMAIN so far (tests read it).
    pub fn nxdomain(&self) -> u64 {
        self.nxdomain.load(Relaxed)
    }

    /// The metric families.
    pub fn families(&self) -> Vec<Family> {
        let get = |c: &AtomicU64| c.load(Relaxed) as f64;
        let labelled = |key: &'static str, pairs: &[(&str, &AtomicU64)]| {
            pairs
                .iter()
                .map(|(v, c)| (vec![(key, v.to_string())], get(c)))
                .collect()
        };
        vec![
            Family {
                name: "shoal_dns_queries",
                help: "DNS queries received, by transport.",
                kind: Kind::Counter,
                samples: labelled("transport", &[("udp", &self.udp), ("tcp", &self.tcp)]),
            },
            Family {
                name: "shoal_dns_responses",
                help: "DNS responses sent, by response code.",
                kind: Kind::Counter,
                samples: labelled(
                    "rcode",
                    &[
                        ("noerror", &self.noerror),
                        ("nxdomain", &self.nxdomain),
                        ("refused", &self.refused),
                        ("formerr", &self.formerr),
                        ("other", &self.other),
                    ],
                ),
            },
            Family::single(
                "shoal_dns_truncated",
                "UDP responses truncated (TC) to the query's EDNS size or 5 times the query's size.",
                Kind::Counter,
                get(&self.truncated),
            ),
            Family::single(
                "shoal_dns_rate_limited",
                "UDP responses sent truncated (TC) because their source was over its rate of \
                 amplifying responses.",
                Kind::Counter,
                get(&self.slipped),
            ),
            Family {
                name: "shoal_dns_dropped",
                help: "DNS queries dropped without a response, by reason.",
                kind: Kind::Counter,
                samples: labelled(
                    "reason",
                    &[
                        ("short", &self.short),
                        ("oversized", &self.oversized),
                        ("not_query", &self.not_query),
                        ("tcp_timeout", &self.tcp_timeouts),
                        ("tcp_connections_max", &self.tcp_refused),
                    ],
                ),
            },
        ]
    }
}

#[cfg(test)]
mod tests;
