//! `shoal restart NAME[/REPLICA]`: every replica replaced at the pace of `[update]` (a new
//! version with a new `restarted_at` stamp), or one replica's instance restarted on its node.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use shoal::wire::api::{Request, Response};
use shoal_core::hlc::format_version;

use super::connect::{call, ClientOpts};
use super::workloads::{parse_duration, status_pages, wait_rollout};
use super::EXIT_FAILURE;

/// Arguments of `shoal restart`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal restart web            \
    # every replica, rolling, as [update] says\n  shoal restart web/2 --wait   \
    # replica 2 only, at once, on its node")]
pub struct Args {
    /// The workload, or one replica as NAME/REPLICA.
    target: String,
    #[command(flatten)]
    client: ClientOpts,
    /// Wait until the restarted replicas run again and are healthy.
    #[arg(long)]
    wait: bool,
    /// Give up waiting after this long (exit 1 with the reason).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    wait_timeout: Duration,
}

/// Sends the restart and, with `--wait`, follows it.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (name, replica) = match args.target.split_once('/') {
        None => (args.target.clone(), None),
        Some((name, r)) => match r.parse::<u32>() {
            Ok(r) => (name.to_string(), Some(r)),
            Err(_) => bail!(
                "{:?}: expected NAME or NAME/REPLICA with a replica number",
                args.target
            ),
        },
    };
    let before = match replica {
        Some(r) if args.wait => since_of(&args.client, &name, r)?,
        _ => None,
    };
    let req = Request::Restart {
        workload: name.clone(),
        replica,
    };
    match call(&args.client, req)? {
        Response::Applied(applied) => {
            let Some(a) = applied.first() else {
                bail!("the agent answered the restart with no workload");
            };
            println!(
                "{name}: restarting every replica at the pace of its [update] (version {}, \
                 durable on {})",
                format_version(&a.version),
                a.durable_on.join(", ")
            );
            if let Some(note) = &a.note {
                println!("  note: {note}");
            }
            if args.wait && !wait_rollout(&args.client, &name, &a.version, args.wait_timeout)? {
                return Ok(ExitCode::from(EXIT_FAILURE));
            }
        }
        Response::Restarted {
            replica: which,
            node,
            instance,
        } => {
            println!("{which}: restarting instance {instance} on {node}");
            if let Some(r) = replica.filter(|_| args.wait) {
                return wait_replica(&args.client, &name, r, before, args.wait_timeout);
            }
        }
        _ => bail!("unexpected answer from the agent"),
    }
    Ok(ExitCode::SUCCESS)
}

/// When the running, healthy instance of `name/replica` started, if one runs.
fn since_of(client: &ClientOpts, name: &str, replica: u32) -> anyhow::Result<Option<u64>> {
    let status = status_pages(client, name)?;
    Ok(status
        .instances
        .iter()
        .filter(|i| i.replica == replica && i.phase == "running")
        .filter_map(|i| i.since_ms)
        .max())
}

/// Polls until an instance of `name/replica` other than the one that started at `before` runs
/// healthy.
fn wait_replica(
    client: &ClientOpts,
    name: &str,
    replica: u32,
    before: Option<u64>,
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    loop {
        let status = status_pages(client, name)?;
        let mine: Vec<_> = status
            .instances
            .iter()
            .filter(|i| i.replica == replica)
            .collect();
        let again = mine
            .iter()
            .any(|i| i.phase == "running" && i.healthy == Some(true) && i.since_ms != before);
        if again {
            println!("{name}/{replica}: running and healthy again");
            return Ok(ExitCode::SUCCESS);
        }
        if start.elapsed() >= timeout {
            let now: Vec<String> = mine
                .iter()
                .map(|i| {
                    let why = i
                        .reason
                        .as_deref()
                        .or(i.last_error.as_deref())
                        .unwrap_or("-");
                    format!(
                        "{} on {}: {why}",
                        i.phase,
                        i.node.as_deref().unwrap_or("no node")
                    )
                })
                .collect();
            eprintln!(
                "{name}/{replica}: not running healthy again after {timeout:?}: {}",
                now.join("; ")
            );
            return Ok(ExitCode::from(EXIT_FAILURE));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
