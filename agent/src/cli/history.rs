//! `shoal history NAME` and `shoal rollout undo NAME [--to VERSION]`.

use std::process::ExitCode;

use anyhow::bail;
use shoal::wire::api::{Request, Response};
use shoal_core::hlc::format_version;
use shoal_core::rollout::{Outcome, RolloutPhase};

use super::connect::{call, ClientOpts, Output};

/// Arguments of `shoal history`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal history web\n  shoal history web -o json")]
pub struct HistoryArgs {
    /// The workload.
    name: String,
    #[command(flatten)]
    client: ClientOpts,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    output: Output,
}

/// Arguments of `shoal rollout`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal rollout undo web\n  shoal rollout undo web --to \"2026-12-03 17:20:03.563Z by n2\"\n  shoal rollout status web\n  shoal rollout pause web; shoal rollout resume web"
)]
pub struct RolloutArgs {
    #[command(subcommand)]
    command: RolloutCommand,
}

#[derive(Debug, clap::Subcommand)]
enum RolloutCommand {
    /// Where the rollout of the current version stands: complete, in progress or paused, and
    /// each replica's version and health (from any agent).
    Status {
        /// The workload.
        name: String,
        #[command(flatten)]
        client: ClientOpts,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t)]
        output: Output,
    },
    /// Apply a past version's content again, as a new version (default: the one before the
    /// current); the current one joins the history.
    Undo {
        /// The workload.
        name: String,
        /// The past version to go back to, as `shoal history NAME` shows it
        /// (`"2026-12-03 17:20:03.563Z by n2"`) or as `-o json` spells it (`1796318403563.0@n2`).
        #[arg(long, value_parser = parse_version)]
        to: Option<String>,
        #[command(flatten)]
        client: ClientOpts,
    },
    /// Keep the instances of older versions as they are (no replacement) until `resume`;
    /// missing replicas still start at the desired version.
    Pause {
        /// The workload.
        name: String,
        #[command(flatten)]
        client: ClientOpts,
    },
    /// Let a paused rollout go on.
    Resume {
        /// The workload.
        name: String,
        #[command(flatten)]
        client: ClientOpts,
    },
}

/// `--to` in any form a version is shown in, sent raw (what every agent build compares).
fn parse_version(text: &str) -> Result<String, String> {
    shoal_core::hlc::Version::parse_any(text).map(|v| v.to_string())
}

/// Who asked for a version, for people: an undo names the version it went back to raw in the
/// store (`alice (client), undo to 1796318403563.0@n1`); shown as time and node.
fn shown_by(by: &str) -> String {
    match by.rsplit_once(", undo to ") {
        Some((who, version)) => format!("{who}, undo to {}", format_version(version)),
        None => by.to_string(),
    }
}

