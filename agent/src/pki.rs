//! The cluster's PKI: a cluster CA and the node or client certificates it signs.
//!
//! A PKI directory holds `ca.crt` (every member needs it), `ca.key` (only where certificates are
//! issued), and `NAME.crt` / `NAME.key` per node or client. Private keys are written with mode
//! 0600, atomically (temporary file, fsync, rename), and never logged: [`Identity`]'s `Debug`
//! leaves the key out.
//!
//! Certificates carry the name both as the subject CN and as a DNS SAN, so TLS can check that a
//! peer is the node it claims to be ([`crate::tls::peer_name`]), plus any IP SANs asked for.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use time::{Duration as TimeDuration, OffsetDateTime};

/// File name of the cluster CA certificate inside a PKI directory.
pub const CA_CERT_FILE: &str = "ca.crt";
/// File name of the cluster CA private key inside a PKI directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// Longest accepted node or client name, in bytes (names appear in every gossip digest).
pub const NAME_LEN_MAX: usize = 63;

const CA_VALIDITY_DAYS: i64 = 20 * 365;
const LEAF_VALIDITY_DAYS: i64 = 5 * 365;
/// Certificates start one hour in the past so that small clock skews between hosts do not matter.
const NOT_BEFORE_SKEW_HOURS: i64 = 1;

/// What went wrong with a PKI directory. No variant leaves a partial file behind.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done ("reading", "writing", ...).
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file this call would create already exists; nothing was changed.
    #[error("{path} already exists; refusing to overwrite it ({hint})")]
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
        /// What to do instead.
        hint: &'static str,
    },
    /// A file that is needed is missing.
    #[error("{path} is missing: {hint}")]
    Missing {
        /// The missing file.
        path: PathBuf,
        /// What to do about it.
        hint: String,
    },
    /// A file exists but does not hold what it should.
    #[error("{path} is not a valid {what}: {reason}")]
    Invalid {
        /// The file concerned.
        path: PathBuf,
        /// What it should have held ("PEM certificate", "PEM private key", ...).
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// The node or client name cannot be used in a certificate.
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// Certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
}

/// A node's (or client's) TLS identity: its certificate chain, its private key and the cluster's
/// trusted roots. `Debug` never prints the key.
pub struct Identity {
    /// The certificate name (CN and DNS SAN).
    pub name: String,
    /// The certificate chain, end-entity first.
    pub cert_chain: Vec<CertificateDer<'static>>,
    /// The private key matching the end-entity certificate.
    pub key: PrivateKeyDer<'static>,
    /// The cluster CA certificates that peers' certificates must chain to.
    pub ca_certs: Vec<CertificateDer<'static>>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            name: self.name.clone(),
            cert_chain: self.cert_chain.clone(),
            key: self.key.clone_key(),
            ca_certs: self.ca_certs.clone(),
        }
    }
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("name", &self.name)
            .field("cert_chain_len", &self.cert_chain.len())
            .field("key", &"<redacted>")
            .field("ca_certs_len", &self.ca_certs.len())
            .finish()
    }
}

/// The files written by [`issue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedFiles {
    /// `DIR/NAME.crt`.
    pub cert: PathBuf,
    /// `DIR/NAME.key` (mode 0600).
    pub key: PathBuf,
}

