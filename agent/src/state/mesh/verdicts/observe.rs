//! What the verdict task reads of chitchat each [`TICK`](super::TICK): every other identity it
//! holds, as the prober takes it ([`Observed`]), and how many live members suspect this agent.
//!
//! Read incrementally: one row per node state, in chitchat's order, whose keys (build, leave,
//! suspects) are read and decoded again only when the state's versions moved (every set or
//! delete of a key raises its `max_version`; heartbeats do not). A tick where nothing moved
//! costs a walk over integers and one liveness lookup per member, and tells the prober so
//! ([`Observer::read`] returns `false`), which then skips its own walk. A tick where chitchat's
//! [`Chitchat::state_stamp`] has not moved since the last read (no other node's state,
//! heartbeat or liveness changed: most ticks of a mesh at rest) costs nothing at all: the
//! verdict task ticks every 50 ms, and a walk per tick was most of its cost at rest, growing
//! with the mesh. Debug builds check every read, skipped or not, against a from-scratch one.

use std::collections::BTreeMap;

use chitchat::{Chitchat, ChitchatId, NodeState};
use shoal_core::verdict::{parse_suspects, Observed};

use super::{SUSPECTS_BYTES_MAX, SUSPECTS_KEY, SUSPECTS_MAX};
use crate::state::mesh::build::{BuildRecord, BUILD_KEY};
use crate::state::mesh::view::{realigned, same_ids, LEAVING_KEY};
use crate::transport::gossip::probe::PROBE_WIRE;

/// The verdict task's incremental read of chitchat (module documentation).
#[derive(Default)]
pub(super) struct Observer {
    rows: Vec<Row>,
    /// Every identity but this agent's, as last read: what the prober takes.
    members: Vec<Observed>,
    /// Read for compact gossip (every member speaks probes).
    compact: bool,
    /// How many live members suspect each identity, by name and generation.
    suspected: BTreeMap<String, BTreeMap<u64, u32>>,
    /// How many live members suspect this agent.
    mine: u32,
    /// Chitchat's state stamp at the last read (`None`: never read).
    stamp: Option<u64>,
    /// Debug builds: what the last read returned.
    #[cfg(debug_assertions)]
    last: Vec<Observed>,
}

struct Row {
    id: ChitchatId,
    /// The node state's `(max_version, last_gc_version)` when its keys were last read.
    versions: Option<(u64, u64)>,
    /// Its build speaks probes.
    speaks_probes: bool,
    leaving: bool,
    /// Whom it gossips that it suspects.
    suspects: Vec<(String, u64)>,
    live: bool,
    /// Its index in `members` (`None`: this agent).
    member: Option<usize>,
}

impl Observer {
    /// The members as last read.
    pub(super) fn members(&self) -> &[Observed] {
        &self.members
    }

    /// How many live members suspect this agent, as last read.
    pub(super) fn suspected_me(&self) -> u32 {
        self.mine
    }

    /// Reads `chitchat` again; `compact`: the mesh is at compact gossip, so every member speaks
    /// probes, and one whose build record has not come (or never will: a name only some digest
    /// carried) is probed like the rest (nothing else would ever judge it dead). Returns whether
    /// any member's observation or the count of this agent's suspecters moved since the last
    /// read.
    pub(super) fn read(&mut self, chitchat: &Chitchat, compact: bool) -> bool {
        let stamp = chitchat.state_stamp();
        if self.stamp == Some(stamp) && self.compact == compact {
            #[cfg(debug_assertions)]
            self.check_fresh(
                chitchat,
                compact,
                "chitchat's state stamp did not move, but what it holds did",
            );
            return false;
        }
        self.stamp = Some(stamp);
        let me = chitchat.self_chitchat_id();
        let states = chitchat.node_states();
        let mut moved = std::mem::replace(&mut self.compact, compact) != compact;
        let mut suspects_moved = false;
        if !self.same_ids(states) {
            self.realign(states, me);
            moved = true;
            suspects_moved = true;
        }
        for (row, (id, state)) in self.rows.iter_mut().zip(states) {
            let versions = (state.max_version(), state.last_gc_version());
            if row.versions != Some(versions) {
                row.versions = Some(versions);
                row.speaks_probes = speaks_probes(state);
                row.leaving = state.get(LEAVING_KEY).is_some();
                let suspects = suspects(state);
                if suspects != row.suspects {
                    row.suspects = suspects;
                    suspects_moved = true;
                }
            }
            let live = chitchat.is_live(id);
            if live != row.live {
                row.live = live;
                suspects_moved |= !row.suspects.is_empty();
            }
            let Some(at) = row.member else {
                continue;
            };
            let member = &mut self.members[at];
            let heartbeat = u64::from(state.heartbeat());
            let probes = compact || row.speaks_probes;
            if (member.heartbeat, member.live, member.probes, member.leaving)
                != (heartbeat, live, probes, row.leaving)
            {
                moved = true;
                member.heartbeat = heartbeat;
                member.live = live;
                member.probes = probes;
                member.leaving = row.leaving;
            }
        }
        if suspects_moved {
            moved |= self.count_suspects(me);
        }
        #[cfg(debug_assertions)]
        {
            self.check_fresh(
                chitchat,
                compact,
                "an incremental read differs from a fresh one",
            );
            if !moved {
                assert_eq!(self.members, self.last, "a read moved without saying so");
            }
            self.last = self.members.clone();
        }
        moved
    }

