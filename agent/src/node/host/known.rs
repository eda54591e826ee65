//! What the host loop keeps across restarts of its agent: the reconciler's last-majority time
//! (a file in the data dir, wall-clock time) and the members and cells it knew (the store's
//! node facts), so a restarted agent neither forgets a partition nor takes its first partial view
//! for the whole mesh.

use super::{clock, majority, HostLoop};

impl HostLoop {
    /// Keeps the reconciler's last-majority time in `path` across restarts: restores the saved
    /// value now (call before [`HostLoop::run`]) and saves it every few seconds from then on. The
    /// file holds wall-clock time; the reconciler counts on the monotonic clock.
    pub fn keep_majority_time_in(&mut self, path: std::path::PathBuf) {
        if let Some(wall_ms) = majority::read(&path) {
            let (mono_now, wall_now) = ((self.host.mono)(), (self.host.clock)());
            let mono_ms = clock::wall_to_mono(wall_ms, mono_now, wall_now);
            tracing::info!(
                last_majority_ms = wall_ms,
                "restored the last time a majority was seen"
            );
            self.reconciler.restore_last_majority(mono_ms);
            self.majority_saved_wall = Some(wall_ms);
        }
        self.majority_file = Some(path);
    }

    /// Saves the last-majority time (as wall-clock time) when it moved enough since the last save.
    pub(super) fn save_majority_time(&mut self, last_majority_mono: Option<u64>) {
        let (Some(path), Some(mono_ms)) = (self.majority_file.as_ref(), last_majority_mono) else {
            return;
        };
        let (mono_now, wall_now) = ((self.host.mono)(), (self.host.clock)());
        let wall_ms = clock::mono_to_wall(mono_ms, mono_now, wall_now);
        let saved = self.majority_saved_wall;
        if saved.is_some_and(|s| wall_ms < s.saturating_add(majority::SAVE_EVERY_MS)) {
            return;
        }
        match majority::write(path, wall_ms) {
            Ok(()) => self.majority_saved_wall = Some(wall_ms),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot save the last-majority time")
            }
        }
    }

    /// Hands the reconciler the member count saved at its last majority (the store survives
    /// restarts), before the first round.
    pub(super) async fn restore_members_known(&mut self) {
        let saved = self.host.node.with_store(|s| s.members_known_load()).await;
        match saved {
            Ok(Some(members)) => {
                let members = usize::try_from(members).unwrap_or(usize::MAX);
                tracing::info!(
                    members,
                    "restored the member count last seen with a majority"
                );
                self.reconciler.restore_members_known(members);
                self.members_saved = Some(members);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the member count saved at a majority")
            }
        }
    }

    /// Saves the member count at a majority when it changed (rarely: the mesh grew or shrank).
    pub(super) async fn save_members_known(&mut self) {
        let Some(members) = self.reconciler.members_known_at_majority() else {
            return;
        };
        if self.members_saved == Some(members) {
            return;
        }
        let saved = self
            .host
            .node
            .with_store(move |s| s.members_known_save(members as u64))
            .await;
        match saved {
            Ok(()) => self.members_saved = Some(members),
            Err(e) => tracing::warn!(error = %e, "cannot save the member count at a majority"),
        }
    }

    /// Hands the cells the count of cells saved at their last quorum (a restarted agent of a
    /// cell cut off from the others is then no majority of the cells it hears).
    pub(super) async fn restore_cells_known(&mut self) {
        let saved = self.host.node.with_store(|s| s.cells_known_load()).await;
        match saved {
            Ok(Some(cells)) => {
                let cells = usize::try_from(cells).unwrap_or(usize::MAX);
                tracing::info!(cells, "restored the cell count last seen with a quorum");
                self.host.node.cells.set_known_floor(cells);
                self.cells_saved = Some(cells);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the cell count saved at a quorum"),
        }
    }

    /// Saves the count of cells held while this cell holds its quorum, when it changed.
    pub(super) async fn save_cells_known(&mut self) {
        let cells = &self.host.node.cells;
        // This round's quorum (the input built it); the count held now, not the floor: cells
        // forgotten (down for an hour) stop counting once the rest hold a quorum without them.
        let quorum = self.shell.input().membership.cells.as_ref();
        let Some(known) = quorum.filter(|q| q.holds()).map(|_| cells.held()) else {
            return;
        };
        if self.cells_saved == Some(known) {
            return;
        }
        cells.set_known_floor(known);
        let saved = self
            .host
            .node
            .with_store(move |s| s.cells_known_save(known as u64))
            .await;
        match saved {
            Ok(()) => self.cells_saved = Some(known),
            Err(e) => tracing::warn!(error = %e, "cannot save the cell count at a quorum"),
        }
    }
}
