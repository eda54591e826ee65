//! Hybrid logical clock (Kulkarni et al., "Logical Physical Clocks", 2014) and the store's
//! `Version`: an HLC timestamp with the writer's node id as the tiebreak.
//!
//! An HLC timestamp stays close to physical time (its `wall_ms` is the largest physical time any
//! node that causally precedes it had seen) while ordering causally related events correctly even
//! when physical clocks disagree: whatever a node observes, its next timestamp is larger.
//!
//! The clock reads no clock: every operation takes `now_ms`, the caller's physical time in
//! milliseconds since the Unix epoch. Physical time may go backwards between calls; the clock's
//! output never does.
//!
//! **Skew bound.** A remote timestamp whose `wall_ms` is more than `drift_ms_max` ahead of the local
//! physical time is *rejected* ([`ClockError::TooFarAhead`]) and the clock is left unchanged. It is
//! not clamped: clamping would rewrite the writer's version, and two nodes would then disagree on
//! which write won. Rejecting means a node whose clock runs years ahead cannot drag every other
//! clock (and thus every later version in the cluster) years ahead with it, nor make its writes
//! win over every write for years; its writes are refused until real time catches up with them,
//! which the operator sees as writes that do not replicate.

use serde::{Deserialize, Serialize};

/// Default bound on how far a remote timestamp may run ahead of local physical time: one minute.
/// NTP keeps healthy clocks within milliseconds; a minute tolerates a badly synced host without
/// letting a broken one poison the cluster.
pub const DRIFT_MS_MAX_DEFAULT: u64 = 60_000;

/// Longest node id a [`Version`] may carry, in bytes.
pub const NODE_ID_BYTES_MAX: usize = 253;

/// One hybrid logical clock timestamp. Ordered by `wall_ms`, then `logical`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Hlc {
    /// The largest physical time (ms since the Unix epoch) known when this timestamp was issued.
    pub wall_ms: u64,
    /// Counter that orders events sharing one `wall_ms`.
    pub logical: u32,
}

impl Hlc {
    /// A timestamp from its parts.
    pub const fn new(wall_ms: u64, logical: u32) -> Self {
        Self { wall_ms, logical }
    }

    /// The smallest timestamp strictly greater than `self`. When the logical counter is full it
    /// carries into `wall_ms` (the clock then runs one millisecond ahead of physical time, which is
    /// harmless: 2^32 events in one millisecond do not happen outside a test).
    pub fn successor(self) -> Self {
        match self.logical.checked_add(1) {
            Some(logical) => Self {
                wall_ms: self.wall_ms,
                logical,
            },
            None => Self {
                wall_ms: self.wall_ms.saturating_add(1),
                logical: 0,
            },
        }
    }
}

impl std::fmt::Display for Hlc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.wall_ms, self.logical)
    }
}

/// The version of a store entry: the HLC timestamp of the write, then the id of the node that made
/// it. The derived order (timestamp first, node id as tiebreak) is total, so every node picks the
/// same winner between two writes.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Version {
    /// When the write happened.
    pub hlc: Hlc,
    /// Which node made it.
    pub node: String,
}

impl Version {
    /// A version from its parts.
    pub fn new(hlc: Hlc, node: impl Into<String>) -> Self {
        Self {
            hlc,
            node: node.into(),
        }
    }
}

/// The raw form, `wall_ms.logical@node`: what machines store, compare and send (`-o json`, store
/// keys, instance labels). [`Version::human`] is the form for people.
impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.hlc, self.node)
    }
}

impl std::str::FromStr for Version {
    type Err = String;

    /// Parses the raw form that [`Version`]'s `Display` writes, `wall_ms.logical@node`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{text:?} is not a version (expected WALL_MS.LOGICAL@NODE)");
        let (hlc, node) = text.split_once('@').ok_or_else(bad)?;
        let (wall_ms, logical) = hlc.split_once('.').ok_or_else(bad)?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(wall_ms) || !digits(logical) || node.is_empty() {
            return Err(bad());
        }
        let wall_ms = wall_ms.parse().map_err(|_| bad())?;
        let logical = logical.parse().map_err(|_| bad())?;
        Ok(Version::new(Hlc::new(wall_ms, logical), node))
    }
}

