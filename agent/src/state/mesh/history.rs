//! The versions a workload had before its current one, kept in the store beside it.
//!
//! Each apply that replaces a live spec writes, just after the new spec, the mesh's own entry
//! `shoal:history:NAME` ([`store_name`]): the replaced version first, then the older ones, at most
//! [`VERSIONS_MAX`] and at most a store body's bytes (the oldest go first). A history write that
//! fails (a crash between the two, a history entry refused as too far ahead of this clock) loses
//! that past version, never the apply. It is signed and
//! replicated like the spec, so any agent answers `shoal history NAME`, and `shoal rollout undo`
//! applies a past version's content as a new version. A delete tombstones the history too.
//!
//! Two applies of one workload at once on two agents each write a history from what they held;
//! the later write wins, so one of the two replaced versions may be missing from it.

use serde::{Deserialize, Serialize};
use shoal_core::hlc::Version;
use shoal_core::rollout::{Outcome, Record};
use shoal_core::store::Entry;

use crate::identity::authority::proof::Proof;

/// Prefix of a workload's history entry in the store.
pub const PREFIX: &str = "shoal:history:";
/// Most past versions kept per workload.
pub const VERSIONS_MAX: usize = 10;
/// Room left in a store body for the history's own framing.
const FRAMING_BYTES: usize = 1024;

/// Prefix of the entry that marks a workload's rollout paused (`shoal rollout pause`): present
/// and live while paused; resuming or deleting the workload tombstones it.
pub const PAUSED_PREFIX: &str = "shoal:paused:";

/// Prefix of the entry that records how a workload's current rollout ended (complete, or failed
/// for good): written once by the writer the live members choose (`host/rollout.rs`); an
/// apply reads it to give the version it replaces its outcome in the history.
pub const ROLLOUT_PREFIX: &str = "shoal:rollout:";

/// The rollout record's store name for workload `name`.
pub fn rollout_name(name: &str) -> String {
    format!("{ROLLOUT_PREFIX}{name}")
}

/// Decodes a rollout record body; an unreadable one is none.
pub fn decode_record(bytes: Option<&[u8]>) -> Option<Record> {
    crate::wire::decode_body::<Record, 4096>(bytes?).ok()
}

/// A rollout record's stored form.
pub fn encode_record(record: &Record) -> Vec<u8> {
    bincode::serde::encode_to_vec(record, crate::wire::bincode_config())
        .expect("a rollout record always encodes")
}

/// The outcome of `replaced` (the live spec an apply replaces) from the rollout record: the
/// record's verdict if it is about that version, else superseded.
pub fn outcome_of(replaced: &Entry, record: Option<&Record>) -> Outcome {
    record
        .filter(|r| r.version == replaced.version.to_string())
        .map_or(Outcome::Superseded, |r| r.outcome)
}

/// The paused marker's store name for workload `name`.
pub fn paused_name(name: &str) -> String {
    format!("{PAUSED_PREFIX}{name}")
}

/// The history entry's store name for workload `name`.
pub fn store_name(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// One past version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Past {
    /// Its version (raw `wall.logical@node`).
    pub version: String,
    /// Who asked for it, as its proof of origin says (`-` when unsigned).
    pub by: String,
    /// Its spec, as the store held it (bincode).
    pub spec: Vec<u8>,
    /// What became of its rollout (`None`: the current version, not yet replaced).
    pub outcome: Option<Outcome>,
    /// Why, when it failed or was rolled back.
    pub reason: String,
}

impl Past {
    /// The past version of a live spec entry (no outcome yet).
    pub fn of(entry: &Entry) -> Option<Past> {
        Some(Past {
            version: entry.version.to_string(),
            by: asked_by(entry),
            spec: entry.body.live()?.to_vec(),
            outcome: None,
            reason: String::new(),
        })
    }

    /// When it was written, ms since the Unix epoch.
    pub fn at_ms(&self) -> u64 {
        self.version.parse::<Version>().map_or(0, |v| v.hlc.wall_ms)
    }
}

/// Who asked for the write of `entry`, from its proof (`-` when it has none).
pub fn asked_by(entry: &Entry) -> String {
    Proof::decode(&entry.proof).map_or_else(|_| "-".to_string(), |p| p.asked_by)
}

