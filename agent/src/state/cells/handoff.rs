//! What this agent asks other cells about the replicas it runs or owns.
//!
//! - **Handoffs.** An instance whose replica the cell level moved to another cell keeps running
//!   until that cell's copy serves (as a move inside a cell waits for the successor's gossip),
//!   but this cell never gossips with the other's members. So the host loop lists what it runs
//!   that went elsewhere ([`Handoffs::set_moved`]) and the reconciler gets whether that cell
//!   said its copy serves (`ReconcileInput::moved_to_cells`).
//! - **Exclusive replicas.** Before an exclusive replica placed on this agent starts, every
//!   other cell that is up must say it runs no copy that may be alive and does not claim it
//!   with a name that sorts first ([`Handoffs::set_exclusive`], `ReconcileInput::cell_copies`).
//!
//! The cell exchange asks each round (`exchange::ask_copies`, `Request::CellCopies`): the cells of moved
//! replicas (a few per round), and every cell that is up while this agent owns an exclusive
//! replica that does not run here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::{CellCopies, CellHandoff, InstanceStatus};

/// Most replicas asked of one cell in one request (and accepted in one).
pub const SERVING_ASK_MAX: usize = 1024;
/// Most cells asked about moved replicas in one round of the exchange.
pub const SERVING_CELLS_PER_ROUND: usize = 8;
/// How long an answer counts, ms (the exchange asks every second). `cell_live_claim_ms` must
/// exceed twice this plus a cell's gossip spread (docs/reconcile.md).
pub const SERVING_FRESH_MS: u64 = 3_000;
/// Cells asked at once.
pub const ASKS_IN_FLIGHT: usize = 32;

pub use crate::wire::cells::CopiesAnswer;

/// What this agent runs that the cell level placed in another cell, the exclusive replicas
/// placed on it, and what the other cells said.
#[derive(Default)]
pub struct Handoffs {
    inner: Mutex<Inner>,
}

/// What one cell said of one exclusive replica, and when (the cells' monotonic ms).
#[derive(Clone, Copy, Debug)]
struct Said {
    at: u64,
    alive: bool,
    claimed: bool,
}

#[derive(Default)]
struct Inner {
    /// Replica -> the cell it is placed in now.
    moved: BTreeMap<ReplicaId, String>,
    /// Replica -> when its cell last said its copy serves.
    serving: BTreeMap<ReplicaId, u64>,
    /// Exclusive replicas placed on this agent with no copy alive here.
    exclusive: BTreeSet<ReplicaId>,
    /// (replica, cell) -> what that cell said of it.
    said: BTreeMap<(ReplicaId, String), Said>,
}

impl Handoffs {
    /// The host loop's list of instances running here whose replica is in another cell now.
    pub fn set_moved(&self, moved: BTreeMap<ReplicaId, String>) {
        let mut inner = self.inner.lock().expect("handoffs lock");
        inner.serving.retain(|r, _| moved.contains_key(r));
        inner.moved = moved;
    }

    /// The host loop's list of exclusive replicas placed on this agent that do not run here.
    pub fn set_exclusive(&self, exclusive: BTreeSet<ReplicaId>) {
        let mut inner = self.inner.lock().expect("handoffs lock");
        inner.said.retain(|(r, _), _| exclusive.contains(r));
        inner.exclusive = exclusive;
    }

    /// The reconciler's view at `now` (monotonic ms): each moved replica, its cell and whether
    /// that cell said within [`SERVING_FRESH_MS`] that its copy serves.
    pub fn view(&self, now: u64) -> BTreeMap<ReplicaId, CellHandoff> {
        let inner = self.inner.lock().expect("handoffs lock");
        inner
            .moved
            .iter()
            .map(|(r, cell)| {
                let serving = inner
                    .serving
                    .get(r)
                    .is_some_and(|at| now.saturating_sub(*at) <= SERVING_FRESH_MS);
                let handoff = CellHandoff {
                    cell: cell.clone(),
                    serving,
                };
                (r.clone(), handoff)
            })
            .collect()
    }

    /// For each exclusive replica placed here, what the cells up now (`up`, other than `own`)
    /// said within [`SERVING_FRESH_MS`]: a copy alive, a claim by a cell whose name sorts before
    /// `own`, or nothing lately.
    pub fn copies(&self, now: u64, own: &str, up: &[String]) -> BTreeMap<ReplicaId, CellCopies> {
        let inner = self.inner.lock().expect("handoffs lock");
        let mut out = BTreeMap::new();
        for r in &inner.exclusive {
            let mut copies = CellCopies::default();
            for cell in up.iter().filter(|c| c.as_str() != own) {
                let said = inner
                    .said
                    .get(&(r.clone(), cell.clone()))
                    .filter(|s| now.saturating_sub(s.at) <= SERVING_FRESH_MS);
                match said {
                    None => copies.unanswered.push(cell.clone()),
                    Some(s) if s.alive => copies.alive_in.push(cell.clone()),
                    Some(s) if s.claimed && cell.as_str() < own => {
                        copies.claimed_by.push(cell.clone())
                    }
                    Some(_) => {}
                }
            }
            out.insert(r.clone(), copies);
        }
        out
    }

