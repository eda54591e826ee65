//! Issues: deviations of the actual state from the desired one, as data (`shoal issues`). Each has
//! a layer, a stable id, and, when the reconciler will not fix it on its own, the reason it waits
//! for `shoal approve`.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::instance::ReplicaId;

/// The layer an issue lives on (source document 000).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// Where replicas should run versus where they run.
    Placement,
    /// The process or container itself: exited, unhealthy, outdated.
    Process,
    /// The application inside it: live settings.
    Application,
    /// What the mesh cannot decide safely on its own.
    Safety,
    /// The local runtime: unsupported spec, start failures, engine unreachable.
    Runtime,
}

/// What kind of deviation an issue is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IssueKind {
    /// Placed here, no live instance: starting it (or waiting for backoff, fencing or approval).
    Missing,
    /// An instance exited; restarting with backoff (or not, by restart policy).
    Exited,
    /// An instance failed its probe past the failure threshold; restarting it.
    Unhealthy,
    /// An instance runs an older spec version; waiting for its turn in the rolling update.
    Outdated,
    /// Here but placed elsewhere; waiting for the new owner's copy to be healthy.
    Orphan,
    /// Live settings differ; the reload hook runs or failed.
    SettingsDiffer,
    /// An exclusive replica waits for another copy to stop or for the fencing delay.
    ExclusiveWaiting,
    /// An exclusive replica the mesh cannot decide about (held): owner unreachable but not
    /// confirmed dead, or no majority visible.
    ExclusiveUndecided,
    /// An exclusive replica's data is on another node (down, or not chosen): it waits for it
    /// (held), unless an operator approves starting it empty here, or `on_data_loss =
    /// "start-empty"` and `sticky_for` has passed.
    DataElsewhere,
    /// This node lost sight of a majority and stopped its exclusive replicas.
    SelfFenced,
    /// This node's view looks wrong; stops on its own authority are held.
    SuspiciousView,
    /// The local runtime cannot run this spec (for an exclusive one: no guard could stop it).
    Unsupported,
    /// Starting failed (image missing, command not found, engine unreachable).
    StartFailing,
    /// The local runtime cannot be listed, or lists more instances than the bound.
    RuntimeUnavailable,
    /// This node's wall clock disagrees with its peers' (or it refused newer writes as too far
    /// ahead of it): it refuses applies and deletes until the clock is fixed. Raised by the mesh,
    /// not the reconciler.
    ClockSkew,
    /// A node declares more capacity than the mesh's caps allow: placement counts the cap.
    /// Raised by the mesh, not the reconciler.
    CapacityCapped,
    /// A workload's rollout failed and stays failed (no automatic rollback possible or
    /// allowed): an operator must apply or undo. Raised by the rollout's writer.
    RolloutFailed,
    /// A workload's rollout failed and was rolled back automatically. Raised by the agent that
    /// wrote the rollback, while the workload runs the restored version.
    RolledBack,
    /// Some replicas of a workload fit on no node (capability, constraint, room): one issue per
    /// workload, with counts per reason. Computed by the agent answering, from its last
    /// placement; never gossiped. Since wire version 10 (an answer in an older layout leaves it
    /// out).
    Unplaceable,
    /// Two live agents claim one node name (`crate::claims`): one of them holds a copy of that
    /// node's key. Raised by every agent that sees it, not the reconciler. Sent as
    /// `suspicious-view` to a caller of a wire version before 10, which lacks it.
    NameDisputed,
}

impl IssueKind {
    /// The issue's layer.
    pub fn layer(self) -> Layer {
        match self {
            IssueKind::Missing
            | IssueKind::Orphan
            | IssueKind::CapacityCapped
            | IssueKind::Unplaceable => Layer::Placement,
            IssueKind::Exited
            | IssueKind::Unhealthy
            | IssueKind::Outdated
            | IssueKind::RolloutFailed
            | IssueKind::RolledBack => Layer::Process,
            IssueKind::SettingsDiffer => Layer::Application,
            IssueKind::ExclusiveWaiting
            | IssueKind::ExclusiveUndecided
            | IssueKind::DataElsewhere
            | IssueKind::SelfFenced
            | IssueKind::SuspiciousView
            | IssueKind::ClockSkew
            | IssueKind::NameDisputed => Layer::Safety,
            IssueKind::Unsupported | IssueKind::StartFailing | IssueKind::RuntimeUnavailable => {
                Layer::Runtime
            }
        }
    }

    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            IssueKind::Missing => "missing",
            IssueKind::Exited => "exited",
            IssueKind::Unhealthy => "unhealthy",
            IssueKind::Outdated => "outdated",
            IssueKind::Orphan => "orphan",
            IssueKind::SettingsDiffer => "settings-differ",
            IssueKind::ExclusiveWaiting => "exclusive-waiting",
            IssueKind::ExclusiveUndecided => "exclusive-undecided",
            IssueKind::DataElsewhere => "data-elsewhere",
            IssueKind::SelfFenced => "self-fenced",
            IssueKind::SuspiciousView => "suspicious-view",
            IssueKind::Unsupported => "unsupported",
            IssueKind::StartFailing => "start-failing",
            IssueKind::RuntimeUnavailable => "runtime-unavailable",
            IssueKind::ClockSkew => "clock-skew",
            IssueKind::CapacityCapped => "capacity-capped",
            IssueKind::RolloutFailed => "rollout-failed",
            IssueKind::RolledBack => "rolled-back",
            IssueKind::Unplaceable => "unplaceable",
            IssueKind::NameDisputed => "name-disputed",
        }
    }
}

