//! Certificate roles as an independent QUIC client sees them (aioquic, agent/tests/adversarial/
//! roles.py) against real agents: a client certificate on the gossip port, a certificate from
//! before roles, an unknown role, and a revoked node certificate.
//!
//! Needs python3 with aioquic (`.ci/run` installs it).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{stderr, wait_until, Cluster};
use rcgen::{CertificateParams, DnType, Issuer, KeyPair, SanType};
use shoal::identity::pki::{self, IssueOptions, Role};

/// What roles.py saw.
#[derive(Debug, serde::Deserialize)]
struct Probe {
    handshake: bool,
    closed: bool,
    reason: String,
    error: Option<String>,
}

fn probe(addr: std::net::SocketAddr, alpn: &str, server: &str, pki: &Path, name: &str) -> Probe {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/adversarial/roles.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["--addr", &addr.to_string(), "--alpn", alpn])
        .args(["--server-name", server, "--wait", "3"])
        .arg("--ca")
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join(format!("{name}.crt")))
        .arg("--key")
        .arg(pki.join(format!("{name}.key")))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "roles.py failed (python3 -m pip install aioquic): {}",
        stderr(&out)
    );
    serde_json::from_slice(&out.stdout).expect("roles.py prints JSON")
}

/// A certificate signed by the cluster CA carrying `uri` (or no URI) instead of a proper role.
fn odd_cert(pki: &Path, name: &str, uri: Option<&str>) {
    let ca_key = KeyPair::from_pem(&std::fs::read_to_string(pki.join("ca.key")).unwrap()).unwrap();
    let ca_pem = std::fs::read_to_string(pki.join("ca.crt")).unwrap();
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    if let Some(uri) = uri {
        let uri = rcgen::string::Ia5String::try_from(uri.to_string()).unwrap();
        params.subject_alt_names.push(SanType::URI(uri));
    }
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(pki.join(format!("{name}.crt")), cert.pem()).unwrap();
    std::fs::write(pki.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

#[test]
fn an_independent_client_meets_the_role_rules() {
    let mut cluster = Cluster::new();
    cluster.add("n1");
    cluster.add("n2");
    cluster.wait_members(2, Duration::from_secs(20));
    let pki_dir = cluster.pki.clone();
    let (gossip, api) = (cluster.agents[0].gossip, cluster.agents[0].api);
    pki::issue(&pki_dir, "alice", &IssueOptions::new(Role::Client)).unwrap();
    odd_cert(&pki_dir, "legacy", None);
    odd_cert(&pki_dir, "weird", Some("shoal://admin/weird"));

    // A client certificate passes TLS on the gossip port, then is closed for its role.
    let p = probe(gossip, "shoal-gossip/1", "n1", &pki_dir, "alice");
    assert!(p.handshake && p.closed, "{p:?}");
    assert!(p.reason.contains("node certificates only"), "{p:?}");
    // The same certificate is served on the API.
    let p = probe(api, "shoal-api/1", "n1", &pki_dir, "alice");
    assert!(p.handshake && !p.closed, "{p:?}");
    // No role, or a role nobody knows: closed on both endpoints.
    for (name, port, alpn) in [
        ("legacy", api, "shoal-api/1"),
        ("weird", api, "shoal-api/1"),
        ("legacy", gossip, "shoal-gossip/1"),
        ("weird", gossip, "shoal-gossip/1"),
    ] {
        let p = probe(port, alpn, "n1", &pki_dir, name);
        assert!(p.handshake && p.closed, "{name} on {alpn}: {p:?}");
    }
    let log = cluster.log(0);
    assert!(
        log.contains("unknown role \"admin\""),
        "no log line names the unknown role"
    );

    // A revoked node certificate is refused at the handshake once the list is published.
    pki::issue(&pki_dir, "n9", &IssueOptions::new(Role::Node)).unwrap();
    let p = probe(gossip, "shoal-gossip/1", "n1", &pki_dir, "n9");
    assert!(p.handshake && !p.closed, "{p:?}");
    let revoked = pki::revoke(&pki_dir, "n9").unwrap();
    let refused = wait_until(Duration::from_secs(10), || {
        let p = probe(gossip, "shoal-gossip/1", "n1", &pki_dir, "n9");
        !p.handshake || p.closed
    });
    assert!(refused, "n9 still accepted after {}", revoked.crl.display());
    let p = probe(api, "shoal-api/1", "n1", &pki_dir, "n9");
    assert!(!p.handshake || p.closed, "{p:?}");
    assert!(p.error.is_some() || p.closed, "{p:?}");
}
