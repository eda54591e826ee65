//! `MemberProbes`, a task over the node: member verdicts on direct evidence (issue 28), the
//! shell of `shoal_core::verdict`.
//!
//! Every [`TICK`] it reads every identity chitchat holds (heartbeat, liveness by the heartbeat
//! detector, whether its build speaks probes, whether it is leaving, how many live members gossip
//! that they suspect it), feeds the [`Prober`], and sends what it returns; between ticks it
//! answers probe messages as they arrive. It publishes what this agent suspects under the chitchat
//! key [`SUSPECTS_KEY`] (the others' confirmations), the verdicts into the node's membership
//! ([`MeshNode::verdicts`]), and the verdict changes as events; a member declared dead or revived
//! wakes the host loop.
//!
//! It judges from the agent's start, whatever the mesh version, the members whose build speaks
//! probes ([`PROBE_WIRE`](crate::transport::gossip::probe::PROBE_WIRE) and later, as their
//! gossiped build facts say); the others keep the heartbeat detector's verdict. Probes need no
//! agreement: a probe goes only to a member that answers them, and indirect probes only through
//! such members (`Prober::pick_others`), so a fresh mesh, or a fresh agent whose store has not
//! yet given it the mesh version, is judged on direct evidence from its first seconds, not on
//! heartbeat gaps with few samples.
//!
//! Stalls: the task measures how late each tick comes (a starved or frozen agent wakes late) and
//! tells the prober, which does not count that time as anyone's silence.
//!
//! Compact gossip (mesh version [`COMPACT_WIRE`](crate::transport::gossip::probe::COMPACT_WIRE) and later, issue 28 item 2): chitchat's Syn
//! carries bucket hashes instead of every member's heartbeat, so heartbeats no longer reach every
//! member every round and cannot be the liveness signal. The task then turns chitchat's compact
//! mode and external liveness on, sets the prober watching (each agent probes its ring
//! successors), and hands chitchat the prober's dead set as its liveness.

mod observe;

use std::sync::Arc;
use std::time::Duration;

use shoal_core::verdict::{format_suspects, ProbeConfig, ProbeMsg, Prober};
use tokio::time::Instant;

use super::node::MeshNode;
use super::view::Verdicts;
use crate::transport::gossip::probe::{
    compact_at, decode_probe, encode_probe, ProbeChannel, ProbeIn,
};

/// Chitchat key: the members this agent suspects (or declared dead lately), `name/generation`
/// comma-separated, at most [`SUSPECTS_MAX`].
pub const SUSPECTS_KEY: &str = "suspects";
/// Most suspects gossiped.
pub const SUSPECTS_MAX: usize = 32;
/// Longest suspects value read from a peer.
const SUSPECTS_BYTES_MAX: usize = 32 * 300;
/// How often the prober runs its timers.
pub const TICK: Duration = Duration::from_millis(50);
/// Probe messages handled between two ticks at most (the rest wait in the bounded inbox).
const MESSAGES_PER_WAKE_MAX: usize = 256;

