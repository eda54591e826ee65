//! `shoal endpoints NAME`: every replica's instances with node, address and health, as the
//! agent's DNS sees them.

use std::process::ExitCode;

use anyhow::bail;
use shoal::wire::api::{Request, Response};

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
        .map(|p| {
            let name = p.name.as_ref().map_or(String::new(), |n| format!("{n}: "));
            let inner = p.container.map_or(String::new(), |c| format!("->{c}"));
            let host = match (p.host, &p.name) {
                (Some(host), _) => host.to_string(),
                (None, Some(_)) => "(allocated)".to_string(),
                (None, None) => "(engine-picked)".to_string(),
            };
            format!("{name}{host}{inner}/{}", p.protocol)
        })
        .collect();
    if !ports.is_empty() {
        println!("ports: {}", ports.join(", "));
    }
    println!(
        "{:>7}  {:<20} {:<40} {:<9} {:<8} {:<7} PORTS",
        "REPLICA", "NODE", "ADDRESS", "PHASE", "HEALTHY", "SERVING"
    );
    for e in &w.endpoints {
        let addr = e.addr.map_or("-".to_string(), |a| a.to_string());
        let node = if e.node_live {
            e.node.clone()
        } else {
            format!("{} (not live)", e.node)
        };
        let ports: Vec<String> = e.ports.iter().map(|(n, p)| format!("{n}={p}")).collect();
        println!(
            "{:>7}  {:<20} {:<40} {:<9} {:<8} {:<7} {}",
            e.replica,
            node,
            addr,
            e.phase,
            if e.healthy { "yes" } else { "no" },
            if e.serving { "yes" } else { "no" },
            if ports.is_empty() {
                "-".to_string()
            } else {
                ports.join(",")
            }
        );
    }
    let serving: std::collections::BTreeSet<u32> = w.serving().map(|e| e.replica).collect();
    println!("{} of {} replicas serving", serving.len(), w.replicas);
    Ok(ExitCode::SUCCESS)
}
