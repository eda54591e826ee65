//! Revocation on the CA's side: the log of every certificate issued in a PKI directory, and the
//! revocation list (`crl.pem`) `shoal pki revoke` writes from it. Agents check and spread the list
//! ([`crate::identity::crl`]).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::SerialNumber;
use time::{Duration as TimeDuration, OffsetDateTime};

use super::{
    invalid, io_err, load_issuer, read_certs, read_string, validate_name, write_atomic, PkiError,
    Role, CA_CERT_FILE, CA_VALIDITY_DAYS, NOT_BEFORE_SKEW_HOURS,
};

/// The log of issued certificates in a PKI directory: one line `SERIAL-HEX NAME ROLE` each, so
/// that `revoke --name` reaches every certificate ever issued under a name, renewed ones too.
pub const ISSUED_LOG: &str = "issued.log";

pub(super) fn append_issued(
    dir: &Path,
    serial: &[u8],
    name: &str,
    role: Role,
) -> Result<(), PkiError> {
    let path = dir.join(ISSUED_LOG);
    let line = format!("{} {name} {role}\n", hex(serial));
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .open(&path)
        .map_err(|source| io_err("opening", &path, source))?;
    file.write_all(line.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| io_err("appending to", &path, source))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What [`revoke`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// `DIR/crl.pem`.
    pub crl: PathBuf,
    /// The new list's CRL number.
    pub number: u64,
    /// Serials (hex) newly revoked.
    pub added: Vec<String>,
    /// Serials (hex) in the list in all.
    pub total: usize,
}

/// Revokes every certificate issued under `name` in `dir` (from [`ISSUED_LOG`] and `NAME.crt`):
/// writes `DIR/crl.pem`, signed by the CA, numbered one above the list it replaces and keeping
/// its entries. Give it to any agent (`shoal pki publish-crl`) to spread it.
pub fn revoke(dir: &Path, name: &str) -> Result<Revoked, PkiError> {
    validate_name(name)?;
    let issuer = load_issuer(dir)?;
    let ca_certs = read_certs(&dir.join(CA_CERT_FILE))?;
    let crl_path = dir.join(crate::identity::crl::CRL_FILE);
    let previous = if crl_path.exists() {
        let bytes = fs::read(&crl_path).map_err(|source| io_err("reading", &crl_path, source))?;
        let crl = crate::identity::crl::der_from_pem_or_der(&bytes)
            .and_then(|der| crate::identity::crl::Crl::parse_verified(&der, &ca_certs))
            .map_err(|reason| invalid(&crl_path, "CRL of this CA", reason))?;
        Some(crl)
    } else {
        None
    };
    let mut serials: Vec<Vec<u8>> = Vec::new();
    let log = dir.join(ISSUED_LOG);
    if log.exists() {
        for line in read_string(&log)?.lines() {
            let mut parts = line.split_whitespace();
            if let (Some(serial), Some(n)) = (parts.next(), parts.next()) {
                if n == name {
                    serials.extend(unhex(serial));
                }
            }
        }
    }
    let cert_path = dir.join(format!("{name}.crt"));
    if cert_path.exists() {
        for cert in read_certs(&cert_path)? {
            serials.extend(crate::identity::crl::serial_of(&cert));
        }
    }
    serials.sort();
    serials.dedup();
    if serials.is_empty() {
        return Err(PkiError::Missing {
            path: log,
            hint: format!("no certificate issued under {name:?} is known in this directory"),
        });
    }
    let now = OffsetDateTime::now_utc();
    let mut revoked: Vec<rcgen::RevokedCertParams> = Vec::new();
    let mut held: std::collections::BTreeSet<Vec<u8>> = Default::default();
    if let Some(previous) = &previous {
        let (_, parsed) = x509_parser::parse_x509_crl(&previous.der)
            .map_err(|e| invalid(&crl_path, "CRL", e.to_string()))?;
        for r in parsed.iter_revoked_certificates() {
            let serial = r.raw_serial().to_vec();
            held.insert(crate::identity::crl::serial_of_raw(&serial));
            revoked.push(rcgen::RevokedCertParams {
                serial_number: SerialNumber::from_slice(&serial),
                revocation_time: r.revocation_date.to_datetime(),
                reason_code: None,
                invalidity_date: None,
            });
        }
    }
    let mut added = Vec::new();
    for serial in serials {
        if held.insert(serial.clone()) {
            added.push(hex(&serial));
            revoked.push(rcgen::RevokedCertParams {
                serial_number: SerialNumber::from_slice(&serial),
                revocation_time: now,
                reason_code: Some(rcgen::RevocationReason::Unspecified),
                invalidity_date: None,
            });
        }
    }
    let number = previous.as_ref().map_or(1, |p| p.number + 1);
    let params = rcgen::CertificateRevocationListParams {
        this_update: now - TimeDuration::hours(NOT_BEFORE_SKEW_HOURS),
        // Agents do not expire lists (a newer number replaces one); the field must be later.
        next_update: now + TimeDuration::days(CA_VALIDITY_DAYS),
        crl_number: SerialNumber::from(number),
        issuing_distribution_point: None,
        revoked_certs: revoked,
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    };
    let crl = params.signed_by(&issuer)?;
    let total = held.len();
    write_atomic(&crl_path, crl.pem()?.as_bytes(), 0o644)?;
    tracing::info!(name, number, total, "revocation list written");
    Ok(Revoked {
        crl: crl_path,
        number,
        added,
        total,
    })
}
