//! A cluster of real `shoal agent` processes on loopback (or each in a network namespace of its
//! own, `netns.rs`), for integration tests.
#![allow(dead_code)]

pub mod netns;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn shoal_bin() -> &'static str {
    env!("CARGO_BIN_EXE_shoal")
}

/// A free port on loopback, for TCP (see `free_port`).
pub fn free_tcp_addr() -> SocketAddr {
    free_port()
}

/// A free port on loopback, for UDP (see `free_port`).
pub fn free_addr() -> SocketAddr {
    free_port()
}

/// A port on loopback that is free for both UDP and TCP now, chosen below the kernel's ephemeral
/// range (32768-60999 on Linux). A port bound at 0 and released comes from that range, and the
/// agents' own outgoing QUIC endpoints take ports from it too, so such a port could be taken again
/// before the agent binds it (CI saw "Address already in use" that way). Ports here are handed out
/// once per test process, starting at an offset taken from the pid so concurrent processes rarely
/// probe the same ones.
pub fn free_port() -> SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id().wrapping_mul(2_654_435_761)) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        if UdpSocket::bind(addr).is_ok() && std::net::TcpListener::bind(addr).is_ok() {
            return addr;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW + SPAN);
}

/// One agent process and its addresses.
pub struct Agent {
    pub name: String,
    pub gossip: SocketAddr,
    pub api: SocketAddr,
    pub data_dir: PathBuf,
    pub child: Option<Child>,
    pub log: PathBuf,
    /// Where it serves /metrics, if asked to.
    pub metrics: Option<SocketAddr>,
    /// Where it serves the web UI, if asked to.
    pub ui: Option<SocketAddr>,
    /// The network namespace (a name under /run/netns) it and its CLI calls run in; None: this
    /// test's own.
    pub netns: Option<String>,
}

/// A test cluster: a temp dir with the PKI, data dirs and logs, and its agents.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub pki: PathBuf,
    pub agents: Vec<Agent>,
    /// Extra agent flags (e.g. `--runtime docker`).
    pub agent_args: Vec<String>,
    /// `pkill -f` patterns run when the cluster is dropped (instances outlive their agents).
    pub cleanup: Vec<String>,
}

