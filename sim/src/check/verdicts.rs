//! False verdicts (docs/sim.md, "False verdicts"): a member an observer's failure detector
//! drops from its live set while that very incarnation is up and was reachable from the
//! observer within [`REACHABLE_WITHIN_MS`], and a cell an agent of another cell stops holding
//! up while one of its members is up and was reachable from that agent within the same window.
//! Counted always; a failure only when the scenario asserts `false_verdicts_max`.
//!
//! A frozen observer's views are not read: it acts on nothing while frozen, and what it holds
//! when it thaws is compared with what it held before it froze. A death it holds then was
//! formed either before it froze or since it thawed, so it is judged at both instants: false if
//! the member was reachable within the window before either.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::reach::REACHABLE_WITHIN_MS;
use super::{Checker, HostView};
use crate::host::HostState;
use crate::trace::Trace;

/// Up to this many hosts every agent's verdicts are read at every sample (100 ms); above it
/// every
/// [`VERDICTS_SLOW_EVERY_MS`], and the cell verdicts of [`CELL_OBSERVERS_MAX`] agents per cell
/// only (the cost of reading every view grows with the square of the mesh).
const VERDICTS_EVERY_TICK_HOSTS_MAX: usize = 1_000;
/// Time between two readings of the verdicts in a larger mesh.
const VERDICTS_SLOW_EVERY_MS: u64 = 500;
/// Agents per cell whose cell verdicts are read in a larger mesh (the first up ones).
const CELL_OBSERVERS_MAX: usize = 3;
/// False verdicts kept with their evidence for the report (all are counted).
const FALSE_KEPT_MAX: usize = 200;

/// One false verdict, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct FalseVerdict {
    /// When it was seen (sim ms).
    pub t_ms: u64,
    /// `member-dead` or `cell-down`.
    pub kind: &'static str,
    /// The observer (host name).
    pub observer: String,
    /// The host or cell it declared dead or down.
    pub subject: String,
}

/// What the verdict checker holds between samples.
#[derive(Default)]
pub(crate) struct Verdicts {
    /// Per observer: its incarnation's generation and the (host, generation) pairs it held live.
    live: BTreeMap<u32, (u64, BTreeSet<(u32, u64)>)>,
    /// Per observer: its incarnation's generation and the other cells it held up.
    cells_up: BTreeMap<u32, (u64, BTreeSet<String>)>,
    /// Per observer: its incarnation's generation and how many deaths its probes had declared
    /// at the last reading.
    declared: BTreeMap<u32, (u64, u64)>,
    /// Per observer: when its member verdicts were last read (it was running then).
    read_at: BTreeMap<u32, u64>,
    /// Per observer: what its live set in `live` was read from (its chitchat's state stamp and
    /// its probes' verdicts' stamp): while both stand, the set cannot have moved and is not
    /// read again.
    read_from: BTreeMap<u32, (u64, u64)>,
}

/// How far back the reach history is kept for an observer frozen since its last reading: a
/// verdict it formed just before it froze is judged at that instant (`member_verdicts`).
const FROZEN_HISTORY_MAX_MS: u64 = 60_000;

fn generation(h: &HostView<'_>) -> Option<u64> {
    h.node.map(|n| n.gossip().chitchat_id().generation_id)
}