    /// What to ask this round, by cell: every cell in `up` while an exclusive replica waits
    /// (those replicas, and the cell's moved ones), else at most [`SERVING_CELLS_PER_ROUND`]
    /// cells of moved replicas (rotated by `round`); at most [`SERVING_ASK_MAX`] replicas each.
    pub(crate) fn to_ask(&self, round: u64, up: &[String]) -> Vec<(String, Vec<ReplicaId>)> {
        let inner = self.inner.lock().expect("handoffs lock");
        let mut by_cell: BTreeMap<&str, Vec<ReplicaId>> = BTreeMap::new();
        for (r, cell) in &inner.moved {
            let list = by_cell.entry(cell.as_str()).or_default();
            if list.len() < SERVING_ASK_MAX {
                list.push(r.clone());
            }
        }
        if !inner.exclusive.is_empty() {
            return up
                .iter()
                .map(|cell| {
                    let mut list = by_cell.remove(cell.as_str()).unwrap_or_default();
                    let room = SERVING_ASK_MAX.saturating_sub(list.len());
                    list.extend(inner.exclusive.iter().take(room).cloned());
                    (cell.clone(), list)
                })
                .collect();
        }
        let mut all: Vec<(String, Vec<ReplicaId>)> = by_cell
            .into_iter()
            .map(|(cell, list)| (cell.to_string(), list))
            .collect();
        if !all.is_empty() {
            let skip = round as usize % all.len();
            all.rotate_left(skip);
        }
        all.truncate(SERVING_CELLS_PER_ROUND);
        all
    }

    /// Records `cell`'s answer at `now` about the `asked` replicas.
    pub(crate) fn answered(
        &self,
        cell: &str,
        asked: &[ReplicaId],
        answer: &CopiesAnswer,
        now: u64,
    ) {
        let mut inner = self.inner.lock().expect("handoffs lock");
        let Inner {
            moved,
            serving,
            exclusive,
            said,
        } = &mut *inner;
        for r in asked {
            if moved.get(r).is_some_and(|c| c == cell) {
                match answer.serving.contains(r) {
                    true => serving.insert(r.clone(), now),
                    false => serving.remove(r),
                };
            }
            if exclusive.contains(r) {
                let s = Said {
                    at: now,
                    alive: answer.alive.contains(r),
                    claimed: answer.claimed.contains(r),
                };
                said.insert((r.clone(), cell.to_string()), s);
            }
        }
    }
}

