//! Where each replica's data is: the store's `shoal:data:WORKLOAD/REPLICA` entries.
//!
//! A replica with data of its own (`WorkloadSpec::keeps_replica_data`) leaves it on the node
//! that ran it. The node that runs such a replica, as its owner, records itself as the holder
//! (`host/data.rs`): a reserved entry whose body is the holder's node name, written by that node.
//! Placement prefers the holder (`Workload::sticky`), and an exclusive replica placed elsewhere
//! while the holder is down waits for it (`shoal_core::reconcile` `data.rs`).
//!
//! The records are store entries, not gossip: they outlive the holder's gossip state (a node down
//! longer than the failure detector's grace is forgotten by gossip, never by the store), and
//! every cell reads them. A record whose body names another node than the one that wrote it is
//! ignored (a node only speaks for its own disk) and counted. `delete --purge-data` tombstones a
//! workload's records with its data; a plain delete keeps them, as it keeps the data.

use std::collections::BTreeMap;

use shoal_core::instance::ReplicaId;
use shoal_core::store::Entry;

/// Prefix of the data holder records.
pub const PREFIX: &str = "shoal:data:";

/// The record's store name for a replica.
pub fn record_name(replica: &ReplicaId) -> String {
    format!("{PREFIX}{}/{}", replica.workload, replica.replica)
}

/// The prefix of every record of a workload.
pub fn workload_prefix(workload: &str) -> String {
    format!("{PREFIX}{workload}/")
}

/// A record's body: the holder's node name.
pub fn encode(node: &str) -> Vec<u8> {
    node.as_bytes().to_vec()
}

/// The holders the live records name, and how many records were refused (unparsable names,
/// or a body that names another node than the writer).
pub fn holders<'a>(entries: impl Iterator<Item = &'a Entry>) -> (BTreeMap<ReplicaId, String>, u64) {
    let mut out = BTreeMap::new();
    let mut refused = 0;
    for e in entries {
        let Some(rest) = e.name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(body) = e.body.live() else {
            continue;
        };
        let parsed = rest
            .rsplit_once('/')
            .and_then(|(w, r)| Some((w, r.parse::<u32>().ok()?)))
            .filter(|(w, _)| !w.is_empty());
        match (parsed, std::str::from_utf8(body)) {
            (Some((workload, replica)), Ok(node)) if node == e.version.node => {
                out.insert(ReplicaId::new(workload, replica), node.to_string());
            }
            _ => refused += 1,
        }
    }
    (out, refused)
}

#[cfg(test)]
mod tests {
    use shoal_core::hlc::{Hlc, Version};
    use shoal_core::store::Body;

    use super::*;

    fn entry(name: &str, body: &str, writer: &str) -> Entry {
        Entry {
            name: name.to_string(),
            version: Version::new(
                Hlc {
                    wall_ms: 1,
                    logical: 0,
                },
                writer,
            ),
            body: Body::Live(body.as_bytes().to_vec()),
            proof: Vec::new(),
        }
    }

    #[test]
    fn records_name_their_writer_or_are_refused() {
        let entries = [
            entry(&record_name(&ReplicaId::new("pg", 0)), "n1", "n1"),
            entry(&record_name(&ReplicaId::new("pg", 1)), "n2", "n3"),
            entry("shoal:data:pg/x", "n1", "n1"),
            entry("shoal:data:/1", "n1", "n1"),
            entry("shoal:history:pg", "n1", "n1"),
            entry(&record_name(&ReplicaId::new("a/b", 2)), "n4", "n4"),
        ];
        let (held, refused) = holders(entries.iter());
        assert_eq!(held.len(), 2);
        assert_eq!(held[&ReplicaId::new("pg", 0)], "n1");
        assert_eq!(held[&ReplicaId::new("a/b", 2)], "n4");
        assert_eq!(refused, 3, "another node's name, a bad index, no workload");
    }
}
