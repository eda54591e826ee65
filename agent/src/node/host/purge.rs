//! `shoal delete --purge-data` on this node: the workload's tombstone says to purge, and once no
//! instance of it is listed here the runtime removes its data volumes.
//!
//! The purge rides on the replicated tombstone, not on a message: a node that was down when the
//! delete happened purges when it comes back and gets the tombstone (within the store's
//! tombstone grace period). A workload applied again under the same name before a node purged
//! replaces the tombstone there: that node keeps the data and the new replicas find it (data is
//! never lost to a purge the mesh no longer asks for). A purge is idempotent; a restarted agent
//! does the ones still in its store again, which finds nothing to remove.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::Host;

/// How long after a failed purge it is tried again.
const RETRY_MS: u64 = 30_000;

/// What this node purged, and what it purges.
#[derive(Default)]
pub(crate) struct Purges {
    /// The store digest `wanted` was read at.
    read_at: Option<u64>,
    /// The tombstones asking for a purge, by workload, with their version.
    wanted: BTreeMap<String, String>,
    /// Per workload: the tombstone version purged (or being purged), and when a failed one may
    /// be tried again (monotonic ms).
    state: Arc<Mutex<BTreeMap<String, Attempt>>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Attempt {
    version: String,
    outcome: Outcome,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Running,
    Done,
    FailedUntil(u64),
}

impl Purges {
    /// Reads the purge tombstones again when the store moved.
    pub(crate) async fn refresh(&mut self, host: &Host, digest: Option<u64>) {
        if digest.is_none() || self.read_at == digest {
            return;
        }
        self.read_at = digest;
        self.wanted = host
            .node
            .with_store(|s| {
                s.core()
                    .iter()
                    .filter(|e| {
                        matches!(
                            e.body,
                            shoal_core::store::Body::Tombstone {
                                purge_data: true,
                                ..
                            }
                        )
                    })
                    .map(|e| (e.name.clone(), e.version.to_string()))
                    .collect()
            })
            .await;
        let wanted = &self.wanted;
        let mut state = self.state.lock().expect("purge lock");
        state.retain(|name, a| wanted.get(name) == Some(&a.version));
    }

    /// No tombstone asks for a purge.
    pub(crate) fn is_idle(&self) -> bool {
        self.wanted.is_empty()
    }

    /// Starts the purges due: a tombstone not purged yet here, no instance of its workload
    /// listed by the runtime.
    pub(crate) fn start_due(&self, host: &Arc<Host>, listed: &[String], now: u64) {
        for (workload, version) in &self.wanted {
            if listed.iter().any(|w| w == workload) {
                continue;
            }
            {
                let mut state = self.state.lock().expect("purge lock");
                let due = match state.get(workload) {
                    None => true,
                    Some(a) if &a.version != version => true,
                    Some(a) => matches!(a.outcome, Outcome::FailedUntil(t) if t <= now),
                };
                if !due {
                    continue;
                }
                let attempt = Attempt {
                    version: version.clone(),
                    outcome: Outcome::Running,
                };
                state.insert(workload.clone(), attempt);
            }
            let node = host.node.clone();
            let (host, state) = (host.clone(), self.state.clone());
            let (workload, version) = (workload.clone(), version.clone());
            node.spawn(async move {
                let result = host.runtime.purge_data(&workload).await;
                let outcome = match &result {
                    Ok(()) => {
                        let why = format!(
                            "data volumes removed (deleted with --purge-data, version {})",
                            shoal_core::hlc::format_version(&version)
                        );
                        host.record("purge-data", Some(workload.clone()), why);
                        Outcome::Done
                    }
                    Err(e) => {
                        let why = format!("removing the data volumes failed: {e}; retried in 30 s");
                        host.record("purge-data-failed", Some(workload.clone()), why);
                        Outcome::FailedUntil((host.mono)().saturating_add(RETRY_MS))
                    }
                };
                let mut state = state.lock().expect("purge lock");
                if let Some(a) = state.get_mut(&workload).filter(|a| a.version == version) {
                    a.outcome = outcome;
                }
            });
        }
    }
}
