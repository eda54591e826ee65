//! Named container ports and container DNS on a real agent with the docker runtime (issue 17,
//! items 2 and 3): a container workload names its mapping `{ name = "http", container = 8080 }`
//! without a host port; 2 replicas on one host each get a host port from `--port-range`, their
//! probes name the port, SRV answers the ports; the agent answers DNS on the docker bridge's
//! gateway, port 53, and the containers resolve `NAME.shoal` (and plain `NAME`, through the search
//! domain) through it; ports are published on the agent's address only. Needs a reachable Docker
//! engine with the default bridge, root (port 53) and `/bin/busybox` (see runtime_docker.rs for
//! SHOAL_SKIP_DOCKER_TESTS).

mod common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use common::{docker_ready, free_port, stderr, wait_until, Cluster};

const NODE: &str = "pd1";

/// The default bridge's gateway (the host's address on it, which containers reach).
fn bridge_gateway() -> IpAddr {
    let out = Command::new("docker")
        .args([
            "network",
            "inspect",
            "bridge",
            "--format",
            "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
        ])
        .output()
        .expect("docker network inspect");
    if let Ok(ip) = String::from_utf8_lossy(&out.stdout).trim().parse() {
        return ip;
    }
    // Engines that leave the gateway out of the IPAM config: the bridge interface's address.
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "docker0"])
        .output()
        .expect("ip addr");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no IPv4 address on docker0: {text}"))
}

/// This test's containers.
fn containers() -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=shoal.node={NODE}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        for id in containers() {
            let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        }
    }
}

/// `shoal endpoints dweb -o json`: replica -> http port of the serving replicas.
fn serving_ports(c: &Cluster) -> BTreeMap<u64, u16> {
    let out = c.cli(0, &["endpoints", "dweb", "-o", "json"]);
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return BTreeMap::new();
    };
    json["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["serving"] == true)
        .filter_map(|e| Some((e["replica"].as_u64()?, e["ports"]["http"].as_u64()? as u16)))
        .collect()
}

fn docker_exec(id: &str, args: &[&str]) -> String {
    let out = Command::new("docker")
        .arg("exec")
        .arg(id)
        .args(args)
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn named_container_ports_are_allocated_and_containers_resolve_through_the_agent() {
    if !docker_ready() {
        return;
    }
    let _cleanup = Cleanup;
    drop(Cleanup); // containers a killed earlier run left
    let gateway = bridge_gateway();
    let mut c = Cluster::new();
    let ip = IpAddr::from([127, 0, 0, 32]);
    let at = |p: SocketAddr| SocketAddr::new(ip, p.port());
    let low = 62_000 + (std::process::id() % 100) as u16 * 20;
    let range = format!("{low}-{}", low + 9);
    let dns = SocketAddr::new(gateway, 53);
    c.agent_args = vec![
        "--runtime".into(),
        "docker".into(),
        "--dns".into(),
        dns.to_string(),
        "--port-range".into(),
        range,
    ];
    c.add_at(NODE, at(free_port()), at(free_port()), None);
    c.wait_members(1, Duration::from_secs(20));
    let spec = c.dir.path().join("dweb.toml");
    let text = "name = \"dweb\"\nreplicas = 2\n[container]\nimage = \"shoal-busybox:latest\"\npull = \"if-not-present\"\n\
        command = [\"sh\", \"-c\", \"mkdir -p /tmp/www && echo ok > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www\"]\n\
        ports = [{ name = \"http\", container = 8080 }]\n\
        [resources]\ncpu = \"100m\"\nmemory = \"32Mi\"\n\
        [health]\nhttp = { port = \"http\", path = \"/\" }\ninterval = \"300ms\"\ntimeout = \"300ms\"\n";
    std::fs::write(&spec, text).unwrap();
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
    let mut ports = BTreeMap::new();
    let up = wait_until(Duration::from_secs(60), || {
        ports = serving_ports(&c);
        ports.len() == 2
    });
    assert!(up, "2 containers healthy on named ports\n{}", c.logs());
    let mut distinct: Vec<u16> = ports.values().copied().collect();
    distinct.dedup();
    assert_eq!(distinct.len(), 2, "distinct host ports: {ports:?}");
    assert!(
        ports.values().all(|p| (low..low + 10).contains(p)),
        "{ports:?}"
    );

    // Published on the agent's address (127.0.0.32), not on every interface, and reached there.
    for id in containers() {
        let out = Command::new("docker")
            .args([
                "inspect",
                "--format",
                "{{range $p, $b := .HostConfig.PortBindings}}{{range $b}}{{.HostIp}} {{end}}{{end}}",
                &id,
            ])
            .output()
            .unwrap();
        let host_ips = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(host_ips, ip.to_string(), "HostIp of {id}");
    }
    for port in ports.values() {
        let reached = std::net::TcpStream::connect_timeout(
            &SocketAddr::new(ip, *port),
            Duration::from_secs(2),
        );
        assert!(reached.is_ok(), "{ip}:{port}: {reached:?}");
    }

    // SRV over the agent's DNS on the bridge.
    let dig = Command::new("dig")
        .args([
            &format!("@{gateway}"),
            "+short",
            "SRV",
            "_http._tcp.dweb.shoal",
        ])
        .output()
        .expect("dig");
    let srv = String::from_utf8_lossy(&dig.stdout).to_string();
    for port in ports.values() {
        assert!(srv.contains(&format!(" {port} ")), "{port} in {srv}");
    }

    // A container resolves through its agent: the resolver and the search domain it was given.
    let id = containers().into_iter().next().expect("a container");
    let resolv = docker_exec(&id, &["cat", "/etc/resolv.conf"]);
    assert!(
        resolv.contains(&format!("nameserver {gateway}")) && resolv.contains("search shoal"),
        "{resolv}"
    );
    let looked_up = docker_exec(&id, &["/bin/busybox", "nslookup", "dweb.shoal"]);
    assert!(looked_up.contains(&ip.to_string()), "{looked_up}");
    let env = docker_exec(&id, &["env"]);
    assert!(
        env.contains("SHOAL_PORT_HTTP=") && env.contains(&format!("SHOAL_ADDR={ip}")),
        "{env}"
    );
    println!(
        "{}",
        serde_json::json!({"test": "named_container_ports", "ports": ports, "dns": dns.to_string()})
    );
}
