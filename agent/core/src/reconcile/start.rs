//! Starting a replica placed here that has no alive instance: after a start in flight, the
//! restart policy, the runtime's support, the backoff and, for exclusive replicas, the shell's
//! guard and the safety rule of [`super::exclusive`] (with its hold for an operator) have all said
//! yes.

use crate::claims::SelfHold;
use crate::instance::ReplicaId;
use crate::reconcile::action::Action;
use crate::reconcile::data::data_allows;
use crate::reconcile::exclusive::{start_guard, Guard};
use crate::reconcile::fence_token;
use crate::reconcile::input::SpecEntry;
use crate::reconcile::issue::IssueKind;
use crate::reconcile::plan::{Ctx, Plan, Rank};
use crate::reconcile::track::Local;
use crate::resources::{human_cpu_millis, human_memory_bytes};

/// Starts a replica that has no alive instance here, once backoff, runtime and safety allow.
pub(crate) fn plan_start(
    ctx: &Ctx<'_>,
    local: &mut Local,
    plan: &mut Plan,
    replica: &ReplicaId,
    entry: &SpecEntry,
) {
    let now = ctx.now_ms;
    let exclusive = entry.spec.placement.exclusive;
    let state = local.replicas.entry(replica.clone()).or_default();
    if exclusive {
        fence_token::note_peers(state, &ctx.peers, replica);
    }
    if let Some(p) = &state.pending_start {
        let msg = format!(
            "start sent at {}; waiting for the runtime to list the instance",
            p.at_ms
        );
        plan.issue(IssueKind::Missing, Some(replica), msg);
        plan.wake_at(p.at_ms.saturating_add(ctx.config.start_report_timeout_ms));
        return;
    }
    if state.completed_version.as_deref() == Some(entry.version.as_str()) {
        if let Some(exit) = state.last_exit.as_ref().filter(|e| e.failure) {
            let msg = format!(
                "exited ({}); restart policy {} does not restart it",
                exit.error.as_deref().unwrap_or("no detail"),
                entry.spec.restart.policy
            );
            plan.issue(IssueKind::Exited, Some(replica), msg);
        }
        return;
    }
    if let Some(why) = ctx.input.unsupported_reason(&entry.spec) {
        plan.issue(
            IssueKind::Unsupported,
            Some(replica),
            format!("{why}; not started"),
        );
        return;
    }
    if let Some(why) = ctx.input.exclusive_guard_unavailable.as_ref() {
        if entry.spec.placement.exclusive {
            let msg = format!(
                "exclusive replica not started: {why}; without a guard nothing would stop it if \
                 this agent froze while the mesh started another copy"
            );
            plan.issue(IssueKind::Unsupported, Some(replica), msg);
            return;
        }
    }
    let name_held = match &ctx.input.name_hold {
        SelfHold::All(why) => Some(why),
        SelfHold::Exclusive(why) if exclusive => Some(why),
        _ => None,
    };
    if let Some(why) = name_held {
        let msg = format!("not started: {why}");
        plan.issue(IssueKind::Missing, Some(replica), msg);
        return;
    }
    if now < state.next_start_at_ms {
        let exit = state.last_exit.as_ref();
        let kind = match exit.is_some_and(|e| e.start_failed) {
            true => IssueKind::StartFailing,
            false => IssueKind::Exited,
        };
        let cause = exit
            .and_then(|e| e.error.clone())
            .unwrap_or_else(|| "exited".to_string());
        let msg = format!(
            "{cause}; {} consecutive failures, next attempt at {} (backoff)",
            state.failures,
            crate::hlc::format_utc_ms(state.next_start_at_ms)
        );
        plan.issue(kind, Some(replica), msg);
        plan.wake_at(state.next_start_at_ms);
        return;
    }
    if !data_allows(ctx, plan, replica, entry, state) {
        return;
    }
    if exclusive {
        if !exclusive_allows(ctx, plan, replica, &mut state.undecided_since_ms) {
            return;
        }
        // The claim counts from when the mesh could see it: one published while this node
        // lacked a two-way majority (its packets lost) reached nobody, and a peer that still
        // holds this node dead may be about to start the replica. Without a two-way majority
        // only an approval lets a start through, and then the claim counts from its publication.
        let claimed = state.pending_since_ms.unwrap_or(now);
        let heard = ctx
            .timers
            .two_way_since_ms
            .map_or(claimed, |t| t.max(claimed));
        let cells = ctx.input.membership.cells.as_ref();
        let claim_ms = match cells {
            Some(_) => ctx
                .config
                .cell_live_claim_ms
                .max(ctx.config.exclusive_claim_ms),
            None => ctx.config.exclusive_claim_ms,
        };
        // A cell that went down lately may still run a copy: it fences it within
        // `cell_claim_ms` of going down.
        let fenced_in = cells
            .and_then(|c| c.newest_down_ms)
            .map_or(0, |down| ctx.config.cell_claim_ms.saturating_sub(down));
        let settled = heard
            .saturating_add(claim_ms)
            .max(now.saturating_add(fenced_in));
        if now < settled {
            let msg =
                format!("claim published; starts at {settled} unless another node claims it first");
            plan.issue(IssueKind::ExclusiveWaiting, Some(replica), msg);
            plan.wake_at(settled);
            return;
        }
    }
    let reason = match (&state.last_exit, state.restart_due) {
        (Some(exit), true) => format!(
            "restart {} after {}",
            state.restarts + 1,
            exit.error.as_deref().unwrap_or("exit")
        ),
        (Some(exit), false) if exit.start_failed => format!(
            "retry start after {}",
            exit.error.as_deref().unwrap_or("a failed start")
        ),
        _ => "placed here and not running".to_string(),
    };
    if let Some(room) = &mut plan.room {
        let need = entry.spec.resources;
        if !need.fits_in(room) {
            let msg = format!(
                "placed here, not started yet: it needs {} of CPU and {} of memory, and this \
                 node has {} and {} of its capacity left (instances moving away run until their \
                 replicas are served elsewhere)",
                human_cpu_millis(need.cpu_millis),
                human_memory_bytes(need.memory_bytes),
                human_cpu_millis(room.cpu_millis),
                human_memory_bytes(room.memory_bytes),
            );
            plan.issue(IssueKind::Missing, Some(replica), msg);
            return;
        }
        *room = room.saturating_sub(&need);
    }
    let floor = ctx.input.fence_token_floor;
    let fence_token =
        exclusive.then(|| fence_token::for_start(state, local.instances.values(), replica, floor));
    state.started_here = true;
    let action = Action::Start {
        replica: replica.clone(),
        spec: entry.spec.clone(),
        version: entry.version.clone(),
        fence_token,
        reason,
    };
    plan.issue(
        IssueKind::Missing,
        Some(replica),
        "placed here, not running; starting it".to_string(),
    );
    plan.act(Rank::Start, action);
}

