//! `shoal exec NAME/REPLICA -- CMD ARGS...`: run a command in a running replica, on the node
//! running it (any agent forwards), its stdout and stderr printed as they come, its exit code
//! this command's. The session is polled over the request/response API (`shoal::node::exec`): each
//! poll carries the stdin read so far (with `-i`) and the output offset received so far.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use shoal::node::exec::STDIN_CHUNK_BYTES_MAX;
use shoal::node::runtime::exec::TtySize;
use shoal::node::runtime::logs::Stream;
use shoal::wire::api::{ExecInput, ExecOutput, Request, Response};
use tokio::sync::mpsc;

use super::connect::{session, session_call, ClientOpts};

/// Attempts of one poll before giving up (a lost answer is asked again: offsets make it safe).
const POLL_ATTEMPTS: u32 = 3;
/// The pause between attempts.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Exit code when `--kill-after` killed the command (as timeout(1)).
const EXIT_KILLED_AFTER: u8 = 124;
/// Exit code after Ctrl-C (128 + SIGINT, as shells report).
const EXIT_INTERRUPTED: u8 = 130;

/// Arguments of `shoal exec`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  shoal exec web/0 -- ls -l\n  \
    shoal exec db/0 -i -- psql < dump.sql\n  shoal exec -it web/0 -- sh\n  \
    shoal exec web/1 --kill-after 30s -- sh -c 'env'")]
pub struct Args {
    /// The workload and replica (`web/0`).
    target: String,
    /// Pass this command's stdin to the command (otherwise its stdin is closed).
    #[arg(short = 'i', long = "stdin")]
    stdin: bool,
    /// Give the command a terminal the size of this one (implies -i; stdin must be a terminal).
    /// This terminal is in raw mode until the command ends: every key, Ctrl-C included, goes
    /// to the command, and its output comes as it writes it.
    #[arg(short = 't', long = "tty")]
    tty: bool,
    /// Kill the command after D (e.g. 30s, 5m) and exit 124.
    #[arg(long, value_name = "D")]
    kill_after: Option<String>,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
    #[command(flatten)]
    client: ClientOpts,
}

/// Runs `shoal exec`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some((workload, replica)) = args.target.split_once('/') else {
        bail!(
            "{:?}: name the replica, as NAME/REPLICA (web/0): exec runs in one instance",
            args.target
        );
    };
    let replica = replica.parse::<u32>().with_context(|| {
        format!(
            "{:?}: the replica after / must be a number (web/0)",
            args.target
        )
    })?;
    shoal::node::exec::check_command(&args.command)?;
    let kill_after = match &args.kill_after {
        Some(text) => Some(Duration::from_millis(
            shoal_core::spec::parse_duration_ms(text)
                .map_err(|e| anyhow::anyhow!("--kill-after: {e}"))?,
        )),
        None => None,
    };
    let tty = if args.tty {
        Some(terminal_size()?)
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let start = Request::Exec {
        workload: workload.to_string(),
        replica,
        command: args.command.clone(),
        stdin: args.stdin || args.tty,
        tty,
    };
    // Raw from here to the end (the guard restores the terminal however this returns).
    let _raw = if args.tty {
        Some(RawMode::enter()?)
    } else {
        None
    };
    runtime.block_on(drive(&args, start, kill_after))
}

