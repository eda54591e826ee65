//! `shoal demo`: five agents on loopback, a six-replica HTTP service, one host killed, the mesh
//! healing itself, every replica answering HTTP, and everything cleaned up.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shoal::wire::api::{Request, Response, StatusView, PAGE_ITEMS_MAX};
use shoal_core::hlc::format_version;
use shoal_core::spec::format_duration_ms;

use super::connect::{call_async, ClientOpts};

/// Agents the demo starts.
const AGENTS: usize = 5;
/// Replicas of the demo service.
const REPLICAS: u32 = 6;
/// Ports in each agent's `--port-range`.
const PORTS_PER_AGENT: u32 = 20;
/// Longest wait for any one stage.
const STAGE_TIMEOUT: Duration = Duration::from_secs(30);

/// Arguments of `shoal demo`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal demo\n  shoal demo --keep   # leave the mesh running and print how to reach it"
)]
pub struct Args {
    /// Leave the mesh running at the end and print how to talk to it.
    #[arg(long)]
    keep: bool,
    /// First port of the agents' port ranges: agent nN hands its replicas the named port
    /// `http` from PORT + 20 (N - 1) to PORT + 20 N - 1 (`--port-range`; its own slice, as each
    /// host would have its own IP).
    #[arg(long, default_value_t = 18100)]
    port: u16,
}

struct Demo {
    dir: PathBuf,
    agents: Vec<(String, SocketAddr, SocketAddr, Option<Child>)>,
    keep: bool,
}