impl Version {
    /// The version for people: the UTC time of the write and the node that made it,
    /// `2026-12-01 02:03:04.123Z by n3`. Writes within one millisecond add their logical count,
    /// `2026-12-01 02:03:04.123Z #2 by n3`. Two versions compare as their texts read: by time,
    /// then count, then node.
    pub fn human(&self) -> String {
        let count = match self.hlc.logical {
            0 => String::new(),
            n => format!(" #{n}"),
        };
        format!(
            "{}{count} by {}",
            format_utc_ms(self.hlc.wall_ms),
            self.node
        )
    }
}

/// A raw version string (as the API carries it) for people: [`Version::human`] when it parses,
/// else the text unchanged.
pub fn format_version(raw: &str) -> String {
    raw.parse::<Version>()
        .map_or_else(|_| raw.to_string(), |v| v.human())
}

impl Version {
    /// Parses a version in any form the CLI shows or takes: the raw `wall_ms.logical@node`, or
    /// the human `2026-12-01 02:03:04.123Z by n3` ([`Version::human`], with its optional
    /// ` #N` count; a `T` may stand for the space between date and time). Surrounding spaces
    /// are ignored.
    pub fn parse_any(text: &str) -> Result<Version, String> {
        let text = text.trim();
        if let Ok(v) = text.parse::<Version>() {
            return Ok(v);
        }
        let bad = || {
            format!(
                "{text:?} is not a version (expected `2026-12-01 02:03:04.123Z by NODE`, as \
                 `shoal history` shows it, or WALL_MS.LOGICAL@NODE as `-o json` spells it)"
            )
        };
        let (when, node) = text.split_once(" by ").ok_or_else(bad)?;
        let node = node.trim();
        if node.is_empty() || node.contains(char::is_whitespace) {
            return Err(bad());
        }
        let (when, logical) = match when.trim().split_once(" #") {
            Some((when, count)) => (when, count.trim().parse::<u32>().map_err(|_| bad())?),
            None => (when.trim(), 0),
        };
        let wall_ms = parse_utc_ms(when).ok_or_else(bad)?;
        Ok(Version::new(Hlc::new(wall_ms, logical), node))
    }
}

/// The inverse of [`format_utc_ms`]: `2026-12-01 02:03:04.123Z` (or with `T`; the milliseconds
/// may be left out) as milliseconds since the Unix epoch. `None` when it is not such a time.
pub fn parse_utc_ms(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once([' ', 'T'])?;
    let num = |s: &str, len: usize| -> Option<u64> {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let mut d = date.splitn(3, '-');
    let (year, month, day) = (d.next()?, d.next()?, d.next()?);
    let year: u64 = (year.len() >= 4 && year.bytes().all(|b| b.is_ascii_digit()))
        .then(|| year.parse().ok())
        .flatten()?;
    let (month, day) = (num(month, 2)?, num(day, 2)?);
    let (hms, milli) = match time.split_once('.') {
        Some((hms, milli)) => (hms, num(milli, 3)?),
        None => (time, 0),
    };
    let mut t = hms.splitn(3, ':');
    let (h, m, s) = (num(t.next()?, 2)?, num(t.next()?, 2)?, num(t.next()?, 2)?);
    if !(1..=12).contains(&month) || day == 0 || day > 31 || h > 23 || m > 59 || s > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day)?;
    // A day past the month's end (`02-30`) would land in the next month: refuse it.
    if civil_from_days(days) != (year, month, day) {
        return None;
    }
    days.checked_mul(86_400_000)?
        .checked_add(h * 3_600_000 + m * 60_000 + s * 1000 + milli)
}

/// Days since 1970-01-01 of a calendar date (Howard Hinnant's `days_from_civil`); `None`
/// before 1970.
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    let y = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