/// Runs `shoal history`.
pub fn history(args: HistoryArgs) -> anyhow::Result<ExitCode> {
    let req = Request::History {
        name: args.name.clone(),
    };
    let Response::History { versions, .. } = call(&args.client, req)? else {
        bail!("unexpected answer from the agent");
    };
    if args.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&versions)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<34} {:<11} {:>8}  {:<28} RUNS",
        "VERSION", "OUTCOME", "REPLICAS", "BY"
    );
    for v in &versions {
        let outcome = match (&v.outcome, v.current) {
            (Some(o), _) => o.as_str(),
            (None, true) => "(current)",
            (None, false) => "-",
        };
        println!(
            "{:<34} {:<11} {:>8}  {:<28} {}",
            format_version(&v.version),
            outcome,
            v.replicas,
            shown_by(&v.by),
            v.runs
        );
        if !v.reason.is_empty() {
            println!("    why: {}", v.reason);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `shoal rollout`.
pub fn rollout(args: RolloutArgs) -> anyhow::Result<ExitCode> {
    let (name, paused, client) = match args.command {
        RolloutCommand::Pause { name, client } => (name, true, client),
        RolloutCommand::Resume { name, client } => (name, false, client),
        RolloutCommand::Undo { name, to, client } => return undo(name, to, client),
        RolloutCommand::Status {
            name,
            client,
            output,
        } => return status(name, client, output),
    };
    let Response::Paused { name, paused } = call(&client, Request::Pause { name, paused })? else {
        bail!("unexpected answer from the agent");
    };
    match paused {
        true => println!(
            "{name}: rollout paused; older instances stay until `shoal rollout resume {name}`"
        ),
        false => println!("{name}: rollout resumed"),
    }
    Ok(ExitCode::SUCCESS)
}

fn undo(name: String, to: Option<String>, client: ClientOpts) -> anyhow::Result<ExitCode> {
    let Response::Applied(applied) = call(&client, Request::Undo { name, to })? else {
        bail!("unexpected answer from the agent");
    };
    for a in &applied {
        let verb = if a.changed {
            "rolled back"
        } else {
            "unchanged (the past version's content is the current one)"
        };
        println!(
            "{}: {verb} (new version {}, durable on {})",
            a.name,
            format_version(&a.version),
            a.durable_on.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One replica's place in a rollout.
#[derive(Debug, serde::Serialize)]
struct ReplicaProgress {
    replica: u32,
    /// Versions of its running instances.
    running: Vec<String>,
    /// A running instance at the desired version is healthy.
    updated: bool,
}

/// `shoal rollout status NAME`.
#[derive(Debug, serde::Serialize)]
struct RolloutView {
    name: String,
    /// The desired version.
    version: String,
    /// `in progress`, `paused`, `complete`, `failed` (more than `failure_threshold` replicas
    /// failed at it: rolled back next if it can be, else for an operator), `rolling back` (the
    /// current version is an automatic rollback, still rolling out) or `rolled back` (and done).
    state: &'static str,
    /// The current version is an automatic rollback: from which version, and why.
    rolled_back_from: Option<RolledBackFrom>,
    /// Why it failed, when it did.
    reason: Option<String>,
    /// The store records the outcome (complete or failed): every agent reads the same.
    recorded: bool,
    desired: u32,
    /// Replicas with a healthy running instance at the desired version.
    updated: u32,
    /// Replicas with a failed copy at the desired version, as the answering agent assessed.
    failed: Vec<shoal_core::rollout::FailedReplica>,
    replicas: Vec<ReplicaProgress>,
}

/// Where an automatic rollback came from.
#[derive(Debug, serde::Serialize)]
struct RolledBackFrom {
    version: String,
    reason: String,
}

fn status(name: String, client: ClientOpts, output: Output) -> anyhow::Result<ExitCode> {
    let req = Request::History { name: name.clone() };
    let Response::History {
        paused,
        versions,
        record,
        assessment,
        ..
    } = call(&client, req)?
    else {
        bail!("unexpected answer from the agent");
    };
    let rolled_back_from = versions
        .get(1)
        .filter(|v| v.outcome.as_deref() == Some(Outcome::RolledBack.as_str()))
        .map(|v| RolledBackFrom {
            version: v.version.clone(),
            reason: v.reason.clone(),
        });
    let status = super::workloads::status_pages(&client, &name)?;
    let mut replicas: Vec<ReplicaProgress> = (0..status.desired)
        .map(|replica| ReplicaProgress {
            replica,
            running: Vec::new(),
            updated: false,
        })
        .collect();
    for i in &status.instances {
        let (Some(progress), Some(version)) = (
            replicas.get_mut(i.replica as usize),
            i.spec_version.as_ref(),
        ) else {
            continue;
        };
        if i.phase == "running" {
            progress.running.push(version.clone());
            progress.updated |= *version == status.version && i.healthy == Some(true);
        }
    }
    let updated = replicas.iter().filter(|r| r.updated).count() as u32;
    // The store's record settles it; before that, the answering agent's assessment (the same
    // rules every agent applies), then what the status shows.
    let assessed = assessment.as_ref().map(|a| a.phase);
    let (done, reason) = match (&record, paused, assessed) {
        (_, true, _) => (None, None),
        (Some(r), _, _) if r.outcome == Outcome::Failed => (Some(false), Some(r.reason.clone())),
        // Recorded complete, and every replica runs the version now: a replica that lost its
        // copy since (a dead node, an unplaceable one) keeps the state from saying complete.
        (Some(_), _, _) => (Some(updated == status.desired), None),
        (None, _, Some(RolloutPhase::Failed)) => {
            (Some(false), assessment.as_ref().map(|a| a.reason()))
        }
        // The spec's replica count: the status may not have placed them yet.
        (None, _, _) => {
            let replicas = versions.first().map_or(status.desired, |v| v.replicas);
            (Some(updated == replicas && updated == status.desired), None)
        }
    };
    let state = match (paused, done, reason.is_some(), rolled_back_from.is_some()) {
        (true, ..) => "paused",
        (false, _, true, _) => "failed",
        (false, Some(true), false, true) => "rolled back",
        (false, Some(true), false, false) => "complete",
        (false, Some(false), false, false) if record.is_some() => "degraded",
        (false, _, false, true) => "rolling back",
        (false, _, false, false) => "in progress",
    };
    let view = RolloutView {
        name,
        version: status.version.clone(),
        state,
        rolled_back_from,
        reason,
        recorded: record.is_some(),
        desired: status.desired,
        updated,
        failed: assessment.map(|a| a.failed).unwrap_or_default(),
        replicas,
    };
    if output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} ({} of {} replicas updated and healthy at {})",
        view.name,
        view.state,
        view.updated,
        view.desired,
        format_version(&view.version)
    );
    if let Some(from) = &view.rolled_back_from {
        println!(
            "  an automatic rollback from version {}: {}",
            format_version(&from.version),
            from.reason
        );
    }
    if let Some(reason) = &view.reason {
        println!("  why: {reason}");
    }
    for f in &view.failed {
        println!("  failed: replica {} on {}: {}", f.replica, f.node, f.why);
    }
    for r in &view.replicas {
        let running: Vec<String> = r.running.iter().map(|v| format_version(v)).collect();
        let mark = if r.updated { "updated" } else { "waiting" };
        println!("{:>7}  {:<8} {}", r.replica, mark, running.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_takes_every_form_a_version_is_shown_in() {
        let raw = "1796318403563.0@n1";
        assert_eq!(parse_version(raw).as_deref(), Ok(raw));
        assert_eq!(
            parse_version(&format_version(raw)).as_deref(),
            Ok(raw),
            "the history's text form"
        );
        assert_eq!(
            parse_version("2026-12-03 17:20:03.563Z #2 by n1").as_deref(),
            Ok("1796318403563.2@n1")
        );
        let err = parse_version("last tuesday").unwrap_err();
        assert!(err.contains("as `shoal history` shows it"), "{err}");
    }

    #[test]
    fn an_undo_names_its_version_for_people() {
        assert_eq!(
            shown_by("alice (client), undo to 1796318403563.0@n1"),
            "alice (client), undo to 2026-12-03 17:20:03.563Z by n1"
        );
        assert_eq!(shown_by("alice (client)"), "alice (client)");
    }
}
