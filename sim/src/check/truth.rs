//! The ground truth: alive copies per replica from the hosts' runtimes, the placement the mesh
//! should converge to (the real core on the hosts that are in fact up and the acknowledged
//! specs), moves per membership change, and convergence.

use std::collections::{BTreeMap, BTreeSet};

use shoal::state::mesh::view::placement_workload_held;
use shoal_core::instance::{Phase, ReplicaId};
use shoal_core::placement::{Node, Placement};
use shoal_core::spec::WorkloadSpec;
use shoal_core::stacking::place_stacked;

use super::{Checker, HostView};
use crate::host::HostState;
use crate::trace::Trace;

/// One alive copy.
#[derive(Clone, Debug)]
pub struct Copy {
    /// The runtime's handle.
    pub handle: String,
    /// Host index.
    pub host: u32,
    /// Phase.
    pub phase: Phase,
    /// When it is (or was) ready.
    pub ready_ms: u64,
    /// Spec version.
    pub version: String,
    /// The revision of the spec it was started from (`SHOAL_SIM_REVISION`; 0 for none).
    pub revision: u64,
    /// Exclusive workload.
    pub exclusive: bool,
}

/// Alive copies per replica.
pub type Copies = BTreeMap<ReplicaId, Vec<Copy>>;

/// The placement the mesh should reach, and its inputs' key.
#[derive(Default)]
pub(crate) struct Truth {
    hosts: BTreeSet<u32>,
    /// Hosts that were ever up: agents keep a down one in their rankings (placement `down`) for
    /// chitchat's dead-node grace period, an hour, longer than any scenario.
    known: BTreeSet<u32>,
    key: u64,
    pub placement: Placement,
    /// A mesh of cells: each up agent's view of the cells, and what is wrong with the target the
    /// views give (`cells.rs`).
    views: super::cells::Views,
    /// A mesh of cells: each cell's hosts as placement sees them, for `key` (kept while only
    /// views move, as they do through a forming mesh).
    cell_members: Option<(u64, BTreeMap<String, Vec<Node>>)>,
    /// A mesh of cells: what the last sample placed, by cell and view (`cells::Placed`).
    placed: super::cells::Placed,
    pub(super) cell_gaps: Vec<String>,
}

