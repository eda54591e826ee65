//! Rolling updates: an instance here runs an older spec version than the desired one.
//!
//! Only what a running instance was made from counts: a change of `replicas`, placement, health,
//! restart or update fields (with the old spec known) just moves the instance to the new version.
//! A change only in live settings (run and resources equal, a reload hook declared) runs the reload
//! hook instead of a restart, retried up to `reload_attempts_max` times and then rolled out by
//! replacement. Any other change (or an old spec this agent never saw, e.g. an instance adopted
//! after a restart) replaces the instance, within the workload's update
//! budget across the mesh: at most `max_unavailable` replicas without a serving copy and at most
//! `max_surge` replicas running an extra copy. The replicas that still need the new version form
//! a queue ordered by index, computed from gossip by every agent alike; the first `max_surge -
//! surging` of the queue get a new copy beside the old one (never for exclusive workloads), the
//! next `max_unavailable - down` are stopped and restarted at the new version, the rest wait.
//! A failing new version keeps its replicas unavailable, which stalls the rollout by itself.

use crate::instance::ReplicaId;
use crate::reconcile::action::{Action, StopCause};
use crate::reconcile::input::SpecEntry;
use crate::reconcile::issue::IssueKind;
use crate::reconcile::plan::{Ctx, Plan, Rank};
use crate::reconcile::track::{Local, Tracked};
use crate::reconcile::view::Availability;
use crate::spec::WorkloadSpec;

/// Plans the update of the instance `handle` of `replica`, which runs an older version and is the
/// only instance kept for the replica.
pub(crate) fn plan_outdated(
    ctx: &Ctx<'_>,
    local: &Local,
    plan: &mut Plan,
    replica: &ReplicaId,
    entry: &SpecEntry,
    handle: &str,
    t: &Tracked,
) {
    if entry.paused {
        let msg = format!(
            "runs {}, desired {}; the rollout is paused by an operator (`shoal rollout resume {}`)",
            t.version, entry.version, replica.workload
        );
        plan.issue(IssueKind::Outdated, Some(replica), msg);
        return;
    }
    if plan_reload(ctx, plan, replica, entry, handle, t) {
        return;
    }
    if !t.serves() {
        let msg = format!(
            "runs {}, desired {}; waiting for its health before replacing it",
            t.version, entry.version
        );
        plan.issue(IssueKind::Outdated, Some(replica), msg);
        return;
    }
    let spec = &entry.spec;
    let avail = Availability::of(&replica.workload, spec.replicas, &entry.version, local, ctx);
    if let Some(at) = avail.settles_at {
        plan.wake_at(at);
    }
    let surge_budget = match spec.placement.exclusive {
        true => 0,
        false => spec.update.max_surge.saturating_sub(avail.surging) as usize,
    };
    let unavailable_budget = spec.update.max_unavailable.saturating_sub(avail.down) as usize;
    if avail.current.contains(&replica.replica) {
        let reason = format!(
            "runs {}; a copy at {} serves elsewhere",
            t.version, entry.version
        );
        plan.act(Rank::Update, ctx.stop(handle, t, StopCause::Update, reason));
        return;
    }
    let Some(position) = avail.queue.iter().position(|&i| i == replica.replica) else {
        let msg = format!(
            "runs {}, desired {}; a new copy is starting",
            t.version, entry.version
        );
        plan.issue(IssueKind::Outdated, Some(replica), msg);
        return;
    };
    let state = local.replicas.get(replica);
    if position < surge_budget {
        if state.is_some_and(|s| s.pending_start.is_some()) {
            return;
        }
        // A new copy still stopping (restarted for its health) goes first: never two extra.
        let stopping = local
            .instances
            .values()
            .any(|o| o.replica == *replica && o.alive() && o.version == entry.version);
        if stopping {
            let msg = format!(
                "the new copy at {} is stopping; another starts once it is gone",
                crate::hlc::format_version(&entry.version)
            );
            plan.issue(IssueKind::Outdated, Some(replica), msg);
            return;
        }
        if let Some(at) = state
            .map(|s| s.next_start_at_ms)
            .filter(|&at| ctx.now_ms < at)
        {
            let msg = format!(
                "the new copy at {} failed; next attempt at {} (backoff)",
                crate::hlc::format_version(&entry.version),
                crate::hlc::format_utc_ms(at)
            );
            plan.issue(IssueKind::Outdated, Some(replica), msg);
            plan.wake_at(at);
            return;
        }
        if let Some(why) = ctx.input.unsupported_reason(spec) {
            plan.issue(
                IssueKind::Unsupported,
                Some(replica),
                format!("{why}; update not started"),
            );
            return;
        }
        let reason = format!(
            "rolling update (surge): new copy at {} beside {handle} at {}",
            entry.version, t.version
        );
        plan.issue(IssueKind::Outdated, Some(replica), reason.clone());
        let action = Action::Start {
            replica: replica.clone(),
            spec: spec.clone(),
            version: entry.version.clone(),
            fence_token: None, // a surge copy is never exclusive
            reason,
        };
        plan.act(Rank::Update, action);
    } else if position < surge_budget + unavailable_budget {
        let reason = format!(
            "rolling update: replacing {} with {}",
            t.version, entry.version
        );
        plan.issue(IssueKind::Outdated, Some(replica), reason.clone());
        plan.act(Rank::Update, ctx.stop(handle, t, StopCause::Update, reason));
    } else {
        let msg = format!(
            "runs {}, desired {}; waiting for its turn ({} down, {} surging, {} ahead in the update queue)",
            t.version, entry.version, avail.down, avail.surging, position
        );
        plan.issue(IssueKind::Outdated, Some(replica), msg);
    }
}

