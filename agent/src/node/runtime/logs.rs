//! Instance output: what a runtime answers to `shoal logs`, and the files the process runtime
//! keeps it in.
//!
//! The process runtime does not let an instance write to a file directly: its stdout and stderr
//! are pipes read by a **log relay** ([`relay`]), the `shoal` binary itself run as the hidden
//! `shoal log-relay` subcommand in its own session, like podman's conmon. The relay stamps each
//! line and writes it to size-bounded rotated files ([`rotate`]); it outlives the agent (an
//! adopted instance keeps being logged while no agent runs) and is not in the instance's process
//! group (a stop signal to the instance does not reach it). It exits when both pipes reach end of
//! file, that is once every process of the instance closed its output.
//!
//! The file format is the CRI one (what the kubelet writes), one record a line:
//! `2026-12-01T18:40:00.123456789Z stdout F text` ([`line`]); `P` instead of `F` marks a piece of
//! a line longer than [`LINE_BYTES_MAX`], continued by the next record of the same stream.
//!
//! Reading ([`read`]) is by tail, by time, or after a [`LogCursor`]: a file's number and an
//! offset, so a reader that follows keeps its place across a rotation (files are numbered, never
//! renamed; a number is never reused).

pub mod line;
pub mod read;
pub mod relay;
pub mod rotate;

/// The longest line kept in one record, in bytes; a longer line is split into `P` records.
pub const LINE_BYTES_MAX: usize = 16 * 1024;

/// Most lines in one answer (a page of empty lines is bounded too).
pub const PAGE_LINES_MAX: usize = 16 * 1024;

/// The default bound of one instance's log files on disk: 10 MiB.
pub const LOG_BYTES_MAX_DEFAULT: u64 = 10 * 1024 * 1024;

/// The default number of files the bound is spread over (the current one and one older).
pub const LOG_FILES_DEFAULT: u32 = 2;

/// The smallest bound an agent accepts, per file: 64 KiB (a record must fit in one file).
pub const LOG_FILE_BYTES_MIN: u64 = 64 * 1024;

/// How an instance's log files are named: `output.<N>.log`, N growing by one at each rotation
/// (see [`rotate`] for why they are numbered, not renamed).
pub const OUTPUT_PREFIX: &str = "output.";

pub use crate::wire::logs::{
    LogCursor, LogLine, LogPage, LogQuery, LogStart, Stream, PAGE_BYTES_MAX,
};
