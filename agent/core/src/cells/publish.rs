//! [`summarize`]: what a cell's envoys publish, from the cell's members and its own placement,
//! with hysteresis on the ranked figures.
//!
//! The ranked figures (capacity, largest member, per zone, per label value) are republished only
//! when one of them moves by more than 1/16 from the last published, when the set of zones or
//! label values changes, or when the cell gains its first member or loses its last. Between, the
//! previous ones stand: a node failing or joining in a cell of a hundred changes nothing the rest
//! of the mesh ranks by. `free` is always recomputed (against the ranked capacity, so it never
//! exceeds it). The result always passes [`CellSummary::validate`].
//!
//! What members lack of the capabilities the cell level judges (their `Node::caps`) goes out as
//! reserved label offers (`capability`), listed before the ordinary labels, which get the rest of
//! [`CELL_LABELS_MAX`]. A shell at a placement algorithm before 9 passes nodes without `caps`,
//! and publishes what builds before published.

use std::collections::BTreeMap;

use super::capability::{lacked, wholly_lacked, LACKS_KEY_PREFIX, LACKS_VALUE};
use super::summary::{
    CellSummary, LabelOffer, ZoneOffer, CELL_CONTACTS_MAX, CELL_CONTACT_LEN_MAX, CELL_LABELS_MAX,
    CELL_MEMBERS_MAX, CELL_TOKEN_LEN_MAX, CELL_ZONES_MAX,
};
use crate::placement::model::{check_node, Node, Placement, Workload};
use crate::resources::Resources;

/// A ranked figure is republished when it moves by more than `1 / RANKED_DRIFT_DIVISOR`.
pub const RANKED_DRIFT_DIVISOR: u64 = 16;

/// The summary a cell's envoys publish at `version`: from the cell's known members (`nodes`: a
/// down member is not live; a draining one is live but offers no capacity), the cell's own
/// node-level placement of `workloads` (for `free`), its envoys' addresses, and the summary
/// published last (for hysteresis). Invalid and duplicated nodes are left out, as placement
/// leaves them out.
pub fn summarize(
    cell: &str,
    version: u64,
    contacts: &[String],
    nodes: &[Node],
    placement: &Placement,
    workloads: &[Workload],
    previous: Option<&CellSummary>,
) -> CellSummary {
    let mut ids: BTreeMap<&str, u32> = BTreeMap::new();
    for n in nodes {
        *ids.entry(n.id.as_str()).or_default() += 1;
    }
    let live: Vec<&Node> = nodes
        .iter()
        .filter(|n| ids[n.id.as_str()] == 1 && check_node(n).is_ok() && !n.down)
        .take(CELL_MEMBERS_MAX as usize)
        .collect();
    let mut fresh = CellSummary {
        cell: cell.to_string(),
        version,
        members: live.len() as u32,
        capacity: Resources::default(),
        largest: Resources::default(),
        free: Resources::default(),
        zones: Vec::new(),
        labels: Vec::new(),
        contacts: contacts
            .iter()
            .filter(|c| !c.is_empty() && c.len() <= CELL_CONTACT_LEN_MAX)
            .take(CELL_CONTACTS_MAX)
            .cloned()
            .collect(),
        sees: Vec::new(),
    };
    let mut zones: BTreeMap<&str, Resources> = BTreeMap::new();
    let mut labels: BTreeMap<(&str, &str), Resources> = BTreeMap::new();
    let mut lacks: BTreeMap<&str, Resources> = BTreeMap::new();
    for n in live.iter().filter(|n| !n.draining) {
        let c = n.capacity;
        fresh.capacity = fresh.capacity.saturating_add(&c);
        fresh.largest = Resources::new(
            fresh.largest.cpu_millis.max(c.cpu_millis),
            fresh.largest.memory_bytes.max(c.memory_bytes),
        );
        add(zones.entry(n.zone.as_str()).or_default(), &c);
        for (k, v) in &n.labels {
            // A member's own label cannot pass for a reserved one (agents refuse such keys).
            if (1..=CELL_TOKEN_LEN_MAX).contains(&k.len())
                && (1..=CELL_TOKEN_LEN_MAX).contains(&v.len())
                && !k.starts_with(LACKS_KEY_PREFIX)
            {
                add(labels.entry((k.as_str(), v.as_str())).or_default(), &c);
            }
        }
        for key in lacked(n.caps.as_ref()) {
            add(lacks.entry(key).or_default(), &c);
        }
    }
    fresh.zones = largest_first(
        zones
            .into_iter()
            .filter(|z| z.0.len() <= CELL_TOKEN_LEN_MAX),
    )
    .into_iter()
    .take(CELL_ZONES_MAX)
    .map(|(zone, capacity)| ZoneOffer {
        zone: zone.to_string(),
        capacity,
    })
    .collect();
    fresh.zones.sort();
    // Zones left out (more than fit, or names too long) still count in the capacity; the
    // summary then says less about them, never more.
    // The lacks first, whole (at most `LACKS_KEYS_MAX`): a lack left out would make the cell
    // look able to run what it cannot.
    fresh.labels = lacks
        .into_iter()
        .map(|(key, capacity)| LabelOffer {
            key: key.to_string(),
            value: LACKS_VALUE.to_string(),
            capacity,
        })
        .collect();
    let room = CELL_LABELS_MAX - fresh.labels.len();
    fresh.labels.extend(
        largest_first(labels.into_iter())
            .into_iter()
            .take(room)
            .map(|((key, value), capacity)| LabelOffer {
                key: key.to_string(),
                value: value.to_string(),
                capacity,
            }),
    );
    fresh.labels.sort();
    if let Some(prev) = previous.filter(|p| keeps(p, &fresh)) {
        fresh.capacity = prev.capacity;
        fresh.largest = prev.largest;
        fresh.zones = prev.zones.clone();
        fresh.labels = prev.labels.clone();
    }
    fresh.free = fresh.capacity.saturating_sub(&used(placement, workloads));
    assert_eq!(
        fresh.validate(),
        Ok(()),
        "summarize built an invalid summary"
    );
    fresh
}

