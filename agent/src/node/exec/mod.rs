//! Exec sessions: an operator's command running in a replica on this node (`shoal exec`),
//! driven by the client's polls over the request/response API.
//!
//! [`Sessions::start`] asks the runtime to start the command ([`crate::node::runtime::Runtime::exec`])
//! and answers a session id; each [`Sessions::poll`] carries stdin from an offset and the output
//! offset the client has, and is answered with the output since that offset, how far stdin was
//! accepted, and the exit code once everything was delivered ([`buffer`] keeps the offsets, so a
//! poll repeated after a lost answer neither loses nor duplicates a byte). A poll with nothing to
//! answer waits up to [`POLL_WAIT`] for output, so output reaches the client as it is written.
//!
//! **Architecture Invariant:** everything is bounded: [`SESSIONS_MAX`] sessions per agent,
//! [`OUTPUT_BUFFER_BYTES`] of output and [`STDIN_BUFFER_BYTES`] of stdin per session (a command
//! writing faster than its client reads waits on its full pipe, as it would on a slow
//! terminal), the command's size ([`COMMAND_ARGS_MAX`], [`COMMAND_BYTES_MAX`]), a poll's stdin
//! ([`STDIN_CHUNK_BYTES_MAX`]) and answer ([`OUTPUT_PAGE_BYTES_MAX`]). A session nobody polled
//! for [`IDLE_TIMEOUT`] is ended and its command killed; no session outlives its command's
//! delivery except as its final answer, kept (at most [`FINISHED_KEPT_MAX`]) for a repeated poll.

pub mod buffer;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::core::instance::ReplicaId;
use crate::node::runtime::exec::{ExecChild, ExecRequest};
use crate::node::runtime::logs::Stream;
use crate::node::runtime::{Runtime, RuntimeError};
use crate::wire::api::{ExecInput, ExecOutput};
use buffer::{OffsetError, OutputBuffer, StdinQueue};

/// Most exec sessions running on one agent at once.
pub const SESSIONS_MAX: usize = 16;
/// Output kept per session until the client acknowledges it.
pub const OUTPUT_BUFFER_BYTES: usize = 1 << 20;
/// Stdin kept per session until the command reads it.
pub const STDIN_BUFFER_BYTES: usize = 1 << 20;
/// Most stdin bytes in one poll.
pub const STDIN_CHUNK_BYTES_MAX: usize = 256 * 1024;
/// Most output bytes in one answer.
pub const OUTPUT_PAGE_BYTES_MAX: usize = 256 * 1024;
/// Most arguments of a command, program included.
pub const COMMAND_ARGS_MAX: usize = 256;
/// Most bytes of a command, all arguments together.
pub const COMMAND_BYTES_MAX: usize = 64 * 1024;
/// A session not polled for this long is ended and its command killed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a poll with nothing to answer waits for output.
pub const POLL_WAIT: Duration = Duration::from_millis(100);
/// How long the output of an exited command may still flow (from what it left running outside
/// its process group) before the session ends without it.
pub const OUTPUT_AFTER_EXIT: Duration = Duration::from_secs(2);
/// Final answers kept for polls repeated after a lost answer.
pub const FINISHED_KEPT_MAX: usize = 64;

/// Why a session could not start or answer. Nothing changed on the node unless said.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The command or the poll is outside the bounds, or empty.
    #[error("{0}")]
    Invalid(String),
    /// [`SESSIONS_MAX`] sessions run on this node already.
    #[error(
        "{SESSIONS_MAX} exec sessions run on this node already: wait for one to end (an idle \
         one ends after {} s)",
        IDLE_TIMEOUT.as_secs()
    )]
    TooMany,
    /// No such session here (ended, idle too long, or another client's).
    #[error(
        "no exec session {session:x} on this node: it ended, or nobody polled it for {} s and \
         its command was killed",
        IDLE_TIMEOUT.as_secs()
    )]
    UnknownSession {
        /// The session asked for.
        session: u64,
    },
    /// The poll's offsets do not fit the session.
    #[error("exec session {session:x}: {error}")]
    Offset {
        /// The session.
        session: u64,
        /// What did not fit.
        error: OffsetError,
    },
    /// The runtime could not start the command.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// Checks a command against the bounds.
