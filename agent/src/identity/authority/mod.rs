//! Who may do what, and who wrote what.
//!
//! - [`roles`]: which certificate role may make which API request;
//! - [`proof`]: the signature every agent puts on its writes, checked by every receiver;
//! - [`crl`]: revocation lists, signed by the CA, spread through the store, applied live;
//! - [`Authority`]: one agent's keys, trust roots and revocations, the checks built from them,
//!   and the counters of what was refused.
//!
//! An agent over QUIC holds a certified authority ([`Authority::certified`]). The in-memory
//! network of the simulator has no certificates: its agents hold [`Authority::unsigned`], which
//! signs nothing and accepts every entry. Signatures are exercised by the agent's tests with real
//! certificates, not by the simulator.

pub mod caps;
pub use super::crl;
pub mod proof;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::sign::SigningKey;
use rustls::SignatureScheme;
use shoal_core::store::Entry;

use crate::identity::pki::{Identity, Role};
use crate::identity::tls::TlsError;
use proof::{signed_bytes, Proof};

/// Most certificates whose chain check is remembered (then the memory is cleared).
const VERIFIED_CERTS_MAX: usize = 4096;

/// Counters of what the authority refused. Monotonic.
#[derive(Debug, Default)]
pub struct AuthorityStats {
    /// API requests refused because the caller's role may not make them.
    pub requests_unauthorized: AtomicU64,
    /// Entries from peers dropped because their proof of origin failed.
    pub entries_unverified: AtomicU64,
    /// Revocation lists refused (not signed by the CA, older than the one held, malformed).
    pub crls_refused: AtomicU64,
    /// Revocation lists adopted.
    pub crls_adopted: AtomicU64,
    /// Open connections closed because their peer's certificate was revoked.
    pub connections_revoked: AtomicU64,
}

/// A point-in-time copy of [`AuthorityStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(missing_docs)] // Same fields as AuthorityStats.
pub struct AuthorityStatsSnapshot {
    pub requests_unauthorized: u64,
    pub entries_unverified: u64,
    pub crls_refused: u64,
    pub crls_adopted: u64,
    pub connections_revoked: u64,
}

/// The keys and trust of a certified agent.
struct Keys {
    /// This node's name (the signer).
    name: String,
    /// This node's certificate (DER), attached to each proof.
    cert: Vec<u8>,
    /// Signs with the node's key.
    signing: Arc<dyn SigningKey>,
    /// The cluster CA certificates.
    ca_certs: Vec<CertificateDer<'static>>,
}

/// What a checked certificate says of its holder: enough to check its signatures without
/// parsing it again.
#[derive(Debug, Clone)]
struct Signer {
    name: String,
    role: Role,
    /// The subject public key (the bit string of its SPKI).
    key: Vec<u8>,
    /// Its validity, ms since the Unix epoch, both ends included.
    valid_ms: (u64, u64),
}

/// One agent's authority: see the module documentation.
pub struct Authority {
    keys: RwLock<Option<Keys>>,
    /// The revocation list in force (newest adopted), if any.
    crl: RwLock<Option<crl::Crl>>,
    /// Chain checks, rebuilt when the revocations change.
    verifier: RwLock<Option<Arc<dyn ClientCertVerifier>>>,
    /// Certificates whose chain was checked, by hash of their DER.
    verified: Mutex<HashMap<u64, Signer>>,
    /// Open connections by the serial of their peer's certificate (closed on revocation).
    connections: Mutex<Vec<(Vec<u8>, quinn::Connection)>>,
    /// Endpoints whose TLS configuration follows the identity and the revocations.
    endpoints: Mutex<Vec<crate::identity::tls::LiveEndpoint>>,
    stats: AuthorityStats,
}

impl Default for Authority {
    fn default() -> Self {
        Authority::unsigned()
    }
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("certified", &self.is_certified())
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// An authority with no keys: signs nothing, accepts every entry (the in-memory network).
    pub fn unsigned() -> Self {
        Authority {
            keys: RwLock::new(None),
            crl: RwLock::new(None),
            verifier: RwLock::new(None),
            verified: Mutex::new(HashMap::new()),
            connections: Mutex::new(Vec::new()),
            endpoints: Mutex::new(Vec::new()),
            stats: AuthorityStats::default(),
        }
    }

