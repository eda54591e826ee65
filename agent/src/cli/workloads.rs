//! `shoal apply`, `get`, `delete`, `status`: the desired state, through any agent.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde::Serialize;
use shoal::wire::api::{Request, Response, StatusView, WorkloadSummary, PAGE_ITEMS_MAX};
use shoal_core::hlc::format_version;
use shoal_core::resources::{format_cpu_millis, format_memory_bytes};
use shoal_core::spec::format_duration_ms;

use super::connect::{call, call_pages, ClientOpts, Output};
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
    /// Wait until every replica runs the new version and is healthy, showing progress.
    #[arg(long)]
    wait: bool,
    /// Give up waiting after this long (exit 1 with the reason).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    wait_timeout: std::time::Duration,
}

pub(super) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    shoal_core::spec::parse_duration_ms(text)
        .map(std::time::Duration::from_millis)
        .map_err(|e| e.to_string())
}

/// Arguments of `shoal get`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal get\n  shoal get web -o json\n  shoal get web --spec > web.toml"
)]
pub struct GetArgs {
    /// Only this workload.
    name: Option<String>,
    /// Print the workload's whole spec as the mesh holds it, in TOML (every default written
    /// out), which `shoal apply -f` takes back. Needs NAME.
    #[arg(long, requires = "name", conflicts_with = "output")]
    spec: bool,
    /// With --spec: print the `secret_env` values instead of `<secret>`. Needs a client
    /// certificate with write access; the agent records who asked (an event).
    #[arg(long, requires = "spec")]
    show_secrets: bool,
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

/// Arguments of `shoal delete`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal delete web\n  shoal delete db --purge-data")]
pub struct DeleteArgs {
    /// The workload.
    name: String,
    /// Also remove its data volumes (kind "data", and the docker volumes Shoal named) on every
    /// node once no instance of it runs there; nodes down now purge when they return, within
    /// the tombstone's grace period. Host paths are never touched.
    #[arg(long)]
    purge_data: bool,
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
    let Some(specs) = super::validate::load_all(&args.files) else {
        eprintln!("nothing applied: fix the problems above first");
        return Ok(ExitCode::from(EXIT_FAILURE));
    };
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
                format_version(&a.version),
                a.durable_on.join(", ")
            );
            if let Some(note) = &a.note {
                println!("  note: {note}");
            }
        }
    }
    if args.wait {
        for a in &applied {
            if !wait_rollout(&args.client, &a.name, &a.version, args.wait_timeout)? {
                return Ok(ExitCode::from(EXIT_FAILURE));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `pulling IMAGE: 1.2 of 2.0 MB`, or without sizes before the engine reported any.
fn pull_line(pull: &shoal_core::instance::PullProgress) -> String {
    let mb = |bytes: u64| bytes as f64 / 1e6;
    match pull.total_bytes {
        0 => format!("pulling {}", pull.image),
        total => format!(
            "pulling {}: {:.1} of {:.1} MB",
            pull.image,
            mb(pull.done_bytes),
            mb(total)
        ),
    }
}

/// Polls in a row that see unplaceable replicas before `apply --wait` gives up on them.
const UNPLACEABLE_POLLS: u32 = 3;

/// Polls `status` until every replica of `name` runs `version` healthy. Prints progress on
/// stderr; on timeout prints why the missing replicas are missing and returns false.
pub(super) fn wait_rollout(
    client: &ClientOpts,
    name: &str,
    version: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<bool> {
    let start = std::time::Instant::now();
    let shown_version = format_version(version);
    let mut last_line = String::new();
    let mut unplaceable_polls = 0;
    loop {
        let status = status_pages(client, name)?;
        let ready: std::collections::BTreeSet<u32> = status
            .instances
            .iter()
            .filter(|i| {
                i.phase == "running"
                    && i.healthy == Some(true)
                    && i.spec_version.as_deref() == Some(version)
            })
            .map(|i| i.replica)
            .collect();
        let pulls: Vec<String> = status
            .instances
            .iter()
            .filter_map(|i| {
                Some(format!(
                    "replica {} {}",
                    i.replica,
                    pull_line(i.pull.as_ref()?)
                ))
            })
            .take(3)
            .collect();
        let pulling = match pulls.is_empty() {
            true => String::new(),
            false => format!("; {}", pulls.join("; ")),
        };
        let line = format!(
            "{name}: {}/{} replicas healthy at version {shown_version} ({:.0} s){pulling}",
            ready.len(),
            status.desired,
            start.elapsed().as_secs_f64()
        );
        if line != last_line {
            eprintln!("{line}");
            last_line = line;
        }
        if ready.len() as u32 >= status.desired {
            return Ok(true);
        }
        // Replicas no node can take do not come by waiting: after a few polls in a row, say
        // how much fits and why, and stop.
        let unplaceable = status
            .instances
            .iter()
            .filter(|i| i.phase == "unschedulable")
            .count();
        unplaceable_polls = if unplaceable > 0 {
            unplaceable_polls + 1
        } else {
            0
        };
        if unplaceable_polls >= UNPLACEABLE_POLLS {
            let summary = status
                .fit
                .clone()
                .unwrap_or_else(|| format!("{unplaceable} replicas of {name} fit on no node"));
            eprintln!("{name}: {summary}");
            eprintln!(
                "{name}: not waiting for replicas no node can take; scale it down, free room or \
                 add nodes that can run it (`shoal status {name}` lists each replica's reason)"
            );
            return Ok(false);
        }
        if !status.version.is_empty() && status.version != version {
            // An automatic rollback (or a newer apply) replaced the version waited for.
            eprintln!(
                "{name}: the desired version is now {}, not {shown_version}: the rollout failed \
                 and was rolled back, or a newer apply replaced it; see `shoal rollout status \
                 {name}` and `shoal history {name}`",
                format_version(&status.version)
            );
            return Ok(false);
        }
        if start.elapsed() >= timeout {
            let waited = format_duration_ms(timeout.as_millis().try_into().unwrap_or(u64::MAX));
            eprintln!("{name}: gave up after {waited}; replicas not ready:");
            for i in status
                .instances
                .iter()
                .filter(|i| !ready.contains(&i.replica))
            {
                let why = i
                    .reason
                    .as_deref()
                    .or(i.last_error.as_deref())
                    .unwrap_or("no reason reported yet");
                eprintln!(
                    "  replica {} on {}: {} ({why})",
                    i.replica,
                    i.node.as_deref().unwrap_or("-"),
                    i.phase
                );
            }
            eprintln!("see `shoal issues` and `shoal events` for what the agents are doing");
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

#[derive(Serialize)]
struct GetRow<'a> {
    name: &'a str,
    replicas: u32,
    version: &'a str,
}

/// Lists workloads: every page of the list, or the one named.
pub fn get(args: GetArgs) -> anyhow::Result<ExitCode> {
    let views = match args.name {
        Some(name) => {
            let ask = match args.show_secrets {
                true => Request::GetSecrets {
                    name,
                    since: Default::default(),
                },
                false => Request::Get { name },
            };
            let Response::Workload(w) = call(&args.client, ask)? else {
                bail!("unexpected answer from the agent");
            };
            if args.spec {
                print!("{}", w.spec.to_toml_string());
                return Ok(ExitCode::SUCCESS);
            }
            vec![WorkloadSummary {
                name: w.name,
                replicas: w.replicas,
                version: w.version,
                cpu_millis: w.spec.resources.cpu_millis,
                memory_bytes: w.spec.resources.memory_bytes,
            }]
        }
        None => call_pages(
            &args.client,
            |after| Request::List {
                after,
                limit: PAGE_ITEMS_MAX,
            },
            |answer| match answer {
                Response::Workloads {
                    workloads,
                    next_after,
                } => Some((workloads, next_after)),
                _ => None,
            },
        )?,
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
            format_cpu_millis(v.cpu_millis),
            format_memory_bytes(v.memory_bytes),
            format_version(&v.version)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes a workload everywhere.
pub fn delete(args: DeleteArgs) -> anyhow::Result<ExitCode> {
    let request = Request::Delete {
        name: args.name,
        purge_data: args.purge_data,
    };
    let Response::Deleted(deleted) = call(&args.client, request)? else {
        bail!("unexpected answer from the agent");
    };
    if args.output == Output::Json {
        print_json(&deleted);
    } else {
        println!(
            "{}: deleted (version {}, durable on {})",
            deleted.name,
            format_version(&deleted.version),
            deleted.durable_on.join(", ")
        );
        if args.purge_data {
            println!("  its data volumes are removed on every node once its instances there stop");
        } else {
            println!(
                "  its data volumes stay on each node under DATA_DIR/volumes/{}/ \
                 (`shoal delete {} --purge-data` removes them)",
                deleted.name, deleted.name
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A workload's status: every page, in one view (name, desired and version as the first page
/// has them; each note once).
pub(super) fn status_pages(client: &ClientOpts, name: &str) -> anyhow::Result<StatusView> {
    let pages = call_pages(
        client,
        |after| Request::Status {
            name: name.to_string(),
            after,
            limit: PAGE_ITEMS_MAX,
        },
        |answer| match answer {
            Response::Status { view, next_after } => Some((vec![*view], next_after)),
            _ => None,
        },
    )?;
    let mut pages = pages.into_iter();
    let mut status = pages.next().context("the agent sent no status")?;
    for page in pages {
        status.instances.extend(page.instances);
        for note in page.notes {
            if !status.notes.contains(&note) {
                status.notes.push(note);
            }
        }
    }
    Ok(status)
}

/// Shows where a workload's replicas are.
pub fn status(args: NameArgs) -> anyhow::Result<ExitCode> {
    let status = status_pages(&args.client, &args.name)?;
    if args.output == Output::Json {
        print_json(&status);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} desired, version {}",
        status.name,
        status.desired,
        format_version(&status.version)
    );
    if let Some(fit) = &status.fit {
        println!("{fit}");
    }
    for note in &status.notes {
        println!("note: {note}");
    }
    // Only exclusive replicas have a fencing token: the column appears when one does.
    let tokens = status.instances.iter().any(|i| i.fence_token.is_some());
    let column = |text: &str| match tokens {
        true => format!("  {text:>13}  "),
        false => "  ".to_string(),
    };
    let token_header = column("FENCE TOKEN");
    println!(
        "{:>7}  {:<24} {:<14} {:<8} {:>8}{token_header}REASON",
        "REPLICA", "NODE", "PHASE", "HEALTHY", "RESTARTS"
    );
    for i in &status.instances {
        let healthy = match i.healthy {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let pulling = i.pull.as_ref().map(pull_line);
        // A replica away from its data says where the data is.
        let away = i
            .data_on
            .as_deref()
            .filter(|&d| i.node.as_deref() != Some(d))
            .map(|d| format!("its data is on {d}"));
        let reason = i
            .reason
            .as_deref()
            .or(pulling.as_deref())
            .or(i.last_error.as_deref())
            .or(away.as_deref())
            .unwrap_or("");
        let token = column(&i.fence_token.map_or("-".to_string(), |t| t.to_string()));
        println!(
            "{:>7}  {:<24} {:<14} {:<8} {:>8}{token}{}",
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
