//! `shoal plan -f SPEC...`: where each replica would go if the specs were applied, what else
//! would move, what would fit nowhere and why, as `nomad job plan` or `kubectl diff`; nothing
//! is written.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use shoal::wire::api::{Request, Response};
use shoal::wire::plan::PlanView;
use shoal_core::version::Since;

use super::connect::{call, ClientOpts, Output};
use super::EXIT_FAILURE;

/// Arguments of `shoal plan`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit code: 0 when every replica would fit and nothing would be refused, 1 \
                  otherwise.\n\nExamples:\n  shoal plan -f web.toml\n  shoal plan -f big.toml -o json"
)]
pub struct Args {
    /// Spec files (TOML or JSON); every file is validated first.
    #[arg(short = 'f', long = "file", value_name = "FILE", required = true, num_args = 1..)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
}

/// Rows of one workload printed before the rest are counted.
const ROWS_SHOWN: usize = 20;

/// Asks an agent what applying the specs would do.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some(specs) = super::validate::load_all(&args.files) else {
        eprintln!("nothing planned: fix the problems above first");
        return Ok(ExitCode::from(EXIT_FAILURE));
    };
    let Response::Plan(plan) = call(
        &args.client,
        Request::Plan {
            specs,
            since: Since,
        },
    )?
    else {
        bail!("unexpected answer from the agent");
    };
    let clean = plan
        .workloads
        .iter()
        .all(|w| w.refused.is_none() && w.fit.is_none());
    if args.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print(&plan);
    }
    Ok(match clean {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(EXIT_FAILURE),
    })
}

fn print(plan: &PlanView) {
    println!(
        "placement by {} at mesh version {} (algorithm {}); nothing is written",
        plan.agent, plan.mesh_version, plan.placement_algorithm
    );
    for w in &plan.workloads {
        println!();
        println!(
            "{}: {} ({} replicas, {} would move)",
            w.name, w.change, w.replicas, w.moved
        );
        if let Some(why) = &w.refused {
            println!("  refused: {why}");
        }
        if let Some(fit) = &w.fit {
            println!("  {fit}");
        }
        for r in w.rows.iter().take(ROWS_SHOWN) {
            let to = r.node.as_deref().unwrap_or("-");
            let what = match (&r.now, &r.node) {
                (_, None) => format!("unplaceable: {}", r.reason.as_deref().unwrap_or("")),
                (None, Some(_)) => "new".to_string(),
                (Some(now), Some(node)) if now == node => "stays".to_string(),
                (Some(now), Some(_)) => format!("moves from {now}"),
            };
            println!("  {:>5}  {to:<24} {what}", r.replica);
        }
        let more = w.replicas as usize - w.rows.len().min(ROWS_SHOWN);
        if more > 0 {
            println!("  ... and {more} more replicas (-o json lists up to 1000)");
        }
    }
    println!();
    match plan.moves_count {
        0 => println!("no replica of another workload would move"),
        n => {
            println!("{n} replicas of other workloads would move:");
            for m in plan.moves.iter().take(ROWS_SHOWN) {
                println!(
                    "  {:<32} {} -> {}",
                    m.replica,
                    m.from.as_deref().unwrap_or("-"),
                    m.to.as_deref().unwrap_or("nowhere")
                );
            }
            if n > ROWS_SHOWN {
                println!("  ... and {} more", n - ROWS_SHOWN);
            }
        }
    }
}
