//! `shoal upgrade status|hold|release` (the mesh version) and `shoal version` (this build and the
//! agent's).

use std::process::ExitCode;

use anyhow::bail;
use shoal::state::mesh::build::BuildRecord;
use shoal::state::mesh::upgrade::UpgradeView;
use shoal::wire::api::{Request, Response};
use shoal_core::version::Since;

use super::connect::{call, ClientOpts, Output};

/// Arguments of `shoal upgrade`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The mesh version is the highest wire version every known member speaks; it moves by\n\
itself once every member runs a build that speaks the next one, never back.\n\n\
Examples:\n  shoal upgrade status\n  shoal upgrade status -o json\n  shoal upgrade hold      # before a roll you may want to undo\n  shoal upgrade release"
)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t, global = true)]
    output: Output,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// The mesh version, members per build, what waits and for whom.
    Status,
    /// Keep the mesh version where it is (a host can still be rolled back to the older build).
    Hold,
    /// Let the mesh version move again.
    Release,
}

/// Runs `shoal upgrade`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let req = match args.command {
        Command::Status => Request::UpgradeStatus { since: Since },
        Command::Hold => Request::UpgradeHold {
            held: true,
            since: Since,
        },
        Command::Release => Request::UpgradeHold {
            held: false,
            since: Since,
        },
    };
    let view = upgrade_view(&args.client, req)?;
    if args.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_view(&view);
    Ok(ExitCode::SUCCESS)
}

fn upgrade_view(client: &ClientOpts, req: Request) -> anyhow::Result<UpgradeView> {
    match call(client, req) {
        Ok(Response::Upgrade(view)) => Ok(*view),
        Ok(_) => bail!("unexpected answer from the agent at {}", client.agent),
        Err(e) if format!("{e:#}").contains("exists since wire version") => bail!(
            "the agent at {} runs a build before 8 (it speaks wire 7 only), which knows no \
             `upgrade` command: ask an agent that runs the new build",
            client.agent
        ),
        Err(e) => Err(e),
    }
}

fn print_view(view: &UpgradeView) {
    let hold = match &view.hold {
        Some(h) => format!(", held by {} (`shoal upgrade release` lets it move)", h.by),
        None => String::new(),
    };
    println!(
        "mesh version {} (placement algorithm {}){hold}",
        view.mesh_version, view.placement_algorithm
    );
    match (view.next, view.waiting_count) {
        (Some(next), _) if view.hold.is_some() => {
            println!("every member speaks {next}: it moves once released")
        }
        (Some(next), _) => println!("every member speaks {next}: it moves within seconds"),
        (None, 0) if view.too_new.is_empty() => {
            println!("every member runs a build as new as the answering agent's")
        }
        (None, waiting) => println!(
            "waiting for {waiting} member(s) to run a newer build: {}",
            shoal::state::mesh::upgrade::describe_holders(&view.waiting_for, waiting)
        ),
    }
    if !view.too_new.is_empty() {
        println!(
            "too new for this mesh version (roll them back or upgrade the rest first): {}",
            view.too_new.join(", ")
        );
    }
    println!();
    println!(
        "{:<22} {:<14} {:<7} {:>7}  MEMBERS",
        "BUILD", "WIRE", "LAYOUT", "COUNT"
    );
    for group in &view.builds {
        let b = &group.build;
        println!(
            "{:<22} {:<14} {:<7} {:>7}  {}",
            b.label(),
            format!("{}..={}", b.wire_min, b.wire_max),
            b.layout,
            group.count,
            group.members.join(", ")
        );
    }
}

/// Arguments of `shoal version`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Prints this build, then asks the agent (--agent or SHOAL_AGENT) for its own.\n\n\
Examples:\n  shoal version\n  shoal version -o json --agent 10.0.0.5:7001"
)]
pub struct VersionArgs {
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
    /// Print this build only; do not ask an agent.
    #[arg(long)]
    local: bool,
}

/// Runs `shoal version`: this build, and the agent's unless `--local`. An agent that does not
/// answer is said on stderr; the exit code stays 0 (this build's facts were printed).
pub fn version(args: VersionArgs) -> anyhow::Result<ExitCode> {
    let this = shoal::state::mesh::build::this();
    let agent = if args.local {
        None
    } else {
        let client = ClientOpts {
            timeout: args.client.timeout.min(std::time::Duration::from_secs(3)),
            ..args.client.clone()
        };
        Some(upgrade_view(
            &client,
            Request::UpgradeStatus { since: Since },
        ))
    };
    if args.output == Output::Json {
        let agent_json = match &agent {
            Some(Ok(view)) => serde_json::json!({
                "name": view.agent, "build": view.agent_build, "mesh_version": view.mesh_version,
            }),
            Some(Err(e)) => serde_json::json!({ "error": format!("{e:#}") }),
            None => serde_json::Value::Null,
        };
        let out = serde_json::json!({ "cli": this, "agent": agent_json });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("cli:   {}", describe(&this));
    match agent {
        Some(Ok(view)) => println!(
            "agent: {} (mesh version {}) {}",
            describe(&view.agent_build),
            view.mesh_version,
            view.agent
        ),
        Some(Err(e)) => eprintln!("agent at {}: not asked: {e:#}", args.client.agent),
        None => {}
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(b: &BuildRecord) -> String {
    format!(
        "shoal {}, wire {}..={}, store layout {}, placement {}..={}",
        b.label(),
        b.wire_min,
        b.wire_max,
        b.layout,
        b.placement_min,
        b.placement_max
    )
}