async fn drive(
    args: &Args,
    start: Request,
    kill_after: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    let client = session(&args.client).await?;
    let (node, session_id) = match session_call(&client, &args.client, &start).await? {
        Response::ExecStarted { node, session } => (node, session),
        _ => bail!("unexpected answer from the agent"),
    };
    let interactive = args.stdin || args.tty;
    let mut stdin = interactive.then(read_stdin);
    let resized = if args.tty { Some(watch_size()?) } else { None };
    // Stdin read and not yet accepted by the session, from offset `accepted`.
    let mut pending: Vec<u8> = Vec::new();
    let mut accepted = 0u64;
    let mut stdin_done = !interactive;
    let mut output_offset = 0u64;
    let deadline = kill_after.map(|d| tokio::time::Instant::now() + d);
    let poll = |io: ExecInput| {
        let req = Request::ExecIo {
            node: node.clone(),
            session: session_id,
            io,
        };
        let client = &client;
        async move {
            let mut attempt = 1;
            loop {
                match session_call(client, &args.client, &req).await {
                    Ok(Response::ExecOutput(output)) => return Ok(*output),
                    Ok(_) => bail!("unexpected answer from the agent"),
                    Err(e) if attempt >= POLL_ATTEMPTS => return Err(e),
                    Err(_) => {
                        attempt += 1;
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                }
            }
        }
    };
    loop {
        if let Some(rx) = &mut stdin {
            while pending.len() < STDIN_CHUNK_BYTES_MAX {
                match rx.try_recv() {
                    Ok(bytes) => pending.extend_from_slice(&bytes),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        stdin_done = true;
                        break;
                    }
                }
            }
        }
        let send = pending.len().min(STDIN_CHUNK_BYTES_MAX);
        let io = ExecInput {
            stdin_offset: accepted,
            stdin: pending[..send].to_vec(),
            stdin_eof: interactive && stdin_done && send == pending.len(),
            output_offset,
            close: false,
            resize: resized
                .as_ref()
                .and_then(|r| r.lock().expect("size lock").take()),
        };
        let answer = tokio::select! {
            answer = poll(io) => answer?,
            _ = tokio::signal::ctrl_c() => {
                close(&poll, output_offset).await;
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            }
            _ = sleep_until(deadline) => {
                close(&poll, output_offset).await;
                eprintln!("-- killed after {}", args.kill_after.as_deref().unwrap_or(""));
                return Ok(ExitCode::from(EXIT_KILLED_AFTER));
            }
        };
        if print(&answer).is_err() {
            // Our stdout is gone (`shoal exec ... | head`): the command need not go on.
            close(&poll, answer.output_next).await;
            return Ok(ExitCode::from(141));
        }
        output_offset = answer.output_next;
        let taken = answer.stdin_accepted.saturating_sub(accepted) as usize;
        pending.drain(..taken.min(pending.len()));
        accepted = answer.stdin_accepted;
        if let Some(exit) = answer.exit {
            return Ok(match exit {
                Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(255)),
                None => {
                    eprintln!("-- the command's exit code is unknown");
                    ExitCode::from(super::EXIT_FAILURE)
                }
            });
        }
    }
}

/// The size of the terminal on stdin (24 x 80 when it says 0, as a terminal of a `script` or a
/// serial line may).
fn terminal_size() -> anyhow::Result<TtySize> {
    let stdin = std::io::stdin();
    if !rustix::termios::isatty(&stdin) {
        bail!("-t needs a terminal on stdin (use -i to pass piped input)");
    }
    let size = rustix::termios::tcgetwinsize(&stdin).context("reading the terminal's size")?;
    let or = |n: u16, default: u16| if n == 0 { default } else { n };
    Ok(TtySize {
        rows: or(size.ws_row, 24),
        cols: or(size.ws_col, 80),
    })
}

/// The terminal's size each time it changes (SIGWINCH), for the next poll to carry; only the
/// newest is kept.
fn watch_size() -> anyhow::Result<std::sync::Arc<std::sync::Mutex<Option<TtySize>>>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut winch = signal(SignalKind::window_change()).context("watching the terminal's size")?;
    let resized = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = resized.clone();
    tokio::spawn(async move {
        while winch.recv().await.is_some() {
            if let Ok(size) = terminal_size() {
                *slot.lock().expect("size lock") = Some(size);
            }
        }
    });
    Ok(resized)
}

/// This process's terminal in raw mode, as it was again when dropped.
struct RawMode {
    saved: rustix::termios::Termios,
}

impl RawMode {
    fn enter() -> anyhow::Result<RawMode> {
        use rustix::termios::{tcgetattr, tcsetattr, OptionalActions};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin).context("reading the terminal's mode")?;
        let mut raw = saved.clone();
        raw.make_raw();
        tcsetattr(&stdin, OptionalActions::Now, &raw).context("setting the terminal raw")?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let stdin = std::io::stdin();
        let _ =
            rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &self.saved);
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Ends the session (best effort: an unanswered close leaves it to the idle timeout).
async fn close<F, Fut>(poll: &F, output_offset: u64)
where
    F: Fn(ExecInput) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<ExecOutput>>,
{
    let io = ExecInput {
        output_offset,
        close: true,
        ..ExecInput::default()
    };
    let _ = poll(io).await;
}

fn print(answer: &ExecOutput) -> std::io::Result<()> {
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    for (stream, bytes) in &answer.chunks {
        match stream {
            Stream::Stdout => out.write_all(bytes)?,
            Stream::Stderr => err.write_all(bytes)?,
        }
    }
    out.flush()?;
    err.flush()
}

/// Reads this process's stdin on a thread (a blocking read), in bounded chunks.
fn read_stdin() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(4);
    std::thread::spawn(move || {
        let mut input = std::io::stdin().lock();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match input.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}
