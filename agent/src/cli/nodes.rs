//! `shoal nodes`: the membership as one agent sees it.

use std::process::ExitCode;

use anyhow::bail;
use serde::Serialize;
use shoal::mesh::api::{Request, Response};
use shoal_core::resources::{format_cpu_millis, format_memory_bytes};

use super::connect::{call, ClientOpts, Output};

/// Arguments of `shoal nodes`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal nodes\n  shoal nodes -o json --agent 10.0.0.5:7001")]
pub struct Args {
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Serialize)]
struct Row<'a> {
    name: &'a str,
    alive: bool,
    zone: &'a str,
    cpu_millis: u64,
    memory_bytes: u64,
    draining: bool,
    gossip_addr: &'a str,
    api_addr: Option<&'a str>,
}

/// Lists nodes.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Response::Nodes(nodes) = call(&args.client, Request::Nodes)? else {
        bail!("unexpected answer from the agent");
    };
    if args.output == Output::Json {
        let rows: Vec<Row> = nodes
            .iter()
            .map(|n| Row {
                name: &n.name,
                alive: n.alive,
                zone: &n.zone,
                cpu_millis: n.cpu_millis,
                memory_bytes: n.memory_bytes,
                draining: n.draining,
                gossip_addr: &n.gossip_addr,
                api_addr: n.api_addr.as_deref(),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<24} {:<6} {:<12} {:>8} {:>10}  GOSSIP",
        "NAME", "STATE", "ZONE", "CPU", "MEMORY"
    );
    for n in &nodes {
        let state = match (n.alive, n.draining) {
            (false, _) => "dead",
            (true, true) => "drain",
            (true, false) => "alive",
        };
        println!(
            "{:<24} {:<6} {:<12} {:>8} {:>10}  {}",
            n.name,
            state,
            n.zone,
            format_cpu_millis(n.cpu_millis),
            format_memory_bytes(n.memory_bytes),
            n.gossip_addr
        );
    }
    Ok(ExitCode::SUCCESS)
}
