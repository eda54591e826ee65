//! The liveness phase (TigerBeetle's VOPR does the same): when the timeline ends, every fault
//! still in force is undone (partitions healed, link faults cleared, paused hosts resumed,
//! crashed hosts restarted, crash-looping and failing instances made healthy; clocks and drains
//! stay as the timeline left them), then every host must be up and serving, running = desired,
//! every agent must hold every acknowledged spec and see every host live, all held for
//! [`crate::check::LIVENESS_HOLD_MS`], within the scenario's `liveness_within` (60 s by default).

use shoal::identity::pki::Role;
use shoal::identity::tls::Peer;
use shoal::wire::api::{Request, Response};

use super::{views, World};
use crate::check::LivenessOutcome;
use crate::host::HostState;

/// Issues written to the trace when the phase fails.
const ISSUES_TRACED_MAX: usize = 40;

impl World {
    pub(super) async fn run_liveness(&mut self, next_tick: &mut u64, progress: &dyn Fn(u64)) {
        let start = self.now_ms();
        let within_ms = self.scenario.assert.liveness_within_ms;
        let undone = self.undo_faults();
        self.log(format!(
            "liveness phase: {}; every host must be up and converged within {within_ms} ms",
            if undone.is_empty() {
                "no fault in force".to_string()
            } else {
                undone.join(", ")
            }
        ));
        self.checker.liveness = Some(LivenessOutcome {
            started_ms: start,
            within_ms,
            undone,
            ..Default::default()
        });
        // The mesh must be whole by `start + within_ms`, and stay so for the hold.
        let end = start + within_ms + crate::check::LIVENESS_HOLD_MS;
        let passed = self.run_until(end, next_tick, progress, true).await;
        let now = self.now_ms();
        self.checker.liveness_end(now, passed, &mut self.trace);
        if !passed {
            self.trace_issues().await;
        }
    }

    /// The issues the agents' reconcilers raise (as one serving agent hears them), to show why
    /// the mesh did not come back: a stop held, an exclusive start waiting, ...
    async fn trace_issues(&mut self) {
        let Some(api) = self
            .hosts
            .iter()
            .find(|h| h.serving())
            .and_then(|h| h.api())
        else {
            return;
        };
        let answer = api
            .clone()
            .handle_request(
                Request::Issues {
                    after: None,
                    limit: ISSUES_TRACED_MAX as u32,
                },
                Peer::new("shoal-sim", Role::Client),
            )
            .await;
        let now = self.now_ms();
        let Response::Issues { issues, .. } = answer else {
            return;
        };
        for i in issues.iter().take(ISSUES_TRACED_MAX) {
            let replica = i
                .replica
                .as_ref()
                .map_or(String::new(), |r| format!(" {r}"));
            let held = i
                .held
                .as_ref()
                .map_or(String::new(), |h| format!(" (held: {h})"));
            self.trace.line(
                now,
                format!("issue on {}{replica}: {}{held}", i.node, i.message),
            );
        }
    }

    /// Undoes every fault in force; returns what it undid, in words.
    fn undo_faults(&mut self) -> Vec<String> {
        let now = self.now_ms();
        let mut undone = Vec::new();
        let cuts = self.heal_all();
        if cuts > 0 {
            undone.push(format!("{cuts} partitions healed"));
        }
        let layers = self.clear_links();
        if layers > 0 {
            undone.push(format!("{layers} link faults cleared"));
        }
        let starves = self.end_starves();
        if starves > 0 {
            undone.push(format!("{starves} starves ended"));
        }
        self.pause_held.clear();
        let paused: Vec<u32> = self
            .hosts
            .iter()
            .filter(|h| h.state == HostState::Up && !h.serving())
            .map(|h| h.index)
            .collect();
        if !paused.is_empty() {
            for &h in &paused {
                self.checker.episode_end(h, "pause", now);
            }
            self.set_paused(&paused, false);
            undone.push(format!("{} resumed", super::faults::names(&paused)));
        }
        let mut healthy = Vec::new();
        {
            let mut table = self.profiles.lock().expect("profiles");
            for (w, p) in table.workloads.iter_mut() {
                if heal(p) {
                    healthy.push(w.clone());
                }
            }
            for ((w, revision), p) in table.revisions.iter_mut() {
                if heal(p) {
                    healthy.push(format!("{w} revision {revision}"));
                }
            }
        }
        if !healthy.is_empty() {
            // The runtimes of the hosts that are up take the healthy profiles now (a host
            // started later takes them when it starts).
            for host in &self.hosts {
                crate::host::apply_profiles(&host.mem, &self.profiles);
            }
            undone.push(format!("instances of {} healthy", healthy.join(",")));
        }
        let down: Vec<u32> = self
            .hosts
            .iter()
            .filter(|h| h.state == HostState::Down)
            .map(|h| h.index)
            .collect();
        if !down.is_empty() {
            undone.push(format!("{} restarted", super::faults::names(&down)));
            self.restart(down, "the liveness phase".into(), 0);
        }
        undone
    }

    /// One liveness sample; true once every condition held for [`crate::check::LIVENESS_HOLD_MS`].
    pub(super) async fn liveness_held(&mut self) -> bool {
        let now = self.now_ms();
        let gaps = self.checker.liveness_gaps(&views(&self.hosts)).await;
        self.checker.liveness_sample(now, gaps, &mut self.trace)
    }
}

/// Makes a profile's instances healthy (no failed starts, no crash loop; the start latency
/// stays); true if it changed.
fn heal(p: &mut crate::scenario::InstanceProfile) -> bool {
    let faulty = p.start_fail > 0.0 || p.crash_after_ms.is_some();
    p.start_fail = 0.0;
    p.crash_after_ms = None;
    faulty
}
