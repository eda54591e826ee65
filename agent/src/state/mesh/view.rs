//! The membership view: chitchat's node states turned into node records, the placement inputs
//! derived from them, and the workloads derived from the store.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use chitchat::{Chitchat, ChitchatId, NodeState};
use shoal_core::instance::ReplicaId;
use shoal_core::placement::model::{Node, Spread, Workload};
use shoal_core::spec::{self, WorkloadSpec};
use shoal_core::store::Entry;

use super::record::{NodeRecord, DIGEST_KEY, NODE_KEY};
use crate::identity::authority::caps::NodeCaps;
use crate::wire::api::NodeView;

/// Chitchat key an agent sets when it leaves gracefully: peers stop counting it at once.
pub const LEAVING_KEY: &str = "leaving";

/// Chitchat key an agent advances every second while a copy of an exclusive replica may be
/// alive on it (a counter; `node::host::heard`): gossip relays it through any member that hears the agent, so a
/// peer that cannot reach it, and holds it dead, still learns that it kept its replicas
/// (`Membership::leased_at`, rule 5 of the exclusive start rule).
pub const LEASE_KEY: &str = "exclusive-lease";

/// Chitchat key an agent sets as it stops for a planned restart (`--restart-grace`): the wall
/// time (ms) until which it means to be back. Peers of mesh version 8 and later keep it up in
/// placement and do not count it dead until then ([`Member::held_up`]), so nothing moves and no
/// exclusive replica of it is taken over while it restarts (docs/reconcile.md, "Planned
/// restarts").
pub const RESTARTING_KEY: &str = "restarting";
/// Longest planned restart a peer honours, whatever the key says (the guard's lease bounds the
/// agent's own).
pub const RESTART_HOLD_MS_MAX: u64 = 60_000;

/// Chitchat key an agent sets while its store is stale (out of sync longer than the tombstone
/// grace): it waits for a peer that is not stale to resynchronize from.
pub const STALE_KEY: &str = "stale";

/// Longest spec body accepted from the store, in bytes.
pub const SPEC_BYTES_MAX: usize = 256 * 1024;

/// One member as this agent sees it.
#[derive(Clone, Debug)]
pub struct Member {
    /// Node id.
    pub name: String,
    /// Chitchat identity (node id, generation, gossip address).
    pub id: ChitchatId,
    /// Live and not leaving: by the member probes' verdict where they judge it (its build speaks
    /// probes, whatever the mesh version), else by the heartbeat detector.
    pub alive: bool,
    /// Suspected by this agent's probes: silent and unanswering, not yet declared dead.
    pub suspect: bool,
    /// Its record, when it has published a valid one.
    pub record: Option<NodeRecord>,
    /// Its store digest summary (hex), when published.
    pub digest: Option<String>,
    /// Its store is stale and waits to resynchronize.
    pub stale: bool,
    /// It announced a graceful leave.
    pub leaving: bool,
    /// Its build facts, when it gossips them (builds before 8 do not: [`Member::build`]).
    pub build: Option<super::build::BuildRecord>,
    /// It stopped for a planned restart and means to be back by this wall time (ms).
    pub restarting_until: Option<u64>,
    /// What it can run, when it gossips it (builds before 9 do not).
    pub capabilities: Option<super::capabilities::CapabilitiesRecord>,
}

impl Member {
    /// Not live, but stopped for a planned restart whose end (bounded by
    /// [`RESTART_HOLD_MS_MAX`] from `now_ms`) has not come: kept up in placement and not counted
    /// dead. Only where the mesh version says every member knows the fact (`hold`).
    pub fn held_up(&self, now_ms: u64, hold: bool) -> bool {
        hold && !self.alive
            && self
                .restarting_until
                .is_some_and(|until| now_ms < until && until <= now_ms + RESTART_HOLD_MS_MAX)
    }

    /// Its build facts: what it gossips, or a build before 8's when it gossips none.
    pub fn build(&self) -> super::build::BuildRecord {
        self.build
            .clone()
            .unwrap_or_else(|| crate::state::mesh::build::legacy(self.record.as_ref()))
    }
}

/// Every known member, one per node id, sorted by node id. Where several identities claim one
/// name, the live one with the lowest generation wins (the incumbent: a second agent claiming a
/// name in use is ignored), and where none is live, the newest.
pub fn members(chitchat: &Chitchat, verdicts: &Verdicts) -> Vec<Member> {
    let live = live_ids(chitchat);
    let mut live_at = 0;
    let mut out: Vec<Member> = Vec::with_capacity(chitchat.node_states().len());
    for (id, state) in chitchat.node_states() {
        let facts = Facts::read(state);
        let (alive, suspect) = verdicts.judge(id, is_live(&live, &mut live_at, id));
        let alive = !facts.leaving && alive;
        let mut member = facts.into_member(id, alive);
        member.suspect = suspect && !member.leaving;
        push_member(&mut out, member);
    }
    out
}

