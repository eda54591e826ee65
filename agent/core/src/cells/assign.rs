//! The cell level: which cell each replica goes to, from the cells' summaries and the specs.
//!
//! 1. **Ranking.** Replica `i` of workload `w` ranks the cells by weighted rendezvous: key
//!    `-ln(u) / c` with u from `replica_pair(pair_hash(w, cell), replica_offset(w, i))`, a hash
//!    of its own for every (replica, cell), so that replicas spread over the cells in proportion
//!    to their weights (`replica_pair` says why the node level's sum is not enough here), and c the copies of the request that the cell's eligible capacity holds ([`offer`]: its
//!    ranked capacity, or for constraints the capacity of the members that could satisfy them).
//!    Since placement algorithm 9 (`Workload::cell_level_needs`) the replica's runtime, and root
//!    when it runs as root, count like constraints ([`capability`](super::capability)): a cell
//!    whose members lack them has no eligible capacity for it.
//!    Ranked capacities change only when the envoys republish them (more than 1/16 off), never
//!    with free capacity, so agents with summaries a version apart rank alike.
//! 2. **Zone spread.** A zone-spread workload's zones are those its eligible cells offer (and its
//!    `zone` constraints allow), ranked by the workload's hash of each zone name; replica `i`'s
//!    home is the one at `i % zones`, and it ranks first the cells offering its home, weighed by
//!    their eligible capacity in that zone.
//! 3. **Room, in a canonical order** (priority descending, replica index ascending, workload
//!    hash, id). Each replica takes the first cell of its ranking that is usable (up, with a
//!    member and capacity) and has room: what the cell level has given it so far, plus the
//!    request, stays within [`CELL_FILL_PERMILLE`] of its ranked capacity, of its eligible
//!    capacity for the replica's constraints, and (home tier) of its home zone's. A full cell
//!    spills to the next in the ranking. Room is computed from the summaries' ranked capacities
//!    and the requests alone, never from `free`: free capacity depends on what the cell level
//!    decided, and feeding it back would make cells oscillate.
//! 4. **Nowhere with room.** A replica no usable cell has room for goes to the first usable
//!    eligible cell of its ranking anyway, and a replica no cell offers what its constraints ask
//!    goes to the first usable cell by capacity (since algorithm 9, the capacity able to run it,
//!    among the cells able to): their cell's node level, which sees the members, places them or
//!    says exactly why not (both are listed in `unsure`). Only with no usable cell at all
//!    (`NoCells`), or none whose members can run it (`Incapable`), is a replica unschedulable
//!    here. So a mesh of one cell gives it every replica its members can run, and the node level
//!    decides everything, as single-level placement does.
//!
//! Down cells keep their place in every ranking and take nothing: their replicas go to the next
//! cells, and come back when the cell does (the result is a function of the inputs). A replica
//! whose index is below a workload's replica count keeps its ranking whatever the count, and
//! replicas of a higher index come after it in the canonical order: scaling up moves none of a
//! workload's replicas, scaling down none that stays (other workloads' replicas can move only
//! where room decides).

use std::collections::BTreeMap;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::capability::{capable_capacity, judged, offers};
use super::model::{Cell, CellInputError, CellPlacement, CellUnschedulable};
use super::offer::{eligible_capacity, zone_allowed, zone_eligible};
use crate::constraint::Constraint;
use crate::placement::hash::{
    certainly_above, key, pair_hash, replica_offset, replica_pair, unit, workload_hash, zone_hash,
    RequestScale,
};
use crate::placement::model::{check_workload, InputError, ReplicaId, Spread, Unmet, Workload};
use crate::resources::Resources;

/// Seed for cell name hashes.
pub const CELL_SEED: u64 = 0x5348_4f41_4c43_454c;
/// How full, in thousandths of its ranked capacity, the cell level fills a cell before spilling
/// to the next: room for the node level's bin packing, and for summaries a little stale.
pub const CELL_FILL_PERMILLE: u64 = 900;

/// Hash of a cell name.
pub fn cell_hash(name: &str) -> u64 {
    xxh3_64_with_seed(name.as_bytes(), CELL_SEED)
}

/// `CELL_FILL_PERMILLE` of a capacity.
fn budget(capacity: Resources) -> Resources {
    let part = |x: u64| (u128::from(x) * u128::from(CELL_FILL_PERMILLE) / 1000) as u64;
    Resources::new(part(capacity.cpu_millis), part(capacity.memory_bytes))
}

