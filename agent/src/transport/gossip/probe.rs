//! Member probes on the gossip endpoint (issue 28): the frames of `shoal_core::verdict`'s
//! messages and the channel each network carries them on.
//!
//! A probe is a [`FrameKind::Probe`] frame of wire [`PROBE_WIRE`] (a bincode `ProbeMsg`, at most
//! [`PROBE_FRAME_MAX`] bytes): over QUIC one unidirectional stream of the gossip connection
//! (mutual TLS, node certificates only, so the sender's name is known), in memory a message on
//! the same faulty links as gossip. Sent only while the mesh version is at least [`PROBE_WIRE`]:
//! an older build refuses the frame's version, and counts it.
//!
//! Architecture Invariant: sending never waits on the network; the inbox is bounded and a full
//! one drops and counts.

use std::net::SocketAddr;
use std::sync::Arc;

use shoal_core::verdict::ProbeMsg;
use tokio::sync::mpsc;

use crate::wire::{self, FrameKind, WireError};

/// The wire version probes exist since.
pub const PROBE_WIRE: u16 = 11;
/// The mesh version compact gossip is on from (chitchat's bucket-hash exchange, heartbeats no
/// longer the liveness signal: `state::mesh::verdicts`; docs/measurements.md, "Compact gossip").
/// It was 13 until 2026-12-05, when it was switched off: with it on, the swarm ran exclusive
/// duplicates under bridge partitions (two halves joined only through one member each held the
/// other dead, and nothing relayed that the far half still ran its replicas). From 15 every
/// member publishes an exclusive lease that gossip relays (`Membership::leased_at`), and a mesh
/// at 13 or 14 gossips in heartbeat mode. Wire-13 and later frames carry and decode
/// `SynBuckets` all the same.
pub const COMPACT_WIRE: u16 = 15;

/// Whether a mesh at wire (mesh) version `version` gossips compactly.
pub fn compact_at(version: u16) -> bool {
    version >= COMPACT_WIRE
}
/// Largest probe frame after the length prefix (a name of 255 bytes and an address fit).
pub const PROBE_FRAME_MAX: usize = 512;
/// Probe messages received and not yet taken by the prober before new ones are dropped.
pub const PROBE_INBOX_LEN: usize = 1_024;

/// One probe frame received.
#[derive(Debug)]
pub struct ProbeIn {
    /// The sender's gossip address.
    pub from: SocketAddr,
    /// The name its certificate carries, when the network authenticates one.
    pub name: Option<String>,
    /// The frame, prefix included.
    pub frame: Vec<u8>,
}

/// Where probe frames go out: never waits, drops and counts when it cannot send.
pub trait ProbeLink: Send + Sync {
    /// Sends `frame` to the gossip address `to`.
    fn send(&self, to: SocketAddr, frame: Vec<u8>);
}

/// A network's probe channel: the link out and the inbox.
pub struct ProbeChannel {
    /// Sends frames.
    pub link: Arc<dyn ProbeLink>,
    /// Frames received.
    pub inbox: mpsc::Receiver<ProbeIn>,
}

/// Encodes a probe message as a frame of [`PROBE_WIRE`].
pub fn encode_probe(msg: &ProbeMsg) -> Result<Vec<u8>, WireError> {
    wire::encode_frame_at(PROBE_WIRE, FrameKind::Probe, msg, PROBE_FRAME_MAX)
}

/// Decodes a probe frame (prefix included); anything else, or a message out of bounds, is an
/// error.
pub fn decode_probe(frame: &[u8]) -> Result<ProbeMsg, WireError> {
    let wire::Frame {
        version,
        kind,
        body,
    } = wire::decode_frame(frame, PROBE_FRAME_MAX)?;
    if kind != FrameKind::Probe {
        return Err(WireError::UnexpectedKind { got: kind });
    }
    let msg: ProbeMsg = wire::decode_body_at::<ProbeMsg, PROBE_FRAME_MAX>(version, body)?;
    if !msg.valid() {
        return Err(WireError::Malformed("probe message out of bounds".into()));
    }
    Ok(msg)
}

/// Whether `frame` (prefix included) is a probe frame: the transports route it to the prober
/// instead of chitchat.
pub fn is_probe(frame: &[u8]) -> bool {
    // prefix (4), magic (2), version (2), kind (1)
    frame.get(wire::LENGTH_PREFIX_BYTES + 4) == Some(&(FrameKind::Probe as u8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn probe_frames_round_trip_and_are_told_from_gossip() {
        let msgs = [
            ProbeMsg::Ping {
                nonce: 7,
                target: "n1".into(),
                target_gen: 1_700_000_000_000,
            },
            ProbeMsg::Ack {
                nonce: 7,
                name: "n1".into(),
                generation: 3,
            },
            ProbeMsg::PingReq {
                nonce: u64::MAX,
                target: "x".repeat(255),
                target_gen: u64::MAX,
                target_addr: "[2001:db8::1]:65535".parse().unwrap(),
            },
            ProbeMsg::Nack { nonce: 0 },
            ProbeMsg::Suspect {
                target: "n2".into(),
                target_gen: 9,
            },
        ];
        for msg in msgs {
            let frame = encode_probe(&msg).unwrap();
            assert!(frame.len() <= PROBE_FRAME_MAX + wire::LENGTH_PREFIX_BYTES);
            assert!(is_probe(&frame));
            assert_eq!(decode_probe(&frame).unwrap(), msg);
        }
        let long = ProbeMsg::Ping {
            nonce: 1,
            target: "x".repeat(256),
            target_gen: 1,
        };
        let frame = encode_probe(&long).unwrap();
        assert!(decode_probe(&frame).is_err(), "a name over 255 bytes");
        let gossip = wire::encode_raw_frame(FrameKind::Gossip, b"abc", 64).unwrap();
        assert!(!is_probe(&gossip));
        assert!(decode_probe(&gossip).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_probe_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode_probe(&body);
            if let Ok(frame) = wire::encode_raw_frame_at(PROBE_WIRE, FrameKind::Probe, &body, PROBE_FRAME_MAX) {
                let _ = decode_probe(&frame);
            }
        }
    }
}