impl Drop for Demo {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        for (_, _, _, child) in &mut self.agents {
            if let Some(child) = child.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // Instances run in their own process groups and outlive their agents: every one of them
        // has the demo directory on its command line.
        let _ = Command::new("pkill")
            .args(["-9", "-f", &self.dir.display().to_string()])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` distinct free UDP ports on loopback for the agents' gossip and API, every one held until
/// all are chosen, then released. They come from below the kernel's ephemeral range: a port bound
/// at 0 and released comes from that range, where the agents' own outgoing QUIC endpoints take
/// theirs too, so it could be taken again before the agent given it binds it (one CI run saw n3's
/// gossip port handed to n5's API). The replicas' ranges (`avoid`) are skipped; the search starts
/// at an offset taken from the pid so that two demos rarely probe the same ports.
fn free_udp_ports(n: usize, avoid: std::ops::Range<u32>) -> anyhow::Result<Vec<SocketAddr>> {
    const LOW: u32 = 20_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(LOW);
    let mut held = Vec::with_capacity(n);
    if span > 0 {
        let offset = std::process::id().wrapping_mul(2_654_435_761) % span;
        for k in 0..span {
            let port = LOW + (offset + k) % span;
            if avoid.contains(&port) {
                continue;
            }
            if let Ok(socket) = std::net::UdpSocket::bind(("127.0.0.1", port as u16)) {
                held.push(socket);
                if held.len() == n {
                    break;
                }
            }
        }
    }
    // A kernel whose ephemeral range starts low leaves no room below it: take the rest from it.
    while held.len() < n {
        held.push(std::net::UdpSocket::bind("127.0.0.1:0")?);
    }
    Ok(held
        .iter()
        .map(|s| s.local_addr())
        .collect::<std::io::Result<_>>()?)
}

fn step(text: &str) {
    println!("\n== {text}");
}

/// Runs the demo; Ctrl-C at any point cleans up and exits 130.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let dir = std::env::temp_dir().join(format!("shoal-demo-{}", std::process::id()));
        let mut demo = Demo {
            dir,
            agents: Vec::new(),
            keep: false,
        };
        tokio::select! {
            result = run_demo(&mut demo, &args) => result,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("\ninterrupted: stopping the agents and removing {}", demo.dir.display());
                Ok(ExitCode::from(130))
            }
        }
    })
}

fn client(demo: &Demo, agent: usize) -> ClientOpts {
    ClientOpts {
        agent: demo.agents[agent].2.into(),
        pki: demo.dir.join("pki"),
        client_name: None,
        self_issue: false,
        timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
    }
}

async fn run_demo(demo: &mut Demo, args: &Args) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(demo.dir.join("www")).context("creating the demo directory")?;
    std::fs::write(
        demo.dir.join("www/index.html"),
        "hello from a shoal replica\n",
    )?;
    // The demo's agents issue their node certificates from the CA key (a sandbox); the CLI
    // gets its client certificate here, so that `shoal` commands against the demo find it.
    shoal::identity::pki::init(&demo.dir.join("pki"))?;
    let client_role = shoal::identity::pki::IssueOptions::new(shoal::identity::pki::Role::Client);
    shoal::identity::pki::issue(&demo.dir.join("pki"), "shoal-cli", &client_role)?;
    step(&format!(
        "starting {AGENTS} agents on loopback (process runtime, data under {})",
        demo.dir.display()
    ));
    let exe = std::env::current_exe().context("finding the shoal binary")?;
    let replicas = u32::from(args.port)..u32::from(args.port) + PORTS_PER_AGENT * AGENTS as u32;
    let ports = free_udp_ports(2 * AGENTS, replicas)?;
    for i in 0..AGENTS {
        let name = format!("n{}", i + 1);
        let low = u32::from(args.port) + PORTS_PER_AGENT * i as u32;
        let high = low + PORTS_PER_AGENT - 1;
        if high > u32::from(u16::MAX) {
            bail!(
                "--port {} leaves no room for {AGENTS} port ranges of {PORTS_PER_AGENT}",
                args.port
            );
        }
        let (gossip, api) = (ports[2 * i], ports[2 * i + 1]);
        let mut cmd = Command::new(&exe);
        cmd.args([
            "agent",
            "--name",
            &name,
            "--gossip",
            &gossip.to_string(),
            "--api",
            &api.to_string(),
        ])
        .arg("--data-dir")
        .arg(demo.dir.join(&name))
        .arg("--pki")
        .arg(demo.dir.join("pki"))
        .arg("--self-issue")
        .args(["--port-range", &format!("{low}-{high}")])
        .args([
            "--cpu",
            "2",
            "--memory",
            "2Gi",
            "--zone",
            if i % 2 == 0 { "zone-a" } else { "zone-b" },
        ]);
        if let Some((_, seed, _, _)) = demo.agents.first() {
            cmd.args(["--seed", &seed.to_string()]);
        }
        let log = std::fs::File::create(demo.dir.join(format!("{name}.log")))?;
        cmd.stdout(Stdio::null())
            .stderr(log)
            .env("RUST_LOG", "warn,shoal=info");
        let child = cmd.spawn().context("starting an agent")?;
        println!("   {name}: gossip {gossip}, api {api}");
        demo.agents.push((name, gossip, api, Some(child)));
    }
    let started = Instant::now();
    wait_for(
        STAGE_TIMEOUT,
        "every agent to see 5 live members",
        || async {
            let mut all = true;
            for i in 0..AGENTS {
                let alive = match call_async(&client(demo, i), nodes_request()).await {
                    Ok(Response::Nodes { nodes, .. }) => nodes.iter().filter(|n| n.alive).count(),
                    _ => 0,
                };
                all &= alive == AGENTS;
            }
            all
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; {}", exited_agents(demo)))?;
    println!("   mesh formed in {:.1} s", started.elapsed().as_secs_f64());

    step(&format!("applying `web`: {REPLICAS} replicas of python3 -m http.server, each on the port its agent allocated ($SHOAL_PORT_HTTP), with a health check over HTTP on that port"));
    let spec = web_spec(&demo.dir)?;
    let applied = call_async(&client(demo, 0), Request::Apply { specs: vec![spec] }).await?;
    if let Response::Applied(a) = applied {
        println!(
            "   stored as version {} (durable on {})",
            format_version(&a[0].version),
            a[0].durable_on.join(", ")
        );
    }
    let t = Instant::now();
    let status = wait_healthy(demo, 0, None).await?;
    println!(
        "   all {REPLICAS} replicas healthy {:.1} s after apply:",
        t.elapsed().as_secs_f64()
    );
    print_placement(&status);

    let victim = victim_of(&status).context("no replica on n2..n5")?;
    step(&format!(
        "killing agent {} and its instances (kill -9: a host dies)",
        demo.agents[victim].0
    ));
    let killed_at = Instant::now();
    kill_host(demo, victim);
    let dead_name = demo.agents[victim].0.clone();
    let detect = wait_for(
        STAGE_TIMEOUT,
        "the mesh to declare the host dead",
        || async {
            matches!(call_async(&client(demo, 0), nodes_request()).await,
            Ok(Response::Nodes { nodes, .. }) if nodes.iter().any(|n| n.name == dead_name && !n.alive))
        },
    )
    .await?;
    println!(
        "   {dead_name} declared dead after {:.2} s",
        detect.as_secs_f64()
    );
    let status = wait_healthy(demo, 0, Some(&dead_name)).await?;
    let healed = killed_at.elapsed();
    println!(
        "   every replica healthy on the live nodes {:.2} s after the kill:",
        healed.as_secs_f64()
    );
    print_placement(&status);

    step("checking that every replica answers HTTP");
    for replica in 0..REPLICAS {
        let (node, addr) = answer_http(demo, replica).await?;
        println!("   replica {replica} on {node}: http://{addr}/ answered 200");
    }
    step(&format!(
        "healed: host death detected in {:.2} s, replicas back in {:.2} s",
        detect.as_secs_f64(),
        healed.as_secs_f64()
    ));
    if args.keep {
        demo.keep = true;
        let live = if victim == 0 { 1 } else { 0 };
        println!("\nThe mesh keeps running. Talk to it with:\n  export SHOAL_AGENT={} SHOAL_PKI={}\n  shoal nodes; shoal status web; shoal events\nStop it with: pkill -f {}", demo.agents[live].2, demo.dir.join("pki").display(), demo.dir.display());
    } else {
        println!("\ncleaning up (agents, instances, {})", demo.dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn web_spec(dir: &Path) -> anyhow::Result<shoal_core::spec::WorkloadSpec> {
    let www = dir.join("www");
    let text = format!(
        r#"name = "web"
replicas = {REPLICAS}
[process]
command = ["sh", "-c", "exec python3 -m http.server $SHOAL_PORT_HTTP --bind $SHOAL_ADDR --directory {www}"]
ports = [{{ name = "http" }}]
[resources]
cpu = "200m"
memory = "64Mi"
[health]
http = {{ port = "http", path = "/" }}
interval = "3s"
timeout = "3s"
failure_threshold = 3
start_grace = "20s"
[restart]
backoff_initial = "1s"
"#,
        www = www.display()
    );
    shoal_core::spec::WorkloadSpec::from_toml_str(&text, "demo-web.toml")
        .map_err(|e| anyhow::anyhow!("{e}"))
}

async fn wait_for<F, Fut>(within: Duration, what: &str, mut check: F) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < within {
        if check().await {
            return Ok(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let within = format_duration_ms(within.as_millis() as u64);
    bail!("gave up after {within} waiting for {what}; the agents' logs are in the demo directory")
}

/// Which agents have exited and the last line of each one's log, for an error that says why the
/// mesh did not form (an agent that could not bind its port exits at once).
fn exited_agents(demo: &mut Demo) -> String {
    let mut exited = Vec::new();
    for (name, _, _, child) in &mut demo.agents {
        if let Some(Ok(Some(status))) = child.as_mut().map(|c| c.try_wait()) {
            let log =
                std::fs::read_to_string(demo.dir.join(format!("{name}.log"))).unwrap_or_default();
            let last = log.lines().last().unwrap_or("(empty log)").to_string();
            exited.push(format!("{name} exited ({status}): {last}"));
        }
    }
    if exited.is_empty() {
        "every agent is still running".into()
    } else {
        exited.join("; ")
    }
}

/// The members, in one page: the demo's five fit.
fn nodes_request() -> Request {
    Request::Nodes {
        after: None,
        limit: PAGE_ITEMS_MAX,
    }
}

/// The status of `web`, in one page: its replicas fit.
fn status_request() -> Request {
    Request::Status {
        name: "web".into(),
        after: None,
        limit: PAGE_ITEMS_MAX,
    }
}

/// Waits until every replica has a running, healthy instance on a live node other than `off`.
async fn wait_healthy(demo: &Demo, agent: usize, off: Option<&str>) -> anyhow::Result<StatusView> {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < STAGE_TIMEOUT {
        if let Ok(Response::Status { view: status, .. }) =
            call_async(&client(demo, agent), status_request()).await
        {
            let ok = (0..REPLICAS).all(|r| {
                status.instances.iter().any(|i| {
                    i.replica == r
                        && i.phase == "running"
                        && i.healthy == Some(true)
                        && i.node.as_deref() != off
                })
            });
            if ok {
                return Ok(*status);
            }
            last = Some(*status);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "the mesh did not heal: not every replica was healthy within {}; last status: {}; \
         the agents' logs are in the demo directory",
        format_duration_ms(STAGE_TIMEOUT.as_millis() as u64),
        describe(last.as_ref())
    )
}

/// A status in one line: each instance's replica, node, phase, health and reason.
fn describe(status: Option<&StatusView>) -> String {
    let Some(status) = status else {
        return "no answer from the agent".to_string();
    };
    let instances: Vec<String> = status
        .instances
        .iter()
        .map(|i| {
            let health = match i.healthy {
                Some(true) => ", healthy",
                Some(false) => ", unhealthy",
                None => "",
            };
            let why = i.reason.as_deref().or(i.last_error.as_deref());
            format!(
                "replica {} on {}: {}{health}{}",
                i.replica,
                i.node.as_deref().unwrap_or("no node"),
                i.phase,
                why.map(|w| format!(" ({w})")).unwrap_or_default()
            )
        })
        .collect();
    if instances.is_empty() {
        return "no instances".to_string();
    }
    instances.join("; ")
}

fn print_placement(status: &StatusView) {
    for i in status
        .instances
        .iter()
        .filter(|i| i.phase == "running" && i.healthy == Some(true))
    {
        println!(
            "     replica {} on {}",
            i.replica,
            i.node.as_deref().unwrap_or("-")
        );
    }
}

fn victim_of(status: &StatusView) -> Option<usize> {
    (2..=AGENTS).find_map(|n| {
        let name = format!("n{n}");
        status
            .instances
            .iter()
            .any(|i| i.node.as_deref() == Some(name.as_str()))
            .then_some(n - 1)
    })
}

fn kill_host(demo: &mut Demo, victim: usize) {
    if let Some(mut child) = demo.agents[victim].3.take() {
        let pid = child.id();
        let children = Command::new("pgrep")
            .args(["-P", &pid.to_string()])
            .output();
        let _ = child.kill();
        let _ = child.wait();
        if let Ok(out) = children {
            for pid in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = Command::new("kill").args(["-9", pid.trim()]).status();
            }
        }
    }
}

/// GETs `/` from the copy of `replica` its owner runs (not an old copy being handed off), at the
/// address and `http` port `shoal endpoints` gives, retrying for a few seconds while a handoff
/// finishes.
async fn answer_http(demo: &Demo, replica: u32) -> anyhow::Result<(String, SocketAddr)> {
    let mut last_error = anyhow::anyhow!("no healthy copy of replica {replica} in status");
    for _ in 0..20 {
        if let Ok(Response::Status { view: status, .. }) =
            call_async(&client(demo, 0), status_request()).await
        {
            let owner = status.instances.iter().find(|i| {
                i.replica == replica
                    && i.phase == "running"
                    && i.healthy == Some(true)
                    && i.reason.is_none()
            });
            let endpoints =
                call_async(&client(demo, 0), Request::Endpoints { name: "web".into() }).await;
            let target = match (owner.and_then(|i| i.node.clone()), endpoints) {
                (Some(node), Ok(Response::Endpoints(w))) => w
                    .endpoints
                    .iter()
                    .find(|e| e.replica == replica && e.node == node && e.serving)
                    .and_then(|e| Some((node, SocketAddr::new(e.addr?, *e.ports.get("http")?)))),
                _ => None,
            };
            if let Some((node, addr)) = target {
                match http_get(addr).await {
                    Ok(()) => return Ok((node, addr)),
                    Err(e) => {
                        last_error =
                            e.context(format!("replica {replica} at {addr} does not answer"))
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(last_error)
}

async fn http_get(addr: SocketAddr) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await??;
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut head = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut head)).await??;
    let line = String::from_utf8_lossy(&head[..n]);
    if !line.starts_with("HTTP/1.0 200") && !line.starts_with("HTTP/1.1 200") {
        bail!("answered {:?}", line.lines().next().unwrap_or(""));
    }
    Ok(())
}
