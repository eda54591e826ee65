//! The end of a round: keep the most urgent candidate actions within the bound, record what was
//! sent (starts in flight, stops, reloads, removals), and tidy the per-replica memory.

use std::collections::BTreeSet;

use super::action::Action;
use super::plan::Plan;
use super::track::{PendingStart, ReloadState, StopRequest};
use super::Reconciler;
use crate::instance::ReplicaId;

impl Reconciler {
    /// Keeps the most urgent candidates within the bound and records what is sent.
    pub(crate) fn select(&mut self, plan: &mut Plan, now: u64) -> Vec<Action> {
        let mut candidates = std::mem::take(&mut plan.candidates);
        candidates.sort_by(|(ra, a), (rb, b)| {
            ra.cmp(rb)
                .then_with(|| a.replica().cmp(b.replica()))
                .then_with(|| sort_key(a).cmp(&sort_key(b)))
        });
        candidates.dedup_by(|x, y| x.1 == y.1);
        if candidates.len() > self.config.actions_per_round_max {
            candidates.truncate(self.config.actions_per_round_max);
            plan.wake_at(now);
        }
        let actions: Vec<Action> = candidates.into_iter().map(|(_, a)| a).collect();
        for action in &actions {
            self.commit(action, now);
        }
        actions
    }

    fn commit(&mut self, action: &Action, now: u64) {
        match action {
            Action::Start {
                replica,
                spec,
                version,
                fence_token,
                ..
            } => {
                self.cache.insert(&replica.workload, version, spec);
                let state = self.local.replicas.entry(replica.clone()).or_default();
                state.pending_start = Some(PendingStart {
                    version: version.clone(),
                    at_ms: now,
                    waited_from_ms: now,
                    pull: None,
                    fence_token: *fence_token,
                });
                if fence_token.is_some() {
                    state.fence_token = *fence_token;
                }
                if std::mem::take(&mut state.restart_due) {
                    state.restarts = state.restarts.saturating_add(1);
                }
            }
            Action::Stop {
                handle,
                grace_ms,
                cause,
                ..
            } => {
                if let Some(t) = self.local.instances.get_mut(handle) {
                    t.stop = Some(StopRequest {
                        at_ms: now,
                        cause: *cause,
                        grace_ms: *grace_ms,
                    });
                }
            }
            Action::Reload {
                handle, version, ..
            } => {
                if let Some(t) = self.local.instances.get_mut(handle) {
                    let previous = t.reload.take().filter(|r| &r.target == version);
                    t.reload = Some(ReloadState {
                        target: version.clone(),
                        sent_at_ms: now,
                        in_flight: true,
                        attempts: previous.as_ref().map_or(0, |r| r.attempts),
                        retry_at_ms: now,
                        last_error: previous.and_then(|r| r.last_error),
                    });
                }
            }
            Action::Remove { handle, .. } => {
                if let Some(t) = self.local.instances.get_mut(handle) {
                    t.remove_sent = true;
                }
            }
        }
    }

    pub(crate) fn expire_reloads(&mut self, now: u64) {
        let timeout = self.config.reload_timeout_ms;
        let late: Vec<String> = self
            .local
            .instances
            .iter()
            .filter(|(_, t)| {
                t.reload
                    .as_ref()
                    .is_some_and(|r| r.in_flight && now >= r.sent_at_ms.saturating_add(timeout))
            })
            .map(|(h, _)| h.clone())
            .collect();
        for handle in late {
            let detail = format!("no result within {timeout} ms");
            self.handle_reload_result(&handle, false, &detail, now);
        }
    }

    /// Forgets replicas that are neither placed here nor have a record here, and dates how long
    /// each replica has had no alive instance here (its published claim, see [`exclusive`]).
    pub(crate) fn prune(&mut self) {
        // A restart is done once its stop was sent (or the instance is gone).
        let instances = &self.local.instances;
        self.restarts.retain(|h| {
            instances
                .get(h)
                .is_some_and(|t| t.alive() && t.stop.is_none())
        });
        let recorded: BTreeSet<&ReplicaId> =
            self.local.instances.values().map(|t| &t.replica).collect();
        let alive: BTreeSet<&ReplicaId> = self
            .local
            .instances
            .values()
            .filter(|t| t.alive())
            .map(|t| &t.replica)
            .collect();
        let placed = &self.placed;
        self.local.replicas.retain(|r, s| {
            placed.contains_key(r) || recorded.contains(r) || s.pending_start.is_some()
        });
        let now = self.now_ms;
        for (r, state) in self.local.replicas.iter_mut() {
            state.pending_since_ms = match alive.contains(r) || !placed.contains_key(r) {
                true => None,
                false => Some(state.pending_since_ms.unwrap_or(now)),
            };
        }
    }
}

/// A stable tie-break between actions on one replica.
fn sort_key(action: &Action) -> (u8, &str) {
    match action {
        Action::Stop { handle, .. } => (0, handle),
        Action::Reload { handle, .. } => (1, handle),
        Action::Start { version, .. } => (2, version),
        Action::Remove { handle, .. } => (3, handle),
    }
}
