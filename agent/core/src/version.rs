//! The versions agents must agree on, and the layout a value is encoded in.
//!
//! A build speaks every wire version in [`WIRE_MIN`]`..=`[`WIRE_CUR`]. Frames carry their version
//! in the header; a body is encoded in the layout of that version. Since version 8 a layout may
//! differ from the one before only by fields that a type declares as added at a version
//! ([`since_8`]): at an older layout such a field takes no bytes at all, so every message and
//! every stored spec of the older build encodes and decodes bit for bit as it did there.
//!
//! The layout of the value being encoded or decoded on this thread is [`layout`], set for the
//! length of one call by [`with_layout`] (the agent's frame and payload codecs do; nothing else
//! needs to). Encoding at an older layout a value that sets a field that layout lacks is an error,
//! never a silent drop: the mesh version (module `upgrade`) keeps such values from being written
//! while a member could not read them.

use std::cell::Cell;

/// The oldest wire version this build speaks: `71428bd`'s (wire 7, store layout 7).
pub const WIRE_MIN: u16 = 7;
/// The newest wire version this build speaks (8: build facts in gossip, the mesh version, the
/// `upgrade` requests, specs with `user`; 9: node capabilities in gossip and placement algorithm
/// 7, which places a replica only where it can run, `module upgrade`; 10: placement algorithm 8,
/// fixed host ports a placement resource between workloads; 11: member probes on the gossip
/// endpoint, whose verdicts replace the heartbeat detector's between members that speak it,
/// module `verdict`; 12: placement algorithm 9, a short workload with no replica placed goes
/// after the others of its priority too; 13: compact gossip, chitchat's Syn carries bucket hashes
/// instead of every member's heartbeat, and the probes watch a ring instead of heartbeats; 14: cell
/// verdicts on evidence, a stale cell `degraded` and down only when observer cells' probes of
/// its members failed, [`CellRule::Evidence`](crate::cells::CellRule); 15: compact gossip on again,
/// with the exclusive lease every member publishes while a copy of an exclusive replica may be alive on it,
/// which relays through gossip what heartbeats no longer do, `reconcile::exclusive` rule 5).
pub const WIRE_CUR: u16 = 15;

thread_local! {
    static LAYOUT: Cell<u16> = const { Cell::new(WIRE_CUR) };
}

/// The layout of the value being encoded or decoded on this thread ([`WIRE_CUR`] outside
/// [`with_layout`]).
pub fn layout() -> u16 {
    LAYOUT.with(Cell::get)
}

/// Runs `f` with [`layout`] set to `version`, restored afterwards (also when `f` panics).
pub fn with_layout<R>(version: u16, f: impl FnOnce() -> R) -> R {
    struct Restore(u16);
    impl Drop for Restore {
        fn drop(&mut self) {
            LAYOUT.with(|cell| cell.set(self.0));
        }
    }
    let _restore = Restore(LAYOUT.with(|cell| cell.replace(version)));
    f()
}

/// True when `version` is one this build speaks.
pub fn speaks(version: u16) -> bool {
    (WIRE_MIN..=WIRE_CUR).contains(&version)
}

/// serde helpers for an `Option` field added at wire version 8: `None` and no bytes at an older
/// layout; the value at 8 and later. Human-readable formats (JSON, TOML) always carry the field.
///
/// ```ignore
/// #[serde(default, with = "crate::version::since_8")]
/// pub user: Option<String>,
/// ```
pub mod since_8 {
    use serde::de::DeserializeOwned;
    use serde::{Deserializer, Serialize, Serializer};

    /// The version the field was added at.
    pub const SINCE: u16 = 8;

    /// Serializes the field, or nothing at an older layout (an error when it is set).
    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        super::refusing::serialize(value, serializer, SINCE)
    }

    /// Deserializes the field, or `None` from no bytes at an older layout.
    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<T>, D::Error> {
        super::lossy::deserialize(deserializer, SINCE)
    }
}