/// What the cell level has given a cell (or a part of it) so far, against its budget.
#[derive(Clone, Copy, Default)]
struct Room {
    budget: Resources,
    used: Resources,
}

impl Room {
    fn new(capacity: Resources) -> Room {
        Room {
            budget: budget(capacity),
            used: Resources::default(),
        }
    }
    fn fits(&self, request: &Resources) -> bool {
        self.used.saturating_add(request).fits_in(&self.budget)
    }
    fn take(&mut self, request: &Resources) {
        self.used = self.used.saturating_add(request);
    }
}

/// A cell a workload can use, with its weight, and for the home tier its zone's room.
#[derive(Clone, Copy)]
struct Candidate {
    cell: u32,
    weight: f64,
    /// Index into the zone rooms (home tier only).
    zone_room: u32,
}

/// What the pass needs of one workload.
struct Plan<'a> {
    spec: &'a Workload,
    hash: u64,
    class: usize,
    /// Cells whose eligible capacity holds a copy of the request, by cell index.
    eligible: Vec<Candidate>,
    /// Per home zone, in rank order: its name and the eligible cells offering it.
    zones: Vec<(&'a str, Vec<Candidate>)>,
    /// Every cell by the capacity of its members able to run it, its whole capacity unless the
    /// cell level judges the workload's needs (for replicas no cell offers their constraints).
    fallback: Vec<Candidate>,
    /// The needs the cell level judges (placement algorithm 9; empty before).
    needs: Vec<Unmet>,
}

/// The cell level's placement of these workloads over these cells: pure, and independent of
/// the order of both slices. Invalid or duplicated inputs are left out and listed in `rejected`.
pub fn place_cells(cells: &[Cell], workloads: &[Workload]) -> CellPlacement {
    let mut out = CellPlacement::default();
    let cells = accepted_cells(cells, &mut out.rejected);
    let workloads = accepted_workloads(workloads, &mut out.rejected);
    out.rejected.sort();
    out.rejected.dedup();
    out.cells_known = cells.len() as u32;
    let hashes: Vec<u64> = cells.iter().map(|c| cell_hash(&c.summary.cell)).collect();
    let usable: Vec<bool> = cells.iter().map(|c| c.usable()).collect();
    let mut rooms: Vec<Room> = cells
        .iter()
        .map(|c| Room::new(c.summary.capacity))
        .collect();
    // Zone rooms, flat: cell c's zones start at zone_base[c].
    let mut zone_base = Vec::with_capacity(cells.len());
    let mut zone_rooms: Vec<Room> = Vec::new();
    for c in &cells {
        zone_base.push(zone_rooms.len() as u32);
        zone_rooms.extend(c.summary.zones.iter().map(|z| Room::new(z.capacity)));
    }
    // Classes of constraints and judged needs: per class, each cell's capacity able to run it,
    // its eligible capacity (able, and within the constraints) and room for it.
    let mut class_of: BTreeMap<(&[Constraint], Vec<Unmet>), usize> = BTreeMap::new();
    let mut class_rooms: Vec<Vec<Room>> = Vec::new();
    let mut class_eligible: Vec<Vec<Resources>> = Vec::new();
    let mut class_capable: Vec<Vec<Resources>> = Vec::new();
    let mut plans: Vec<Plan<'_>> = Vec::with_capacity(workloads.len());
    for w in &workloads {
        let needs = judged(w);
        let class = *class_of
            .entry((&w.constraints, needs.clone()))
            .or_insert_with(|| {
                let capable: Vec<Resources> = cells
                    .iter()
                    .map(|c| capable_capacity(&c.summary, &needs))
                    .collect();
                let eligible: Vec<Resources> = cells
                    .iter()
                    .zip(&capable)
                    .map(|(c, able)| {
                        let e = eligible_capacity(&c.summary, &w.constraints);
                        if needs.is_empty() {
                            e
                        } else {
                            min(e, *able)
                        }
                    })
                    .collect();
                class_rooms.push(eligible.iter().map(|e| Room::new(*e)).collect());
                class_eligible.push(eligible);
                class_capable.push(capable);
                class_eligible.len() - 1
            });
        let capacities = (&class_eligible[class][..], &class_capable[class][..]);
        plans.push(plan(w, class, needs, &cells, capacities, &zone_base));
    }
    for p in &plans {
        if p.spec.spread == Spread::Zone && !p.zones.is_empty() {
            let names = p.zones.iter().map(|(z, _)| z.to_string()).collect();
            out.home_zones.insert(p.spec.id.clone(), names);
        }
    }
    // The canonical order: priority descending, replica index ascending, workload hash, id.
    let mut order: Vec<(std::cmp::Reverse<i32>, u32, u64, &str, usize)> = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        for r in 0..p.spec.replicas {
            order.push((
                std::cmp::Reverse(p.spec.priority),
                r,
                p.hash,
                p.spec.id.as_str(),
                i,
            ));
        }
    }
    order.sort_unstable();
    for (_, index, _, _, i) in order {
        let p = &plans[i];
        let id = ReplicaId::new(&p.spec.id, index);
        let request = p.spec.request;
        let offset = replica_offset(p.hash, index);
        let pick = |candidates: &[Candidate], ok: &dyn Fn(&Candidate) -> bool| {
            best(candidates, p.hash, offset, &hashes, ok)
        };
        let room_for = |c: &Candidate| {
            usable[c.cell as usize]
                && rooms[c.cell as usize].fits(&request)
                && class_rooms[p.class][c.cell as usize].fits(&request)
        };
        let home = match p.spec.spread {
            Spread::Zone if !p.zones.is_empty() => Some(&p.zones[index as usize % p.zones.len()].1),
            _ => None,
        };
        let at_home = home.and_then(|cands| {
            pick(cands, &|c| {
                room_for(c) && zone_rooms[c.zone_room as usize].fits(&request)
            })
        });
        let (chosen, sure) = match at_home {
            Some(c) => (Some(c), true),
            None => match pick(&p.eligible, &room_for) {
                Some(c) => (Some(c), true),
                None => {
                    let up = |c: &Candidate| usable[c.cell as usize];
                    let any = pick(&p.eligible, &up).or_else(|| pick(&p.fallback, &up));
                    (any, false)
                }
            },
        };
        let Some(c) = chosen else {
            let why = unschedulable(&cells, &usable, &p.needs);
            out.unschedulable.insert(id, why);
            continue;
        };
        let cell = c.cell as usize;
        rooms[cell].take(&request);
        class_rooms[p.class][cell].take(&request);
        if at_home.is_some() {
            zone_rooms[c.zone_room as usize].take(&request);
        }
        if !sure {
            out.unsure.insert(id.clone());
        }
        out.assigned.insert(id, cells[cell].summary.cell.clone());
    }
    out
}

