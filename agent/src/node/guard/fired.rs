//! What the guard did, for the agent to report: one JSON record per line in `fired.jsonl`. The
//! guard appends (one `write` per record); the agent takes the file by renaming it away, then
//! reads it, so a record is reported once.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Largest `fired.jsonl` the agent reads, and the size past which the guard starts a new one
/// (the old one is kept as `fired.jsonl.old`).
pub const FIRED_BYTES_MAX: u64 = 1024 * 1024;
/// Most records the agent takes at once (the rest are summarised).
const RECORDS_MAX: usize = 256;
/// Most killed instances one record lists.
const KILLED_PER_RECORD_MAX: usize = 4096;

/// One time the guard acted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fired {
    /// Wall-clock time, milliseconds since the Unix epoch (for people; the guard times its lease
    /// on the monotonic clock).
    pub at_ms: u64,
    /// Why: the lease ended without renewal, or the lease file was tampered with.
    pub reason: String,
    /// What it stopped.
    pub killed: Vec<Killed>,
    /// What it tried to stop and could not, with the error.
    pub failed: Vec<String>,
}

/// One instance the guard stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Killed {
    /// Its workload.
    pub workload: String,
    /// Its replica index.
    pub replica: u32,
    /// The runtime's handle.
    pub handle: String,
    /// How: `process group 1234` or `container 0123abcd`.
    pub what: String,
}

impl Fired {
    /// One line for logs and events.
    pub fn summary(&self) -> String {
        let mut text = format!("the guard acted: {}", self.reason);
        if self.killed.is_empty() {
            text.push_str("; nothing to stop");
        } else {
            let names: Vec<String> = self
                .killed
                .iter()
                .take(8)
                .map(|k| format!("{}/{} ({})", k.workload, k.replica, k.what))
                .collect();
            let more = self.killed.len().saturating_sub(names.len());
            text.push_str(&format!("; killed {}", names.join(", ")));
            if more > 0 {
                text.push_str(&format!(" and {more} more"));
            }
        }
        if !self.failed.is_empty() {
            text.push_str(&format!("; could not stop: {}", self.failed.join("; ")));
        }
        text
    }
}

/// Appends `record` to `path` in one write, starting a new file when the current one reached
/// [`FIRED_BYTES_MAX`].
pub fn append(path: &Path, record: &Fired) -> std::io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() >= FIRED_BYTES_MAX) {
        let mut old = path.as_os_str().to_owned();
        old.push(".old");
        std::fs::rename(path, old)?;
    }
    let mut record = record.clone();
    record.killed.truncate(KILLED_PER_RECORD_MAX);
    let mut line = serde_json::to_vec(&record).expect("a record serializes");
    line.push(b'\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(&line)
}

/// Takes every record from `path` (renamed to `taken` first, so the guard's next record goes to
/// a new file). Lines that do not parse come back as records saying so; nothing at all when
/// there is no file.
pub fn take(path: &Path, taken: &Path) -> Vec<Fired> {
    if std::fs::rename(path, taken).is_err() {
        return Vec::new();
    }
    let text = match std::fs::metadata(taken) {
        Ok(m) if m.len() <= FIRED_BYTES_MAX => std::fs::read(taken).unwrap_or_default(),
        Ok(m) => {
            return vec![unreadable(format!(
                "{} is {} bytes, more than the {FIRED_BYTES_MAX} read",
                taken.display(),
                m.len()
            ))];
        }
        Err(_) => Vec::new(),
    };
    let lines: Vec<&[u8]> = text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let mut records: Vec<Fired> = lines
        .iter()
        .take(RECORDS_MAX)
        .map(|line| {
            serde_json::from_slice(line)
                .unwrap_or_else(|e| unreadable(format!("a record does not parse: {e}")))
        })
        .collect();
    if lines.len() > RECORDS_MAX {
        records.push(unreadable(format!(
            "{} more records in {} were not read",
            lines.len() - RECORDS_MAX,
            taken.display()
        )));
    }
    records
}

fn unreadable(reason: String) -> Fired {
    Fired {
        at_ms: crate::node::runtime::wall_clock_ms(),
        reason,
        killed: Vec::new(),
        failed: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u32) -> Fired {
        Fired {
            at_ms: 1,
            reason: "lease expired".into(),
            killed: vec![Killed {
                workload: "db".into(),
                replica: n,
                handle: format!("db-{n}-00000000"),
                what: "process group 42".into(),
            }],
            failed: Vec::new(),
        }
    }

    #[test]
    fn records_are_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let (path, taken) = (dir.path().join("fired.jsonl"), dir.path().join("taken"));
        assert!(take(&path, &taken).is_empty());
        append(&path, &record(0)).unwrap();
        append(&path, &record(1)).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"not json\n")
            .unwrap();
        let got = take(&path, &taken);
        assert_eq!(got.len(), 3);
        assert_eq!(got[..2], [record(0), record(1)]);
        assert!(got[2].reason.contains("does not parse"), "{:?}", got[2]);
        assert!(take(&path, &taken).is_empty(), "taken once");
        assert!(got[0].summary().contains("killed db/0 (process group 42)"));
    }
}
