//! `shoal logs NAME[/REPLICA]`: a replica's output, read on the node running it (any agent
//! forwards), and `--follow` to keep printing what it writes; and the hidden `shoal log-relay`
//! the process runtime runs beside each instance (`shoal::node::runtime::logs::relay`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shoal::node::runtime::logs::{line::rfc3339_ns, LogQuery, LogStart, PAGE_BYTES_MAX};
use shoal::wire::api::{LogsAnswer, Request, Response};

use super::connect::{session, session_call, ClientOpts};

/// How often `--follow` asks for more.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(100);
/// How long `--follow` keeps asking while the replica has no instance or its node does not
/// answer (a move, a restart) before giving up.
const FOLLOW_GAP_MAX: Duration = Duration::from_secs(60);
/// Most pages one read (without `--follow`) prints: 256 KiB each, so 256 MiB at most.
const PAGES_MAX: usize = 1024;

/// Arguments of `shoal logs`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal logs web/0\n  shoal logs web --tail 20 --follow\n  \
    shoal logs web/2 --since 10m --timestamps\n  shoal logs web/0 --previous"
)]
pub struct Args {
    /// The workload, and optionally one replica (`web/2`); without it, the lowest-numbered
    /// replica that has an instance.
    target: String,
    /// Keep printing new lines until interrupted (Ctrl-C), following the replica to a new
    /// instance or node.
    #[arg(short, long)]
    follow: bool,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    tail: Option<u32>,
    /// Only lines written in the last D (e.g. 10m, 1h30m, 45s).
    #[arg(long, value_name = "D")]
    since: Option<String>,
    /// The instance before the current one on the node running the replica (after a crash or a
    /// restart there).
    #[arg(short, long)]
    previous: bool,
    /// Print each line's time (UTC, ns) and stream.
    #[arg(short = 't', long)]
    timestamps: bool,
    #[command(flatten)]
    client: ClientOpts,
}

/// Runs `shoal logs`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (workload, replica) = match args.target.split_once('/') {
        Some((w, r)) => {
            let r = r.parse::<u32>().with_context(|| {
                format!(
                    "{:?}: the replica after / must be a number (web/0)",
                    args.target
                )
            })?;
            (w.to_string(), Some(r))
        }
        None => (args.target.clone(), None),
    };
    let since_ms = match &args.since {
        Some(text) => {
            let ago = shoal_core::spec::parse_duration_ms(text)
                .map_err(|e| anyhow::anyhow!("--since: {e}"))?;
            Some(wall_clock_ms().saturating_sub(ago))
        }
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let reader = Reader {
        args: &args,
        workload,
        replica,
        since_ms,
    };
    runtime.block_on(reader.run())?;
    Ok(ExitCode::SUCCESS)
}

struct Reader<'a> {
    args: &'a Args,
    workload: String,
    replica: Option<u32>,
    since_ms: Option<u64>,
}