/// Why no cell took a replica with these judged needs: no usable cell at all, or none whose
/// members could run it (naming the needs no usable cell offers, or all of them when each is
/// offered somewhere but no cell offers them together).
fn unschedulable(cells: &[&Cell], usable: &[bool], needs: &[Unmet]) -> CellUnschedulable {
    let known = cells.len() as u32;
    let up: Vec<&Cell> = cells
        .iter()
        .zip(usable)
        .filter(|(_, u)| **u)
        .map(|(c, _)| *c)
        .collect();
    if up.is_empty() || needs.is_empty() {
        return CellUnschedulable::NoCells { known };
    }
    let mut lacking: Vec<Unmet> = needs
        .iter()
        .filter(|n| !up.iter().any(|c| offers(&c.summary, n)))
        .cloned()
        .collect();
    if lacking.is_empty() {
        lacking = needs.to_vec();
    }
    CellUnschedulable::Incapable {
        known,
        needs: lacking,
    }
}

/// Component-wise minimum, ports included.
fn min(a: Resources, b: Resources) -> Resources {
    Resources {
        cpu_millis: a.cpu_millis.min(b.cpu_millis),
        memory_bytes: a.memory_bytes.min(b.memory_bytes),
        ports: a.ports.min(b.ports),
    }
}

/// The candidate with the smallest `(key, cell index)` among those `ok` accepts.
fn best(
    candidates: &[Candidate],
    workload_hash: u64,
    offset: u64,
    hashes: &[u64],
    ok: &dyn Fn(&Candidate) -> bool,
) -> Option<Candidate> {
    let mut best: Option<(f64, Candidate)> = None;
    for c in candidates {
        if !ok(c) {
            continue;
        }
        let u = unit(replica_pair(
            pair_hash(workload_hash, hashes[c.cell as usize]),
            offset,
        ));
        if best.is_some_and(|(k, _)| certainly_above(u, c.weight, k)) {
            continue;
        }
        let k = key(u, c.weight);
        // Candidates come in cell order, so a tie keeps the earlier cell.
        if best.is_none_or(|(bk, _)| k < bk) {
            best = Some((k, *c));
        }
    }
    best.map(|(_, c)| c)
}

