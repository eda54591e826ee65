//! One round of decisions for the replicas placed on this node: keep one instance per replica,
//! stop what is unhealthy or duplicated, fence exclusive replicas, start what is missing (after
//! backoff, and for exclusive replicas only when the safety rule allows), and clean up records.
//!
//! Planning only proposes: [`Plan`] collects candidate actions with a rank, issues and the next
//! time something changes by itself. The reconciler then keeps the most urgent candidates within
//! its per-round bound and records what it sent.

use std::collections::BTreeSet;

use crate::instance::ReplicaId;
use crate::reconcile::action::{Action, StopCause};
use crate::reconcile::cache::SpecCache;
use crate::reconcile::config::ReconcileConfig;
use crate::reconcile::input::{ReconcileInput, SpecEntry};
use crate::reconcile::issue::{issue_id, IssueKind};
use crate::reconcile::start::plan_start;
use crate::reconcile::track::{Local, Tracked};
use crate::reconcile::update::{change, plan_outdated, Change};
use crate::reconcile::view::{MeshTimers, PeerIndex, ServingSeen};
use crate::resources::Resources;

/// How urgent a candidate action is; lower goes first when the round is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    Fence,
    Repair,
    Start,
    Update,
    Handoff,
    Unilateral,
    Remove,
}

/// An issue before it gets its id, since and approval.
#[derive(Clone, Debug)]
pub(crate) struct RawIssue {
    pub kind: IssueKind,
    pub replica: Option<ReplicaId>,
    pub message: String,
    pub held: Option<String>,
}

/// What one round proposes.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub candidates: Vec<(Rank, Action)>,
    pub issues: Vec<RawIssue>,
    pub wake_at_ms: Option<u64>,
    /// Stops on this node's own authority proposed or held while the view is suspicious.
    pub unilateral: usize,
    /// Exclusive instances fenced this round.
    pub fenced: usize,
    /// What this node's capacity leaves for starts this round, when it has one.
    pub room: Option<Resources>,
}

impl Plan {
    pub fn act(&mut self, rank: Rank, action: Action) {
        self.candidates.push((rank, action));
    }

    pub fn issue(&mut self, kind: IssueKind, replica: Option<&ReplicaId>, message: String) {
        self.issues.push(RawIssue {
            kind,
            replica: replica.cloned(),
            message,
            held: None,
        });
    }

    pub fn held(
        &mut self,
        kind: IssueKind,
        replica: Option<&ReplicaId>,
        message: String,
        why: String,
    ) {
        self.issues.push(RawIssue {
            kind,
            replica: replica.cloned(),
            message,
            held: Some(why),
        });
    }

    pub fn wake_at(&mut self, at_ms: u64) {
        self.wake_at_ms = Some(self.wake_at_ms.map_or(at_ms, |w| w.min(at_ms)));
    }
}

/// Everything a round reads.
pub(crate) struct Ctx<'a> {
    pub node: &'a str,
    pub config: &'a ReconcileConfig,
    pub input: &'a ReconcileInput,
    pub peers: PeerIndex<'a>,
    pub cache: &'a SpecCache,
    pub timers: &'a MeshTimers,
    /// When this agent first read each peer's copy serving (the rollout's settle time).
    pub serving_seen: &'a std::cell::RefCell<ServingSeen>,
    pub approvals: &'a BTreeSet<String>,
    /// Instances an operator asked to restart (by handle).
    pub restarts: &'a BTreeSet<String>,
    pub now_ms: u64,
    /// Why the view is suspicious (empty: it is not).
    pub suspicious: Vec<String>,
    pub fencing_due: bool,
}