pub fn check_command(command: &[String]) -> Result<(), ExecError> {
    let bytes: usize = command.iter().map(String::len).sum();
    match command.first() {
        None => Err(ExecError::Invalid(
            "no command given: shoal exec NAME/REPLICA -- CMD ARGS...".into(),
        )),
        Some(program) if program.is_empty() => {
            Err(ExecError::Invalid("the program name is empty".into()))
        }
        Some(_) if command.len() > COMMAND_ARGS_MAX => Err(ExecError::Invalid(format!(
            "the command has {} arguments; at most {COMMAND_ARGS_MAX}",
            command.len()
        ))),
        Some(_) if bytes > COMMAND_BYTES_MAX => Err(ExecError::Invalid(format!(
            "the command is {bytes} bytes long; at most {COMMAND_BYTES_MAX}"
        ))),
        Some(_) if command.iter().any(|a| a.contains('\0')) => {
            Err(ExecError::Invalid("an argument holds a NUL byte".into()))
        }
        Some(_) => Ok(()),
    }
}

/// How a command's standard streams are given it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecMode {
    /// A stdin the client writes to (else `/dev/null`).
    pub stdin: bool,
    /// A terminal of this size for all three streams (else pipes).
    pub tty: Option<crate::node::runtime::exec::TtySize>,
}

/// The exec sessions of one agent.
#[derive(Default)]
pub struct Sessions {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    live: BTreeMap<u64, Arc<Session>>,
    /// Starts between their slot and their session.
    starting: usize,
    /// Final answers by session, with the owner.
    finished: BTreeMap<u64, (String, ExecOutput)>,
    finished_order: VecDeque<u64>,
}

struct Session {
    owner: String,
    state: Mutex<State>,
    /// Output arrived, the output ended, or the command exited: wakes a waiting poll.
    changed: Notify,
    /// Stdin arrived for the command.
    stdin_ready: Notify,
    /// The client acknowledged output: the output pump may read again.
    room: Notify,
    kill: Mutex<Option<oneshot::Sender<()>>>,
    /// The command's terminal size, when it has a terminal.
    resize: Option<tokio::sync::watch::Sender<crate::node::runtime::exec::TtySize>>,
    tasks: Mutex<Vec<AbortHandle>>,
}

struct State {
    output: OutputBuffer,
    stdin: StdinQueue,
    exit: Option<Option<i32>>,
    output_done: bool,
    last_poll: Instant,
}

impl Session {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("exec session lock")
    }

    /// Kills the command (if it still runs) and stops the session's tasks.
    fn end(&self) {
        drop(self.kill.lock().expect("exec kill lock").take());
        for task in self.tasks.lock().expect("exec tasks lock").drain(..) {
            task.abort();
        }
    }
}

impl Sessions {
    /// No sessions.
    pub fn new() -> Arc<Sessions> {
        Arc::new(Sessions::default())
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().expect("exec sessions lock")
    }

    /// How many sessions run now.
    pub fn live(&self) -> usize {
        self.table().live.len()
    }

    /// Starts `command` in instance `handle` of `replica` for `owner` (the only client whose
    /// polls the session answers); returns the session id.
    pub async fn start(
        self: &Arc<Self>,
        runtime: &Arc<dyn Runtime>,
        handle: &str,
        replica: &ReplicaId,
        command: Vec<String>,
        mode: ExecMode,
        owner: &str,
    ) -> Result<u64, ExecError> {
        let ExecMode { stdin, tty } = mode;
        check_command(&command)?;
        {
            let mut table = self.table();
            if table.live.len() + table.starting >= SESSIONS_MAX {
                return Err(ExecError::TooMany);
            }
            table.starting += 1;
        }
        let started = runtime
            .exec(
                handle,
                &ExecRequest {
                    command,
                    stdin,
                    tty,
                },
            )
            .await;
        let mut table = self.table();
        table.starting -= 1;
        let child = started?;
        let id = loop {
            let id = random_id();
            if !table.live.contains_key(&id) && !table.finished.contains_key(&id) {
                break id;
            }
        };
        let session = self.drive(id, child, owner);
        table.live.insert(id, session);
        tracing::info!(%replica, session = format!("{id:x}"), owner, "exec session started");
        Ok(id)
    }

