//! Hosts as Linux network namespaces, for tests that cut one agent's network with iptables.
//!
//! Each host is a namespace with one veth (`eth0`, 10.S.0.N/24) whose other end is a port of a
//! bridge in a hub namespace. Nothing is created in the test's own namespace, so the tests need no
//! free addresses and leave the machine's routes and firewall alone. [`Hosts`] removes every rule,
//! veth, bridge and namespace it made when dropped, panics included; namespaces left by a test
//! process that was killed (no drop) are removed by the next [`Hosts::new`].
//!
//! Needs root, `ip` (iproute2), `iptables` and `nsenter` (util-linux): [`require`] says which is
//! missing, and skips only when `SHOAL_SKIP_NETNS_TESTS=1`.

use std::os::unix::fs::MetadataExt;
use std::process::Command;

/// Every namespace made here starts with this, then the pid of the test process.
const PREFIX: &str = "shoal-nx";

/// Whether this test can run: true when it can; false, with the reason printed, when it cannot
/// and `SHOAL_SKIP_NETNS_TESTS=1`; panics with the reason otherwise (CI runs as root with the
/// tools installed, so a missing tool there is a failure, not a skip).
pub fn require() -> bool {
    let Err(why) = check() else { return true };
    if std::env::var("SHOAL_SKIP_NETNS_TESTS").as_deref() == Ok("1") {
        eprintln!("skipped: {why} (SHOAL_SKIP_NETNS_TESTS=1)");
        return false;
    }
    panic!(
        "{why}. These tests create network namespaces: run them as root with iproute2, iptables \
         and util-linux installed, or set SHOAL_SKIP_NETNS_TESTS=1 to skip them deliberately"
    );
}

fn check() -> Result<(), String> {
    // The effective uid, second of /proc/self/status's `Uid:` fields (nix's `user` feature is off).
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1));
    if euid != Some("0") {
        return Err("not running as root".into());
    }
    for (tool, args, package) in [
        ("ip", &["-V"][..], "iproute2"),
        ("iptables", &["--version"][..], "iptables"),
        ("nsenter", &["--version"][..], "util-linux"),
    ] {
        let ok = Command::new(tool)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Err(format!("`{tool}` is missing (package {package})"));
        }
    }
    Ok(())
}

/// Runs a command, panicking with its output when it fails.
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a command during cleanup: failures are printed, never a panic (a drop may run while
/// unwinding).
fn run_quietly(program: &str, args: &[&str]) {
    match Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => eprintln!(
            "cleanup: {program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => eprintln!("cleanup: {program} {args:?}: {e}"),
    }
}

/// Which way an iptables rule drops a host's packets on its veth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Everything it sends (OUTPUT chain, `-o eth0`).
    Send,
    /// Everything it receives (INPUT chain, `-i eth0`).
    Receive,
}

impl Cut {
    fn rule(self) -> [&'static str; 6] {
        match self {
            Cut::Send => ["OUTPUT", "-o", "eth0", "-j", "DROP", "-w"],
            Cut::Receive => ["INPUT", "-i", "eth0", "-j", "DROP", "-w"],
        }
    }
}

/// `n` hosts on a bridge. Host `i` (0-based) is namespace `names[i]` with address 10.S.0.(i+1).
pub struct Hosts {
    hub: String,
    /// The hosts' namespace names.
    pub names: Vec<String>,
    subnet: u8,
    /// Rules in force, removed on drop.
    cuts: Vec<(usize, Cut)>,
}

