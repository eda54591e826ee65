//! `shoal caps`: the most capacity one node may declare, for the whole mesh.

use std::process::ExitCode;

use anyhow::bail;
use shoal::identity::authority::caps::NodeCaps;
use shoal::wire::api::{Request, Response};
use shoal_core::resources::{parse_cpu_millis, parse_memory_bytes};

use super::connect::{call, ClientOpts, Output};

/// Arguments of `shoal caps`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal caps\n  shoal caps set --cpu 64 --memory 256Gi\n  shoal caps clear"
)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t, global = true)]
    output: Output,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Cap what any node may declare: placement counts the smaller of a node's --cpu/--memory
    /// and the cap; a node over it raises a `capacity-capped` issue.
    Set {
        /// Most CPU per node (`64`, `500m`).
        #[arg(long)]
        cpu: Option<String>,
        /// Most memory per node (`256Gi`).
        #[arg(long)]
        memory: Option<String>,
    },
    /// Remove the caps.
    Clear,
}

/// Runs `shoal caps`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let req = match args.command {
        None => Request::Caps,
        Some(Command::Clear) => Request::SetCaps {
            caps: NodeCaps::default(),
        },
        Some(Command::Set { cpu, memory }) => {
            if cpu.is_none() && memory.is_none() {
                bail!("give --cpu, --memory or both (`shoal caps clear` removes the caps)");
            }
            let cpu_millis_max = cpu
                .map(|t| parse_cpu_millis(&t).map_err(|e| anyhow::anyhow!("--cpu: {e}")))
                .transpose()?;
            let memory_bytes_max = memory
                .map(|t| parse_memory_bytes(&t).map_err(|e| anyhow::anyhow!("--memory: {e}")))
                .transpose()?;
            Request::SetCaps {
                caps: NodeCaps {
                    cpu_millis_max,
                    memory_bytes_max,
                },
            }
        }
    };
    let Response::Caps(caps) = call(&args.client, req)? else {
        bail!("unexpected answer from the agent");
    };
    if args.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&caps)?);
        return Ok(ExitCode::SUCCESS);
    }
    let show = |v: Option<u64>, human: fn(u64) -> String| v.map_or("none".to_string(), human);
    println!(
        "per-node caps: cpu {}, memory {}",
        show(caps.cpu_millis_max, shoal_core::resources::human_cpu_millis),
        show(
            caps.memory_bytes_max,
            shoal_core::resources::human_memory_bytes
        )
    );
    Ok(ExitCode::SUCCESS)
}