impl fmt::Display for IssueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One issue, as `shoal issues` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    /// Stable id: 12 hex digits of a hash of kind, replica and node. The same deviation keeps its
    /// id across ticks and agents' restarts, so `shoal approve ID` names it.
    pub id: String,
    /// The layer.
    pub layer: Layer,
    /// The kind.
    #[serde(serialize_with = "kind_in_layout")]
    pub kind: IssueKind,
    /// The replica concerned, if any (node-wide issues have none).
    pub replica: Option<ReplicaId>,
    /// The node that raised it (this node).
    pub node: String,
    /// What is wrong and what the reconciler does about it.
    pub message: String,
    /// Why the reconciler waits for an operator instead of acting; `None` when it acts on its own
    /// (or was approved).
    pub held: Option<String>,
    /// Whether an operator approved it; the reconciler then proceeds while the issue lasts.
    pub approved: bool,
    /// When the reconciler first raised it, ms since the Unix epoch.
    pub since_ms: u64,
}

/// The issue's kind as the layout being encoded has it: [`IssueKind::NameDisputed`], added at
/// wire version 10, goes to an older caller as [`IssueKind::SuspiciousView`] (a binary layout
/// only; JSON carries every kind, and an older agent never reads the gossip key it is in).
fn kind_in_layout<S: serde::Serializer>(
    kind: &IssueKind,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let old = !serializer.is_human_readable() && crate::version::layout() < 10;
    match kind {
        IssueKind::NameDisputed if old => IssueKind::SuspiciousView.serialize(serializer),
        kind => kind.serialize(serializer),
    }
}

/// Why [`Reconciler::approve`](super::Reconciler::approve) refused. Neither changes any state.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ApproveError {
    /// No current issue has this id (it may have resolved itself; list issues again).
    #[error("no current issue has id {0}; run `shoal issues` to list the current ones")]
    Unknown(String),
    /// The issue is not held: the reconciler already acts on it without approval.
    #[error("issue {0} is not held for approval; the reconciler handles it on its own")]
    NotHeld(String),
}

/// Why [`Reconciler::restart`](super::Reconciler::restart) refused. Neither changes any state.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RestartError {
    /// No instance of the replica runs on this node (it is pending, stopping, or elsewhere).
    #[error("{replica} has no running instance on {node}{phase}")]
    NotRunning {
        /// The replica.
        replica: String,
        /// This node.
        node: String,
        /// What this node has of it instead, if anything (`: it is stopping`).
        phase: String,
    },
}

/// The stable id of an issue: xxh3 over explicit bytes, never `std::hash::Hash`.
pub fn issue_id(kind: IssueKind, replica: Option<&ReplicaId>, node: &str) -> String {
    let mut bytes = Vec::with_capacity(64);
    for part in [kind.as_str().as_bytes(), node.as_bytes()] {
        bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
        bytes.extend_from_slice(part);
    }
    if let Some(r) = replica {
        bytes.extend_from_slice(&(r.workload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(r.workload.as_bytes());
        bytes.extend_from_slice(&r.replica.to_le_bytes());
    }
    let hash = xxhash_rust::xxh3::xxh3_64(&bytes);
    format!("{:012x}", hash >> 16)
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{:?}/{}] ", self.id, self.layer, self.kind)?;
        if let Some(r) = &self.replica {
            write!(f, "{r} ")?;
        }
        write!(f, "on {}: {}", self.node, self.message)?;
        if let Some(held) = &self.held {
            write!(f, " (held: {held})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_dispute_goes_to_a_caller_before_10_as_a_suspicious_view() {
        let kind = IssueKind::NameDisputed;
        let issue = Issue {
            id: issue_id(kind, None, "n1/n2"),
            layer: kind.layer(),
            kind,
            replica: None,
            node: "n1".into(),
            message: "two live agents claim n2".into(),
            held: None,
            approved: false,
            since_ms: 1,
        };
        let config = bincode::config::standard();
        let decode = |bytes: &[u8]| -> IssueKind {
            bincode::serde::decode_from_slice::<Issue, _>(bytes, config)
                .unwrap()
                .0
                .kind
        };
        let at = |version| {
            crate::version::with_layout(version, || {
                bincode::serde::encode_to_vec(&issue, config).unwrap()
            })
        };
        assert_eq!(decode(&at(9)), IssueKind::SuspiciousView);
        assert_eq!(decode(&at(10)), IssueKind::NameDisputed);
        let json = serde_json::to_string(&issue).unwrap();
        assert!(json.contains("\"name-disputed\""), "{json}");
    }

    #[test]
    fn ids_are_stable_and_distinct() {
        let r = ReplicaId::new("web", 1);
        let a = issue_id(IssueKind::Missing, Some(&r), "n1");
        assert_eq!(a, issue_id(IssueKind::Missing, Some(&r), "n1"));
        assert_eq!(a.len(), 12);
        assert_ne!(a, issue_id(IssueKind::Exited, Some(&r), "n1"));
        assert_ne!(
            a,
            issue_id(IssueKind::Missing, Some(&ReplicaId::new("web", 2)), "n1")
        );
        assert_ne!(a, issue_id(IssueKind::Missing, Some(&r), "n2"));
        assert_ne!(a, issue_id(IssueKind::Missing, None, "n1"));
    }
}
