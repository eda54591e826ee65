//! Why a handshake was refused, and how often that is logged: one info line per cause per
//! [`REFUSAL_LOG_EVERY`] with how many of that cause were passed over since, the rest at debug.
//! A flood of junk cannot hide a revoked client behind its own lines, nor flood the log. Pure:
//! the time is an argument.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

/// How often a refused handshake of one cause is logged at info per endpoint.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Why a handshake was refused, from the TLS alert this agent sent (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RefusalCause {
    /// The client's certificate is revoked (`certificate_revoked`, 44).
    Revoked,
    /// The client's certificate has expired or is not yet valid (`certificate_expired`, 45).
    Expired,
    /// The client's certificate is of another CA (`unknown_ca`, 48).
    OtherCa,
    /// The client presented no certificate (`certificate_required`, 116).
    NoCertificate,
    /// The client asked for another protocol than this endpoint's (`no_application_protocol`,
    /// 120): a gossip dialer at the API port or the reverse.
    OtherProtocol,
    /// Anything else: another alert, a broken packet, a transport error.
    Other,
}

impl RefusalCause {
    /// Every cause, in the order of the table.
    pub const ALL: [RefusalCause; 6] = [
        RefusalCause::Revoked,
        RefusalCause::Expired,
        RefusalCause::OtherCa,
        RefusalCause::NoCertificate,
        RefusalCause::OtherProtocol,
        RefusalCause::Other,
    ];

    /// The cause of a refusal quinn reports as `error` (its text names the TLS alert as
    /// `the cryptographic handshake failed: error N`).
    pub fn of(error: &str) -> RefusalCause {
        let alert = error
            .split_once("the cryptographic handshake failed: error ")
            .and_then(|(_, after)| {
                let digits = after.split(|c: char| !c.is_ascii_digit()).next()?;
                digits.parse::<u8>().ok()
            });
        match alert {
            Some(44) => RefusalCause::Revoked,
            Some(45) => RefusalCause::Expired,
            Some(48) => RefusalCause::OtherCa,
            Some(116) => RefusalCause::NoCertificate,
            Some(120) => RefusalCause::OtherProtocol,
            _ => RefusalCause::Other,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for RefusalCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefusalCause::Revoked => "revoked certificate",
            RefusalCause::Expired => "expired certificate",
            RefusalCause::OtherCa => "certificate of another CA",
            RefusalCause::NoCertificate => "no certificate",
            RefusalCause::OtherProtocol => "another protocol (ALPN)",
            RefusalCause::Other => "not a handshake this agent accepts",
        })
    }
}

/// A log line's rate limit: one per `every`, with how many were passed over since the last.
#[derive(Debug)]
pub struct LogEvery {
    every: Duration,
    last: Option<Instant>,
    passed_over: u64,
}

impl LogEvery {
    /// A limit of one line per `every`.
    pub fn new(every: Duration) -> LogEvery {
        LogEvery {
            every,
            last: None,
            passed_over: 0,
        }
    }

    /// `Some(lines passed over since the last)` when a line may be logged at `now`, `None` when
    /// it is passed over (and counted).
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|last| now < last + self.every) {
            self.passed_over += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.passed_over))
    }
}

/// One [`LogEvery`] per [`RefusalCause`]: a fixed table, whatever the traffic.
#[derive(Debug)]
pub struct RefusalLog {
    limits: [LogEvery; RefusalCause::ALL.len()],
}

impl RefusalLog {
    /// A log of one line per cause per `every`.
    pub fn new(every: Duration) -> RefusalLog {
        RefusalLog {
            limits: std::array::from_fn(|_| LogEvery::new(every)),
        }
    }

    /// `Some(refusals of this cause passed over since its last line)` when a refusal of `cause`
    /// may be logged at info at `now`.
    pub fn admit(&mut self, cause: RefusalCause, now: Instant) -> Option<u64> {
        self.limits[cause.index()].admit(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_logged_once_per_interval_and_the_next_line_counts_the_rest() {
        let mut limit = LogEvery::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(limit.admit(at(0)), Some(0));
        assert_eq!(limit.admit(at(1_000)), None);
        assert_eq!(limit.admit(at(9_999)), None);
        assert_eq!(limit.admit(at(10_000)), Some(2));
        assert_eq!(limit.admit(at(10_000)), None);
        assert_eq!(limit.admit(at(25_000)), Some(1));
    }

    #[test]
    fn each_cause_has_its_own_limit() {
        let mut log = RefusalLog::new(REFUSAL_LOG_EVERY);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // A flood of junk: one line, then silence.
        assert_eq!(log.admit(RefusalCause::Other, at(0)), Some(0));
        for _ in 0..1_000 {
            assert_eq!(log.admit(RefusalCause::Other, at(1)), None);
        }
        // A revoked client in the middle of it is still told of at once, and so is an expired one.
        assert_eq!(log.admit(RefusalCause::Revoked, at(2)), Some(0));
        assert_eq!(log.admit(RefusalCause::Expired, at(2)), Some(0));
        assert_eq!(log.admit(RefusalCause::Revoked, at(3)), None);
        assert_eq!(log.admit(RefusalCause::Other, at(10)), Some(1_000));
        assert_eq!(log.admit(RefusalCause::Revoked, at(12)), Some(1));
    }

    #[test]
    fn the_cause_is_read_from_the_alert() {
        let alert = |n: u32| {
            format!("the cryptographic handshake failed: error {n}: invalid peer certificate")
        };
        assert_eq!(RefusalCause::of(&alert(44)), RefusalCause::Revoked);
        assert_eq!(RefusalCause::of(&alert(45)), RefusalCause::Expired);
        assert_eq!(RefusalCause::of(&alert(48)), RefusalCause::OtherCa);
        assert_eq!(RefusalCause::of(&alert(116)), RefusalCause::NoCertificate);
        assert_eq!(RefusalCause::of(&alert(120)), RefusalCause::OtherProtocol);
        assert_eq!(RefusalCause::of(&alert(51)), RefusalCause::Other);
        assert_eq!(RefusalCause::of(&alert(999)), RefusalCause::Other);
        assert_eq!(RefusalCause::of("timed out"), RefusalCause::Other);
        for (i, cause) in RefusalCause::ALL.iter().enumerate() {
            assert_eq!(cause.index(), i);
        }
    }
}