    /// The authority of a node identity: signs with its key, checks against its CA.
    pub fn certified(identity: &Identity) -> Result<Self, TlsError> {
        let authority = Authority::unsigned();
        authority.set_identity(identity)?;
        Ok(authority)
    }

    /// Whether this authority signs and checks.
    pub fn is_certified(&self) -> bool {
        self.keys.read().expect("keys lock").is_some()
    }

    /// Switches to `identity` (a renewed certificate): later writes are signed with it, and the
    /// live endpoints present it to new connections.
    pub fn set_identity(&self, identity: &Identity) -> Result<(), TlsError> {
        if identity.role != Role::Node {
            return Err(TlsError::Identity(format!(
                "{} is a {} certificate; an agent needs a node certificate \
                 (`shoal pki issue --role node`)",
                identity.name, identity.role
            )));
        }
        let signing = crate::identity::tls::crypto_provider()
            .key_provider
            .load_private_key(identity.key.clone_key())?;
        let cert_key = x509_parser::parse_x509_certificate(identity.cert_chain[0].as_ref())
            .map(|(_, c)| c.public_key().raw.to_vec())
            .map_err(|e| {
                TlsError::Identity(format!("{}.crt does not parse: {e}", identity.name))
            })?;
        if signing.public_key().map(|k| k.to_vec()) != Some(cert_key) {
            return Err(TlsError::Identity(format!(
                "{}.key does not match {}.crt",
                identity.name, identity.name
            )));
        }
        *self.keys.write().expect("keys lock") = Some(Keys {
            name: identity.name.clone(),
            cert: identity.cert_chain[0].to_vec(),
            signing,
            ca_certs: identity.ca_certs.clone(),
        });
        self.rebuild_verifier()?;
        self.refresh_endpoints(Some(identity));
        Ok(())
    }

