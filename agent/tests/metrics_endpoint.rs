//! The agent's `/metrics` endpoint parses as OpenMetrics (checked with the Prometheus project's
//! own parser, `prometheus_client` for Python, which .ci/run installs, and with the rules
//! promtool's `check metrics` applies), carries every family, and `/healthz`, `/readyz` answer.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use common::*;

fn scrape(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to /metrics");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn metrics_parse_as_openmetrics_and_count_members() {
    let mut c = Cluster::new();
    c.add("n1");
    c.kill(0);
    c.agents[0].metrics = Some(free_tcp_addr());
    c.start(0, None);
    c.add("n2");
    c.wait_members(2, Duration::from_secs(20));
    let addr = c.agents[0].metrics.unwrap();
    let health = scrape(addr, "/healthz");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    // Ready once the host loop ran a round (the store is open: the agent started).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ready = scrape(addr, "/readyz");
        if ready.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
        let (_, reason) = ready.split_once("\r\n\r\n").unwrap();
        assert_eq!(reason.lines().count(), 1, "one line of reason: {reason}");
        assert!(std::time::Instant::now() < deadline, "never ready: {ready}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let response = scrape(addr, "/metrics");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.contains("shoal_members{state=\"alive\"} 2"), "{body}");
    assert!(body.ends_with("# EOF\n"));

    promtool_check(body);
    let types = parse_with_prometheus_client(body);
    for family in FAMILIES {
        assert!(
            types.contains_key(*family),
            "{family} missing from {types:?}"
        );
    }
    assert_eq!(types["shoal_gossip_bytes"], "counter");
    assert_eq!(types["shoal_members"], "gauge");
    // One cell: no other cell, up or down.
    assert_eq!(types["shoal_cells"], "gauge");
    assert!(body.contains("shoal_cells{state=\"down\"} 0"), "{body}");
    assert!(
        body.lines().any(|l| l.starts_with("shoal_build_info{")
            && l.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && l.contains("commit=\"")
            && l.contains("wire_min=\"")
            && l.contains("wire_max=\"")
            && l.ends_with(" 1")),
        "{body}"
    );

    let other = scrape(addr, "/other");
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");
    assert!(other.ends_with("served here\n"), "{other}");
    // Bad input is an error answer, never a dead endpoint.
    let garbage = scrape_raw(addr, b"\x00\x01 not http\r\n\r\n");
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
    let health = scrape(addr, "/healthz");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
}

/// Every family the agent exposes (docs/operations.md lists them).
const FAMILIES: &[&str] = &[
    "shoal_api_bytes",
    "shoal_api_requests",
    "shoal_build_info",
    "shoal_cell_entries_refused",
    "shoal_cells",
    "shoal_clock_offset_seconds",
    "shoal_clock_skewed",
    "shoal_connections_refused",
    "shoal_connections_revoked",
    "shoal_crls",
    "shoal_data_records_failed",
    "shoal_data_records_refused",
    "shoal_data_records_written",
    "shoal_dns_dropped",
    "shoal_dns_queries",
    "shoal_dns_rate_limited",
    "shoal_dns_responses",
    "shoal_dns_truncated",
    "shoal_entries_unverified",
    "shoal_feedback_dropped",
    "shoal_frames_rejected",
    "shoal_gossip_bytes",
    "shoal_gossip_connections_stalled",
    "shoal_gossip_messages",
    "shoal_gossip_sent_bytes_by_part",
    "shoal_handshakes_refused",
    "shoal_instance_restarts",
    "shoal_instances",
    "shoal_issues",
    "shoal_members",
    "shoal_mesh_version",
    "shoal_name_disputes",
    "shoal_placement_seconds",
    "shoal_quic_retries",
    "shoal_reconcile_actions",
    "shoal_reconcile_round_seconds",
    "shoal_reconcile_rounds",
    "shoal_reconcile_timer_late_max_milliseconds",
    "shoal_requests_unauthorized",
    "shoal_roles_refused",
    "shoal_store_entries",
    "shoal_store_newer_refused",
    "shoal_udp_receive_buffer_bytes",
    "shoal_writes_refused",
];

fn scrape_raw(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.write_all(request).unwrap();
    let mut text = Vec::new();
    let _ = stream.read_to_end(&mut text);
    String::from_utf8_lossy(&text).into_owned()
}

/// What `promtool check metrics` insists on: every family has HELP and TYPE (once, before its
/// samples), counters' samples end in `_total`, names are `shoal_` snake case, no family twice,
/// every sample belongs to the family announced last.
fn promtool_check(body: &str) {
    let name_ok = |n: &str| {
        n.strip_prefix("shoal_").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
    };
    let mut help: BTreeMap<String, usize> = BTreeMap::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in body.lines() {
        if line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').expect("HELP name text");
            assert!(!text.trim().is_empty(), "empty help for {name}");
            *help.entry(name.to_string()).or_default() += 1;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(
                name_ok(name),
                "family name {name} is not ^shoal_[a-z0-9_]+$"
            );
            assert!(
                !name.ends_with("_total"),
                "{name}: _total is the counter sample's suffix"
            );
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "family {name} twice"
            );
            assert_eq!(help.get(name), Some(&1), "{name}: one HELP before its TYPE");
            current = Some((name.to_string(), kind.to_string()));
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment: {line}");
        let sample = line.split(['{', ' ']).next().unwrap();
        let (family, kind) = current.as_ref().expect("a sample before any TYPE");
        let expected = match kind.as_str() {
            "counter" => format!("{family}_total"),
            "gauge" => family.clone(),
            other => panic!("{family}: unexpected type {other}"),
        };
        assert_eq!(sample, expected, "{line}");
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
    assert_eq!(
        help.keys().collect::<Vec<_>>(),
        types.keys().collect::<Vec<_>>(),
        "every family has HELP and TYPE"
    );
    assert!(body.ends_with("# EOF\n"));
}

/// Family name -> type, as the Prometheus project's Python parser reads the exposition.
fn parse_with_prometheus_client(body: &str) -> BTreeMap<String, String> {
    let script = "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as parse\n\
                  for f in parse(sys.stdin.read()):\n    print(f.name, f.type)\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (with prometheus_client: pip install prometheus-client)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the exposition (pip install prometheus-client?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}
