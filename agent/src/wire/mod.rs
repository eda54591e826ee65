//! Wire frames: a length prefix, a versioned envelope header, and a bincode 2 body.
//!
//! ```text
//! frame = len: u32 (big endian, bytes after the prefix)
//!         magic: u16 = 0x5348 ("SH") | version: u16 | kind: u8
//!         body: bincode 2 (standard config) of the message, or raw bytes for gossip
//! ```
//!
//! The header has a fixed layout so that a frame from another protocol or version is recognised
//! before any body is decoded. Bodies are decoded with `config::standard().with_limit::<N>()` and
//! must be consumed whole. Every size is checked before anything is allocated for it.
//!
//! A build speaks every version in [`WIRE_MIN`]`..=`[`WIRE_CUR`] (`shoal_core::version`): a frame
//! of any of them is accepted, its body decoded in that version's layout, and the answer to a
//! request goes back in the version the request came in. What a build sends first goes at the
//! mesh version (the highest every member speaks, `crate::state::mesh::upgrade`); a caller that gets a
//! reject in an older version than it sent retries once in that version ([`crate::transport::rpc`]), so a
//! new CLI talks to an old agent.
//!
//! Architecture Invariant: nothing here panics on bytes from the network, and no decode allocates
//! more than the frame limit it was given.

pub mod api;
pub mod build;
pub mod cells;
pub mod endpoints;
pub mod events;
pub mod exec;
pub mod logs;
pub mod page;
pub mod plan;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Frame magic: "SH".
pub const MAGIC: u16 = 0x5348;
/// The newest wire version this build speaks (2: certificate roles, entries with a proof of
/// origin; 3: specs with the rollout's deadline and failure threshold, which a build of 2 cannot
/// decode; 4: specs with named ports, and probes that name one; 5: containers with a pull policy,
/// and status with a pull's progress; 6: specs with volumes and a restart stamp, tombstones that
/// purge data, and `Delete` with `purge_data`; 7: specs with `sticky_for`, `on_data_loss` and
/// `stop_grace`, and `Exec` with a terminal's size; 8: what `shoal_core::version` lists). Builds
/// before 8 spoke exactly one version; since 8 a build speaks a range.
pub use shoal_core::version::{WIRE_CUR, WIRE_MIN};
/// Bytes of the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;
/// Bytes of the envelope header (magic, version, kind).
pub const HEADER_BYTES: usize = 5;
/// Largest API frame (request or response), prefix excluded.
pub const API_FRAME_MAX_BYTES: usize = 4 << 20;
/// Largest gossip frame, prefix excluded (chitchat messages stay under 64 KiB; digests of very
/// large clusters exceed that, which is what the margin is for).
pub const GOSSIP_FRAME_MAX_BYTES: usize = 1 << 20;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// An API request (bincode body).
    Request = 1,
    /// An API response (bincode body).
    Response = 2,
    /// The server refused the request before the handler saw it (body: a bincode `String`).
    Reject = 3,
    /// A chitchat message in chitchat's own serialization.
    Gossip = 4,
    /// A chitchat message, zstd-compressed.
    GossipZstd = 5,
    /// A member probe (`shoal_core::verdict::ProbeMsg`, bincode), since wire 11.
    Probe = 6,
}

impl FrameKind {
    fn from_u8(code: u8) -> Option<FrameKind> {
        Some(match code {
            1 => FrameKind::Request,
            2 => FrameKind::Response,
            3 => FrameKind::Reject,
            4 => FrameKind::Gossip,
            5 => FrameKind::GossipZstd,
            6 => FrameKind::Probe,
            _ => return None,
        })
    }
}

/// The kind as a message names it: `request`, `response`, `reject`, `gossip`.
impl std::fmt::Display for FrameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FrameKind::Request => "request",
            FrameKind::Response => "response",
            FrameKind::Reject => "reject",
            FrameKind::Gossip => "gossip",
            FrameKind::GossipZstd => "compressed gossip",
            FrameKind::Probe => "probe",
        })
    }
}

