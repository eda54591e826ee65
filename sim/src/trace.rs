//! The event trace of a run and its hash: the proof that a seed replays.
//!
//! Every fault fired, every API answer, every host start and stop, every checker verdict and,
//! each sampling tick, the counts the checkers saw and the network's delivery counters go into
//! one xxh3 stream. Two runs of one seed on one commit must print the same `trace_hash`; any
//! difference in chitchat's choices moves the delivery counters within a tick or two.

use xxhash_rust::xxh3::Xxh3;

/// Most trace lines kept for the report (the hash covers all of them).
pub const TRACE_LINES_MAX: usize = 5_000;

/// A run's trace.
pub struct Trace {
    hasher: Xxh3,
    lines: Vec<String>,
    dropped: u64,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            hasher: Xxh3::new(),
            lines: Vec::new(),
            dropped: 0,
        }
    }
}

impl Trace {
    /// Records a line at `t_ms` (hashed, and kept for the report while there is room).
    pub fn line(&mut self, t_ms: u64, text: impl AsRef<str>) {
        let line = format!("{:>9.3}s {}", t_ms as f64 / 1000.0, text.as_ref());
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        if self.lines.len() < TRACE_LINES_MAX {
            self.lines.push(line);
        } else {
            self.dropped += 1;
        }
    }

    /// Hashes values without keeping a line.
    pub fn digest(&mut self, values: &[u64]) {
        for v in values {
            self.hasher.update(&v.to_le_bytes());
        }
    }

    /// The hash so far, as 16 hex digits.
    pub fn hash_hex(&self) -> String {
        format!("{:016x}", self.hasher.digest())
    }

    /// The kept lines.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// Lines hashed but not kept.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}