/// serde helpers for an informational `Option` field added at wire version 8 (a status answer's
/// extra column): at an older layout it takes no bytes and is dropped when set, because the
/// reader of that layout has no place for it and loses nothing it relies on. Never for desired
/// state: that is [`since_8`], which refuses instead.
pub mod since_8_lossy {
    use serde::de::DeserializeOwned;
    use serde::{Deserializer, Serialize, Serializer};

    /// Serializes the field, or nothing at an older layout.
    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        super::lossy::serialize(value, serializer, 8)
    }

    /// Deserializes the field, or `None` from no bytes at an older layout.
    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<T>, D::Error> {
        super::lossy::deserialize(deserializer, 8)
    }
}

/// [`since_8_lossy`] for an informational field added at wire version 9.
pub mod since_9_lossy {
    use serde::de::DeserializeOwned;
    use serde::{Deserializer, Serialize, Serializer};

    /// Serializes the field, or nothing at an older layout.
    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        super::lossy::serialize(value, serializer, 9)
    }

    /// Deserializes the field, or `None` from no bytes at an older layout.
    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<T>, D::Error> {
        super::lossy::deserialize(deserializer, 9)
    }
}

/// [`since_8`] for a field of desired state added at wire version 10.
pub mod since_10 {
    use serde::de::DeserializeOwned;
    use serde::{Deserializer, Serialize, Serializer};

    /// The version the field was added at.
    pub const SINCE: u16 = 10;

    /// Serializes the field, or nothing at an older layout (an error when it is set).
    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        super::refusing::serialize(value, serializer, SINCE)
    }

    /// Deserializes the field, or `None` from no bytes at an older layout.
    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<T>, D::Error> {
        super::lossy::deserialize(deserializer, SINCE)
    }
}

/// [`since_8_lossy`] for an informational field added at wire version 10.
pub mod since_10_lossy {
    use serde::de::DeserializeOwned;
    use serde::{Deserializer, Serialize, Serializer};

    /// Serializes the field, or nothing at an older layout.
    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        super::lossy::serialize(value, serializer, 10)
    }

    /// Deserializes the field, or `None` from no bytes at an older layout.
    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<T>, D::Error> {
        super::lossy::deserialize(deserializer, 10)
    }
}

/// [`since_8_lossy`] for an informational field added at wire version 11.
pub mod since_11_lossy {
    use serde::de::DeserializeOwned;
    use serde::{Deserializer, Serialize, Serializer};

    /// Serializes the field, or nothing at an older layout.
    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        super::lossy::serialize(value, serializer, 11)
    }

    /// Deserializes the field, or `None` from no bytes at an older layout.
    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<T>, D::Error> {
        super::lossy::deserialize(deserializer, 11)
    }
}

/// [`since_8_lossy`] for an informational field added at wire version 14.
pub mod since_14_lossy {
    use serde::de::DeserializeOwned;
    use serde::{Deserializer, Serialize, Serializer};

    /// Serializes the field, or nothing at an older layout.
    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        super::lossy::serialize(value, serializer, 14)
    }

    /// Deserializes the field, or `None` from no bytes at an older layout.
    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<T>, D::Error> {
        super::lossy::deserialize(deserializer, 14)
    }
}

/// A field of desired state added at wire version `since`: no bytes at an older layout, and an
/// error when it is set there (never a silent drop).
mod refusing {
    use serde::{Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
        since: u16,
    ) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() || super::layout() >= since {
            return value.serialize(serializer);
        }
        if value.is_some() {
            return Err(serde::ser::Error::custom(format!(
                "a field added at wire version {since} is set, and this value is encoded for \
                 version {}",
                super::layout()
            )));
        }
        ().serialize(serializer)
    }
}

