//! [`ResponseLimiter`]: per-source response rate limiting for UDP (after BIND's RRL), pure: the
//! caller passes the time.
//!
//! The rule: only *amplifying* responses are limited, those more than [`AMPLIFYING_RATIO`] times
//! the size of their query. Each costs one token of its source's bucket (the source is the
//! address's /24 for IPv4, /56 for IPv6, as RRL groups them); a source out of tokens gets the
//! truncated form instead (TC=1, no records: about the query's size, so a spoofed source gains
//! nothing by reflection), and the client asks again over TCP, which cannot be spoofed. Nothing is
//! dropped: a legitimate resolver behind a limited source still gets every answer, over TCP.
//! Why not limit every response: small answers (an A record or two, NXDOMAIN) do not amplify, and
//! a legitimate heavy client (a busy resolver, a load test) must keep 20,000 and more such
//! queries per second over UDP. Why not only cap the size: a spoofed flood of SRV queries would
//! still reflect up to 5x its bytes at a victim at whatever rate the agent answers.
//!
//! The table is bounded ([`SOURCES_MAX`]): when full, sources whose buckets have refilled are
//! forgotten (they are indistinguishable from new ones); if none has, unknown sources share one
//! overflow bucket, so a flood from many spoofed prefixes is limited as one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// A response larger than this many times its query is amplifying and costs a token.
pub const AMPLIFYING_RATIO: usize = 2;
/// Amplifying responses a source may get per second, sustained.
pub const RATE_PER_SEC: u32 = 1000;
/// Amplifying responses a source may get at once after a quiet spell.
pub const BURST: u32 = 2000;
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
    /// Tokens in thousandths, so refill at any rate stays exact enough.
    milli_tokens: u64,
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

/// Per-source token buckets of amplifying UDP responses.
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
        ResponseLimiter::new(RATE_PER_SEC, BURST, SOURCES_MAX)
    }
}

impl ResponseLimiter {
    /// A limiter allowing `rate_per_sec` amplifying responses per source, `burst` at once,
    /// remembering at most `sources_max` sources.
    pub fn new(rate_per_sec: u32, burst: u32, sources_max: usize) -> Self {
        assert!(rate_per_sec > 0 && burst > 0 && sources_max > 0);
        ResponseLimiter {
            rate_per_sec,
            burst,
            sources_max,
            buckets: HashMap::new(),
            overflow: Bucket {
                milli_tokens: u64::from(burst) * 1000,
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
        if response_bytes <= query_bytes.saturating_mul(AMPLIFYING_RATIO) {
            return Verdict::Send;
        }
        let key = (from.to_canonical().is_ipv4(), Source::of(from));
        let (rate, burst) = (self.rate_per_sec, self.burst);
        if !self.buckets.contains_key(&key) && self.buckets.len() >= self.sources_max {
            // Forget the sources that are back to a full bucket: order does not matter.
            self.buckets
                .retain(|_, b| refilled(*b, now, rate, burst).milli_tokens < full(burst));
        }
        let bucket = if self.buckets.len() < self.sources_max || self.buckets.contains_key(&key) {
            self.buckets.entry(key).or_insert(Bucket {
                milli_tokens: full(burst),
                at: now,
            })
        } else {
            &mut self.overflow
        };
        *bucket = refilled(*bucket, now, rate, burst);
        if bucket.milli_tokens >= 1000 {
            bucket.milli_tokens -= 1000;
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
        assert!(self.buckets.values().all(|b| b.milli_tokens <= cap));
        assert!(self.overflow.milli_tokens <= cap);
    }
}

fn full(burst: u32) -> u64 {
    u64::from(burst) * 1000
}

fn refilled(bucket: Bucket, now: Duration, rate_per_sec: u32, burst: u32) -> Bucket {
    // A clock that went back refills nothing.
    let elapsed = now.saturating_sub(bucket.at);
    let earned = elapsed.as_micros().saturating_mul(u128::from(rate_per_sec)) / 1000;
    let tokens = u128::from(bucket.milli_tokens).saturating_add(earned);
    Bucket {
        milli_tokens: tokens.min(u128::from(full(burst))) as u64,
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
    fn small_responses_are_never_limited() {
        let mut l = ResponseLimiter::new(1, 1, 4);
        for i in 0..100_000u32 {
            let now = Duration::from_micros(u64::from(i));
            assert_eq!(
                l.handle_response(ip("10.0.0.1"), 40, 80, now),
                Verdict::Send
            );
        }
        assert_eq!(
            l.sources(),
            0,
            "small answers do not even take a table entry"
        );
    }

    #[test]
    fn amplifying_responses_slip_past_the_burst_and_refill_at_the_rate() {
        let mut l = ResponseLimiter::new(100, 10, 4);
        let from = ip("192.0.2.7");
        let sent = |l: &mut ResponseLimiter, now| {
            (0..50)
                .filter(|_| l.handle_response(from, 40, 800, now) == Verdict::Send)
                .count()
        };
        assert_eq!(sent(&mut l, Duration::ZERO), 10, "the burst");
        assert_eq!(
            sent(&mut l, Duration::ZERO),
            0,
            "then nothing at the same instant"
        );
        assert_eq!(sent(&mut l, 50 * MS), 5, "100/s for 50 ms");
        assert_eq!(
            sent(&mut l, 10_000 * MS),
            10,
            "a long pause refills only the burst"
        );
        l.check_invariants();
    }

    #[test]
    fn a_prefix_shares_a_bucket_and_other_prefixes_do_not() {
        let mut l = ResponseLimiter::new(1, 1, 8);
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
        let mut l = ResponseLimiter::new(10, 2, 3);
        let t0 = Duration::ZERO;
        for i in 0..3 {
            let from = ip(&format!("10.0.{i}.1"));
            assert_eq!(l.handle_response(from, 30, 300, t0), Verdict::Send);
        }
        // Full and nobody refilled: newcomers share the overflow bucket (burst 2).
        let newcomers: Vec<Verdict> = (3..6)
            .map(|i| l.handle_response(ip(&format!("10.0.{i}.1")), 30, 300, t0))
            .collect();
        assert_eq!(newcomers, [Verdict::Send, Verdict::Send, Verdict::Slip]);
        assert_eq!(l.sources(), 3);
        l.check_invariants();
        // A second later every bucket is full again: the old sources are forgotten.
        let later = Duration::from_secs(1);
        assert_eq!(
            l.handle_response(ip("10.0.9.1"), 30, 300, later),
            Verdict::Send
        );
        assert_eq!(l.sources(), 1);
        l.check_invariants();
    }

    #[test]
    fn a_clock_going_back_refills_nothing() {
        let mut l = ResponseLimiter::new(1000, 1, 2);
        let from = ip("10.0.0.1");
        let t = Duration::from_secs(5);
        assert_eq!(l.handle_response(from, 30, 300, t), Verdict::Send);
        assert_eq!(l.handle_response(from, 30, 300, t - 3 * MS), Verdict::Slip);
        assert_eq!(l.handle_response(from, 30, 300, t), Verdict::Slip);
        assert_eq!(l.handle_response(from, 30, 300, t + MS), Verdict::Send);
    }
}
