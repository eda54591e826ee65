//! Named ports on a real agent (issue 17, item 2): a process workload declaring
//! `ports = [{ name = "http" }]` runs 3 replicas on one host (`python3 -m http.server
//! $SHOAL_PORT_HTTP --bind $SHOAL_ADDR`), each with its own port from `--port-range`; its probe
//! names the port and goes healthy; `dig SRV _http._tcp.NAME.shoal` answers the allocated ports;
//! the agent is killed and started again over the same data dir, and the adopted instances keep
//! their ports (and their processes); a workload past the range's end is placed only as far as
//! the range goes (ports are a placement resource), and a start that finds the port left taken by
//! another program gets an event and an issue that say so.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, stderr, wait_until, Cluster};

/// The host address of the agent.
const HOST: [u8; 4] = [127, 0, 0, 31];
/// Ports in the agent's range: the 3 replicas and one more.
const RANGE_LEN: u16 = 4;

/// `shoal endpoints NAME -o json`: (replica, serving, pid-less handle-free view of its ports).
fn endpoints(c: &Cluster, name: &str) -> Vec<(u64, bool, BTreeMap<String, u16>)> {
    let out = c.cli(0, &["endpoints", name, "-o", "json"]);
    if !out.status.success() {
        return Vec::new();
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    json["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|e| {
            let ports = e["ports"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_u64().unwrap() as u16))
                        .collect()
                })
                .unwrap_or_default();
            (e["replica"].as_u64().unwrap(), e["serving"] == true, ports)
        })
        .collect()
}

/// The replica -> http port of the serving endpoints, once all `n` serve.
fn serving_ports(c: &Cluster, name: &str, n: usize) -> Option<BTreeMap<u64, u16>> {
    let list = endpoints(c, name);
    let serving: BTreeMap<u64, u16> = list
        .iter()
        .filter(|e| e.1)
        .filter_map(|e| Some((e.0, *e.2.get("http")?)))
        .collect();
    (serving.len() == n).then_some(serving)
}

/// `dig +short SRV`: (port, target) of each answer, sorted.
fn dig_srv(server: SocketAddr, name: &str) -> Vec<(u16, String)> {
    let out = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string()])
        .args(["+time=1", "+tries=1", "+short", "SRV", name])
        .output()
        .expect("dig is installed (apt-get install dnsutils; .ci/run does)");
    let mut answers: Vec<(u16, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.get(2)?.parse().ok()?, f.get(3)?.to_string()))
        })
        .collect();
    answers.sort();
    answers
}

/// The status code of `GET /` on `addr`.
fn http_status(addr: SocketAddr) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// The pids of the http servers of `dir`.
fn server_pids(dir: &std::path::Path) -> Vec<u32> {
    let out = Command::new("pgrep")
        .args(["-f", &format!("http.server.*{}", dir.display())])
        .output()
        .expect("pgrep");
    let mut pids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    pids.sort();
    pids
}

