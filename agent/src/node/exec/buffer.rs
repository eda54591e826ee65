//! The bookkeeping of one exec session, pure: the command's output kept until the client
//! acknowledges it, and its stdin kept until the command reads it, both bounded and both counted
//! in byte offsets from the session's start so that a poll repeated after a lost answer neither
//! loses nor duplicates a byte.
//!
//! The client names the output offset it has received up to: what lies before it is dropped,
//! what follows it is sent (again, if an answer was lost). It sends stdin with the offset of its
//! first byte: bytes the session accepted already are skipped, and the answer says how far the
//! session accepted, so the client sends the rest again.

use std::collections::VecDeque;

use crate::node::runtime::exec::OUTPUT_CHUNK_BYTES_MAX;
use crate::node::runtime::logs::Stream;

/// What each kept chunk costs beside its bytes, so that a command alternating one-byte writes
/// on stdout and stderr cannot keep a million tiny chunks in the bound of one MiB.
const CHUNK_OVERHEAD_BYTES: usize = 64;

/// An offset the session cannot serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OffsetError {
    /// Before what the session still keeps: the client acknowledged it already.
    #[error("offset {asked} was acknowledged already (the session keeps from {kept})")]
    Behind {
        /// The offset asked.
        asked: u64,
        /// The first offset kept.
        kept: u64,
    },
    /// Past what the session has: the client cannot have received or sent up to there.
    #[error("offset {asked} is past the session's end ({end})")]
    Ahead {
        /// The offset asked.
        asked: u64,
        /// The session's end.
        end: u64,
    },
}

/// The command's output from the client's acknowledged offset on, stdout and stderr in the
/// order the session read them.
#[derive(Debug)]
pub struct OutputBuffer {
    /// Offset of the first kept byte.
    start: u64,
    chunks: VecDeque<(Stream, Vec<u8>)>,
    bytes: usize,
    capacity_bytes: usize,
}

impl OutputBuffer {
    /// An empty buffer that holds about `capacity_bytes` (at most one chunk more).
    pub fn new(capacity_bytes: usize) -> Self {
        OutputBuffer {
            start: 0,
            chunks: VecDeque::new(),
            bytes: 0,
            capacity_bytes,
        }
    }

    /// The offset after the last byte read from the command.
    pub fn end(&self) -> u64 {
        self.start + self.bytes as u64
    }

    /// Whether another chunk may be read from the command now (else the command waits).
    pub fn has_room(&self) -> bool {
        self.cost() < self.capacity_bytes
    }

    fn cost(&self) -> usize {
        self.bytes + self.chunks.len() * CHUNK_OVERHEAD_BYTES
    }

    /// Keeps a chunk read from the command (joined to the last one when of the same stream).
    pub fn push(&mut self, stream: Stream, bytes: &[u8]) {
        assert!(
            bytes.len() <= OUTPUT_CHUNK_BYTES_MAX,
            "chunk over the bound"
        );
        if bytes.is_empty() {
            return;
        }
        self.bytes += bytes.len();
        match self.chunks.back_mut() {
            Some((last, kept)) if *last == stream => kept.extend_from_slice(bytes),
            _ => self.chunks.push_back((stream, bytes.to_vec())),
        }
        self.check_invariants();
    }

    /// Drops everything before `offset`, which the client received.
    pub fn acknowledge(&mut self, offset: u64) -> Result<(), OffsetError> {
        if offset < self.start {
            let kept = self.start;
            return Err(OffsetError::Behind {
                asked: offset,
                kept,
            });
        }
        if offset > self.end() {
            let end = self.end();
            return Err(OffsetError::Ahead { asked: offset, end });
        }
        let mut drop = (offset - self.start) as usize;
        while drop > 0 {
            let (_, first) = self
                .chunks
                .front_mut()
                .expect("bytes left to drop are kept");
            if first.len() <= drop {
                drop -= first.len();
                self.bytes -= first.len();
                self.chunks.pop_front();
            } else {
                first.drain(..drop);
                self.bytes -= drop;
                drop = 0;
            }
        }
        self.start = offset;
        self.check_invariants();
        Ok(())
    }

    /// Up to `bytes_max` bytes from the acknowledged offset, as chunks by stream.
    pub fn read(&self, bytes_max: usize) -> Vec<(Stream, Vec<u8>)> {
        let mut left = bytes_max;
        let mut page = Vec::new();
        for (stream, bytes) in &self.chunks {
            if left == 0 {
                break;
            }
            let take = bytes.len().min(left);
            page.push((*stream, bytes[..take].to_vec()));
            left -= take;
        }
        page
    }

    /// What must hold after every change.
    pub fn check_invariants(&self) {
        let kept: usize = self.chunks.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(kept, self.bytes);
        assert!(self.chunks.iter().all(|(_, b)| !b.is_empty()));
        assert!(self.cost() < self.capacity_bytes + OUTPUT_CHUNK_BYTES_MAX + CHUNK_OVERHEAD_BYTES);
    }
}

/// The command's stdin, as the client sent it, until the command reads it.
#[derive(Debug)]
pub struct StdinQueue {
    /// Bytes accepted from the client since the session started.
    accepted: u64,
    pending: Vec<u8>,
    capacity_bytes: usize,
    /// The client sent its end: once `pending` is written, stdin is closed.
    eof: bool,
    /// The command closed its stdin (or never had one): bytes are accepted and dropped.
    closed: bool,
}

