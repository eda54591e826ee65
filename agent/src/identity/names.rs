//! Who a certificate names: the holder's [`Role`] and name, carried as a URI SAN
//! `shoal://ROLE/NAME` ([`role_uri`]) beside the DNS SAN, and read back from a presented
//! certificate ([`cert_identity`]). Issuing is in [`super::pki`], verifying in [`super::tls`].

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

/// The scheme of a role URI SAN.
const ROLE_URI_SCHEME: &str = "shoal://";

/// What a certificate's holder may do.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Role {
    /// An agent: gossip, the agent-to-agent requests, reads, and forwarded operations.
    Node,
    /// An operator or a tool: reads and writes of the desired state, approvals, drains.
    Client,
    /// A read-only client: get, status, nodes, issues, events, cells.
    Reader,
}

impl Role {
    /// The role's tag in the certificate's URI SAN.
    pub fn tag(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Client => "client",
            Role::Reader => "client-read-only",
        }
    }

    /// The role of a tag, `None` for a tag this agent does not know.
    pub fn from_tag(tag: &str) -> Option<Role> {
        [Role::Node, Role::Client, Role::Reader]
            .into_iter()
            .find(|r| r.tag() == tag)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.tag())
    }
}

/// The URI SAN that carries a certificate's role and name: `shoal://ROLE/NAME`.
pub fn role_uri(role: Role, name: &str) -> String {
    format!("{ROLE_URI_SCHEME}{}/{name}", role.tag())
}

/// The role and name of a role URI SAN, or why it is not one this agent accepts. `Ok(None)` for a
/// URI that is not Shoal's.
pub fn parse_role_uri(uri: &str) -> Result<Option<(Role, &str)>, String> {
    let Some(rest) = uri.strip_prefix(ROLE_URI_SCHEME) else {
        return Ok(None);
    };
    let Some((tag, name)) = rest.split_once('/') else {
        return Err(format!("role URI {uri:?} is not shoal://ROLE/NAME"));
    };
    match Role::from_tag(tag) {
        Some(role) => Ok(Some((role, name))),
        None => Err(format!(
            "unknown role {tag:?} in {uri:?} (this agent knows node, client, client-read-only)"
        )),
    }
}

/// The certificate name of an authenticated peer (the DNS SAN its certificate was issued for).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerName(pub String);

impl PeerName {
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PeerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An authenticated peer: its certificate's name and role.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The certificate's name.
    pub name: PeerName,
    /// The certificate's role.
    pub role: Role,
}

impl Peer {
    /// A peer from its parts (the in-memory network and tests, where no handshake happens).
    pub fn new(name: impl Into<String>, role: Role) -> Self {
        Peer {
            name: PeerName(name.into()),
            role,
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.role)
    }
}

/// The name a Shoal certificate was issued for: its CN when the CN is also a DNS SAN, else its
/// first DNS SAN. `None` for anything unparsable or nameless.
pub fn cert_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let sans: Vec<&str> = match parsed.subject_alternative_name() {
        Ok(Some(ext)) => ext
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(dns) => Some(*dns),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let cn = parsed
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok());
    match cn {
        Some(cn) if sans.contains(&cn) => Some(cn.to_string()),
        _ => sans.first().map(|s| s.to_string()),
    }
}

/// The name and role a Shoal certificate was issued for, or why it carries none this agent
/// accepts: no name, no role URI (issued before roles), an unknown role, two roles, or a role URI
/// naming someone else than the certificate.
pub fn cert_identity(cert: &CertificateDer<'_>) -> Result<Peer, String> {
    let name = cert_name(cert).ok_or("the certificate has no name")?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| e.to_string())?;
    let mut role = None;
    if let Ok(Some(ext)) = parsed.subject_alternative_name() {
        for general in &ext.value.general_names {
            let GeneralName::URI(uri) = general else {
                continue;
            };
            let Some((r, uri_name)) = parse_role_uri(uri)? else {
                continue;
            };
            if uri_name != name {
                return Err(format!("role URI {uri:?} names another than {name:?}"));
            }
            if role.replace(r).is_some() {
                return Err("the certificate carries more than one role".into());
            }
        }
    }
    let role = role.ok_or_else(|| {
        format!("the certificate of {name:?} carries no role (issued before roles: reissue it)")
    })?;
    Ok(Peer {
        name: PeerName(name),
        role,
    })
}
