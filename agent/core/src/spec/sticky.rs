//! Sticky stateful replicas: `[placement] sticky_for` and `on_data_loss`, what they mean and
//! when a spec may set them.
//!
//! A replica keeps data on the node that runs it (`[[volumes]]` of kind `data`, or a docker
//! volume Shoal names per replica). Placement prefers the node that holds a replica's data; when
//! that node is down, an exclusive replica does not start empty elsewhere on its own: it waits
//! for the node to come back, under a held issue that `shoal approve` answers ("start it empty
//! here"). After `sticky_for` it starts empty on its own only if `on_data_loss = "start-empty"`.
//! Both fields only mean something for an exclusive workload with such a volume, so a spec that
//! sets them otherwise is refused rather than silently ignored.

use serde::{Deserialize, Serialize};

use super::doc::Node;
use super::reader::{Ctx, Fields};
use super::validate::Report;
use super::{Placement, VolumeKind, WorkloadSpec};

/// How long an exclusive replica waits for the node that holds its data when `sticky_for` is
/// absent: 5 minutes, long enough for a reboot, short enough that an operator sees the held
/// issue while they can still act on it.
pub const STICKY_FOR_MS_DEFAULT: u64 = 5 * 60 * 1000;

/// What an exclusive replica whose data is on a node that stays down does after `sticky_for`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OnDataLoss {
    /// Keep waiting, under the held issue, until the node comes back or an operator approves
    /// (the default: starting empty loses data, which the mesh never decides alone).
    #[default]
    Wait,
    /// Start empty on the node placement chose once `sticky_for` has passed.
    StartEmpty,
}

impl OnDataLoss {
    /// The words the field takes.
    pub const NAMES: [(&'static str, OnDataLoss); 2] = [
        ("wait", OnDataLoss::Wait),
        ("start-empty", OnDataLoss::StartEmpty),
    ];

    /// `wait` or `start-empty`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDataLoss::Wait => "wait",
            OnDataLoss::StartEmpty => "start-empty",
        }
    }
}

impl Placement {
    /// `sticky_for`, or its default.
    pub fn sticky_for_ms(&self) -> u64 {
        self.sticky_for_ms.unwrap_or(STICKY_FOR_MS_DEFAULT)
    }

    /// `on_data_loss`, or its default.
    pub fn on_data_loss(&self) -> OnDataLoss {
        self.on_data_loss.unwrap_or_default()
    }
}

impl WorkloadSpec {
    /// Whether each replica keeps data of its own on the node that runs it: a `data` volume, or a
    /// docker volume Shoal names per replica. Host paths and named docker volumes are the
    /// operator's (shared, or kept by other means): they do not make a replica sticky.
    pub fn keeps_replica_data(&self) -> bool {
        self.volumes.iter().any(|v| match v.kind {
            VolumeKind::Data => true,
            VolumeKind::Docker => v.source.is_none(),
            VolumeKind::Host => false,
        })
    }

    /// Whether a replica of this spec waits for its data (exclusive, with data of its own).
    pub fn sticky(&self) -> bool {
        self.placement.exclusive && self.keeps_replica_data()
    }
}

/// Reads `sticky_for` and `on_data_loss` of `[placement]`.
pub(crate) fn decode(ctx: &mut Ctx, f: &mut Fields<'_>, out: &mut Placement) {
    if let Some((n, p)) = f.get(ctx, "sticky_for") {
        out.sticky_for_ms = super::policy::duration(ctx, &p, n);
    }
    if let Some((n, p)) = f.get(ctx, "on_data_loss") {
        let n: &Node = n;
        out.on_data_loss = super::decode::choice(ctx, &p, n, "on_data_loss", &OnDataLoss::NAMES);
    }
}

/// Refuses the fields where they would do nothing, and `sticky_for` out of range.
pub(crate) fn check(r: &mut Report, spec: &WorkloadSpec) {
    let p = &spec.placement;
    let fields = [
        ("placement.sticky_for", p.sticky_for_ms.is_some()),
        ("placement.on_data_loss", p.on_data_loss.is_some()),
    ];
    for (path, set) in fields {
        if !set {
            continue;
        }
        if !p.exclusive {
            let message = "only applies to an exclusive workload (placement.exclusive = true): \
                           other replicas move without waiting for their data";
            r.err_related(path, &["placement.exclusive"], message);
        } else if !spec.keeps_replica_data() {
            let message = "only applies to a workload whose replicas keep data of their own (a \
                           [[volumes]] of kind \"data\", or a docker volume without a source)";
            r.err_related(path, &["volumes"], message);
        }
    }
    if let Some(ms) = p.sticky_for_ms {
        super::check_policy::duration(r, "placement.sticky_for", ms, 0);
    }
}
