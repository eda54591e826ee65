//! Changes to the store, in two steps: `prepare_*` decides what would change (a [`Plan`]), the
//! shell makes the plan durable, and [`Store::commit`] applies it.

use std::collections::BTreeMap;

use super::{Body, Entry, Rejection, Store, StoreError};
use crate::hlc::{Hlc, Version};

/// What a change would do to the store: entries to put, tombstones to purge, and the entries of a
/// merge that were refused. Persist `puts`, `purges` and `hlc_high_water` in one transaction, then
/// [`Store::commit`] it. Commit plans one at a time, in the order they were prepared.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a plan changes nothing until it is committed"]
pub struct Plan {
    puts: Vec<Entry>,
    purges: Vec<(String, Version)>,
    rejected: Vec<(String, Rejection)>,
    hlc_high_water: Hlc,
}

impl Plan {
    /// Entries to write, one per name, each winning over the name's current entry.
    pub fn puts(&self) -> &[Entry] {
        &self.puts
    }

    /// Lets the caller fill in the proof of each entry to write (a local write's signature)
    /// before the plan is persisted. Nothing else may change: the plan was checked as it is.
    pub fn seal_puts(&mut self, mut seal: impl FnMut(&mut Entry)) {
        for entry in &mut self.puts {
            seal(entry);
        }
    }

    /// Names of the tombstones to purge.
    pub fn purges(&self) -> impl Iterator<Item = &str> {
        self.purges.iter().map(|(name, _)| name.as_str())
    }

    /// Entries of a merge that were refused, with the reason (stale entries are not listed: they
    /// are simply older than what the store holds).
    pub fn rejected(&self) -> &[(String, Rejection)] {
        &self.rejected
    }

    /// The clock's high-water mark once the plan is committed: persist it with the plan, so that
    /// a restarted node never issues a version below one it issued or accepted.
    pub fn hlc_high_water(&self) -> Hlc {
        self.hlc_high_water
    }

    /// True when committing would change no entry.
    pub fn is_noop(&self) -> bool {
        self.puts.is_empty() && self.purges.is_empty()
    }
}

/// What a merge of remote entries did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeOutcome {
    /// Names whose entry changed, in order.
    pub changed: Vec<String>,
    /// Entries refused, with the reason.
    pub rejected: Vec<(String, Rejection)>,
}

impl Store {
    /// Prepares a local write of `body` under `name` at physical time `now_ms`. Ticks the clock.
    /// Refuses ([`StoreError::NewerVersionRefused`]) a write that would lose to a newer version
    /// of `name` this node refused as too far ahead of its clock.
    pub fn prepare_local(
        &mut self,
        name: &str,
        body: Vec<u8>,
        now_ms: u64,
    ) -> Result<Plan, StoreError> {
        self.prepare_own(name, Body::Live(body), now_ms, None)
    }

    /// Prepares a local write of `body` under `name` replacing exactly the stored version
    /// `replaces`, with the version just above it (same wall time, logical + 1, this node)
    /// instead of one from the clock: a write that any later write wins over, even one made
    /// concurrently elsewhere before this one arrived (an automatic rollback must never undo a
    /// newer apply). Refused with [`StoreError::Moved`] when `name` holds another version.
    pub fn prepare_local_after(
        &mut self,
        name: &str,
        body: Vec<u8>,
        replaces: &Version,
        now_ms: u64,
    ) -> Result<Plan, StoreError> {
        let held = self.get(name).map(|e| e.version.clone());
        if held.as_ref() != Some(replaces) {
            return Err(StoreError::Moved {
                name: name.to_owned(),
                expected: replaces.clone(),
                held,
            });
        }
        let at = Hlc {
            wall_ms: replaces.hlc.wall_ms,
            logical: replaces.hlc.logical.saturating_add(1),
        };
        self.prepare_own(name, Body::Live(body), now_ms, Some(at))
    }

    /// Prepares the deletion of the live entry `name` (a tombstone) at `now_ms`. Ticks the clock.
    pub fn prepare_delete(&mut self, name: &str, now_ms: u64) -> Result<Plan, StoreError> {
        self.prepare_delete_with(name, now_ms, false)
    }