/// The workload's candidates: eligible cells, home zones with the cells offering them, and
/// every cell able to run it by that capacity (`capacities`: per cell, eligible and able).
fn plan<'a>(
    w: &'a Workload,
    class: usize,
    needs: Vec<Unmet>,
    cells: &[&'a Cell],
    (eligible, capable): (&[Resources], &[Resources]),
    zone_base: &[u32],
) -> Plan<'a> {
    let scale = RequestScale::new(&w.request);
    let hash = workload_hash(&w.id);
    let fits = |room: &Resources, largest: &Resources| {
        w.request.fits_in(room) && w.request.fits_in(largest)
    };
    let mut plan = Plan {
        spec: w,
        hash,
        class,
        eligible: Vec::new(),
        zones: Vec::new(),
        fallback: Vec::new(),
        needs,
    };
    let mut zones: BTreeMap<&'a str, Vec<Candidate>> = BTreeMap::new();
    for (i, c) in cells.iter().enumerate() {
        let s = &c.summary;
        // Without judged needs the able capacity is the cell's: the fallback of algorithm 8.
        if capable[i].cpu_millis > 0 && capable[i].memory_bytes > 0 {
            plan.fallback.push(Candidate {
                cell: i as u32,
                weight: scale.weight(&capable[i]),
                zone_room: 0,
            });
        }
        if !fits(&eligible[i], &s.largest) {
            continue;
        }
        plan.eligible.push(Candidate {
            cell: i as u32,
            weight: scale.weight(&eligible[i]),
            zone_room: 0,
        });
        if w.spread != Spread::Zone {
            continue;
        }
        for (z, offer) in s.zones.iter().enumerate() {
            let in_zone = zone_eligible(s, eligible[i], &offer.zone);
            if zone_allowed(&w.constraints, &offer.zone) && fits(&in_zone, &s.largest) {
                zones
                    .entry(offer.zone.as_str())
                    .or_default()
                    .push(Candidate {
                        cell: i as u32,
                        weight: scale.weight(&in_zone),
                        zone_room: zone_base[i] + z as u32,
                    });
            }
        }
    }
    let mut zones: Vec<(&'a str, Vec<Candidate>)> = zones.into_iter().collect();
    zones.sort_by(|a, b| {
        let rank = |z: &str| pair_hash(hash, zone_hash(z));
        rank(a.0).cmp(&rank(b.0)).then_with(|| a.0.cmp(b.0))
    });
    plan.zones = zones;
    plan
}

/// The valid cells sorted by name; duplicates and invalid summaries go to `rejected`.
fn accepted_cells<'a>(cells: &'a [Cell], rejected: &mut Vec<CellInputError>) -> Vec<&'a Cell> {
    let mut count: BTreeMap<&str, u32> = BTreeMap::new();
    for c in cells {
        *count.entry(c.summary.cell.as_str()).or_default() += 1;
    }
    let mut valid = Vec::new();
    for c in cells {
        let name = &c.summary.cell;
        if count[name.as_str()] > 1 {
            rejected.push(CellInputError::DuplicateCell { cell: name.clone() });
        } else if let Err(error) = c.summary.validate() {
            let cell = name.chars().take(64).collect();
            rejected.push(CellInputError::InvalidSummary { cell, error });
        } else {
            valid.push(c);
        }
    }
    valid.sort_by(|a, b| a.summary.cell.cmp(&b.summary.cell));
    valid
}

/// The valid workloads with their constraints sorted (so that equal sets are one class);
/// duplicates and invalid ones go to `rejected`.
fn accepted_workloads(workloads: &[Workload], rejected: &mut Vec<CellInputError>) -> Vec<Workload> {
    let mut count: BTreeMap<&str, u32> = BTreeMap::new();
    for w in workloads {
        *count.entry(w.id.as_str()).or_default() += 1;
    }
    let mut valid = Vec::new();
    for w in workloads {
        if count[w.id.as_str()] > 1 {
            rejected.push(CellInputError::Workload(InputError::DuplicateWorkload {
                id: w.id.clone(),
            }));
        } else if let Err(e) = check_workload(w) {
            rejected.push(CellInputError::Workload(e));
        } else {
            let mut w = w.clone();
            w.constraints.sort();
            w.constraints.dedup();
            valid.push(w);
        }
    }
    valid
}
