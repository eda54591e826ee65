//! The host loop's two clocks. Durations (backoffs, fencing and handoff deadlines, probe
//! intervals) run on a monotonic clock, so an NTP step cannot move them; the wall clock dates
//! what people read (events) and what outlives the process (the saved last-majority time).
//!
//! The monotonic clock reads like the wall clock at the moment it was created and then only
//! moves forward with real elapsed time: its values stay comparable with the runtimes' exit
//! times (wall clock) as long as nobody steps the clock, and never run backwards when someone
//! does.

use std::sync::Arc;

use crate::state::mesh::node::WallClock;

/// Milliseconds from a monotonic source; never decreases.
pub type MonoClock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A monotonic clock that starts at `wall()` now and advances with tokio's clock (the real
/// monotonic clock in an agent, paused time in tests).
pub fn monotonic_from(wall: &WallClock) -> MonoClock {
    let base_ms = wall();
    let origin = tokio::time::Instant::now();
    Arc::new(move || base_ms.saturating_add(origin.elapsed().as_millis() as u64))
}

/// The wall-clock time of monotonic instant `mono_ms`, as the clocks stand now.
pub fn mono_to_wall(mono_ms: u64, mono_now: u64, wall_now: u64) -> u64 {
    wall_now.saturating_sub(mono_now.saturating_sub(mono_ms))
}

/// The monotonic instant of wall-clock time `wall_ms`, as the clocks stand now (a time after
/// now maps to now: a saved value cannot be in the future of this process).
pub fn wall_to_mono(wall_ms: u64, mono_now: u64, wall_now: u64) -> u64 {
    mono_now.saturating_sub(wall_now.saturating_sub(wall_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_keep_the_distance_to_now() {
        // The wall clock was stepped 1 h forward: mono 10_000 is now, wall 3_610_000 is now.
        let (mono_now, wall_now) = (10_000, 3_610_000);
        assert_eq!(mono_to_wall(4_000, mono_now, wall_now), 3_604_000);
        assert_eq!(wall_to_mono(3_604_000, mono_now, wall_now), 4_000);
        assert_eq!(wall_to_mono(9_999_999, mono_now, wall_now), mono_now);
    }

    #[tokio::test(start_paused = true)]
    async fn monotonic_ignores_a_stepped_wall_clock() {
        let wall_ms = Arc::new(std::sync::atomic::AtomicU64::new(1_000_000));
        let w = wall_ms.clone();
        let wall: WallClock = Arc::new(move || w.load(std::sync::atomic::Ordering::Relaxed));
        let mono = monotonic_from(&wall);
        assert_eq!(mono(), 1_000_000);
        wall_ms.store(5, std::sync::atomic::Ordering::Relaxed); // stepped back
        tokio::time::advance(std::time::Duration::from_millis(250)).await;
        assert_eq!(mono(), 1_000_250);
    }
}
