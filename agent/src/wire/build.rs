//! What a build says of itself (gossiped under the `build` key, answered by `shoal version`) and
//! what `shoal upgrade status` answers.

use serde::{Deserialize, Serialize};

/// Longest build record accepted from a peer, in bytes of JSON.
pub const BUILD_RECORD_BYTES_MAX: usize = 1024;
/// Longest version or commit text kept from a peer.
const TEXT_BYTES_MAX: usize = 64;

/// What a build is and speaks. Unknown fields from a newer build are ignored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildRecord {
    /// The package version (`CARGO_PKG_VERSION`).
    pub version: String,
    /// The commit it was built from (`unknown` without git).
    pub commit: String,
    /// The oldest wire version it speaks.
    pub wire_min: u16,
    /// The newest wire version it speaks.
    pub wire_max: u16,
    /// The store layout it writes.
    pub layout: u32,
    /// The oldest placement algorithm it runs.
    pub placement_min: u32,
    /// The newest placement algorithm it runs.
    pub placement_max: u32,
}

impl BuildRecord {
    /// `0.1.0 (abc1234)`, as `shoal nodes` and `shoal version` print it.
    pub fn label(&self) -> String {
        format!("{} ({})", self.version, self.commit)
    }

    /// JSON text for the chitchat value.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a build record always serializes")
    }

    /// Parses a peer's record; anything oversized, malformed or inconsistent is an error.
    pub fn decode(text: &str) -> Result<BuildRecord, String> {
        if text.len() > BUILD_RECORD_BYTES_MAX {
            return Err(format!(
                "build record is {} bytes, more than {BUILD_RECORD_BYTES_MAX}",
                text.len()
            ));
        }
        let record: BuildRecord =
            serde_json::from_str(text).map_err(|e| format!("malformed build record: {e}"))?;
        if record.wire_min > record.wire_max || record.placement_min > record.placement_max {
            return Err("build record with a range whose start is past its end".into());
        }
        if record.version.len() > TEXT_BYTES_MAX || record.commit.len() > TEXT_BYTES_MAX {
            return Err(format!(
                "build record with a version or commit over {TEXT_BYTES_MAX} bytes"
            ));
        }
        Ok(record)
    }
}

/// An operator's hold, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldRecord {
    /// Held (true) or released.
    pub held: bool,
    /// Who asked.
    pub by: String,
    /// When (ms since the Unix epoch, the writer's clock).
    pub at_ms: u64,
}

/// Members of one build.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildGroup {
    /// The build.
    pub build: BuildRecord,
    /// How many members run it.
    pub count: usize,
    /// Their names (at most [`NAMES_PER_BUILD_MAX`]), dead ones marked `(dead)`.
    pub members: Vec<String>,
}

/// A member that holds the mesh version back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderView {
    /// Its name (or `cell NAME`).
    pub name: String,
    /// The newest wire version it speaks.
    pub wire_max: u16,
    /// Alive, or dead but not yet forgotten.
    pub alive: bool,
}

/// `shoal upgrade status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeView {
    /// The agent that answered.
    pub agent: String,
    /// Its build.
    pub agent_build: BuildRecord,
    /// The mesh version recorded now.
    pub mesh_version: u16,
    /// The placement algorithm the mesh runs at that version.
    pub placement_algorithm: u32,
    /// The highest version every known member speaks (never below the mesh version).
    pub supported: u16,
    /// The version the mesh moves to next, once nothing holds it.
    pub next: Option<u16>,
    /// An operator's hold, when held.
    pub hold: Option<HoldRecord>,
    /// Members per build, newest build first.
    pub builds: Vec<BuildGroup>,
    /// Members that keep the mesh below the answering agent's newest version.
    pub waiting_for: Vec<HolderView>,
    /// How many there are in all.
    pub waiting_count: usize,
    /// Members too new for the mesh version (they cannot speak it).
    pub too_new: Vec<String>,
}