/// The exclusive start rule with its hold: returns whether the start may go ahead, raising the
/// waiting or held issue otherwise.
fn exclusive_allows(
    ctx: &Ctx<'_>,
    plan: &mut Plan,
    replica: &ReplicaId,
    since: &mut Option<u64>,
) -> bool {
    let guard = start_guard(
        ctx.node, replica, ctx.input, &ctx.peers, ctx.timers, ctx.config, ctx.now_ms,
    );
    match guard {
        Guard::Clear => {
            *since = None;
            true
        }
        Guard::Wait { reason, until_ms } => {
            *since = None;
            plan.issue(
                IssueKind::ExclusiveWaiting,
                Some(replica),
                format!("not started: {reason}"),
            );
            if let Some(at) = until_ms {
                plan.wake_at(at);
            }
            false
        }
        Guard::Uncertain { reasons } => {
            let first = *since.get_or_insert(ctx.now_ms);
            let why = reasons.join("; ");
            let held_from = first.saturating_add(ctx.config.exclusive_undecided_max_ms);
            if ctx.approved(IssueKind::ExclusiveUndecided, Some(replica)) {
                let msg = format!("starting on operator approval although {why}");
                plan.held(IssueKind::ExclusiveUndecided, Some(replica), msg, why);
                return true;
            }
            if ctx.now_ms >= held_from {
                let msg = format!("not started: {why}; `shoal approve` starts it here");
                plan.held(IssueKind::ExclusiveUndecided, Some(replica), msg, why);
            } else {
                let msg = format!("not started: {why}; held for an operator from {held_from}");
                plan.issue(IssueKind::ExclusiveWaiting, Some(replica), msg);
                plan.wake_at(held_from);
            }
            false
        }
    }
}
