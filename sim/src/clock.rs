//! Per-host wall clocks the simulator can jump and drift. They feed the agent's `WallClock`
//! (HLC versions of the desired-state store, staleness, generations); tokio's monotonic clock,
//! which chitchat and every timer use, is unaffected, as on a real host.

use std::sync::{Arc, Mutex};

use shoal::state::mesh::node::WallClock;

/// Wall-clock time at the start of every run (2027-01-15), in ms since the Unix epoch.
pub const BASE_MS: u64 = 1_800_000_000_000;

#[derive(Debug, Default)]
struct Skew {
    offset_ms: i64,
    drift_ppm: i64,
    drift_since_ms: u64,
}

/// One host's clock.
#[derive(Clone, Debug)]
pub struct SimClock {
    skew: Arc<Mutex<Skew>>,
    t0: tokio::time::Instant,
}

impl SimClock {
    /// A clock reading [`BASE_MS`] at `t0`.
    pub fn new(t0: tokio::time::Instant) -> Self {
        SimClock {
            skew: Arc::default(),
            t0,
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    /// Jumps by `ms` (negative: backwards) and drifts by `ppm` from now on.
    pub fn adjust(&self, jump_ms: i64, drift_ppm: Option<i64>) {
        let now = self.elapsed_ms();
        let mut s = self.skew.lock().expect("clock lock");
        // Fold the drift so far into the offset, then start the new drift from now.
        s.offset_ms += drift_ms(&s, now) + jump_ms;
        s.drift_since_ms = now;
        if let Some(ppm) = drift_ppm {
            s.drift_ppm = ppm;
        }
    }

    /// The current skew from true time, in ms.
    pub fn skew_ms(&self) -> i64 {
        let s = self.skew.lock().expect("clock lock");
        s.offset_ms + drift_ms(&s, self.elapsed_ms())
    }

    /// The agent-facing clock.
    pub fn wall_clock(&self) -> WallClock {
        let clock = self.clone();
        Arc::new(move || {
            let true_ms = BASE_MS + clock.elapsed_ms();
            true_ms.saturating_add_signed(clock.skew_ms())
        })
    }
}

fn drift_ms(s: &Skew, now_ms: u64) -> i64 {
    (now_ms.saturating_sub(s.drift_since_ms) as i64).saturating_mul(s.drift_ppm) / 1_000_000
}