/// Checks that `name` can be a node or client name: 1 to [`NAME_LEN_MAX`] ASCII letters, digits,
/// `-` or `.`, starting with a letter, and a valid TLS server name.
pub fn validate_name(name: &str) -> Result<(), PkiError> {
    let invalid = |reason| PkiError::InvalidName {
        name: name.to_string(),
        reason,
    };
    if name.is_empty() || name.len() > NAME_LEN_MAX {
        return Err(invalid("must be 1 to 63 characters long"));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(invalid("must start with a letter"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    {
        return Err(invalid(
            "may contain only ASCII letters, digits, '-' and '.'",
        ));
    }
    if name == "ca" {
        return Err(invalid("\"ca\" is reserved for the cluster CA files"));
    }
    match ServerName::try_from(name) {
        Ok(ServerName::DnsName(_)) => Ok(()),
        _ => Err(invalid(
            "must be a valid DNS name (no empty labels, no label over 63)",
        )),
    }
}

/// Creates a cluster CA in `dir` (`ca.crt`, `ca.key`), creating `dir` (mode 0700) if needed.
/// Refuses to overwrite an existing CA.
pub fn init(dir: &Path) -> Result<(), PkiError> {
    let cert_path = dir.join(CA_CERT_FILE);
    let key_path = dir.join(CA_KEY_FILE);
    for path in [&cert_path, &key_path] {
        if path.exists() {
            return Err(PkiError::AlreadyExists {
                path: path.clone(),
                hint: "this directory already holds a cluster CA; use another --dir",
            });
        }
    }
    ensure_dir(dir)?;
    let key = KeyPair::generate()?;
    let cert = ca_params()?.self_signed(&key)?;
    // The key first: a ca.crt without its key would make the next `init` refuse for nothing.
    write_atomic(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_atomic(&cert_path, cert.pem().as_bytes(), 0o644)?;
    tracing::info!(dir = %dir.display(), "created cluster CA");
    Ok(())
}

/// Issues a certificate for `name`, signed by the CA in `dir` (which must hold `ca.key`), with
/// `ips` as extra IP SANs. Writes `NAME.crt` and `NAME.key`; refuses to overwrite them.
pub fn issue(dir: &Path, name: &str, ips: &[IpAddr]) -> Result<IssuedFiles, PkiError> {
    validate_name(name)?;
    let files = IssuedFiles {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    for path in [&files.cert, &files.key] {
        if path.exists() {
            return Err(PkiError::AlreadyExists {
                path: path.clone(),
                hint:
                    "a certificate was already issued under this name; remove both files to reissue",
            });
        }
    }
    let ca_key_path = dir.join(CA_KEY_FILE);
    if !ca_key_path.exists() {
        return Err(PkiError::Missing {
            path: ca_key_path,
            hint: "issue certificates where the CA key is (create one with `shoal pki init`)"
                .into(),
        });
    }
    let ca_key = KeyPair::from_pem(&read_string(&ca_key_path)?).map_err(|e| PkiError::Invalid {
        path: ca_key_path.clone(),
        what: "PEM private key",
        reason: e.to_string(),
    })?;
    let ca_cert_path = dir.join(CA_CERT_FILE);
    let ca_pem = read_string(&ca_cert_path)?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(|e| PkiError::Invalid {
        path: ca_cert_path,
        what: "PEM CA certificate",
        reason: e.to_string(),
    })?;
    let key = KeyPair::generate()?;
    let cert = leaf_params(name, ips)?.signed_by(&key, &issuer)?;
    write_atomic(&files.key, key.serialize_pem().as_bytes(), 0o600)?;
    write_atomic(&files.cert, cert.pem().as_bytes(), 0o644)?;
    tracing::info!(name, dir = %dir.display(), "issued certificate");
    Ok(files)
}

/// Loads `name`'s identity from `dir`. If `NAME.crt` is missing and `dir` holds the CA key, issues
/// it first (a convenience for small clusters); otherwise says which file to provide.
pub fn load_identity(dir: &Path, name: &str) -> Result<Identity, PkiError> {
    validate_name(name)?;
    let ca_path = dir.join(CA_CERT_FILE);
    if !ca_path.exists() {
        return Err(PkiError::Missing {
            path: ca_path,
            hint: "copy the cluster's ca.crt here, or create a CA with `shoal pki init`".into(),
        });
    }
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    if !cert_path.exists() {
        if dir.join(CA_KEY_FILE).exists() && !key_path.exists() {
            issue(dir, name, &[])?;
        } else {
            return Err(PkiError::Missing {
                path: cert_path,
                hint: format!(
                    "issue it with `shoal pki issue --dir DIR --name {name}` where the CA key is, \
                     and copy {name}.crt and {name}.key here"
                ),
            });
        }
    }
    if !key_path.exists() {
        return Err(PkiError::Missing {
            path: key_path,
            hint: format!("copy {name}.key, issued along with {name}.crt, here"),
        });
    }
    Ok(Identity {
        name: name.to_string(),
        cert_chain: read_certs(&cert_path)?,
        key: read_key(&key_path)?,
        ca_certs: read_certs(&ca_path)?,
    })
}

fn ca_params() -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "Shoal cluster CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, CA_VALIDITY_DAYS);
    Ok(params)
}

fn leaf_params(name: &str, ips: &[IpAddr]) -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::new(vec![name.to_string()])?;
    params
        .subject_alt_names
        .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, LEAF_VALIDITY_DAYS);
    Ok(params)
}

fn set_validity(params: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - TimeDuration::hours(NOT_BEFORE_SKEW_HOURS);
    params.not_after = now + TimeDuration::days(days);
    params.serial_number = Some(SerialNumber::from_slice(&random_serial()));
}

fn random_serial() -> [u8; 16] {
    use ring::rand::SecureRandom;
    let mut serial = [0u8; 16];
    // A failing system RNG leaves nothing sensible to do: key generation would fail as well.
    ring::rand::SystemRandom::new()
        .fill(&mut serial)
        .expect("system random number generator failed");
    serial[0] &= 0x7f; // A positive DER integer.
    serial
}

fn ensure_dir(dir: &Path) -> Result<(), PkiError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(|source| io_err("creating directory", dir, source))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|source| io_err("setting permissions on", dir, source))
}

