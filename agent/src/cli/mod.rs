//! The command line. One file per command group; each defines its clap `Args` and a `run`
//! returning the exit code.
//!
//! To add a command: create `cli/<group>.rs` with `#[derive(clap::Args)] pub struct Args` and
//! `pub fn run(args: Args) -> anyhow::Result<ExitCode>`, declare the module below, add a variant
//! to [`Command`] (its doc comment is the help line) and a match arm in [`run`].
//!
//! Exit codes: 0 success, 1 the command ran and found a problem (an invalid spec, an unreachable
//! agent), 2 usage errors (clap's own code for unknown flags and missing arguments).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod agent;
mod caps;
mod completions;
mod connect;
mod demo;
mod dial;
mod endpoints;
mod exec;
mod guard;
mod history;
mod logs;
mod man;
mod nodes;
mod ops;
mod overview;
mod pki;
mod plan;
mod restart;
mod scale;
mod upgrade;
mod validate;
mod when;
mod workloads;

/// The command ran and found a problem, or failed.
pub const EXIT_FAILURE: u8 = 1;

/// Shoal: a container orchestrator with no center. Every host runs `shoal agent`; the same binary
/// is the command line.
#[derive(Debug, Parser)]
#[command(name = "shoal", version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("SHOAL_COMMIT"), ")"), propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check workload spec files and print every problem found.
    Validate(validate::Args),
    /// Run the agent on this host (joins the mesh, serves the API).
    Agent(Box<agent::Args>),
    /// Stop this node's exclusive instances when the agent stops renewing (started by `agent`).
    Guard(guard::Args),
    /// Manage the cluster CA and certificates.
    Pki(pki::Args),
    /// Show or set the most capacity one node may declare.
    Caps(caps::Args),
    /// A workload's current version and the ones before it.
    History(history::HistoryArgs),
    /// A workload's rollout: status, undo, pause, resume.
    Rollout(history::RolloutArgs),
    /// Store workload specs in the mesh (acknowledged once durable on two agents).
    Apply(workloads::ApplyArgs),
    /// Show where each replica would go if specs were applied, what else would move and what
    /// would fit nowhere; nothing is written.
    Plan(plan::Args),
    /// List workloads.
    Get(workloads::GetArgs),
    /// Change a workload's replica count (a new version of its spec).
    Scale(scale::Args),
    /// Restart a workload (every replica, rolling, as `[update]` says) or one replica at once.
    Restart(restart::Args),
    /// Delete a workload everywhere.
    Delete(workloads::DeleteArgs),
    /// Show where a workload's replicas are; without a name, the mesh at a glance (hosts by
    /// cell, workloads with desired/running/healthy replicas, open issues).
    Status(workloads::StatusArgs),
    /// Every replica's address and health, as the agents' DNS answers them.
    Endpoints(endpoints::Args),
    /// Print a replica's output (from any agent), or follow it.
    Logs(logs::Args),
    /// Relay one process instance's output into its rotated log files (started by the agent).
    #[command(hide = true)]
    LogRelay(logs::RelayArgs),
    /// List the nodes of the mesh.
    Nodes(nodes::Args),
    /// List issues raised by every node's reconciler (held ones wait for `approve`).
    Issues(ops::IssuesArgs),
    /// Let a reconciler act on a held issue.
    Approve(ops::ApproveArgs),
    /// Show an agent's recent reconcile actions and why.
    Events(ops::EventsArgs),
    /// Move every replica off a node, each new copy healthy before the old one stops.
    Drain(ops::DrainArgs),
    /// Let a drained node take replicas again.
    Undrain(ops::DrainArgs),
    /// Run a command in a running replica (from any agent): its output printed, its exit code.
    Exec(exec::Args),
    /// Start 5 agents on loopback, run a service, kill a host, watch the mesh heal, clean up.
    Demo(demo::Args),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    Completions(completions::Args),
    /// Write manual pages (shoal.1 and one per subcommand) into a directory.
    Man(man::Args),
    /// The mesh version across a rolling upgrade: status, hold, release.
    Upgrade(upgrade::Args),
    /// This build (version, commit, wire versions, store layout, placement) and the agent's.
    Version(upgrade::VersionArgs),
}

/// Parses the command line (printing help or a usage error and exiting 2 as clap does), runs the
/// command, and turns its outcome into the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.prints_for_a_pipe() {
        quiet_on_closed_pipe();
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// `shoal nodes | head`: once the reader closes the pipe, the next print fails and Rust's
/// print macros panic (the process ignores SIGPIPE, and this crate forbids the unsafe call that
/// would restore it). Such a panic ends the command quietly with 141 (128 + SIGPIPE), what a
/// shell reports for `ls | head`; every other panic keeps its message.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if text.contains("Broken pipe") || text.contains("BrokenPipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

impl Command {
    /// Whether the command prints and ends (a closed pipe may end it early). Long-running
    /// commands (agent, guard, demo) are left alone.
    fn prints_for_a_pipe(&self) -> bool {
        !matches!(
            self,
            Command::Agent(_) | Command::Guard(_) | Command::Demo(_) | Command::LogRelay(_)
        )
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate(args) => validate::run(args),
        Command::Agent(args) => agent::run(*args),
        Command::Guard(args) => guard::run(args),
        Command::Pki(args) => pki::run(args),
        Command::Caps(args) => caps::run(args),
        Command::History(args) => history::history(args),
        Command::Rollout(args) => history::rollout(args),
        Command::Apply(args) => workloads::apply(args),
        Command::Plan(args) => plan::run(args),
        Command::Get(args) => workloads::get(args),
        Command::Scale(args) => scale::run(args),
        Command::Restart(args) => restart::run(args),
        Command::Delete(args) => workloads::delete(args),
        Command::Status(args) => workloads::status(args),
        Command::Endpoints(args) => endpoints::run(args),
        Command::Logs(args) => logs::run(args),
        Command::LogRelay(args) => logs::relay(args),
        Command::Nodes(args) => nodes::run(args),
        Command::Issues(args) => ops::issues(args),
        Command::Approve(args) => ops::approve(args),
        Command::Events(args) => ops::events(args),
        Command::Drain(args) => ops::drain(args, true),
        Command::Undrain(args) => ops::drain(args, false),
        Command::Exec(args) => exec::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Completions(args) => completions::run::<Cli>(args),
        Command::Man(args) => man::run::<Cli>(args),
        Command::Upgrade(args) => upgrade::run(args),
        Command::Version(args) => upgrade::version(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