/// Runs the reload hook when only live settings changed. Returns whether the reload path owns
/// the instance this round (in flight, waiting to retry, or sent now).
fn plan_reload(
    ctx: &Ctx<'_>,
    plan: &mut Plan,
    replica: &ReplicaId,
    entry: &SpecEntry,
    handle: &str,
    t: &Tracked,
) -> bool {
    let reload = t.reload.as_ref().filter(|r| r.target == entry.version);
    if reload.is_some_and(|r| r.in_flight) {
        plan.issue(
            IssueKind::SettingsDiffer,
            Some(replica),
            format!(
                "reload hook running to version {}",
                crate::hlc::format_version(&entry.version)
            ),
        );
        plan.wake_at(reload.map_or(0, |r| {
            r.sent_at_ms.saturating_add(ctx.config.reload_timeout_ms)
        }));
        return true;
    }
    let attempts = reload.map_or(0, |r| r.attempts);
    let live_change = ctx
        .cache
        .exact(&replica.workload, &t.version)
        .is_some_and(|old| change(old, &entry.spec) == Change::Reload);
    let Some(hook) = entry.spec.reload.clone() else {
        return false;
    };
    if !live_change || attempts >= ctx.config.reload_attempts_max {
        return false;
    }
    if let Some(r) = reload.filter(|r| ctx.now_ms < r.retry_at_ms) {
        let msg = format!(
            "reload hook failed ({}); attempt {} of {} at {}",
            r.last_error.as_deref().unwrap_or("no detail"),
            attempts + 1,
            ctx.config.reload_attempts_max,
            crate::hlc::format_utc_ms(r.retry_at_ms)
        );
        plan.issue(IssueKind::SettingsDiffer, Some(replica), msg);
        plan.wake_at(r.retry_at_ms);
        return true;
    }
    let reason = format!(
        "live settings changed (version {} to {}): running the reload hook",
        crate::hlc::format_version(&t.version),
        crate::hlc::format_version(&entry.version)
    );
    plan.issue(IssueKind::SettingsDiffer, Some(replica), reason.clone());
    let action = Action::Reload {
        handle: handle.to_string(),
        replica: replica.clone(),
        hook,
        settings: entry.spec.settings.clone(),
        version: entry.version.clone(),
        reason,
    };
    plan.act(Rank::Update, action);
    true
}

/// What a spec change means for an instance made from `old`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Nothing the instance was made from changed: it simply runs the new version.
    None,
    /// Only live settings changed, and the new spec has a reload hook.
    Reload,
    /// The process, container or resources changed: replace it.
    Replace,
}

/// Compares what an instance was made from: run and resources (applied at start) and settings
/// (applied by the reload hook).
pub(crate) fn change(old: &WorkloadSpec, new: &WorkloadSpec) -> Change {
    if old.run != new.run || old.resources != new.resources || old.restarted_at != new.restarted_at
    {
        Change::Replace
    } else if old.settings == new.settings {
        Change::None
    } else if new.reload.is_some() {
        Change::Reload
    } else {
        Change::Replace
    }
}