/// Why a frame was refused. Refusing a frame changes no state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The frame (or the body about to be encoded) exceeds the limit.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// Announced or actual length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The input ended before the frame did.
    #[error("truncated frame: {got} of {expected} bytes")]
    Truncated {
        /// Bytes the frame needed.
        expected: usize,
        /// Bytes there were.
        got: usize,
    },
    /// Not a Shoal frame.
    #[error("bad magic {0:#06x}: not a Shoal frame")]
    BadMagic(u16),
    /// A Shoal frame of a wire version this build does not speak.
    #[error(
        "wire version {got} not supported (this build speaks {min} to {max}); {}",
        if *got > *max { "upgrade this side first, or roll the newer side back" }
        else { "the older side is more than one version behind: upgrade it through the builds between" }
    )]
    BadVersion {
        /// The version found.
        got: u16,
        /// The oldest version this build speaks.
        min: u16,
        /// The newest version this build speaks.
        max: u16,
    },
    /// An unknown frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// A frame of another kind than the one expected here.
    #[error("unexpected {got} frame")]
    UnexpectedKind {
        /// The kind found.
        got: FrameKind,
    },
    /// The body does not decode as the expected message.
    #[error("malformed body: {0}")]
    Malformed(String),
    /// The body decoded but bytes were left over.
    #[error("{extra} trailing bytes after the body")]
    Trailing {
        /// Bytes left over.
        extra: usize,
    },
    /// The message could not be encoded.
    #[error("encoding failed: {0}")]
    Encode(String),
    /// Reading the frame failed.
    #[error("reading frame: {0}")]
    Io(String),
}

/// The bincode configuration for bodies: standard (varint) encoding.
pub fn bincode_config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// A checked frame: its version, its kind and its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The wire version it was written in (one this build speaks).
    pub version: u16,
    /// What it carries.
    pub kind: FrameKind,
    /// The body, not yet decoded.
    pub body: &'a [u8],
}

/// Encodes `body` as a frame of `kind` in this build's newest version ([`WIRE_CUR`]), refusing to
/// produce more than `max` bytes after the prefix.
pub fn encode_frame<T: Serialize + ?Sized>(
    kind: FrameKind,
    body: &T,
    max: usize,
) -> Result<Vec<u8>, WireError> {
    encode_frame_at(WIRE_CUR, kind, body, max)
}

/// Encodes `body` as a frame of `kind` in wire `version` (its header and its body's layout),
/// refusing to produce more than `max` bytes after the prefix, a version this build does not
/// speak, and a body that sets what `version` cannot carry.
pub fn encode_frame_at<T: Serialize + ?Sized>(
    version: u16,
    kind: FrameKind,
    body: &T,
    max: usize,
) -> Result<Vec<u8>, WireError> {
    check_version(version)?;
    let mut frame = start_frame(version, kind, 256);
    shoal_core::version::with_layout(version, || {
        bincode::serde::encode_into_std_write(body, &mut frame, bincode_config())
    })
    .map_err(|e| WireError::Encode(e.to_string()))?;
    finish_frame(frame, max)
}

/// Encodes raw `body` bytes as a frame of `kind` in [`WIRE_CUR`].
pub fn encode_raw_frame(kind: FrameKind, body: &[u8], max: usize) -> Result<Vec<u8>, WireError> {
    encode_raw_frame_at(WIRE_CUR, kind, body, max)
}

/// Encodes raw `body` bytes as a frame of `kind` in wire `version` (gossip carries chitchat's own
/// serialization, the same in every version).
pub fn encode_raw_frame_at(
    version: u16,
    kind: FrameKind,
    body: &[u8],
    max: usize,
) -> Result<Vec<u8>, WireError> {
    check_version(version)?;
    let frame_len = HEADER_BYTES + body.len();
    if frame_len > max {
        return Err(WireError::TooLarge {
            len: frame_len,
            max,
        });
    }
    let mut frame = start_frame(version, kind, body.len());
    frame.extend_from_slice(body);
    finish_frame(frame, max)
}

fn check_version(version: u16) -> Result<(), WireError> {
    if shoal_core::version::speaks(version) {
        Ok(())
    } else {
        Err(WireError::BadVersion {
            got: version,
            min: WIRE_MIN,
            max: WIRE_CUR,
        })
    }
}

