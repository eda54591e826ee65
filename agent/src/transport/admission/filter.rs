//! What a serving endpoint drops before quinn sees a datagram: junk made cheaper than its
//! arrival (issue 29 item 5).
//!
//! quinn answers a long header of a version it does not speak with a Version Negotiation packet
//! (a send per junk datagram), and derives keys for and tries to decrypt every Initial (HKDF,
//! header protection, AEAD over some 1,200 bytes) before anything else can refuse it. Shoal's
//! clients are Shoal binaries, which speak QUIC v1, so here:
//! - a long header whose version this endpoint does not speak is dropped unanswered (the peer's
//!   handshake times out instead of learning our versions: there is no other QUIC client to
//!   negotiate with);
//! - an Initial of a spoken version takes a token from its source's budget
//!   ([`FilterConfig::initials_per_source_per_s`], burst [`FilterConfig::initial_burst`]) and is
//!   dropped when there is none: a handshake takes 2 to 4 Initials, a junk sender's every packet
//!   takes one.
//!
//! Everything else (short headers, other long packet types) passes: quinn refuses those after a
//! hash lookup. Sources are keyed by IP address and port, so a client on the same IP as a flood
//! (loopback, a NAT) keeps its own budget. The table is bounded ([`FilterConfig::sources_max`]):
//! when it is full of recently active sources, newcomers share one overflow budget.
//! Pure: time is an argument.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

/// How often, at most, a full table is swept of sources whose budget is whole again.
const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// The filter's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterConfig {
    /// QUIC versions this endpoint speaks (quinn's supported versions).
    pub versions: Vec<u32>,
    /// Initials a source may send per second, sustained.
    pub initials_per_source_per_s: u32,
    /// Initials a source may send at once.
    pub initial_burst: u32,
    /// Sources tracked at most; beyond, new sources share one overflow budget of
    /// `initial_burst x 8` refilled at `initials_per_source_per_s x 8`.
    pub sources_max: usize,
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig {
            versions: vec![1],
            initials_per_source_per_s: 4,
            initial_burst: 8,
            sources_max: 4_096,
        }
    }
}

/// What happens to one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Handed to quinn.
    Pass,
    /// A long header of a version this endpoint does not speak (or a Version Negotiation packet,
    /// which no server expects): dropped unanswered.
    UnknownVersion,
    /// An Initial over its source's budget: dropped undecrypted.
    InitialOverBudget,
}

/// A token bucket in thousandths of a token.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    milli: u64,
    at: Instant,
}

impl Bucket {
    fn full(burst: u32, now: Instant) -> Bucket {
        Bucket {
            milli: u64::from(burst) * 1_000,
            at: now,
        }
    }

    /// Refills at `per_s` tokens a second up to `burst`, then takes one if there is one.
    fn take(&mut self, now: Instant, per_s: u32, burst: u32) -> bool {
        self.refill(now, per_s, burst);
        if self.milli < 1_000 {
            return false;
        }
        self.milli -= 1_000;
        true
    }

    fn refill(&mut self, now: Instant, per_s: u32, burst: u32) {
        let elapsed_ms = now.saturating_duration_since(self.at).as_millis() as u64;
        let cap = u64::from(burst) * 1_000;
        self.milli = (self.milli + elapsed_ms.saturating_mul(u64::from(per_s))).min(cap);
        self.at = now;
    }

    /// Whole again by `now`: the source may be forgotten.
    fn whole_at(&self, now: Instant, per_s: u32, burst: u32) -> bool {
        let mut copy = *self;
        copy.refill(now, per_s, burst);
        copy.milli >= u64::from(burst) * 1_000
    }
}

/// How many datagrams the filter passed and dropped, by verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterCounts {
    /// Handed to quinn.
    pub passed: u64,
    /// Dropped: a version not spoken here.
    pub unknown_version: u64,
    /// Dropped: an Initial over its source's budget.
    pub initial_over_budget: u64,
}

/// The datagram filter of one endpoint (see the module doc).
#[derive(Debug)]
pub struct DatagramFilter {
    config: FilterConfig,
    sources: HashMap<SocketAddr, Bucket>,
    overflow: Bucket,
    swept: Option<Instant>,
    counts: FilterCounts,
}

impl DatagramFilter {
    /// A filter with `config`'s limits; every budget starts whole.
    pub fn new(config: FilterConfig, now: Instant) -> DatagramFilter {
        assert!(config.sources_max > 0 && config.initial_burst > 0);
        let overflow = Bucket::full(config.initial_burst * 8, now);
        DatagramFilter {
            config,
            sources: HashMap::new(),
            overflow,
            swept: None,
            counts: FilterCounts::default(),
        }
    }

