//! [`CellQuorum`]: a cell's standing among the cells, which the [`CellTable`](super::CellTable)
//! computes and the reconciler reads: a node keeps or starts exclusive replicas only while its
//! cell's quorum holds (docs/reconcile.md, "Exclusive replicas across cells").

/// A cell's standing among the cells, as one agent's cell table shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CellQuorum {
    /// Cells known, this node's own included.
    pub known: usize,
    /// Cells with this node's cell, two ways: its own, and each other cell that is up in this
    /// agent's table and whose latest summary holds this node's cell up.
    pub with_us: usize,
    /// Why this agent's view of the cells is not to be trusted (a summary names a cell this
    /// agent does not know: the cell level may place differently elsewhere), if so.
    pub incomplete: Option<String>,
    /// How long ago (ms) the known cell that went down last went down, if one is down now. A
    /// copy in a cell held down may still run until that cell noticed it lost its quorum and
    /// fenced it (`cell_claim_ms` after it went down, at most).
    pub newest_down_ms: Option<u64>,
}

impl CellQuorum {
    /// A strict majority of the known cells, two ways, over a complete view.
    pub fn holds(&self) -> bool {
        self.incomplete.is_none() && 2 * self.with_us > self.known
    }

    /// Why it does not hold, if it does not.
    pub fn why_not(&self) -> Option<String> {
        if let Some(why) = &self.incomplete {
            return Some(why.clone());
        }
        (!self.holds()).then(|| {
            format!(
                "{} of the {} known cells (its own included) hold this node's cell up both ways, \
                 no strict majority",
                self.with_us, self.known
            )
        })
    }
}