fn start_frame(version: u16, kind: FrameKind, body_capacity: usize) -> Vec<u8> {
    let mut frame = Vec::with_capacity(LENGTH_PREFIX_BYTES + HEADER_BYTES + body_capacity);
    frame.extend_from_slice(&[0u8; LENGTH_PREFIX_BYTES]);
    frame.extend_from_slice(&MAGIC.to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.push(kind as u8);
    frame
}

fn finish_frame(mut frame: Vec<u8>, max: usize) -> Result<Vec<u8>, WireError> {
    let len = frame.len() - LENGTH_PREFIX_BYTES;
    if len > max {
        return Err(WireError::TooLarge { len, max });
    }
    let prefix = u32::try_from(len).map_err(|_| WireError::TooLarge { len, max })?;
    frame[..LENGTH_PREFIX_BYTES].copy_from_slice(&prefix.to_be_bytes());
    Ok(frame)
}

/// Checks a whole frame (prefix included) of at most `max` bytes after the prefix and returns its
/// version, kind and body. The prefix must match the bytes exactly.
pub fn decode_frame(bytes: &[u8], max: usize) -> Result<Frame<'_>, WireError> {
    let Some((prefix, rest)) = bytes.split_first_chunk::<LENGTH_PREFIX_BYTES>() else {
        return Err(WireError::Truncated {
            expected: LENGTH_PREFIX_BYTES,
            got: bytes.len(),
        });
    };
    let len = u32::from_be_bytes(*prefix) as usize;
    if len > max {
        return Err(WireError::TooLarge { len, max });
    }
    if rest.len() < len {
        return Err(WireError::Truncated {
            expected: len,
            got: rest.len(),
        });
    }
    if rest.len() > len {
        return Err(WireError::Trailing {
            extra: rest.len() - len,
        });
    }
    decode_envelope(rest)
}

/// Checks an envelope (a frame without its prefix) and returns its version, kind and body.
pub fn decode_envelope(envelope: &[u8]) -> Result<Frame<'_>, WireError> {
    let Some((header, body)) = envelope.split_first_chunk::<HEADER_BYTES>() else {
        return Err(WireError::Truncated {
            expected: HEADER_BYTES,
            got: envelope.len(),
        });
    };
    let magic = u16::from_be_bytes([header[0], header[1]]);
    if magic != MAGIC {
        return Err(WireError::BadMagic(magic));
    }
    let version = u16::from_be_bytes([header[2], header[3]]);
    check_version(version)?;
    let kind = FrameKind::from_u8(header[4]).ok_or(WireError::UnknownKind(header[4]))?;
    Ok(Frame {
        version,
        kind,
        body,
    })
}

/// Decodes a bincode body in [`WIRE_CUR`]'s layout, allocating at most `LIMIT` bytes for its
/// contents and requiring every byte to be consumed.
pub fn decode_body<T: DeserializeOwned, const LIMIT: usize>(body: &[u8]) -> Result<T, WireError> {
    decode_body_at::<T, LIMIT>(WIRE_CUR, body)
}

/// Decodes a bincode body in wire `version`'s layout, allocating at most `LIMIT` bytes for its
/// contents and requiring every byte to be consumed.
pub fn decode_body_at<T: DeserializeOwned, const LIMIT: usize>(
    version: u16,
    body: &[u8],
) -> Result<T, WireError> {
    check_version(version)?;
    let config = bincode_config().with_limit::<LIMIT>();
    let (value, used) = shoal_core::version::with_layout(version, || {
        bincode::serde::decode_from_slice::<T, _>(body, config)
    })
    .map_err(|e| WireError::Malformed(e.to_string()))?;
    if used != body.len() {
        return Err(WireError::Trailing {
            extra: body.len() - used,
        });
    }
    Ok(value)
}