/// Past versions, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// Newest first.
    pub versions: Vec<Past>,
}

impl History {
    /// Decodes a history body (bounded by the store's body bound); an unreadable one is empty.
    pub fn decode(bytes: Option<&[u8]>) -> History {
        let Some(bytes) = bytes else {
            return History::default();
        };
        crate::wire::decode_body::<History, { 1 << 20 }>(bytes).unwrap_or_default()
    }

    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(self, crate::wire::bincode_config())
            .expect("a history always encodes")
    }

    /// The current version was written by an automatic rollback: the version it replaced (the
    /// newest past one) is recorded rolled back.
    pub fn current_is_rollback(&self) -> bool {
        self.versions
            .first()
            .is_some_and(|p| p.outcome == Some(Outcome::RolledBack))
    }

    /// The newest past version whose rollout completed.
    pub fn last_complete(&self) -> Option<&Past> {
        self.versions
            .iter()
            .find(|p| p.outcome == Some(Outcome::Complete))
    }

    /// This history once `replaced` (the live spec entry an apply replaces) is pushed in front
    /// with what became of it, cut to [`VERSIONS_MAX`] and to `bytes_max` encoded (the oldest
    /// go first).
    pub fn pushed(
        mut self,
        replaced: &Entry,
        outcome: Outcome,
        reason: &str,
        bytes_max: usize,
    ) -> History {
        let Some(mut past) = Past::of(replaced) else {
            return self;
        };
        past.outcome = Some(outcome);
        past.reason = reason.to_string();
        self.versions.retain(|p| p.version != past.version);
        self.versions.insert(0, past);
        self.versions.truncate(VERSIONS_MAX);
        let budget = bytes_max.saturating_sub(FRAMING_BYTES);
        let mut used = 0;
        let keep = self
            .versions
            .iter()
            .take_while(|p| {
                used += p.spec.len() + p.version.len() + p.by.len() + p.reason.len() + 18;
                used <= budget
            })
            .count();
        self.versions.truncate(keep);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_core::hlc::Hlc;
    use shoal_core::store::Body;

    fn entry(wall_ms: u64, body: &[u8]) -> Entry {
        Entry {
            name: "web".into(),
            version: Version::new(
                Hlc {
                    wall_ms,
                    logical: 0,
                },
                "n1",
            ),
            body: Body::Live(body.to_vec()),
            proof: Vec::new(),
        }
    }

    #[test]
    fn newest_first_bounded_by_count_and_bytes() {
        let mut history = History::default();
        for i in 0..15u64 {
            history = history.pushed(&entry(i, b"spec"), Outcome::Complete, "", 1 << 20);
        }
        assert_eq!(history.versions.len(), VERSIONS_MAX);
        assert_eq!(history.versions[0].at_ms(), 14);
        assert_eq!(history.versions[0].by, "-");
        let big = vec![7u8; 100 * 1024];
        let mut history = History::default();
        for i in 0..5u64 {
            history = history.pushed(&entry(i, &big), Outcome::Superseded, "", 256 * 1024);
        }
        assert_eq!(history.versions.len(), 2, "two of 100 KiB fit 255 KiB");
        assert_eq!(History::decode(Some(&history.encode())), history);
        assert_eq!(History::decode(Some(b"junk")), History::default());
        let tomb = Entry {
            body: Body::Tombstone {
                deleted_at_ms: 1,
                purge_data: false,
            },
            ..entry(1, b"")
        };
        assert_eq!(
            history
                .clone()
                .pushed(&tomb, Outcome::Complete, "", 1 << 20),
            history
        );
        assert_eq!(history.last_complete(), None);
        assert!(!history.current_is_rollback());
        let history = history
            .pushed(&entry(20, b"good"), Outcome::Complete, "", 1 << 20)
            .pushed(
                &entry(21, b"bad"),
                Outcome::RolledBack,
                "crash loop",
                1 << 20,
            );
        assert!(history.current_is_rollback());
        assert_eq!(history.last_complete().map(Past::at_ms), Some(20));
        assert_eq!(history.versions[0].reason, "crash loop");
    }
}