/// Runs the member probes of `node` on `channel` until the node's gossip stops.
pub async fn run(node: Arc<MeshNode>, mut channel: ProbeChannel, config: ProbeConfig) {
    let me = node.gossip().chitchat_id().clone();
    let seed = me.generation_id ^ xxhash_rust::xxh3::xxh3_64(me.node_id.as_bytes());
    let mut prober = Prober::new(config, &me.node_id, me.generation_id, seed);
    prober.set_addr(me.gossip_advertise_addr);
    let start = Instant::now();
    let mut planned = Instant::now() + TICK;
    let mut next_tick = planned;
    let mut published = String::new();
    let mut observer = observe::Observer::default();
    let mut shown = false;
    let mut compact = false;
    let mut reported_dead: std::collections::BTreeSet<(String, u64)> = Default::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(planned) => {}
            msg = channel.inbox.recv() => {
                let Some(first) = msg else { return };
                let now_ms = start.elapsed().as_millis() as u64;
                let mut batch = vec![first];
                while batch.len() < MESSAGES_PER_WAKE_MAX {
                    match channel.inbox.try_recv() {
                        Ok(m) => batch.push(m),
                        Err(_) => break,
                    }
                }
                // Answered whatever the mesh version: a probe that arrives came from a member
                // that speaks them.
                for m in batch {
                    receive(&node, &mut prober, &channel, now_ms, m);
                }
                continue;
            }
        }
        let woke = Instant::now();
        let stall = woke.saturating_duration_since(planned).as_millis() as u64;
        if woke >= next_tick {
            next_tick = woke + TICK;
        }
        let now_ms = start.elapsed().as_millis() as u64;
        let wants_compact = compact_at(node.wire.load(std::sync::atomic::Ordering::Relaxed));
        if wants_compact != compact {
            compact = wants_compact;
            prober.set_watching(compact);
            let chitchat = node.gossip().chitchat();
            let mut guard = chitchat.lock().await;
            guard.set_compact(compact);
            guard.set_external_liveness(compact);
            reported_dead.clear();
            tracing::info!(compact, "gossip mode changed with the mesh version");
        }
        let moved = read(&node, &mut observer, compact).await;
        let members = moved.then(|| observer.members());
        for (to, msg) in prober.tick_with(now_ms, stall, observer.suspected_me(), members) {
            send(&node, &channel, to, &msg);
        }
        if compact {
            report_liveness(&node, &prober, &mut reported_dead).await;
        }
        let suspects = format_suspects(&prober.suspects(now_ms), SUSPECTS_MAX);
        if suspects != published {
            let chitchat = node.gossip().chitchat();
            let mut guard = chitchat.lock().await;
            guard.self_node_state().set(SUSPECTS_KEY, suspects.clone());
            published = suspects;
        }
        let events = prober.drain_events();
        node.record_probes(prober.counters(), prober.health(), &events);
        // The view is rebuilt when a verdict moved, or when the heartbeat detector's empty one
        // stands in for it.
        let moved = prober.verdicts_moved();
        let judged = moved.or_else(|| (!shown).then(|| prober.verdicts()));
        shown = true;
        if let Some(judged) = judged {
            if node.set_verdicts(Verdicts::new(judged)) {
                node.membership_moved.notify_one();
            }
        }
        // Wake at the next regular tick, or earlier when a probe's timer falls due.
        planned = match prober.next_due() {
            Some(due) => next_tick.min(start + Duration::from_millis(due.max(now_ms + 1))),
            None => next_tick,
        };
    }
}

/// Compact gossip: hands chitchat the identities the prober holds dead (and those it no longer
/// does), so that chitchat's live set, its choice of gossip peers and its forgetting of the dead
/// follow the probes' verdicts.
async fn report_liveness(
    node: &MeshNode,
    prober: &Prober,
    reported: &mut std::collections::BTreeSet<(String, u64)>,
) {
    let dead: std::collections::BTreeSet<(String, u64)> = prober.held_dead().into_iter().collect();
    if dead == *reported {
        return;
    }
    let chitchat = node.gossip().chitchat();
    let mut guard = chitchat.lock().await;
    let ids: Vec<(chitchat::ChitchatId, bool)> = guard
        .node_states()
        .keys()
        .filter_map(|id| {
            let key = (id.node_id.to_string(), id.generation_id);
            let (now, before) = (dead.contains(&key), reported.contains(&key));
            (now != before).then(|| (id.clone(), !now))
        })
        .collect();
    for (id, alive) in ids {
        guard.report_liveness(&id, alive);
    }
    *reported = dead;
}

fn receive(node: &MeshNode, prober: &mut Prober, channel: &ProbeChannel, now_ms: u64, m: ProbeIn) {
    let msg = match decode_probe(&m.frame) {
        Ok(msg) => msg,
        Err(e) => {
            node.probe_rejected();
            tracing::debug!(from = %m.from, error = %e, "probe frame rejected");
            return;
        }
    };
    for (to, out) in prober.receive(now_ms, m.from, m.name.as_deref(), msg) {
        send(node, channel, to, &out);
    }
}

fn send(node: &MeshNode, channel: &ProbeChannel, to: std::net::SocketAddr, msg: &ProbeMsg) {
    match encode_probe(msg) {
        Ok(frame) => channel.link.send(to, frame),
        Err(e) => {
            node.probe_rejected();
            tracing::warn!(%to, error = %e, "probe not sent");
        }
    }
}

/// Reads chitchat into `observer` (see [`observe::Observer::read`]).
async fn read(node: &MeshNode, observer: &mut observe::Observer, compact: bool) -> bool {
    let chitchat = node.gossip().chitchat();
    let guard = chitchat.lock().await;
    observer.read(&guard, compact)
}