impl Hosts {
    /// Creates `n` hosts for the test `tag` (short, distinct per test of a process) on subnet
    /// 10.`subnet`.0.0/24.
    pub fn new(tag: &str, n: usize, subnet: u8) -> Hosts {
        assert!((1..=250).contains(&n));
        remove_stale();
        let base = format!("{PREFIX}{}-{tag}", std::process::id());
        let mut hosts = Hosts {
            hub: format!("{base}-hub"),
            names: Vec::new(),
            subnet,
            cuts: Vec::new(),
        };
        // From here on a failure unwinds through `Drop`, which removes what was made.
        run("ip", &["netns", "add", &hosts.hub]);
        run(
            "ip",
            &["-n", &hosts.hub, "link", "add", "br0", "type", "bridge"],
        );
        run("ip", &["-n", &hosts.hub, "link", "set", "br0", "up"]);
        for i in 0..n {
            let name = format!("{base}-{}", i + 1);
            run("ip", &["netns", "add", &name]);
            hosts.names.push(name.clone());
            let port = format!("h{}", i + 1);
            run(
                "ip",
                &[
                    "-n", &hosts.hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                    "netns", &name,
                ],
            );
            run(
                "ip",
                &[
                    "-n", &hosts.hub, "link", "set", &port, "master", "br0", "up",
                ],
            );
            let addr = format!("{}/24", hosts.ip(i));
            run("ip", &["-n", &name, "addr", "add", &addr, "dev", "eth0"]);
            run("ip", &["-n", &name, "link", "set", "eth0", "up"]);
            run("ip", &["-n", &name, "link", "set", "lo", "up"]);
        }
        hosts
    }

    /// Host `i`'s address.
    pub fn ip(&self, i: usize) -> std::net::IpAddr {
        std::net::Ipv4Addr::new(10, self.subnet, 0, i as u8 + 1).into()
    }

    /// The inode of host `i`'s namespace (what /proc/PID/ns/net names as `net:[INODE]`).
    pub fn inode(&self, i: usize) -> u64 {
        std::fs::metadata(format!("/run/netns/{}", self.names[i]))
            .expect("the namespace exists")
            .ino()
    }

    /// Drops host `i`'s packets one way (an iptables rule in its namespace) until [`Hosts::heal`].
    pub fn cut(&mut self, i: usize, cut: Cut) {
        let mut args = vec!["netns", "exec", &self.names[i], "iptables", "-I"];
        args.extend(cut.rule());
        run("ip", &args);
        self.cuts.push((i, cut));
    }

    /// Removes the rule [`Hosts::cut`] added.
    pub fn heal(&mut self, i: usize, cut: Cut) {
        let at = self
            .cuts
            .iter()
            .position(|c| *c == (i, cut))
            .expect("a rule in force");
        self.cuts.remove(at);
        let mut args = vec!["netns", "exec", &self.names[i], "iptables", "-D"];
        args.extend(cut.rule());
        run("ip", &args);
    }

    /// SIGKILLs every process in host `i`'s namespace (its agent, guard and instances: the host
    /// dies); returns their pids.
    pub fn kill_all(&self, i: usize) -> Vec<i32> {
        kill_all_in(&self.names[i])
    }
}

/// SIGKILLs every process in namespace `name`, a few times over (a dying parent may still fork).
fn kill_all_in(name: &str) -> Vec<i32> {
    let mut killed = Vec::new();
    for _ in 0..3 {
        let out = Command::new("ip").args(["netns", "pids", name]).output();
        let pids: Vec<i32> = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            killed.push(pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    killed
}

/// Removes namespaces made by test processes that no longer run.
fn remove_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if pid.is_empty() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        eprintln!("removing namespace {name} left by test process {pid}");
        kill_all_in(&name);
        run_quietly("ip", &["netns", "del", &name]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for (i, cut) in std::mem::take(&mut self.cuts) {
            let mut args = vec!["netns", "exec", &self.names[i], "iptables", "-D"];
            args.extend(cut.rule());
            run_quietly("ip", &args);
        }
        for name in &self.names {
            kill_all_in(name);
        }
        for i in 0..self.names.len() {
            // Deleting one end of a veth pair deletes both.
            run_quietly(
                "ip",
                &["-n", &self.hub, "link", "del", &format!("h{}", i + 1)],
            );
        }
        run_quietly("ip", &["-n", &self.hub, "link", "del", "br0"]);
        for name in self.names.iter().chain([&self.hub]) {
            run_quietly("ip", &["netns", "del", name]);
        }
    }
}
