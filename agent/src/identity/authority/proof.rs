//! Proof of origin of a desired-state entry: the writing agent signs the entry with its node key
//! and attaches its certificate; every receiver checks that the certificate chains to the cluster
//! CA (at the entry's write time, against the revocations it holds), that it is a node
//! certificate named as the entry's version says, and that the signature covers this very entry.
//! So an entry, a tombstone or a version cannot be made up or attributed to another node through
//! replication, not even by a peer with a valid certificate.

use serde::{Deserialize, Serialize};
use shoal_core::store::{Entry, PROOF_BYTES_MAX};

/// Domain separation: these signatures can never be mistaken for TLS handshake signatures.
const CONTEXT: &[u8] = b"shoal-entry-proof/1\0";

/// What [`Entry::proof`] holds (bincode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// Who asked for the write (`name (role)` of the client certificate), signed with the rest.
    pub asked_by: String,
    /// The writer's certificate (DER).
    pub cert: Vec<u8>,
    /// The TLS signature scheme (IANA code point) of `signature`.
    pub scheme: u16,
    /// The signature over [`signed_bytes`].
    pub signature: Vec<u8>,
}

impl Proof {
    /// Encodes the proof for [`Entry::proof`].
    pub fn encode(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(self, bincode::config::standard())
            .expect("encoding a proof into a Vec cannot fail")
    }

    /// Decodes an entry's proof, bounded by [`PROOF_BYTES_MAX`].
    pub fn decode(bytes: &[u8]) -> Result<Proof, String> {
        if bytes.is_empty() {
            return Err("the entry carries no proof of origin".into());
        }
        let config = bincode::config::standard().with_limit::<PROOF_BYTES_MAX>();
        match bincode::serde::decode_from_slice::<Proof, _>(bytes, config) {
            Ok((proof, used)) if used == bytes.len() => Ok(proof),
            Ok(_) => Err("the proof has trailing bytes".into()),
            Err(e) => Err(format!("the proof does not decode: {e}")),
        }
    }
}

/// The bytes a proof signs: the entry's name, version, body, and who asked, each length-prefixed
/// (so no two different entries share them).
pub fn signed_bytes(entry: &Entry, asked_by: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(CONTEXT.len() + entry.body.len_bytes() + 128);
    out.extend_from_slice(CONTEXT);
    let mut put = |bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    };
    entry.canonical_parts(&mut put);
    put(asked_by.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_core::hlc::{Hlc, Version};
    use shoal_core::store::Body;

    fn entry(body: Body) -> Entry {
        Entry {
            name: "web".into(),
            version: Version::new(
                Hlc {
                    wall_ms: 5,
                    logical: 1,
                },
                "n1",
            ),
            body,
            proof: Vec::new(),
        }
    }

    #[test]
    fn every_field_is_signed() {
        let base = entry(Body::Live(b"spec".to_vec()));
        let sig = signed_bytes(&base, "alice (client)");
        let mut other = base.clone();
        other.version.node = "n2".into();
        assert_ne!(signed_bytes(&other, "alice (client)"), sig);
        let tomb = entry(Body::Tombstone {
            deleted_at_ms: 5,
            purge_data: false,
        });
        assert_ne!(signed_bytes(&tomb, "alice (client)"), sig);
        assert_ne!(signed_bytes(&base, "bob (client)"), sig);
    }

    #[test]
    fn proofs_decode_with_bounds() {
        let proof = Proof {
            asked_by: "a".into(),
            cert: vec![1; 10],
            scheme: 0x0403,
            signature: vec![2; 64],
        };
        assert_eq!(Proof::decode(&proof.encode()).unwrap(), proof);
        assert!(Proof::decode(&[]).is_err());
        let mut long = proof.encode();
        long.push(0);
        assert!(Proof::decode(&long).is_err());
        let huge = Proof {
            cert: vec![0; PROOF_BYTES_MAX],
            ..proof
        };
        assert!(Proof::decode(&huge.encode()).is_err());
    }
}