impl Checker {
    pub(super) fn check_false_verdicts(
        &mut self,
        now: u64,
        hosts: &[HostView<'_>],
        trace: &mut Trace,
    ) {
        let large = hosts.len() > VERDICTS_EVERY_TICK_HOSTS_MAX;
        if large && !now.is_multiple_of(VERDICTS_SLOW_EVERY_MS) {
            return;
        }
        // Keep the reach history back to the oldest reading of an observer (frozen since,
        // mostly), so that its verdicts can be judged at the instant it froze.
        let oldest = self
            .verdicts
            .read_at
            .values()
            .copied()
            .min()
            .unwrap_or(now)
            .max(now.saturating_sub(FROZEN_HISTORY_MAX_MS));
        self.reach.prune(oldest);
        let current: Vec<Option<u64>> = hosts
            .iter()
            .map(|h| generation(h).filter(|_| h.state == HostState::Up))
            .collect();
        self.member_verdicts(now, hosts, &current, trace);
        self.cell_verdicts(now, hosts, &current, large, trace);
    }

    fn member_verdicts(
        &mut self,
        now: u64,
        hosts: &[HostView<'_>],
        current: &[Option<u64>],
        trace: &mut Trace,
    ) {
        for o in hosts {
            let Some(gen_o) = current[o.index as usize] else {
                self.verdicts.live.remove(&o.index);
                self.verdicts.declared.remove(&o.index);
                self.verdicts.read_at.remove(&o.index);
                self.verdicts.read_from.remove(&o.index);
                continue;
            };
            // A frozen agent acts on nothing: what it holds is read when it thaws.
            let Some(node) = o.node.filter(|_| !o.paused) else {
                continue;
            };
            let chitchat = node.gossip().chitchat();
            let Ok(guard) = chitchat.try_lock() else {
                self.verdict_reads_missed += 1;
                continue;
            };
            self.verdict_reads += 1;
            self.count_declared(o.index, gen_o, node.probe_stats().0.declared_dead);
            // The membership's verdict: the member probes' where they judge an identity, the
            // heartbeat detector's elsewhere (`view::Verdicts::judge`).
            let verdicts = node.verdicts();
            let read_live = || -> BTreeSet<(u32, u64)> {
                guard
                    .node_states()
                    .keys()
                    .filter(|id| verdicts.judge(id, guard.is_live(id)).0)
                    .filter_map(|id| {
                        Some((super::agents::host_index(&id.node_id)?, id.generation_id))
                    })
                    .collect()
            };
            // Neither chitchat's states nor liveness nor the probes' verdicts moved since the
            // last reading of this incarnation: its live set is the one held, nothing went.
            let from = (guard.state_stamp(), verdicts.stamp());
            let held = self.verdicts.live.get(&o.index).filter(|h| h.0 == gen_o);
            if let Some(held) =
                held.filter(|_| self.verdicts.read_from.get(&o.index) == Some(&from))
            {
                debug_assert_eq!(held.1, read_live(), "a live set moved under equal stamps");
                drop(guard);
                self.verdicts.read_at.insert(o.index, now);
                continue;
            }
            let live = read_live();
            drop(guard);
            self.verdicts.read_from.insert(o.index, from);
            // A verdict read now was formed since the last reading: while the observer ran
            // now, or just before it froze in between (its last running instant then).
            let read_before = self.verdicts.read_at.insert(o.index, now);
            let instants: Vec<u64> = read_before
                .map(|since| self.reach.froze_between(o.index, since, now))
                .unwrap_or_default()
                .into_iter()
                .chain([now])
                .collect();
            let before = self.verdicts.live.insert(o.index, (gen_o, live));
            let Some((gen_before, before)) = before.filter(|b| b.0 == gen_o) else {
                continue;
            };
            debug_assert_eq!(gen_before, gen_o);
            let live = &self.verdicts.live[&o.index].1;
            let gone: Vec<(u32, u64)> = before
                .difference(live)
                .filter(|&&(x, _)| x != o.index && !live.iter().any(|&(y, _)| y == x))
                .copied()
                .collect();
            let clock = tokio::time::Instant::now();
            for (x, gen_x) in gone {
                self.member_deaths_seen += 1;
                let alive = current.get(x as usize).copied().flatten() == Some(gen_x);
                // A death the probes declared is judged at the instant they declared it: the
                // reach that came after (a cut healed since) could not inform it. Others (the
                // heartbeat detector's, or one no longer kept) at the instants above.
                let declared = hosts
                    .get(x as usize)
                    .and_then(|h| node.death_declared_at(h.name, gen_x))
                    .map(|at| {
                        now.saturating_sub(clock.saturating_duration_since(at).as_millis() as u64)
                    })
                    .filter(|&at| read_before.is_some_and(|since| at >= since) && at <= now);
                let reached = match declared {
                    Some(at) => self.reach.reachable_within(o.index, x, at),
                    None => instants
                        .iter()
                        .any(|&t| self.reach.reachable_within(o.index, x, t)),
                };
                if alive && reached {
                    self.false_member_deaths += 1;
                    let subject = format!("n{}", x + 1);
                    self.false_verdict(now, "member-dead", o.name, subject, trace);
                }
            }
        }
    }

    /// Adds the deaths observer `o` (generation `gen_o`) declared since its last reading.
    fn count_declared(&mut self, o: u32, gen_o: u64, declared: u64) {
        let before = match self.verdicts.declared.insert(o, (gen_o, declared)) {
            Some((gen, n)) if gen == gen_o => n,
            _ => 0,
        };
        self.member_deaths_declared += declared.saturating_sub(before);
    }

    /// Why the member verdicts cannot be judged, if they cannot: the checker read no agent's
    /// view, or the agents' probes declared deaths it did not see (it read between a death and
    /// a revival, or not at all). A bound on false deaths is then not passed.
    pub(crate) fn member_verdicts_blind(&self) -> Option<String> {
        if self.verdict_reads == 0 {
            return Some("the checker read no agent's member verdicts".to_string());
        }
        (self.member_deaths_declared > self.member_deaths_seen).then(|| {
            format!(
                "the agents' probes declared {} member deaths, the checker saw {}: it cannot \
                 judge the ones it did not see",
                self.member_deaths_declared, self.member_deaths_seen
            )
        })
    }

    fn cell_verdicts(
        &mut self,
        now: u64,
        hosts: &[HostView<'_>],
        current: &[Option<u64>],
        large: bool,
        trace: &mut Trace,
    ) {
        let mut per_cell: BTreeMap<&str, usize> = BTreeMap::new();
        for o in hosts {
            let (Some(cell), Some(gen_o), Some(node)) = (o.cell, current[o.index as usize], o.node)
            else {
                self.verdicts.cells_up.remove(&o.index);
                continue;
            };
            if o.paused {
                continue; // read when it thaws, as its member verdicts
            }
            let seen = per_cell.entry(cell).or_default();
            *seen += 1;
            if large && *seen > CELL_OBSERVERS_MAX {
                continue;
            }
            let up: BTreeSet<String> = node.cells.up_cells().into_iter().collect();
            let before = self.verdicts.cells_up.insert(o.index, (gen_o, up.clone()));
            let Some((_, before)) = before.filter(|b| b.0 == gen_o) else {
                continue;
            };
            for d in before.difference(&up) {
                self.cell_downs_seen += 1;
                let heard = hosts.iter().any(|m| {
                    m.cell == Some(d.as_str())
                        && current[m.index as usize].is_some()
                        && self.reach.reachable_within(o.index, m.index, now)
                });
                if heard {
                    self.false_cell_downs += 1;
                    self.false_verdict(now, "cell-down", o.name, d.clone(), trace);
                }
            }
        }
    }

    fn false_verdict(
        &mut self,
        now: u64,
        kind: &'static str,
        observer: &str,
        subject: String,
        trace: &mut Trace,
    ) {
        let what = if kind == "cell-down" {
            "held cell"
        } else {
            "declared"
        };
        let end = if kind == "cell-down" { "down" } else { "dead" };
        trace.line(
            now,
            format!(
                "FALSE VERDICT: {observer} {what} {subject} {end} while it was up and reachable \
                 within {REACHABLE_WITHIN_MS} ms"
            ),
        );
        if self.false_verdicts.len() < FALSE_KEPT_MAX {
            self.false_verdicts.push(FalseVerdict {
                t_ms: now,
                kind,
                observer: observer.to_string(),
                subject,
            });
        }
    }
}
