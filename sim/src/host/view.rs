//! What a modelled host loop reads from its agent's gossip: members, their records and the
//! instances they report, decoded once per chitchat version (decoding every record of every
//! member every round was most of a 100-host run's time).

use std::collections::{BTreeMap, HashMap};

use chitchat::{Chitchat, ChitchatId};
use shoal::mesh::record::{NodeRecord, NODE_KEY};
use shoal::mesh::view::LEAVING_KEY;
use shoal_core::instance::ReplicaId;

/// Chitchat key under which the modelled host loop gossips the instances it runs.
pub const OBSERVED_KEY: &str = "sim.instances";

/// A reported copy: `r` running, `s` starting, `t` stopping.
pub type Report = (ReplicaId, char);

/// One member as a host loop sees it.
#[derive(Clone, Debug)]
pub struct Peer {
    /// Node name.
    pub name: String,
    /// Live by the failure detector and not leaving.
    pub alive: bool,
    /// Its record, when valid.
    pub record: Option<NodeRecord>,
    /// The copies it reports alive.
    pub reports: Vec<Report>,
}

/// Decoded values by (member, key), reused while the chitchat version is unchanged.
#[derive(Default)]
pub struct ViewCache {
    records: HashMap<ChitchatId, (u64, Option<NodeRecord>)>,
    reports: HashMap<ChitchatId, (u64, Vec<Report>)>,
}

/// Encodes this host's alive copies for [`OBSERVED_KEY`].
pub fn encode_reports(reports: &[Report]) -> String {
    let parts: Vec<String> = reports
        .iter()
        .map(|(r, p)| format!("{}/{}={p}", r.workload, r.replica))
        .collect();
    parts.join(",")
}

fn decode_reports(text: &str) -> Vec<Report> {
    text.split(',')
        .filter_map(|part| {
            let (id, phase) = part.split_once('=')?;
            let (w, r) = id.rsplit_once('/')?;
            Some((ReplicaId::new(w, r.parse().ok()?), phase.chars().next()?))
        })
        .collect()
}

impl ViewCache {
    /// Every member, one per name (the live identity with the lowest generation, else the
    /// newest), sorted by name: the same rule as `shoal::mesh::view::members`.
    pub fn read(&mut self, chitchat: &Chitchat) -> Vec<Peer> {
        let live: std::collections::BTreeSet<&ChitchatId> = chitchat.live_nodes().collect();
        let mut by_name: BTreeMap<String, (u64, Peer)> = BTreeMap::new();
        for (id, state) in chitchat.node_states() {
            let leaving = state.get(LEAVING_KEY).is_some();
            let alive = !leaving && live.contains(id);
            let record = match state.get_versioned(NODE_KEY) {
                None => None,
                Some(v) => {
                    let entry = self.records.entry(id.clone()).or_insert((u64::MAX, None));
                    if entry.0 != v.version {
                        *entry = (v.version, NodeRecord::decode(&v.value).ok());
                    }
                    entry.1.clone()
                }
            };
            let reports = match state.get_versioned(OBSERVED_KEY) {
                None => Vec::new(),
                Some(v) => {
                    let entry = self
                        .reports
                        .entry(id.clone())
                        .or_insert((u64::MAX, Vec::new()));
                    if entry.0 != v.version {
                        *entry = (v.version, decode_reports(&v.value));
                    }
                    entry.1.clone()
                }
            };
            let name = id.node_id.to_string();
            let peer = Peer {
                name: name.clone(),
                alive,
                record,
                reports,
            };
            let gen = id.generation_id;
            let replaces = match by_name.get(&name) {
                None => true,
                Some((seen_gen, seen)) => match (seen.alive, alive) {
                    (true, true) => gen < *seen_gen,
                    (false, true) => true,
                    (true, false) => false,
                    (false, false) => gen > *seen_gen,
                },
            };
            if replaces {
                by_name.insert(name, (gen, peer));
            }
        }
        if self.records.len() > 4 * by_name.len() + 64 {
            let ids: Vec<ChitchatId> = chitchat.node_states().keys().cloned().collect();
            self.records.retain(|k, _| ids.contains(k));
            self.reports.retain(|k, _| ids.contains(k));
        }
        by_name.into_values().map(|(_, p)| p).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        let reports = vec![
            (ReplicaId::new("web-a", 2), 'r'),
            (ReplicaId::new("db", 0), 's'),
        ];
        assert_eq!(decode_reports(&encode_reports(&reports)), reports);
        assert!(decode_reports("").is_empty());
    }
}