impl StdinQueue {
    /// An empty queue of at most `capacity_bytes` pending bytes.
    pub fn new(capacity_bytes: usize) -> Self {
        StdinQueue {
            accepted: 0,
            pending: Vec::new(),
            capacity_bytes,
            eof: false,
            closed: false,
        }
    }

    /// Bytes accepted since the session started: where the client's next byte goes.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// Takes what the client sent from `offset` on: bytes accepted already are skipped, as
    /// many of the others as there is room for are kept, and `eof` counts once every byte
    /// before it is accepted. Returns whether anything new is there for the command.
    pub fn offer(&mut self, offset: u64, bytes: &[u8], eof: bool) -> Result<bool, OffsetError> {
        if offset > self.accepted {
            let end = self.accepted;
            return Err(OffsetError::Ahead { asked: offset, end });
        }
        let skip = usize::try_from(self.accepted - offset).unwrap_or(usize::MAX);
        let new = bytes.get(skip..).unwrap_or_default();
        let take = if self.closed {
            new.len()
        } else {
            new.len()
                .min(self.capacity_bytes.saturating_sub(self.pending.len()))
        };
        if !self.closed {
            self.pending.extend_from_slice(&new[..take]);
        }
        self.accepted += take as u64;
        let eof_now = eof && take == new.len() && !self.eof;
        if eof_now {
            self.eof = true;
        }
        Ok((take > 0 && !self.closed) || eof_now)
    }

    /// What the command should read now, and whether its stdin ends after it.
    pub fn take(&mut self) -> (Vec<u8>, bool) {
        (std::mem::take(&mut self.pending), self.eof)
    }

    /// The command's stdin is gone: drop what is pending and accept (and drop) the rest.
    pub fn close(&mut self) {
        self.closed = true;
        self.pending = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(page: &[(Stream, Vec<u8>)]) -> String {
        page.iter()
            .map(|(s, b)| format!("{}:{}", s.as_str(), String::from_utf8_lossy(b)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn output_is_served_from_the_acknowledged_offset_and_served_again_until_acknowledged() {
        let mut out = OutputBuffer::new(1024);
        out.push(Stream::Stdout, b"ab");
        out.push(Stream::Stdout, b"cd");
        out.push(Stream::Stderr, b"E");
        out.push(Stream::Stdout, b"f");
        assert_eq!(out.end(), 6);
        assert_eq!(text(&out.read(100)), "stdout:abcd stderr:E stdout:f");
        assert_eq!(text(&out.read(3)), "stdout:abc");
        // A lost answer: the client asks from 0 again and gets the same bytes.
        out.acknowledge(0).unwrap();
        assert_eq!(text(&out.read(3)), "stdout:abc");
        out.acknowledge(3).unwrap();
        assert_eq!(text(&out.read(100)), "stdout:d stderr:E stdout:f");
        out.acknowledge(5).unwrap();
        assert_eq!(text(&out.read(100)), "stdout:f");
        assert_eq!(
            out.acknowledge(2),
            Err(OffsetError::Behind { asked: 2, kept: 5 })
        );
        assert_eq!(
            out.acknowledge(7),
            Err(OffsetError::Ahead { asked: 7, end: 6 })
        );
        out.acknowledge(6).unwrap();
        assert!(out.read(100).is_empty());
    }

    #[test]
    fn output_room_is_bounded_by_bytes_and_chunks() {
        let mut out = OutputBuffer::new(1000);
        out.push(Stream::Stdout, &[b'x'; 900]);
        assert!(out.has_room());
        out.push(Stream::Stdout, &[b'x'; 100]);
        assert!(!out.has_room());
        out.acknowledge(500).unwrap();
        assert!(out.has_room());
        // Alternating one-byte chunks are charged their overhead.
        let mut out = OutputBuffer::new(1000);
        let mut pushed = 0;
        while out.has_room() {
            let stream = if pushed % 2 == 0 {
                Stream::Stdout
            } else {
                Stream::Stderr
            };
            out.push(stream, b"x");
            pushed += 1;
        }
        assert!(pushed < 20, "{pushed} one-byte chunks kept");
    }

    #[test]
    fn stdin_is_taken_once_whatever_the_client_sends_again() {
        let mut stdin = StdinQueue::new(4);
        assert_eq!(stdin.offer(0, b"abcdef", true), Ok(true));
        // Room for four: the client learns it and sends the rest again, without its eof yet.
        assert_eq!(stdin.accepted(), 4);
        assert_eq!(stdin.take(), (b"abcd".to_vec(), false));
        // The same poll repeated (a lost answer) adds only what is new.
        assert_eq!(stdin.offer(0, b"abcdef", true), Ok(true));
        assert_eq!(stdin.accepted(), 6);
        assert_eq!(stdin.take(), (b"ef".to_vec(), true));
        assert_eq!(stdin.offer(4, b"ef", true), Ok(false));
        assert_eq!(
            stdin.offer(9, b"x", false),
            Err(OffsetError::Ahead { asked: 9, end: 6 })
        );
    }

    #[test]
    fn stdin_of_a_command_that_closed_it_is_counted_and_dropped() {
        let mut stdin = StdinQueue::new(4);
        stdin.offer(0, b"ab", false).unwrap();
        stdin.close();
        assert_eq!(stdin.offer(2, &[b'x'; 100], true), Ok(true));
        assert_eq!(stdin.accepted(), 102);
        assert_eq!(stdin.take(), (Vec::new(), true));
    }
}