impl Cluster {
    /// A new cluster with a fresh CA and no agents.
    pub fn new() -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        // Workloads run as the agents' workload user (nobody): they may pass through (not list)
        // the test's directory to reach what a test gives them.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .expect("temp dir mode");
        let pki = dir.path().join("pki");
        let out = run_cli(&["pki", "init", "--dir", pki.to_str().unwrap()], None);
        assert!(out.status.success(), "pki init failed: {}", stderr(&out));
        Cluster {
            dir,
            pki,
            agents: Vec::new(),
            agent_args: Vec::new(),
            cleanup: Vec::new(),
        }
    }

    /// Adds and starts agent `name`, seeded by the first agent if any.
    pub fn add(&mut self, name: &str) -> usize {
        self.add_at(name, free_addr(), free_addr(), None)
    }

    /// Adds and starts agent `name` with these addresses, in network namespace `netns` if any
    /// (its addresses must then be ones that namespace has), seeded by the first agent if any.
    pub fn add_at(
        &mut self,
        name: &str,
        gossip: SocketAddr,
        api: SocketAddr,
        netns: Option<String>,
    ) -> usize {
        let seed = self.agents.first().map(|a| a.gossip);
        let index = self.agents.len();
        let agent = Agent {
            name: name.to_string(),
            gossip,
            api,
            data_dir: self.dir.path().join(format!("data-{index}-{name}")),
            child: None,
            log: self.dir.path().join(format!("{index}-{name}.log")),
            metrics: None,
            ui: None,
            netns,
        };
        self.agents.push(agent);
        let i = self.agents.len() - 1;
        self.start(i, seed);
        i
    }

    /// (Re)starts agent `i`, optionally with a seed.
    pub fn start(&mut self, i: usize, seed: Option<SocketAddr>) {
        let pki = self.pki.clone();
        let a = &mut self.agents[i];
        let mut cmd = shoal_command(a.netns.as_deref());
        assert!(a.child.is_none(), "{} already running", a.name);
        cmd.args(["agent", "--name", &a.name])
            .args([
                "--gossip",
                &a.gossip.to_string(),
                "--api",
                &a.api.to_string(),
            ])
            .args(["--data-dir", a.data_dir.to_str().unwrap()])
            .args(["--pki", pki.to_str().unwrap()])
            .args(["--cpu", "4", "--memory", "8Gi"]);
        if let Some(seed) = seed {
            cmd.args(["--seed", &seed.to_string()]);
        }
        cmd.args(&self.agent_args);
        if let Some(metrics) = a.metrics {
            cmd.args(["--metrics", &metrics.to_string()]);
        }
        if let Some(ui) = a.ui {
            cmd.args(["--ui", &ui.to_string()]);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&a.log)
            .unwrap();
        cmd.stdout(Stdio::null())
            .stderr(log)
            .env("RUST_LOG", "info");
        a.child = Some(cmd.spawn().expect("spawn shoal agent"));
    }

    /// SIGKILLs agent `i` (no graceful leave).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.agents[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERMs agent `i` and waits for it to exit.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut child) = self.agents[i].child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            panic!("agent did not exit within 10 s of SIGTERM");
        }
    }

    /// Whether agent `i`'s process is still running.
    pub fn running(&mut self, i: usize) -> bool {
        match self.agents[i].child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The CLI's JSON output against agent `i` (`Null` when it printed none).
    pub fn cli_json(&self, i: usize, args: &[&str]) -> serde_json::Value {
        serde_json::from_slice(&self.cli(i, args).stdout).unwrap_or_default()
    }

    /// Replicas of `name` with a healthy running instance, as agent `i`'s status shows them.
    pub fn serving_replicas(&self, i: usize, name: &str) -> usize {
        let status = self.cli_json(i, &["status", name, "-o", "json"]);
        let replicas: std::collections::BTreeSet<u64> = status["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|inst| inst["phase"] == "running" && inst["healthy"] == true)
            .filter_map(|inst| inst["replica"].as_u64())
            .collect();
        replicas.len()
    }

    /// Runs the CLI against agent `i` (from its network namespace).
    pub fn cli(&self, i: usize, args: &[&str]) -> Output {
        let a = &self.agents[i];
        run_cli_in(a.netns.as_deref(), args, Some((a.api, &self.pki)))
    }

    /// `get -o json` on agent `i`: workload names, or None when the agent does not answer.
    pub fn workloads(&self, i: usize) -> Option<Vec<String>> {
        let out = self.cli(i, &["get", "-o", "json", "--timeout", "2s"]);
        if !out.status.success() {
            return None;
        }
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        Some(
            rows.as_array()?
                .iter()
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect(),
        )
    }

    /// `nodes -o json` on agent `i`: names of nodes it holds alive.
    pub fn alive_nodes(&self, i: usize) -> Option<Vec<String>> {
        let out = self.cli(i, &["nodes", "-o", "json", "--timeout", "2s"]);
        if !out.status.success() {
            return None;
        }
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        Some(
            rows.as_array()?
                .iter()
                .filter(|r| r["alive"].as_bool() == Some(true))
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect(),
        )
    }

    /// Every agent's log, for failure messages.
    pub fn logs(&self) -> String {
        (0..self.agents.len())
            .map(|i| format!("--- {} ---\n{}", self.agents[i].name, self.log(i)))
            .collect()
    }

    /// The log of agent `i`.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.agents[i].log).unwrap_or_default()
    }

    /// Waits until every running agent sees `n` live nodes.
    pub fn wait_members(&mut self, n: usize, within: Duration) {
        let running: Vec<usize> = (0..self.agents.len())
            .filter(|&i| self.running(i))
            .collect();
        let ok = wait_until(within, || {
            running
                .iter()
                .all(|&i| self.alive_nodes(i).is_some_and(|v| v.len() == n))
        });
        if !ok {
            let views: Vec<_> = running.iter().map(|&i| self.alive_nodes(i)).collect();
            panic!(
                "agents did not all see {n} live nodes within {within:?}: {views:?}\n{}",
                self.log(0)
            );
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.agents.len() {
            self.kill(i);
        }
        for pattern in &self.cleanup {
            let _ = Command::new("pkill").args(["-9", "-f", pattern]).status();
        }
    }
}

/// The binary under test, to run in network namespace `netns` if any: through `nsenter`, which
/// enters the namespace and then executes it (same pid: signals to the child reach the agent),
/// and unlike `ip netns exec` leaves the mounts alone (/sys/fs/cgroup stays visible).
/// The agents and the CLI of these tests issue their certificates from the test CA's key
/// (`--self-issue`, through its environment variable).
pub fn shoal_command(netns: Option<&str>) -> Command {
    let mut cmd = match netns {
        None => Command::new(shoal_bin()),
        Some(netns) => {
            let mut cmd = Command::new("nsenter");
            cmd.arg(format!("--net=/run/netns/{netns}"))
                .arg("--")
                .arg(shoal_bin());
            cmd
        }
    };
    cmd.env("SHOAL_SELF_ISSUE", "true");
    cmd
}

/// Runs the CLI with an optional (agent, pki).
pub fn run_cli(args: &[&str], target: Option<(SocketAddr, &Path)>) -> Output {
    run_cli_in(None, args, target)
}

/// Runs the CLI in network namespace `netns` (None: this one) with an optional (agent, pki).
pub fn run_cli_in(
    netns: Option<&str>,
    args: &[&str],
    target: Option<(SocketAddr, &Path)>,
) -> Output {
    let mut cmd = shoal_command(netns);
    cmd.args(args)
        .env_remove("SHOAL_AGENT")
        .env_remove("SHOAL_PKI");
    if let Some((api, pki)) = target {
        cmd.env("SHOAL_AGENT", api.to_string())
            .env("SHOAL_PKI", pki);
    }
    cmd.output().expect("run shoal")
}

/// Stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Polls `f` every 50 ms until it holds or `within` passes.
pub fn wait_until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes a spec file into `dir` and returns its path.
pub fn write_spec(dir: &Path, name: &str, replicas: u32) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = format!(
        "name = \"{name}\"\nreplicas = {replicas}\n[process]\ncommand = [\"sleep\", \"3600\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The lines `docker ARGS` prints on stdout (none when it fails).
pub fn docker(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Whether the docker tests run: false (and said) with `SHOAL_SKIP_DOCKER_TESTS=1`.
pub fn docker_allowed() -> bool {
    if std::env::var("SHOAL_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("SHOAL_SKIP_DOCKER_TESTS=1: docker test skipped");
        return false;
    }
    true
}

/// [`docker_allowed`], and the local `shoal-busybox:latest` image built (from Debian's
/// busybox-static) if the engine lacks it. Panics when the engine is unreachable: a docker
/// test that cannot run must say so, not pass.
pub fn docker_ready() -> bool {
    if !docker_allowed() {
        return false;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use shoal::node::runtime::docker::{ensure_busybox_image, DockerConfig, DockerRuntime};
        let rt = DockerRuntime::connect(DockerConfig::new("image-setup"))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "the Docker engine is unreachable ({e}); start it or set \
                     SHOAL_SKIP_DOCKER_TESTS=1"
                )
            });
        let docker = rt.docker().await.unwrap();
        ensure_busybox_image(&docker, "shoal-busybox", "latest")
            .await
            .expect("busybox image");
    });
    true
}