    /// [`Self::prepare_delete`], with the tombstone asking every node to purge the workload's
    /// data (`shoal delete --purge-data`) when `purge_data`.
    pub fn prepare_delete_with(
        &mut self,
        name: &str,
        now_ms: u64,
        purge_data: bool,
    ) -> Result<Plan, StoreError> {
        if self.get_live(name).is_none() {
            return Err(StoreError::NotFound {
                name: name.to_owned(),
            });
        }
        // The deletion time is the HLC wall time of the delete, filled in below: never earlier
        // than any write it overrides, whatever this node's physical clock says.
        let body = Body::Tombstone {
            deleted_at_ms: 0,
            purge_data,
        };
        self.prepare_own(name, body, now_ms, None)
    }

    /// A write of this node's own: at the clock's next tick, or at `at` when given (the clock
    /// raised to it, so later writes still come after it).
    fn prepare_own(
        &mut self,
        name: &str,
        mut body: Body,
        now_ms: u64,
        at: Option<Hlc>,
    ) -> Result<Plan, StoreError> {
        let rejected = |reason| StoreError::Rejected {
            name: name.to_owned(),
            reason,
        };
        let probe = Entry {
            name: name.to_owned(),
            version: Version::new(Hlc::default(), &*self.node),
            body,
            proof: Vec::new(),
        };
        probe.validate(&self.config).map_err(rejected)?;
        self.check_room(&probe, 0, 0).map_err(rejected)?;
        self.check_not_behind(name, now_ms)?;
        if let Some(current) = self.get(name) {
            // Already true (restore raises the clock, merges observe): the version issued below
            // must beat the entry it replaces whatever the physical clock says.
            let held = current.version.hlc;
            self.clock.raise_to(held);
        }
        let hlc = match at {
            Some(at) => {
                self.clock.raise_to(at);
                at
            }
            None => self.clock.tick(now_ms),
        };
        body = match probe.body {
            Body::Tombstone { purge_data, .. } => Body::Tombstone {
                deleted_at_ms: hlc.wall_ms,
                purge_data,
            },
            live => live,
        };
        let entry = Entry {
            name: probe.name,
            version: Version::new(hlc, &*self.node),
            body,
            proof: Vec::new(),
        };
        if let Some(current) = self.get(name) {
            // The clock has seen every stored version (restore raises it, merges observe).
            assert!(
                entry.supersedes(current),
                "local write {} lost to {}",
                entry.version,
                current.version
            );
        }
        Ok(Plan {
            puts: vec![entry],
            purges: Vec::new(),
            rejected: Vec::new(),
            hlc_high_water: self.clock.last(),
        })
    }

    /// Refuses a local write of `name` at `now_ms` that would get a version below a newer one
    /// this node refused (see `newer.rs`). Changes nothing.
    fn check_not_behind(&self, name: &str, now_ms: u64) -> Result<(), StoreError> {
        let Some(newer) = self.refused_newer.get(name, now_ms) else {
            return Ok(());
        };
        let mine = Version::new(self.clock.peek_tick(now_ms), &*self.node);
        if *newer <= mine {
            return Ok(());
        }
        Err(StoreError::NewerVersionRefused {
            name: name.to_owned(),
            newer: newer.clone(),
            ahead_ms: newer.hlc.wall_ms.saturating_sub(now_ms),
            drift_ms_max: self.config.drift_ms_max,
        })
    }

    /// Prepares the merge of entries received from a peer at physical time `now_ms`. Keeps, per
    /// name, the winner among the received entries if it wins over the stored one and passes the
    /// checks (bounds, skew, expired tombstone); observes accepted versions on the clock. A winner
    /// refused as too far ahead is remembered (see `newer.rs`).
    pub fn prepare_merge(&mut self, entries: impl IntoIterator<Item = Entry>, now_ms: u64) -> Plan {
        let mut rejected = Vec::new();
        let mut best: BTreeMap<String, Entry> = BTreeMap::new();
        for entry in entries {
            if let Err(reason) = entry.validate(&self.config) {
                rejected.push((truncated(entry.name, self.config.name_bytes_max), reason));
                continue;
            }
            match best.get(&entry.name) {
                Some(b) if !entry.supersedes(b) => {}
                _ => {
                    best.insert(entry.name.clone(), entry);
                }
            }
        }
        let (mut puts, mut new_names, mut bytes_added) = (Vec::new(), 0, 0);
        self.refused_newer.expire(now_ms);
        for (name, entry) in best {
            if self
                .get(&name)
                .is_some_and(|current| !entry.supersedes(current))
            {
                continue;
            }
            if let Err(reason) = self.check_merge(&entry, now_ms, new_names, bytes_added) {
                if matches!(reason, Rejection::Clock(_)) {
                    self.refused_newer.record(&name, &entry.version, now_ms);
                }
                rejected.push((name, reason));
                continue;
            }
            self.clock
                .observe(entry.version.hlc, now_ms)
                .expect("skew checked above");
            new_names += usize::from(self.get(&name).is_none());
            bytes_added += entry.body.len_bytes();
            puts.push(entry);
        }
        Plan {
            puts,
            purges: Vec::new(),
            rejected,
            hlc_high_water: self.clock.last(),
        }
    }

