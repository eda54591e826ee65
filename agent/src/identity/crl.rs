//! Certificate revocation lists: parsed, checked against the cluster CA, compared by number.
//!
//! The CA signs a CRL (`shoal pki revoke`); any one agent given it (`shoal pki publish-crl`, or
//! `crl.pem` in its --pki directory) adopts it and writes it to the desired-state store under
//! [`STORE_NAME`], whose replication carries it to every agent of every cell. Each agent checks
//! the CA's signature itself and keeps the highest-numbered list it has seen, so a stale or forged
//! list cannot undo a revocation.

use std::collections::BTreeSet;

use rustls::pki_types::CertificateDer;

/// The store name the revocation list travels under (not a valid workload name: specs refuse
/// ':'), skipped wherever workloads are read.
pub const STORE_NAME: &str = "shoal:crl";
/// The file an agent reads from its --pki directory (and `shoal pki revoke` writes).
pub const CRL_FILE: &str = "crl.pem";
/// Largest CRL accepted, in bytes (about 25,000 revoked certificates).
pub const CRL_BYTES_MAX: usize = 1 << 20;

/// A revocation list signed by the cluster CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crl {
    /// Its DER bytes.
    pub der: Vec<u8>,
    /// Its CRL number (higher is newer).
    pub number: u64,
    /// Serial numbers of the revoked certificates (big-endian bytes, no leading zeros).
    pub revoked: BTreeSet<Vec<u8>>,
}

impl Crl {
    /// Parses `der` and checks that one of `ca_certs` issued and signed it.
    pub fn parse_verified(der: &[u8], ca_certs: &[CertificateDer<'_>]) -> Result<Crl, String> {
        if der.len() > CRL_BYTES_MAX {
            return Err(format!(
                "CRL of {} bytes exceeds {CRL_BYTES_MAX}",
                der.len()
            ));
        }
        let (rest, crl) = x509_parser::parse_x509_crl(der)
            .map_err(|e| format!("not a DER certificate revocation list: {e}"))?;
        if !rest.is_empty() {
            return Err("trailing bytes after the CRL".into());
        }
        let signed = ca_certs.iter().any(|ca| {
            x509_parser::parse_x509_certificate(ca.as_ref()).is_ok_and(|(_, ca)| {
                ca.subject() == crl.issuer() && crl.verify_signature(ca.public_key()).is_ok()
            })
        });
        if !signed {
            return Err("the CRL is not signed by this cluster's CA".into());
        }
        let number = crl
            .crl_number()
            .and_then(|n| u64::try_from(n).ok())
            .ok_or("the CRL has no CRL number (or one over 64 bits)")?;
        let revoked = crl
            .iter_revoked_certificates()
            .map(|r| trim(r.raw_serial()))
            .collect();
        Ok(Crl {
            der: der.to_vec(),
            number,
            revoked,
        })
    }

    /// Whether the certificate of this serial (as [`serial_of`] gives it) is revoked.
    pub fn revokes(&self, serial: &[u8]) -> bool {
        self.revoked.contains(serial)
    }
}

/// The serial number of `cert` (big-endian, no leading zeros), `None` if it does not parse.
pub fn serial_of(cert: &CertificateDer<'_>) -> Option<Vec<u8>> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    Some(trim(parsed.raw_serial()))
}

/// A raw DER serial as [`serial_of`] gives it (no leading zeros).
pub fn serial_of_raw(serial: &[u8]) -> Vec<u8> {
    trim(serial)
}

fn trim(serial: &[u8]) -> Vec<u8> {
    let start = serial.iter().position(|&b| b != 0).unwrap_or(serial.len());
    serial[start..].to_vec()
}

/// The DER of the first CRL in a PEM text (or the bytes themselves when they are DER).
pub fn der_from_pem_or_der(bytes: &[u8]) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateRevocationListDer;
    if bytes.starts_with(b"-----") {
        return CertificateRevocationListDer::from_pem_slice(bytes)
            .map(|d| d.to_vec())
            .map_err(|e| format!("no X509 CRL block: {e}"));
    }
    Ok(bytes.to_vec())
}