/// The member probes' verdicts this agent holds (module `verdicts`), by identity: what the
/// membership reads in place of the heartbeat detector's for the identities they judge.
#[derive(Clone, Debug, Default)]
pub struct Verdicts {
    /// Searched per identity, never iterated where order could reach an output (the keyless
    /// Fx hash: a search costs one hash of the name, not a string compare per tree level).
    judged: rustc_hash::FxHashMap<String, BTreeMap<u64, shoal_core::verdict::Verdict>>,
    /// Which view this is: a new one per [`Verdicts::new`] (0: the empty default), so that a
    /// reader that looked every identity up in one need not again while it stands
    /// ([`MemberCache`]).
    stamp: u64,
}

impl PartialEq for Verdicts {
    fn eq(&self, other: &Self) -> bool {
        self.judged == other.judged
    }
}

impl Eq for Verdicts {}

impl Verdicts {
    /// The verdicts `judged`, by name and generation.
    pub fn new(
        judged: impl IntoIterator<Item = (String, u64, shoal_core::verdict::Verdict)>,
    ) -> Self {
        static STAMPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mut out: rustc_hash::FxHashMap<String, BTreeMap<u64, _>> = Default::default();
        for (name, generation, verdict) in judged {
            out.entry(name).or_default().insert(generation, verdict);
        }
        Verdicts {
            judged: out,
            stamp: STAMPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Which view this is: equal stamps, the same verdicts (0 for the empty default; every
    /// [`Verdicts::new`] takes a stamp of its own).
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// Whether `id` is alive and whether it is suspected, given the heartbeat detector's
    /// `heartbeat_live` for identities the probes do not judge.
    pub fn judge(&self, id: &ChitchatId, heartbeat_live: bool) -> (bool, bool) {
        judged_as(self.verdict(id), heartbeat_live)
    }

    /// The probes' verdict on `id` (`None`: they do not judge it).
    pub fn verdict(&self, id: &ChitchatId) -> Option<shoal_core::verdict::Verdict> {
        self.judged
            .get(&*id.node_id)
            .and_then(|g| g.get(&id.generation_id))
            .copied()
    }

    /// Whether some identity is dead by one and not by the other (a death or a revival, not
    /// only a suspicion coming or going).
    pub fn alive_differs(&self, other: &Verdicts) -> bool {
        use shoal_core::verdict::Verdict;
        let dead = |v: &Verdicts| -> std::collections::BTreeSet<(String, u64)> {
            v.judged
                .iter()
                .flat_map(|(n, g)| {
                    g.iter()
                        .filter(|(_, v)| **v == Verdict::Dead)
                        .map(move |(g, _)| (n.clone(), *g))
                })
                .collect()
        };
        dead(self) != dead(other)
    }

    /// How many identities the probes judge.
    pub fn len(&self) -> usize {
        self.judged.values().map(BTreeMap::len).sum()
    }

    /// Whether the probes judge none (the heartbeat detector decides everything).
    pub fn is_empty(&self) -> bool {
        self.judged.is_empty()
    }
}

/// Whether an identity is alive and whether it is suspected, from the probes' `verdict` on it and
/// the heartbeat detector's `heartbeat_live` (which decides where the probes do not judge).
pub fn judged_as(
    verdict: Option<shoal_core::verdict::Verdict>,
    heartbeat_live: bool,
) -> (bool, bool) {
    use shoal_core::verdict::Verdict;
    match verdict {
        Some(Verdict::Dead) => (false, false),
        Some(Verdict::Suspect) => (true, true),
        Some(Verdict::Alive) => (true, false),
        None => (heartbeat_live, false),
    }
}

/// [`members`] for a caller that reads the membership again and again (the host loop, every
/// round). A node's keys are read and its record decoded again only when its versions moved
/// (every set or delete of one of its keys raises its `max_version`; heartbeats do not), and the
/// list is rebuilt only when a member changed. Holds one entry per node state chitchat holds: an
/// entry goes when chitchat forgets its node.
#[derive(Default)]
pub struct MemberCache {
    /// Grow with every refresh in which keys, or members, moved: a reader that shares the cache
    /// with others (whose refreshes it does not see) compares them with its [`CacheSeen`].
    keys_gen: u64,
    members_gen: u64,
    /// One entry per node state, in chitchat's order (by id).
    nodes: Vec<CachedNode>,
    /// What [`members`] would return for the last refresh, shared with every reader until the
    /// members change (readers clone the `Arc`, not the records).
    members: Arc<[Member]>,
    /// The stamp of the verdicts every node's `verdict` was looked up in.
    verdicts_stamp: Option<u64>,
    /// What the last refresh read: chitchat's state stamp (it moves with every other node's
    /// state and liveness) and this node's own versions (its own writes do not move the stamp).
    /// While both stand, and the verdicts' stamp, a refresh finds nothing moved without a walk.
    read_at: Option<(u64, (u64, u64))>,
}

/// What one reader of a shared [`MemberCache`] saw at its last refresh.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheSeen {
    keys_gen: u64,
    members_gen: u64,
    /// It refreshed at all (before, everything moved).
    read: bool,
}

/// Whether `ids` are exactly chitchat's identities `states`, in order: whether a cache of one
/// entry per node state still matches it.
pub(crate) fn same_ids<'a>(
    ids: impl ExactSizeIterator<Item = &'a ChitchatId>,
    states: &BTreeMap<ChitchatId, NodeState>,
) -> bool {
    ids.len() == states.len() && ids.zip(states.keys()).all(|(a, b)| a == b)
}

/// The entries of a cache of one per node state (`old`, in chitchat's order) for `states`: those
/// of identities chitchat still holds kept, one made by `new` for each new identity, the others
/// dropped.
pub(crate) fn realigned<T>(
    old: Vec<T>,
    states: &BTreeMap<ChitchatId, NodeState>,
    id: impl Fn(&T) -> &ChitchatId,
    mut new: impl FnMut(&ChitchatId) -> T,
) -> Vec<T> {
    let mut old = old.into_iter().peekable();
    let mut out = Vec::with_capacity(states.len());
    for key in states.keys() {
        while old.next_if(|o| id(o) < key).is_some() {}
        out.push(old.next_if(|o| id(o) == key).unwrap_or_else(|| new(key)));
    }
    out
}

/// An identity as the name-claim rule reads it.
pub fn claim_identity(id: &ChitchatId) -> shoal_core::claims::Identity {
    shoal_core::claims::Identity {
        name: id.node_id.to_string(),
        generation: id.generation_id,
        gossip_addr: id.gossip_advertise_addr.to_string(),
    }
}

/// One identity as [`MemberCache::judged`] gives it.
#[derive(Clone, Copy, Debug)]
pub struct Judged<'a> {
    /// Who.
    pub id: &'a ChitchatId,
    /// Who, as the name-claim rule reads it.
    pub claim: &'a shoal_core::claims::Identity,
    /// Held alive by the probes (or the heartbeat detector where they do not judge).
    pub alive: bool,
    /// Suspected by the probes.
    pub suspect: bool,
    /// It announced a leave or a planned restart.
    pub stopping: bool,
}