/// Runs `shoal ARGS` on a pseudo terminal of 30 x 100 that Python opens (the CLI's stdin,
/// stdout and stderr); for each step (WAIT, TYPE), once the terminal showed WAIT it types TYPE
/// (`RESIZE ROWS COLS` instead resizes the terminal and sends the CLI SIGWINCH, as a terminal
/// emulator does for its foreground program).
/// Returns what the terminal showed and the CLI's exit code.
pub fn on_a_terminal(
    c: &Cluster,
    i: usize,
    args: &[&str],
    steps: &[(&str, &str)],
) -> (String, i32) {
    const SCRIPT: &str = r#"
import fcntl, json, os, pty, signal, struct, subprocess, sys, termios, time
master, slave = pty.openpty()
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
p = subprocess.Popen(sys.argv[2:], stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
os.close(slave)
out = b""
def read():
    global out
    try:
        chunk = os.read(master, 4096)
    except OSError:
        return False
    out += chunk
    return bool(chunk)
for wait, typed in json.loads(sys.argv[1]):
    deadline = time.time() + 20
    while wait.encode() not in out and time.time() < deadline and read():
        pass
    if typed.startswith("RESIZE "):
        rows, cols = map(int, typed.split()[1:])
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        p.send_signal(signal.SIGWINCH)
    else:
        os.write(master, typed.encode())
while read():
    pass
sys.stdout.buffer.write(out)
sys.stdout.write("\nEXIT %d\n" % p.wait())
"#;
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            SCRIPT,
            &serde_json::to_string(steps).unwrap(),
            shoal_bin(),
        ])
        .args(args)
        .env("SHOAL_AGENT", c.agents[i].api.to_string())
        .env("SHOAL_PKI", &c.pki)
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let code = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("EXIT ")?.trim().parse().ok())
        .unwrap_or(-1);
    (text, code)
}
