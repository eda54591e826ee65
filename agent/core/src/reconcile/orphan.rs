//! Instances here whose replica is no longer placed here.
//!
//! A deleted workload or a replica scaled away stops at once. An exclusive replica stops at once
//! (stop before start: the new owner waits for this copy to be gone), unless this node holds its
//! data and the new owner gossips that it waits for that data (`data.rs`): then it keeps running
//! until the new owner may start it empty. A normal replica keeps
//! running until gossip shows the new owner's copy serving (no gap in planned moves); while it
//! serves itself, however long that takes (a healthy copy is never traded for one that cannot
//! start: the new owner may refuse it, fail its pull or crash-loop), and when it does not, at
//! most until `orphan_handoff_max_ms` has passed; one the cell level moved to another cell, until that cell
//! reports its copy serving (`ReconcileInput::moved_to_cells`). Stops decided on this node's view alone (deleted, scaled
//! down, exclusive moved, handoff timeout) are held while the view is suspicious. Whatever the
//! view, an exclusive instance is fenced when this node has lacked a majority too long.

use crate::reconcile::action::{Action, StopCause};
use crate::reconcile::issue::IssueKind;
use crate::reconcile::plan::{Ctx, Plan, Rank};
use crate::reconcile::track::Tracked;

/// Plans one instance that is not placed here.
pub(crate) fn plan_orphan(ctx: &Ctx<'_>, plan: &mut Plan, handle: &str, t: &Tracked) {
    let replica = &t.replica;
    if !t.alive() {
        if t.remove_sent {
            return;
        }
        if ctx.holds_unilateral() {
            plan.unilateral += 1;
            return;
        }
        let reason = "exited and no longer placed here".to_string();
        let action = Action::Remove {
            handle: handle.to_string(),
            replica: replica.clone(),
            reason,
        };
        plan.act(Rank::Remove, action);
        return;
    }
    let spec = ctx.cache.for_instance(replica, &t.version);
    let exclusive = spec.is_some_and(|s| s.placement.exclusive);
    if exclusive && ctx.fencing_due && t.stop.is_none_or(|s| s.cause != StopCause::Fence) {
        plan.fenced += 1;
        let reason = "self-fencing: no strict majority visible".to_string();
        plan.act(Rank::Fence, ctx.stop(handle, t, StopCause::Fence, reason));
        return;
    }
    if t.stop.is_some() {
        ctx.retry_stop(plan, handle, t);
        return;
    }
    let owner = ctx.input.owners.get(replica);
    let moved = ctx
        .input
        .moved_to_cells
        .get(replica)
        .filter(|_| owner.is_none());
    let where_to = match (owner, moved) {
        (Some(o), _) => o.clone(),
        (None, Some(m)) => format!("cell {}", m.cell),
        (None, None) => "no node".to_string(),
    };
    let since = t.orphan_since_ms.unwrap_or(ctx.now_ms);
    let deadline = since.saturating_add(ctx.config.orphan_handoff_max_ms);
    let (cause, reason) = match ctx.input.spec(&replica.workload) {
        None => (
            StopCause::Deleted,
            format!("workload {} was deleted", replica.workload),
        ),
        Some(e) if replica.replica >= e.spec.replicas => (
            StopCause::ScaledDown,
            format!(
                "workload {} was scaled to {} replicas",
                replica.workload, e.spec.replicas
            ),
        ),
        Some(e) if exclusive && e.spec.sticky() && holds_data_here(ctx, replica) => {
            match owner_waits_for_data(ctx, replica, owner) {
                Some(true) => {
                    let msg = format!(
                        "placed on {where_to}, which waits for this replica's data (on this \
                         node); keeps running until it may start it empty there (`shoal \
                         approve` there, or on_data_loss = \"start-empty\")"
                    );
                    plan.issue(IssueKind::Orphan, Some(replica), msg);
                    return;
                }
                None if ctx.now_ms < deadline => {
                    let msg = format!(
                        "placed on {where_to}; keeps running until {where_to} says whether it \
                         waits for this replica's data (on this node), at most until {deadline}"
                    );
                    plan.issue(IssueKind::Orphan, Some(replica), msg);
                    plan.wake_at(deadline);
                    return;
                }
                _ => (
                    StopCause::ExclusiveMoved,
                    format!(
                        "exclusive replica placed on {where_to}, which may start it: stop before \
                         it starts there"
                    ),
                ),
            }
        }
        Some(_) if exclusive => (
            StopCause::ExclusiveMoved,
            format!("exclusive replica placed on {where_to}: stop before it starts there"),
        ),
        Some(_) => match owner.filter(|o| successor_serves(ctx, replica, o)) {
            Some(o) if confirmed(ctx, t) => (
                StopCause::Handoff,
                format!("moved to {o}, whose copy is healthy"),
            ),
            Some(o) => {
                let at = t
                    .successor_serving_since
                    .unwrap_or(ctx.now_ms)
                    .saturating_add(ctx.config.handoff_confirm_ms);
                let msg =
                    format!("moved to {o}, whose copy is healthy: stops once that holds a moment");
                plan.issue(IssueKind::Orphan, Some(replica), msg);
                plan.wake_at(at);
                return;
            }
            None if moved.is_some_and(|m| m.serving) => (
                StopCause::Handoff,
                format!("moved to {where_to}, whose copy is healthy"),
            ),
            // A healthy copy is never traded for one that is not: it keeps running however long
            // the new owner takes, or whatever stops it there (a refusal, a pull, a crash loop).
            // One that does not serve either is worth nothing here after the handoff time.
            None if ctx.now_ms >= deadline && !t.serves() => (
                StopCause::HandoffTimeout,
                format!(
                    "placed on {where_to} but no healthy copy there after {} ms, and this copy \
                     is not healthy either",
                    ctx.config.orphan_handoff_max_ms
                ),
            ),
            None => {
                let msg = if ctx.now_ms >= deadline {
                    let why = owner
                        .and_then(|o| successor_error(ctx, replica, o))
                        .unwrap_or_else(|| {
                            format!(
                                "no healthy copy after {} ms",
                                ctx.config.orphan_handoff_max_ms
                            )
                        });
                    format!(
                        "moving (blocked: {why} on {where_to}); this healthy copy keeps running \
                         until a copy there is healthy"
                    )
                } else {
                    format!("placed on {where_to}; keeps running until a copy there is healthy")
                };
                plan.issue(IssueKind::Orphan, Some(replica), msg);
                if ctx.now_ms < deadline {
                    plan.wake_at(deadline);
                }
                return;
            }
        },
    };
    if cause.is_unilateral() && !ctx.suspicious.is_empty() {
        plan.unilateral += 1;
        if ctx.holds_unilateral() {
            let msg = format!("{reason}; stop held: this node's view is suspicious");
            plan.issue(IssueKind::Orphan, Some(replica), msg);
            return;
        }
    }
    let rank = if cause.is_unilateral() {
        Rank::Unilateral
    } else {
        Rank::Handoff
    };
    plan.issue(
        IssueKind::Orphan,
        Some(replica),
        format!("{reason}; stopping it"),
    );
    plan.act(rank, ctx.stop(handle, t, cause, reason));
}