/// Reads one frame (prefix included) from `reader`, refusing one announced over `max` bytes
/// before allocating for it.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<Vec<u8>, WireError> {
    let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
    reader
        .read_exact(&mut prefix)
        .await
        .map_err(|e| WireError::Io(e.to_string()))?;
    let len = u32::from_be_bytes(prefix) as usize;
    if len > max {
        return Err(WireError::TooLarge { len, max });
    }
    let mut frame = vec![0u8; LENGTH_PREFIX_BYTES + len];
    frame[..LENGTH_PREFIX_BYTES].copy_from_slice(&prefix);
    reader
        .read_exact(&mut frame[LENGTH_PREFIX_BYTES..])
        .await
        .map_err(|e| WireError::Io(e.to_string()))?;
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Sample {
        Put {
            name: String,
            data: Vec<u8>,
            version: u64,
        },
        List(Vec<String>),
        Ping,
    }

    const LIMIT: usize = 64 << 10;

    #[test]
    fn round_trip() {
        let msg = Sample::Put {
            name: "web".into(),
            data: vec![1, 2, 3],
            version: 7,
        };
        let frame = encode_frame(FrameKind::Request, &msg, LIMIT).unwrap();
        let decoded = decode_frame(&frame, LIMIT).unwrap();
        assert_eq!(
            (decoded.version, decoded.kind),
            (WIRE_CUR, FrameKind::Request)
        );
        assert_eq!(decode_body::<Sample, LIMIT>(decoded.body).unwrap(), msg);
    }

    #[test]
    fn refusals_are_typed() {
        let frame = encode_frame(FrameKind::Response, &Sample::Ping, LIMIT).unwrap();
        let mut trailing = frame.clone();
        trailing.push(0);
        assert!(matches!(
            decode_frame(&trailing, LIMIT),
            Err(WireError::Trailing { extra: 1 })
        ));
        let mut bad_version = frame.clone();
        bad_version[7] = (WIRE_CUR + 1) as u8;
        assert!(matches!(
            decode_frame(&bad_version, LIMIT),
            Err(WireError::BadVersion { .. })
        ));
        let mut bad_magic = frame.clone();
        bad_magic[4] = 0;
        assert!(matches!(
            decode_frame(&bad_magic, LIMIT),
            Err(WireError::BadMagic(_))
        ));
        assert!(matches!(
            decode_frame(&frame, 3),
            Err(WireError::TooLarge { .. })
        ));
        assert!(matches!(
            decode_frame(&frame[..6], LIMIT),
            Err(WireError::Truncated { .. })
        ));
        // A body with trailing bytes inside a well-formed frame.
        let mut body = bincode::serde::encode_to_vec(Sample::Ping, bincode_config()).unwrap();
        body.push(0);
        let frame = encode_raw_frame(FrameKind::Request, &body, LIMIT).unwrap();
        let body = decode_frame(&frame, LIMIT).unwrap().body;
        assert!(matches!(
            decode_body::<Sample, LIMIT>(body),
            Err(WireError::Trailing { .. })
        ));
        let big = Sample::List(vec!["x".repeat(1000); 100]);
        assert!(matches!(
            encode_frame(FrameKind::Request, &big, LIMIT),
            Err(WireError::TooLarge { .. })
        ));
    }

    #[test]
    fn huge_announced_lengths_are_refused_before_allocating() {
        // A body announcing a 2^60-byte string.
        let mut body = vec![0u8]; // variant Put
        body.push(255); // varint marker for u64
        body.extend_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(decode_body::<Sample, LIMIT>(&body).is_err());
    }

    #[test]
    fn every_spoken_version_is_accepted_and_answered_in_kind() {
        for version in WIRE_MIN..=WIRE_CUR {
            let frame = encode_frame_at(version, FrameKind::Request, &Sample::Ping, LIMIT).unwrap();
            assert_eq!(u16::from_be_bytes([frame[6], frame[7]]), version);
            assert_eq!(decode_frame(&frame, LIMIT).unwrap().version, version);
        }
        for version in [WIRE_MIN - 1, WIRE_CUR + 1] {
            let err =
                encode_frame_at(version, FrameKind::Request, &Sample::Ping, LIMIT).unwrap_err();
            assert!(matches!(err, WireError::BadVersion { .. }), "{err}");
            let mut frame = encode_frame(FrameKind::Request, &Sample::Ping, LIMIT).unwrap();
            frame[6..8].copy_from_slice(&version.to_be_bytes());
            let err = decode_frame(&frame, LIMIT).unwrap_err().to_string();
            assert!(
                err.contains(&format!("wire version {version} not supported")),
                "{err}"
            );
            assert!(err.contains(&format!("{WIRE_MIN} to {WIRE_CUR}")), "{err}");
        }
    }

    #[tokio::test]
    async fn read_frame_bounds_the_prefix() {
        let mut input: &[u8] = &[0xff, 0xff, 0xff, 0xff, 1, 2, 3];
        assert!(matches!(
            read_frame(&mut input, LIMIT).await,
            Err(WireError::TooLarge { .. })
        ));
        let frame = encode_frame(FrameKind::Request, &Sample::Ping, LIMIT).unwrap();
        let mut input: &[u8] = &frame;
        assert_eq!(read_frame(&mut input, LIMIT).await.unwrap(), frame);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(frame) = decode_frame(&bytes, LIMIT) {
                let _ = decode_body_at::<Sample, LIMIT>(frame.version, frame.body);
            }
            let _ = decode_body::<Sample, LIMIT>(&bytes);
            let _ = decode_envelope(&bytes);
        }

        #[test]
        fn arbitrary_bodies_in_valid_frames_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            let frame = encode_raw_frame(FrameKind::Request, &body, LIMIT).unwrap();
            let decoded = decode_frame(&frame, LIMIT).unwrap();
            prop_assert_eq!(decoded.kind, FrameKind::Request);
            let _ = decode_body::<Sample, LIMIT>(decoded.body);
        }
    }
}
