//! [`ResponseLimiter`]: per-source response rate limiting for UDP (after BIND's RRL), pure: the
//! caller passes the time.
//!
//! The rule: what is limited is the *amplification* a source gets, the bytes by which its UDP
//! responses exceed their queries. Each response costs its source's bucket (the address's /24 for
//! IPv4, /56 for IPv6, as RRL groups them) that many bytes, [`EXCESS_BYTES_PER_SEC`] a second
//! sustained; a source out of bytes gets the truncated form instead (TC=1, no records: about the
//! query's size, so a spoofed source gains nothing by reflection), and the client asks again over
//! TCP, which cannot be spoofed. Nothing is dropped: a legitimate resolver behind a limited source
//! still gets every answer, over TCP.
//!
//! Why bytes and not responses: a response no larger than its query (NXDOMAIN, REFUSED) costs
//! nothing, a small answer (an A record or three, 16 to 48 bytes over the query) little, so one
//! legitimate heavy client (a busy resolver, a load test) keeps 20,000 and more queries a second
//! over UDP, where a count of responses (RRL's unit) would cut it; a spoofed flood of the largest
//! answers (5x the query, [`super::answer::AMPLIFICATION_MAX`]) reflects at most
//! [`EXCESS_BYTES_PER_SEC`] more than its own bytes at one victim prefix, per agent.
//!
//! The table is bounded ([`SOURCES_MAX`]): when full, sources whose buckets have refilled are
//! forgotten (they are indistinguishable from new ones); if none has, unknown sources share one
//! overflow bucket, so a flood from many spoofed prefixes is limited as one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// Bytes of responses beyond their queries' a source may get per second, sustained (about 20,000
/// answers of 3 A records a second, or 5,000 of the largest a 50-byte query may get).
pub const EXCESS_BYTES_PER_SEC: u32 = 1 << 20;
/// Bytes beyond the queries' a source may get at once after a quiet spell.
pub const EXCESS_BYTES_BURST: u32 = 2 << 20;
/// Sources remembered at once.
pub const SOURCES_MAX: usize = 4096;

/// The group of addresses that share a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Source([u8; 7]);

impl Source {
    /// The /24 of an IPv4 address, the /56 of an IPv6 one (an IPv4-mapped one counts as IPv4).
    pub fn of(addr: IpAddr) -> Source {
        match addr.to_canonical() {
            IpAddr::V4(v4) => {
                let [a, b, c, _] = v4.octets();
                Source([4, a, b, c, 0, 0, 0])
            }
            IpAddr::V6(v6) => {
                let o = v6.octets();
                Source([o[0], o[1], o[2], o[3], o[4], o[5], o[6]])
            }
        }
    }
}

/// A source's key: the family and its prefix (an IPv4 /24 and an IPv6 /56 never collide).
type Key = (bool, Source);

#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Millionths of the bytes that may still go out beyond the queries' (so that a refill of a
    /// few microseconds at any rate loses nothing to rounding).
    micro_bytes: u64,
    /// When the bucket was last refilled.
    at: Duration,
}

/// What to do with one UDP response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it as it is.
    Send,
    /// Send its truncated form (TC=1, no records) instead: the source is over its rate.
    Slip,
}

/// Per-source token buckets of the bytes UDP responses add to their queries.
#[derive(Debug)]
pub struct ResponseLimiter {
    rate_per_sec: u32,
    burst: u32,
    sources_max: usize,
    buckets: HashMap<Key, Bucket>,
    /// Shared by the sources that found the table full.
    overflow: Bucket,
}

impl Default for ResponseLimiter {
    fn default() -> Self {
        ResponseLimiter::new(EXCESS_BYTES_PER_SEC, EXCESS_BYTES_BURST, SOURCES_MAX)
    }
}

impl ResponseLimiter {
    /// A limiter allowing each source `rate_per_sec` bytes beyond its queries' a second,
    /// `burst` at once, remembering at most `sources_max` sources.
    pub fn new(rate_per_sec: u32, burst: u32, sources_max: usize) -> Self {
        assert!(rate_per_sec > 0 && burst > 0 && sources_max > 0);
        ResponseLimiter {
            rate_per_sec,
            burst,
            sources_max,
            buckets: HashMap::new(),
            overflow: Bucket {
                micro_bytes: full(burst),
                at: Duration::ZERO,
            },
        }
    }