impl Reader<'_> {
    fn request(&self, start: LogStart, instance: Option<String>) -> Request {
        Request::Logs {
            workload: self.workload.clone(),
            replica: self.replica,
            previous: self.args.previous,
            query: LogQuery {
                start,
                since_ms: self.since_ms,
                bytes_max: PAGE_BYTES_MAX,
                instance,
            },
        }
    }

    async fn run(&self) -> anyhow::Result<()> {
        let client = session(&self.args.client).await?;
        let call = |req: Request| {
            let client = &client;
            async move {
                match session_call(client, &self.args.client, &req).await? {
                    Response::Logs(answer) => Ok(*answer),
                    _ => bail!("unexpected answer from the agent"),
                }
            }
        };
        let first = match self.args.tail {
            Some(n) => LogStart::Tail(n),
            None => LogStart::Beginning,
        };
        let mut answer = call(self.request(first, None)).await?;
        let mut pages = 1;
        let mut lines = answer.page.lines.len();
        self.print(&answer);
        // Without --follow: page to the end of what is kept.
        while answer.page.more && pages < PAGES_MAX {
            let start = LogStart::After(answer.page.cursor);
            answer = call(self.request(start, Some(answer.page.instance.clone()))).await?;
            lines += answer.page.lines.len();
            self.print(&answer);
            pages += 1;
        }
        // A silent replica says so (on stderr: stdout stays the replica's own output).
        if lines == 0 {
            eprintln!(
                "{}",
                empty_note(
                    &format!("{}/{}", self.workload, answer.replica),
                    &answer.node,
                    self.args.since.as_deref(),
                    self.args.previous,
                    self.args.follow
                )
            );
        }
        if !self.args.follow {
            return Ok(());
        }
        let mut last = answer;
        let mut failing_since: Option<Instant> = None;
        loop {
            if !last.page.more {
                tokio::time::sleep(FOLLOW_INTERVAL).await;
            }
            let start = LogStart::After(last.page.cursor);
            let req = self.request(start, Some(last.page.instance.clone()));
            match call(req).await {
                Ok(answer) => {
                    failing_since = None;
                    if (answer.node.as_str(), answer.page.instance.as_str())
                        != (last.node.as_str(), last.page.instance.as_str())
                    {
                        eprintln!(
                            "-- {}/{}: now instance {} on {}",
                            self.workload, answer.replica, answer.page.instance, answer.node
                        );
                    }
                    self.print(&answer);
                    last = answer;
                }
                Err(e) => {
                    let since = *failing_since.get_or_insert_with(|| {
                        eprintln!("-- {e:#}; still trying");
                        Instant::now()
                    });
                    if since.elapsed() > FOLLOW_GAP_MAX {
                        return Err(e.context(format!(
                            "gave up following after {} s without an answer",
                            FOLLOW_GAP_MAX.as_secs()
                        )));
                    }
                }
            }
        }
    }

    fn print(&self, answer: &LogsAnswer) {
        use std::io::Write;
        if answer.page.skipped {
            eprintln!("-- some lines were rotated away before they could be read");
        }
        let mut out = std::io::stdout().lock();
        for line in &answer.page.lines {
            let end = if line.partial { "" } else { "\n" };
            if self.args.timestamps {
                let at = rfc3339_ns(line.at_ns);
                let _ = write!(out, "{at} {} {}{end}", line.stream.as_str(), line.text);
            } else {
                let _ = write!(out, "{}{end}", line.text);
            }
        }
        let _ = out.flush();
    }
}

/// What `shoal logs` says when a replica's instance printed nothing (of what was asked).
fn empty_note(
    replica: &str,
    node: &str,
    since: Option<&str>,
    previous: bool,
    follow: bool,
) -> String {
    let which = match previous {
        true => format!("the previous instance of {replica} on {node}"),
        false => format!("{replica} on {node}"),
    };
    let when = match since {
        Some(d) => format!(" in the last {d}"),
        None => String::new(),
    };
    let yet = if previous { "" } else { " yet" };
    let follow = if follow { "; following" } else { "" };
    format!("(no output{yet} from {which}{when}{follow})")
}

fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Arguments of the hidden `shoal log-relay` (started by the process runtime, not by hand).
#[derive(Debug, clap::Args)]
pub struct RelayArgs {
    /// The instance's log directory.
    #[arg(long)]
    dir: PathBuf,
    /// Most bytes of all its files together.
    #[arg(long)]
    max_bytes: u64,
    /// Files the bound is spread over.
    #[arg(long)]
    files: u32,
}

/// Runs the relay: stdin is the instance's stdout pipe, stdout its stderr pipe.
pub fn relay(args: RelayArgs) -> anyhow::Result<ExitCode> {
    shoal::node::runtime::logs::relay::run(&args.dir, args.max_bytes, args.files)
        .with_context(|| format!("relaying output into {}", args.dir.display()))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::empty_note;

    #[test]
    fn a_silent_replica_says_so() {
        assert_eq!(
            empty_note("web/0", "n2", None, false, false),
            "(no output yet from web/0 on n2)"
        );
        assert_eq!(
            empty_note("web/0", "n2", Some("10m"), false, true),
            "(no output yet from web/0 on n2 in the last 10m; following)"
        );
        assert_eq!(
            empty_note("web/1", "n3", None, true, false),
            "(no output from the previous instance of web/1 on n3)"
        );
    }
}
