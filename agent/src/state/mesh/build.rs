//! The build facts every agent gossips under [`BUILD_KEY`]: its version and commit, the wire
//! versions it speaks, the store layout it writes and the placement algorithms it runs. An agent
//! without the key is a build before 8, which spoke wire 7 only ([`legacy`]).
//!
//! A key of its own, not a field of the node record: builds before 8 refuse a node record with a
//! field they do not know, and ignore keys they do not know (chitchat passes every key on).

pub use crate::wire::build::{BuildRecord, BUILD_RECORD_BYTES_MAX};

use super::record::NodeRecord;

/// Chitchat key holding the JSON-encoded [`BuildRecord`].
pub const BUILD_KEY: &str = "build";

/// This build.
pub fn this() -> BuildRecord {
    BuildRecord {
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("SHOAL_COMMIT").to_string(),
        wire_min: shoal_core::version::WIRE_MIN,
        wire_max: shoal_core::version::WIRE_CUR,
        layout: crate::state::store_db::LAYOUT,
        placement_min: shoal_core::upgrade::placement_algorithm(shoal_core::version::WIRE_MIN),
        placement_max: shoal_core::placement::PLACEMENT_ALGORITHM_VERSION,
    }
}

/// A member that gossips no build key: a build before 8 (wire 7 and layout 7 only), with what
/// its node record says, when it has one.
pub fn legacy(record: Option<&NodeRecord>) -> BuildRecord {
    let placement = record.map_or(6, |r| r.placement_version);
    BuildRecord {
        version: record.map_or_else(|| "?".to_string(), |r| r.agent_version.clone()),
        commit: "?".to_string(),
        wire_min: 7,
        wire_max: 7,
        layout: 7,
        placement_min: placement,
        placement_max: placement,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_build_round_trips_and_speaks_its_range() {
        let this = this();
        assert_eq!(BuildRecord::decode(&this.encode()).unwrap(), this);
        assert!(this.wire_min < this.wire_max, "a build speaks N-1 and N");
        assert!(!this.commit.is_empty());
    }

    #[test]
    fn a_newer_builds_fields_are_ignored_and_bad_records_refused() {
        let mut value: serde_json::Value = serde_json::from_str(&this().encode()).unwrap();
        value["features"] = serde_json::json!(["x"]);
        assert!(BuildRecord::decode(&value.to_string()).is_ok());
        value["wire_min"] = 9.into();
        value["wire_max"] = 8.into();
        assert!(BuildRecord::decode(&value.to_string()).is_err());
        assert!(BuildRecord::decode(&"x".repeat(2000)).is_err());
        assert!(BuildRecord::decode("{").is_err());
    }

    #[test]
    fn a_member_without_the_key_is_a_wire_7_build() {
        let legacy = legacy(None);
        assert_eq!((legacy.wire_min, legacy.wire_max, legacy.layout), (7, 7, 7));
    }
}
