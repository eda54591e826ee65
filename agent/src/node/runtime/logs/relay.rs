//! `shoal log-relay`: reads an instance's stdout and stderr pipes, stamps every line and writes it
//! to the instance's rotated log files, until both pipes reach end of file.
//!
//! How the pipes arrive without `unsafe` (this crate forbids it, and passing an arbitrary fd to a
//! child needs a `pre_exec` hook): the runtime gives the stdout pipe's read end as the relay's
//! stdin and the stderr pipe's read end as the relay's *stdout* (`Stdio::from(OwnedFd)` takes any
//! fd, whatever its direction). The relay clones its fd 0 and fd 1 into `File`s
//! (`as_fd().try_clone_to_owned()`) and reads both; it never prints to stdout. Its own stderr is
//! null: it has nobody to tell.
//!
//! The relay never stops reading: a record the disk refuses is dropped and counted, so the
//! instance blocks at most while its pipe buffer (64 KiB on Linux) is full and the relay busy. If
//! the relay dies (killed by hand, OOM), the instance's next write fails with `EPIPE` (or
//! `SIGPIPE` kills it, for a program that does not ignore it): its output has nowhere to go.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Mutex;

use super::rotate::Rotating;
use super::{line, Stream, LINE_BYTES_MAX};

/// Bytes read from a pipe at once.
const READ_BYTES: usize = 64 * 1024;

/// Relays fd 0 (stdout) and fd 1 (stderr) into `dir` until both reach end of file. Returns how
/// many records were dropped.
pub fn run(dir: &Path, bytes_max: u64, files: u32) -> io::Result<u64> {
    let stdout = File::from(io::stdin().as_fd().try_clone_to_owned()?);
    let stderr = File::from(io::stdout().as_fd().try_clone_to_owned()?);
    let file_bytes_max = super::rotate::file_bytes_for(bytes_max, files);
    if file_bytes_max < super::LOG_FILE_BYTES_MIN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{bytes_max} bytes in {files} files is below the minimum"),
        ));
    }
    let writer = Mutex::new(Rotating::open(dir, file_bytes_max, files)?);
    std::thread::scope(|scope| {
        scope.spawn(|| pump(stdout, Stream::Stdout, &writer));
        scope.spawn(|| pump(stderr, Stream::Stderr, &writer));
    });
    let mut writer = writer.into_inner().unwrap_or_else(|e| e.into_inner());
    writer.flush();
    Ok(writer.dropped)
}

/// Reads one pipe to its end, cutting lines (at most [`LINE_BYTES_MAX`] bytes each).
fn pump(mut input: File, stream: Stream, writer: &Mutex<Rotating>) {
    let mut buf = vec![0u8; READ_BYTES];
    let mut pieces = Pieces::default();
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let records = pieces.cut(&buf[..n], stream, crate::node::runtime::wall_clock_ns());
        let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
        for record in &records {
            w.write(record.as_bytes());
        }
        // Written before the next read may block: a line reaches the file at once.
        w.flush();
    }
    if let Some(record) = pieces.rest(stream, crate::node::runtime::wall_clock_ns()) {
        let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
        w.write(record.as_bytes());
        w.flush();
    }
}

/// A line being cut from a stream's chunks.
#[derive(Default)]
struct Pieces {
    line: Vec<u8>,
}

impl Pieces {
    /// The records completed by `chunk`, stamped `at_ns`: one per line, and a partial one for
    /// every [`LINE_BYTES_MAX`] bytes of a longer line.
    fn cut(&mut self, mut chunk: &[u8], stream: Stream, at_ns: u64) -> Vec<String> {
        let mut records = Vec::new();
        while !chunk.is_empty() {
            let room = LINE_BYTES_MAX - self.line.len();
            let window = &chunk[..chunk.len().min(room)];
            match window.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.line.extend_from_slice(&window[..i]);
                    records.push(self.record(stream, at_ns, false));
                    chunk = &chunk[i + 1..];
                }
                None => {
                    self.line.extend_from_slice(window);
                    chunk = &chunk[window.len()..];
                    if self.line.len() == LINE_BYTES_MAX {
                        records.push(self.record(stream, at_ns, true));
                    }
                }
            }
        }
        records
    }

    /// The last line when the stream ended without a newline.
    fn rest(&mut self, stream: Stream, at_ns: u64) -> Option<String> {
        (!self.line.is_empty()).then(|| self.record(stream, at_ns, false))
    }

    fn record(&mut self, stream: Stream, at_ns: u64, partial: bool) -> String {
        let text = String::from_utf8_lossy(&self.line).into_owned();
        self.line.clear();
        line::format(&super::LogLine {
            at_ns,
            stream,
            partial,
            text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_into_partial_records() {
        let mut p = Pieces::default();
        let long = "y".repeat(LINE_BYTES_MAX + 5);
        let chunk = format!("a\nb{long}\nc");
        let records = p.cut(chunk.as_bytes(), Stream::Stdout, 0);
        let tags: Vec<(&str, usize)> = records
            .iter()
            .map(|r| (r.split(' ').nth(2).unwrap(), r.len()))
            .collect();
        let head = "1970-01-01T00:00:00.000000000Z stdout F ".len();
        assert_eq!(
            tags,
            [
                ("F", head + 2),
                ("P", head + LINE_BYTES_MAX + 1),
                ("F", head + 7)
            ]
        );
        assert!(p.rest(Stream::Stdout, 0).unwrap().ends_with(" F c\n"));
        assert_eq!(p.rest(Stream::Stdout, 0), None);
    }
}
