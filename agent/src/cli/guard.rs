//! `shoal guard`: the process that stops this node's exclusive instances when the agent stops
//! renewing its lease. `shoal agent` starts it; run by hand only to debug.

use std::path::PathBuf;
use std::process::ExitCode;

use shoal::node::guard::{run_guard, GuardOptions, GuardRuntime};

/// Arguments of `shoal guard`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's data directory; the guard's files are under DIR/guard.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// The node the agent serves.
    #[arg(long)]
    node: String,
    /// Whose instances to stop: process groups or Docker containers.
    #[arg(long, value_parser = ["process", "docker"])]
    runtime: String,
    /// The longest lease accepted, in milliseconds; a lease ending later counts as tampered.
    #[arg(long, value_name = "MS")]
    lease_max_ms: u64,
}

/// Runs the guard until the agent releases it or its directory is removed.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(super::agent::colour_on_stderr())
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = GuardRuntime::parse(&args.runtime).expect("clap checked the value");
    run_guard(GuardOptions {
        data_dir: args.data_dir,
        node: args.node,
        runtime,
        lease_max_ms: args.lease_max_ms,
    })?;
    Ok(ExitCode::SUCCESS)
}
