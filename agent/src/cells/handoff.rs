//! Handoffs across cells. An instance whose replica the cell level moved to another cell keeps
//! running until that cell's copy serves (as a move inside a cell waits for the successor's
//! gossip), but this cell never gossips with the other's members. So the host loop lists what it
//! runs that went elsewhere ([`Handoffs::set_moved`]), the cell exchange asks each such cell
//! ([`ask`], `Request::CellServing`) which of those replicas its own placement puts on a live
//! member that gossips a serving copy, and the answers, while fresh, reach the reconciler as
//! `ReconcileInput::moved_to_cells`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::{CellHandoff, InstanceStatus};

use super::{parse_contact, CellState, CELLS_CALL_TIMEOUT};
use crate::mesh::api::{Request, Response};
use crate::mesh::node::MeshNode;
use crate::rpc;

/// Most replicas asked of one cell in one request (and accepted in one).
pub const SERVING_ASK_MAX: usize = 1024;
/// Most cells asked in one round of the exchange.
pub const SERVING_CELLS_PER_ROUND: usize = 8;
/// How long a "serving" answer counts, ms (the exchange asks every second).
pub const SERVING_FRESH_MS: u64 = 5_000;

/// What this agent runs that the cell level placed in another cell, and what those cells said.
#[derive(Default)]
pub struct Handoffs {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Replica -> the cell it is placed in now.
    moved: BTreeMap<ReplicaId, String>,
    /// Replica -> when (the cells' monotonic ms) its cell last said its copy serves.
    serving: BTreeMap<ReplicaId, u64>,
}

impl Handoffs {
    /// The host loop's list of instances running here whose replica is in another cell now.
    pub fn set_moved(&self, moved: BTreeMap<ReplicaId, String>) {
        let mut inner = self.inner.lock().expect("handoffs lock");
        inner.serving.retain(|r, _| moved.contains_key(r));
        inner.moved = moved;
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

    /// The moved replicas by cell, at most [`SERVING_CELLS_PER_ROUND`] cells (rotated by
    /// `round`) and [`SERVING_ASK_MAX`] replicas each.
    fn to_ask(&self, round: u64) -> Vec<(String, Vec<ReplicaId>)> {
        let inner = self.inner.lock().expect("handoffs lock");
        let mut by_cell: BTreeMap<&str, Vec<ReplicaId>> = BTreeMap::new();
        for (r, cell) in &inner.moved {
            let list = by_cell.entry(cell.as_str()).or_default();
            if list.len() < SERVING_ASK_MAX {
                list.push(r.clone());
            }
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

    /// Records a cell's answer at `now`: `serving` of the `asked` replicas serve there.
    fn answered(&self, asked: &[ReplicaId], serving: &[ReplicaId], now: u64) {
        let mut inner = self.inner.lock().expect("handoffs lock");
        for r in asked {
            inner.serving.remove(r);
        }
        for r in serving.iter().filter(|r| asked.contains(r)) {
            if inner.moved.contains_key(r) {
                inner.serving.insert(r.clone(), now);
            }
        }
    }
}

/// Asks the cells that hold replicas running here which of them serve there (one round; a cell
/// that does not answer leaves its replicas waiting, up to the handoff bound).
pub async fn ask(node: &MeshNode, round: u64) {
    let cells: &CellState = &node.cells;
    for (cell, replicas) in cells.handoffs.to_ask(round) {
        let Some(summary) = cells.summary(&cell) else {
            continue;
        };
        let req = Request::CellServing {
            replicas: replicas.clone(),
        };
        for contact in summary.contacts.iter().filter_map(|c| parse_contact(c)) {
            let answer: Result<Response, _> = rpc::call_with(
                node.rpc.as_ref(),
                contact.api,
                &contact.name,
                &req,
                CELLS_CALL_TIMEOUT,
            )
            .await;
            match answer {
                Ok(Response::Serving { replicas: serving }) => {
                    cells
                        .handoffs
                        .answered(&replicas, &serving, cells.mono_ms());
                    break;
                }
                other => {
                    tracing::debug!(%cell, contact = %contact.name, answer = ?other, "serving ask failed");
                }
            }
        }
    }
}

/// The answer to `Request::CellServing` on an agent: of `asked`, the replicas its cell's
/// placement (`placed`: replica -> member) puts on a member that is live and gossips a serving
/// copy (`observed`: member -> (live, its instances)).
pub fn serving_answer(
    asked: &[ReplicaId],
    placed: &BTreeMap<ReplicaId, String>,
    observed: &BTreeMap<String, (bool, Vec<InstanceStatus>)>,
) -> Vec<ReplicaId> {
    asked
        .iter()
        .filter(|r| {
            placed
                .get(*r)
                .and_then(|owner| observed.get(owner))
                .is_some_and(|(live, list)| {
                    *live && list.iter().any(|s| &s.replica == *r && s.serves())
                })
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_core::instance::Phase;

    fn status(replica: &ReplicaId, healthy: bool) -> InstanceStatus {
        InstanceStatus {
            replica: replica.clone(),
            handle: Some("h".to_string()),
            phase: Phase::Running,
            healthy,
            restarts: 0,
            spec_version: "v1".to_string(),
            since_ms: 0,
            exit_code: None,
            last_error: None,
            fence_token: None,
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
        let asked = [a.clone(), b, c, d];
        assert_eq!(serving_answer(&asked, &placed, &observed), vec![a]);
    }

    #[test]
    fn answers_are_fresh_for_a_while_and_only_for_what_was_asked() {
        let h = Handoffs::default();
        let (a, b) = (ReplicaId::new("api", 0), ReplicaId::new("api", 1));
        let moved = [(a.clone(), "c2".to_string()), (b.clone(), "c3".to_string())];
        h.set_moved(moved.into_iter().collect());
        assert_eq!(h.to_ask(0).len(), 2);
        // c2 says a serves (and names b, which was not asked of it).
        h.answered(std::slice::from_ref(&a), &[a.clone(), b.clone()], 1_000);
        let v = h.view(1_000 + SERVING_FRESH_MS);
        assert!(v[&a].serving);
        assert_eq!(v[&a].cell, "c2");
        assert!(!v[&b].serving);
        assert!(!h.view(1_001 + SERVING_FRESH_MS)[&a].serving);
        // A later answer without it withdraws it.
        h.answered(std::slice::from_ref(&a), &[], 2_000);
        assert!(!h.view(2_000)[&a].serving);
        // A replica no longer moved is forgotten.
        h.answered(std::slice::from_ref(&a), std::slice::from_ref(&a), 3_000);
        h.set_moved(std::iter::once((b.clone(), "c3".to_string())).collect());
        assert!(!h.view(3_000).contains_key(&a));
    }

    #[test]
    fn a_round_asks_a_bounded_rotating_set_of_cells() {
        let h = Handoffs::default();
        let moved = (0..20).map(|i| (ReplicaId::new("w", i), format!("c{:02}", i % 10)));
        h.set_moved(moved.collect());
        let first: Vec<String> = h.to_ask(0).into_iter().map(|(c, _)| c).collect();
        let second: Vec<String> = h.to_ask(3).into_iter().map(|(c, _)| c).collect();
        assert_eq!(first.len(), SERVING_CELLS_PER_ROUND);
        assert_eq!(first[0], "c00");
        assert_eq!(second[0], "c03");
        assert!(h.to_ask(0).iter().all(|(_, list)| list.len() == 2));
    }
}
