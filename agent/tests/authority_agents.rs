//! Identities and authority with real agents over QUIC (issue 14): roles per request, names bound
//! to certificates, entries that cannot be forged, who asked in the events, and revocation that
//! spreads from one agent to all and closes open connections.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{run_cli, stderr, wait_until, write_spec, Cluster};
use shoal::identity::authority::Authority;
use shoal::identity::pki::{self, IssueOptions, Role, SelfIssue};
use shoal::identity::tls::{self, QuicOptions, ALPN_API, ANY_MEMBER};
use shoal::wire::api::{ErrorKind, Request, Response};
use shoal_core::hlc::{Hlc, Version};
use shoal_core::store::{Body, Entry};

fn identity(pki_dir: &Path, name: &str, role: Role) -> pki::Identity {
    pki::load_identity(pki_dir, name, SelfIssue::As(role)).expect("identity")
}

async fn call(id: &pki::Identity, addr: SocketAddr, req: Request) -> Result<Response, String> {
    let endpoint = tls::client_endpoint(addr, id, ALPN_API, &QuicOptions::api()).unwrap();
    let answer =
        shoal::transport::rpc::call(&endpoint, addr, ANY_MEMBER, &req, Duration::from_secs(3))
            .await;
    endpoint.close(0u32.into(), b"done");
    answer.map_err(|e| e.to_string())
}

/// The certificate the agent at `addr` presents to a new connection.
async fn server_cert(id: &pki::Identity, addr: SocketAddr) -> Vec<u8> {
    let endpoint = tls::client_endpoint(addr, id, ALPN_API, &QuicOptions::api()).unwrap();
    let conn = endpoint.connect(addr, ANY_MEMBER).unwrap().await.unwrap();
    let cert = tls::peer_cert(&conn).unwrap().to_vec();
    conn.close(0u32.into(), b"done");
    endpoint.close(0u32.into(), b"done");
    cert
}

fn refused_kind(answer: Result<Response, String>) -> Option<ErrorKind> {
    match answer {
        Ok(Response::Error(e)) => Some(e.kind),
        _ => None,
    }
}

