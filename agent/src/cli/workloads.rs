//! `shoal apply`, `get`, `delete`, `status`: the desired state, through any agent.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use serde::Serialize;
use shoal::mesh::api::{Request, Response};
use shoal_core::resources::{format_cpu_millis, format_memory_bytes};

use super::connect::{call, ClientOpts, Output};
use super::EXIT_FAILURE;

/// Arguments of `shoal apply`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal apply -f web.toml\n  shoal apply -f a.toml -f b.json --agent 10.0.0.5:7001"
)]
pub struct ApplyArgs {
    /// Spec files (TOML or JSON); every file is validated before anything is sent.
    #[arg(short = 'f', long = "file", value_name = "FILE", required = true, num_args = 1..)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
}

/// Arguments of `shoal get`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal get\n  shoal get web -o json")]
pub struct GetArgs {
    /// Only this workload.
    name: Option<String>,
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
}

/// Arguments of `shoal delete` and `shoal status`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  shoal status web -o json")]
pub struct NameArgs {
    /// The workload.
    name: String,
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
}

fn print_json(value: &impl Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON output serializes")
    );
}

/// Validates every file, then sends them all in one request.
pub fn apply(args: ApplyArgs) -> anyhow::Result<ExitCode> {
    let mut specs = Vec::new();
    let mut invalid = false;
    for path in &args.files {
        match super::validate::load(path) {
            Ok(spec) => specs.push(spec),
            Err(errors) => {
                invalid = true;
                eprintln!("{errors}");
            }
        }
    }
    if invalid {
        eprintln!("nothing applied: fix the problems above first");
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    let Response::Applied(applied) = call(&args.client, Request::Apply { specs })? else {
        bail!("unexpected answer from the agent");
    };
    if args.output == Output::Json {
        print_json(&applied);
    } else {
        for a in &applied {
            let verb = if a.changed { "applied" } else { "unchanged" };
            println!(
                "{}: {verb} (version {}, durable on {})",
                a.name,
                a.version,
                a.durable_on.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct GetRow<'a> {
    name: &'a str,
    replicas: u32,
    version: &'a str,
}

/// Lists workloads.
pub fn get(args: GetArgs) -> anyhow::Result<ExitCode> {
    let Response::Workloads(views) = call(&args.client, Request::Get { name: args.name })? else {
        bail!("unexpected answer from the agent");
    };
    if args.output == Output::Json {
        let rows: Vec<GetRow> = views
            .iter()
            .map(|v| GetRow {
                name: &v.name,
                replicas: v.replicas,
                version: &v.version,
            })
            .collect();
        print_json(&rows);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<32} {:>8} {:>8} {:>10}  VERSION",
        "NAME", "REPLICAS", "CPU", "MEMORY"
    );
    for v in &views {
        println!(
            "{:<32} {:>8} {:>8} {:>10}  {}",
            v.name,
            v.replicas,
            format_cpu_millis(v.spec.resources.cpu_millis),
            format_memory_bytes(v.spec.resources.memory_bytes),
            v.version
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes a workload everywhere.
pub fn delete(args: NameArgs) -> anyhow::Result<ExitCode> {
    let Response::Deleted(deleted) = call(&args.client, Request::Delete { name: args.name })?
    else {
        bail!("unexpected answer from the agent");
    };
    if args.output == Output::Json {
        print_json(&deleted);
    } else {
        println!(
            "{}: deleted (version {}, durable on {})",
            deleted.name,
            deleted.version,
            deleted.durable_on.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Shows where a workload's replicas are.
pub fn status(args: NameArgs) -> anyhow::Result<ExitCode> {
    let Response::Status(status) = call(&args.client, Request::Status { name: args.name })? else {
        bail!("unexpected answer from the agent");
    };
    if args.output == Output::Json {
        print_json(&status);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} desired, version {}",
        status.name, status.desired, status.version
    );
    println!(
        "{:>7}  {:<24} {:<14} {:<8} {:>8}  REASON",
        "REPLICA", "NODE", "PHASE", "HEALTHY", "RESTARTS"
    );
    for i in &status.instances {
        let healthy = match i.healthy {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let reason = i
            .reason
            .as_deref()
            .or(i.last_error.as_deref())
            .unwrap_or("");
        println!(
            "{:>7}  {:<24} {:<14} {:<8} {:>8}  {}",
            i.replica,
            i.node.as_deref().unwrap_or("-"),
            i.phase,
            healthy,
            i.restarts,
            reason
        );
    }
    Ok(ExitCode::SUCCESS)
}
