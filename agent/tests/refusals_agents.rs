//! Plain refusals (issue 29 item 6), end to end: a real agent refuses the real CLI's certificate
//! of another CA, an expired one and a revoked one with the TLS alert that says so; the CLI says
//! so on stderr and exits non-zero at once; the agent logs each refusal at info, by cause.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::{stderr, wait_until, Cluster};
use shoal::identity::names::role_uri;
use shoal::identity::pki::{self, IssueOptions, Role};

/// Runs `shoal nodes` against `cluster`'s first agent as client `name` of the PKI in `pki`,
/// and how long it took.
fn nodes_as(cluster: &Cluster, pki: &Path, name: &str) -> (Output, Duration) {
    let started = Instant::now();
    let out = common::shoal_command(None)
        .env_remove("SHOAL_SELF_ISSUE")
        .args(["nodes", "--agent", &cluster.agents[0].api.to_string()])
        .arg("--pki")
        .arg(pki)
        .args(["--client-name", name, "--timeout", "5s"])
        .output()
        .expect("run shoal");
    (out, started.elapsed())
}

/// Writes `NAME.crt` and `NAME.key` in `dir`: a client certificate signed by the CA in `dir`
/// that expired in 2021.
fn issue_expired(dir: &Path, name: &str) {
    let ca_pem = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    let ca_key =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(dir.join("ca.key")).unwrap()).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    let uri = rcgen::string::Ia5String::try_from(role_uri(Role::Client, name)).unwrap();
    params.subject_alt_names.push(rcgen::SanType::URI(uri));
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

#[test]
fn a_refused_certificate_is_told_why_and_logged_by_cause() {
    let mut cluster = Cluster::new();
    // Alice is revoked before the agent starts: it reads crl.pem from its --pki.
    pki::issue(&cluster.pki, "alice", &IssueOptions::new(Role::Client)).unwrap();
    pki::revoke(&cluster.pki, "alice").unwrap();
    pki::issue(&cluster.pki, "bob", &IssueOptions::new(Role::Client)).unwrap();
    issue_expired(&cluster.pki, "carol");
    // Eve's certificate is of another CA; her dir holds this mesh's ca.crt (she dialed the
    // right agent with the wrong certificate).
    let foreign = cluster.dir.path().join("foreign");
    pki::init(&foreign).unwrap();
    pki::issue(&foreign, "eve", &IssueOptions::new(Role::Client)).unwrap();
    std::fs::copy(cluster.pki.join("ca.crt"), foreign.join("ca.crt")).unwrap();
    cluster.add("n1");
    let pki_dir = cluster.pki.clone();
    let up = wait_until(Duration::from_secs(20), || {
        nodes_as(&cluster, &pki_dir, "bob").0.status.success()
    });
    assert!(up, "the agent never answered bob:\n{}", cluster.logs());

    let cases = [
        (
            &pki_dir,
            "alice",
            "it is revoked (certificate_revoked)",
            "revoked certificate",
        ),
        (
            &pki_dir,
            "carol",
            "it has expired (certificate_expired)",
            "expired certificate",
        ),
        (
            &foreign,
            "eve",
            "it is issued by another CA",
            "certificate of another CA",
        ),
    ];
    for (dir, name, says, cause) in cases {
        let (out, took) = nodes_as(&cluster, dir, name);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        let addr = cluster.agents[0].api;
        assert!(
            err.contains(&format!(
                "the agent at {addr} refused this CLI's certificate: {says}"
            )),
            "{name}: {err}"
        );
        assert!(!err.contains("is it running"), "{name}: {err}");
        assert!(took < Duration::from_secs(2), "{name}: took {took:?}");
        eprintln!("{name}: refused in {} ms", took.as_millis());
        // The agent says it at info, naming the cause.
        let logged = wait_until(Duration::from_secs(5), || {
            cluster.log(0).lines().any(|line| {
                line.contains("INFO") && line.contains("handshake refused") && line.contains(cause)
            })
        });
        assert!(
            logged,
            "{name}: no info line for {cause}:\n{}",
            cluster.log(0)
        );
    }
    // A second revoked call within 10 s: told again, but not logged at info again.
    let (out, _) = nodes_as(&cluster, &pki_dir, "alice");
    assert!(stderr(&out).contains("revoked"), "{}", stderr(&out));
    let revoked_lines = cluster
        .log(0)
        .lines()
        .filter(|l| l.contains("INFO") && l.contains("revoked certificate"))
        .count();
    assert_eq!(revoked_lines, 1, "{}", cluster.log(0));
}
