//! `shoal nodes`: the membership as one agent sees it.

use std::process::ExitCode;

use anyhow::bail;
use serde::Serialize;
use shoal::wire::api::{Request, Response, PAGE_ITEMS_MAX};
use shoal_core::resources::{human_cpu_millis, human_memory_bytes};

use shoal::state::cells::CellView;
use shoal::wire::api::NodeView;

use super::connect::{call_pages, ClientOpts, Output};

/// Arguments of `shoal nodes`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal nodes\n  shoal nodes --cell eu-2\n  shoal nodes -o json --agent 10.0.0.5:7001"
)]
pub struct Args {
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
    /// List the nodes of this cell instead of the agent's own (asked of one of its envoys).
    #[arg(long)]
    cell: Option<String>,
    /// List the cells instead of nodes (with -o json: every cell's summary as the agent holds
    /// it, whether it is down and how long ago it was heard from).
    #[arg(long, conflicts_with = "cell")]
    cells: bool,
}

#[derive(Serialize)]
struct Row<'a> {
    name: &'a str,
    cell: &'a str,
    alive: bool,
    zone: &'a str,
    cpu_millis: u64,
    memory_bytes: u64,
    draining: bool,
    gossip_addr: &'a str,
    api_addr: Option<&'a str>,
    version: Option<&'a str>,
    build: Option<&'a shoal::state::mesh::build::BuildRecord>,
    /// What it runs, when it gossips its capabilities (a build before 9 does not).
    runtimes: Option<&'a str>,
    /// Suspected by the answering agent's member probes (an agent before wire 11 says nothing).
    suspect: Option<bool>,
}

/// The cells the agent knows, every page.
fn cells(client: &ClientOpts) -> anyhow::Result<Vec<CellView>> {
    call_pages(
        client,
        |after| Request::CellList {
            after,
            limit: PAGE_ITEMS_MAX,
        },
        |answer| match answer {
            Response::CellList { cells, next_after } => Some((cells, next_after)),
            _ => None,
        },
    )
}

/// The members as the agent at `client.agent` sees them, every page.
fn nodes(client: &ClientOpts) -> anyhow::Result<Vec<NodeView>> {
    call_pages(
        client,
        |after| Request::Nodes {
            after,
            limit: PAGE_ITEMS_MAX,
        },
        |answer| match answer {
            Response::Nodes { nodes, next_after } => Some((nodes, next_after)),
            _ => None,
        },
    )
}

/// Where to ask for the nodes of `cell`: the agent itself for its own cell, else one of the
/// cell's envoys as its summary lists them (the first that answers).
fn nodes_of(args: &Args, known: &[CellView]) -> anyhow::Result<(String, Vec<NodeView>)> {
    let own = known
        .iter()
        .find(|c| c.own)
        .map_or(shoal::state::cells::DEFAULT_CELL, |c| {
            c.summary.cell.as_str()
        });
    let want = args.cell.as_deref().unwrap_or(own);
    if want == own {
        return Ok((own.to_string(), nodes(&args.client)?));
    }
    let Some(cell) = known.iter().find(|c| c.summary.cell == want) else {
        let names: Vec<&str> = known.iter().map(|c| c.summary.cell.as_str()).collect();
        bail!(
            "--cell {want}: the agent at {} knows no such cell (it knows: {})",
            args.client.agent,
            names.join(", ")
        );
    };
    Ok((want.to_string(), nodes_of_other_cell(&args.client, cell)?))
}

/// The members of another cell, asked of its envoys as its summary lists them (the first that
/// answers), with `client`'s certificate and timeout.
pub(super) fn nodes_of_other_cell(
    client: &ClientOpts,
    cell: &CellView,
) -> anyhow::Result<Vec<NodeView>> {
    let want = &cell.summary.cell;
    let mut last = anyhow::anyhow!("cell {want} lists no contact");
    for contact in &cell.summary.contacts {
        let Some(c) = shoal::state::cells::parse_contact(contact) else {
            continue;
        };
        let client = client.at(c.api);
        match nodes(&client) {
            Ok(nodes) => return Ok(nodes),
            Err(e) => last = e.context(format!("asking {contact}, an envoy of cell {want}")),
        }
    }
    Err(last)
}

/// Lists nodes (and, in a mesh of several cells, the cells).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let known = cells(&args.client)?;
    if args.cells {
        match args.output {
            Output::Json => println!("{}", serde_json::to_string_pretty(&known)?),
            _ => print_cells(&known),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (cell, nodes) = nodes_of(&args, &known)?;
    if args.output == Output::Json {
        let rows: Vec<Row> = nodes
            .iter()
            .map(|n| Row {
                name: &n.name,
                cell: &cell,
                alive: n.alive,
                zone: &n.zone,
                cpu_millis: n.cpu_millis,
                memory_bytes: n.memory_bytes,
                draining: n.draining,
                gossip_addr: &n.gossip_addr,
                api_addr: n.api_addr.as_deref(),
                version: n.agent_version.as_deref(),
                build: n.build.as_ref(),
                runtimes: n.runtimes.as_deref(),
                suspect: n.suspect,
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    if known.len() > 1 {
        print_cells(&known);
        println!();
        println!("NODES OF CELL {cell}");
    }
    println!(
        "{:<24} {:<7} {:<12} {:>8} {:>10}  {:<18} {:<5} {:<26} GOSSIP",
        "NAME", "STATE", "ZONE", "CPU", "MEMORY", "VERSION", "WIRE", "RUNTIMES"
    );
    for n in &nodes {
        let state = match (n.alive, n.draining, n.suspect == Some(true)) {
            (false, _, _) => "dead",
            (true, _, true) => "suspect",
            (true, true, false) => "drain",
            (true, false, false) => "alive",
        };
        // An agent of a build before 8 answers without build facts: its version is all it says.
        let (version, wire) = match &n.build {
            Some(b) => (b.label(), format!("{}-{}", b.wire_min, b.wire_max)),
            None => (
                n.agent_version.clone().unwrap_or_else(|| "?".into()),
                "?".into(),
            ),
        };
        // A build before 9 gossips no capabilities: it runs anything its runtime runs.
        let runtimes = n.runtimes.as_deref().unwrap_or("?");
        println!(
            "{:<24} {:<7} {:<12} {:>8} {:>10}  {:<18} {:<5} {:<26} {}",
            n.name,
            state,
            n.zone,
            human_cpu_millis(n.cpu_millis),
            human_memory_bytes(n.memory_bytes),
            version,
            wire,
            runtimes,
            n.gossip_addr
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The cells table: name, state, live members, ranked capacity and what is free.
fn print_cells(cells: &[CellView]) {
    println!(
        "{:<20} {:<8} {:>7} {:>9} {:>11} {:>9} {:>11}",
        "CELL", "STATE", "MEMBERS", "CPU", "MEMORY", "FREE CPU", "FREE MEMORY"
    );
    for c in cells {
        let s = &c.summary;
        let state = c.state();
        println!(
            "{:<20} {:<8} {:>7} {:>9} {:>11} {:>9} {:>11}",
            s.cell,
            state,
            s.members,
            human_cpu_millis(s.capacity.cpu_millis),
            human_memory_bytes(s.capacity.memory_bytes),
            human_cpu_millis(s.free.cpu_millis),
            human_memory_bytes(s.free.memory_bytes),
        );
    }
}