/// Milliseconds since the Unix epoch as a UTC time to the millisecond, `2026-12-01 02:03:04.123Z`
/// (proleptic Gregorian calendar; years past 9999 get more digits).
pub fn format_utc_ms(ms: u64) -> String {
    const DAY_MS: u64 = 86_400_000;
    let (days, in_day) = (ms / DAY_MS, ms % DAY_MS);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// The calendar date of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`, for
/// non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z % 146_097; // day of the 400-year era
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the year starting in March
    let mp = (5 * doy + 2) / 153; // month starting in March
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Why a remote timestamp was not observed. The clock is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    /// The remote timestamp is further ahead of local physical time than the skew bound allows.
    /// Either the sender's clock or ours is wrong: check NTP on both hosts.
    #[error(
        "remote timestamp {remote} is {ahead_ms} ms ahead of local time {now_ms} ms \
         (bound {drift_ms_max} ms): check the clocks (NTP) of both hosts"
    )]
    TooFarAhead {
        /// The rejected timestamp.
        remote: Hlc,
        /// Local physical time when it was rejected.
        now_ms: u64,
        /// How far ahead it was.
        ahead_ms: u64,
        /// The bound in force.
        drift_ms_max: u64,
    },
}

/// A hybrid logical clock. Its output is strictly increasing across [`Clock::tick`] and
/// [`Clock::observe`], whatever physical time does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clock {
    last: Hlc,
    drift_ms_max: u64,
}

impl Clock {
    /// A fresh clock that accepts remote timestamps at most `drift_ms_max` ahead of local time.
    pub fn new(drift_ms_max: u64) -> Self {
        Self {
            last: Hlc::default(),
            drift_ms_max,
        }
    }

    /// A clock restarted after it (or a previous run of this node) issued or saw `high_water`:
    /// every later timestamp is strictly greater, even if physical time went backwards meanwhile.
    pub fn with_high_water(high_water: Hlc, drift_ms_max: u64) -> Self {
        Self {
            last: high_water,
            drift_ms_max,
        }
    }

    /// The last timestamp issued or observed: the high-water mark to persist.
    pub fn last(&self) -> Hlc {
        self.last
    }

    /// The skew bound in force, in milliseconds.
    pub fn drift_ms_max(&self) -> u64 {
        self.drift_ms_max
    }

    /// A timestamp for a local event (a write) at physical time `now_ms`.
    pub fn tick(&mut self, now_ms: u64) -> Hlc {
        let next = self.peek_tick(now_ms);
        self.advance(next)
    }

    /// The timestamp [`Clock::tick`] would return at `now_ms`, without changing the clock.
    pub fn peek_tick(&self, now_ms: u64) -> Hlc {
        if now_ms > self.last.wall_ms {
            Hlc::new(now_ms, 0)
        } else {
            self.last.successor()
        }
    }

    /// Receipt of `remote` at physical time `now_ms`: returns a timestamp greater than both
    /// `remote` and every timestamp this clock issued before. Rejects, leaving the clock
    /// unchanged, a `remote` too far ahead of `now_ms` (see the module doc).
    pub fn observe(&mut self, remote: Hlc, now_ms: u64) -> Result<Hlc, ClockError> {
        self.check(remote, now_ms)?;
        let wall_ms = now_ms.max(self.last.wall_ms).max(remote.wall_ms);
        let next = if wall_ms == self.last.wall_ms && wall_ms == remote.wall_ms {
            self.last.max(remote).successor()
        } else if wall_ms == self.last.wall_ms {
            self.last.successor()
        } else if wall_ms == remote.wall_ms {
            remote.successor()
        } else {
            Hlc::new(wall_ms, 0)
        };
        Ok(self.advance(next))
    }

    /// Whether [`Clock::observe`] would accept `remote` at `now_ms`, without changing the clock.
    pub fn check(&self, remote: Hlc, now_ms: u64) -> Result<(), ClockError> {
        let ahead_ms = remote.wall_ms.saturating_sub(now_ms);
        if ahead_ms > self.drift_ms_max {
            return Err(ClockError::TooFarAhead {
                remote,
                now_ms,
                ahead_ms,
                drift_ms_max: self.drift_ms_max,
            });
        }
        Ok(())
    }

    /// Raises the high-water mark to at least `seen` without the skew check: for timestamps this
    /// node accepted earlier (entries restored from its own disk).
    pub fn raise_to(&mut self, seen: Hlc) {
        self.last = self.last.max(seen);
    }

    fn advance(&mut self, next: Hlc) -> Hlc {
        assert!(
            next > self.last,
            "hlc went backwards: {next} after {}",
            self.last
        );
        self.last = next;
        next
    }
}
