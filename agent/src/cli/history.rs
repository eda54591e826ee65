//! `shoal history NAME` and `shoal rollout undo NAME [--to VERSION]`.

use std::process::ExitCode;

use anyhow::bail;
use shoal::mesh::api::{Request, Response};
use shoal_core::hlc::format_version;

use super::connect::{call, ClientOpts, Output};

/// Arguments of `shoal history`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal history web\n  shoal history web -o json")]
pub struct HistoryArgs {
    /// The workload.
    name: String,
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
}

/// Arguments of `shoal rollout`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal rollout undo web\n  shoal rollout undo web --to 1796133000000.0@n2\n  shoal rollout pause web; shoal rollout resume web"
)]
pub struct RolloutArgs {
    #[command(subcommand)]
    command: RolloutCommand,
}

#[derive(Debug, clap::Subcommand)]
enum RolloutCommand {
    /// Apply a past version's content again, as a new version (default: the one before the
    /// current); the current one joins the history.
    Undo {
        /// The workload.
        name: String,
        /// The past version to go back to, as `shoal history NAME -o json` spells it.
        #[arg(long)]
        to: Option<String>,
        #[command(flatten)]
        client: ClientOpts,
    },
    /// Keep the instances of older versions as they are (no replacement) until `resume`;
    /// missing replicas still start at the desired version.
    Pause {
        /// The workload.
        name: String,
        #[command(flatten)]
        client: ClientOpts,
    },
    /// Let a paused rollout go on.
    Resume {
        /// The workload.
        name: String,
        #[command(flatten)]
        client: ClientOpts,
    },
}

/// Runs `shoal history`.
pub fn history(args: HistoryArgs) -> anyhow::Result<ExitCode> {
    let req = Request::History {
        name: args.name.clone(),
    };
    let Response::History { versions, .. } = call(&args.client, req)? else {
        bail!("unexpected answer from the agent");
    };
    if args.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&versions)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<34} {:<9} {:>8}  {:<28} RUNS",
        "VERSION", "", "REPLICAS", "BY"
    );
    for v in &versions {
        println!(
            "{:<34} {:<9} {:>8}  {:<28} {}",
            format_version(&v.version),
            if v.current { "(current)" } else { "" },
            v.replicas,
            v.by,
            v.runs
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `shoal rollout`.
pub fn rollout(args: RolloutArgs) -> anyhow::Result<ExitCode> {
    let (name, paused, client) = match args.command {
        RolloutCommand::Pause { name, client } => (name, true, client),
        RolloutCommand::Resume { name, client } => (name, false, client),
        RolloutCommand::Undo { name, to, client } => return undo(name, to, client),
    };
    let Response::Paused { name, paused } = call(&client, Request::Pause { name, paused })? else {
        bail!("unexpected answer from the agent");
    };
    match paused {
        true => println!(
            "{name}: rollout paused; older instances stay until `shoal rollout resume {name}`"
        ),
        false => println!("{name}: rollout resumed"),
    }
    Ok(ExitCode::SUCCESS)
}

fn undo(name: String, to: Option<String>, client: ClientOpts) -> anyhow::Result<ExitCode> {
    let Response::Applied(applied) = call(&client, Request::Undo { name, to })? else {
        bail!("unexpected answer from the agent");
    };
    for a in &applied {
        let verb = if a.changed {
            "rolled back"
        } else {
            "unchanged (the past version's content is the current one)"
        };
        println!(
            "{}: {verb} (new version {}, durable on {})",
            a.name,
            format_version(&a.version),
            a.durable_on.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
