//! Real `shoal agent` processes on loopback for the benches: one agent's command, a mesh of them
//! in a temp dir that stops them (and what outlives them) when dropped, and the CLI against them.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shoal::identity::pki::{self, IssueOptions, Role};

use super::addrs::{free_tcp_addrs, free_udp_addrs};
use super::client::BenchClient;

/// `shoal agent` as the benches start it: `name` on `gossip` and `api`, its data in `data_dir`,
/// its certificates in `pki`, 4 cores and 8 GiB, stdin and stdout closed, stderr to `log`,
/// `RUST_LOG=warn,shoal=info`. Callers add their own flags (`--seed`, `--runtime`, ...).
pub fn agent_command(
    shoal: &Path,
    name: &str,
    gossip: SocketAddr,
    api: SocketAddr,
    data_dir: &Path,
    pki: &Path,
    log: File,
) -> Command {
    let mut cmd = Command::new(shoal);
    cmd.args(["agent", "--name", name])
        .args(["--gossip", &gossip.to_string(), "--api", &api.to_string()])
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--pki")
        .arg(pki)
        .args(["--cpu", "4", "--memory", "8Gi"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .env("RUST_LOG", "warn,shoal=info");
    cmd
}

/// The `shoal` CLI against the agent at `api`, with the certificates in `pki`.
pub fn cli(shoal: &Path, api: SocketAddr, pki: &Path) -> Command {
    let mut cmd = Command::new(shoal);
    cmd.env("SHOAL_AGENT", api.to_string())
        .env("SHOAL_PKI", pki);
    cmd
}

/// `shoal pki init --dir DIR`: a fresh CA.
pub fn pki_init(shoal: &Path, dir: &Path) -> anyhow::Result<()> {
    let out = Command::new(shoal)
        .args(["pki", "init", "--dir"])
        .arg(dir)
        .output()?;
    if !out.status.success() {
        bail!("shoal pki init: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The last 20 lines of a log file, as a suffix for an error.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(20)..];
    let name = log.file_name().unwrap_or_default().to_string_lossy();
    format!("; last lines of {name}:\n{}", tail.join("\n"))
}

/// Where an agent's certificate comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Certificates {
    /// `shoal pki init`, then every agent issues its own (`SHOAL_SELF_ISSUE=true`).
    SelfIssued,
    /// The bench issues every agent's node certificate from the CA it makes.
    Issued,
}

/// How to start a [`LocalMesh`].
pub struct MeshBuilder<'a> {
    shoal: &'a Path,
    agents: usize,
    prefix: &'a str,
    certificates: Certificates,
    name: fn(usize) -> String,
    cell: Option<&'a dyn Fn(usize) -> Option<String>>,
    metrics: bool,
    kill_patterns: Vec<String>,
}

impl<'a> MeshBuilder<'a> {
    /// `agents` agents of the binary `shoal`, named `n1`, `n2`, ..., in a temp dir whose name
    /// starts with `prefix`, with self-issued certificates; every agent but the first joins
    /// through the first.
    pub fn new(shoal: &'a Path, agents: usize, prefix: &'a str) -> MeshBuilder<'a> {
        MeshBuilder {
            shoal,
            agents,
            prefix,
            certificates: Certificates::SelfIssued,
            name: |i| format!("n{}", i + 1),
            cell: None,
            metrics: false,
            kill_patterns: Vec::new(),
        }
    }

    /// Where the certificates come from.
    pub fn certificates(mut self, certificates: Certificates) -> Self {
        self.certificates = certificates;
        self
    }

    /// Agent `i`'s name.
    pub fn names(mut self, name: fn(usize) -> String) -> Self {
        self.name = name;
        self
    }

    /// Agent `i`'s `--cell` (none: no flag).
    pub fn cells(mut self, cell: &'a dyn Fn(usize) -> Option<String>) -> Self {
        self.cell = Some(cell);
        self
    }

    /// Serves every agent's `/metrics` on a free loopback port.
    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// Also kills the processes `pkill -f PATTERN` finds when the mesh is dropped (instances
    /// outlive their agents).
    pub fn kill_at_drop(mut self, pattern: String) -> Self {
        self.kill_patterns.push(pattern);
        self
    }

    /// Starts the agents (it does not wait for them to form a mesh).
    pub fn start(self) -> anyhow::Result<LocalMesh> {
        let n = self.agents;
        let dir = tempfile::Builder::new().prefix(self.prefix).tempdir()?;
        let mut mesh = LocalMesh {
            dir,
            agents: Vec::new(),
            shoal: self.shoal.to_path_buf(),
            kill_patterns: self.kill_patterns,
        };
        let pki = mesh.pki();
        match self.certificates {
            Certificates::SelfIssued => pki_init(self.shoal, &pki)?,
            Certificates::Issued => pki::init(&pki)?,
        }
        let udp = free_udp_addrs(2 * n)?;
        let tcp = if self.metrics {
            free_tcp_addrs(n)?
        } else {
            Vec::new()
        };
        for i in 0..n {
            let name = (self.name)(i);
            if self.certificates == Certificates::Issued {
                pki::issue(&pki, &name, &IssueOptions::new(Role::Node))?;
            }
            let (gossip, api, metrics) = (udp[2 * i], udp[2 * i + 1], tcp.get(i).copied());
            let data_dir = mesh.dir.path().join(format!("data-{name}"));
            let log = File::create(mesh.dir.path().join(format!("{name}.log")))?;
            let mut cmd = agent_command(self.shoal, &name, gossip, api, &data_dir, &pki, log);
            if self.certificates == Certificates::SelfIssued {
                cmd.env("SHOAL_SELF_ISSUE", "true");
            }
            if let Some(metrics) = metrics {
                cmd.args(["--metrics", &metrics.to_string()]);
            }
            if i > 0 {
                cmd.args(["--seed", &udp[0].to_string()]);
            }
            if let Some(cell) = self.cell.and_then(|cell| cell(i)) {
                cmd.args(["--cell", &cell]);
            }
            let child = cmd.spawn().context("starting an agent")?;
            mesh.agents.push(MeshAgent {
                name,
                api,
                metrics,
                child: Some(child),
            });
        }
        Ok(mesh)
    }
}

/// One agent of a [`LocalMesh`].
pub struct MeshAgent {
    /// Its node name.
    pub name: String,
    /// Its API address.
    pub api: SocketAddr,
    /// Its `/metrics` address, if served.
    pub metrics: Option<SocketAddr>,
    /// Its process (`None` once killed).
    pub child: Option<Child>,
}

/// Agent processes in a temp dir (CA in `pki/`, agent NAME's data in `data-NAME/`, its log in
/// `NAME.log`); dropping it kills them, and every process whose command line names the dir (the
/// agents' guards, which outlive a killed agent) or matches a pattern given to the builder.
pub struct LocalMesh {
    /// The temp dir.
    pub dir: tempfile::TempDir,
    /// The agents, in the builder's order.
    pub agents: Vec<MeshAgent>,
    shoal: PathBuf,
    kill_patterns: Vec<String>,
}

impl LocalMesh {
    /// The mesh's CA (and the self-issued certificates).
    pub fn pki(&self) -> PathBuf {
        self.dir.path().join("pki")
    }

    /// Agent `i`'s API address.
    pub fn api(&self, i: usize) -> SocketAddr {
        self.agents[i].api
    }

    /// The last lines of agent `i`'s log, as a suffix for an error.
    pub fn log_tail(&self, i: usize) -> String {
        log_tail(&self.dir.path().join(format!("{}.log", self.agents[i].name)))
    }

    /// The `shoal` CLI against agent `via`.
    pub fn cli(&self, via: usize) -> Command {
        cli(&self.shoal, self.api(via), &self.pki())
    }

    /// Waits until every agent holds every agent alive, asking each in turn every `poll`.
    pub async fn wait_members(
        &self,
        client: &BenchClient,
        timeout: Duration,
        poll: Duration,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let mut seen = Vec::new();
            for agent in &self.agents {
                seen.push(match client.alive(agent.api).await {
                    Ok(alive) => alive.len().to_string(),
                    Err(e) => format!("{e:#}"),
                });
            }
            let everyone = self.agents.len().to_string();
            if seen.iter().all(|s| *s == everyone) {
                return Ok(());
            }
            if start.elapsed() > timeout {
                bail!(
                    "the mesh did not form within {timeout:?}; members seen: {seen:?}{}",
                    self.log_tail(0)
                );
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// SIGKILLs agent `i` (its instances run on); returns the time of the kill.
    pub fn kill(&mut self, i: usize) -> Instant {
        let mut child = self.agents[i].child.take().expect("the agent is running");
        let killed_at = Instant::now();
        let _ = child.kill();
        let _ = child.wait();
        killed_at
    }
}

impl Drop for LocalMesh {
    fn drop(&mut self) {
        for agent in &mut self.agents {
            if let Some(child) = agent.child.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let dir = self.dir.path().display().to_string();
        for pattern in self.kill_patterns.iter().chain([&dir]) {
            let _ = Command::new("pkill").args(["-9", "-f", pattern]).status();
        }
    }
}
