//! `shoal endpoints NAME`: every replica's instances with node, address and health, as the
//! agent's DNS sees them.

use std::process::ExitCode;

use anyhow::bail;
use shoal::mesh::api::{Request, Response};

use super::connect::{call, ClientOpts, Output};

/// Arguments of `shoal endpoints`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal endpoints web\n  shoal endpoints web -o json")]
pub struct Args {
    /// The workload.
    name: String,
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
}

/// Runs `shoal endpoints`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let req = Request::Endpoints {
        name: args.name.clone(),
    };
    let Response::Endpoints(w) = call(&args.client, req)? else {
        bail!("unexpected answer from the agent");
    };
    if args.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&w)?);
        return Ok(ExitCode::SUCCESS);
    }
    let ports: Vec<String> = w
        .ports
        .iter()
        .map(|p| match p.host {
            Some(host) => format!("{host}->{}/{}", p.container, p.protocol),
            None => format!("{}/{} (engine-picked host port)", p.container, p.protocol),
        })
        .collect();
    if !ports.is_empty() {
        println!("ports: {}", ports.join(", "));
    }
    println!(
        "{:>7}  {:<20} {:<40} {:<9} {:<8} SERVING",
        "REPLICA", "NODE", "ADDRESS", "PHASE", "HEALTHY"
    );
    for e in &w.endpoints {
        let addr = e.addr.map_or("-".to_string(), |a| a.to_string());
        let node = if e.node_live {
            e.node.clone()
        } else {
            format!("{} (not live)", e.node)
        };
        println!(
            "{:>7}  {:<20} {:<40} {:<9} {:<8} {}",
            e.replica,
            node,
            addr,
            e.phase,
            if e.healthy { "yes" } else { "no" },
            if e.serving { "yes" } else { "no" }
        );
    }
    let serving: std::collections::BTreeSet<u32> = w.serving().map(|e| e.replica).collect();
    println!("{} of {} replicas serving", serving.len(), w.replicas);
    Ok(ExitCode::SUCCESS)
}
