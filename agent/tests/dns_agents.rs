//! DNS on real agents, asked by a real resolver (`dig`, Debian's dnsutils): three agents on
//! three loopback addresses, each answering `--dns`; a workload of 3 replicas; A answers for
//! NAME and REPLICA.NAME, NXDOMAIN, REFUSED, TCP; a replica failing its probe leaves every
//! agent's answers and comes back once healthy; then the agent running one replica is killed
//! and every surviving agent stops answering its address. The times are printed as JSON lines.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, stderr, wait_until, Cluster};

/// What `dig` said: the status and the answer section's data, in order.
#[derive(Debug)]
struct Dug {
    status: String,
    answers: Vec<String>,
}

fn dig(server: SocketAddr, name: &str, extra: &[&str]) -> Dug {
    let out = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string()])
        .args(["+time=1", "+tries=1", "+noall", "+comments", "+answer"])
        .args(extra)
        .arg(name)
        .output()
        .expect("dig is installed (apt-get install dnsutils; .ci/run does)");
    let text = String::from_utf8_lossy(&out.stdout);
    let status = text
        .split("status: ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or("NO ANSWER")
        .to_string();
    let answers = text
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect();
    Dug { status, answers }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn spec(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("web.toml");
    let text = "name = \"web\"\nreplicas = 3\n[process]\ncommand = [\"sleep\", \"86417\"]\n\
                [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";
    std::fs::write(&path, text).unwrap();
    path
}

/// `shoal endpoints web -o json` from agent `i`: (replica, node, address) of the serving ones.
fn serving(c: &Cluster, i: usize) -> Vec<(u64, String, String)> {
    let out = c.cli(i, &["endpoints", "web", "-o", "json"]);
    if !out.status.success() {
        return Vec::new();
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    json["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .filter(|e| e["serving"] == true)
        .map(|e| {
            (
                e["replica"].as_u64().unwrap(),
                e["node"].as_str().unwrap().to_string(),
                e["addr"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn dig_finds_replicas_and_loses_a_killed_host() {
    let mut c = Cluster::new();
    c.cleanup.push("sleep 86417".to_string());
    let mut dns = Vec::new();
    for i in 0..3u8 {
        let ip = IpAddr::from([127, 0, 0, 21 + i]);
        let at = |p: SocketAddr| SocketAddr::new(ip, p.port());
        let (gossip, api, server) = (at(free_port()), at(free_port()), at(free_port()));
        c.agent_args = vec!["--dns".into(), server.to_string()];
        c.add_at(&format!("n{}", i + 1), gossip, api, None);
        dns.push(server);
    }
    c.wait_members(3, Duration::from_secs(20));
    let out = c.cli(0, &["apply", "-f", spec(c.dir.path()).to_str().unwrap()]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
    let all_serving = wait_until(Duration::from_secs(20), || {
        (0..3).all(|i| serving(&c, i).len() == 3)
    });
    assert!(
        all_serving,
        "3 replicas serving on every agent\n{}",
        c.logs()
    );
    let endpoints = serving(&c, 0);

    // NAME: the hosts of the serving replicas, from every agent.
    let hosts: Vec<String> = {
        let mut h: Vec<String> = endpoints.iter().map(|e| e.2.clone()).collect();
        h.sort();
        h.dedup();
        h
    };
    for server in &dns {
        let dug = dig(*server, "web.shoal", &[]);
        assert_eq!(dug.status, "NOERROR", "{server}");
        assert_eq!(sorted(dug.answers), hosts, "{server}");
        // The same over TCP.
        let dug = dig(*server, "web.shoal", &["+tcp"]);
        assert_eq!(sorted(dug.answers), hosts, "{server} over TCP");
    }
    // REPLICA.NAME: that replica's host.
    for (replica, _, addr) in &endpoints {
        let dug = dig(dns[0], &format!("{replica}.web.shoal"), &[]);
        assert_eq!(dug.answers, std::slice::from_ref(addr), "replica {replica}");
    }
    assert_eq!(dig(dns[1], "nope.shoal", &[]).status, "NXDOMAIN");
    assert_eq!(dig(dns[1], "7.web.shoal", &[]).status, "NXDOMAIN");
    assert_eq!(dig(dns[2], "example.com", &[]).status, "REFUSED");

    // A replica that fails its probe leaves every agent's answers; healthy again, it returns.
    let marker = c.dir.path().join("flaky-down");
    let flaky = c.dir.path().join("flaky.toml");
    let text = format!(
        "name = \"flaky\"\nreplicas = 1\n[process]\ncommand = [\"sleep\", \"86417\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\
         [health]\nexec = {{ command = [\"sh\", \"-c\", \"test ! -e {}\"] }}\n\
         interval = \"200ms\"\ntimeout = \"200ms\"\nfailure_threshold = 1\nstart_grace = \"0s\"\n\
         [restart]\nbackoff_initial = \"200ms\"\nbackoff_max = \"500ms\"\n",
        marker.display()
    );
    std::fs::write(&flaky, text).unwrap();
    let out = c.cli(0, &["apply", "-f", flaky.to_str().unwrap()]);
    assert!(out.status.success(), "apply flaky: {}", stderr(&out));
    let answers_everywhere = |n: usize| {
        dns.iter().all(|s| {
            let dug = dig(*s, "flaky.shoal", &[]);
            dug.status == "NOERROR" && dug.answers.len() == n
        })
    };
    assert!(
        wait_until(Duration::from_secs(20), || answers_everywhere(1)),
        "flaky answered by every agent\n{}",
        c.logs()
    );
    std::fs::write(&marker, "").unwrap();
    let failed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || answers_everywhere(0)),
        "an unhealthy replica left the answers"
    );
    let left_ms = failed.elapsed().as_millis() as u64;
    std::fs::remove_file(&marker).unwrap();
    let healed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(20), || answers_everywhere(1)),
        "a healthy replica came back to the answers\n{}",
        c.logs()
    );
    println!(
        "{}",
        serde_json::json!({
            "test": "dns_follows_health",
            "unhealthy_left_all_ms": left_ms,
            "healthy_back_all_ms": healed.elapsed().as_millis() as u64,
        })
    );

    // Kill the agent of replica 0 (instances outlive their agent: the host is what is gone
    // from the mesh's point of view).
    let (_, victim_node, victim_addr) = endpoints
        .iter()
        .find(|e| e.0 == 0)
        .cloned()
        .expect("replica 0");
    let victim: usize = victim_node[1..].parse::<usize>().unwrap() - 1;
    let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
    let killed = Instant::now();
    c.kill(victim);
    let mut gone_ms = vec![None; 3];
    let all_gone = wait_until(Duration::from_secs(20), || {
        for &i in &survivors {
            if gone_ms[i].is_none()
                && !dig(dns[i], "web.shoal", &[]).answers.contains(&victim_addr)
                && dig(dns[i], "0.web.shoal", &[]).answers != [victim_addr.clone()]
            {
                gone_ms[i] = Some(killed.elapsed().as_millis() as u64);
            }
        }
        survivors.iter().all(|&i| gone_ms[i].is_some())
    });
    assert!(
        all_gone,
        "{victim_addr} still answered: {gone_ms:?}\n{}",
        c.logs()
    );
    let worst = survivors.iter().filter_map(|&i| gone_ms[i]).max().unwrap();
    println!(
        "{}",
        serde_json::json!({
            "test": "dns_kill_host",
            "agents": 3,
            "replicas": 3,
            "killed": victim_node,
            "removed_ms_per_survivor": survivors.iter().map(|&i| gone_ms[i]).collect::<Vec<_>>(),
            "removed_ms_worst": worst,
        })
    );
    // The answers still come, without the dead host.
    for &i in &survivors {
        let dug = dig(dns[i], "web.shoal", &[]);
        assert_eq!(dug.status, "NOERROR");
        assert!(!dug.answers.contains(&victim_addr));
    }
}
