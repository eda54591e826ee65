//! Newer versions this node saw but could not store: entries a peer sent that would have won
//! last-writer-wins here, refused because their timestamp runs more than the skew bound ahead of
//! this node's clock (see [`crate::hlc`]).
//!
//! They matter for writes made here. This node's clock never observed such a version, so a local
//! write of the same name would get a lower one and lose to it on every node that stores both:
//! acknowledging it would lose an acknowledged write. [`super::Store::prepare_local`] and
//! [`super::Store::prepare_delete`] refuse such writes, and a peer asked to hold an older entry of
//! the name reports the newer version, so its writer does not count that copy as durable.
//!
//! Nothing here is persisted: anti-entropy offers a refused entry again every round, which
//! refreshes it, and a record not refreshed for [`REFUSED_NEWER_TTL_MS`] is forgotten (its writer
//! may have been wiped). A record goes as soon as the store holds that version or a later one.

use std::collections::BTreeMap;

use crate::hlc::Version;

/// Most names tracked; past it the least recently seen record is dropped (anti-entropy brings it
/// back if the entry is still offered).
pub const REFUSED_NEWER_NAMES_MAX: usize = 1024;
/// How long a refused version counts without being offered again, in ms of this node's clock.
pub const REFUSED_NEWER_TTL_MS: u64 = 60_000;

#[derive(Clone, Debug)]
struct Seen {
    version: Version,
    seen_at_ms: u64,
}

/// The newest refused version per name. See the module doc.
#[derive(Clone, Debug, Default)]
pub(super) struct RefusedNewer {
    by_name: BTreeMap<String, Seen>,
}

impl RefusedNewer {
    /// `version` of `name` was refused at `now_ms` as too far ahead.
    pub(super) fn record(&mut self, name: &str, version: &Version, now_ms: u64) {
        if let Some(seen) = self.by_name.get_mut(name) {
            if *version >= seen.version {
                seen.version = version.clone();
            }
            seen.seen_at_ms = seen.seen_at_ms.max(now_ms);
            return;
        }
        if self.by_name.len() >= REFUSED_NEWER_NAMES_MAX {
            super::evict_oldest(&mut self.by_name, |s| s.seen_at_ms);
        }
        self.by_name.insert(
            name.to_owned(),
            Seen {
                version: version.clone(),
                seen_at_ms: now_ms,
            },
        );
    }

    /// The store now holds `stored` for `name`: a record it covers is settled.
    pub(super) fn settle(&mut self, name: &str, stored: &Version) {
        if self.by_name.get(name).is_some_and(|s| s.version <= *stored) {
            self.by_name.remove(name);
        }
    }

    /// The refused version of `name`, if one was offered within the TTL before `now_ms`.
    pub(super) fn get(&self, name: &str, now_ms: u64) -> Option<&Version> {
        self.by_name
            .get(name)
            .filter(|s| fresh(s, now_ms))
            .map(|s| &s.version)
    }

    /// Every fresh record, by name.
    pub(super) fn iter(&self, now_ms: u64) -> impl Iterator<Item = (&str, &Version)> {
        self.by_name
            .iter()
            .filter(move |(_, s)| fresh(s, now_ms))
            .map(|(n, s)| (n.as_str(), &s.version))
    }

    /// Every record, fresh or not.
    pub(super) fn all(&self) -> impl Iterator<Item = (&str, &Version)> {
        self.by_name.iter().map(|(n, s)| (n.as_str(), &s.version))
    }

    /// Forgets records past the TTL.
    pub(super) fn expire(&mut self, now_ms: u64) {
        self.by_name.retain(|_, s| fresh(s, now_ms));
    }

    pub(super) fn len(&self) -> usize {
        self.by_name.len()
    }
}

/// A clock that jumped back keeps a record fresh longer; one that jumped ahead forgets it sooner,
/// and the next anti-entropy round records it again if it is still too far ahead.
fn fresh(seen: &Seen, now_ms: u64) -> bool {
    now_ms.saturating_sub(seen.seen_at_ms) <= REFUSED_NEWER_TTL_MS
}