/// What a [`MemberCache::refresh`] found moved since the previous one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Some node state's versions moved, or the set of node states: any key of any node may have
    /// changed (the members' own keys, or others such as observed instances).
    pub keys: bool,
    /// The members changed: one's liveness, record, digest or flags, or who speaks for a name.
    pub members: bool,
}

struct CachedNode {
    id: ChitchatId,
    /// `(max_version, last_gc_version)` of the node state the facts were read at.
    versions: (u64, u64),
    alive: bool,
    suspect: bool,
    /// As the probes and the heartbeat detector judge it, before a leave is counted.
    judged: (bool, bool),
    /// The probes' verdict on it, as of the verdicts `MemberCache::verdicts_stamp` names.
    verdict: Option<shoal_core::verdict::Verdict>,
    /// It as the name-claim rule reads it.
    claim: shoal_core::claims::Identity,
    facts: Facts,
}

impl MemberCache {
    /// Reads chitchat's view, with the probes' `verdicts`, and says what moved since the last
    /// refresh.
    pub fn refresh(&mut self, chitchat: &Chitchat, verdicts: &Verdicts) -> Moved {
        let own = chitchat
            .node_state(chitchat.self_chitchat_id())
            .map_or((0, 0), |s| (s.max_version(), s.last_gc_version()));
        let read_at = (chitchat.state_stamp(), own);
        if self.read_at == Some(read_at) && self.verdicts_stamp == Some(verdicts.stamp) {
            debug_assert!(
                self.unmoved(chitchat, verdicts),
                "a member moved under an unmoved state stamp"
            );
            return Moved::default();
        }
        self.read_at = Some(read_at);
        let states = chitchat.node_states();
        let mut moved = Moved::default();
        if !self.same_ids(states) {
            moved = Moved {
                keys: true,
                members: true,
            };
            self.realign(states);
            self.verdicts_stamp = None;
        }
        // The probes' verdicts are looked up again only in a new view of them (a stamp of 0,
        // the empty default, is the same view whoever built it).
        if self.verdicts_stamp != Some(verdicts.stamp) {
            self.verdicts_stamp = Some(verdicts.stamp);
            for node in &mut self.nodes {
                node.verdict = verdicts.verdict(&node.id);
            }
        }
        for (node, (id, state)) in self.nodes.iter_mut().zip(states) {
            let versions = (state.max_version(), state.last_gc_version());
            if node.versions != versions {
                moved.keys = true;
                node.versions = versions;
                let facts = Facts::read(state);
                moved.members |= facts != node.facts;
                node.facts = facts;
            }
            debug_assert_eq!(node.verdict, verdicts.verdict(id), "a stale verdict");
            let (alive, suspect) = judged_as(node.verdict, chitchat.is_live(id));
            node.judged = (alive, suspect);
            let alive = !node.facts.leaving && alive;
            let suspect = suspect && !node.facts.leaving;
            moved.members |= alive != node.alive || suspect != node.suspect;
            node.alive = alive;
            node.suspect = suspect;
        }
        self.keys_gen += u64::from(moved.keys);
        self.members_gen += u64::from(moved.members);
        if moved.members {
            let mut members = Vec::with_capacity(self.nodes.len());
            for node in &self.nodes {
                let mut member = node.facts.clone().into_member(&node.id, node.alive);
                member.suspect = node.suspect;
                push_member(&mut members, member);
            }
            self.members = members.into();
        }
        moved
    }

