//! The agent under test: one `shoal agent` in the bench's temp dir, restarted and driven through
//! the CLI; dropping it kills it and its process instances.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::process::read_states;
use crate::support::addrs::free_udp_addrs;
use crate::support::agents::{agent_command, cli, log_tail};
use crate::{Args, SETUP_TIMEOUT, WORKLOAD};

/// One `shoal agent` in the bench's temp dir; dropping it kills it and its process instances.
pub struct Agent {
    pub name: String,
    runtime: &'static str,
    gossip: SocketAddr,
    api: SocketAddr,
    pki: PathBuf,
    shoal: PathBuf,
    pub data_dir: PathBuf,
    log: PathBuf,
    /// The agent process (`None` only while being set up).
    child: Option<Child>,
}

impl Agent {
    pub fn start(
        args: &Args,
        dir: &Path,
        pki: &Path,
        runtime: &'static str,
        marker: u64,
    ) -> anyhow::Result<Agent> {
        let addrs = free_udp_addrs(2)?;
        let log = dir.join(format!("{runtime}.log"));
        File::create(&log)?;
        let mut agent = Agent {
            name: format!("bench-{runtime}-{marker}"),
            runtime,
            gossip: addrs[0],
            api: addrs[1],
            pki: pki.to_path_buf(),
            shoal: args.shoal.clone(),
            data_dir: dir.join(format!("data-{runtime}")),
            log,
            child: None,
        };
        agent.child = Some(agent.spawn()?);
        Ok(agent)
    }

    fn spawn(&self) -> anyhow::Result<Child> {
        let log = File::options().append(true).open(&self.log)?;
        agent_command(
            &self.shoal,
            &self.name,
            self.gossip,
            self.api,
            &self.data_dir,
            &self.pki,
            log,
        )
        .args(["--runtime", self.runtime])
        .env("SHOAL_SELF_ISSUE", "true")
        .spawn()
        .context("starting the agent")
    }

    /// The CLI against this agent.
    fn cli(&self) -> std::process::Command {
        let mut cmd = cli(&self.shoal, self.api, &self.pki);
        cmd.env("SHOAL_SELF_ISSUE", "true");
        cmd
    }

    /// Kills the agent (its instances run on) and starts it again over the same data dir, so it
    /// adopts them; returns once it answers.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        self.child = Some(self.spawn()?);
        let began = Instant::now();
        loop {
            let out = self
                .cli()
                .args(["status", WORKLOAD, "--timeout", "2s"])
                .output()?;
            if out.status.success() {
                return Ok(());
            }
            if began.elapsed() > SETUP_TIMEOUT {
                bail!("the restarted agent does not answer{}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `shoal apply` of one spec, retried while the agent is not answering yet.
    pub fn apply(&self, spec: &str) -> anyhow::Result<()> {
        let file = self.data_dir.with_extension("toml");
        std::fs::write(&file, spec)?;
        let began = Instant::now();
        loop {
            let out = self
                .cli()
                .args(["apply", "--timeout", "3s", "-f"])
                .arg(&file)
                .output()?;
            if out.status.success() {
                return Ok(());
            }
            if began.elapsed() > SETUP_TIMEOUT {
                bail!(
                    "shoal apply: {}{}",
                    String::from_utf8_lossy(&out.stderr),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// SIGKILL, as a crash: its instances run on.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
        // Process instances outlive their agent: stop the ones its state files name.
        let instances = self.data_dir.join("instances");
        for state in read_states(&instances) {
            if state.alive {
                let _ = nix::sys::signal::killpg(Pid::from_raw(state.pid), Signal::SIGKILL);
            }
        }
    }
}