    /// Whether a response of `response_bytes` to a query of `query_bytes` from `from` goes out
    /// as it is, at `now` (any monotonic clock's time since a fixed origin).
    pub fn handle_response(
        &mut self,
        from: IpAddr,
        query_bytes: usize,
        response_bytes: usize,
        now: Duration,
    ) -> Verdict {
        let cost = (response_bytes.saturating_sub(query_bytes) as u64).saturating_mul(MICRO);
        if cost == 0 {
            return Verdict::Send;
        }
        let key = (from.to_canonical().is_ipv4(), Source::of(from));
        let (rate, burst) = (self.rate_per_sec, self.burst);
        if !self.buckets.contains_key(&key) && self.buckets.len() >= self.sources_max {
            // Forget the sources that are back to a full bucket: order does not matter.
            self.buckets
                .retain(|_, b| refilled(*b, now, rate, burst).micro_bytes < full(burst));
        }
        let bucket = if self.buckets.len() < self.sources_max || self.buckets.contains_key(&key) {
            self.buckets.entry(key).or_insert(Bucket {
                micro_bytes: full(burst),
                at: now,
            })
        } else {
            &mut self.overflow
        };
        *bucket = refilled(*bucket, now, rate, burst);
        if bucket.micro_bytes >= cost {
            bucket.micro_bytes -= cost;
            Verdict::Send
        } else {
            Verdict::Slip
        }
    }

    /// Sources remembered (tests and metrics read it).
    pub fn sources(&self) -> usize {
        self.buckets.len()
    }

    /// Asserts the bounds.
    pub fn check_invariants(&self) {
        assert!(self.buckets.len() <= self.sources_max);
        let cap = full(self.burst);
        assert!(self.buckets.values().all(|b| b.micro_bytes <= cap));
        assert!(self.overflow.micro_bytes <= cap);
    }
}

const MICRO: u64 = 1_000_000;

fn full(burst: u32) -> u64 {
    u64::from(burst) * MICRO
}