    /// Whether a full refresh would find nothing moved (debug builds check the stamps' shortcut
    /// with it).
    fn unmoved(&self, chitchat: &Chitchat, verdicts: &Verdicts) -> bool {
        let states = chitchat.node_states();
        self.same_ids(states)
            && self.nodes.iter().zip(states).all(|(node, (id, state))| {
                let judged = judged_as(verdicts.verdict(id), chitchat.is_live(id));
                node.versions == (state.max_version(), state.last_gc_version())
                    && node.verdict == verdicts.verdict(id)
                    && node.judged == judged
                    && node.alive == (!node.facts.leaving && judged.0)
                    && node.suspect == (judged.1 && !node.facts.leaving)
            })
    }

    /// [`MemberCache::refresh`] for one of several readers: what moved since this reader's
    /// last refresh (`seen`), whoever refreshed in between.
    pub fn refresh_for(
        &mut self,
        chitchat: &Chitchat,
        verdicts: &Verdicts,
        seen: &mut CacheSeen,
    ) -> Moved {
        self.refresh(chitchat, verdicts);
        let now = CacheSeen {
            keys_gen: self.keys_gen,
            members_gen: self.members_gen,
            read: true,
        };
        let moved = Moved {
            keys: !seen.read || seen.keys_gen != now.keys_gen,
            members: !seen.read || seen.members_gen != now.members_gen,
        };
        *seen = now;
        moved
    }

    /// Whether the cache holds exactly chitchat's identities, in order.
    fn same_ids(&self, states: &BTreeMap<ChitchatId, NodeState>) -> bool {
        same_ids(self.nodes.iter().map(|n| &n.id), states)
    }

    /// Keeps the entries of identities chitchat still holds, adds the new ones (unread: their
    /// versions match nothing), drops the others.
    fn realign(&mut self, states: &BTreeMap<ChitchatId, NodeState>) {
        let old = std::mem::take(&mut self.nodes);
        self.nodes = realigned(
            old,
            states,
            |n| &n.id,
            |id| CachedNode {
                id: id.clone(),
                versions: (u64::MAX, u64::MAX),
                alive: false,
                suspect: false,
                judged: (false, false),
                verdict: None,
                claim: claim_identity(id),
                facts: Facts::default(),
            },
        );
    }

    /// The members as of the last refresh, as [`members`] returns them.
    pub fn members(&self) -> &Arc<[Member]> {
        &self.members
    }

    /// Every identity chitchat held at the last refresh, in its order, with whether the probes
    /// (or the heartbeat detector, where they do not judge) hold it alive and suspected, before
    /// a leave is counted, and whether it announced a leave or a planned restart.
    pub fn judged(&self) -> impl Iterator<Item = Judged<'_>> {
        self.nodes.iter().map(|n| Judged {
            id: &n.id,
            claim: &n.claim,
            alive: n.judged.0,
            suspect: n.judged.1,
            stopping: n.facts.leaving || n.facts.restarting,
        })
    }

    /// How many identities (node states) chitchat held at the last refresh.
    pub fn identities(&self) -> usize {
        self.nodes.len()
    }
}

/// What a node's keys say.
#[derive(Clone, Debug, Default, PartialEq)]
struct Facts {
    record: Option<NodeRecord>,
    digest: Option<String>,
    stale: bool,
    leaving: bool,
    build: Option<super::build::BuildRecord>,
    restarting_until: Option<u64>,
    /// It gossips the restarting key at all (readable or not).
    restarting: bool,
    capabilities: Option<super::capabilities::CapabilitiesRecord>,
}

impl Facts {
    /// One pass over the node's keys (not one search per key: the keys are strings on the heap).
    fn read(state: &NodeState) -> Facts {
        let mut facts = Facts {
            record: None,
            digest: None,
            stale: false,
            leaving: false,
            build: None,
            restarting_until: None,
            restarting: false,
            capabilities: None,
        };
        for (key, value) in state.key_values() {
            match key {
                NODE_KEY => facts.record = NodeRecord::decode_cached(value).ok(),
                DIGEST_KEY => facts.digest = Some(value.to_string()),
                STALE_KEY => facts.stale = true,
                LEAVING_KEY => facts.leaving = true,
                super::build::BUILD_KEY => {
                    facts.build = super::build::BuildRecord::decode(value).ok();
                }
                RESTARTING_KEY => {
                    facts.restarting = true;
                    facts.restarting_until = value.parse().ok();
                }
                super::capabilities::CAPABILITIES_KEY => {
                    facts.capabilities =
                        super::capabilities::CapabilitiesRecord::decode(value).ok();
                }
                _ => {}
            }
        }
        facts
    }

