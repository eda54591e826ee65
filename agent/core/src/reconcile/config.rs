//! The reconciler's bounds and timers, with defaults chosen against the mesh's failure detector
//! (250 ms gossip, phi 7: a dead peer is confirmed within a few seconds).

use thiserror::Error;

/// Bounds and timers of the [`Reconciler`](super::Reconciler). Every agent of a cluster should run
/// the same values: the fencing rule compares one agent's `fencing_delay_ms` with another's
/// `self_fence_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileConfig {
    /// Most actions one [`handle_tick`](super::Reconciler::handle_tick) returns (default 64). The
    /// rest waits for the next tick, most urgent first (fencing, then failed instances, then
    /// starts, updates, handoffs and clean-up).
    pub actions_per_round_max: usize,
    /// Most runtime instances the reconciler tracks (default 4096). Above it, it takes no action
    /// and raises a runtime issue: a runtime listing that many instances is itself a fault.
    pub instances_max: usize,
    /// Grace given to an instance stopped for any reason but fencing, between the polite signal
    /// and the kill (default 10 s).
    pub stop_grace_ms: u64,
    /// How long after a stop's grace the stop is sent again if the instance still runs
    /// (default 10 s).
    pub stop_retry_ms: u64,
    /// How long a started instance may take to appear in the runtime's list before the start
    /// counts as failed (default 30 s).
    pub start_report_timeout_ms: u64,
    /// How long a normal orphan (here, but now placed elsewhere) runs at most while waiting for the
    /// new owner's copy to be healthy (default 60 s).
    pub orphan_handoff_max_ms: u64,
    /// How long the new owner's copy must be seen serving, the owner live throughout, before
    /// a normal orphan stops for it (default 3 s): a gossiped "serving" of an owner that just
    /// crashed, or of its previous incarnation, is not trusted before the failure detector had
    /// time to say so.
    pub handoff_confirm_ms: u64,
    /// How long an agent that sees no strict majority of the last known membership keeps its
    /// exclusive replicas before stopping them (default 10 s).
    pub self_fence_ms: u64,
    /// Grace of a fencing stop (default 2 s): short, because the fencing rule counts on it.
    pub fence_stop_grace_ms: u64,
    /// How old the last confirmation from a peer that it holds this node live may be and still
    /// count toward being heard by a majority (default 3 s; the shell asks every second while
    /// it owns an exclusive replica).
    pub heard_window_ms: u64,
    /// How long after a peer is confirmed dead a new owner waits before starting an exclusive
    /// replica that peer may still run (default 20 s). Must exceed `heard_window_ms +
    /// self_fence_ms + fence_stop_grace_ms`; the surplus covers the two failure detectors not
    /// agreeing to the millisecond.
    pub fencing_delay_ms: u64,
    /// How long an exclusive replica may wait on something the mesh cannot decide (an owner
    /// unreachable but not confirmed dead, no majority, a live peer that published no state)
    /// before the wait becomes an issue held for `shoal approve` (default 30 s).
    pub exclusive_undecided_max_ms: u64,
    /// How long a node publishes its claim on an exclusive replica (a `pending` entry in its
    /// observed state) before starting it (default 3 s, longer than gossip takes to spread): two
    /// nodes that both believe they own it (placement views differ while membership changes) see
    /// each other's claim first, and only the lower node name proceeds.
    pub exclusive_claim_ms: u64,
    /// In a mesh of several cells, how long after a cell went down (in this agent's view) an
    /// exclusive replica may start (default 30 s): that cell may still run a copy until it
    /// notices it lost its quorum of cells (up to [`CELL_NOTICE_MS`]), then `self_fence_ms` and
    /// `fence_stop_grace_ms`; it must exceed their sum.
    pub cell_claim_ms: u64,
    /// In a mesh of several cells, how long a node publishes its claim on an exclusive replica
    /// before starting it (default 12 s; replaces `exclusive_claim_ms` there). The other cells
    /// see the claim in their answers, which count for 3 s (the shell asks every second): two
    /// cells that both claim it must each see the other's claim, or its copy, before either
    /// starts, so it must exceed twice that plus a cell's gossip spread (docs/reconcile.md).
    pub cell_live_claim_ms: u64,
    /// Most orphans (instances here no longer placed here) that may be stopped on the reconciler's
    /// own authority when they are more than half of this node's live instances (default 3; a
    /// draining node is exempt). At or above it the view is suspicious and such stops are held.
    pub mass_stop_min: usize,
    /// How long a reload hook may run before it counts as failed (default 30 s).
    pub reload_timeout_ms: u64,
    /// Delay before a failed reload hook is tried again (default 10 s).
    pub reload_retry_ms: u64,
    /// Failed reloads of one instance after which the change is rolled out by replacement
    /// instead (default 3).
    pub reload_attempts_max: u32,
    /// How long a copy at a rollout's new version must have served, as this agent saw it,
    /// before the rollout counts its replica as updated and takes the next one down (default
    /// 1 s; Nomad's `min_healthy_time`, Kubernetes' `minReadySeconds`). Until then the replica
    /// counts as unavailable. Without it, a copy of a version that exits at once is `running`
    /// and, without a health check, healthy for the instant before its exit is seen; an agent
    /// that read it then took a second replica down (`rollout_auto`, CI stop 50).
    pub update_settle_ms: u64,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            actions_per_round_max: 64,
            instances_max: 4096,
            stop_grace_ms: 10_000,
            stop_retry_ms: 10_000,
            start_report_timeout_ms: 30_000,
            orphan_handoff_max_ms: 60_000,
            handoff_confirm_ms: 3_000,
            self_fence_ms: 10_000,
            fence_stop_grace_ms: 2_000,
            heard_window_ms: 3_000,
            fencing_delay_ms: 20_000,
            exclusive_undecided_max_ms: 30_000,
            exclusive_claim_ms: 3_000,
            cell_claim_ms: 30_000,
            cell_live_claim_ms: 12_000,
            mass_stop_min: 3,
            reload_timeout_ms: 30_000,
            reload_retry_ms: 10_000,
            reload_attempts_max: 3,
            update_settle_ms: 1_000,
        }
    }
}