    /// Judges one datagram from `from` arriving at `now`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) -> Verdict {
        let verdict = self.judge(now, from, datagram);
        let counter = match verdict {
            Verdict::Pass => &mut self.counts.passed,
            Verdict::UnknownVersion => &mut self.counts.unknown_version,
            Verdict::InitialOverBudget => &mut self.counts.initial_over_budget,
        };
        *counter += 1;
        verdict
    }

    /// What was passed and dropped so far.
    pub fn counts(&self) -> FilterCounts {
        self.counts
    }

    /// Sources tracked now.
    pub fn sources(&self) -> usize {
        self.sources.len()
    }

    fn judge(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) -> Verdict {
        let Some(&first) = datagram.first() else {
            return Verdict::Pass;
        };
        // A short header, or too short to be a long one (quinn drops it cheaply).
        if first & 0x80 == 0 || datagram.len() < 5 {
            return Verdict::Pass;
        }
        let version = u32::from_be_bytes([datagram[1], datagram[2], datagram[3], datagram[4]]);
        if !self.config.versions.contains(&version) {
            return Verdict::UnknownVersion;
        }
        // Long packet type 0 is Initial in v1 and the drafts quinn speaks.
        if (first >> 4) & 0x03 != 0 {
            return Verdict::Pass;
        }
        match self.take_initial(now, from) {
            true => Verdict::Pass,
            false => Verdict::InitialOverBudget,
        }
    }

    fn take_initial(&mut self, now: Instant, from: SocketAddr) -> bool {
        let (per_s, burst) = (
            self.config.initials_per_source_per_s,
            self.config.initial_burst,
        );
        if !self.sources.contains_key(&from) && self.sources.len() >= self.config.sources_max {
            self.sweep(now);
        }
        if let Some(bucket) = self.sources.get_mut(&from) {
            return bucket.take(now, per_s, burst);
        }
        if self.sources.len() < self.config.sources_max {
            let mut bucket = Bucket::full(burst, now);
            let taken = bucket.take(now, per_s, burst);
            self.sources.insert(from, bucket);
            return taken;
        }
        self.overflow.take(now, per_s * 8, burst * 8)
    }

    /// Forgets the sources whose budget is whole again (they are like new ones), at most once
    /// per [`SWEEP_EVERY`] so that a flood of new sources at a full table costs little.
    fn sweep(&mut self, now: Instant) {
        if self.swept.is_some_and(|at| now < at + SWEEP_EVERY) {
            return;
        }
        self.swept = Some(now);
        let (per_s, burst) = (
            self.config.initials_per_source_per_s,
            self.config.initial_burst,
        );
        self.sources
            .retain(|_, bucket| !bucket.whole_at(now, per_s, burst));
    }

    /// Asserts what must hold between calls.
    pub fn check_invariants(&self) {
        assert!(self.sources.len() <= self.config.sources_max);
        let cap = u64::from(self.config.initial_burst) * 1_000;
        assert!(self.sources.values().all(|b| b.milli <= cap));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(first: u8, version: u32) -> Vec<u8> {
        let mut packet = vec![first];
        packet.extend_from_slice(&version.to_be_bytes());
        packet.resize(1_200, 0);
        packet
    }

    fn initial() -> Vec<u8> {
        long(0xC3, 1)
    }

    fn source(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn long_headers_of_other_versions_are_dropped_and_the_rest_passes() {
        let now = Instant::now();
        let mut filter = DatagramFilter::new(FilterConfig::default(), now);
        let from = source(1);
        assert_eq!(filter.handle_datagram(now, from, &initial()), Verdict::Pass);
        // Random junk with the long-header bit: a random version.
        let junk = long(0xC7, 0x1a2b_3c4d);
        assert_eq!(
            filter.handle_datagram(now, from, &junk),
            Verdict::UnknownVersion
        );
        // A Version Negotiation packet (version 0) is no client's.
        assert_eq!(
            filter.handle_datagram(now, from, &long(0x80, 0)),
            Verdict::UnknownVersion
        );
        // Short headers, v1 Handshake packets, empty and tiny datagrams are quinn's to judge.
        assert_eq!(
            filter.handle_datagram(now, from, &[0x40; 1_200]),
            Verdict::Pass
        );
        assert_eq!(
            filter.handle_datagram(now, from, &long(0xE0, 1)),
            Verdict::Pass
        );
        assert_eq!(filter.handle_datagram(now, from, &[]), Verdict::Pass);
        assert_eq!(
            filter.handle_datagram(now, from, &[0xC0, 0, 0]),
            Verdict::Pass
        );
        let counts = filter.counts();
        assert_eq!((counts.passed, counts.unknown_version), (5, 2));
    }

    #[test]
    fn a_source_sending_initials_faster_than_its_budget_is_cut_to_it() {
        let t0 = Instant::now();
        let mut filter = DatagramFilter::new(FilterConfig::default(), t0);
        let (junk, client) = (source(1), source(2));
        // 100 Initials a second for 10 s from one junk sender.
        let mut passed = 0;
        for ms in (0..10_000).step_by(10) {
            let at = t0 + Duration::from_millis(ms);
            if filter.handle_datagram(at, junk, &initial()) == Verdict::Pass {
                passed += 1;
            }
        }
        // The burst of 8, then 4 a second.
        assert!((44..=49).contains(&passed), "{passed}");
        // A client on the same IP address with its own port is not held by it: a handshake's
        // Initials (first, after Retry, two more) all pass.
        let at = t0 + Duration::from_secs(10);
        for _ in 0..4 {
            assert_eq!(
                filter.handle_datagram(at, client, &initial()),
                Verdict::Pass
            );
        }
        assert_eq!(filter.counts().initial_over_budget, 1_000 - passed);
        filter.check_invariants();
    }

    #[test]
    fn the_table_is_bounded_and_newcomers_share_the_overflow_budget() {
        let t0 = Instant::now();
        let config = FilterConfig {
            sources_max: 16,
            ..FilterConfig::default()
        };
        let mut filter = DatagramFilter::new(config, t0);
        // 1,000 sources, each sending one Initial, at once.
        let mut passed = 0;
        for port in 0..1_000 {
            if filter.handle_datagram(t0, source(port), &initial()) == Verdict::Pass {
                passed += 1;
            }
            filter.check_invariants();
        }
        // 16 tracked sources, then the shared overflow burst of 64.
        assert_eq!(filter.sources(), 16);
        assert_eq!(passed, 16 + 64);
        // Two seconds later the tracked sources are whole again and are forgotten for new ones.
        let later = t0 + Duration::from_secs(2);
        assert_eq!(
            filter.handle_datagram(later, source(5_000), &initial()),
            Verdict::Pass
        );
        assert_eq!(filter.sources(), 1);
        filter.check_invariants();
    }
}