fn add(total: &mut Resources, c: &Resources) {
    *total = total.saturating_add(c);
}

/// The entries with the most capacity first (CPU, then memory), ties by key.
fn largest_first<K: Ord>(entries: impl Iterator<Item = (K, Resources)>) -> Vec<(K, Resources)> {
    let mut v: Vec<(K, Resources)> = entries.collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// What the cell's own placement asks of its members.
fn used(placement: &Placement, workloads: &[Workload]) -> Resources {
    let requests: BTreeMap<&str, Resources> = workloads
        .iter()
        .map(|w| (w.id.as_str(), w.request))
        .collect();
    placement
        .assigned
        .keys()
        .filter_map(|r| requests.get(r.workload.as_str()))
        .fold(Resources::default(), |a, r| a.saturating_add(r))
}

/// True when the previous ranked figures still stand for `fresh`: same cell, members before and
/// now, the same zones and label values, every figure within 1/16 of the published one, and the
/// same capabilities offered by no member (always the same when no member says any).
fn keeps(prev: &CellSummary, fresh: &CellSummary) -> bool {
    let close = |p: &Resources, f: &Resources| {
        near(p.cpu_millis, f.cpu_millis) && near(p.memory_bytes, f.memory_bytes)
    };
    prev.cell == fresh.cell
        && prev.members > 0
        && fresh.members > 0
        && close(&prev.capacity, &fresh.capacity)
        && close(&prev.largest, &fresh.largest)
        && prev.zones.len() == fresh.zones.len()
        && prev
            .zones
            .iter()
            .zip(&fresh.zones)
            .all(|(p, f)| p.zone == f.zone && close(&p.capacity, &f.capacity))
        && prev.labels.len() == fresh.labels.len()
        && prev
            .labels
            .iter()
            .zip(&fresh.labels)
            .all(|(p, f)| p.key == f.key && p.value == f.value && close(&p.capacity, &f.capacity))
        && wholly_lacked(prev) == wholly_lacked(fresh)
}

/// `fresh` is within 1/16 of `published`.
fn near(published: u64, fresh: u64) -> bool {
    u128::from(published.abs_diff(fresh)) * u128::from(RANKED_DRIFT_DIVISOR)
        <= u128::from(published)
}
