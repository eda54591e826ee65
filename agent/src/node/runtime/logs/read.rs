//! Reading an instance's log files: the last lines, from the beginning, or after a cursor.
//!
//! The files are opened and held open while read, so a rotation during a read (the oldest
//! file's deletion) changes nothing already opened. A cursor names a file by its number.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use super::rotate::{numbered, Rotating};
use super::{line, LogCursor, LogLine, LogQuery, LogStart, PAGE_LINES_MAX};

/// Most files looked at (the newest ones).
const FILES_MAX: usize = 64;

/// What a read found.
#[derive(Debug)]
pub struct Found {
    /// Lines, oldest first.
    pub lines: Vec<LogLine>,
    /// Where to continue.
    pub cursor: LogCursor,
    /// The byte or line budget cut the answer: more follow at once.
    pub more: bool,
    /// The cursor's file was rotated away: lines were lost.
    pub skipped: bool,
}

/// One open log file.
struct Opened {
    file: File,
    /// Its number.
    seq: u64,
    len: u64,
}

/// The files of `dir`, oldest first. An empty list if the instance never wrote (or the relay has
/// not created its file yet).
fn open_all(dir: &Path) -> io::Result<Vec<Opened>> {
    let seqs = match numbered(dir) {
        Ok(seqs) => seqs,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for seq in seqs.iter().rev().take(FILES_MAX).rev() {
        let file = match File::open(Rotating::path(dir, *seq)) {
            Ok(file) => file,
            // Rotated away since the listing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        files.push(Opened {
            file,
            seq: *seq,
            len,
        });
    }
    Ok(files)
}

/// Reads `dir` as `query` asks.
pub fn read(dir: &Path, query: &LogQuery) -> io::Result<Found> {
    read_from(dir, query.start, query)
}

/// Reads `dir` from `start` (the query's own start, or its beginning for a new instance).
pub fn read_from(dir: &Path, start: LogStart, query: &LogQuery) -> io::Result<Found> {
    let mut files = open_all(dir)?;
    let end = |files: &[Opened]| match files.last() {
        Some(f) => LogCursor::File {
            file_id: f.seq,
            offset: f.len,
        },
        None => LogCursor::File {
            file_id: 0,
            offset: 0,
        },
    };
    match start {
        LogStart::Tail(n) => {
            let cursor = end(&files);
            let lines = tail(&mut files, n as usize, query)?;
            Ok(Found {
                lines,
                cursor,
                more: false,
                skipped: false,
            })
        }
        LogStart::Beginning => forward(&mut files, 0, 0, query, false),
        LogStart::After(LogCursor::File { file_id, offset }) => {
            match files.iter().position(|f| f.seq == file_id) {
                Some(index) => forward(&mut files, index, offset, query, false),
                // The file was rotated away: what was in it after the offset is lost.
                None if files.first().is_some_and(|f| f.seq > file_id) && file_id > 0 => {
                    forward(&mut files, 0, 0, query, true)
                }
                None => forward(&mut files, 0, 0, query, false),
            }
        }
        LogStart::After(LogCursor::Time { .. }) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a time cursor is an engine's; this instance's logs are files",
        )),
    }
}

/// Everything kept of one stream in `dir`, each full line ending in a newline (tests and
/// diagnostics; a running instance's output may grow meanwhile).
pub fn stream_text(dir: &Path, stream: super::Stream) -> io::Result<String> {
    let mut query = LogQuery {
        start: LogStart::Beginning,
        since_ms: None,
        bytes_max: super::PAGE_BYTES_MAX,
        instance: None,
    };
    let mut text = String::new();
    loop {
        let found = read(dir, &query)?;
        for line in found.lines.iter().filter(|l| l.stream == stream) {
            text.push_str(&line.text);
            if !line.partial {
                text.push('\n');
            }
        }
        if !found.more {
            return Ok(text);
        }
        query.start = LogStart::After(found.cursor);
    }
}

/// The complete records of `bytes`, with the length they span (up to the last newline).
fn records(bytes: &[u8]) -> (Vec<(LogLine, usize)>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = bytes[at..].iter().position(|&b| b == b'\n') {
        let record = String::from_utf8_lossy(&bytes[at..at + i]);
        let next = at + i + 1;
        if let Some(line) = line::parse(&record) {
            out.push((line, next));
        }
        at = next;
    }
    (out, at)
}