    fn into_member(self, id: &ChitchatId, alive: bool) -> Member {
        Member {
            name: id.node_id.to_string(),
            id: id.clone(),
            alive,
            suspect: false,
            record: self.record,
            digest: self.digest,
            stale: self.stale,
            leaving: self.leaving,
            build: self.build,
            restarting_until: self.restarting_until,
            capabilities: self.capabilities,
        }
    }
}

/// The identities live by the failure detector (this node included), sorted like chitchat's node
/// states, so that [`is_live`] walks both in step.
fn live_ids(chitchat: &Chitchat) -> Vec<&ChitchatId> {
    let mut live: Vec<&ChitchatId> = chitchat.live_nodes().collect();
    live.sort_unstable();
    live
}

/// Whether `id` is in `live`; `id`s must come in ascending order, `at` carries the position.
fn is_live(live: &[&ChitchatId], at: &mut usize, id: &ChitchatId) -> bool {
    while live.get(*at).is_some_and(|l| *l < id) {
        *at += 1;
    }
    live.get(*at).is_some_and(|l| *l == id)
}

/// Appends `member`, or lets it replace the previous one of the same name: identities come sorted
/// by id, so the identities of one name are adjacent.
fn push_member(out: &mut Vec<Member>, member: Member) {
    let Some(seen) = out.last_mut().filter(|seen| seen.name == member.name) else {
        out.push(member);
        return;
    };
    let replaces = match (seen.alive, member.alive) {
        (true, true) => member.id.generation_id < seen.id.generation_id,
        (false, true) => true,
        (true, false) => false,
        (false, false) => member.id.generation_id > seen.id.generation_id,
    };
    if replaces {
        // A planned restart is announced by the identity that stopped; the next identity of the
        // name, not yet live, is that restart in progress: it keeps the announcement. A new
        // identity whose record has not arrived yet keeps the previous one's, so the node does
        // not drop out of placement (and its replicas move) for the gossip round in between.
        let restarting_until = seen.restarting_until;
        let previous = std::mem::replace(seen, member);
        if !seen.alive && seen.restarting_until.is_none() {
            seen.restarting_until = restarting_until;
        }
        if seen.record.is_none() {
            seen.record = previous.record;
        }
        if seen.capabilities.is_none() {
            seen.capabilities = previous.capabilities;
        }
    }
}

/// Another live identity using `me`'s name from a different address: a second agent with this
/// name is already in the mesh.
pub fn name_taken_by(chitchat: &Chitchat, me: &ChitchatId) -> Option<SocketAddr> {
    chitchat
        .live_nodes()
        .find(|id| {
            id.node_id == me.node_id
                && id.gossip_advertise_addr != me.gossip_advertise_addr
                && id.generation_id != me.generation_id
        })
        .map(|id| id.gossip_advertise_addr)
}

/// The placement inputs: every known member with a record, sorted by id; those not alive (failed,
/// or leaving) are `down`, which keeps their place in the rankings until chitchat forgets them
/// (`dead_node_grace_period`), so that a failure moves their replicas and little else, unless
/// [`Member::held_up`] at `now_ms` (a planned restart, where `hold`). Each node's capacity is the
/// smaller of what it declares and the mesh's `caps`. Under placement algorithm 7 and later
/// (`algorithm`, the mesh version's), each node carries the capabilities it gossips.
pub fn placement_nodes(
    members: &[Member],
    caps: &NodeCaps,
    now_ms: u64,
    (hold, algorithm): (bool, u32),
) -> Vec<Node> {
    members
        .iter()
        .filter_map(|m| {
            m.record.as_ref().map(|r| {
                let mut node = r.placement_node(&m.name);
                node.down = !m.alive && !m.held_up(now_ms, hold);
                caps.clamp(&mut node);
                if algorithm >= 7 {
                    node.caps = m.capabilities.as_ref().map(|c| c.placement());
                }
                // Since algorithm 8 constraints match the node's OS and architecture as the
                // built-in keys `os` and `arch` (its `--label`s cannot set them).
                if let Some(c) = m.capabilities.as_ref().filter(|_| algorithm >= 8) {
                    node.labels.insert("os".into(), c.os.clone());
                    node.labels.insert("arch".into(), c.arch.clone());
                }
                node
            })
        })
        .collect()
}

/// The API addresses of live peers (not `me`), sorted by node id.
pub fn live_peer_apis(members: &[Member], me: &str) -> Vec<(String, SocketAddr)> {
    members
        .iter()
        .filter(|m| m.alive && m.name != me)
        .filter_map(|m| m.record.as_ref().map(|r| (m.name.clone(), r.api_addr)))
        .collect()
}

