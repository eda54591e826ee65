//! Slow hosts in swarm scenarios (issue 28): for some seeds, one `starve` (an agent frozen for
//! part of every period) or one `slow-link` (loss and delay on one host's links). Drawn from a
//! generator of its own after the other faults, so a seed that draws neither derives exactly the
//! scenario it derived before, and the other faults' draws are unchanged where one is added.

use rand::{RngExt, SeedableRng};

use super::{Gen, FAULT_SPAN_MS, FIRST_FAULT_MS, UPGRADE_REJOIN_MS};

/// The share of seeds that draw a starve.
const STARVE_SHARE: f64 = 0.1;
/// The share of seeds that draw a slow link.
const SLOW_LINK_SHARE: f64 = 0.1;

impl Gen {
    /// Adds the seed's slow-host faults, if it draws any.
    pub(super) fn slow_faults(&mut self, seed: u64) {
        let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(seed ^ 0x736c_6f77_0000_0000);
        let starve = rng.random::<f64>() < STARVE_SHARE;
        let slow_link = rng.random::<f64>() < SLOW_LINK_SHARE;
        if starve {
            let t = FIRST_FAULT_MS + rng.random_range(0..FAULT_SPAN_MS / 100) * 100;
            let d = rng.random_range(5..=20) * 1000;
            let period = rng.random_range(2..=10) * 100;
            let frozen = rng.random_range(1..period / 100) * 100;
            let delay = match rng.random_range(0..3) {
                0 => rng.random_range(1..=20),
                _ => 0,
            };
            // The starved host is frozen most of the time: it counts against the minority that
            // may be down at once, and it is never drawn near a planned restart (a frozen agent
            // cannot restart, and `one` picks when it fires).
            let until = t + d;
            let near = |u: &(u64, u64, u32)| u.0 <= until + UPGRADE_REJOIN_MS && t < u.1;
            let upgrades_one = self.events.iter().any(|e| {
                e.body.contains("\"upgrade\"")
                    && !e.body.contains("node=")
                    && e.at_ms <= until
                    && t < e.end_ms
            });
            if self.room(t, until) && !self.upgrades.iter().any(near) && !upgrades_one {
                self.down.push((t, until, None));
                let body = format!(
                    "action = \"starve\"\ntarget = \"one\"\nfrozen = \"{frozen}ms\"\n\
                     period = \"{period}ms\"\ndelay = \"{delay}ms\"\nduration = \"{d}ms\"\n"
                );
                self.push(t, until, body);
            }
        }
        if slow_link {
            let t = FIRST_FAULT_MS + rng.random_range(0..FAULT_SPAN_MS / 100) * 100;
            let d = rng.random_range(5..=20) * 1000;
            let loss = f64::from(rng.random_range(1..=20u32)) / 100.0;
            let body = format!(
                "action = \"slow-link\"\ntarget = \"one\"\nloss = {loss}\ndelay = \"{}ms\"\n\
                 jitter = \"{}ms\"\nduration = \"{d}ms\"\n",
                rng.random_range(0..=50u32),
                rng.random_range(0..=20u32),
            );
            self.push(t, t + d, body);
        }
    }
}