    /// Debug builds: what this observer holds is what a read from scratch finds (`why` says
    /// which shortcut failed otherwise).
    #[cfg(debug_assertions)]
    fn check_fresh(&self, chitchat: &Chitchat, compact: bool, why: &str) {
        let (fresh, mine) = read_fresh(chitchat, compact);
        assert_eq!((&self.members, self.mine), (&fresh, mine), "{why}");
    }

    /// Whether the rows hold exactly chitchat's identities, in order.
    fn same_ids(&self, states: &BTreeMap<ChitchatId, NodeState>) -> bool {
        same_ids(self.rows.iter().map(|r| &r.id), states)
    }

    /// One row per identity chitchat holds, keeping what was read of those already held, and
    /// one member per row but this agent's. The caller's walk then sets every member's fields.
    fn realign(&mut self, states: &BTreeMap<ChitchatId, NodeState>, me: &ChitchatId) {
        let old = std::mem::take(&mut self.rows);
        self.rows = realigned(
            old,
            states,
            |r| &r.id,
            |id| Row {
                id: id.clone(),
                versions: None,
                speaks_probes: false,
                leaving: false,
                suspects: Vec::new(),
                live: false,
                member: None,
            },
        );
        let members = &mut self.members;
        members.clear();
        for row in &mut self.rows {
            row.member = (row.id != *me).then(|| {
                members.push(Observed {
                    name: row.id.node_id.to_string(),
                    generation: row.id.generation_id,
                    addr: row.id.gossip_advertise_addr,
                    heartbeat: 0,
                    live: false,
                    probes: false,
                    leaving: false,
                    suspected_by: 0,
                });
                members.len() - 1
            });
        }
    }

    /// Counts again who suspects whom, from the live members' suspects; returns whether a
    /// member's count or this agent's moved.
    fn count_suspects(&mut self, me: &ChitchatId) -> bool {
        self.suspected.clear();
        for row in &self.rows {
            if !row.live || row.member.is_none() {
                continue;
            }
            for (name, generation) in &row.suspects {
                *self
                    .suspected
                    .entry(name.clone())
                    .or_default()
                    .entry(*generation)
                    .or_default() += 1;
            }
        }
        let count = |suspected: &BTreeMap<String, BTreeMap<u64, u32>>, name: &str, generation| {
            suspected
                .get(name)
                .and_then(|g| g.get(&generation))
                .copied()
                .unwrap_or(0)
        };
        let mine = count(&self.suspected, &me.node_id, me.generation_id);
        let mut moved = std::mem::replace(&mut self.mine, mine) != mine;
        for member in &mut self.members {
            let by = count(&self.suspected, &member.name, member.generation);
            moved |= std::mem::replace(&mut member.suspected_by, by) != by;
        }
        moved
    }
}

/// Whether `state`'s build record says it speaks probes (no record: a build before them).
fn speaks_probes(state: &NodeState) -> bool {
    live_value(state, BUILD_KEY)
        .is_some_and(|v| BuildRecord::decode(v).is_ok_and(|b| b.wire_max >= PROBE_WIRE))
}

/// Whom `state` gossips that it suspects (bounded: an oversized value reads as none).
fn suspects(state: &NodeState) -> Vec<(String, u64)> {
    let Some(text) = live_value(state, SUSPECTS_KEY) else {
        return Vec::new();
    };
    if text.len() > SUSPECTS_BYTES_MAX {
        return Vec::new();
    }
    let (mut list, _bad) = parse_suspects(text);
    list.truncate(SUSPECTS_MAX);
    list
}

/// `key`'s value in `state`, unless absent or deleted.
fn live_value<'a>(state: &'a NodeState, key: &str) -> Option<&'a str> {
    state
        .get_versioned(key)
        .filter(|v| !v.is_deleted())
        .map(|v| v.value.as_str())
}

/// The members and this agent's suspecters read from scratch (what [`Observer::read`] must
/// equal; debug builds check it on every read).
#[cfg(debug_assertions)]
fn read_fresh(chitchat: &Chitchat, compact: bool) -> (Vec<Observed>, u32) {
    let me = chitchat.self_chitchat_id();
    let mut suspected: BTreeMap<(String, u64), u32> = BTreeMap::new();
    for (id, state) in chitchat.node_states() {
        if id == me || !chitchat.is_live(id) {
            continue;
        }
        for key in suspects(state) {
            *suspected.entry(key).or_default() += 1;
        }
    }
    let members = chitchat
        .node_states()
        .iter()
        .filter(|(id, _)| *id != me)
        .map(|(id, state)| {
            let key = (id.node_id.to_string(), id.generation_id);
            Observed {
                suspected_by: suspected.get(&key).copied().unwrap_or(0),
                name: key.0,
                generation: key.1,
                addr: id.gossip_advertise_addr,
                heartbeat: u64::from(state.heartbeat()),
                live: chitchat.is_live(id),
                probes: compact || speaks_probes(state),
                leaving: state.get(LEAVING_KEY).is_some(),
            }
        })
        .collect();
    let mine = suspected
        .get(&(me.node_id.to_string(), me.generation_id))
        .copied()
        .unwrap_or(0);
    (members, mine)
}
