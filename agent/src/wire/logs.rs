//! What a read of an instance's output asks and answers (`shoal logs`): the query, the page of
//! lines and the cursor to continue from. The runtimes read their logs into these
//! ([`crate::node::runtime::logs`]); they travel in [`super::api`].

use serde::{Deserialize, Serialize};

/// Most bytes of line text in one answer: a page of [`LogPage`] always fits an API frame.
pub const PAGE_BYTES_MAX: u32 = 256 * 1024;

/// Which stream a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`, as the files and `shoal logs` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One line (or, with `partial`, a piece of a long one) of an instance's output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// When the relay (or the engine) read it, ns since the Unix epoch.
    pub at_ns: u64,
    /// Its stream.
    pub stream: Stream,
    /// A piece of a longer line: the next piece of the same stream continues it.
    pub partial: bool,
    /// The text, without the newline (invalid UTF-8 replaced).
    pub text: String,
}

/// Where a reader stopped, to ask for what follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogCursor {
    /// A process instance's file (by number, `output.<N>.log`) and the offset after the last
    /// record read.
    File {
        /// The file's number (0: none existed).
        file_id: u64,
        /// Bytes of it already read.
        offset: u64,
    },
    /// An engine's log (docker): lines stamped after this time, ns since the Unix epoch.
    Time {
        /// The last line's stamp.
        after_ns: u64,
    },
}

/// Where a read starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogStart {
    /// From the oldest line kept, forward (then ask again with the cursor while `more`).
    Beginning,
    /// The last this many lines.
    Tail(u32),
    /// What follows a previous answer.
    After(LogCursor),
}

/// What to read of one instance's output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogQuery {
    /// Where to start.
    pub start: LogStart,
    /// Only lines stamped at or after this time, ms since the Unix epoch.
    pub since_ms: Option<u64>,
    /// Most bytes of text in the answer (clamped to 1..=[`PAGE_BYTES_MAX`]).
    pub bytes_max: u32,
    /// The instance an [`LogStart::After`] cursor was taken from: when the replica's newest
    /// instance is another one now (it restarted or moved), it is read from its beginning.
    pub instance: Option<String>,
}

impl LogQuery {
    /// Where to start reading `instance`: a cursor of another instance means its beginning.
    pub fn start_for(&self, instance: &str) -> LogStart {
        match self.start {
            LogStart::After(_) if self.instance.as_deref() != Some(instance) => LogStart::Beginning,
            start => start,
        }
    }

    /// The answer's byte budget, clamped.
    pub fn budget(&self) -> usize {
        self.bytes_max.clamp(1, PAGE_BYTES_MAX) as usize
    }

    /// Whether a line stamped `at_ns` passes the `since` filter.
    pub fn admits(&self, at_ns: u64) -> bool {
        self.since_ms
            .is_none_or(|since| at_ns >= since.saturating_mul(1_000_000))
    }
}

/// One answer: lines of one instance, oldest first, and where to continue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPage {
    /// The instance (runtime handle) read.
    pub instance: String,
    /// Whether the instance is still running.
    pub running: bool,
    /// The lines.
    pub lines: Vec<LogLine>,
    /// Ask with this to get what follows.
    pub cursor: LogCursor,
    /// More lines follow at once (the answer hit its byte or line bound).
    pub more: bool,
    /// Lines were lost between the cursor and this answer: the reader fell behind a rotation.
    /// (Output the relay could not write, disk full, is told by a stderr line in the output.)
    pub skipped: bool,
}
