//! What a cell offers a workload, judged from its summary alone: the capacity of its members
//! that could satisfy the workload's constraints, and the zones it could use.
//!
//! A summary lists capacity per zone and per label value, not per member, so the judgement is an
//! upper bound: for one constraint it is exact (`disk == ssd` is the capacity of the `ssd`
//! members), for several it is the smallest of their capacities, which is what members matching
//! all of them could have at most (`disk == ssd` and `arch == arm64` may match no member at all).
//! Constraints on `node` cannot be judged from a summary and never rule a cell out. The node
//! level of the chosen cell has the last word, with its exact reasons.

use crate::constraint::{Constraint, ConstraintOp};
use crate::resources::Resources;

use super::summary::CellSummary;

/// Component-wise minimum.
fn min(a: Resources, b: Resources) -> Resources {
    Resources::new(
        a.cpu_millis.min(b.cpu_millis),
        a.memory_bytes.min(b.memory_bytes),
    )
}

fn sum(items: impl Iterator<Item = Resources>) -> Resources {
    items.fold(Resources::default(), |a, r| a.saturating_add(&r))
}

/// The capacities a summary lists for one key (a label's, or the built-in `zone`).
struct Values<'a> {
    summary: &'a CellSummary,
    key: &'a str,
}

impl Values<'_> {
    /// Capacity of the members with this value (the empty zone name counts as no zone).
    fn of(&self, value: &str) -> Resources {
        if self.key == "zone" {
            if value.is_empty() {
                return Resources::default();
            }
            return self.summary.zone_capacity(value);
        }
        let values = self.summary.label_values(self.key);
        values
            .binary_search_by(|l| l.value.as_str().cmp(value))
            .map_or(Resources::default(), |at| values[at].capacity)
    }

    /// Capacity of the members that have the key at all.
    fn present(&self) -> Resources {
        if self.key == "zone" {
            return self
                .summary
                .capacity
                .saturating_sub(&self.summary.zone_capacity(""));
        }
        sum(self
            .summary
            .label_values(self.key)
            .iter()
            .map(|l| l.capacity))
    }

    fn all(&self) -> Resources {
        self.summary.capacity
    }
}

/// The capacity of the cell's members that could satisfy `constraint`.
pub(crate) fn constraint_capacity(summary: &CellSummary, constraint: &Constraint) -> Resources {
    if constraint.key == "node" {
        return summary.capacity;
    }
    let v = Values {
        summary,
        key: &constraint.key,
    };
    match &constraint.op {
        ConstraintOp::Eq(value) => v.of(value),
        ConstraintOp::Ne(value) => v.all().saturating_sub(&v.of(value)),
        ConstraintOp::In(values) => sum(values.iter().map(|x| v.of(x))),
        ConstraintOp::NotIn(values) => v.all().saturating_sub(&sum(values.iter().map(|x| v.of(x)))),
        ConstraintOp::Exists => v.present(),
        ConstraintOp::Absent => v.all().saturating_sub(&v.present()),
    }
}

/// The capacity of the cell's members that could satisfy every constraint: the smallest of the
/// constraints' capacities, per resource (the cell's capacity with none).
pub(crate) fn eligible_capacity(summary: &CellSummary, constraints: &[Constraint]) -> Resources {
    constraints.iter().fold(summary.capacity, |e, c| {
        min(e, constraint_capacity(summary, c))
    })
}

/// The capacity of the eligible members in one zone: at most the zone's, at most the eligible.
pub(crate) fn zone_eligible(summary: &CellSummary, eligible: Resources, zone: &str) -> Resources {
    min(eligible, summary.zone_capacity(zone))
}

/// True when a zone of this name passes every constraint on the `zone` key.
pub(crate) fn zone_allowed(constraints: &[Constraint], zone: &str) -> bool {
    let labels = Default::default();
    constraints
        .iter()
        .filter(|c| c.key == "zone")
        .all(|c| c.matches(&labels, zone, ""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::summary::{LabelOffer, ZoneOffer};

    fn summary() -> CellSummary {
        let r = |c: u64| Resources::new(c * 1000, c << 30);
        CellSummary {
            cell: "c1".into(),
            version: 1,
            members: 4,
            capacity: r(40),
            largest: r(16),
            free: r(10),
            zones: vec![
                ZoneOffer {
                    zone: "a".into(),
                    capacity: r(24),
                },
                ZoneOffer {
                    zone: "b".into(),
                    capacity: r(16),
                },
            ],
            labels: vec![
                LabelOffer {
                    key: "disk".into(),
                    value: "hdd".into(),
                    capacity: r(8),
                },
                LabelOffer {
                    key: "disk".into(),
                    value: "ssd".into(),
                    capacity: r(24),
                },
                LabelOffer {
                    key: "gpu".into(),
                    value: "a100".into(),
                    capacity: r(16),
                },
            ],
            contacts: vec![],
            sees: Vec::new(),
        }
    }

    #[test]
    fn each_form_of_constraint_reads_the_offers() {
        let s = summary();
        let cap = |text: &str| {
            constraint_capacity(&s, &Constraint::parse(text).unwrap()).cpu_millis / 1000
        };
        assert_eq!(cap("disk == ssd"), 24);
        assert_eq!(cap("disk != ssd"), 16, "hdd and no disk label");
        assert_eq!(cap("disk in (ssd, hdd)"), 32);
        assert_eq!(cap("disk not in (ssd, hdd)"), 8);
        assert_eq!(cap("disk"), 32);
        assert_eq!(cap("!disk"), 8);
        assert_eq!(cap("gpu"), 16);
        assert_eq!(cap("zone == b"), 16);
        assert_eq!(cap("zone != b"), 24);
        assert_eq!(cap("zone in (a, c)"), 24);
        assert_eq!(cap("zone"), 40);
        assert_eq!(cap("node == n1"), 40, "not judged here");
        assert_eq!(cap("rack == r1"), 0);
        let both = [
            Constraint::parse("disk == ssd").unwrap(),
            Constraint::parse("gpu").unwrap(),
        ];
        assert_eq!(eligible_capacity(&s, &both).cpu_millis, 16_000);
        assert!(zone_allowed(
            &[Constraint::parse("zone != a").unwrap()],
            "b"
        ));
        assert!(!zone_allowed(
            &[Constraint::parse("zone != a").unwrap()],
            "a"
        ));
    }
}
