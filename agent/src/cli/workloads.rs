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

/// Arguments of `shoal status`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal status\n  shoal status web\n  shoal status web -o json")]
pub struct StatusArgs {
    /// The workload; without it, the mesh at a glance.
    name: Option<String>,
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
        // A start that failed for a reason time does not fix (an image that does not exist,
        // a command not found): the first one says why, and waiting stops.
        if let Some((i, error)) = status.instances.iter().find_map(|i| {
            let at_version = i.spec_version.as_deref().is_none_or(|v| v == version);
            let error = [i.last_error.as_deref(), i.reason.as_deref()]
                .into_iter()
                .flatten()
                .find(|e| terminal_start_error(e))?;
            at_version.then_some((i, error))
        }) {
            eprintln!(
                "{name}: replica {} on {} cannot start: {error}",
                i.replica,
                i.node.as_deref().unwrap_or("-")
            );
            eprintln!(
                "{name}: not waiting for what retrying will not fix; correct the spec (or the \
                 host) and apply again (`shoal status {name}` shows every replica)"
            );
            return Ok(false);
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
                let why = super::when::with_relative_times(why, super::when::now_ms());
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

/// Whether a replica's start error is one no retry fixes: the image is not there and may not
/// be pulled, the registry says it has no such image or refuses it, the command or working
/// directory does not exist, the runtime cannot run the spec. An unreachable engine or registry
/// is not: it may come back.
fn terminal_start_error(error: &str) -> bool {
    const FOREVER: [&str; 4] = [
        "is not on this host and the spec says pull = \"never\"",
        "this runtime cannot run the workload",
        "does not exist on this host: create it or fix the spec",
        "not found: install it, or fix the spec",
    ];
    const NO_SUCH_IMAGE: [&str; 6] = [
        "manifest unknown",
        "not found",
        "pull access denied",
        "repository does not exist",
        "unauthorized",
        "invalid reference format",
    ];
    if FOREVER.iter().any(|m| error.contains(m)) {
        return true;
    }
    match error.split_once("pulling image ") {
        Some((_, rest)) => {
            let rest = rest.to_ascii_lowercase();
            rest.contains(" failed: ") && NO_SUCH_IMAGE.iter().any(|m| rest.contains(m))
        }
        None => false,
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
    // Whether it has data the delete leaves behind (or purges): asked before it is gone. A
    // workload the agent cannot show is left to the delete's own answer.
    let volumes = match call(
        &args.client,
        Request::Get {
            name: args.name.clone(),
        },
    ) {
        Ok(Response::Workload(w)) => Some(leaves_data(&w.spec)),
        _ => None,
    };
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
        if let Some(note) = delete_note(&deleted.name, volumes, args.purge_data) {
            println!("  {note}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether deleting a workload with this spec leaves data behind that `--purge-data` would
/// remove: a `data` volume, or a docker volume Shoal named (a `host` path or a docker volume
/// with a `source` is never Shoal's to remove).
fn leaves_data(spec: &shoal_core::spec::WorkloadSpec) -> bool {
    use shoal_core::spec::VolumeKind;
    spec.volumes.iter().any(|v| match v.kind {
        VolumeKind::Data => true,
        VolumeKind::Docker => v.source.is_none(),
        VolumeKind::Host => false,
    })
}

/// The line `delete` adds about data volumes: none for a workload without any (`Some(false)`);
/// when it could not be asked (`None`), what holds if it has some.
fn delete_note(name: &str, volumes: Option<bool>, purge: bool) -> Option<String> {
    match (volumes, purge) {
        (Some(false), _) => None,
        (_, true) => {
            Some("its data volumes are removed on every node once its instances there stop".into())
        }
        (_, false) => Some(format!(
            "its data volumes stay on each node under DATA_DIR/volumes/{name}/ \
             (`shoal delete {name} --purge-data` removes them)"
        )),
    }
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

/// The status's notes (`node: note`, one per node) with each text once, saying on which nodes
/// (`on n1, n2 and n3`, or `on 7 nodes: n1, n2, n3, ...` past [`NOTE_NODES_NAMED`]); in the
/// order each text first appears.
fn grouped_notes(notes: &[String]) -> Vec<String> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for note in notes {
        let (node, text) = note.split_once(": ").unwrap_or(("", note.as_str()));
        match groups.iter_mut().find(|(t, _)| *t == text) {
            Some((_, nodes)) => nodes.push(node),
            None => groups.push((text, vec![node])),
        }
    }
    groups
        .into_iter()
        .map(|(text, nodes)| {
            let nodes: Vec<&str> = nodes.into_iter().filter(|n| !n.is_empty()).collect();
            match nodes.len() {
                0 => text.to_string(),
                1 => format!("{text} (on {})", nodes[0]),
                n if n <= NOTE_NODES_NAMED => {
                    let (last, rest) = nodes.split_last().expect("two or more");
                    format!("{text} (on {} and {last})", rest.join(", "))
                }
                n => format!(
                    "{text} (on {n} nodes: {}, ...)",
                    nodes[..NOTE_NODES_NAMED].join(", ")
                ),
            }
        })
        .collect()
}

/// Nodes a grouped note names before it only counts them.
const NOTE_NODES_NAMED: usize = 3;

/// Shows where a workload's replicas are, or without a name the mesh at a glance.
pub fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let Some(name) = &args.name else {
        let overview = super::overview::gather(&args.client)?;
        match args.output {
            Output::Json => print_json(&overview),
            _ => print!("{}", super::overview::render(&overview)),
        }
        return Ok(ExitCode::SUCCESS);
    };
    let status = status_pages(&args.client, name)?;
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
    for note in grouped_notes(&status.notes) {
        println!("note: {note}");
    }
    // Only exclusive replicas have a fencing token: the column appears when one does.
    let tokens = status.instances.iter().any(|i| i.fence_token.is_some());
    let column = |text: &str| match tokens {
        true => format!("  {text:>13}  "),
        false => "  ".to_string(),
    };
    let token_header = column("FENCE TOKEN");
    let now_ms = super::when::now_ms();
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
        let reason = super::when::with_relative_times(reason, now_ms);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_notes_show_once_with_their_nodes() {
        let cgroup = "memory limits are not enforced (no cgroup v2 delegation)";
        let notes: Vec<String> = ["n1", "n2", "n3"]
            .iter()
            .map(|n| format!("{n}: {cgroup}"))
            .chain(["n2: ports are not reserved".to_string()])
            .collect();
        assert_eq!(
            grouped_notes(&notes),
            [
                format!("{cgroup} (on n1, n2 and n3)"),
                "ports are not reserved (on n2)".to_string()
            ]
        );
        let many: Vec<String> = (1..=7).map(|n| format!("n{n}: {cgroup}")).collect();
        assert_eq!(
            grouped_notes(&many),
            [format!("{cgroup} (on 7 nodes: n1, n2, n3, ...)")]
        );
    }

    #[test]
    fn delete_talks_about_volumes_only_when_there_are_some() {
        assert_eq!(delete_note("web", Some(false), false), None);
        assert_eq!(delete_note("web", Some(false), true), None);
        let kept = delete_note("db", Some(true), false).unwrap();
        assert!(kept.contains("shoal delete db --purge-data"), "{kept}");
        assert!(delete_note("db", None, true).unwrap().contains("removed"));
        let spec =
            |toml: &str| shoal_core::spec::WorkloadSpec::from_toml_str(toml, "t.toml").unwrap();
        let base = "name = \"web\"\n[process]\ncommand = [\"sleep\", \"9\"]\n\
                    [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";
        assert!(!leaves_data(&spec(base)));
        let with_data = format!("{base}[[volumes]]\nname = \"state\"\n");
        assert!(leaves_data(&spec(&with_data)));
    }

    #[test]
    fn start_errors_no_retry_fixes_stop_the_wait() {
        for terminal in [
            "image \"nope:1\" is not on this host and the spec says pull = \"never\": load it here",
            "pulling image \"nope:1\" failed: manifest unknown: manifest unknown",
            "pulling image \"ghcr.io/x/y:1\" failed: pull access denied for y",
            "working directory \"/srv\" does not exist on this host: create it or fix the spec",
            "command \"/no/such\" not found: install it, or fix the spec's command or PATH; \
             2 consecutive failures, next attempt at 2026-12-03 17:20:03.563Z (backoff)",
        ] {
            assert!(terminal_start_error(terminal), "{terminal}");
        }
        for passing in [
            "container engine unreachable: connection refused (is the Docker daemon running?)",
            "working directory \"/srv\" is being created",
            "pulling image \"a:1\" failed: Get https://registry-1.docker.io: i/o timeout",
            "exited with code 1",
            "",
        ] {
            assert!(!terminal_start_error(passing), "{passing}");
        }
    }
}