    fn check_merge(
        &self,
        entry: &Entry,
        now_ms: u64,
        new_names: usize,
        bytes_added: usize,
    ) -> Result<(), Rejection> {
        self.clock.check(entry.version.hlc, now_ms)?;
        if let Some(purge_at_ms) = entry.purge_at_ms(self.config.tombstone_grace_ms) {
            if purge_at_ms <= now_ms {
                return Err(Rejection::TombstoneExpired { purge_at_ms });
            }
        }
        self.check_room(entry, new_names, bytes_added)
    }

    /// Prepares the purge of every tombstone past its grace period at `now_ms`.
    pub fn prepare_gc(&self, now_ms: u64) -> Plan {
        let grace_ms = self.config.tombstone_grace_ms;
        let purges = self
            .iter()
            .filter(|e| e.purge_at_ms(grace_ms).is_some_and(|at| at <= now_ms))
            .map(|e| (e.name.clone(), e.version.clone()))
            .collect();
        Plan {
            puts: Vec::new(),
            purges,
            rejected: Vec::new(),
            hlc_high_water: self.clock.last(),
        }
    }

    /// Applies a prepared plan (after the shell made it durable). Returns the names whose entry
    /// changed. A put that no longer wins, or a purge whose tombstone was replaced since, is
    /// skipped; a put that no longer fits the bounds panics (plans were committed out of order).
    pub fn commit(&mut self, plan: Plan) -> Vec<String> {
        let mut changed = Vec::with_capacity(plan.puts.len() + plan.purges.len());
        for entry in plan.puts {
            if self
                .get(&entry.name)
                .is_some_and(|current| !entry.supersedes(current))
            {
                continue;
            }
            if let Err(reason) = self.check_room(&entry, 0, 0) {
                panic!("committed plan no longer fits ({reason}): plans committed out of order");
            }
            changed.push(entry.name.clone());
            self.insert(entry);
        }
        let mut max_removed = false;
        for (name, version) in plan.purges {
            if self
                .get(&name)
                .is_some_and(|e| e.is_tombstone() && e.version == version)
            {
                max_removed |= self.remove(&name);
                changed.push(name);
            }
        }
        if max_removed {
            self.recompute_max_version();
        }
        self.clock.raise_to(plan.hlc_high_water);
        changed
    }

    /// Writes `body` under `name` now, without a disk: prepare and commit. Returns the new entry.
    pub fn apply_local(
        &mut self,
        name: &str,
        body: Vec<u8>,
        now_ms: u64,
    ) -> Result<Entry, StoreError> {
        let plan = self.prepare_local(name, body, now_ms)?;
        let entry = plan.puts[0].clone();
        self.commit(plan);
        Ok(entry)
    }

    /// Deletes `name` now, without a disk. Returns the tombstone.
    pub fn delete_local(&mut self, name: &str, now_ms: u64) -> Result<Entry, StoreError> {
        let plan = self.prepare_delete(name, now_ms)?;
        let entry = plan.puts[0].clone();
        self.commit(plan);
        Ok(entry)
    }

    /// Merges entries from a peer now, without a disk.
    pub fn merge_entries(
        &mut self,
        entries: impl IntoIterator<Item = Entry>,
        now_ms: u64,
    ) -> MergeOutcome {
        let mut plan = self.prepare_merge(entries, now_ms);
        let rejected = std::mem::take(&mut plan.rejected);
        MergeOutcome {
            changed: self.commit(plan),
            rejected,
        }
    }

    /// Purges tombstones past their grace period now, without a disk. Returns the purged names.
    pub fn gc(&mut self, now_ms: u64) -> Vec<String> {
        let plan = self.prepare_gc(now_ms);
        self.commit(plan)
    }
}

/// `name` cut to at most `max` bytes (on a char boundary), so a hostile name cannot bloat reports.
fn truncated(mut name: String, max: usize) -> String {
    if name.len() > max {
        let mut cut = max;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    name
}
