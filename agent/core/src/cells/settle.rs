//! When an agent adopts a new view of the cells for placement ([`CellsSettle`]).
//!
//! Every change of an agent's cell table that placement reads (a cell learned, a republished
//! ranked figure, a down flag) is a new view, and the cell level places every replica of the
//! mesh again for it. While a mesh of cells forms, views change round after round (agents learn
//! the cells one by one while envoys republish their figures as members join): each would move
//! replicas that the next moves again. So a new view is adopted once it has stood for
//! [`CELLS_SETTLE_MS`], or once a change has waited [`CELLS_SETTLE_MAX_MS`]; at once when it
//! changes what may take replicas (a cell down, or back up, or gone: a lost cell's replicas do
//! not wait), and when it changes the level (the first view of the cells, or none).
//!
//! Pure: the caller passes `now` and what it placed over.

use super::model::Cell;

/// A new view of the cells is adopted once it has not changed for this long, ms.
pub const CELLS_SETTLE_MS: u64 = 1_000;
/// A view that keeps changing is adopted at the latest this long after the first change the
/// agent has not adopted, ms.
pub const CELLS_SETTLE_MAX_MS: u64 = 3_000;

/// The view of the cells waiting to be adopted (see the module).
#[derive(Clone, Debug, Default)]
pub struct CellsSettle {
    pending: Option<Pending>,
}

#[derive(Clone, Debug)]
struct Pending {
    cells: Option<Vec<Cell>>,
    /// When `cells` was read (the last change).
    since: u64,
    /// When the first change not adopted was read.
    first: u64,
}

impl CellsSettle {
    /// A settle with nothing waiting.
    pub fn new() -> CellsSettle {
        CellsSettle::default()
    }

    /// Takes `read`, a new reading of the cells to place over (`None`: nothing new was read;
    /// `Some(None)`: one level, no other cell), at `now` (ms), against `adopted`, the view placed
    /// over now (`None`: one level). Returns the view to adopt now, if any.
    pub fn offer(
        &mut self,
        now: u64,
        read: Option<Option<Vec<Cell>>>,
        adopted: Option<&[Cell]>,
    ) -> Option<Option<Vec<Cell>>> {
        if let Some(read) = read {
            if read.as_deref() == adopted {
                self.pending = None;
                return None;
            }
            match &mut self.pending {
                Some(p) if p.cells == read => {}
                Some(p) => {
                    p.cells = read;
                    p.since = now;
                }
                None => {
                    self.pending = Some(Pending {
                        cells: read,
                        since: now,
                        first: now,
                    })
                }
            }
        }
        let p = self.pending.as_ref()?;
        let due = urgent(p.cells.as_deref(), adopted)
            || now >= p.since.saturating_add(CELLS_SETTLE_MS)
            || now >= p.first.saturating_add(CELLS_SETTLE_MAX_MS);
        if !due {
            return None;
        }
        self.pending.take().map(|p| p.cells)
    }

    /// Whether a view waits to be adopted.
    pub fn waiting(&self) -> bool {
        self.pending.is_some()
    }
}

/// Whether `next` must be adopted at once over `adopted`: it changes the level, or what may take
/// replicas (a cell usable in one and not in the other, or one of `adopted` gone from `next`).
/// Both are sorted by cell name, as the table gives them.
fn urgent(next: Option<&[Cell]>, adopted: Option<&[Cell]>) -> bool {
    let (Some(next), Some(adopted)) = (next, adopted) else {
        return true;
    };
    let find = |cells: &[Cell], name: &str| {
        (cells
            .binary_search_by(|c| c.summary.cell.as_str().cmp(name))
            .ok())
        .map(|i| cells[i].usable())
    };
    adopted
        .iter()
        .any(|a| find(next, &a.summary.cell) != Some(a.usable()))
        || next
            .iter()
            .any(|n| !n.usable() && find(adopted, &n.summary.cell).is_some_and(|u| u))
}
