//! `shoal scale NAME N`: the workload's spec as the mesh holds it, with another replica count,
//! applied as a new version.

use std::process::ExitCode;

use anyhow::bail;
use shoal::wire::api::{Request, Response};
use shoal_core::hlc::format_version;

use super::connect::{call, ClientOpts};
use super::workloads::{parse_duration, wait_rollout};
use super::EXIT_FAILURE;

/// Arguments of `shoal scale`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal scale web 5\n  shoal scale web 0 --wait")]
pub struct Args {
    /// The workload.
    name: String,
    /// The new number of replicas.
    replicas: u32,
    #[command(flatten)]
    client: ClientOpts,
    /// Wait until every replica runs the new version and is healthy.
    #[arg(long)]
    wait: bool,
    /// Give up waiting after this long (exit 1 with the reason).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    wait_timeout: std::time::Duration,
}

/// Reads the spec through the agent, changes `replicas` and applies it (validated first, here and
/// again by the agent). A read-modify-write: an apply of the same workload landing between the
/// read and the write is replaced by this one (the history keeps it).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let name = args.name.clone();
    let Response::Workload(view) = call(&args.client, Request::Get { name: name.clone() })? else {
        bail!("unexpected answer from the agent");
    };
    if view.replicas == args.replicas {
        println!("{name}: unchanged ({} replicas)", view.replicas);
        return Ok(ExitCode::SUCCESS);
    }
    // A spec with secrets reads back with `<secret>` in their place: read the values (a write
    // the agent audits) so that the apply keeps them.
    let mut spec = match view.spec.has_secrets() {
        false => view.spec,
        true => {
            let ask = Request::GetSecrets {
                name: name.clone(),
                since: Default::default(),
            };
            let Response::Workload(view) = call(&args.client, ask)? else {
                bail!("unexpected answer from the agent");
            };
            view.spec
        }
    };
    let before = spec.replicas;
    spec.replicas = args.replicas;
    if let Err(errors) = spec.validate() {
        eprintln!("{name}: {} replicas is refused:\n{errors}", args.replicas);
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    let Response::Applied(applied) = call(&args.client, Request::Apply { specs: vec![spec] })?
    else {
        bail!("unexpected answer from the agent");
    };
    let Some(a) = applied.first() else {
        bail!("the agent answered the apply with no workload");
    };
    println!(
        "{name}: scaled from {before} to {} replicas (version {}, durable on {})",
        args.replicas,
        format_version(&a.version),
        a.durable_on.join(", ")
    );
    if let Some(note) = &a.note {
        println!("  note: {note}");
    }
    if args.wait && !wait_rollout(&args.client, &name, &a.version, args.wait_timeout)? {
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    Ok(ExitCode::SUCCESS)
}
