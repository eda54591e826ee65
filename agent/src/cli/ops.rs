//! `shoal issues`, `approve`, `events`, `drain`, `undrain`: steering the convergence loops.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use shoal::wire::api::{Request, Response, PAGE_ITEMS_MAX};
use shoal_core::reconcile::Layer;

use super::connect::{call, call_pages, ClientOpts, Output};

/// Arguments of `shoal issues`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal issues\n  shoal issues -o json")]
pub struct IssuesArgs {
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
}

/// Arguments of `shoal approve`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  shoal approve 3f9a0c21b7e4")]
pub struct ApproveArgs {
    /// The issue id, as `shoal issues` prints it.
    id: String,
    #[command(flatten)]
    client: ClientOpts,
}

/// Arguments of `shoal events`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal events\n  shoal events --follow --agent 10.0.0.5:7001")]
pub struct EventsArgs {
    /// Keep printing new events until interrupted.
    #[arg(short, long)]
    follow: bool,
    #[command(flatten)]
    client: ClientOpts,
    /// Output format (JSON: one object per line).
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
}

/// Arguments of `shoal drain` and `shoal undrain`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  shoal drain n3 && shoal undrain n3")]
pub struct DrainArgs {
    /// The node.
    node: String,
    #[command(flatten)]
    client: ClientOpts,
}

fn since(at_ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(at_ms);
    let secs = now.saturating_sub(at_ms) / 1000;
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m", secs / 60),
        _ => format!("{}h", secs / 3600),
    }
}

/// The layer as `-o json` spells it.
fn layer_name(layer: Layer) -> &'static str {
    match layer {
        Layer::Placement => "placement",
        Layer::Process => "process",
        Layer::Application => "application",
        Layer::Safety => "safety",
        Layer::Runtime => "runtime",
    }
}

/// Lists every node's issues.
pub fn issues(args: IssuesArgs) -> anyhow::Result<ExitCode> {
    let issues = call_pages(
        &args.client,
        |after| Request::Issues {
            after,
            limit: PAGE_ITEMS_MAX,
        },
        |answer| match answer {
            Response::Issues { issues, next_after } => Some((issues, next_after)),
            _ => None,
        },
    )?;
    if args.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&issues)?);
        return Ok(ExitCode::SUCCESS);
    }
    if issues.is_empty() {
        println!("no issues");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<12} {:<12} {:<22} {:<20} {:<10} {:>6}  WHY",
        "ID", "LAYER", "KIND", "REPLICA", "NODE", "SINCE"
    );
    for i in &issues {
        let why = match &i.held {
            Some(held) => format!("HELD: {held} (approve with `shoal approve {}`)", i.id),
            None => super::when::with_relative_times(&i.message, super::when::now_ms()),
        };
        println!(
            "{:<12} {:<12} {:<22} {:<20} {:<10} {:>6}  {}",
            i.id,
            layer_name(i.layer),
            i.kind.to_string(),
            i.replica
                .as_ref()
                .map(|r| r.to_string())
                .unwrap_or_else(|| "-".into()),
            i.node,
            since(i.since_ms),
            why
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Approves a held issue.
pub fn approve(args: ApproveArgs) -> anyhow::Result<ExitCode> {
    let Response::Approved { id, node } = call(
        &args.client,
        Request::Approve {
            id: args.id,
            node: None,
            by: None,
        },
    )?
    else {
        bail!("unexpected answer from the agent");
    };
    println!("issue {id} approved on {node}; its reconciler acts now");
    Ok(ExitCode::SUCCESS)
}

/// Drains or undrains a node.
///
/// The request goes to the node concerned itself, which checks the caller's certificate
/// (NodeRestriction: no agent forwards a drain): its API address comes from `--agent`'s list of
/// nodes.
pub fn drain(args: DrainArgs, draining: bool) -> anyhow::Result<ExitCode> {
    let target = node_api(&args.client, &args.node)?;
    let opts = args.client.at(target);
    let req = Request::Drain {
        node: args.node,
        draining,
        by: None,
    };
    let Response::Drained { node, draining } = call(&opts, req)? else {
        bail!("unexpected answer from the agent");
    };
    if draining {
        println!("{node} is draining: its replicas move to other nodes, each new copy healthy before the old one stops");
    } else {
        println!("{node} takes replicas again");
    }
    Ok(ExitCode::SUCCESS)
}

/// The API address of `node`, from the node list of the agent `opts` names (paged until found).
fn node_api(opts: &ClientOpts, node: &str) -> anyhow::Result<std::net::SocketAddr> {
    let mut found = None;
    let _ = call_pages(
        opts,
        |after| Request::Nodes { after, limit: 1000 },
        |answer| match answer {
            Response::Nodes { nodes, next_after } => {
                found = found
                    .take()
                    .or_else(|| nodes.into_iter().find(|n| n.name == node));
                // Stop paging once found.
                Some((Vec::<()>::new(), next_after.filter(|_| found.is_none())))
            }
            _ => None,
        },
    )?;
    let Some(view) = found else {
        bail!("no node named {node:?} in the mesh; `shoal nodes` lists them");
    };
    if !view.alive {
        bail!("{node} is not live: a drain is made by the node itself; start it first");
    }
    let Some(addr) = view.api_addr else {
        bail!("{node} has published no API address yet; try again in a moment");
    };
    addr.parse()
        .with_context(|| format!("{node}'s API address {addr:?} is not an address"))
}

/// Prints the agent's recent reconcile events, and with --follow keeps going.
pub fn events(args: EventsArgs) -> anyhow::Result<ExitCode> {
    let mut after = 0;
    loop {
        let Response::Events(events) = call(&args.client, Request::Events { after, limit: 1000 })?
        else {
            bail!("unexpected answer from the agent");
        };
        for e in &events {
            if args.output == Output::Json {
                println!("{}", serde_json::to_string(e)?);
            } else {
                println!(
                    "{:>6} {:>6} ago  {:<8} {:<14} {:<20} {}",
                    e.seq,
                    since(e.at_ms),
                    e.node,
                    e.kind,
                    e.replica.as_deref().unwrap_or("-"),
                    e.reason
                );
            }
            after = e.seq;
        }
        if !args.follow {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}