/// Lines from file `index` at `offset` forward, within the budget.
fn forward(
    files: &mut [Opened],
    index: usize,
    offset: u64,
    query: &LogQuery,
    skipped: bool,
) -> io::Result<Found> {
    let budget = query.budget();
    let mut lines = Vec::new();
    let mut text_bytes = 0;
    let Some(last) = files.len().checked_sub(1) else {
        return Ok(Found {
            lines,
            cursor: LogCursor::File {
                file_id: 0,
                offset: 0,
            },
            more: false,
            skipped,
        });
    };
    let mut cursor = (index, offset.min(files[index].len));
    for i in index..files.len() {
        let start = if i == index { cursor.1 } else { 0 };
        cursor = (i, start);
        let f = &mut files[i];
        f.file.seek(SeekFrom::Start(start))?;
        // Read at most a budget's worth (plus a record) at once: the answer is bounded anyway.
        let want = (f.len - start).min((budget + 64 * 1024) as u64);
        let mut bytes = Vec::with_capacity(want as usize);
        (&mut f.file).take(want).read_to_end(&mut bytes)?;
        let (found, _) = records(&bytes);
        for (line, end) in found {
            let full = text_bytes + line.text.len() > budget || lines.len() >= PAGE_LINES_MAX;
            if full && !lines.is_empty() {
                return Ok(Found {
                    lines,
                    cursor: file_cursor(files, cursor),
                    more: true,
                    skipped,
                });
            }
            cursor = (i, start + end as u64);
            if query.admits(line.at_ns) {
                text_bytes += line.text.len();
                lines.push(line);
            }
        }
        if cursor.1 < files[i].len && i < last {
            // A torn record at the end of a rotated file (a crash mid-write): skip it.
            cursor = (i, files[i].len);
        }
        if want < files[i].len - start {
            // This file has more than one read's worth: continue with it next time.
            return Ok(Found {
                lines,
                cursor: file_cursor(files, cursor),
                more: true,
                skipped,
            });
        }
    }
    Ok(Found {
        lines,
        cursor: file_cursor(files, cursor),
        more: false,
        skipped,
    })
}

fn file_cursor(files: &[Opened], (index, offset): (usize, u64)) -> LogCursor {
    LogCursor::File {
        file_id: files[index].seq,
        offset,
    }
}

/// The last `n` lines (passing `since`), newest kept within the budget.
fn tail(files: &mut [Opened], n: usize, query: &LogQuery) -> io::Result<Vec<LogLine>> {
    let n = n.min(PAGE_LINES_MAX);
    let mut newest_first: Vec<LogLine> = Vec::new();
    let mut text_bytes = 0;
    for f in files.iter_mut().rev() {
        f.file.seek(SeekFrom::Start(0))?;
        let mut bytes = Vec::with_capacity(f.len as usize);
        (&mut f.file).take(f.len).read_to_end(&mut bytes)?;
        let (found, _) = records(&bytes);
        for (line, _) in found.into_iter().rev() {
            if newest_first.len() >= n
                || (text_bytes + line.text.len() > query.budget() && !newest_first.is_empty())
            {
                newest_first.reverse();
                return Ok(newest_first);
            }
            if query.admits(line.at_ns) {
                text_bytes += line.text.len();
                newest_first.push(line);
            }
        }
    }
    newest_first.reverse();
    Ok(newest_first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::runtime::logs::Stream;

    fn write(w: &mut Rotating, at_ns: u64, text: &str) {
        let record = line::format(&LogLine {
            at_ns,
            stream: Stream::Stdout,
            partial: false,
            text: text.into(),
        });
        w.write(record.as_bytes());
        w.flush();
    }

    fn query(start: LogStart) -> LogQuery {
        LogQuery {
            start,
            since_ms: None,
            bytes_max: 1 << 20,
            instance: None,
        }
    }

    fn texts(found: &Found) -> Vec<&str> {
        found.lines.iter().map(|l| l.text.as_str()).collect()
    }

    #[test]
    fn tail_since_and_a_cursor_across_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Rotating::open(dir.path(), 1024, 2).unwrap();
        for i in 0..10u64 {
            write(&mut w, i * 1_000_000, &format!("line {i}"));
        }
        let tail = read(dir.path(), &query(LogStart::Tail(3))).unwrap();
        assert_eq!(texts(&tail), ["line 7", "line 8", "line 9"]);
        let since = LogQuery {
            since_ms: Some(8),
            ..query(LogStart::Beginning)
        };
        assert_eq!(
            texts(&read(dir.path(), &since).unwrap()),
            ["line 8", "line 9"]
        );
        // Follow: nothing new, then a rotation, then lines after the cursor only.
        let again = read(dir.path(), &query(LogStart::After(tail.cursor))).unwrap();
        assert!(again.lines.is_empty() && !again.skipped);
        let filler = "z".repeat(900);
        write(&mut w, 10_000_000, &filler);
        write(&mut w, 11_000_000, "after rotation");
        let after = read(dir.path(), &query(LogStart::After(again.cursor))).unwrap();
        assert_eq!(texts(&after), [filler.as_str(), "after rotation"]);
        assert!(!after.skipped && !after.more);
        // A small budget pages, and the pages join up.
        let small = LogQuery {
            bytes_max: 10,
            ..query(LogStart::Beginning)
        };
        let first = read(dir.path(), &small).unwrap();
        assert!(first.more);
        let rest = LogQuery {
            start: LogStart::After(first.cursor),
            ..small
        };
        let second = read(dir.path(), &rest).unwrap();
        assert_ne!(texts(&first), texts(&second));
    }

    #[test]
    fn a_cursor_rotated_away_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Rotating::open(dir.path(), 64 * 1024, 2).unwrap();
        write(&mut w, 0, "first");
        let start = read(dir.path(), &query(LogStart::Tail(1))).unwrap();
        let big = "q".repeat(16 * 1024);
        for i in 0..20 {
            write(&mut w, i, &big);
        }
        let after = read(dir.path(), &query(LogStart::After(start.cursor))).unwrap();
        assert!(after.skipped);
        assert!(!after.lines.is_empty());
    }
}
