//! The gossip-delay model and its calibration against the real-code tier.

use rand::RngExt;

/// Delays of the model tier, in ms. Defaults are fitted to the real-code tier (chitchat 0.11.2,
/// 250 ms gossip, phi 6, 100-sample window): failure detection per observer measured p50
/// 1300 ms at 20 hosts and 1600 ms at 100 hosts, spread (max - min) about 500 ms.
#[derive(Clone, Debug)]
pub struct Delays {
    /// Detection time independent of the mesh size.
    pub detect_base_ms: f64,
    /// Extra detection time per doubling of the mesh (epidemic depth of the last heartbeat).
    pub detect_per_log2_ms: f64,
    /// Uniform spread across observers.
    pub detect_spread_ms: f64,
    /// Time for a restarted agent to join (its name check) before peers can see it.
    pub join_ms: f64,
    /// Time for a spec change to reach a host (anti-entropy), spread uniformly up to this.
    pub spec_spread_ms: f64,
    /// Time for a host's published observed state to reach the other hosts (gossip of
    /// `Reconciler::observed`), including the round that reads it.
    pub report_ms: u64,
}

impl Default for Delays {
    fn default() -> Self {
        Delays {
            detect_base_ms: 600.0,
            detect_per_log2_ms: 130.0,
            detect_spread_ms: 500.0,
            join_ms: 2_100.0,
            spec_spread_ms: 700.0,
            report_ms: 500,
        }
    }
}

impl Delays {
    /// When one observer sees a crash, after the crash.
    pub fn detection(&self, nodes: u32, rng: &mut impl rand::Rng) -> u64 {
        let depth = f64::from(nodes.max(2)).log2();
        let spread = rng.random::<f64>() * self.detect_spread_ms;
        (self.detect_base_ms + self.detect_per_log2_ms * depth + spread) as u64
    }

    /// When one observer sees a restarted host, after the restart.
    pub fn join(&self, rng: &mut impl rand::Rng) -> u64 {
        (self.join_ms + rng.random::<f64>() * self.detect_spread_ms) as u64
    }

    /// When one host holds a spec change, after it was applied.
    pub fn spec(&self, rng: &mut impl rand::Rng) -> u64 {
        (rng.random::<f64>() * self.spec_spread_ms) as u64
    }
}