/// Writes `bytes` to `path` through a temporary file in the same directory, fsynced and renamed,
/// so a crash leaves either the old state or the complete file.
fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), PkiError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        // The mode given at creation is filtered by the umask; make it exact.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    result.map_err(|source| {
        let _ = fs::remove_file(&tmp);
        io_err("writing", path, source)
    })
}

fn read_string(path: &Path) -> Result<String, PkiError> {
    fs::read_to_string(path).map_err(|source| io_err("reading", path, source))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    let pem = fs::read(path).map_err(|source| io_err("reading", path, source))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(path, "PEM certificate", e.to_string()))?;
    if certs.is_empty() {
        return Err(invalid(
            path,
            "PEM certificate",
            "no CERTIFICATE block".into(),
        ));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, PkiError> {
    let pem = fs::read(path).map_err(|source| io_err("reading", path, source))?;
    // Never include the key material in the error.
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| {
        invalid(
            path,
            "PEM private key",
            "no readable PRIVATE KEY block".into(),
        )
    })
}

fn invalid(path: &Path, what: &'static str, reason: String) -> PkiError {
    PkiError::Invalid {
        path: path.to_path_buf(),
        what,
        reason,
    }
}

fn io_err(action: &'static str, path: &Path, source: std::io::Error) -> PkiError {
    PkiError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("shoal-pki-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn init_issue_load_and_refuse_overwrite() {
        let dir = tempdir("basic");
        init(&dir).unwrap();
        assert!(matches!(init(&dir), Err(PkiError::AlreadyExists { .. })));
        let files = issue(&dir, "node-1", &["127.0.0.1".parse().unwrap()]).unwrap();
        let mode = fs::metadata(&files.key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(matches!(
            issue(&dir, "node-1", &[]),
            Err(PkiError::AlreadyExists { .. })
        ));
        let id = load_identity(&dir, "node-1").unwrap();
        assert_eq!(id.cert_chain.len(), 1);
        assert!(!format!("{id:?}").contains("PRIVATE"));
        // Convenience: a dir with the CA key issues missing certificates.
        load_identity(&dir, "node-2").unwrap();
        assert!(dir.join("node-2.key").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_files_name_the_file() {
        let dir = tempdir("missing");
        let err = load_identity(&dir, "node-1").unwrap_err().to_string();
        assert!(err.contains("ca.crt"), "{err}");
        init(&dir).unwrap();
        fs::remove_file(dir.join(CA_KEY_FILE)).unwrap();
        let err = load_identity(&dir, "node-1").unwrap_err().to_string();
        assert!(
            err.contains("node-1.crt") && err.contains("pki issue"),
            "{err}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_are_validated() {
        for ok in ["n1", "node-1", "a.b", "Node7"] {
            validate_name(ok).unwrap();
        }
        for bad in [
            "",
            "1node",
            "-x",
            "a_b",
            "a..b",
            "ca",
            "ünï",
            &"x".repeat(64),
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}