/// Whether the store records this node as the holder of the replica's data.
fn holds_data_here(ctx: &Ctx<'_>, replica: &crate::instance::ReplicaId) -> bool {
    ctx.input.data_holders.get(replica).map(String::as_str) == Some(ctx.node)
}

/// What the new owner, live, gossips of its claim on the replica: `Some(true)` while its start
/// waits for the data this node holds (stopping this copy would only leave the replica down
/// until an operator acts; the new owner cannot start while it runs, so keeping it is safe),
/// `Some(false)` once it may start, `None` when it said nothing yet or is not live.
fn owner_waits_for_data(
    ctx: &Ctx<'_>,
    replica: &crate::instance::ReplicaId,
    owner: Option<&String>,
) -> Option<bool> {
    let owner = owner.filter(|o| ctx.input.membership.live.contains(*o))?;
    ctx.peers
        .of(replica)
        .iter()
        .filter(|c| c.node == owner)
        .map(|c| c.status.waits_for_data)
        .reduce(|a, b| a || b)
}

/// What the new owner gossips went wrong with its copy of the replica (a failed start or pull,
/// a crash), if anything.
fn successor_error(
    ctx: &Ctx<'_>,
    replica: &crate::instance::ReplicaId,
    owner: &str,
) -> Option<String> {
    ctx.peers
        .of(replica)
        .iter()
        .filter(|c| c.node == owner)
        .find_map(|c| c.status.last_error.clone())
}

/// Whether the new owner has been seen live and serving the replica for `handoff_confirm_ms`,
/// and answered a round trip begun since it was first seen so (`Membership::heard_at`): gossip
/// alone can show a dead owner live with its last instances for seconds (its old heartbeats
/// relayed by members that heard it longer, after a partition heals), and a copy stopped for it
/// would be a healthy copy traded for none.
fn confirmed(ctx: &Ctx<'_>, t: &Tracked) -> bool {
    let Some(since) = t.successor_serving_since else {
        return false;
    };
    let answered = ctx
        .input
        .owners
        .get(&t.replica)
        .and_then(|owner| ctx.input.membership.heard_at.get(owner))
        .is_some_and(|&at| at >= since);
    answered && ctx.now_ms >= since.saturating_add(ctx.config.handoff_confirm_ms)
}

/// Whether the new owner is live and gossips a serving copy of the replica.
fn successor_serves(ctx: &Ctx<'_>, replica: &crate::instance::ReplicaId, owner: &str) -> bool {
    owner != ctx.node
        && ctx.input.membership.live.contains(owner)
        && ctx
            .peers
            .of(replica)
            .iter()
            .any(|c| c.node == owner && c.status.serves())
}