    /// Counters.
    pub fn stats(&self) -> AuthorityStatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let s = &self.stats;
        AuthorityStatsSnapshot {
            requests_unauthorized: get(&s.requests_unauthorized),
            entries_unverified: get(&s.entries_unverified),
            crls_refused: get(&s.crls_refused),
            crls_adopted: get(&s.crls_adopted),
            connections_revoked: get(&s.connections_revoked),
        }
    }

    /// Counts a request refused for its caller's role.
    pub fn count_unauthorized(&self) {
        self.stats
            .requests_unauthorized
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Signs `entry` (a local write) as this node, recording who asked. No-op when unsigned.
    pub fn seal(&self, entry: &mut Entry, asked_by: &str) {
        let keys = self.keys.read().expect("keys lock");
        let Some(keys) = keys.as_ref() else {
            return;
        };
        debug_assert_eq!(
            entry.version.node, keys.name,
            "sealing another node's write"
        );
        let offered = [
            SignatureScheme::ECDSA_NISTP256_SHA256,
            SignatureScheme::ECDSA_NISTP384_SHA384,
            SignatureScheme::ED25519,
        ];
        let Some(signer) = keys.signing.choose_scheme(&offered) else {
            tracing::error!("the node key supports no signature scheme Shoal verifies");
            return;
        };
        let message = signed_bytes(entry, asked_by);
        match signer.sign(&message) {
            Ok(signature) => {
                entry.proof = Proof {
                    asked_by: asked_by.to_string(),
                    cert: keys.cert.clone(),
                    scheme: u16::from(signer.scheme()),
                    signature,
                }
                .encode();
            }
            Err(e) => tracing::error!(error = %e, "signing a write failed; it goes unsigned"),
        }
    }

    /// Checks `entry`'s proof of origin (see [`proof`]). Always `Ok` when unsigned.
    pub fn verify(&self, entry: &Entry) -> Result<(), String> {
        let Some(verifier) = self.verifier.read().expect("verifier lock").clone() else {
            return Ok(());
        };
        let proof = Proof::decode(&entry.proof)?;
        let cert = CertificateDer::from(proof.cert.as_slice());
        let Signer {
            name, role, key, ..
        } = self.chain_checked(&verifier, &cert, entry)?;
        if role != Role::Node {
            return Err(format!(
                "signed by {name}, a {role} certificate, not a node"
            ));
        }
        if name != entry.version.node {
            return Err(format!(
                "version says written by {}, but signed by {name}",
                entry.version.node
            ));
        }
        let scheme = SignatureScheme::from(proof.scheme);
        let algorithm: &dyn ring::signature::VerificationAlgorithm = match scheme {
            SignatureScheme::ECDSA_NISTP256_SHA256 => &ring::signature::ECDSA_P256_SHA256_ASN1,
            SignatureScheme::ECDSA_NISTP384_SHA384 => &ring::signature::ECDSA_P384_SHA384_ASN1,
            SignatureScheme::ED25519 => &ring::signature::ED25519,
            other => return Err(format!("signature scheme {other:?} is not accepted")),
        };
        ring::signature::UnparsedPublicKey::new(algorithm, &key)
            .verify(&signed_bytes(entry, &proof.asked_by), &proof.signature)
            .map_err(|_| format!("the signature by {name} does not match the entry"))
    }

    /// Keeps the entries whose proof holds; counts and logs the others.
    pub fn verified(&self, entries: Vec<Entry>, from: &str) -> Vec<Entry> {
        if !self.is_certified() {
            return entries;
        }
        entries
            .into_iter()
            .filter(|entry| match self.verify(entry) {
                Ok(()) => true,
                Err(why) => {
                    self.stats
                        .entries_unverified
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        name = %entry.name,
                        version = %entry.version,
                        from,
                        %why,
                        "entry dropped: its proof of origin fails"
                    );
                    false
                }
            })
            .collect()
    }

    /// The holder of `cert` once its chain holds at the entry's write time. Remembered with the
    /// certificate's validity: a later entry reuses the check only when written within it.
    fn chain_checked(
        &self,
        verifier: &Arc<dyn ClientCertVerifier>,
        cert: &CertificateDer<'_>,
        entry: &Entry,
    ) -> Result<Signer, String> {
        let hash = xxhash_rust::xxh3::xxh3_64(cert.as_ref());
        let wall_ms = entry.version.hlc.wall_ms;
        let known = self
            .verified
            .lock()
            .expect("verified lock")
            .get(&hash)
            .cloned();
        if let Some(signer) = known.filter(|s| (s.valid_ms.0..=s.valid_ms.1).contains(&wall_ms)) {
            return Ok(signer);
        }
        let at = UnixTime::since_unix_epoch(Duration::from_millis(wall_ms));
        verifier
            .verify_client_cert(cert, &[], at)
            .map_err(|e| format!("the signer's certificate is refused: {e}"))?;
        let peer = crate::identity::tls::cert_identity(cert)?;
        let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
            .map_err(|e| format!("the signer's certificate does not parse: {e}"))?;
        let ms =
            |t: x509_parser::time::ASN1Time| (t.timestamp().max(0) as u64).saturating_mul(1000);
        let validity = parsed.validity();
        let signer = Signer {
            name: peer.name.0,
            role: peer.role,
            key: parsed.public_key().subject_public_key.data.to_vec(),
            valid_ms: (ms(validity.not_before), ms(validity.not_after)),
        };
        let mut verified = self.verified.lock().expect("verified lock");
        if verified.len() >= VERIFIED_CERTS_MAX {
            verified.clear();
        }
        verified.insert(hash, signer.clone());
        Ok(signer)
    }

    /// Rebuilds the chain verifier from the CA and the revocation list in force, and forgets
    /// the certificates checked before.
    fn rebuild_verifier(&self) -> Result<(), TlsError> {
        let keys = self.keys.read().expect("keys lock");
        let Some(keys) = keys.as_ref() else {
            return Ok(());
        };
        let verifier = crate::identity::tls::client_verifier(&keys.ca_certs, &self.crl_ders())?;
        *self.verifier.write().expect("verifier lock") = Some(verifier);
        self.verified.lock().expect("verified lock").clear();
        Ok(())
    }

    /// The revocation lists in force, for TLS verifiers.
    pub fn crl_ders(&self) -> Vec<CertificateRevocationListDer<'static>> {
        self.crl
            .read()
            .expect("crl lock")
            .iter()
            .map(|c| CertificateRevocationListDer::from(c.der.clone()))
            .collect()
    }

    /// The number of the revocation list in force, if any (no copy of the list).
    pub fn crl_number(&self) -> Option<u64> {
        self.crl
            .read()
            .expect("crl lock")
            .as_ref()
            .map(|c| c.number)
    }

    /// The revocation list in force, if any.
    pub fn crl(&self) -> Option<crl::Crl> {
        self.crl.read().expect("crl lock").clone()
    }

    /// Adopts `der` as the revocation list if it is signed by the cluster CA and newer than the
    /// one held: rebuilds the verifiers, closes the open connections of revoked certificates.
    /// `Ok(false)` when it is the one held already. A refusal changes nothing and is counted.
    pub fn adopt_crl(&self, der: &[u8], from: &str) -> Result<bool, String> {
        let ca_certs = match self.keys.read().expect("keys lock").as_ref() {
            Some(keys) => keys.ca_certs.clone(),
            None => return Err("this agent holds no certificates to check a CRL with".into()),
        };
        let refuse = |why: String| {
            self.stats.crls_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(from, %why, "revocation list refused");
            Err(why)
        };
        let crl = match crl::Crl::parse_verified(der, &ca_certs) {
            Ok(crl) => crl,
            Err(why) => return refuse(why),
        };
        {
            let mut held = self.crl.write().expect("crl lock");
            if let Some(current) = held.as_ref() {
                if crl.number < current.number {
                    return refuse(format!(
                        "CRL number {} is older than the one held ({})",
                        crl.number, current.number
                    ));
                }
                if crl.number == current.number {
                    if crl.der == current.der {
                        return Ok(false);
                    }
                    return refuse(format!(
                        "CRL number {} differs from the one held under the same number",
                        crl.number
                    ));
                }
            }
            tracing::info!(
                from,
                number = crl.number,
                revoked = crl.revoked.len(),
                "revocation list adopted"
            );
            *held = Some(crl.clone());
        }
        self.stats.crls_adopted.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.rebuild_verifier() {
            tracing::error!(error = %e, "rebuilding the verifier after a CRL failed");
        }
        self.refresh_endpoints(None);
        self.close_revoked(&crl);
        Ok(true)
    }

    /// Remembers an authenticated connection, to close it if its certificate gets revoked.
    /// Refuses (closes) it at once when the certificate is already revoked.
    pub fn track(&self, conn: &quinn::Connection) -> bool {
        let Some(serial) = crate::identity::tls::peer_cert(conn).and_then(|c| crl::serial_of(&c))
        else {
            return true;
        };
        if self
            .crl
            .read()
            .expect("crl lock")
            .as_ref()
            .is_some_and(|c| c.revokes(&serial))
        {
            conn.close(2u32.into(), b"certificate revoked");
            self.stats
                .connections_revoked
                .fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut connections = self.connections.lock().expect("connections lock");
        connections.retain(|(_, c)| c.close_reason().is_none());
        connections.push((serial, conn.clone()));
        true
    }

    fn close_revoked(&self, crl: &crl::Crl) {
        let mut connections = self.connections.lock().expect("connections lock");
        connections.retain(|(serial, conn)| {
            if conn.close_reason().is_some() {
                return false;
            }
            if crl.revokes(serial) {
                tracing::warn!(remote = %conn.remote_address(), "closing the connection of a revoked certificate");
                conn.close(2u32.into(), b"certificate revoked");
                self.stats
                    .connections_revoked
                    .fetch_add(1, Ordering::Relaxed);
                return false;
            }
            true
        });
    }

    /// Keeps `endpoint`'s TLS configuration current: rebuilt with the identity and the
    /// revocations whenever either changes.
    pub fn follow(&self, mut endpoint: crate::identity::tls::LiveEndpoint) {
        let crls = self.crl_ders();
        if !crls.is_empty() {
            if let Err(e) = endpoint.refresh(None, &crls) {
                tracing::error!(error = %e, "applying the revocations to an endpoint failed");
            }
        }
        self.endpoints
            .lock()
            .expect("endpoints lock")
            .push(endpoint);
    }

    fn refresh_endpoints(&self, identity: Option<&Identity>) {
        let crls = self.crl_ders();
        for live in self.endpoints.lock().expect("endpoints lock").iter_mut() {
            if let Err(e) = live.refresh(identity, &crls) {
                tracing::error!(error = %e, "updating an endpoint's TLS configuration failed");
            }
        }
    }
}