    /// Starts the tasks that move a command's bytes and watch its session.
    fn drive(self: &Arc<Self>, id: u64, child: ExecChild, owner: &str) -> Arc<Session> {
        let ExecChild {
            stdin,
            output,
            exit,
            kill,
            resize,
        } = child;
        let mut stdin_queue = StdinQueue::new(STDIN_BUFFER_BYTES);
        if stdin.is_none() {
            stdin_queue.close();
        }
        let session = Arc::new(Session {
            owner: owner.to_string(),
            state: Mutex::new(State {
                output: OutputBuffer::new(OUTPUT_BUFFER_BYTES),
                stdin: stdin_queue,
                exit: None,
                output_done: false,
                last_poll: Instant::now(),
            }),
            changed: Notify::new(),
            stdin_ready: Notify::new(),
            room: Notify::new(),
            kill: Mutex::new(Some(kill)),
            resize,
            tasks: Mutex::new(Vec::new()),
        });
        let pump = tokio::spawn(pump_output(session.clone(), output)).abort_handle();
        let mut tasks = vec![pump.clone()];
        if let Some(stdin) = stdin {
            tasks.push(tokio::spawn(pump_stdin(session.clone(), stdin)).abort_handle());
        }
        tasks.push(tokio::spawn(wait_exit(session.clone(), exit, pump)).abort_handle());
        tasks.push(tokio::spawn(self.clone().watch_idle(id, session.clone())).abort_handle());
        *session.tasks.lock().expect("exec tasks lock") = tasks;
        session
    }

    /// Ends the session once nobody polled it for [`IDLE_TIMEOUT`].
    async fn watch_idle(self: Arc<Self>, id: u64, session: Arc<Session>) {
        loop {
            let last = session.state().last_poll;
            if last.elapsed() >= IDLE_TIMEOUT {
                break;
            }
            tokio::time::sleep_until(last + IDLE_TIMEOUT).await;
        }
        tracing::info!(
            session = format!("{id:x}"),
            "exec session idle: command killed"
        );
        self.table().live.remove(&id);
        drop(session.kill.lock().expect("exec kill lock").take());
        // The other tasks end here; this one ends by returning.
        for task in session.tasks.lock().expect("exec tasks lock").drain(..) {
            task.abort();
        }
    }

    /// Ends session `id` now, killing its command (the client gave up).
    pub fn close(&self, id: u64, owner: &str) -> Result<(), ExecError> {
        let session = {
            let mut table = self.table();
            match table.live.get(&id) {
                Some(s) if s.owner == owner => table.live.remove(&id),
                _ => None,
            }
        };
        let session = session.ok_or(ExecError::UnknownSession { session: id })?;
        session.end();
        Ok(())
    }

