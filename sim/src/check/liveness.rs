//! Every scheduled event takes effect or the run fails, and the liveness phase: after the
//! timeline, every fault is undone and the mesh must come back whole within a bound.
//!
//! An event that cannot take effect (a selector that matches no host, a restart of a host that
//! is up, a spec change still postponed when the timeline ends, ...) is an [`EventFailure`]:
//! one line naming the event and why, in the trace, the report and the summary.

use std::collections::BTreeSet;

use serde::Serialize;

use super::agents::{holds, live_set};
use super::{Checker, HostView};
use crate::host::HostState;
use crate::trace::Trace;

/// How long every liveness condition must hold before the phase passes.
pub const LIVENESS_HOLD_MS: u64 = 2_000;
/// Gaps listed at most when the phase fails (the first ones, in host and replica order).
const GAPS_SHOWN_MAX: usize = 8;

/// A scheduled event that could not take effect.
#[derive(Clone, Debug, Serialize)]
pub struct EventFailure {
    /// When it was found (sim ms).
    pub t_ms: u64,
    /// The event (`crash at 25.000s (line 47)`).
    pub event: String,
    /// Why it could not take effect.
    pub why: String,
}

/// What the liveness phase did and whether the mesh came back.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LivenessOutcome {
    /// When it started (the end of the timeline, sim ms).
    pub started_ms: u64,
    /// The bound: every condition must hold within this long of the start.
    pub within_ms: u64,
    /// What it undid: partitions healed, link faults cleared, hosts resumed and restarted,
    /// instance profiles made healthy.
    pub undone: Vec<String>,
    /// Since when every condition has held (sim ms), if they do.
    pub held_since_ms: Option<u64>,
    /// From the start of the phase to the time every condition held.
    pub converged_after_ms: Option<u64>,
    /// Every condition held for [`LIVENESS_HOLD_MS`] within the bound.
    pub passed: bool,
    /// What did not hold when the bound ran out (empty when passed).
    pub gaps: Vec<String>,
}

impl Checker {
    /// Records that `event` could not take effect, and why (fails the run).
    pub fn event_failed(&mut self, trace: &mut Trace, t_ms: u64, event: &str, why: String) {
        trace.line(t_ms, format!("EVENT FAILED {event}: {why}"));
        self.event_failures.push(EventFailure {
            t_ms,
            event: event.to_string(),
            why,
        });
    }

    /// What keeps the mesh from being whole at `now`: hosts not up and serving, running !=
    /// desired, an agent missing an acknowledged spec, an agent whose live set misses a host.
    /// Empty when every liveness condition holds.
    pub async fn liveness_gaps(&self, hosts: &[HostView<'_>]) -> Vec<String> {
        let mut gaps = Vec::new();
        for h in hosts {
            match h.state {
                HostState::Down => gaps.push(format!("{} is down", h.name)),
                HostState::Starting => gaps.push(format!("{} is still starting", h.name)),
                HostState::Up if !h.serving() => gaps.push(format!("{} is paused", h.name)),
                HostState::Up => {}
            }
        }
        if let Some(gap) = &self.convergence_gap {
            gaps.push(format!("running != desired: {gap}"));
        }
        // An agent's live set holds the hosts of its own cell (every host without cells).
        let mut cells: std::collections::BTreeMap<Option<&str>, BTreeSet<u32>> = Default::default();
        for h in hosts {
            cells.entry(h.cell).or_default().insert(h.index);
        }
        for h in hosts.iter().filter(|h| h.serving()) {
            for (w, (version, _)) in &self.latest {
                let held = holds(h, w).await;
                if held.as_ref() != Some(version) {
                    let held = held.flatten().unwrap_or_else(|| "nothing".into());
                    let want = version.as_deref().unwrap_or("deleted");
                    gaps.push(format!(
                        "{} holds {w} at {held}, acknowledged {want}",
                        h.name
                    ));
                }
            }
            let Some(node) = h.node else { continue };
            let chitchat = node.gossip().chitchat();
            let Ok(guard) = chitchat.try_lock() else {
                gaps.push(format!("{}'s gossip state is busy", h.name));
                continue;
            };
            let live = live_set(&guard);
            let missing: Vec<String> = cells[&h.cell]
                .difference(&live)
                .map(|x| format!("n{}", x + 1))
                .collect();
            if !missing.is_empty() {
                gaps.push(format!(
                    "{} does not see {} live",
                    h.name,
                    missing.join(",")
                ));
            }
        }
        gaps
    }

    /// One liveness sample: `gaps` is what [`Checker::liveness_gaps`] found at `now`.
    /// Returns true once every condition has held for [`LIVENESS_HOLD_MS`].
    pub fn liveness_sample(&mut self, now: u64, gaps: Vec<String>, trace: &mut Trace) -> bool {
        let live = self.liveness.get_or_insert_with(Default::default);
        if !gaps.is_empty() {
            if live.held_since_ms.take().is_some() {
                trace.line(now, format!("liveness lost: {}", gaps.join("; ")));
            }
            live.gaps = gaps;
            return false;
        }
        live.gaps.clear();
        let since = *live.held_since_ms.get_or_insert(now);
        if since == now {
            trace.line(
                now,
                "liveness: every host up, running = desired, views whole",
            );
        }
        now - since >= LIVENESS_HOLD_MS
    }

    /// The phase ended at `now`: passed when the conditions held long enough within the bound.
    pub fn liveness_end(&mut self, now: u64, passed: bool, trace: &mut Trace) {
        let live = self.liveness.get_or_insert_with(Default::default);
        live.passed = passed;
        live.converged_after_ms = live
            .held_since_ms
            .filter(|_| passed)
            .map(|t| t - live.started_ms);
        if !passed && live.gaps.is_empty() {
            // Whole at the last sample, but too late to hold long enough within the bound.
            if let Some(since) = live.held_since_ms {
                live.gaps.push(format!(
                    "whole only from {} ms after the timeline ended, past the {} ms bound",
                    since.saturating_sub(live.started_ms),
                    live.within_ms
                ));
            }
        }
        live.gaps.truncate(GAPS_SHOWN_MAX);
        let line = match passed {
            true => format!(
                "liveness held {} ms after the timeline ended",
                live.converged_after_ms.unwrap_or(0)
            ),
            false => format!(
                "LIVENESS FAILED: not whole within {} ms of the timeline's end: {}",
                live.within_ms,
                live.gaps.join("; ")
            ),
        };
        trace.line(now, line);
    }
}