/// The answer to `Request::CellCopies` on an agent: of `asked`, those its cell's placement
/// (`placed`: replica -> member) puts on a member that is live and gossips a serving copy, those
/// with a copy that may be alive on any member (`observed`: member -> (live, its instances)), and
/// those it places at all (claimed: its cell level put them in its cell).
pub fn copies_answer(
    asked: &[ReplicaId],
    placed: &BTreeMap<ReplicaId, String>,
    observed: &BTreeMap<String, (bool, Vec<InstanceStatus>)>,
) -> CopiesAnswer {
    let mut answer = CopiesAnswer::default();
    for r in asked {
        let serving = placed
            .get(r)
            .and_then(|owner| observed.get(owner))
            .is_some_and(|(live, list)| {
                *live && list.iter().any(|s| &s.replica == r && s.serves())
            });
        if serving {
            answer.serving.push(r.clone());
        }
        let alive = observed
            .values()
            .any(|(_, list)| list.iter().any(|s| &s.replica == r && s.may_be_alive()));
        if alive {
            answer.alive.push(r.clone());
        }
        if placed.contains_key(r) {
            answer.claimed.push(r.clone());
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_core::instance::Phase;

    fn status(replica: &ReplicaId, healthy: bool) -> InstanceStatus {
        InstanceStatus {
            healthy,
            ..InstanceStatus::new(replica.clone(), Some("h".into()), Phase::Running, "v1")
        }
    }

    #[test]
    fn only_a_live_placed_member_with_a_serving_copy_counts() {
        let (a, b, c, d) = (
            ReplicaId::new("web", 0),
            ReplicaId::new("web", 1),
            ReplicaId::new("web", 2),
            ReplicaId::new("web", 3),
        );
        let placed: BTreeMap<ReplicaId, String> = [
            (a.clone(), "n1".to_string()),
            (b.clone(), "n2".to_string()),
            (c.clone(), "n1".to_string()),
        ]
        .into_iter()
        .collect();
        let observed: BTreeMap<String, (bool, Vec<InstanceStatus>)> = [
            // n1 live: a serves, c is unhealthy; it also runs d, which is placed nowhere here.
            (
                "n1".to_string(),
                (
                    true,
                    vec![status(&a, true), status(&c, false), status(&d, true)],
                ),
            ),
            // n2 serves b but is not live.
            ("n2".to_string(), (false, vec![status(&b, true)])),
        ]
        .into_iter()
        .collect();
        let asked = [a.clone(), b.clone(), c.clone(), d.clone()];
        let answer = copies_answer(&asked, &placed, &observed);
        assert_eq!(answer.serving, vec![a.clone()]);
        // Alive on any member, live or not, placed or not (c: running, unhealthy).
        assert_eq!(answer.alive, vec![a.clone(), b.clone(), c.clone(), d]);
        assert_eq!(answer.claimed, vec![a, b, c]);
    }

    #[test]
    fn answers_are_fresh_for_a_while_and_only_for_what_was_asked() {
        let h = Handoffs::default();
        let (a, b) = (ReplicaId::new("api", 0), ReplicaId::new("api", 1));
        let moved = [(a.clone(), "c2".to_string()), (b.clone(), "c3".to_string())];
        h.set_moved(moved.into_iter().collect());
        assert_eq!(h.to_ask(0, &[]).len(), 2);
        // c2 says a serves (and names b, which was not asked of it).
        h.answered("c2", std::slice::from_ref(&a), &serving(&[&a, &b]), 1_000);
        let v = h.view(1_000 + SERVING_FRESH_MS);
        assert!(v[&a].serving);
        assert_eq!(v[&a].cell, "c2");
        assert!(!v[&b].serving);
        assert!(!h.view(1_001 + SERVING_FRESH_MS)[&a].serving);
        // A later answer without it withdraws it.
        h.answered("c2", std::slice::from_ref(&a), &serving(&[]), 2_000);
        assert!(!h.view(2_000)[&a].serving);
        // A replica no longer moved is forgotten.
        h.answered("c2", std::slice::from_ref(&a), &serving(&[&a]), 3_000);
        h.set_moved(std::iter::once((b.clone(), "c3".to_string())).collect());
        assert!(!h.view(3_000).contains_key(&a));
    }

    #[test]
    fn a_round_asks_a_bounded_rotating_set_of_cells() {
        let h = Handoffs::default();
        let moved = (0..20).map(|i| (ReplicaId::new("w", i), format!("c{:02}", i % 10)));
        h.set_moved(moved.collect());
        let first: Vec<String> = h.to_ask(0, &[]).into_iter().map(|(c, _)| c).collect();
        let second: Vec<String> = h.to_ask(3, &[]).into_iter().map(|(c, _)| c).collect();
        assert_eq!(first.len(), SERVING_CELLS_PER_ROUND);
        assert_eq!(first[0], "c00");
        assert_eq!(second[0], "c03");
        assert!(h.to_ask(0, &[]).iter().all(|(_, list)| list.len() == 2));
    }

    fn serving(replicas: &[&ReplicaId]) -> CopiesAnswer {
        CopiesAnswer {
            serving: replicas.iter().map(|r| (*r).clone()).collect(),
            ..CopiesAnswer::default()
        }
    }

    #[test]
    fn exclusive_replicas_are_asked_of_every_up_cell_and_judged_by_fresh_answers() {
        let h = Handoffs::default();
        let db = ReplicaId::new("db", 0);
        h.set_exclusive(std::iter::once(db.clone()).collect());
        let up = ["c1".to_string(), "c3".to_string(), "c4".to_string()];
        let asked: Vec<String> = h.to_ask(0, &up).into_iter().map(|(c, _)| c).collect();
        assert_eq!(asked, up, "every up cell, every round");
        let copies = h.copies(0, "c2", &up);
        assert_eq!(copies[&db].unanswered, up, "nobody answered yet");

        let one = std::slice::from_ref(&db);
        let claimed = CopiesAnswer {
            claimed: vec![db.clone()],
            ..CopiesAnswer::default()
        };
        let alive = CopiesAnswer {
            alive: vec![db.clone()],
            ..CopiesAnswer::default()
        };
        h.answered("c1", one, &claimed, 1_000);
        h.answered("c3", one, &claimed, 1_000);
        h.answered("c4", one, &alive, 1_000);
        let copies = h.copies(1_000, "c2", &up);
        // c1 sorts before c2: its claim counts; c3's does not.
        assert_eq!(copies[&db].claimed_by, ["c1"]);
        assert_eq!(copies[&db].alive_in, ["c4"]);
        assert!(copies[&db].unanswered.is_empty());
        // Answers age out; a cell no longer up is not waited for.
        let later = 1_001 + SERVING_FRESH_MS;
        let copies = h.copies(later, "c2", &up[..1]);
        assert_eq!(copies[&db].unanswered, ["c1"]);
        // Placed elsewhere now: forgotten.
        h.set_exclusive(BTreeSet::new());
        assert!(h.copies(later, "c2", &up).is_empty());
    }
}