/// A [`ReconcileConfig`] that would make the reconciler unsafe or stuck.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// A bound that must be at least 1 is 0.
    #[error("{field} is 0; it must be at least 1")]
    Zero {
        /// The field's name.
        field: &'static str,
    },
    /// The fencing delay does not exceed self-fencing plus its stop grace: a new owner could start
    /// an exclusive replica while the old owner still runs it.
    #[error(
        "fencing_delay_ms ({fencing_delay_ms}) must exceed heard_window_ms + self_fence_ms + \
         fence_stop_grace_ms ({fence_total_ms}); raise fencing_delay_ms or lower self_fence_ms"
    )]
    FencingDelayTooShort {
        /// The configured fencing delay.
        fencing_delay_ms: u64,
        /// `heard_window_ms + self_fence_ms + fence_stop_grace_ms`.
        fence_total_ms: u64,
    },
    /// The claim delay across cells does not exceed the time a cut-off cell takes to notice and
    /// fence its copy.
    #[error(
        "cell_claim_ms ({cell_claim_ms}) must exceed the cells' notice bound + self_fence_ms + \
         fence_stop_grace_ms ({cell_total_ms}); raise cell_claim_ms or lower self_fence_ms"
    )]
    CellClaimTooShort {
        /// The configured claim delay across cells.
        cell_claim_ms: u64,
        /// `CELL_NOTICE_MS + self_fence_ms + fence_stop_grace_ms`.
        cell_total_ms: u64,
    },
}

/// How long after another cell holds this node's cell down (its summary unheard for
/// [`CELL_DOWN_MS`](crate::cells::CELL_DOWN_MS)) this node learns that it lost that cell, at
/// most, when the other cell can still reach it: that cell's next summary (published every
/// second, without this cell among those it holds up) reaches this cell's envoys and then this
/// node within a few exchange rounds; when it cannot, this node holds that cell down itself
/// [`CELL_DOWN_MS`](crate::cells::CELL_DOWN_MS) after its last summary. `cell_claim_ms` must
/// exceed it plus self-fencing.
pub const CELL_NOTICE_MS: u64 = crate::cells::CELL_DOWN_MS + 2_000;

impl ReconcileConfig {
    /// Checks the rules the reconciler relies on. [`Reconciler::new`](super::Reconciler::new)
    /// panics on a config that fails this, so call it first on operator-supplied values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let counts = [
            ("actions_per_round_max", self.actions_per_round_max as u64),
            ("instances_max", self.instances_max as u64),
            ("mass_stop_min", self.mass_stop_min as u64),
            ("reload_attempts_max", u64::from(self.reload_attempts_max)),
            ("orphan_handoff_max_ms", self.orphan_handoff_max_ms),
            ("self_fence_ms", self.self_fence_ms),
            ("heard_window_ms", self.heard_window_ms),
        ];
        if let Some((field, _)) = counts.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Zero { field });
        }
        let fence_total_ms = self
            .heard_window_ms
            .saturating_add(self.self_fence_ms)
            .saturating_add(self.fence_stop_grace_ms);
        if self.fencing_delay_ms <= fence_total_ms {
            return Err(ConfigError::FencingDelayTooShort {
                fencing_delay_ms: self.fencing_delay_ms,
                fence_total_ms,
            });
        }
        let cell_total_ms = CELL_NOTICE_MS
            .saturating_add(self.self_fence_ms)
            .saturating_add(self.fence_stop_grace_ms);
        if self.cell_claim_ms <= cell_total_ms {
            return Err(ConfigError::CellClaimTooShort {
                cell_claim_ms: self.cell_claim_ms,
                cell_total_ms,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(ReconcileConfig::default().validate(), Ok(()));
    }

    #[test]
    fn fencing_delay_must_exceed_heard_window_self_fence_and_grace() {
        let config = ReconcileConfig {
            fencing_delay_ms: 15_000,
            ..ReconcileConfig::default()
        };
        let err = config.validate().unwrap_err();
        assert!(matches!(
            err,
            ConfigError::FencingDelayTooShort {
                fence_total_ms: 15_000,
                ..
            }
        ));
        let just_enough = ReconcileConfig {
            fencing_delay_ms: 15_001,
            ..ReconcileConfig::default()
        };
        assert_eq!(just_enough.validate(), Ok(()));
        assert!(err.to_string().contains("raise fencing_delay_ms"));
    }

    #[test]
    fn zero_bounds_are_refused() {
        let config = ReconcileConfig {
            actions_per_round_max: 0,
            ..ReconcileConfig::default()
        };
        assert_eq!(
            config.validate(),
            Err(ConfigError::Zero {
                field: "actions_per_round_max"
            })
        );
    }
}