#[test]
fn named_ports_are_allocated_answered_and_kept_across_a_restart() {
    let mut c = Cluster::new();
    let www = c.dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    c.cleanup.push(format!("http.server.*{}", www.display()));
    let ip = IpAddr::from(HOST);
    let at = |p: SocketAddr| SocketAddr::new(ip, p.port());
    let (gossip, api, dns) = (at(free_port()), at(free_port()), at(free_port()));
    // Above the kernel's ephemeral range and the tests' own ports, apart per test process.
    let low = 61_000 + (std::process::id() % 100) as u16 * 40;
    let range = format!("{low}-{}", low + RANGE_LEN - 1);
    c.agent_args = vec![
        "--dns".into(),
        dns.to_string(),
        "--port-range".into(),
        range.clone(),
    ];
    c.add_at("n1", gossip, api, None);
    c.wait_members(1, Duration::from_secs(20));

    let spec = c.dir.path().join("portweb.toml");
    let text = format!(
        "name = \"portweb\"\nreplicas = 3\n[process]\n\
         command = [\"sh\", \"-c\", \"exec python3 -m http.server $SHOAL_PORT_HTTP --bind $SHOAL_ADDR --directory {}\"]\n\
         ports = [{{ name = \"http\" }}]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\
         [health]\nhttp = {{ port = \"http\", path = \"/\" }}\n\
         interval = \"300ms\"\ntimeout = \"300ms\"\nstart_grace = \"5s\"\n",
        www.display()
    );
    std::fs::write(&spec, text).unwrap();
    let applied = Instant::now();
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
    let mut ports = None;
    let healthy = wait_until(Duration::from_secs(30), || {
        ports = serving_ports(&c, "portweb", 3);
        ports.is_some()
    });
    assert!(
        healthy,
        "3 replicas healthy on their named ports\n{}",
        c.logs()
    );
    let healthy_ms = applied.elapsed().as_millis() as u64;
    let ports = ports.unwrap();

    // Distinct ports from the range, each answering HTTP on the host's address.
    let mut distinct: Vec<u16> = ports.values().copied().collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "distinct ports on one host: {ports:?}");
    for port in ports.values() {
        assert!(
            (low..low + RANGE_LEN).contains(port),
            "{port} not in {range}"
        );
        assert_eq!(http_status(SocketAddr::new(ip, *port)), Some(200), "{port}");
    }

    // DNS: one SRV answer per replica with its own port.
    let expected: Vec<(u16, String)> = {
        let mut v: Vec<(u16, String)> = ports
            .iter()
            .map(|(r, p)| (*p, format!("{r}.portweb.shoal.")))
            .collect();
        v.sort();
        v
    };
    assert_eq!(dig_srv(dns, "_http._tcp.portweb.shoal"), expected);
    assert_eq!(
        dig_srv(dns, "_http._tcp.1.portweb.shoal"),
        vec![(ports[&1], "1.portweb.shoal.".to_string())]
    );

    // Past the range's end. Ports are a placement resource: of the 5 replicas of `portweb` and
    // `extra` that need a port, placement gives this node 4 (its range) and says of the fifth
    // that no node has a free port for it (which one is the ranking's choice: placement does
    // not favour what runs). And the port left is taken by another program, which placement
    // cannot see: a start of `extra` fails with a reason that says so.
    let taken: Vec<u16> = (low..low + RANGE_LEN)
        .filter(|p| !ports.values().any(|q| q == p))
        .collect();
    assert_eq!(taken.len(), 1, "one port of the range left: {ports:?}");
    let squatter = std::net::TcpListener::bind(("0.0.0.0", taken[0])).expect("bind the free port");
    let extra = c.dir.path().join("extra.toml");
    let text = "name = \"extra\"\nreplicas = 2\n[process]\ncommand = [\"sleep\", \"86419\"]\n\
         ports = [{ name = \"http\" }]\n[resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";
    std::fs::write(&extra, text).unwrap();
    c.cleanup.push("sleep 86419".to_string());
    let out = c.cli(0, &["apply", "-f", extra.to_str().unwrap()]);
    assert!(out.status.success(), "apply extra: {}", stderr(&out));
    let wanted = format!("no free port in {range} for extra/");
    let unplaced_rows = || {
        ["portweb", "extra"]
            .iter()
            .flat_map(|w| {
                let out = c.cli(0, &["status", w, "-o", "json"]);
                let status: serde_json::Value =
                    serde_json::from_slice(&out.stdout).unwrap_or_default();
                status["instances"].as_array().cloned().unwrap_or_default()
            })
            .filter_map(|i| i["reason"].as_str().map(str::to_string))
            .filter(|r| r.contains("placed on no node") || !r.contains("handing off"))
            .collect::<Vec<String>>()
    };
    let said = wait_until(Duration::from_secs(20), || {
        let events = c.cli(0, &["events", "-o", "json"]);
        let issues = c.cli(0, &["issues", "-o", "json"]);
        let unplaced = unplaced_rows();
        String::from_utf8_lossy(&events.stdout).contains(&wanted)
            && String::from_utf8_lossy(&issues.stdout).contains(&wanted)
            && unplaced.len() == 1
            && unplaced[0].contains("have no free port in their range")
    });
    let issues = c.cli(0, &["issues"]);
    assert!(
        said,
        "an event and an issue say {wanted:?}; one replica unplaced for want of ports: {:?}\n{}\n{}",
        unplaced_rows(),
        String::from_utf8_lossy(&issues.stdout),
        c.logs()
    );
    drop(squatter);
    let out = c.cli(0, &["delete", "extra"]);
    assert!(out.status.success(), "delete extra: {}", stderr(&out));

    // A fixed number is not allocated but checked: held by another program, the start fails
    // with a reason that names the port (not a process that cannot bind, in a loop); once the
    // port is free, the replica starts on it.
    let squatter = std::net::TcpListener::bind(("0.0.0.0", 0)).expect("bind a port");
    let fixed_port = squatter.local_addr().unwrap().port();
    let fixed = c.dir.path().join("fixed.toml");
    let text = format!(
        "name = \"fixed\"\n[process]\ncommand = [\"sleep\", \"86423\"]\n\
         ports = [{{ name = \"admin\", port = {fixed_port} }}]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
    );
    std::fs::write(&fixed, text).unwrap();
    c.cleanup.push("sleep 86423".to_string());
    let out = c.cli(0, &["apply", "-f", fixed.to_str().unwrap()]);
    assert!(out.status.success(), "apply fixed: {}", stderr(&out));
    let wanted =
        format!("host port {fixed_port}/tcp, which fixed/0's spec fixes, is in use on this host");
    let said = wait_until(Duration::from_secs(20), || {
        let events = c.cli(0, &["events", "-o", "json"]);
        let issues = c.cli(0, &["issues", "-o", "json"]);
        String::from_utf8_lossy(&events.stdout).contains(&wanted)
            && String::from_utf8_lossy(&issues.stdout).contains(&wanted)
    });
    assert!(
        said,
        "an event and an issue say {wanted:?}\n{}\n{}",
        String::from_utf8_lossy(&c.cli(0, &["issues"]).stdout),
        c.logs()
    );
    drop(squatter);
    let started = wait_until(Duration::from_secs(30), || {
        let running = c.cli_json(0, &["status", "fixed", "-o", "json"])["instances"]
            .as_array()
            .is_some_and(|rows| rows.iter().any(|r| r["phase"] == "running"));
        running
            && endpoints(&c, "fixed")
                .iter()
                .any(|e| e.2.get("admin") == Some(&fixed_port))
    });
    assert!(
        started,
        "fixed/0 runs on port {fixed_port} once it is free: {} {:?}\n{}",
        c.cli_json(0, &["status", "fixed", "-o", "json"]),
        endpoints(&c, "fixed"),
        c.logs()
    );
    // A second workload that fixes the same number: its apply says so at once, and placement
    // (algorithm 8, mesh version 10) never puts it beside `fixed` on this one host: its replica
    // is unplaceable, saying which port, and `fixed` keeps running.
    let fixed2 = c.dir.path().join("fixed2.toml");
    // A lower priority: between two workloads of one priority, the canonical order (workload
    // hash) would decide which keeps the host (docs/placement.md).
    let text = std::fs::read_to_string(&fixed)
        .unwrap()
        .replace("name = \"fixed\"", "name = \"fixed2\"\nreplicas = 1")
        + "[placement]\npriority = -1\n";
    std::fs::write(&fixed2, text).unwrap();
    let out = c.cli(0, &["apply", "-f", fixed2.to_str().unwrap()]);
    assert!(out.status.success(), "apply fixed2: {}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!(
            "note: host port {fixed_port}/tcp is also fixed by fixed: their replicas never share a host"
        )),
        "{said}"
    );
    let mut status = String::new();
    let unplaceable = wait_until(Duration::from_secs(15), || {
        status = String::from_utf8_lossy(&c.cli(0, &["status", "fixed2"]).stdout).into_owned();
        status.contains(&format!(
            "host port {fixed_port}/tcp free of other workloads' replicas"
        ))
    });
    assert!(unplaceable, "fixed2 is unplaceable for its port:\n{status}");
    let running = c.cli_json(0, &["status", "fixed", "-o", "json"])["instances"]
        .as_array()
        .is_some_and(|rows| rows.iter().any(|r| r["phase"] == "running"));
    assert!(running, "fixed keeps running beside the unplaceable fixed2");
    for name in ["fixed", "fixed2"] {
        let out = c.cli(0, &["delete", name]);
        assert!(out.status.success(), "delete {name}: {}", stderr(&out));
    }

    // Kill the agent and start it again over the same data dir: it adopts the instances, which
    // keep their processes and ports, and DNS answers the same.
    let pids = server_pids(&www);
    assert_eq!(pids.len(), 3, "3 http servers: {pids:?}");
    c.kill(0);
    let restarted = Instant::now();
    c.start(0, None);
    let mut again = None;
    let back = wait_until(Duration::from_secs(30), || {
        again = serving_ports(&c, "portweb", 3);
        again.is_some()
    });
    assert!(back, "the adopted replicas serve again\n{}", c.logs());
    let back_ms = restarted.elapsed().as_millis() as u64;
    assert_eq!(again.unwrap(), ports, "adopted instances keep their ports");
    assert_eq!(server_pids(&www), pids, "adopted, not restarted");
    assert!(
        wait_until(Duration::from_secs(10), || dig_srv(
            dns,
            "_http._tcp.portweb.shoal"
        ) == expected),
        "DNS answers the same ports after the restart"
    );
    println!(
        "{}",
        serde_json::json!({
            "test": "named_ports",
            "replicas_on_one_host": 3,
            "ports": ports.values().collect::<Vec<_>>(),
            "healthy_after_apply_ms": healthy_ms,
            "serving_after_restart_ms": back_ms,
        })
    );
}
