use std::io::BufRead;

use anyhow::{Context, bail};

use crate::compact::{BucketHashes, BucketMask};
use crate::delta::Delta;
use crate::digest::Digest;
use crate::serialize::{Deserializable, Serializable};

const MAGIC_NUMBER: u16 = 45_139;

/// Chitchat message.
///
/// Each variant represents a step of the gossip "handshake"
/// between node A and node B.
/// The names {SYN, SYN-ACK, ACK} of the different steps are borrowed from
/// TCP handshake.
#[derive(Debug, Eq, PartialEq)]
pub enum ChitchatMessage {
    /// Scuttlebutt SYN: node A initiates a handshake and sends its digest.
    Syn { cluster_id: String, digest: Digest },
    /// Scuttlebutt SYN-ACK: node B returns a partial update as described in the Scuttlebutt
    /// reconciliation algorithm and its own digest.
    SynAck { digest: Digest, delta: Delta },
    /// Scuttlebutt ACK: node A returns a partial update for B.
    Ack { delta: Delta },
    /// Node B rejects the SYN message because node A and B belong to different clusters.
    BadCluster,
    /// Shoal patch, compact gossip: node A's SYN as one hash per bucket of node ids
    /// (`compact`). Node B answers only if some bucket differs.
    SynBuckets {
        cluster_id: String,
        hashes: BucketHashes,
    },
    /// Shoal patch: node B's digest of the buckets in `mask` (those whose hashes differed).
    BucketDigest { mask: BucketMask, digest: Digest },
    /// Shoal patch: node A's digest of the buckets in `mask` and its update of them for B.
    /// Node B answers with an `Ack`.
    BucketSynAck {
        mask: BucketMask,
        digest: Digest,
        delta: Delta,
    },
    /// A message used by tests to trigger a panic
    #[cfg(test)]
    PanicForTest,
}

#[derive(Clone, Copy, Eq, PartialEq)]
#[repr(u8)]
enum ProtocolVersion {
    V0 = 0,
}

impl ProtocolVersion {
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::V0),
            _ => None,
        }
    }

    pub fn to_code(self) -> u8 {
        self as u8
    }
}

#[derive(Clone, Copy)]
#[repr(u8)]
enum MessageType {
    Syn = 0,
    SynAck = 1u8,
    Ack = 2u8,
    BadCluster = 3u8,
    SynBuckets = 4u8,
    BucketDigest = 5u8,
    BucketSynAck = 6u8,
    #[cfg(test)]
    PanicForTest = 255u8,
}

impl MessageType {
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Syn),
            1 => Some(Self::SynAck),
            2 => Some(Self::Ack),
            3 => Some(Self::BadCluster),
            4 => Some(Self::SynBuckets),
            5 => Some(Self::BucketDigest),
            6 => Some(Self::BucketSynAck),
            #[cfg(test)]
            255 => Some(Self::PanicForTest),
            _ => None,
        }
    }

    pub fn to_code(self) -> u8 {
        self as u8
    }
}

impl Serializable for ChitchatMessage {
    fn serialize(&self, buf: &mut Vec<u8>) {
        buf.extend(MAGIC_NUMBER.to_le_bytes());
        ProtocolVersion::V0.to_code().serialize(buf);

        match self {
            ChitchatMessage::Syn { cluster_id, digest } => {
                buf.push(MessageType::Syn.to_code());
                digest.serialize(buf);
                cluster_id.serialize(buf);
            }
            ChitchatMessage::SynAck { digest, delta } => {
                buf.push(MessageType::SynAck.to_code());
                digest.serialize(buf);
                delta.serialize(buf);
            }
            ChitchatMessage::Ack { delta } => {
                buf.push(MessageType::Ack.to_code());
                delta.serialize(buf);
            }
            ChitchatMessage::BadCluster => {
                buf.push(MessageType::BadCluster.to_code());
            }
            ChitchatMessage::SynBuckets { cluster_id, hashes } => {
                buf.push(MessageType::SynBuckets.to_code());
                hashes.serialize(buf);
                cluster_id.serialize(buf);
            }
            ChitchatMessage::BucketDigest { mask, digest } => {
                buf.push(MessageType::BucketDigest.to_code());
                mask.serialize(buf);
                digest.serialize(buf);
            }
            ChitchatMessage::BucketSynAck {
                mask,
                digest,
                delta,
            } => {
                buf.push(MessageType::BucketSynAck.to_code());
                mask.serialize(buf);
                digest.serialize(buf);
                delta.serialize(buf);
            }
            #[cfg(test)]
            ChitchatMessage::PanicForTest => {
                buf.push(MessageType::PanicForTest.to_code());
            }
        }
    }