/// One member as the `nodes` answer lists it.
pub fn node_view(m: &Member) -> NodeView {
    NodeView {
        name: m.name.clone(),
        alive: m.alive,
        zone: m
            .record
            .as_ref()
            .map(|r| r.zone.clone())
            .unwrap_or_default(),
        cpu_millis: m.record.as_ref().map_or(0, |r| r.cpu_millis),
        memory_bytes: m.record.as_ref().map_or(0, |r| r.memory_bytes),
        draining: m.record.as_ref().is_some_and(|r| r.draining),
        gossip_addr: m.id.gossip_advertise_addr.to_string(),
        api_addr: m.record.as_ref().map(|r| r.api_addr.to_string()),
        agent_version: m.record.as_ref().map(|r| r.agent_version.clone()),
        build: Some(m.build()),
        runtimes: m.capabilities.as_ref().map(|c| c.runtimes_text()),
        suspect: Some(m.suspect),
    }
}

/// First byte of a spec body written in a tagged layout (the next byte is its wire version). A
/// body of layout 7, the untagged form every build before 8 wrote, starts with the varint length
/// of the name, which is never 255.
pub const SPEC_LAYOUT_TAG: u8 = 0xff;

/// Encodes a spec as a store body, in the oldest layout that can hold it: untagged layout 7 (what
/// builds before 8 read) unless it sets a field added since, then tagged with the oldest later
/// layout that has every field it sets (so a build of the version before reads a spec that uses
/// nothing newer). The mesh version keeps a spec from being written while a member could not
/// read its layout.
pub fn encode_spec(spec: &WorkloadSpec) -> Vec<u8> {
    let config = crate::wire::bincode_config();
    let oldest = shoal_core::version::with_layout(crate::wire::WIRE_MIN, || {
        bincode::serde::encode_to_vec(spec, config)
    });
    if let Ok(bytes) = oldest {
        return bytes;
    }
    for layout in crate::wire::WIRE_MIN + 1..=crate::wire::WIRE_CUR {
        let mut bytes = vec![SPEC_LAYOUT_TAG, layout as u8];
        let encoded = shoal_core::version::with_layout(layout, || {
            bincode::serde::encode_into_std_write(spec, &mut bytes, config)
        });
        if encoded.is_ok() {
            return bytes;
        }
    }
    unreachable!("a workload spec always encodes in the newest layout")
}

/// Decodes a store body into a spec, with a size limit and a re-validation: a body written by a
/// buggy or hostile peer is an error, never a panic or a half-read spec. A body in a layout this
/// build does not read (a newer build's) is an error that says so.
pub fn decode_spec(bytes: &[u8]) -> Result<WorkloadSpec, String> {
    if bytes.len() > SPEC_BYTES_MAX {
        return Err(format!(
            "spec body of {} bytes is over the limit",
            bytes.len()
        ));
    }
    let (layout, body) = match bytes {
        [SPEC_LAYOUT_TAG, layout, body @ ..] => (u16::from(*layout), body),
        [SPEC_LAYOUT_TAG] => return Err("spec body ends after its layout tag".into()),
        body => (crate::wire::WIRE_MIN, body),
    };
    if !shoal_core::version::speaks(layout) {
        return Err(format!(
            "spec stored in layout {layout}, which this build does not read (it reads {} to {}): \
             written by a newer build",
            crate::wire::WIRE_MIN,
            crate::wire::WIRE_CUR
        ));
    }
    let spec: WorkloadSpec =
        crate::wire::decode_body_at::<WorkloadSpec, SPEC_BYTES_MAX>(layout, body)
            .map_err(|e| e.to_string())?;
    spec.validate_stored().map_err(|e| e.to_string())?;
    Ok(spec)
}

/// The live specs in a store, by name; undecodable bodies are skipped and returned as errors.
pub fn live_specs<'a>(
    entries: impl Iterator<Item = &'a Entry>,
) -> (Vec<(WorkloadSpec, String)>, Vec<String>) {
    let mut specs = Vec::new();
    let mut errors = Vec::new();
    for entry in entries {
        let Some(body) = entry.body.live() else {
            continue;
        };
        match decode_spec(body) {
            Ok(spec) => specs.push((spec, entry.version.to_string())),
            Err(e) => errors.push(format!("{}: {e}", entry.name)),
        }
    }
    (specs, errors)
}

/// The placement engine's view of a spec, with the nodes that hold its replicas' data (for a
/// spec whose replicas keep data of their own; `mesh/data.rs`): placement prefers them. Under
/// placement algorithm 7 and later (`algorithm`, the mesh version's), with what its replicas
/// need of a node.
pub fn placement_workload_held(
    spec: &WorkloadSpec,
    holders: &BTreeMap<ReplicaId, String>,
    algorithm: u32,
) -> Workload {
    let mut w = placement_workload(spec);
    if algorithm >= 7 {
        w.needs = shoal_core::placement::Needs::of_spec(spec);
        w.yields_when_short = true;
    }
    w.yields_unplaced = algorithm >= 9;
    w.cell_level_needs = algorithm >= 9;
    w.ports_exclusive = algorithm >= 8 && !w.needs.fixed_ports.is_empty();
    if spec.keeps_replica_data() {
        let first = ReplicaId::new(&spec.name, 0);
        w.sticky = holders
            .range(first..)
            .take_while(|(r, _)| r.workload == spec.name)
            .filter(|(r, _)| r.replica < spec.replicas)
            .map(|(r, node)| (r.replica, node.clone()))
            .collect();
    }
    w
}

