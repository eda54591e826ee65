//! The agent's `/metrics` endpoint parses as OpenMetrics (checked with the Prometheus project's
//! own parser, `prometheus_client` for Python, which .ci/run installs) and carries the mesh
//! families.

mod common;

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
    let response = scrape(c.agents[0].metrics.unwrap(), "/metrics");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.contains("shoal_members{state=\"alive\"} 2"), "{body}");
    assert!(body.ends_with("# EOF\n"));

    let script = "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as parse\n\
                  names = [f.name for f in parse(sys.stdin.read())]\nprint(' '.join(names))\n";
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
    let names = String::from_utf8_lossy(&out.stdout);
    for family in [
        "shoal_members",
        "shoal_gossip_bytes",
        "shoal_store_entries",
        "shoal_frames_rejected",
    ] {
        assert!(
            names.split_whitespace().any(|n| n == family),
            "{family} missing from {names}"
        );
    }
    let other = scrape(c.agents[0].metrics.unwrap(), "/other");
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");
}
