//! The host loop's part in sticky replicas: record this node as the holder of the data of each
//! replica it runs as the owner (`mesh/data.rs`), so that placement keeps the replica here and a
//! new owner elsewhere waits for this node instead of starting the replica empty.
//!
//! Only the owner records (a copy still running here while its replica moved is not the one
//! the mesh keeps), and only once its instance exists (starting or running): a start that fails
//! leaves the record where the data was. The write is a reserved store entry signed by this
//! node; one per replica in flight, [`WRITES_IN_FLIGHT_MAX`] overall, and a failed write is
//! tried again [`RETRY_MS`] later. Between a start and its record (one round trip to a peer)
//! a crash of this node leaves the record on the previous holder: the new owner then waits for
//! that node (or an approval) as if this node had never run the replica.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use shoal_core::instance::{Phase, ReplicaId};
use shoal_core::reconcile::InstanceStatus;

use super::HostLoop;
use crate::state::mesh::data;
use crate::state::mesh::node::MeshNode;

/// Record writes in flight at most.
const WRITES_IN_FLIGHT_MAX: usize = 16;
/// Least time between two attempts for one replica, ms (monotonic).
const RETRY_MS: u64 = 5_000;
/// Who a record is written for, in its proof of origin.
const WRITER: &str = "data-holder";

/// The loop's record writes.
#[derive(Default)]
pub(super) struct DataRecords {
    in_flight: Arc<Mutex<BTreeSet<ReplicaId>>>,
    /// When each replica's record was last tried (monotonic ms).
    tried_at: BTreeMap<ReplicaId, u64>,
}

/// Records this node as the holder of `replica`'s data unless the store already does: before an
/// exclusive replica with data starts here (`exec.rs`).
pub(super) async fn claim(node: &Arc<MeshNode>, replica: &ReplicaId) -> Result<(), String> {
    let name = data::record_name(replica);
    let me = node.name.clone();
    let key = name.clone();
    let held = node
        .with_store(move |s| s.get(&key).and_then(|e| e.body.live()).map(<[u8]>::to_vec))
        .await;
    if held.as_deref() == Some(me.as_bytes()) {
        return Ok(());
    }
    let written = node
        .clone()
        .store_reserved(name, data::encode(&me), WRITER.to_string())
        .await;
    written.map(|_| ()).map_err(|e| e.message)
}

impl HostLoop {
    /// Starts the record writes due: replicas with data of their own this node owns and runs
    /// while the store names another holder, or none.
    pub(super) fn tend_data_records(&mut self, observed: &[InstanceStatus], now: u64) {
        let input = self.shell.input();
        let me = self.host.node.name.as_str();
        let due: BTreeSet<ReplicaId> = observed
            .iter()
            .filter(|s| s.handle.is_some() && matches!(s.phase, Phase::Starting | Phase::Running))
            .map(|s| &s.replica)
            .filter(|r| input.owners.get(*r).is_some_and(|o| o == me))
            .filter(|r| input.data_holders.get(*r).is_none_or(|h| h != me))
            .filter(|r| {
                input
                    .specs
                    .get(&r.workload)
                    .is_some_and(|e| e.spec.keeps_replica_data())
            })
            .cloned()
            .collect();
        let records = &mut self.data_records;
        records.tried_at.retain(|r, _| due.contains(r));
        for replica in due {
            if records
                .tried_at
                .get(&replica)
                .is_some_and(|&t| now < t.saturating_add(RETRY_MS))
            {
                continue;
            }
            {
                let mut in_flight = records.in_flight.lock().expect("in-flight lock");
                if in_flight.contains(&replica) || in_flight.len() >= WRITES_IN_FLIGHT_MAX {
                    continue;
                }
                in_flight.insert(replica.clone());
            }
            records.tried_at.insert(replica.clone(), now);
            let host = self.host.clone();
            let in_flight = records.in_flight.clone();
            let wake = self.host.wake_handle();
            self.host.node.spawn(async move {
                let name = data::record_name(&replica);
                let body = data::encode(&host.node.name);
                let node = host.node.clone();
                let outcome = node.store_reserved(name, body, WRITER.to_string()).await;
                {
                    let mut stats = host.stats.lock().expect("stats lock");
                    let counter = match outcome.is_ok() {
                        true => &mut stats.data_records_written,
                        false => &mut stats.data_records_failed,
                    };
                    *counter += 1;
                }
                match outcome {
                    Ok(_) => {
                        let reason = format!("{replica}'s data is on this node now");
                        host.record("data-holder", Some(replica.workload.clone()), reason);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e.message, %replica, "data holder record not written");
                    }
                }
                in_flight.lock().expect("in-flight lock").remove(&replica);
                wake();
            });
        }
    }
}
