//! A command run inside a running instance for an operator (`shoal exec`): what the runtimes
//! hand back, [`ExecChild`], and the output pump they share.
//!
//! A runtime starts the command and returns at once; the caller (the agent's exec sessions,
//! `crate::node::exec`) drives it: writes its stdin, takes its output from a bounded channel (a
//! caller that stops taking stops the command at its next write: the pipes fill up), and
//! learns its exit code. Dropping [`ExecChild::kill`] (or sending on it) kills the command, so
//! a session that is dropped leaves nothing running.

use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::{mpsc, oneshot};

use crate::node::runtime::logs::Stream;

/// Most bytes of one output chunk.
pub const OUTPUT_CHUNK_BYTES_MAX: usize = 64 * 1024;
/// Output chunks a runtime queues for its caller before the command's writes wait.
pub const OUTPUT_CHANNEL_CHUNKS: usize = 4;

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecRequest {
    /// The program and its arguments (not empty).
    pub command: Vec<String>,
    /// Give it a stdin the caller writes to (otherwise stdin is closed: `/dev/null`).
    pub stdin: bool,
    /// Run it on a terminal of this size (stdin, stdout and stderr all the terminal: its output
    /// comes as stdout); `None`: pipes.
    pub tty: Option<TtySize>,
}

pub use crate::wire::exec::TtySize;

/// A command started by [`super::Runtime::exec`].
pub struct ExecChild {
    /// Its stdin, when asked for; dropping it closes it.
    pub stdin: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    /// Its output, stdout and stderr chunks of at most [`OUTPUT_CHUNK_BYTES_MAX`] bytes, each
    /// stream in order; closed when both streams ended.
    pub output: mpsc::Receiver<(Stream, Vec<u8>)>,
    /// Its exit code (128 + signal for a signal), once it exited; `None` inside when the
    /// runtime could not learn it.
    pub exit: oneshot::Receiver<Option<i32>>,
    /// Send, or drop, to kill it.
    pub kill: oneshot::Sender<()>,
    /// Its terminal's size, for a command on a terminal: a new value resizes it (the command
    /// gets SIGWINCH). `None` for pipes.
    pub resize: Option<tokio::sync::watch::Sender<TtySize>>,
}

/// Reads `reader` to its end into `output` as `stream` chunks; stops early when the receiver
/// is gone.
pub(crate) async fn pump<R: AsyncRead + Unpin>(
    mut reader: R,
    stream: Stream,
    output: mpsc::Sender<(Stream, Vec<u8>)>,
) {
    let mut buf = vec![0u8; OUTPUT_CHUNK_BYTES_MAX];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if output.send((stream, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
}