impl Ctx<'_> {
    /// Whether the operator approved this issue.
    pub fn approved(&self, kind: IssueKind, replica: Option<&ReplicaId>) -> bool {
        self.approvals.contains(&issue_id(kind, replica, self.node))
    }

    /// Whether stops on this node's own authority are held now.
    pub fn holds_unilateral(&self) -> bool {
        !self.suspicious.is_empty() && !self.approved(IssueKind::SuspiciousView, None)
    }

    /// A stop action for a tracked instance.
    pub fn stop(&self, handle: &str, t: &Tracked, cause: StopCause, reason: String) -> Action {
        // Fencing keeps its own short grace: the exclusive rules count on it (exclusive.rs).
        let grace_ms = match cause {
            StopCause::Fence => self.config.fence_stop_grace_ms,
            _ => self
                .cache
                .for_instance(&t.replica, &t.version)
                .and_then(|spec| spec.stop_grace_ms)
                .unwrap_or(self.config.stop_grace_ms),
        };
        Action::Stop {
            handle: handle.to_string(),
            replica: t.replica.clone(),
            grace_ms,
            cause,
            reason,
        }
    }

    /// Sends a stop again if the instance outlived its grace by `stop_retry_ms`.
    pub fn retry_stop(&self, plan: &mut Plan, handle: &str, t: &Tracked) {
        let Some(stop) = t.stop else { return };
        let due = stop
            .at_ms
            .saturating_add(stop.grace_ms)
            .saturating_add(self.config.stop_retry_ms);
        if self.now_ms >= due {
            let reason = format!(
                "still running {} ms after the stop was sent",
                self.now_ms - stop.at_ms
            );
            let rank = if stop.cause == StopCause::Fence {
                Rank::Fence
            } else {
                Rank::Repair
            };
            plan.act(rank, self.stop(handle, t, stop.cause, reason));
        } else {
            plan.wake_at(due);
        }
    }
}

/// Plans one replica placed on this node.
pub(crate) fn plan_placed(
    ctx: &Ctx<'_>,
    local: &mut Local,
    plan: &mut Plan,
    replica: &ReplicaId,
    entry: &SpecEntry,
) {
    carry_to_desired_version(ctx, local, replica, entry);
    let alive: Vec<(String, Tracked)> = local
        .alive_of(replica)
        .into_iter()
        .map(|(h, t)| (h.clone(), t.clone()))
        .collect();
    for (handle, t) in alive.iter().filter(|(_, t)| t.stop.is_some()) {
        ctx.retry_stop(plan, handle, t);
        match t.stop.map(|s| s.cause) {
            Some(StopCause::Unhealthy) => {
                let msg = format!(
                    "stopping {handle} after {} failed probes; it restarts with backoff",
                    t.health.failures
                );
                plan.issue(IssueKind::Unhealthy, Some(replica), msg);
            }
            Some(StopCause::Update) => {
                let msg = format!(
                    "stopping {handle} at {} to replace it with {}",
                    t.version, entry.version
                );
                plan.issue(IssueKind::Outdated, Some(replica), msg);
            }
            _ => {}
        }
    }
    if entry.spec.placement.exclusive && ctx.fencing_due {
        if !ctx.approved(IssueKind::ExclusiveUndecided, Some(replica)) {
            fence(ctx, plan, &alive);
            if alive.is_empty() {
                // Not started without a majority, but the hold (and its approval) still applies.
                plan_start(ctx, local, plan, replica, entry);
            }
            return;
        }
        let why = "no strict majority visible; an operator approved running it anyway".to_string();
        plan.held(
            IssueKind::ExclusiveUndecided,
            Some(replica),
            why.clone(),
            why,
        );
    }
    let mut running: Vec<&(String, Tracked)> =
        alive.iter().filter(|(_, t)| t.stop.is_none()).collect();
    // An operator's restart: stop it, and plan the rest as if it were already gone (its
    // replacement starts once it is, as after any planned stop).
    running.retain(|(handle, t)| {
        if !ctx.restarts.contains(handle) {
            return true;
        }
        let reason = format!("restart asked by an operator (instance {handle})");
        plan.act(
            Rank::Repair,
            ctx.stop(handle, t, StopCause::Restart, reason),
        );
        false
    });
    let current = running
        .iter()
        .rev()
        .find(|(_, t)| t.version == entry.version)
        .copied();
    let old_keeper = match current {
        Some((_, cur)) if cur.serves() => None,
        Some(_) => running
            .iter()
            .rev()
            .find(|(_, t)| t.version != entry.version && t.serves())
            .copied(),
        None => running
            .iter()
            .rev()
            .find(|(_, t)| t.serves())
            .or_else(|| running.last())
            .copied(),
    };
    let keepers: Vec<&String> = current
        .iter()
        .chain(old_keeper.iter())
        .map(|(h, _)| h)
        .collect();
    for (handle, t) in running.iter().filter(|(h, _)| !keepers.contains(&h)) {
        let reason = match current {
            Some((h, cur)) if cur.serves() && t.version != entry.version => {
                let version = crate::hlc::format_version(&entry.version);
                format!("replaced by healthy instance {h} at version {version}")
            }
            _ => format!(
                "another instance of {replica} runs here ({})",
                keepers.first().map_or("", |h| h.as_str())
            ),
        };
        plan.act(
            Rank::Repair,
            ctx.stop(handle, t, StopCause::Duplicate, reason),
        );
    }
    for (handle, t) in current.iter().chain(old_keeper.iter()) {
        if t.health.verdict == crate::reconcile::health::Verdict::Unhealthy {
            let detail = t.health.detail.clone().unwrap_or_default();
            let msg = format!(
                "{} consecutive probe failures ({detail}); restarting",
                t.health.failures
            );
            plan.issue(IssueKind::Unhealthy, Some(replica), msg.clone());
            plan.act(
                Rank::Repair,
                ctx.stop(handle, t, StopCause::Unhealthy, format!("unhealthy: {msg}")),
            );
        }
    }
    if let (None, Some((handle, t))) = (current, old_keeper) {
        if t.health.verdict != crate::reconcile::health::Verdict::Unhealthy {
            plan_outdated(ctx, local, plan, replica, entry, handle, t);
        }
    }
    if alive.is_empty() {
        plan_start(ctx, local, plan, replica, entry);
    }
    plan_removes(ctx, local, plan, replica);
}

