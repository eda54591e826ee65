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
    /// In a mesh of cells: time for a spec change to reach every host (across cells through the
    /// envoys' exchanges), spread uniformly up to this.
    pub spec_cells_spread_ms: f64,
    /// Time after a cell's last host died before an agent of another cell holds it down, plus a
    /// spread up to `cell_spread_ms`. From mesh version 14 (the evidence rule): the other cells'
    /// envoys probe its members from `CELL_PROBE_MS` after the last fresh entry they heard (0.3
    /// to 1.3 s old at the death), so the failures are in when it turns stale `CELL_STALE_MS`
    /// after that entry; it leaves their `sees` at their next quick look (up to 250 ms), and
    /// their summaries reach the agents within an exchange round or two (the spread). Fitted to
    /// the real tier's `cells-small` (30 hosts, 3 cells: agents hold the lost cell down 1.75 to
    /// 3.0 s after the loss, replacements p99 3-4 s over seeds 1-10, docs/measurements.md).
    pub cell_down_ms: f64,
    /// Spread of cell news across the agents of the other cells (envoy exchanges).
    pub cell_spread_ms: f64,
    /// Time after a copy in another cell became ready before that cell answers it serving (the
    /// copies questions between cells).
    pub cell_ask_ms: u64,
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
            spec_cells_spread_ms: 3_000.0,
            cell_down_ms: (shoal_core::cells::CELL_STALE_MS + 250 - 1_300) as f64,
            cell_spread_ms: 1_500.0,
            cell_ask_ms: 1_500,
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

    /// When one host holds a spec change, after it was applied (in a mesh of `cells` or not).
    pub fn spec(&self, cells: bool, rng: &mut impl rand::Rng) -> u64 {
        let spread = match cells {
            true => self.spec_cells_spread_ms,
            false => self.spec_spread_ms,
        };
        (rng.random::<f64>() * spread) as u64
    }

    /// When an agent of another cell holds a cell down, after its last host died.
    pub fn cell_down(&self, rng: &mut impl rand::Rng) -> u64 {
        (self.cell_down_ms + rng.random::<f64>() * self.cell_spread_ms) as u64
    }

    /// When an agent of another cell learns a cell's news (back up, a new summary) that its
    /// envoys published after `published` ms.
    pub fn cell_news(&self, published: u64, rng: &mut impl rand::Rng) -> u64 {
        published + (rng.random::<f64>() * self.cell_spread_ms) as u64
    }
}
