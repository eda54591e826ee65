//! The mesh's side of an automatic rollback: the write itself (`host/rollout.rs` decides when).
//!
//! The content of the past version `to` is written in place of exactly the failed version
//! `from`, as the version just above it (its wall time, logical + 1, this node): a
//! compare-and-set that does nothing once the store holds another version, and that any apply
//! made after the failed one wins over, even one that had not reached this agent yet. Two agents
//! that roll back at once write the same content; last-writer-wins keeps one. The failed version
//! joins the history as rolled back, with why.

use std::sync::Arc;

use shoal_core::hlc::Version;
use shoal_core::rollout::Outcome;
use shoal_core::store::Entry;

use super::history::{self, History};
use super::node::{push_history, MeshNode, PushPast};
use crate::wire::api::{ApiError, ErrorKind};

/// What a rollback wrote.
#[derive(Debug)]
pub struct RolledBack {
    /// The new spec entry (the restored content).
    pub entry: Entry,
}

impl MeshNode {
    /// Writes the rollback of `name` from version `from` to the content of past version `to`
    /// (both raw `wall.logical@node`), on behalf of `by`. `Ok(None)` when the store no longer
    /// holds `from` as the current version (a newer write, or another agent's rollback, came
    /// first) or `to` is no longer in the history.
    pub async fn roll_back(
        self: Arc<Self>,
        name: String,
        from: String,
        to: String,
        reason: String,
        by: String,
    ) -> Result<Option<RolledBack>, ApiError> {
        let failed: Version = from
            .parse()
            .map_err(|e| ApiError::new(ErrorKind::Invalid, format!("version {from:?}: {e}")))?;
        let now = (self.clock)();
        let authority = self.authority.clone();
        let key = name.clone();
        let written = self
            .with_store(move |s| {
                let current = match s.get(&key) {
                    Some(e) if !e.is_tombstone() && e.version == failed => e.clone(),
                    _ => return Ok(None),
                };
                let held = History::decode(
                    s.get(&history::store_name(&key))
                        .and_then(|e| e.body.live()),
                );
                let Some(past) = held.versions.iter().find(|p| p.version == to) else {
                    return Ok(None);
                };
                let seal = |e: &mut Entry| authority.seal(e, &by);
                let entry = s.apply_after_sealed(&key, past.spec.clone(), &failed, now, seal)?;
                let push = PushPast {
                    replaced: &current,
                    outcome: Some(Outcome::RolledBack),
                    reason: &reason,
                    by: &by,
                };
                let history = push_history(s, &authority, &key, push, now).map(|(e, _)| e);
                Ok(Some((entry, history)))
            })
            .await
            .map_err(|e| self.write_error(e))?;
        let Some((entry, history)) = written else {
            return Ok(None);
        };
        if let Some(history) = history {
            let node = self.clone();
            self.spawn(async move {
                if let Err(e) = node.replicate(history, true).await {
                    tracing::debug!(error = %e.message, "history not yet durable elsewhere");
                }
            });
        }
        if let Err(e) = self.clone().replicate(entry.clone(), true).await {
            // Stored here: anti-entropy carries it on.
            tracing::warn!(error = %e.message, %name, "rollback not yet durable elsewhere");
        }
        Ok(Some(RolledBack { entry }))
    }
}