/// Moves instances whose spec changed only in fields they were not made from (replicas,
/// placement, health, restart, update) to the desired version, without touching them.
fn carry_to_desired_version(
    ctx: &Ctx<'_>,
    local: &mut Local,
    replica: &ReplicaId,
    entry: &SpecEntry,
) {
    for t in local
        .instances
        .values_mut()
        .filter(|t| &t.replica == replica && t.alive())
    {
        if t.version == entry.version || t.reload.as_ref().is_some_and(|r| r.in_flight) {
            continue;
        }
        let old = ctx.cache.exact(&replica.workload, &t.version);
        if old.is_some_and(|old| change(old, &entry.spec) == Change::None) {
            t.version = entry.version.clone();
        }
    }
}

/// Stops every alive copy of an exclusive replica: this node has lacked a majority too long.
fn fence(ctx: &Ctx<'_>, plan: &mut Plan, alive: &[(String, Tracked)]) {
    for (handle, t) in alive {
        if t.stop.is_some_and(|s| s.cause == StopCause::Fence) {
            continue;
        }
        plan.fenced += 1;
        let reason = format!(
            "self-fencing: no strict majority of the {} known members for {} ms",
            ctx.input.membership.members_known, ctx.config.self_fence_ms
        );
        plan.act(Rank::Fence, ctx.stop(handle, t, StopCause::Fence, reason));
    }
}

/// Removes exited records of a placed replica once a newer record exists.
fn plan_removes(ctx: &Ctx<'_>, local: &Local, plan: &mut Plan, replica: &ReplicaId) {
    let _ = ctx;
    let records: Vec<(&String, &Tracked)> = local
        .instances
        .iter()
        .filter(|(_, t)| &t.replica == replica)
        .collect();
    let newest = records.iter().map(|(h, t)| (t.started_at_ms, *h)).max();
    for (handle, t) in records {
        if t.alive() || t.remove_sent || Some((t.started_at_ms, handle)) == newest {
            continue;
        }
        let reason = "exited and replaced by a newer instance".to_string();
        plan.act(
            Rank::Remove,
            Action::Remove {
                handle: handle.clone(),
                replica: replica.clone(),
                reason,
            },
        );
    }
}
