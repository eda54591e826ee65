//! Where each replica's data is, from the ground truth: the host where a copy of a replica with
//! data of its own (`WorkloadSpec::keeps_replica_data`) last appeared holds its newest data. A
//! copy of an exclusive one (`WorkloadSpec::sticky`) that appears on another host started empty:
//! with `on_data_loss = "start-empty"` and at least `sticky_for` after the holder's copy was
//! last seen, that is the policy (counted); otherwise the simulator never approves, so it is a
//! violation (`started-empty`). The holders also feed the target
//! placement, as the agents' store records feed theirs.

use std::collections::{BTreeMap, BTreeSet};

use shoal_core::instance::ReplicaId;
use shoal_core::spec::OnDataLoss;

use super::{Checker, Copies};
use crate::trace::Trace;

/// What the checker knows of the replicas' data.
#[derive(Default)]
pub(crate) struct DataTrack {
    /// The host holding each replica's newest data.
    pub holder: BTreeMap<ReplicaId, u32>,
    /// The (replica, host) copies alive at the last sample.
    alive: BTreeSet<(ReplicaId, u32)>,
    /// When the holder's copy of each replica was last seen alive.
    held_until: BTreeMap<ReplicaId, u64>,
}

impl Checker {
    /// Follows data to each new copy of a replica with data; flags an exclusive one started
    /// away from its data without the spec's policy.
    pub(super) fn track_data(&mut self, now: u64, copies: &Copies, trace: &mut Trace) {
        let mut alive = BTreeSet::new();
        let mut fresh = Vec::new();
        for (r, list) in copies {
            let Some(spec) = self.latest.get(&r.workload).and_then(|(_, s)| s.as_ref()) else {
                continue;
            };
            if !spec.keeps_replica_data() {
                continue;
            }
            for c in list {
                let key = (r.clone(), c.host);
                if !self.data.alive.contains(&key) {
                    let policy = (spec.placement.on_data_loss() == OnDataLoss::StartEmpty)
                        .then(|| spec.placement.sticky_for_ms());
                    fresh.push((r.clone(), c.host, spec.sticky(), policy));
                }
                alive.insert(key);
            }
        }
        for (r, host) in &alive {
            if self.data.holder.get(r) == Some(host) {
                self.data.held_until.insert(r.clone(), now);
            }
        }
        self.data.alive = alive;
        for (r, host, sticky, policy) in fresh {
            let held = self.data.holder.insert(r.clone(), host);
            let Some(was) = held.filter(|&h| h != host) else {
                continue;
            };
            let what = format!(
                "{r} started on n{} while its data is on n{}",
                host + 1,
                was + 1
            );
            // The new owner waits `sticky_for` from when it saw the holder gone, which is after
            // the holder's copy was last alive.
            let early = policy.and_then(|sticky_for| {
                let gone = *self.data.held_until.get(&r)?;
                (now < gone.saturating_add(sticky_for)).then_some(now - gone)
            });
            self.data.held_until.insert(r.clone(), now);
            match (sticky, policy) {
                (false, _) => {
                    self.data_moved_empty += 1;
                    trace.line(now, format!("{what} (not exclusive: it moves empty)"));
                }
                (true, Some(_)) if early.is_some() => {
                    self.data_started_empty += 1;
                    let after = early.unwrap_or_default();
                    let detail = format!("{what}, {after} ms after its holder's copy was last seen, before sticky_for");
                    self.violation(trace, now, "started-empty", detail);
                }
                (true, Some(_)) => {
                    self.data_started_empty_by_policy += 1;
                    trace.line(now, format!("{what} (on_data_loss = \"start-empty\")"));
                }
                (true, None) => {
                    self.data_started_empty += 1;
                    let detail = format!("{what}, without approval or on_data_loss policy");
                    self.violation(trace, now, "started-empty", detail);
                }
            }
        }
    }
}
