//! The relay's writer: records appended to `output.<N>.log`; when a record would not fit, the
//! oldest files are deleted so that `files - 1` remain and `output.<N+1>.log` is started. The
//! files never hold more than `files * file_bytes_max` bytes.
//!
//! Files are numbered rather than renamed (`output.log` -> `output.log.1`, as logrotate does) so
//! that a reader's cursor can name a file for good: a number is never reused, while an inode
//! freed by a deleted file is at once given to the next new one (tmpfs does so), which would make
//! a follower jump into the middle of a new file.
//!
//! The bound is strict: a record that would take the current file past `file_bytes_max` rotates
//! first (the oldest file is deleted before the others are renamed), and no record is longer
//! than a file (the relay splits lines at [`super::LINE_BYTES_MAX`], and an agent refuses a
//! bound whose files are smaller than [`super::LOG_FILE_BYTES_MIN`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::OUTPUT_PREFIX;

/// Appends records to an instance's log files, rotating them.
pub struct Rotating {
    dir: PathBuf,
    files: u32,
    file_bytes_max: u64,
    file: Option<File>,
    /// The current file's number (from 1).
    seq: u64,
    /// Bytes in the current file, counting `pending`.
    size: u64,
    /// Records accepted but not written yet ([`Rotating::flush`] writes them).
    pending: Vec<u8>,
    /// Writes dropped because the disk refused them (full, or the directory was removed).
    pub dropped: u64,
    /// Drops not yet told in the files (a marker record says how many, once writes succeed).
    unreported: u64,
}

impl Rotating {
    /// A writer over `dir` keeping at most `files` files (at least 1) of at most
    /// `file_bytes_max` bytes each ([`file_bytes_for`]). Appends to the newest existing file.
    pub fn open(dir: &Path, file_bytes_max: u64, files: u32) -> io::Result<Rotating> {
        let files = files.max(1);
        let mut writer = Rotating {
            dir: dir.to_path_buf(),
            files,
            file_bytes_max,
            file: None,
            seq: numbered(dir)?.last().copied().unwrap_or(1),
            size: 0,
            pending: Vec::new(),
            dropped: 0,
            unreported: 0,
        };
        writer.reopen()?;
        Ok(writer)
    }

    /// The most bytes one file holds.
    pub fn file_bytes_max(&self) -> u64 {
        self.file_bytes_max
    }

    /// The path of file number `seq`.
    pub fn path(dir: &Path, seq: u64) -> PathBuf {
        dir.join(format!("{OUTPUT_PREFIX}{seq}.log"))
    }

    /// Takes one record, rotating first if it would not fit in the current file. Records are
    /// written by [`Rotating::flush`] (or before a rotation). A record the disk refuses is
    /// dropped and counted: the relay must keep draining the instance's pipes whatever happens.
    pub fn write(&mut self, record: &[u8]) {
        let len = record.len() as u64;
        assert!(
            len <= self.file_bytes_max,
            "a record ({len} bytes) longer than a file ({} bytes)",
            self.file_bytes_max
        );
        if self.size + len > self.file_bytes_max || self.file.is_none() {
            self.flush();
            if let Err(e) = self.rotate() {
                self.drop_record(&e);
                return;
            }
        }
        self.note_drops();
        if self.size + len > self.file_bytes_max {
            return self.write(record);
        }
        self.pending.extend_from_slice(record);
        self.size += len;
    }

    /// After drops, a stderr record saying how many writes were lost, where they were.
    fn note_drops(&mut self) {
        if self.unreported == 0 {
            return;
        }
        let marker = super::line::format(&super::LogLine {
            at_ns: crate::node::runtime::wall_clock_ns(),
            stream: super::Stream::Stderr,
            partial: false,
            text: format!(
                "[shoal log-relay: {} writes of output lost here: the disk refused them]",
                self.unreported
            ),
        });
        if self.size + marker.len() as u64 <= self.file_bytes_max {
            self.pending.extend_from_slice(marker.as_bytes());
            self.size += marker.len() as u64;
            self.unreported = 0;
        }
    }

