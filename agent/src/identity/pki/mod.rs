//! The cluster's PKI: a cluster CA and the node or client certificates it signs.
//!
//! A PKI directory holds `ca.crt` (every member needs it), `ca.key` (only where certificates are
//! issued), and `NAME.crt` / `NAME.key` per node or client. Private keys are written with mode
//! 0600, atomically (temporary file, fsync, rename), and never logged: [`Identity`]'s `Debug`
//! leaves the key out.
//!
//! Certificates carry the name both as the subject CN and as a DNS SAN, so TLS can check that a
//! peer is the node it claims to be ([`crate::identity::tls::peer_name`]), plus any IP SANs asked for, and
//! the holder's [`Role`] as a URI SAN `shoal://ROLE/NAME` ([`role_uri`]): a node may gossip and call
//! the agent-to-agent requests, a client may read and write the desired state, a read-only client
//! may only read. A certificate without a role is refused everywhere.
//!
//! Leaf certificates live [`LEAF_VALIDITY_DAYS_DEFAULT`] days unless asked otherwise; `shoal pki
//! renew` replaces one in place and a running agent picks it up ([`crate::identity::authority`]).

mod revoke;

pub use revoke::{revoke, Revoked, ISSUED_LOG};

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

pub use super::names::{parse_role_uri, role_uri, Role};

/// File name of the cluster CA certificate inside a PKI directory.
pub const CA_CERT_FILE: &str = "ca.crt";
/// File name of the cluster CA private key inside a PKI directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// Longest accepted node or client name, in bytes (names appear in every gossip digest).
pub const NAME_LEN_MAX: usize = 63;

const CA_VALIDITY_DAYS: i64 = 20 * 365;
/// Default life of a node or client certificate: one year, as kubeadm's and `nomad tls cert
/// create`'s. Short enough that a lost key does not stay valid for years; long enough that a
/// yearly `shoal pki renew` is the only chore. Revocation ([`crate::identity::authority`]) covers the rest.
pub const LEAF_VALIDITY_DAYS_DEFAULT: u32 = 365;
/// Longest life `--days` accepts for a node or client certificate.
pub const LEAF_VALIDITY_DAYS_MAX: u32 = 5 * 365;
/// Scheme of the role URI SAN.
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
    /// An issuing option is out of range.
    #[error("{0}")]
    Option(String),
    /// Certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
}

/// How a certificate is issued: its role, extra IP SANs and life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueOptions {
    /// What the holder may do.
    pub role: Role,
    /// Extra IP SANs.
    pub ips: Vec<IpAddr>,
    /// Life in days (1 to [`LEAF_VALIDITY_DAYS_MAX`]).
    pub days: u32,
}

impl IssueOptions {
    /// A certificate for `role`, no IP SANs, the default life.
    pub fn new(role: Role) -> Self {
        IssueOptions {
            role,
            ips: Vec::new(),
            days: LEAF_VALIDITY_DAYS_DEFAULT,
        }
    }
}

/// Whether [`load_identity`] may issue a missing certificate from a CA key in the directory, and
/// with which role. Off by default: the CA key belongs off the hosts (docs/operations.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelfIssue {
    /// Never: a missing certificate is an error that says how to issue one.
    No,
    /// Issue it with this role when the directory holds `ca.key` (`--self-issue`).
    As(Role),
}

/// A node's (or client's) TLS identity: its certificate chain, its private key and the cluster's
/// trusted roots. `Debug` never prints the key.
pub struct Identity {
    /// The certificate name (CN and DNS SAN).
    pub name: String,
    /// The certificate's role.
    pub role: Role,
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
            role: self.role,
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
            .field("role", &self.role)
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

/// Issues a certificate for `name`, signed by the CA in `dir` (which must hold `ca.key`), as
/// `options` say. Writes `NAME.crt` and `NAME.key`; refuses to overwrite them.
pub fn issue(dir: &Path, name: &str, options: &IssueOptions) -> Result<IssuedFiles, PkiError> {
    let files = issued_files(dir, name)?;
    for path in [&files.cert, &files.key] {
        if path.exists() {
            return Err(PkiError::AlreadyExists {
                path: path.clone(),
                hint: "a certificate was already issued under this name; `shoal pki renew` \
                       replaces it",
            });
        }
    }
    write_leaf(dir, name, options, &files)?;
    tracing::info!(name, role = %options.role, dir = %dir.display(), "issued certificate");
    Ok(files)
}

/// Replaces `name`'s certificate and key in `dir` with new ones of the same role and IP SANs,
/// living `days` (the default when `None`). A running agent whose --pki is `dir` switches to them
/// within its reload interval, without a restart ([`crate::identity::authority`]).
pub fn renew(dir: &Path, name: &str, days: Option<u32>) -> Result<IssuedFiles, PkiError> {
    let files = issued_files(dir, name)?;
    if !files.cert.exists() {
        return Err(PkiError::Missing {
            path: files.cert,
            hint: format!(
                "nothing to renew; issue it with `shoal pki issue --dir {} --name {name} \
                 --role node|client`",
                dir.display()
            ),
        });
    }
    let certs = read_certs(&files.cert)?;
    let shoal_cert = |reason| invalid(&files.cert, "Shoal certificate", reason);
    let role = crate::identity::names::cert_identity(&certs[0])
        .map_err(shoal_cert)?
        .role;
    let ips = cert_ips(&certs[0]).map_err(shoal_cert)?;
    let options = IssueOptions {
        role,
        ips,
        days: days.unwrap_or(LEAF_VALIDITY_DAYS_DEFAULT),
    };
    write_leaf(dir, name, &options, &files)?;
    tracing::info!(name, role = %role, dir = %dir.display(), "renewed certificate");
    Ok(files)
}

fn issued_files(dir: &Path, name: &str) -> Result<IssuedFiles, PkiError> {
    validate_name(name)?;
    Ok(IssuedFiles {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    })
}

/// The IP SANs of a certificate (what `renew` carries over).
fn cert_ips(cert: &CertificateDer<'_>) -> Result<Vec<IpAddr>, String> {
    use x509_parser::extensions::GeneralName;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| e.to_string())?;
    let Ok(Some(ext)) = parsed.subject_alternative_name() else {
        return Ok(Vec::new());
    };
    Ok(ext
        .value
        .general_names
        .iter()
        .filter_map(|general| match general {
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                _ => None,
            },
            _ => None,
        })
        .collect())
}