fn refilled(bucket: Bucket, now: Duration, rate_per_sec: u32, burst: u32) -> Bucket {
    // A clock that went back refills nothing.
    let elapsed = now.saturating_sub(bucket.at);
    // Bytes per second times microseconds: millionths of bytes, exactly.
    let earned = elapsed.as_micros().saturating_mul(u128::from(rate_per_sec));
    let micro_bytes = u128::from(bucket.micro_bytes).saturating_add(earned);
    Bucket {
        micro_bytes: micro_bytes.min(u128::from(full(burst))) as u64,
        at: now.max(bucket.at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn responses_no_larger_than_their_query_are_never_limited() {
        let mut l = ResponseLimiter::new(1, 1, 4);
        for i in 0..100_000u32 {
            let now = Duration::from_micros(u64::from(i));
            assert_eq!(
                l.handle_response(ip("10.0.0.1"), 40, 40, now),
                Verdict::Send
            );
            assert_eq!(
                l.handle_response(ip("10.0.0.1"), 40, 12, now),
                Verdict::Send
            );
        }
        assert_eq!(l.sources(), 0, "they do not even take a table entry");
    }

    #[test]
    fn the_excess_slips_past_the_burst_and_refills_at_the_rate() {
        // 1,000 bytes a second, 1,000 at once; each answer 100 bytes over its query.
        let mut l = ResponseLimiter::new(1000, 1000, 4);
        let from = ip("192.0.2.7");
        let sent = |l: &mut ResponseLimiter, now| {
            (0..50)
                .filter(|_| l.handle_response(from, 40, 140, now) == Verdict::Send)
                .count()
        };
        assert_eq!(sent(&mut l, Duration::ZERO), 10, "the burst");
        assert_eq!(
            sent(&mut l, Duration::ZERO),
            0,
            "then nothing at the same instant"
        );
        assert_eq!(sent(&mut l, 500 * MS), 5, "1,000 bytes/s for 500 ms");
        assert_eq!(
            sent(&mut l, 10_000 * MS),
            10,
            "a long pause refills only the burst"
        );
        // A smaller answer still fits what is left when a larger one does not.
        let t = 10_050 * MS;
        assert_eq!(l.handle_response(from, 40, 140, t), Verdict::Slip);
        assert_eq!(l.handle_response(from, 40, 80, t), Verdict::Send);
        l.check_invariants();
    }

    #[test]
    fn a_heavy_client_of_small_answers_keeps_its_rate() {
        // 20,000 answers a second, each 48 bytes over its query (3 A records), for 5 s.
        let mut l = ResponseLimiter::default();
        let from = ip("127.0.0.1");
        let slipped = (0..100_000u64)
            .filter(|i| {
                let now = Duration::from_micros(i * 50);
                l.handle_response(from, 27, 75, now) == Verdict::Slip
            })
            .count();
        assert_eq!(slipped, 0);
        // The largest answers (5x a 50-byte query) at the same rate are held near the budget.
        let mut l = ResponseLimiter::default();
        let sent = (0..100_000u64)
            .filter(|i| {
                let now = Duration::from_micros(i * 50);
                l.handle_response(from, 50, 250, now) == Verdict::Send
            })
            .count() as u64;
        let budget = (u64::from(EXCESS_BYTES_BURST) + 5 * u64::from(EXCESS_BYTES_PER_SEC)) / 200;
        assert!(
            sent <= budget && sent + 2 >= budget,
            "{sent} sent, budget {budget}"
        );
    }

    #[test]
    fn a_prefix_shares_a_bucket_and_other_prefixes_do_not() {
        let mut l = ResponseLimiter::new(1, 300, 8);
        let now = Duration::from_secs(1);
        assert_eq!(
            l.handle_response(ip("10.1.2.3"), 30, 300, now),
            Verdict::Send
        );
        assert_eq!(
            l.handle_response(ip("10.1.2.99"), 30, 300, now),
            Verdict::Slip
        );
        assert_eq!(
            l.handle_response(ip("10.1.3.3"), 30, 300, now),
            Verdict::Send
        );
        assert_eq!(
            l.handle_response(ip("::ffff:10.1.2.4"), 30, 300, now),
            Verdict::Slip
        );
        assert_eq!(
            l.handle_response(ip("fd00:1:2:300::1"), 30, 300, now),
            Verdict::Send
        );
        assert_eq!(
            l.handle_response(ip("fd00:1:2:3ff::9"), 30, 300, now),
            Verdict::Slip
        );
        assert_eq!(
            l.handle_response(ip("fd00:1:2:400::1"), 30, 300, now),
            Verdict::Send
        );
        assert_eq!(l.sources(), 4);
    }

    #[test]
    fn the_table_is_bounded_and_forgets_refilled_sources_first() {
        // 10 bytes a second, 20 at once; each answer 10 bytes over its query.
        let mut l = ResponseLimiter::new(10, 20, 3);
        let t0 = Duration::ZERO;
        for i in 0..3 {
            let from = ip(&format!("10.0.{i}.1"));
            assert_eq!(l.handle_response(from, 30, 40, t0), Verdict::Send);
        }
        // Full and nobody refilled: newcomers share the overflow bucket (two answers' worth).
        let newcomers: Vec<Verdict> = (3..6)
            .map(|i| l.handle_response(ip(&format!("10.0.{i}.1")), 30, 40, t0))
            .collect();
        assert_eq!(newcomers, [Verdict::Send, Verdict::Send, Verdict::Slip]);
        assert_eq!(l.sources(), 3);
        l.check_invariants();
        // A second later every bucket is full again: the old sources are forgotten.
        let later = Duration::from_secs(1);
        assert_eq!(
            l.handle_response(ip("10.0.9.1"), 30, 40, later),
            Verdict::Send
        );
        assert_eq!(l.sources(), 1);
        l.check_invariants();
    }

    #[test]
    fn a_clock_going_back_refills_nothing() {
        let mut l = ResponseLimiter::new(1_000_000, 270, 2);
        let from = ip("10.0.0.1");
        let t = Duration::from_secs(5);
        assert_eq!(l.handle_response(from, 30, 300, t), Verdict::Send);
        assert_eq!(l.handle_response(from, 30, 300, t - 3 * MS), Verdict::Slip);
        assert_eq!(l.handle_response(from, 30, 300, t), Verdict::Slip);
        assert_eq!(l.handle_response(from, 30, 300, t + MS), Verdict::Send);
    }
}