    /// Takes a poll of session `id` from `owner` (see the module doc).
    pub async fn poll(&self, id: u64, io: ExecInput, owner: &str) -> Result<ExecOutput, ExecError> {
        if io.stdin.len() > STDIN_CHUNK_BYTES_MAX {
            return Err(ExecError::Invalid(format!(
                "{} stdin bytes in one poll; at most {STDIN_CHUNK_BYTES_MAX}",
                io.stdin.len()
            )));
        }
        let session = {
            let table = self.table();
            match table.live.get(&id) {
                Some(s) if s.owner == owner => s.clone(),
                Some(_) => return Err(ExecError::UnknownSession { session: id }),
                None => {
                    return match table.finished.get(&id) {
                        Some((o, last)) if o == owner && last.output_next == io.output_offset => {
                            Ok(last.clone())
                        }
                        _ => Err(ExecError::UnknownSession { session: id }),
                    }
                }
            }
        };
        if io.close {
            self.close(id, owner)?;
            let stdin_accepted = session.state().stdin.accepted();
            return Ok(ExecOutput {
                chunks: Vec::new(),
                output_next: io.output_offset,
                stdin_accepted,
                exit: Some(None),
            });
        }
        if let (Some(size), Some(resize)) = (io.resize, &session.resize) {
            // A terminal of no rows or columns is no size: kept as it was.
            if size.rows > 0 && size.cols > 0 {
                resize.send_if_modified(|now| std::mem::replace(now, size) != size);
            }
        }
        let offset_error = |error| ExecError::Offset { session: id, error };
        let deadline = Instant::now() + POLL_WAIT;
        let mut first = true;
        let answer = loop {
            let changed = session.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = session.state();
                state.last_poll = Instant::now();
                state
                    .output
                    .acknowledge(io.output_offset)
                    .map_err(offset_error)?;
                if state.output.has_room() {
                    session.room.notify_one();
                }
                let fed = state
                    .stdin
                    .offer(io.stdin_offset, &io.stdin, io.stdin_eof)
                    .map_err(offset_error)?;
                if fed {
                    session.stdin_ready.notify_one();
                }
                let chunks = state.output.read(OUTPUT_PAGE_BYTES_MAX);
                let sent: usize = chunks.iter().map(|(_, b)| b.len()).sum();
                let output_next = io.output_offset + sent as u64;
                let finished = state.exit.is_some() && state.output_done;
                let exit = state
                    .exit
                    .filter(|_| finished && output_next == state.output.end());
                if !chunks.is_empty() || finished || (fed && first) || Instant::now() >= deadline {
                    break ExecOutput {
                        chunks,
                        output_next,
                        stdin_accepted: state.stdin.accepted(),
                        exit,
                    };
                }
            }
            first = false;
            let _ = tokio::time::timeout_at(deadline, changed).await;
        };
        if answer.exit.is_some() {
            self.finish(id, &session, &answer);
        }
        Ok(answer)
    }

    /// The command's output is all delivered: the session ends, its last answer is kept.
    fn finish(&self, id: u64, session: &Session, answer: &ExecOutput) {
        session.end();
        let mut table = self.table();
        table.live.remove(&id);
        if table
            .finished
            .insert(id, (session.owner.clone(), answer.clone()))
            .is_none()
        {
            table.finished_order.push_back(id);
        }
        while table.finished_order.len() > FINISHED_KEPT_MAX {
            if let Some(old) = table.finished_order.pop_front() {
                table.finished.remove(&old);
            }
        }
    }
}

/// Moves the command's output into the session's buffer while it has room.
async fn pump_output(session: Arc<Session>, mut output: mpsc::Receiver<(Stream, Vec<u8>)>) {
    loop {
        if !session.state().output.has_room() {
            session.room.notified().await;
            continue;
        }
        let Some((stream, bytes)) = output.recv().await else {
            break;
        };
        session.state().output.push(stream, &bytes);
        session.changed.notify_waiters();
    }
    session.state().output_done = true;
    session.changed.notify_waiters();
}

/// Writes the client's stdin to the command, and closes it after the client's end.
async fn pump_stdin(session: Arc<Session>, mut stdin: std::pin::Pin<Box<dyn AsyncWrite + Send>>) {
    loop {
        let (bytes, eof) = session.state().stdin.take();
        if !bytes.is_empty() {
            let written = stdin.write_all(&bytes).await;
            if written.is_err() || stdin.flush().await.is_err() {
                break;
            }
        }
        if eof {
            let _ = stdin.shutdown().await;
            break;
        }
        if bytes.is_empty() {
            session.stdin_ready.notified().await;
        }
    }
    // The command closed its stdin, or the client ended it: more is dropped, not kept.
    session.state().stdin.close();
}

/// Records the command's exit, and ends its output if it still flows after
/// [`OUTPUT_AFTER_EXIT`].
async fn wait_exit(session: Arc<Session>, exit: oneshot::Receiver<Option<i32>>, pump: AbortHandle) {
    let code = exit.await.unwrap_or(None);
    session.state().exit = Some(code);
    session.changed.notify_waiters();
    let deadline = Instant::now() + OUTPUT_AFTER_EXIT;
    loop {
        let changed = session.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if session.state().output_done {
            return;
        }
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            break;
        }
    }
    pump.abort();
    session.state().output_done = true;
    session.changed.notify_waiters();
}

/// A session id nobody can guess (the owner check stands behind it anyway).
fn random_id() -> u64 {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        let nanos = crate::node::runtime::wall_clock_ns();
        bytes = xxhash_rust::xxh3::xxh3_64(&nanos.to_le_bytes()).to_le_bytes();
    }
    u64::from_le_bytes(bytes)
}
