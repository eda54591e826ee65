//! How far this node's wall clock is from its peers': the evidence an agent needs before it
//! issues a version (CockroachDB's remote clock monitor, reduced to what the store needs).
//!
//! Last-writer-wins orders two writes of one workload correctly when the later one gets the
//! higher version. A write's version is at least its agent's wall clock, so an agent whose clock
//! runs far behind the others issues versions below writes that the mesh made before it and that
//! have not reached it yet; an agent far ahead issues versions that beat later writes elsewhere
//! and that its peers may refuse to store (the skew bound of [`crate::hlc`]). Either way an
//! acknowledged write can be lost, so an agent whose clock disagrees with most of its peers by
//! more than [`SkewConfig::offset_ms_max`] refuses writes until its clock is fixed.
//!
//! Samples come from asking a peer for its wall clock: the peer's reading is taken as the
//! reading at the midpoint of the round trip (NTP's estimate, off by at most half the round trip;
//! samples with a slower round trip than [`SkewConfig::rtt_ms_max`] are dropped). Each sample is
//! kept relative to this node's *monotonic* clock, so a jump of this node's wall clock shows at
//! once against every peer, without new samples; a jump of a peer's shows at its next sample.
//!
//! The monitor reads no clock: the shell passes wall and monotonic milliseconds.

use std::collections::BTreeMap;

/// Bounds and timing of the monitor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkewConfig {
    /// Largest tolerated distance between this node's wall clock and a peer's, in ms. NTP keeps
    /// clocks within milliseconds; ten seconds is far outside that and far above any round trip,
    /// yet small next to the time between two deliberate changes of one workload.
    pub offset_ms_max: u64,
    /// How long a sample counts, in ms of the monotonic clock.
    pub sample_ttl_ms: u64,
    /// Slowest round trip whose sample is kept, in ms.
    pub rtt_ms_max: u64,
    /// Fewest fresh samples before a verdict (fewer when fewer peers are live).
    pub samples_min: usize,
    /// Most peers with a sample; past it the oldest sample is dropped.
    pub peers_max: usize,
}

impl Default for SkewConfig {
    fn default() -> Self {
        SkewConfig {
            offset_ms_max: 10_000,
            sample_ttl_ms: 60_000,
            rtt_ms_max: 2_000,
            samples_min: 3,
            peers_max: 256,
        }
    }
}

#[derive(Clone, Debug)]
struct Sample {
    /// The peer's wall clock minus this node's monotonic clock, at the sample.
    peer_minus_mono_ms: i128,
    /// This node's monotonic clock when the answer arrived.
    at_mono_ms: u64,
}

/// What the monitor concludes at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SkewVerdict {
    /// Peers with a fresh sample.
    pub sampled: usize,
    /// Of them, peers whose clock is more than the bound away from this node's.
    pub beyond: usize,
    /// Median of the peers' clocks minus this node's, in ms (positive: this node is behind);
    /// `None` without a fresh sample.
    pub offset_ms: Option<i64>,
    /// True when enough peers were sampled and most of them are beyond the bound: writes here
    /// must be refused.
    pub skewed: bool,
    /// The bound in force, in ms.
    pub offset_ms_max: u64,
}

impl SkewVerdict {
    /// "behind" or "ahead of" the peers, for messages.
    pub fn direction(&self) -> &'static str {
        if self.offset_ms.unwrap_or(0) >= 0 {
            "behind"
        } else {
            "ahead of"
        }
    }
}

/// Clock samples of peers. See the module doc.
#[derive(Clone, Debug, Default)]
pub struct SkewMonitor {
    config: SkewConfig,
    samples: BTreeMap<String, Sample>,
}

impl SkewMonitor {
    /// An empty monitor.
    pub fn new(config: SkewConfig) -> Self {
        SkewMonitor {
            config,
            samples: BTreeMap::new(),
        }
    }

    /// The bounds in force.
    pub fn config(&self) -> &SkewConfig {
        &self.config
    }

    /// `peer` answered that its wall clock read `peer_wall_ms`, to a question sent at monotonic
    /// `sent_mono_ms` and answered at `received_mono_ms`. Returns false when the sample is
    /// dropped (round trip too slow or negative).
    pub fn handle_sample(
        &mut self,
        peer: &str,
        peer_wall_ms: u64,
        sent_mono_ms: u64,
        received_mono_ms: u64,
    ) -> bool {
        let Some(rtt) = received_mono_ms.checked_sub(sent_mono_ms) else {
            return false;
        };
        if rtt > self.config.rtt_ms_max {
            return false;
        }
        let midpoint = i128::from(sent_mono_ms) + i128::from(rtt) / 2;
        if !self.samples.contains_key(peer) && self.samples.len() >= self.config.peers_max {
            super::evict_oldest(&mut self.samples, |s| s.at_mono_ms);
        }
        self.samples.insert(
            peer.to_owned(),
            Sample {
                peer_minus_mono_ms: i128::from(peer_wall_ms) - midpoint,
                at_mono_ms: received_mono_ms,
            },
        );
        true
    }

    /// Drops `peer`'s sample (it left the mesh).
    pub fn forget(&mut self, peer: &str) {
        self.samples.remove(peer);
    }

    /// Each fresh sample's offset (the peer's clock minus this node's) at wall `wall_ms` and
    /// monotonic `mono_ms`, by peer.
    pub fn offsets(&self, wall_ms: u64, mono_ms: u64) -> impl Iterator<Item = (&str, i64)> {
        let ttl = self.config.sample_ttl_ms;
        self.samples
            .iter()
            .filter(move |(_, s)| mono_ms.saturating_sub(s.at_mono_ms) <= ttl)
            .map(move |(p, s)| {
                let offset = s.peer_minus_mono_ms + i128::from(mono_ms) - i128::from(wall_ms);
                let offset = offset.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
                (p.as_str(), offset)
            })
    }

    /// The verdict at wall `wall_ms` and monotonic `mono_ms`, with `peers_live` live peers: skewed
    /// when at least `min(samples_min, peers_live)` peers (and at least one) have a fresh sample
    /// and a strict majority of them are more than the bound away. A strict majority, so that in
    /// a mesh of three one wrong clock does not stop writes on the two right ones (in a mesh of
    /// two nobody can tell which clock is wrong, and both refuse).
    pub fn verdict(&self, wall_ms: u64, mono_ms: u64, peers_live: usize) -> SkewVerdict {
        let mut offsets: Vec<i64> = self.offsets(wall_ms, mono_ms).map(|(_, o)| o).collect();
        offsets.sort_unstable();
        let bound = self.config.offset_ms_max;
        let beyond = offsets.iter().filter(|o| o.unsigned_abs() > bound).count();
        let sampled = offsets.len();
        let enough = sampled >= self.config.samples_min.min(peers_live).max(1);
        SkewVerdict {
            sampled,
            beyond,
            offset_ms: offsets.get(sampled / 2).copied(),
            skewed: enough && beyond * 2 > sampled,
            offset_ms_max: bound,
        }
    }
}
