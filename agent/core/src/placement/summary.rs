//! How much of a workload fits, and why the rest does not: what `apply`, `status`, `plan` and
//! the workload's issue say first, as `nomad job plan` does (`only 6 of 10000 replicas of big
//! fit: 9994 unplaceable (no room: ...)`).

use std::collections::BTreeMap;
use std::fmt;

use super::model::{Placement, ReplicaId, Unschedulable};

/// Most distinct reasons a summary names (the count of the rest is given).
pub const REASONS_SHOWN: usize = 2;

/// The unplaceable replicas of one workload, counted by reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unplaceable {
    /// The workload.
    pub workload: String,
    /// Its replica count.
    pub replicas: u32,
    /// How many of them have no node.
    pub unplaceable: u32,
    /// Each reason and how many replicas it holds back, most first (then by text), at most
    /// [`REASONS_SHOWN`].
    pub reasons: Vec<(String, u32)>,
    /// How many more distinct reasons there are.
    pub more_reasons: usize,
}

/// The unplaceable replicas of `workload` (of `replicas`) in `placement`, or `None` when each of
/// them has a node or another cell took it. One walk over the workload's entries.
pub fn unplaceable(placement: &Placement, workload: &str, replicas: u32) -> Option<Unplaceable> {
    let first = ReplicaId::new(workload, 0);
    // By the kind of reason (which resources are short, not how much is left where), with the
    // text of its first replica.
    let mut by_reason: BTreeMap<String, (String, u32)> = BTreeMap::new();
    let mut count = 0u32;
    for (_, why) in placement
        .unschedulable
        .range(first..)
        .take_while(|(r, _)| r.workload == workload)
        .filter(|(r, _)| r.replica < replicas)
    {
        count += 1;
        let key = match why {
            Unschedulable::NoRoom {
                cpu_short,
                memory_short,
                ports_short,
                ..
            } => format!(
                "no room {} {} {}",
                *cpu_short > 0,
                *memory_short > 0,
                *ports_short > 0
            ),
            other => other.to_string(),
        };
        by_reason
            .entry(key)
            .or_insert_with(|| (why.to_string(), 0))
            .1 += 1;
    }
    if count == 0 {
        return None;
    }
    let mut reasons: Vec<(String, u32)> = by_reason.into_values().collect();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let more_reasons = reasons.len().saturating_sub(REASONS_SHOWN);
    reasons.truncate(REASONS_SHOWN);
    Some(Unplaceable {
        workload: workload.to_string(),
        replicas,
        unplaceable: count,
        reasons,
        more_reasons,
    })
}

impl fmt::Display for Unplaceable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let placed = self.replicas - self.unplaceable;
        match placed {
            0 => write!(
                f,
                "none of the {} replicas of {} fit",
                self.replicas, self.workload
            )?,
            _ => write!(
                f,
                "only {placed} of {} replicas of {} fit: {} unplaceable",
                self.replicas, self.workload, self.unplaceable
            )?,
        }
        let shown: Vec<String> = self
            .reasons
            .iter()
            .map(|(why, n)| match n {
                n if *n == self.unplaceable => why.clone(),
                n => format!("{n}: {why}"),
            })
            .collect();
        write!(f, " ({}", shown.join("; "))?;
        if self.more_reasons > 0 {
            write!(f, "; and {} more reasons", self.more_reasons)?;
        }
        f.write_str(")")
    }
}

/// Every workload of `workloads` with unplaceable replicas in `placement`, by name.
pub fn unplaceable_all(
    placement: &Placement,
    workloads: &[super::model::Workload],
) -> Vec<Unplaceable> {
    let mut names: Vec<&str> = placement
        .unschedulable
        .keys()
        .map(|r| r.workload.as_str())
        .collect();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            // A stacking layer (`NAME~K`) counts with its workload, which lists every replica.
            let w = workloads.iter().find(|w| w.id == name)?;
            unplaceable(placement, name, w.replicas)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_reasons_most_first_and_says_what_fits() {
        let mut p = Placement::default();
        p.assigned.insert(ReplicaId::new("big", 0), "n1".into());
        for i in 1..9 {
            p.unschedulable
                .insert(ReplicaId::new("big", i), Unschedulable::NoNodes);
        }
        p.unschedulable.insert(
            ReplicaId::new("big", 9),
            Unschedulable::NotEnoughNodes { eligible: 1 },
        );
        p.unschedulable
            .insert(ReplicaId::new("other", 0), Unschedulable::NoNodes);
        let u = unplaceable(&p, "big", 10).unwrap();
        assert_eq!((u.unplaceable, u.reasons.len(), u.more_reasons), (9, 2, 0));
        assert_eq!(
            u.to_string(),
            "only 1 of 10 replicas of big fit: 9 unplaceable (8: no live, non-draining node; 1: \
             all 1 eligible nodes already hold a replica (replicas need distinct nodes))"
        );
        assert_eq!(unplaceable(&p, "big", 1), None, "scaled to what fits");
        let none = unplaceable(&p, "other", 1).unwrap();
        assert_eq!(
            none.to_string(),
            "none of the 1 replicas of other fit (no live, non-draining node)"
        );
    }
}