    fn serialized_len(&self) -> usize {
        2 + 1
            + match self {
                ChitchatMessage::Syn { cluster_id, digest } => {
                    1 + cluster_id.serialized_len() + digest.serialized_len()
                }
                ChitchatMessage::SynAck { digest, delta } => {
                    1 + digest.serialized_len() + delta.serialized_len()
                }
                ChitchatMessage::Ack { delta } => 1 + delta.serialized_len(),
                ChitchatMessage::BadCluster => 1,
                ChitchatMessage::SynBuckets { cluster_id, hashes } => {
                    1 + hashes.serialized_len() + cluster_id.serialized_len()
                }
                ChitchatMessage::BucketDigest { mask, digest } => {
                    1 + mask.serialized_len() + digest.serialized_len()
                }
                ChitchatMessage::BucketSynAck {
                    mask,
                    digest,
                    delta,
                } => 1 + mask.serialized_len() + digest.serialized_len() + delta.serialized_len(),
                #[cfg(test)]
                ChitchatMessage::PanicForTest => 1,
            }
    }
}

impl Deserializable for ChitchatMessage {
    fn deserialize(buf: &mut &[u8]) -> anyhow::Result<Self> {
        if buf.len() < 3 {
            bail!("buffer too small to store the magic number and the protocol version");
        }
        let magic_number = u16::from_le_bytes(buf[0..2].try_into().unwrap());
        if magic_number != MAGIC_NUMBER {
            bail!("invalid chitchat magic number");
        }
        let protocol_version =
            ProtocolVersion::from_code(buf[2]).context("invalid protocol version")?;

        if protocol_version != ProtocolVersion::V0 {
            bail!(
                "unsupported protocol version `{}`",
                protocol_version.to_code()
            )
        }
        buf.consume(3);

        let message_type = buf
            .first()
            .copied()
            .and_then(MessageType::from_code)
            .context("invalid message type")?;
        buf.consume(1);

        match message_type {
            MessageType::Syn => {
                let digest = Digest::deserialize(buf)?;
                let cluster_id = String::deserialize(buf)?;
                Ok(Self::Syn { cluster_id, digest })
            }
            MessageType::SynAck => {
                let digest = Digest::deserialize(buf)?;
                let delta = Delta::deserialize(buf)?;
                Ok(Self::SynAck { digest, delta })
            }
            MessageType::Ack => {
                let delta = Delta::deserialize(buf)?;
                Ok(Self::Ack { delta })
            }
            MessageType::BadCluster => Ok(Self::BadCluster),
            MessageType::SynBuckets => {
                let hashes = BucketHashes::deserialize(buf)?;
                let cluster_id = String::deserialize(buf)?;
                Ok(Self::SynBuckets { cluster_id, hashes })
            }
            MessageType::BucketDigest => {
                let mask = u32::deserialize(buf)?;
                let digest = Digest::deserialize(buf)?;
                Ok(Self::BucketDigest { mask, digest })
            }
            MessageType::BucketSynAck => {
                let mask = u32::deserialize(buf)?;
                let digest = Digest::deserialize(buf)?;
                let delta = Delta::deserialize(buf)?;
                Ok(Self::BucketSynAck {
                    mask,
                    digest,
                    delta,
                })
            }
            #[cfg(test)]
            MessageType::PanicForTest => Ok(Self::PanicForTest),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::serialize::test_serdeser_aux;
    use crate::{ChitchatId, ChitchatMessage, Delta, Digest, Heartbeat};

    #[test]
    fn test_syn() {
        {
            let syn = ChitchatMessage::Syn {
                cluster_id: "cluster-a".to_string(),
                digest: Digest::default(),
            };
            test_serdeser_aux(&syn, 17);
        }
        {
            let mut digest = Digest::default();
            let node = ChitchatId::for_local_test(10_001);
            digest.add_node(node, Heartbeat(0), 0, 0);

            let syn = ChitchatMessage::Syn {
                cluster_id: "cluster-a".to_string(),
                digest,
            };
            test_serdeser_aux(&syn, 68);
        }
    }

    #[test]
    fn test_syn_ack() {
        {
            let syn_ack = ChitchatMessage::SynAck {
                digest: Digest::default(),
                delta: Delta::default(),
            };
            // 2 (magic number) + 1 (protocol version) + 1 (message tag) + 2 (digest len) + 1 (delta
            // end op)
            test_serdeser_aux(&syn_ack, 7);
        }
        {
            // 2 bytes.
            let mut digest = Digest::default();
            let node = ChitchatId::for_local_test(10_001);
            // +43 bytes = 27 bytes (ChitchatId) + 8 (hearbeat) + 8 (max_version).
            digest.add_node(node, Heartbeat(0), 0, 0);

            // 4 bytes
            let mut delta = Delta::default();
            let node = ChitchatId::for_local_test(10_001);
            // +27 bytes (ChitchatId)
            // + 2 bytes (node delta len)
            // + 8 bytes (last_gc_version)
            // + 8 bytes (from_version).
            delta.add_node(node.clone(), 0u64, 0u64);
            // +22 bytes.
            delta.add_kv(&node, "key", "value", 1, true);
            // That's compression kicking in.
            delta.set_serialized_len(70);

            let syn_ack = ChitchatMessage::SynAck { digest, delta };
            // 1 byte (protocol version) + 1 byte (message tag) + 53 bytes (digest) + 60 bytes
            // (delta).
            test_serdeser_aux(&syn_ack, 2 + 1 + 1 + 53 + 70);
        }
    }

    #[test]
    fn test_ack() {
        {
            let delta = Delta::default();
            let ack = ChitchatMessage::Ack { delta };
            test_serdeser_aux(&ack, 5);
        }
        {
            // 4 bytes.
            let mut delta = Delta::default();
            let node = ChitchatId::for_local_test(10_001);
            // +37 bytes = 27 bytes (ChitchatId) + 2 bytes (node delta len) + 8 bytes (heartbeat).
            delta.add_node(node.clone(), 0u64, 0u64);
            // +29 bytes.
            delta.add_kv(&node, "key", "value", 1, true);
            delta.set_serialized_len(70);
            let ack = ChitchatMessage::Ack { delta };
            test_serdeser_aux(&ack, 2 + 1 + 1 + 70);
        }
    }

    #[test]
    fn test_bad_cluster() {
        test_serdeser_aux(&ChitchatMessage::BadCluster, 4);
    }

    // Shoal patch: compact gossip's messages.
    #[test]
    fn test_compact_messages() {
        let mut hashes = crate::compact::BucketHashes::default();
        hashes.0[3] = 77;
        hashes.0[31] = u32::MAX;
        let syn = ChitchatMessage::SynBuckets {
            cluster_id: "cluster-a".to_string(),
            hashes,
        };
        // 4 (header) + 128 (32 hashes) + 2 + 9 (cluster id).
        test_serdeser_aux(&syn, 4 + 128 + 2 + 9);

        let mut digest = Digest::default();
        digest.add_node(ChitchatId::for_local_test(10_001), Heartbeat(3), 0, 5);
        let digest_len = 2 + 51;
        let bucket_digest = ChitchatMessage::BucketDigest {
            mask: 1 << 9,
            digest,
        };
        test_serdeser_aux(&bucket_digest, 4 + 4 + digest_len);

        let mut digest = Digest::default();
        digest.add_node(ChitchatId::for_local_test(10_002), Heartbeat(3), 0, 5);
        let node = ChitchatId::for_local_test(10_001);
        let mut delta = Delta::default();
        delta.add_node(node.clone(), 0u64, 0u64);
        delta.add_kv(&node, "key", "value", 1, true);
        delta.set_serialized_len(70);
        let syn_ack = ChitchatMessage::BucketSynAck {
            mask: u32::MAX,
            digest,
            delta,
        };
        test_serdeser_aux(&syn_ack, 4 + 4 + digest_len + 70);
    }

    // Shoal patch: truncated or unknown compact messages are refused, never a panic.
    #[test]
    fn test_compact_messages_refuse_garbage() {
        use crate::serialize::{Deserializable, Serializable};
        let syn = ChitchatMessage::SynBuckets {
            cluster_id: "cluster-a".to_string(),
            hashes: Default::default(),
        };
        let mut bytes = Vec::new();
        syn.serialize(&mut bytes);
        for cut in 0..bytes.len() {
            assert!(
                ChitchatMessage::deserialize(&mut &bytes[..cut]).is_err(),
                "cut {cut}"
            );
        }
        let mut unknown = bytes.clone();
        unknown[3] = 7;
        assert!(ChitchatMessage::deserialize(&mut &unknown[..]).is_err());
        // Every byte string of a BucketDigest header and a few bytes: no panic.
        let mut state = 1u64;
        for _ in 0..2_000 {
            let mut garbage = vec![0x53, 0xb0, 0, 4 + (state % 3) as u8];
            for _ in 0..(state % 64) {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                garbage.push((state >> 56) as u8);
            }
            let _ = ChitchatMessage::deserialize(&mut &garbage[..]);
        }
    }
}
