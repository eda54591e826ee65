//! Sticky stateful replicas: an exclusive replica with data of its own (`WorkloadSpec::sticky`)
//! placed on this node while another node holds its data does not start empty here on its own.
//!
//! Placement already prefers the node that holds a replica's data (`Workload::sticky`), so a
//! replica lands here with its data elsewhere only when that node cannot take it: down, draining,
//! no longer eligible, or out of room. The start then waits under a held
//! [`IssueKind::DataElsewhere`] issue that names the holder; it goes ahead when
//! - the holder record names this node (the shell records the node that runs a replica), or
//! - an operator approves the issue (`shoal approve`: start it empty here now), or
//! - the spec says `on_data_loss = "start-empty"` and `sticky_for` has passed since this node
//!   began waiting.
//!
//! The same wait holds a replica whose record names this node when this node no longer holds the
//! data (`ReconcileInput::data_missing`: its data directory was removed, or the disk is new):
//! starting it would start it empty just the same.
//!
//! Once it went ahead, later starts here (a crash before the shell recorded this node as the
//! holder) do not ask again. The wait counts from when this node began waiting, not from when
//! the holder went down: a node that restarts begins again, which only waits longer.

use crate::instance::ReplicaId;
use crate::reconcile::input::SpecEntry;
use crate::reconcile::issue::IssueKind;
use crate::reconcile::plan::{Ctx, Plan};
use crate::reconcile::track::ReplicaState;
use crate::spec::{format_duration_ms, OnDataLoss};

/// Whether the start of `replica` may go ahead as far as its data goes, raising the held issue
/// otherwise.
pub(crate) fn data_allows(
    ctx: &Ctx<'_>,
    plan: &mut Plan,
    replica: &ReplicaId,
    entry: &SpecEntry,
    state: &mut ReplicaState,
) -> bool {
    let why = match ctx.input.data_holders.get(replica) {
        Some(_) if !entry.spec.sticky() || state.data_taken => None,
        Some(holder) if holder != ctx.node => Some(format!(
            "{replica}'s data is on {holder}, which {}",
            standing(ctx, holder)
        )),
        Some(_) if state.started_here => None,
        Some(_) => ctx
            .input
            .data_missing
            .get(replica)
            .map(|gone| format!("{replica}'s data was on this node, but {gone}")),
        None => None,
    };
    let Some(why) = why else {
        state.data_wait_since_ms = None;
        return true;
    };
    let now = ctx.now_ms;
    let since = *state.data_wait_since_ms.get_or_insert(now);
    let placement = &entry.spec.placement;
    let due = since.saturating_add(placement.sticky_for_ms());
    if ctx.approved(IssueKind::DataElsewhere, Some(replica)) {
        let msg = format!(
            "starting it empty on {} on operator approval: {why}",
            ctx.node
        );
        plan.held(IssueKind::DataElsewhere, Some(replica), msg, why);
        state.data_taken = true;
        return true;
    }
    let on_loss = placement.on_data_loss();
    if on_loss == OnDataLoss::StartEmpty && now >= due {
        let msg = format!(
            "starting it empty on {}: {why}, and sticky_for ({}) has passed with on_data_loss = \
             \"start-empty\"",
            ctx.node,
            format_duration_ms(placement.sticky_for_ms())
        );
        plan.issue(IssueKind::DataElsewhere, Some(replica), msg);
        state.data_taken = true;
        return true;
    }
    let then = match on_loss {
        OnDataLoss::StartEmpty => {
            plan.wake_at(due);
            format!("it starts empty here at {due} (sticky_for, on_data_loss = \"start-empty\")")
        }
        OnDataLoss::Wait => "it waits for its data (on_data_loss = \"wait\")".to_string(),
    };
    let msg = format!(
        "not started: {why}; {then}; approve to start it empty on {} now",
        ctx.node
    );
    plan.held(IssueKind::DataElsewhere, Some(replica), msg, why);
    false
}

/// How the holder stands, as this node's failure detector sees it.
fn standing(ctx: &Ctx<'_>, holder: &str) -> &'static str {
    let m = &ctx.input.membership;
    if m.dead.contains(holder) {
        "is down"
    } else if m.unreachable.contains(holder) {
        "is unreachable"
    } else if m.live.contains(holder) {
        "is up but cannot take it (draining, no longer eligible, or out of room)"
    } else {
        "this node does not know (it left the mesh)"
    }
}