/// The placement engine's view of a spec.
pub fn placement_workload(spec: &WorkloadSpec) -> Workload {
    Workload {
        id: spec.name.clone(),
        replicas: spec.replicas,
        // A spec's own `resources` never counts ports; its named ports without a number do.
        request: spec
            .resources
            .with_ports(spec.ports_to_allocate().len() as u64),
        spread: match spec.placement.spread {
            spec::Spread::Node => Spread::Node,
            spec::Spread::Zone => Spread::Zone,
        },
        constraints: spec.placement.constraints.clone(),
        exclusive: spec.placement.exclusive,
        priority: spec.placement.priority,
        sticky: BTreeMap::new(),
        needs: Default::default(),
        yields_when_short: false,
        yields_unplaced: false,
        cell_level_needs: false,
        ports_exclusive: false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use chitchat::{DeletionStatus, VersionedValue};

    use super::*;

    #[test]
    fn a_restarting_member_is_held_up_until_its_end_and_only_where_the_mesh_knows_the_fact() {
        let member = |alive: bool, until: Option<u64>| Member {
            name: "n1".into(),
            id: id("n1", 1),
            alive,
            suspect: false,
            record: None,
            digest: None,
            stale: false,
            leaving: false,
            build: None,
            restarting_until: until,
            capabilities: None,
        };
        let restarting = member(false, Some(10_000));
        assert!(restarting.held_up(9_999, true));
        assert!(!restarting.held_up(10_000, true), "its grace ended");
        assert!(!restarting.held_up(9_999, false), "a mesh before version 8");
        assert!(
            !member(false, None).held_up(0, true),
            "a crash is not a restart"
        );
        assert!(
            !member(true, Some(10_000)).held_up(0, true),
            "alive needs no hold"
        );
        let too_long = member(false, Some(RESTART_HOLD_MS_MAX + 1));
        assert!(
            !too_long.held_up(0, true),
            "a hold past the bound is not honoured"
        );
    }

    /// Since placement algorithm 8 constraints can match `os` and `arch`: the node carries its
    /// gossiped OS and architecture as those labels; before 8 it carries its labels only.
    #[test]
    fn os_and_arch_are_labels_since_algorithm_8() {
        let caps = super::super::capabilities::CapabilitiesRecord::this(Vec::new(), Vec::new());
        let member = Member {
            name: "n1".into(),
            id: id("n1", 1),
            alive: true,
            suspect: false,
            record: Some(NodeRecord::decode(&record(1000)).unwrap()),
            digest: None,
            stale: false,
            leaving: false,
            build: None,
            restarting_until: None,
            capabilities: Some(caps),
        };
        let members = [member];
        let caps = crate::identity::authority::caps::NodeCaps::default();
        let eight = placement_nodes(&members, &caps, 0, (false, 8));
        assert_eq!(
            eight[0].labels.get("os").map(String::as_str),
            Some(std::env::consts::OS)
        );
        assert_eq!(
            eight[0].labels.get("arch").map(String::as_str),
            Some(std::env::consts::ARCH)
        );
        let c = shoal_core::constraint::Constraint::parse(&format!(
            "arch == {}",
            std::env::consts::ARCH
        ))
        .unwrap();
        assert!(c.matches(&eight[0].labels, &eight[0].zone, &eight[0].id));
        let seven = placement_nodes(&members, &caps, 0, (false, 7));
        assert!(!seven[0].labels.contains_key("os"));
    }

    #[test]
    fn a_new_identity_keeps_the_previous_ones_record_until_its_own_arrives() {
        let member = |generation: u64, alive: bool, cpu: Option<u64>| Member {
            name: "n1".into(),
            id: id("n1", generation),
            alive,
            suspect: false,
            record: cpu.map(|c| NodeRecord::decode(&record(c)).unwrap()),
            digest: None,
            stale: false,
            leaving: false,
            build: None,
            restarting_until: (!alive).then_some(10_000),
            capabilities: None,
        };
        let mut out = Vec::new();
        push_member(&mut out, member(1, false, Some(1000)));
        push_member(&mut out, member(2, true, None));
        assert_eq!(out.len(), 1);
        assert!(out[0].alive && out[0].id.generation_id == 2);
        assert_eq!(out[0].record.as_ref().map(|r| r.cpu_millis), Some(1000));
        // Its own record, once it has one, is the one kept.
        let mut out = Vec::new();
        push_member(&mut out, member(1, false, Some(1000)));
        push_member(&mut out, member(2, true, Some(3000)));
        assert_eq!(out[0].record.as_ref().map(|r| r.cpu_millis), Some(3000));
        // A later identity not yet live keeps the restart's announcement and the record.
        let mut out = Vec::new();
        push_member(&mut out, member(1, false, Some(1000)));
        let mut next = member(2, false, None);
        next.restarting_until = None;
        push_member(&mut out, next);
        assert_eq!(out[0].restarting_until, Some(10_000));
        assert_eq!(out[0].record.as_ref().map(|r| r.cpu_millis), Some(1000));
    }

    fn id(name: &str, generation: u64) -> ChitchatId {
        let addr = format!("10.0.0.{}:7000", name[1..].parse::<u8>().unwrap());
        ChitchatId::new(name.to_string(), generation, addr.parse().unwrap())
    }

    fn record(cpu_millis: u64) -> String {
        NodeRecord {
            cpu_millis,
            memory_bytes: 1 << 30,
            labels: Default::default(),
            zone: "z".into(),
            draining: false,
            agent_version: "test".into(),
            placement_version: 1,
            api_addr: "10.0.0.1:7001".parse().unwrap(),
            limits_note: None,
            ports: crate::state::mesh::record::default_ports(),
        }
        .encode()
    }

    /// Sets `node`'s keys to `kvs` as of `version` (what a delta from its owner would do).
    fn publish(chitchat: &mut Chitchat, node: &ChitchatId, kvs: &[(&str, String)], version: u64) {
        let values = kvs.iter().map(|(k, v)| {
            let value = VersionedValue {
                value: v.clone(),
                version,
                status: DeletionStatus::Set,
            };
            (k.to_string(), value)
        });
        chitchat.reset_node_state_if_update(node, values, version, 0);
    }

    fn same(cache: &MemberCache, chitchat: &Chitchat) -> bool {
        format!("{:?}", cache.members()) == format!("{:?}", members(chitchat, &Verdicts::default()))
    }

    #[test]
    fn the_cache_reads_what_members_reads_and_moves_only_with_chitchat() {
        let me = id("n1", 1);
        let config =
            crate::transport::gossip::chitchat_config("n1", 1, me.gossip_advertise_addr, &[], "t");
        let (_seeds_tx, seeds) = tokio::sync::watch::channel(HashSet::new());
        let mut chitchat = Chitchat::with_chitchat_id_and_seeds(config, seeds, Vec::new());
        chitchat.self_node_state().set(NODE_KEY, record(1000));
        publish(&mut chitchat, &id("n2", 1), &[(NODE_KEY, record(2000))], 3);
        publish(&mut chitchat, &id("n3", 1), &[(NODE_KEY, record(3000))], 2);
        publish(&mut chitchat, &id("n3", 2), &[(NODE_KEY, record(3001))], 2);
        publish(&mut chitchat, &id("n4", 1), &[(STALE_KEY, "1".into())], 1);
        let mut cache = MemberCache::default();
        let both = Moved {
            keys: true,
            members: true,
        };

        assert_eq!(cache.refresh(&chitchat, &Verdicts::default()), both);
        assert!(same(&cache, &chitchat));
        let names: Vec<&str> = cache.members().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["n1", "n2", "n3", "n4"]);
        assert_eq!(cache.identities(), 5);
        let n3 = &cache.members()[2];
        assert_eq!(
            n3.id.generation_id, 2,
            "neither n3 is live: the newest speaks"
        );
        assert_eq!(n3.record.as_ref().map(|r| r.cpu_millis), Some(3001));
        assert!(cache.members()[0].alive && !cache.members()[1].alive);
        assert!(cache.members()[3].stale && cache.members()[3].record.is_none());
        assert_eq!(
            cache.refresh(&chitchat, &Verdicts::default()),
            Moved::default(),
            "nothing moved"
        );

        publish(&mut chitchat, &id("n2", 1), &[(NODE_KEY, record(2500))], 4);
        assert_eq!(cache.refresh(&chitchat, &Verdicts::default()), both);
        assert!(same(&cache, &chitchat));
        assert_eq!(cache.members()[1].record.as_ref().unwrap().cpu_millis, 2500);

        chitchat.self_node_state().set(LEAVING_KEY, "1");
        assert_eq!(cache.refresh(&chitchat, &Verdicts::default()), both);
        assert!(same(&cache, &chitchat));
        assert!(!cache.members()[0].alive && cache.members()[0].leaving);

        chitchat.self_node_state().set(DIGEST_KEY, "00ff");
        assert_eq!(cache.refresh(&chitchat, &Verdicts::default()), both);
        assert_eq!(cache.members()[0].digest.as_deref(), Some("00ff"));

        chitchat.self_node_state().set("instances", "[]");
        let keys_only = Moved {
            keys: true,
            members: false,
        };
        assert_eq!(
            cache.refresh(&chitchat, &Verdicts::default()),
            keys_only,
            "another key moved"
        );
        assert_eq!(
            cache.refresh(&chitchat, &Verdicts::default()),
            Moved::default()
        );
        assert!(same(&cache, &chitchat));
    }
}