/// An informational `Option` field added at wire version `since`: no bytes at an older layout.
mod lossy {
    use serde::de::DeserializeOwned;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
        since: u16,
    ) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() || super::layout() >= since {
            return value.serialize(serializer);
        }
        ().serialize(serializer)
    }

    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        deserializer: D,
        since: u16,
    ) -> Result<Option<T>, D::Error> {
        if deserializer.is_human_readable() || super::layout() >= since {
            return Option::<T>::deserialize(deserializer);
        }
        <()>::deserialize(deserializer)?;
        Ok(None)
    }
}

/// A mark, zero bytes on the wire, that a message (a request variant, say) exists only since wire
/// version `V`: encoding or decoding it at an older layout is an error, so a message an older
/// peer would misread is never sent to it nor taken from a frame that claims that version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Since<const V: u16>;

impl<const V: u16> serde::Serialize for Since<V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if !serializer.is_human_readable() && layout() < V {
            return Err(serde::ser::Error::custom(format!(
                "this message exists since wire version {V}; the peer speaks {}",
                layout()
            )));
        }
        serializer.serialize_unit()
    }
}

impl<'de, const V: u16> serde::Deserialize<'de> for Since<V> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if !deserializer.is_human_readable() && layout() < V {
            return Err(serde::de::Error::custom(format!(
                "this message exists since wire version {V}, not in a frame of version {}",
                layout()
            )));
        }
        <()>::deserialize(deserializer)?;
        Ok(Since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Old {
        name: String,
        n: u32,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct New {
        name: String,
        n: u32,
        #[serde(default, with = "since_8")]
        user: Option<String>,
    }

    fn bin<T: Serialize>(v: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
        bincode::serde::encode_to_vec(v, bincode::config::standard())
    }

    #[test]
    fn an_added_field_takes_no_bytes_at_the_older_layout() {
        let old = Old {
            name: "web".into(),
            n: 3,
        };
        let new = New {
            name: "web".into(),
            n: 3,
            user: None,
        };
        let old_bytes = bin(&old).unwrap();
        assert_eq!(with_layout(7, || bin(&new)).unwrap(), old_bytes);
        let (decoded, used): (New, usize) = with_layout(7, || {
            bincode::serde::decode_from_slice(&old_bytes, bincode::config::standard())
        })
        .unwrap();
        assert_eq!((decoded, used), (new, old_bytes.len()));
    }

    #[test]
    fn a_set_added_field_is_refused_at_the_older_layout_and_kept_at_its_own() {
        let new = New {
            name: "web".into(),
            n: 3,
            user: Some("nobody".into()),
        };
        let err = with_layout(7, || bin(&new)).unwrap_err().to_string();
        assert!(err.contains("wire version 8"), "{err}");
        let bytes = with_layout(8, || bin(&new)).unwrap();
        let (decoded, _): (New, usize) = with_layout(8, || {
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
        })
        .unwrap();
        assert_eq!(decoded, new);
        assert_eq!(layout(), WIRE_CUR, "the layout is restored");
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Req {
        Old(u32),
        New { since: Since<8>, n: u32 },
    }

    #[test]
    fn a_message_since_8_is_refused_at_7_both_ways() {
        let new = Req::New { since: Since, n: 1 };
        assert!(with_layout(7, || bin(&new)).is_err());
        let bytes = with_layout(8, || bin(&new)).unwrap();
        let at = |v| {
            with_layout(v, || {
                bincode::serde::decode_from_slice::<Req, _>(&bytes, bincode::config::standard())
            })
        };
        assert!(at(7).is_err());
        assert_eq!(at(8).unwrap().0, new);
        assert_eq!(
            with_layout(7, || bin(&Req::Old(3))).unwrap(),
            bin(&Req::Old(3)).unwrap()
        );
    }

    #[test]
    fn json_always_carries_the_field() {
        let new = New {
            name: "web".into(),
            n: 3,
            user: Some("nobody".into()),
        };
        let text = with_layout(7, || serde_json::to_string(&new)).unwrap();
        assert!(text.contains("nobody"));
    }
}
