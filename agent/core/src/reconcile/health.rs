//! Health of one instance from the probe results the shell feeds in, and the restart backoff.
//!
//! An instance without a probe is healthy while it runs. With a probe it starts `Unknown`; a
//! passing probe makes it healthy at once; failures during the start grace are ignored, and after
//! it `failure_threshold` consecutive failures make it unhealthy.
//!
//! The backoff ([`backoff_delay_ms`]) is Kubernetes' schedule with Shoal's knobs: the first
//! failure restarts at once, the second waits `backoff_initial`, each further one twice as long,
//! at most `backoff_max`.

use crate::spec::{HealthCheck, RestartPolicy};

/// The verdict on an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No passing probe yet (and not unhealthy).
    Unknown,
    /// Healthy since this time.
    Healthy {
        /// When it became healthy, ms.
        since_ms: u64,
    },
    /// Failed its probe past the threshold.
    Unhealthy,
}

/// Probe bookkeeping of one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Health {
    /// The current verdict.
    pub verdict: Verdict,
    /// Consecutive failures counted (outside the start grace).
    pub failures: u32,
    /// The last probe's detail, if it failed.
    pub detail: Option<String>,
}

/// What a probe result changed, returned by
/// [`Reconciler::handle_probe_result`](super::Reconciler::handle_probe_result).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthChange {
    /// No instance has this handle, or it does not run: the result was ignored.
    Ignored,
    /// The verdict stayed the same.
    Unchanged,
    /// The instance became healthy (gossip it; the reconciler may now hand off or update).
    BecameHealthy,
    /// The instance became unhealthy (the next tick stops and restarts it).
    BecameUnhealthy,
}

/// Longest probe detail kept (it travels in gossip as `last_error`).
pub(crate) const DETAIL_BYTES_MAX: usize = 256;

impl Health {
    /// Fresh health of an instance first seen at `now_ms`: healthy at once without a probe.
    pub fn new(probe: Option<&HealthCheck>, running: bool, started_at_ms: u64) -> Health {
        let verdict = match (probe, running) {
            (None, true) => Verdict::Healthy {
                since_ms: started_at_ms,
            },
            _ => Verdict::Unknown,
        };
        Health {
            verdict,
            failures: 0,
            detail: None,
        }
    }

    /// Applies one probe result. `started_at_ms` dates the start grace.
    pub fn record(
        &mut self,
        check: &HealthCheck,
        ok: bool,
        detail: &str,
        started_at_ms: u64,
        now_ms: u64,
    ) -> HealthChange {
        let before = self.verdict;
        if ok {
            self.failures = 0;
            self.detail = None;
            if !matches!(self.verdict, Verdict::Healthy { .. }) {
                self.verdict = Verdict::Healthy { since_ms: now_ms };
            }
        } else {
            self.detail = Some(truncate(detail, DETAIL_BYTES_MAX));
            let in_grace = now_ms < started_at_ms.saturating_add(check.start_grace_ms);
            if !in_grace {
                self.failures = self.failures.saturating_add(1);
                if self.failures >= check.failure_threshold.max(1) {
                    self.verdict = Verdict::Unhealthy;
                }
            }
        }
        match (before, self.verdict) {
            (Verdict::Healthy { .. }, Verdict::Healthy { .. }) => HealthChange::Unchanged,
            (_, Verdict::Healthy { .. }) => HealthChange::BecameHealthy,
            (Verdict::Unhealthy, Verdict::Unhealthy) => HealthChange::Unchanged,
            (_, Verdict::Unhealthy) => HealthChange::BecameUnhealthy,
            _ => HealthChange::Unchanged,
        }
    }

    /// Healthy since, if healthy.
    pub fn healthy_since(&self) -> Option<u64> {
        match self.verdict {
            Verdict::Healthy { since_ms } => Some(since_ms),
            _ => None,
        }
    }
}

/// The delay before the restart that follows failure number `failures` (1-based count of
/// consecutive failures), as Kubernetes does it: none after the first, then `backoff_initial_ms`
/// doubled `failures - 2` times, capped at `backoff_max_ms`. A crash is most often a one-off;
/// only a replica that fails again is held back.
pub fn backoff_delay_ms(policy: &RestartPolicy, failures: u32) -> u64 {
    if failures <= 1 {
        return 0;
    }
    let doublings = (failures - 2).min(63);
    policy
        .backoff_initial_ms
        .saturating_mul(1u64 << doublings)
        .min(policy.backoff_max_ms)
}

/// `text` cut to at most `max` bytes on a character boundary.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Probe;

    fn check() -> HealthCheck {
        HealthCheck {
            probe: Probe::Tcp { port: 80.into() },
            interval_ms: 1_000,
            timeout_ms: 500,
            failure_threshold: 3,
            start_grace_ms: 5_000,
        }
    }

    #[test]
    fn backoff_is_none_after_the_first_failure_then_doubles_and_caps() {
        let policy = RestartPolicy::default();
        let delays: Vec<u64> = (0..=8).map(|n| backoff_delay_ms(&policy, n)).collect();
        assert_eq!(
            delays,
            [0, 0, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000]
        );
        assert_eq!(backoff_delay_ms(&policy, u32::MAX), 300_000);
    }

    #[test]
    fn grace_failures_do_not_count_and_threshold_applies() {
        let c = check();
        let mut h = Health::new(Some(&c), true, 0);
        for t in [1_000, 2_000, 3_000, 4_000] {
            assert_eq!(
                h.record(&c, false, "refused", 0, t),
                HealthChange::Unchanged
            );
        }
        assert_eq!(h.failures, 0);
        assert_eq!(
            h.record(&c, true, "", 0, 4_500),
            HealthChange::BecameHealthy
        );
        assert_eq!(
            h.record(&c, false, "refused", 0, 6_000),
            HealthChange::Unchanged
        );
        assert_eq!(
            h.record(&c, false, "refused", 0, 7_000),
            HealthChange::Unchanged
        );
        assert_eq!(
            h.record(&c, false, "refused", 0, 8_000),
            HealthChange::BecameUnhealthy
        );
        assert_eq!(h.verdict, Verdict::Unhealthy);
        assert_eq!(
            h.record(&c, true, "", 0, 9_000),
            HealthChange::BecameHealthy
        );
        assert_eq!(h.healthy_since(), Some(9_000));
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