fn write_leaf(
    dir: &Path,
    name: &str,
    options: &IssueOptions,
    files: &IssuedFiles,
) -> Result<(), PkiError> {
    if options.days == 0 || options.days > LEAF_VALIDITY_DAYS_MAX {
        return Err(PkiError::Option(format!(
            "--days {} is out of range (1 to {LEAF_VALIDITY_DAYS_MAX})",
            options.days
        )));
    }
    let issuer = load_issuer(dir)?;
    let key = KeyPair::generate()?;
    let cert = leaf_params(name, options)?.signed_by(&key, &issuer)?;
    // Key and certificate in one file each, each replaced atomically; a reader between the two
    // renames sees a pair that does not match, which loading refuses (and an agent retries).
    write_atomic(&files.key, key.serialize_pem().as_bytes(), 0o600)?;
    write_atomic(&files.cert, cert.pem().as_bytes(), 0o644)?;
    let serial = crate::identity::crl::serial_of(cert.der()).unwrap_or_default();
    revoke::append_issued(dir, &serial, name, options.role)
}

/// The CA of `dir` as an issuer (needs `ca.key`).
fn load_issuer(dir: &Path) -> Result<Issuer<'static, KeyPair>, PkiError> {
    let ca_key_path = dir.join(CA_KEY_FILE);
    if !ca_key_path.exists() {
        return Err(PkiError::Missing {
            path: ca_key_path,
            hint: "issue and revoke certificates where the CA key is (create one with \
                   `shoal pki init`)"
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
    Ok(issuer)
}

/// Loads `name`'s identity from `dir`. If `NAME.crt` is missing, `self_issue` allows it and `dir`
/// holds the CA key, issues it first (a convenience for a sandbox); otherwise says which file to
/// provide.
pub fn load_identity(dir: &Path, name: &str, self_issue: SelfIssue) -> Result<Identity, PkiError> {
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
        match self_issue {
            SelfIssue::As(role) if dir.join(CA_KEY_FILE).exists() && !key_path.exists() => {
                issue(dir, name, &IssueOptions::new(role))?;
            }
            _ => {
                let also = if dir.join(CA_KEY_FILE).exists() {
                    " (or pass --self-issue to issue it from the ca.key found here)"
                } else {
                    ""
                };
                return Err(PkiError::Missing {
                    path: cert_path,
                    hint: format!(
                        "issue it with `shoal pki issue --dir DIR --name {name} --role ROLE` \
                         where the CA key is, and copy {name}.crt and {name}.key here{also}"
                    ),
                });
            }
        }
    }
    if !key_path.exists() {
        return Err(PkiError::Missing {
            path: key_path,
            hint: format!("copy {name}.key, issued along with {name}.crt, here"),
        });
    }
    let cert_chain = read_certs(&cert_path)?;
    let holder = crate::identity::names::cert_identity(&cert_chain[0])
        .map_err(|reason| invalid(&cert_path, "Shoal certificate", reason))?;
    let (role, cert_name) = (holder.role, holder.name.0);
    if cert_name != name {
        return Err(invalid(
            &cert_path,
            "certificate for this name",
            format!("it was issued for {cert_name:?}, not {name:?}"),
        ));
    }
    Ok(Identity {
        name: name.to_string(),
        role,
        cert_chain,
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

fn leaf_params(name: &str, options: &IssueOptions) -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::new(vec![name.to_string()])?;
    params
        .subject_alt_names
        .extend(options.ips.iter().map(|ip| SanType::IpAddress(*ip)));
    let uri = rcgen::string::Ia5String::try_from(role_uri(options.role, name))?;
    params.subject_alt_names.push(SanType::URI(uri));
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, i64::from(options.days));
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
        let mut options = IssueOptions::new(Role::Node);
        options.ips = vec!["127.0.0.1".parse().unwrap()];
        let files = issue(&dir, "node-1", &options).unwrap();
        let mode = fs::metadata(&files.key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(matches!(
            issue(&dir, "node-1", &options),
            Err(PkiError::AlreadyExists { .. })
        ));
        let id = load_identity(&dir, "node-1", SelfIssue::No).unwrap();
        assert_eq!(id.cert_chain.len(), 1);
        assert_eq!(id.role, Role::Node);
        assert!(!format!("{id:?}").contains("PRIVATE"));
        // Self-issuing is opt-in: without it, a missing certificate is an error naming the flag.
        let err = load_identity(&dir, "node-2", SelfIssue::No)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--self-issue"), "{err}");
        assert!(!dir.join("node-2.key").exists());
        let id = load_identity(&dir, "node-2", SelfIssue::As(Role::Reader)).unwrap();
        assert_eq!(id.role, Role::Reader);
        assert!(dir.join("node-2.key").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_files_name_the_file() {
        let dir = tempdir("missing");
        let err = load_identity(&dir, "node-1", SelfIssue::No)
            .unwrap_err()
            .to_string();
        assert!(err.contains("ca.crt"), "{err}");
        init(&dir).unwrap();
        fs::remove_file(dir.join(CA_KEY_FILE)).unwrap();
        let err = load_identity(&dir, "node-1", SelfIssue::As(Role::Node))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("node-1.crt") && err.contains("pki issue"),
            "{err}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn roles_are_in_the_certificate_and_bound_to_its_name() {
        let dir = tempdir("roles");
        init(&dir).unwrap();
        for (name, role) in [
            ("n1", Role::Node),
            ("alice", Role::Client),
            ("ro", Role::Reader),
        ] {
            issue(&dir, name, &IssueOptions::new(role)).unwrap();
            let id = load_identity(&dir, name, SelfIssue::No).unwrap();
            let peer = crate::identity::names::cert_identity(&id.cert_chain[0]).unwrap();
            assert_eq!((peer.name.as_str(), peer.role), (name, role));
        }
        // A certificate copied under another name is refused: the name is in the certificate.
        fs::copy(dir.join("n1.crt"), dir.join("n9.crt")).unwrap();
        fs::copy(dir.join("n1.key"), dir.join("n9.key")).unwrap();
        let err = load_identity(&dir, "n9", SelfIssue::No)
            .unwrap_err()
            .to_string();
        assert!(err.contains("issued for \"n1\""), "{err}");
        // Unknown roles and foreign URIs.
        assert!(parse_role_uri("shoal://admin/x")
            .unwrap_err()
            .contains("unknown role"));
        assert_eq!(parse_role_uri("https://example.org").unwrap(), None);
        assert!(matches!(
            issue(
                &dir,
                "x",
                &IssueOptions {
                    days: 0,
                    ..IssueOptions::new(Role::Node)
                }
            ),
            Err(PkiError::Option(_))
        ));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn renew_keeps_the_role_and_revoke_covers_every_issue_of_a_name() {
        let dir = tempdir("revoke");
        init(&dir).unwrap();
        issue(&dir, "n1", &IssueOptions::new(Role::Node)).unwrap();
        issue(&dir, "n2", &IssueOptions::new(Role::Node)).unwrap();
        let first = load_identity(&dir, "n1", SelfIssue::No).unwrap();
        renew(&dir, "n1", Some(30)).unwrap();
        let second = load_identity(&dir, "n1", SelfIssue::No).unwrap();
        assert_eq!(second.role, Role::Node);
        assert_ne!(first.cert_chain[0], second.cert_chain[0]);
        let ca = read_certs(&dir.join(CA_CERT_FILE)).unwrap();
        let revoked = revoke(&dir, "n1").unwrap();
        assert_eq!((revoked.number, revoked.added.len()), (1, 2));
        let der =
            crate::identity::crl::der_from_pem_or_der(&fs::read(&revoked.crl).unwrap()).unwrap();
        let crl = crate::identity::crl::Crl::parse_verified(&der, &ca).unwrap();
        let serial = |id: &Identity| crate::identity::crl::serial_of(&id.cert_chain[0]).unwrap();
        assert!(crl.revokes(&serial(&first)) && crl.revokes(&serial(&second)));
        let n2 = load_identity(&dir, "n2", SelfIssue::No).unwrap();
        assert!(!crl.revokes(&serial(&n2)));
        // The next list keeps the earlier entries and a higher number.
        let again = revoke(&dir, "n2").unwrap();
        assert_eq!((again.number, again.total), (2, 3));
        // A list signed by another CA is refused.
        let other = tempdir("revoke-other");
        init(&other).unwrap();
        issue(&other, "n1", &IssueOptions::new(Role::Node)).unwrap();
        let foreign = revoke(&other, "n1").unwrap();
        let der =
            crate::identity::crl::der_from_pem_or_der(&fs::read(&foreign.crl).unwrap()).unwrap();
        let err = crate::identity::crl::Crl::parse_verified(&der, &ca).unwrap_err();
        assert!(err.contains("not signed by this cluster's CA"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&other).unwrap();
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
