//! The event trace of a run and its hash: the proof that a seed replays.
//!
//! Every fault fired, every API answer, every host start and stop, every checker verdict and,
//! each sampling tick, the counts the checkers saw and the network's delivery counters go into
//! one xxh3 stream. Two runs of one seed on one commit must print the same `trace_hash`; any
//! difference in chitchat's choices moves the delivery counters within a tick or two.

use xxhash_rust::xxh3::Xxh3;

/// Most trace lines kept for the report (the hash covers all of them): the first half of them
/// and the last half, so that the end of a long run (where a failure shows) is kept too.
pub const TRACE_LINES_MAX: usize = 5_000;

/// A run's trace.
pub struct Trace {
    hasher: Xxh3,
    /// The first `TRACE_LINES_MAX / 2` lines.
    head: Vec<String>,
    /// The last lines after them, at most `TRACE_LINES_MAX / 2`.
    tail: std::collections::VecDeque<String>,
    dropped: u64,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            hasher: Xxh3::new(),
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            dropped: 0,
        }
    }
}

impl Trace {
    /// Records a line at `t_ms` (hashed, and kept for the report while there is room: the first
    /// lines, and the last ones, the middle dropped and counted).
    pub fn line(&mut self, t_ms: u64, text: impl AsRef<str>) {
        let line = format!("{:>9.3}s {}", t_ms as f64 / 1000.0, text.as_ref());
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        if self.head.len() < TRACE_LINES_MAX / 2 {
            self.head.push(line);
            return;
        }
        if self.tail.len() == TRACE_LINES_MAX / 2 {
            self.tail.pop_front();
            self.dropped += 1;
        }
        self.tail.push_back(line);
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

    /// The kept lines: the first ones, a line saying how many were dropped if some were, and the
    /// last ones.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = self.head.clone();
        if self.dropped > 0 {
            lines.push(format!(
                "... {} lines dropped (the trace keeps its first and last {}) ...",
                self.dropped,
                TRACE_LINES_MAX / 2
            ));
        }
        lines.extend(self.tail.iter().cloned());
        lines
    }

    /// Lines hashed but not kept.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long trace keeps its first and last lines, says how many it dropped between them, and
    /// hashes every line: the same lines give the same hash whatever was kept.
    #[test]
    fn a_long_trace_keeps_its_head_and_its_tail() {
        let mut t = Trace::default();
        let n = TRACE_LINES_MAX + 10;
        for i in 0..n {
            t.line(i as u64, format!("line {i}"));
        }
        let lines = t.lines();
        assert_eq!(t.dropped(), 10);
        assert_eq!(lines.len(), TRACE_LINES_MAX + 1);
        assert!(lines[0].ends_with("line 0"));
        assert!(lines[TRACE_LINES_MAX / 2].contains("10 lines dropped"));
        assert!(
            lines[TRACE_LINES_MAX / 2 + 1].ends_with(&format!("line {}", n - TRACE_LINES_MAX / 2))
        );
        assert!(lines.last().unwrap().ends_with(&format!("line {}", n - 1)));
        let mut again = Trace::default();
        for i in 0..n {
            again.line(i as u64, format!("line {i}"));
        }
        assert_eq!(t.hash_hex(), again.hash_hex());
        let mut short = Trace::default();
        short.line(0, "only");
        assert_eq!(short.lines().len(), 1);
    }
}