fn nodes() -> Request {
    Request::Nodes {
        after: None,
        limit: 100,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_bound_names_and_signed_entries_hold_against_peers_with_valid_certificates() {
    let mut cluster = Cluster::new();
    cluster.add("n1");
    cluster.add("n2");
    cluster.wait_members(2, Duration::from_secs(20));
    let api = cluster.agents[0].api;
    let pki_dir = cluster.pki.clone();

    // A client may not make agent-to-agent requests; a read-only client may not write.
    let alice = identity(&pki_dir, "alice", Role::Client);
    let ro = identity(&pki_dir, "ro", Role::Reader);
    for req in [Request::Digest, Request::Replicate { entries: vec![] }] {
        let kind = refused_kind(call(&alice, api, req).await);
        assert_eq!(kind, Some(ErrorKind::Unauthorized));
    }
    let kind = refused_kind(call(&ro, api, Request::Apply { specs: vec![] }).await);
    assert_eq!(kind, Some(ErrorKind::Unauthorized));
    let spec = write_spec(cluster.dir.path(), "web", 1);
    let out = cluster.cli(
        0,
        &["apply", "-f", spec.to_str().unwrap(), "--client-name", "ro"],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("read-only"), "{}", stderr(&out));
    let out = cluster.cli(0, &["get", "--client-name", "ro"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // An operator's write records who asked.
    let out = cluster.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cluster.cli(0, &["events", "-o", "json"]);
    let events = String::from_utf8_lossy(&out.stdout).to_string();
    let asked = events.lines().any(|line| {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        e["kind"] == "apply" && e["by"] == "shoal-cli (client)"
    });
    assert!(asked, "no apply event with who asked: {events}");
    // The history and undo name who asked, from the signed entries.
    let spec2 = cluster.dir.path().join("web2.toml");
    std::fs::write(
        &spec2,
        std::fs::read_to_string(&spec)
            .unwrap()
            .replace("3600", "3601"),
    )
    .unwrap();
    let out = cluster.cli(0, &["apply", "-f", spec2.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cluster.cli(1, &["rollout", "undo", "web"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cluster.cli(1, &["history", "web", "-o", "json"]);
    let versions: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(versions[0]["runs"], "sleep 3600", "{versions}");
    assert_eq!(
        versions[0]["by"],
        "shoal-cli (client), undo to ".to_string() + versions[2]["version"].as_str().unwrap(),
        "{versions}"
    );
    assert_eq!(versions[1]["by"], "shoal-cli (client)", "{versions}");
    let out = cluster.cli(1, &["rollout", "undo", "web", "--to", "1.0@nowhere"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not in web's history"),
        "{}",
        stderr(&out)
    );
    // A paused rollout keeps the running instances on their version; resumed, it goes on.
    let running_versions = |i: usize| -> Vec<String> {
        let out = cluster.cli(i, &["status", "web", "-o", "json"]);
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        status["instances"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter(|i| i["phase"] == "running")
                    .filter_map(|i| i["spec_version"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    // Settled on the undo's version (the version before it may still run for a moment: pausing
    // then would catch the undo's own rollout in flight).
    let current = {
        let out = cluster.cli(0, &["get", "web", "-o", "json"]);
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        got[0]["version"].as_str().unwrap_or_default().to_string()
    };
    assert!(!current.is_empty(), "get web names a version");
    let settled = wait_until(Duration::from_secs(15), || {
        running_versions(0) == vec![current.clone()]
    });
    assert!(settled, "web never ran one instance of {current}");
    let before = running_versions(0);
    let out = cluster.cli(0, &["rollout", "pause", "web"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cluster.cli(0, &["apply", "-f", spec2.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        running_versions(0),
        before,
        "a paused rollout replaced the instance"
    );
    let rollout = |i: usize| -> serde_json::Value {
        let out = cluster.cli(i, &["rollout", "status", "web", "-o", "json"]);
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    };
    let paused = rollout(1);
    assert_eq!(paused["state"], "paused", "{paused}");
    assert_eq!(paused["updated"], 0, "{paused}");
    let out = cluster.cli(1, &["rollout", "resume", "web"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let moved = wait_until(Duration::from_secs(15), || {
        let now = running_versions(0);
        now.len() == 1 && now != before
    });
    assert!(moved, "the resumed rollout did not replace the instance");
    let complete = wait_until(Duration::from_secs(15), || {
        rollout(0)["state"] == "complete"
    });
    assert!(
        complete,
        "rollout status never said complete: {}",
        rollout(0)
    );

    // A peer with a valid node certificate cannot forge another node's write, nor an unsigned
    // tombstone; its own signed write is attributed to it.
    let mallory = identity(&pki_dir, "mallory", Role::Node);
    let signer = Authority::certified(&mallory).unwrap();
    let future = Hlc {
        wall_ms: now_ms() + 1_000,
        logical: 0,
    };
    let tombstone = |node: &str| Entry {
        name: "web".into(),
        version: Version::new(future, node),
        body: Body::Tombstone {
            deleted_at_ms: future.wall_ms,
            purge_data: false,
        },
        proof: Vec::new(),
    };
    let unsigned = tombstone("n1");
    let mut forged = tombstone("mallory");
    signer.seal(&mut forged, "mallory");
    forged.version.node = "n1".into();
    for entry in [unsigned, forged] {
        let answer = call(
            &mallory,
            api,
            Request::Replicate {
                entries: vec![entry],
            },
        )
        .await;
        assert_eq!(refused_kind(answer), Some(ErrorKind::Invalid));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(cluster.workloads(1), Some(vec!["web".to_string()]));
    let mut own = tombstone("mallory");
    own.name = "other".into();
    own.body = Body::Tombstone {
        deleted_at_ms: future.wall_ms,
        purge_data: false,
    };
    signer.seal(&mut own, "mallory");
    let answer = call(&mallory, api, Request::Replicate { entries: vec![own] }).await;
    assert!(
        matches!(answer, Ok(Response::Replicated { .. })),
        "{answer:?}"
    );

    // A renewed certificate is taken without a restart: new connections see it, and the agent's
    // writes signed with the new key are accepted by its peers.
    let n2_api = cluster.agents[1].api;
    let before = server_cert(&alice, n2_api).await;
    pki::renew(&pki_dir, "n2", None).unwrap();
    let renewed = pki::load_identity(&pki_dir, "n2", SelfIssue::No).unwrap();
    let mut now_presented = Vec::new();
    for _ in 0..50 {
        now_presented = server_cert(&alice, n2_api).await;
        if now_presented != before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        now_presented,
        renewed.cert_chain[0].to_vec(),
        "n2 still presents its old certificate"
    );
    let renewed_spec = write_spec(cluster.dir.path(), "renewed", 1);
    let out = cluster.cli(1, &["apply", "-f", renewed_spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let spread = wait_until(Duration::from_secs(10), || {
        cluster
            .workloads(0)
            .is_some_and(|w| w.contains(&"renewed".to_string()))
    });
    assert!(
        spread,
        "a write signed with the renewed key did not reach n1"
    );

    // Capacity caps: every agent declares 4 cores; capped at 2, a 3-core replica fits nowhere,
    // and each node over the cap raises an issue.
    let out = cluster.cli(0, &["caps", "set", "--cpu", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let big = cluster.dir.path().join("big.toml");
    std::fs::write(
        &big,
        "name = \"big\"\nreplicas = 1\n[process]\ncommand = [\"sleep\", \"3600\"]\n\
         [resources]\ncpu = \"3\"\nmemory = \"16Mi\"\n",
    )
    .unwrap();
    let out = cluster.cli(0, &["apply", "-f", big.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let capped = wait_until(Duration::from_secs(10), || {
        let out = cluster.cli(1, &["issues", "-o", "json"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.matches("capacity-capped").count() >= 2
    });
    assert!(capped, "no capacity-capped issues:\n{}", cluster.logs());
    let unschedulable = wait_until(Duration::from_secs(10), || {
        let out = cluster.cli(1, &["status", "big", "-o", "json"]);
        String::from_utf8_lossy(&out.stdout).contains("unschedulable")
    });
    assert!(unschedulable, "a 3-core replica placed under a 2-core cap");
    let out = cluster.cli(0, &["caps", "clear"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let placed = wait_until(Duration::from_secs(10), || {
        let out = cluster.cli(1, &["status", "big", "-o", "json"]);
        !String::from_utf8_lossy(&out.stdout).contains("unschedulable")
    });
    assert!(
        placed,
        "the replica stayed unschedulable once the caps were cleared"
    );

    // An agent with a client certificate, or under a name its certificate does not carry,
    // does not start.
    let out = run_cli(
        &[
            "agent",
            "--name",
            "alice",
            "--gossip",
            "127.0.0.1:1",
            "--api",
            "127.0.0.1:2",
            "--data-dir",
            cluster.dir.path().join("alice-data").to_str().unwrap(),
            "--pki",
            pki_dir.to_str().unwrap(),
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("node certificate"),
        "{}",
        stderr(&out)
    );
    std::fs::copy(pki_dir.join("n2.crt"), pki_dir.join("n3.crt")).unwrap();
    std::fs::copy(pki_dir.join("n2.key"), pki_dir.join("n3.key")).unwrap();
    let out = run_cli(
        &[
            "agent",
            "--name",
            "n3",
            "--gossip",
            "127.0.0.1:1",
            "--api",
            "127.0.0.1:2",
            "--data-dir",
            cluster.dir.path().join("n3-data").to_str().unwrap(),
            "--pki",
            pki_dir.to_str().unwrap(),
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("issued for \"n2\""),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_given_to_one_agent_reaches_every_agent_and_closes_open_connections() {
    let mut cluster = Cluster::new();
    for name in ["n1", "n2", "n3"] {
        cluster.add(name);
    }
    cluster.wait_members(3, Duration::from_secs(20));
    // The operator's CA directory is apart from the agents' (whose crl.pem they would read).
    let admin = cluster.dir.path().join("admin");
    let agents_pki = cluster.pki.clone();
    // Agents trust the cluster CA in their --pki; issue alice there, revoke with that CA.
    std::fs::create_dir_all(&admin).unwrap();
    for file in ["ca.crt", "ca.key"] {
        std::fs::copy(agents_pki.join(file), admin.join(file)).unwrap();
    }
    pki::issue(&admin, "alice", &IssueOptions::new(Role::Client)).unwrap();
    let alice = pki::load_identity(&admin, "alice", SelfIssue::No).unwrap();
    for agent in &cluster.agents {
        let answer = call(&alice, agent.api, nodes()).await;
        assert!(matches!(answer, Ok(Response::Nodes { .. })), "{answer:?}");
    }
    // Losing the CA key does not stop a running mesh: agents never read it.
    std::fs::remove_file(agents_pki.join("ca.key")).unwrap();
    // An open connection of alice to the third agent.
    let last = cluster.agents[2].api;
    let endpoint = tls::client_endpoint(last, &alice, ALPN_API, &QuicOptions::api()).unwrap();
    let open = endpoint.connect(last, ANY_MEMBER).unwrap().await.unwrap();

    // A list signed by another CA is refused and changes nothing.
    let foreign = cluster.dir.path().join("foreign");
    pki::init(&foreign).unwrap();
    pki::issue(&foreign, "alice", &IssueOptions::new(Role::Client)).unwrap();
    let bad = pki::revoke(&foreign, "alice").unwrap();
    let out = cluster.cli(
        0,
        &["pki", "publish-crl", "--crl", bad.crl.to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not signed by this cluster's CA"),
        "{}",
        stderr(&out)
    );

    let revoked = pki::revoke(&admin, "alice").unwrap();
    let published = Instant::now();
    let out = cluster.cli(
        0,
        &["pki", "publish-crl", "--crl", revoked.crl.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let all_refuse = wait_until(Duration::from_secs(10), || {
        let rt = tokio::runtime::Handle::current();
        cluster.agents.iter().all(|agent| {
            let answer =
                tokio::task::block_in_place(|| rt.block_on(call(&alice, agent.api, nodes())));
            answer.is_err()
        })
    });
    assert!(
        all_refuse,
        "alice still answered 10 s after publishing:\n{}",
        cluster.logs()
    );
    // The refused caller is told why: the TLS alert closing its connection says revoked.
    let answer = call(&alice, cluster.agents[0].api, nodes()).await;
    let err = answer.expect_err("a revoked client answered");
    assert!(err.contains("error 44") && err.contains("Revoked"), "{err}");
    let closed = tokio::time::timeout(Duration::from_secs(10), open.closed()).await;
    assert!(closed.is_ok(), "alice's open connection was not closed");
    eprintln!(
        "revocation in force on 3 agents after {} ms",
        published.elapsed().as_millis()
    );
    // The second publish of the same list is a no-op; an older list is refused.
    let out = cluster.cli(
        1,
        &["pki", "publish-crl", "--crl", revoked.crl.to_str().unwrap()],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("already held"),
        "{}",
        stderr(&out)
    );
    let first = cluster.dir.path().join("crl-1.pem");
    std::fs::copy(&revoked.crl, &first).unwrap();
    pki::issue(&admin, "bob", &IssueOptions::new(Role::Client)).unwrap();
    let newer = pki::revoke(&admin, "bob").unwrap();
    assert_eq!(newer.number, 2);
    let out = cluster.cli(
        2,
        &["pki", "publish-crl", "--crl", newer.crl.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cluster.cli(2, &["pki", "publish-crl", "--crl", first.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("older than the one held"),
        "{}",
        stderr(&out)
    );
    // The mesh still works without the CA key: a write goes through.
    let spec = write_spec(cluster.dir.path(), "after", 1);
    let out = cluster.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // A revoked node is cut off both ways: its peers close its connections, refuse new ones and
    // soon hold it dead.
    std::fs::copy(agents_pki.join("n3.crt"), admin.join("n3.crt")).unwrap();
    let cut = pki::revoke(&admin, "n3").unwrap();
    let out = cluster.cli(
        0,
        &["pki", "publish-crl", "--crl", cut.crl.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let dead = wait_until(Duration::from_secs(20), || {
        [0, 1].iter().all(|&i| {
            cluster
                .alive_nodes(i)
                .is_some_and(|alive| !alive.contains(&"n3".to_string()))
        })
    });
    assert!(
        dead,
        "n3 still held alive after its revocation:\n{}",
        cluster.logs()
    );
}
