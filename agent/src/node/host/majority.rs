//! Keeping the reconciler's last-majority time across agent restarts.
//!
//! An agent cut off from the majority fences its exclusive instances `self_fence` after it last
//! saw a majority. If a restart reset that clock, restarting an isolated agent would postpone its
//! fencing; so the time is saved in `DATA_DIR/last-majority` every few seconds and handed back to
//! the reconciler before its first round. A value a few seconds old only fences sooner.
//!
//! The loop also records when this node loses and regains a majority (`majority-lost`,
//! `majority-regained` events).

use std::path::Path;

/// Save again once the time moved this much (ms).
pub const SAVE_EVERY_MS: u64 = 5_000;

/// The time saved in `path`, if the file holds one. A missing file is `None`; a garbled one too,
/// with a warning (the agent then dates its lack of majority from its first round, as before).
pub fn read(path: &Path) -> Option<u64> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the last-majority time");
            return None;
        }
    };
    let parsed = text.trim().parse::<u64>().ok();
    if parsed.is_none() {
        tracing::warn!(file = %path.display(), "the last-majority time is not a number; ignored");
    }
    parsed
}

/// Saves `ms` in `path` (a temporary file renamed over it: a crash leaves the old value or the
/// new one, never half of one).
pub fn write(path: &Path, ms: u64) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{ms}\n"))?;
    std::fs::rename(&tmp, path)
}

impl super::HostLoop {
    /// Records when this node loses sight of a majority of the mesh and when it sees one again:
    /// while it lacks one, no death verdict is trusted, and the fencing delay of a dead member
    /// counts from the regain, so an operator (and a test) can tell why a replacement waited.
    pub(super) fn note_majority(&mut self) {
        let now = self.reconciler.majority_since_ms().is_some();
        let before = self.had_majority.replace(now);
        if before.is_none() || before == Some(now) {
            return;
        }
        let m = &self.shell.input().membership;
        let (live, known) = (m.live_count(&self.host.node.name), m.members_known);
        let (kind, reason) = if now {
            (
                "majority-regained",
                format!(
                    "sees a majority of the mesh again ({live} of {known} members): fencing \
                     delays of dead members count from now"
                ),
            )
        } else {
            (
                "majority-lost",
                format!(
                    "lost sight of a majority of the mesh ({live} of {known} members): no death \
                     verdict is trusted until it returns"
                ),
            )
        };
        self.host.record(kind, None, reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_ignores_what_it_cannot_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("last-majority");
        assert_eq!(read(&path), None, "missing");
        write(&path, 1_800_000_123_456).unwrap();
        assert_eq!(read(&path), Some(1_800_000_123_456));
        write(&path, 1_800_000_200_000).unwrap();
        assert_eq!(read(&path), Some(1_800_000_200_000), "replaced");
        std::fs::write(&path, "garbage").unwrap();
        assert_eq!(read(&path), None, "garbled");
        assert!(!path.with_extension("tmp").exists());
    }
}
