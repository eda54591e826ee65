//! What a node can run, gossiped under [`CAPABILITIES_KEY`]: its runtimes (with the container
//! engine's version), OS and architecture, the directories host-path volumes may be under, and
//! fixed host ports something else holds there. Placement algorithm 7 (mesh version 9) places a
//! replica only on a node whose capabilities meet its needs (`shoal_core::placement::Needs`).
//!
//! A key of its own, not a field of the node record: builds before 8 refuse a node record with a
//! field they do not know, and every build passes on keys it does not know.

use serde::{Deserialize, Serialize};
use shoal_core::placement::{Capabilities, HostPort, Runtime};

/// Chitchat key holding the JSON-encoded [`CapabilitiesRecord`].
pub const CAPABILITIES_KEY: &str = "capabilities";
/// Longest capabilities record accepted from a peer, in bytes of JSON.
pub const CAPABILITIES_BYTES_MAX: usize = 16 * 1024;
/// Most volume roots, or taken ports, a record may list.
pub const CAPABILITY_ITEMS_MAX: usize = 64;

/// One runtime a node has.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RuntimeFact {
    /// Which.
    pub kind: Runtime,
    /// The engine's version, when it says one (Docker's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// What a node says it can run. Fields this build does not know (a newer build's) are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilitiesRecord {
    /// Its runtimes, present and usable.
    pub runtimes: Vec<RuntimeFact>,
    /// `std::env::consts::OS` of its build (`linux`).
    pub os: String,
    /// `std::env::consts::ARCH` of its build (`x86_64`, `aarch64`).
    pub arch: String,
    /// Its `--volume-root` directories.
    #[serde(default)]
    pub volume_roots: Vec<String>,
    /// Fixed host ports something other than its replicas holds.
    #[serde(default)]
    pub ports_taken: Vec<HostPort>,
    /// It runs workloads whose `user` is root (`--allow-root-workloads`). Older builds neither
    /// send nor read it (unknown fields are ignored): absent, not allowed.
    #[serde(default)]
    pub root_allowed: bool,
}

impl CapabilitiesRecord {
    /// A node of this build's OS and architecture with these runtimes and volume roots.
    pub fn this(runtimes: Vec<RuntimeFact>, volume_roots: Vec<String>) -> CapabilitiesRecord {
        CapabilitiesRecord {
            runtimes,
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            volume_roots,
            ports_taken: Vec::new(),
            root_allowed: false,
        }
    }

    /// JSON text for the chitchat value.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a capabilities record always serializes")
    }

    /// Parses a peer's record; anything oversized, malformed or with too many items is an error,
    /// never a panic.
    pub fn decode(text: &str) -> Result<CapabilitiesRecord, String> {
        if text.len() > CAPABILITIES_BYTES_MAX {
            return Err(format!(
                "capabilities record is {} bytes, more than {CAPABILITIES_BYTES_MAX}",
                text.len()
            ));
        }
        let record: CapabilitiesRecord = serde_json::from_str(text)
            .map_err(|e| format!("malformed capabilities record: {e}"))?;
        if record.runtimes.len() > CAPABILITY_ITEMS_MAX
            || record.volume_roots.len() > CAPABILITY_ITEMS_MAX
            || record.ports_taken.len() > CAPABILITY_ITEMS_MAX
        {
            return Err(format!(
                "capabilities record lists more than {CAPABILITY_ITEMS_MAX} runtimes, volume \
                 roots or ports"
            ));
        }
        Ok(record)
    }

    /// What placement matches a replica's needs against.
    pub fn placement(&self) -> Capabilities {
        let mut runtimes: Vec<Runtime> = self.runtimes.iter().map(|r| r.kind).collect();
        runtimes.sort();
        runtimes.dedup();
        let mut volume_roots = self.volume_roots.clone();
        volume_roots.sort();
        volume_roots.dedup();
        let mut ports_taken = self.ports_taken.clone();
        ports_taken.sort();
        ports_taken.dedup();
        Capabilities {
            runtimes,
            volume_roots,
            ports_taken,
            root_allowed: self.root_allowed,
        }
    }

    /// The runtimes as `shoal nodes` shows them: `process`, `container (docker 27.5.1)`.
    pub fn runtimes_text(&self) -> String {
        let names: Vec<String> = self
            .runtimes
            .iter()
            .map(|r| match &r.version {
                Some(v) => format!("{} ({v})", r.kind),
                None => r.kind.to_string(),
            })
            .collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_bad_records() {
        let record = CapabilitiesRecord::this(
            vec![RuntimeFact {
                kind: Runtime::Container,
                version: Some("27.5.1".into()),
            }],
            vec!["/srv".into()],
        );
        assert_eq!(
            CapabilitiesRecord::decode(&record.encode()).unwrap(),
            record
        );
        let mut value: serde_json::Value = serde_json::from_str(&record.encode()).unwrap();
        value["gpus"] = 2.into();
        assert!(
            CapabilitiesRecord::decode(&value.to_string()).is_ok(),
            "a newer build's field is ignored"
        );
        value["volume_roots"] = serde_json::json!(vec!["/x"; CAPABILITY_ITEMS_MAX + 1]);
        assert!(CapabilitiesRecord::decode(&value.to_string()).is_err());
        assert!(CapabilitiesRecord::decode(&"x".repeat(CAPABILITIES_BYTES_MAX + 1)).is_err());
        assert!(CapabilitiesRecord::decode("{\"runtimes\": 3}").is_err());
        assert_eq!(record.runtimes_text(), "container (27.5.1)");
        // An older build's record says nothing of root: not allowed; this build's says it.
        let mut old: serde_json::Value = serde_json::from_str(&record.encode()).unwrap();
        old.as_object_mut().unwrap().remove("root_allowed");
        let old = CapabilitiesRecord::decode(&old.to_string()).unwrap();
        assert!(!old.root_allowed && !old.placement().root_allowed);
        let mut allows = record.clone();
        allows.root_allowed = true;
        let back = CapabilitiesRecord::decode(&allows.encode()).unwrap();
        assert!(back.root_allowed && back.placement().root_allowed);
    }

    #[test]
    fn placement_sees_sorted_runtimes_roots_and_ports() {
        let mut record = CapabilitiesRecord::this(
            vec![
                RuntimeFact {
                    kind: Runtime::Container,
                    version: None,
                },
                RuntimeFact {
                    kind: Runtime::Process,
                    version: None,
                },
            ],
            vec!["/b".into(), "/a".into(), "/a".into()],
        );
        record.ports_taken = vec![
            HostPort {
                port: 9000,
                protocol: Default::default(),
            },
            HostPort {
                port: 80,
                protocol: Default::default(),
            },
        ];
        let caps = record.placement();
        assert_eq!(caps.runtimes, vec![Runtime::Process, Runtime::Container]);
        assert_eq!(caps.volume_roots, vec!["/a".to_string(), "/b".to_string()]);
        assert_eq!(caps.ports_taken[0].port, 80);
    }
}