/// Every alive copy on every host at `now` (exclusive from the acknowledged specs).
pub fn copies(now: u64, hosts: &[HostView<'_>], latest: &Latest) -> Copies {
    let mut out: Copies = BTreeMap::new();
    for h in hosts {
        for i in h
            .ground
            .seen(now)
            .into_iter()
            .filter(|i| i.phase.may_be_alive())
        {
            let exclusive = latest
                .get(&i.replica.workload)
                .and_then(|(_, s)| s.as_ref())
                .is_some_and(|s| s.placement.exclusive);
            out.entry(i.replica).or_default().push(Copy {
                handle: i.handle,
                host: h.index,
                phase: i.phase,
                ready_ms: i.ready_ms,
                version: i.version,
                revision: i.revision,
                exclusive,
            });
        }
    }
    out
}

pub(crate) type Latest = BTreeMap<String, (Option<String>, Option<WorkloadSpec>)>;

/// The placement algorithm the agents run: the one the mesh version names
/// (`shoal_core::upgrade::placement_algorithm`), the highest any agent up has recorded (the
/// version only moves forward, and every agent reaches it); the oldest this build speaks while
/// no agent is up.
pub fn placement_algorithm(hosts: &[HostView<'_>]) -> u32 {
    let version = hosts
        .iter()
        .filter(|h| h.state == HostState::Up)
        .filter_map(|h| h.node.map(|n| n.mesh_version()))
        .max()
        .unwrap_or(shoal_core::version::WIRE_MIN);
    shoal_core::upgrade::placement_algorithm(version)
}

/// Host `h` as the agents' placement sees it (`shoal::state::mesh::view::placement_nodes`):
/// its record, `down` unless up, and under algorithm 7 and later the capabilities it gossips.
pub fn placement_node(h: &HostView<'_>, up: bool, algorithm: u32) -> Node {
    let mut node = h.record.placement_node(h.name);
    node.down = !up;
    if algorithm >= 7 {
        node.caps = h.caps.cloned();
    }
    node
}

fn desired_replicas(latest: &Latest) -> BTreeMap<&str, u32> {
    latest
        .iter()
        .filter_map(|(w, (v, s))| v.as_ref().and(s.as_ref()).map(|s| (w.as_str(), s.replicas)))
        .collect()
}

/// (desired, running, healthy, extra copies).
pub fn counts(copies: &Copies, latest: &Latest) -> (u32, u32, u32, u32) {
    let desired = desired_replicas(latest);
    let wanted = |r: &ReplicaId| {
        desired
            .get(r.workload.as_str())
            .is_some_and(|n| r.replica < *n)
    };
    let (mut running, mut healthy, mut extra) = (0, 0, 0);
    for (r, list) in copies {
        if wanted(r) {
            running += 1;
            healthy += u32::from(list.iter().any(|c| c.phase == Phase::Running));
            extra += list.len() as u32 - 1;
        } else {
            extra += list.len() as u32;
        }
    }
    (desired.values().sum(), running, healthy, extra)
}

impl Checker {
    /// Recomputes the target placement when the up hosts or the acknowledged specs change, and
    /// counts the moves a membership change caused.
    pub(super) fn update_truth(&mut self, now: u64, hosts: &[HostView<'_>], trace: &mut Trace) {
        let up: BTreeSet<u32> = hosts
            .iter()
            .filter(|h| h.state == HostState::Up)
            .map(|h| h.index)
            .collect();
        let mut known = self.truth.known.clone();
        known.extend(up.iter().copied());
        let algorithm = placement_algorithm(hosts);
        // A hash of the inputs, written straight into the hasher (a line of text per host
        // per sample was a share of a 5,000-host run).
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        hasher.update(&algorithm.to_le_bytes());
        for h in hosts.iter().filter(|h| known.contains(&h.index)) {
            let up = up.contains(&h.index);
            hasher.update(&h.index.to_le_bytes());
            hasher.update(&[u8::from(h.record.draining), u8::from(up)]);
        }
        let mut key_text = String::new();
        for (w, (v, _)) in &self.latest {
            key_text.push_str(&format!("{w}@{v:?};"));
        }
        for (r, h) in &self.data.holder {
            key_text.push_str(&format!("{r}={h};"));
        }
        hasher.update(key_text.as_bytes());
        let key = hasher.digest();
        // Building every agent's view of the cells costs hosts x cells summaries per sample:
        // only the views whose hashes moved are read again.
        let views_moved = super::cells::refresh_views(hosts, &mut self.truth.views);
        if key == self.truth.key && !views_moved {
            return;
        }
        // As the agents' store records do, the holders of the replicas' data (`data.rs`).
        let holders: BTreeMap<ReplicaId, String> = self
            .data
            .holder
            .iter()
            .filter_map(|(r, &h)| {
                let host = hosts.iter().find(|x| x.index == h)?;
                Some((r.clone(), host.name.to_string()))
            })
            .collect();
        let workloads: Vec<_> = self
            .latest
            .values()
            .filter_map(|(v, s)| v.as_ref().and(s.as_ref()))
            .map(|s| placement_workload_held(s, &holders, algorithm))
            .collect();
        // As the agents place: more replicas than eligible hosts stack (docs/placement.md); in
        // a mesh of cells, each cell's node level from its own view of the cells.
        let (placement, cell_gaps) = match hosts.iter().any(|h| h.cell.is_some()) {
            false => {
                let nodes: Vec<_> = hosts
                    .iter()
                    .filter(|h| known.contains(&h.index))
                    .map(|h| placement_node(h, up.contains(&h.index), algorithm))
                    .collect();
                (place_stacked(&nodes, &workloads), Vec::new())
            }
            true => {
                let members = match self.truth.cell_members.take() {
                    Some((at, members)) if at == key => members,
                    _ => super::cells::members(hosts, &known, &up, algorithm),
                };
                let (views, memo) = (&self.truth.views, &self.memo);
                let cache = &mut self.truth.placed;
                let t = super::cells::target(hosts, &members, &workloads, views, memo, cache, key);
                self.truth.cell_members = Some((key, members));
                (t.placement, t.gaps)
            }
        };
        if up != self.truth.hosts && !self.truth.hosts.is_empty() {
            let (mut moves, mut forced) = (0u64, 0u64);
            for (r, old) in &self.truth.placement.assigned {
                match placement.assigned.get(r) {
                    Some(new) if new != old => {
                        moves += 1;
                        let old_index = old
                            .trim_start_matches('n')
                            .parse::<u32>()
                            .map_or(u32::MAX, |n| n - 1);
                        forced += u64::from(!up.contains(&old_index));
                    }
                    _ => {}
                }
            }
            self.membership_changes += 1;
            self.moves += moves;
            self.forced_moves += forced;
            trace.line(
                now,
                format!(
                    "membership {} up: {moves} replicas move, {forced} forced",
                    up.len()
                ),
            );
        }
        self.truth = Truth {
            hosts: up,
            known,
            key,
            placement,
            views: std::mem::take(&mut self.truth.views),
            cell_members: self.truth.cell_members.take(),
            placed: std::mem::take(&mut self.truth.placed),
            cell_gaps,
        };
    }

    /// Running = desired: every assigned replica has exactly one alive copy, running, on its
    /// assigned host, current (see [`Checker::current`]), and nothing else runs.
    pub(super) fn check_convergence(&mut self, now: u64, copies: &Copies, hosts: &[HostView<'_>]) {
        self.convergence_gap = self.first_gap(copies, hosts);
        if now < self.last_fault_ms || self.convergence_gap.is_some() {
            self.converged_at_ms = None;
        } else if self.converged_at_ms.is_none() {
            self.converged_at_ms = Some(now);
        }
    }

    /// The first way running differs from desired, in replica order (None: they are equal).
    pub(super) fn first_gap(&self, copies: &Copies, hosts: &[HostView<'_>]) -> Option<String> {
        if let Some(gap) = self.truth.cell_gaps.first() {
            return Some(gap.clone());
        }
        let assigned = &self.truth.placement.assigned;
        if let Some((r, list)) = copies.iter().find(|(r, _)| !assigned.contains_key(*r)) {
            return Some(format!(
                "{r} is not desired but runs on n{}",
                list[0].host + 1
            ));
        }
        for (r, node) in assigned {
            let host = node
                .trim_start_matches('n')
                .parse::<u32>()
                .ok()
                .map(|n| n - 1);
            let list = copies.get(r).map_or(&[][..], |l| l.as_slice());
            let on: Vec<String> = list
                .iter()
                .map(|c| format!("n{} ({} at {})", c.host + 1, c.phase, c.version))
                .collect();
            let ok = match list {
                [c] => {
                    Some(c.host) == host && c.phase == Phase::Running && self.current(r, &c.version)
                }
                _ => false,
            };
            if !ok {
                let on = if on.is_empty() {
                    "nowhere".to_string()
                } else {
                    on.join(", ")
                };
                return Some(format!("{r} placed on {node}, runs on {on}"));
            }
        }
        let starting: Vec<&str> = hosts
            .iter()
            .filter(|h| h.state == HostState::Starting)
            .map(|h| h.name)
            .collect();
        if !starting.is_empty() {
            return Some(format!("{} starting", starting.join(",")));
        }
        None
    }

    /// Whether a copy made from `version` of `r`'s workload is current: made from the
    /// acknowledged version, or from an older one the acknowledged spec changed only in fields a
    /// running instance is not made from (replicas, placement, health, restart, update): the
    /// agent moves such an instance to the new version without touching it, so the runtime
    /// still lists the old one (a scale keeps its untouched replicas).
    pub(super) fn current(&self, r: &ReplicaId, version: &str) -> bool {
        let Some((Some(acked), Some(spec))) = self.latest.get(&r.workload) else {
            return false;
        };
        if acked == version {
            return true;
        }
        let keeps = |old: &WorkloadSpec| {
            old.run == spec.run
                && old.resources == spec.resources
                && (old.settings == spec.settings || spec.reload.is_some())
        };
        match self
            .made_from
            .get(&(r.workload.clone(), version.to_string()))
        {
            Some(old) => keeps(old),
            // A version whose answer never reached the simulator (lost, or an error that did not
            // name it) was made from a spec the simulator sent: current if every such spec is.
            None => self
                .sent_specs
                .get(&r.workload)
                .is_some_and(|sent| sent.iter().all(keeps)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::check::Checker;
    use shoal_core::instance::ReplicaId;
    use shoal_core::spec::WorkloadSpec;

    fn spec(command: &str) -> WorkloadSpec {
        let text = format!(
            "name = \"api\"\nreplicas = 2\n[process]\ncommand = [\"{command}\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
        );
        WorkloadSpec::from_toml_str(&text, "test.toml").unwrap()
    }

    #[test]
    fn a_version_the_simulator_never_heard_of_is_judged_by_the_specs_it_sent() {
        let r = ReplicaId::new("api", 0);
        let mut c = Checker::default();
        // Sent twice with the same content; the first answer was lost (its version unknown),
        // the second acknowledged.
        c.spec_sent(&spec("api"));
        c.spec_sent(&spec("api"));
        c.acknowledged(2_000, "api", Some("v2".into()), Some(spec("api")));
        assert!(c.current(&r, "v2"));
        assert!(
            c.current(&r, "v1"),
            "made from the same spec, whichever write it was"
        );
        // Once another spec was sent, an unknown version may be made from either: not current.
        c.spec_sent(&spec("api-2"));
        c.acknowledged(3_000, "api", Some("v3".into()), Some(spec("api-2")));
        assert!(!c.current(&r, "v1"));
        assert!(!c.current(&r, "v2"), "v2 is known, and its command changed");
        assert!(c.current(&r, "v3"));
    }
}