    /// Writes the records taken so far.
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let result = match self.file.as_mut() {
            Some(file) => file.write_all(&self.pending),
            None => Err(io::Error::other("no current file")),
        };
        if let Err(e) = result {
            // The file may hold part of the records: start a new one next time.
            self.file = None;
            self.drop_record(&e);
        }
        self.pending.clear();
    }

    fn drop_record(&mut self, e: &io::Error) {
        if self.dropped == 0 {
            eprintln!("shoal log-relay: dropping output: {e}");
        }
        self.dropped += 1;
        self.unreported += 1;
    }

    /// Deletes the oldest files so that `files - 1` remain, then starts the next one.
    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        let next = self.seq + 1;
        for seq in numbered(&self.dir)? {
            if seq + u64::from(self.files) <= next {
                match std::fs::remove_file(Self::path(&self.dir, seq)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        self.seq = next;
        self.reopen()
    }

    fn reopen(&mut self) -> io::Result<()> {
        // Owner-only: an instance's output may hold what its environment does.
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(Self::path(&self.dir, self.seq))?;
        self.size = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }
}

/// The directory's own block, counted in the bound (what `du` counts).
const DIR_BYTES: u64 = 4096;
/// Files are sized in whole blocks, so what `du` counts of them is their length.
const BLOCK_BYTES: u64 = 4096;

/// The size of each of `files` files so that the directory with its files never takes more than
/// `bytes_max` on disk: (`bytes_max` - the directory's block) / `files`, rounded down to a
/// whole block.
pub fn file_bytes_for(bytes_max: u64, files: u32) -> u64 {
    let per_file = bytes_max.saturating_sub(DIR_BYTES) / u64::from(files.max(1));
    per_file / BLOCK_BYTES * BLOCK_BYTES
}

/// The numbers of the log files in `dir`, oldest first.
pub fn numbered(dir: &Path) -> io::Result<Vec<u64>> {
    let mut seqs: Vec<u64> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            name.strip_prefix(OUTPUT_PREFIX)?
                .strip_suffix(".log")?
                .parse()
                .ok()
        })
        .collect();
    seqs.sort_unstable();
    Ok(seqs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    }

    #[test]
    fn lost_writes_are_told_in_the_output_once_the_disk_takes_them_again() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let mut w = Rotating::open(&logs, 300, 2).unwrap();
        w.write(&[b'a'; 200]);
        w.flush();
        std::fs::remove_dir_all(&logs).unwrap();
        w.write(&[b'b'; 200]); // needs a rotation, which the missing directory refuses
        assert_eq!(w.dropped, 1);
        std::fs::create_dir(&logs).unwrap();
        w.write(b"back\n");
        w.flush();
        let seqs = numbered(&logs).unwrap();
        let text = std::fs::read_to_string(Rotating::path(&logs, seqs[0])).unwrap();
        assert!(
            text.contains(" stderr F [shoal log-relay: 1 writes of output lost"),
            "{text}"
        );
        assert!(text.ends_with("back\n"), "{text}");
    }

    #[test]
    fn files_are_whole_blocks_beside_the_directory() {
        assert_eq!(file_bytes_for(10 << 20, 2), (10 << 20) / 2 - 4096);
        assert_eq!(file_bytes_for(100_000, 3), 28_672);
        assert_eq!(file_bytes_for(100, 0), 0);
    }

    #[test]
    fn the_files_never_pass_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Rotating::open(dir.path(), 1000, 3).unwrap();
        assert_eq!(w.file_bytes_max(), 1000);
        for i in 0..500u32 {
            let record = format!("record {i} {}\n", "x".repeat((i % 97) as usize));
            w.write(record.as_bytes());
            if i % 7 == 0 {
                w.flush();
            }
            assert!(total(dir.path()) <= 3000);
        }
        w.flush();
        assert!(total(dir.path()) <= 3000);
        let seqs = numbered(dir.path()).unwrap();
        assert_eq!(seqs.len(), 3);
        assert_eq!(seqs[2] - seqs[0], 2);
        let newest = std::fs::read_to_string(Rotating::path(dir.path(), seqs[2])).unwrap();
        assert!(newest.contains("record 499 "), "{newest}");
        assert_eq!(w.dropped, 0);
        use std::os::unix::fs::PermissionsExt;
        for seq in seqs {
            let meta = std::fs::metadata(Rotating::path(dir.path(), seq)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "output.{seq}.log");
        }
    }
}
