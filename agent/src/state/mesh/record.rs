//! The node record: what every agent gossips about itself under the chitchat key [`NODE_KEY`].
//!
//! It carries only per-node facts (capacity, labels, zone, draining, versions, API address).
//! Desired state never lives here: a dead node's keys stop spreading (see docs/ARCHITECTURE.md).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{LazyLock, Mutex};

use serde::{Deserialize, Serialize};
use shoal_core::placement::model::Node;
use shoal_core::Resources;

/// Chitchat key holding the JSON-encoded [`NodeRecord`].
pub const NODE_KEY: &str = "node";
/// Chitchat key holding the store digest summary (hex).
pub const DIGEST_KEY: &str = "store";
/// Longest node record accepted from a peer, in bytes of JSON.
pub const NODE_RECORD_BYTES_MAX: usize = 16 * 1024;
/// Most labels a node may carry.
pub const LABELS_MAX: usize = 64;
/// Decoded records [`NodeRecord::decode_cached`] keeps (then it forgets them all at once).
pub const DECODED_KEPT_MAX: usize = 4096;

/// Records decoded lately, by the xxh3 hash of their text (with the text, to check).
type Decoded = HashMap<u64, (Box<str>, NodeRecord)>;

static DECODED: LazyLock<Mutex<Decoded>> = LazyLock::new(Mutex::default);

/// What a node says about itself. Fields this build does not know (a newer build's) are ignored,
/// never an error: builds before 8 refused them, which is why the build facts have a key of
/// their own (`super::build`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Declared capacity: placement accounts against this, never against live load.
    pub cpu_millis: u64,
    /// Declared memory capacity in bytes.
    pub memory_bytes: u64,
    /// Free-form labels matched by placement constraints.
    pub labels: BTreeMap<String, String>,
    /// Failure domain.
    pub zone: String,
    /// A draining node receives no new replicas and hands its own away.
    pub draining: bool,
    /// The agent's build version (`CARGO_PKG_VERSION`).
    pub agent_version: String,
    /// Placement algorithm version; agents on different versions compute different placements.
    pub placement_version: u32,
    /// Where this node serves the API (CLI and store sync).
    pub api_addr: SocketAddr,
    /// What this node's runtime cannot enforce (e.g. no cgroup v2 for cpu/memory limits).
    #[serde(default)]
    pub limits_note: Option<String>,
    /// How many ports its `--port-range` holds: placement's port capacity.
    #[serde(default = "default_ports")]
    pub ports: u64,
}

/// The port capacity of a record that does not say: the default range's.
pub fn default_ports() -> u64 {
    shoal_core::ports::PORT_RANGE_DEFAULT.len() as u64
}

impl NodeRecord {
    /// JSON text for the chitchat value.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a node record always serializes")
    }

    /// Parses a peer's record; anything oversized or malformed is an error, never a panic.
    pub fn decode(text: &str) -> Result<NodeRecord, String> {
        if text.len() > NODE_RECORD_BYTES_MAX {
            return Err(format!(
                "node record is {} bytes, more than {NODE_RECORD_BYTES_MAX}",
                text.len()
            ));
        }
        let record: NodeRecord =
            serde_json::from_str(text).map_err(|e| format!("malformed node record: {e}"))?;
        if record.labels.len() > LABELS_MAX {
            return Err(format!("node record has more than {LABELS_MAX} labels"));
        }
        Ok(record)
    }

    /// [`NodeRecord::decode`], remembered by text: every read of the membership decodes every
    /// peer's record (the agent does it several times a second; in the simulator, a hundred agents
    /// decode the same hundred texts). The answer is a function of the text alone, so a
    /// remembered answer is the answer. Errors are not remembered.
    pub fn decode_cached(text: &str) -> Result<NodeRecord, String> {
        let hash = xxhash_rust::xxh3::xxh3_64(text.as_bytes());
        if let Some((seen, record)) = DECODED.lock().expect("decoded lock").get(&hash) {
            if **seen == *text {
                return Ok(record.clone());
            }
        }
        let record = NodeRecord::decode(text)?;
        let mut decoded = DECODED.lock().expect("decoded lock");
        if decoded.len() >= DECODED_KEPT_MAX {
            decoded.clear();
        }
        decoded.insert(hash, (text.into(), record.clone()));
        Ok(record)
    }

    /// The placement engine's view of this node, as up (the membership sets `down`).
    pub fn placement_node(&self, id: &str) -> Node {
        Node {
            id: id.to_string(),
            capacity: Resources::new(self.cpu_millis, self.memory_bytes).with_ports(self.ports),
            labels: self.labels.clone(),
            zone: self.zone.clone(),
            draining: self.draining,
            down: false,
            caps: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> NodeRecord {
        NodeRecord {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            labels: [("disk".to_string(), "ssd".to_string())].into(),
            zone: "eu-1a".into(),
            draining: false,
            agent_version: "0.1.0".into(),
            placement_version: 1,
            api_addr: "127.0.0.1:7001".parse().unwrap(),
            limits_note: None,
            ports: 16,
        }
    }

    #[test]
    fn round_trips() {
        let r = sample();
        assert_eq!(NodeRecord::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn cached_decoding_answers_as_decoding() {
        let text = sample().encode();
        for _ in 0..2 {
            assert_eq!(NodeRecord::decode_cached(&text), Ok(sample()));
        }
        let mut other = sample();
        other.zone = "eu-1b".into();
        assert_eq!(NodeRecord::decode_cached(&other.encode()), Ok(other));
        for bad in ["{", "\u{0}", &"x".repeat(NODE_RECORD_BYTES_MAX + 1)] {
            assert_eq!(NodeRecord::decode_cached(bad), NodeRecord::decode(bad));
            assert!(NodeRecord::decode_cached(bad).is_err());
        }
    }

    #[test]
    fn rejects_garbage_and_oversize() {
        assert!(NodeRecord::decode("{").is_err());
        assert!(NodeRecord::decode("\u{0}\u{1}").is_err());
        assert!(NodeRecord::decode(&"x".repeat(NODE_RECORD_BYTES_MAX + 1)).is_err());
    }

    #[test]
    fn a_newer_builds_field_is_ignored() {
        let mut v: serde_json::Value = serde_json::from_str(&sample().encode()).unwrap();
        v["surprise"] = 1.into();
        assert_eq!(NodeRecord::decode(&v.to_string()), Ok(sample()));
    }
}
