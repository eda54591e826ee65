//! Checks that read the agents themselves: failure detection time, false dead verdicts, and
//! the spread of acknowledged specs to every live agent.

use std::collections::BTreeSet;

use chitchat::Chitchat;
use shoal::identity::pki::Role;
use shoal::identity::tls::Peer;
use shoal::wire::api::{Request, Response};
use shoal_core::hlc::format_version;
use shoal_core::instance::ReplicaId;

use super::{Checker, HostView, PendingDetection, PendingReplacement};
use crate::net::SimNet;
use crate::trace::Trace;

/// Time between two false-verdict samples.
const VERDICT_EVERY_MS: u64 = 500;
/// A host counts for false verdicts once both ends have been up this long.
const SETTLED_MS: u64 = 10_000;

pub(super) fn host_index(name: &str) -> Option<u32> {
    name.strip_prefix('n')?.parse::<u32>().ok()?.checked_sub(1)
}

/// The agents' own reasons: the last decisions each host in `on` recorded about `replica`
/// (its reconcile event log), written to the trace when an exclusive duplicate begins.
pub(super) async fn trace_decisions(
    now: u64,
    replica: &ReplicaId,
    on: &[u32],
    hosts: &[HostView<'_>],
    trace: &mut Trace,
) {
    const DECISIONS_MAX: usize = 3;
    let name = replica.to_string();
    for &h in on {
        let Some(api) = hosts[h as usize].api else {
            continue;
        };
        let req = Request::Events {
            after: 0,
            limit: 1_000,
        };
        let answer = api
            .clone()
            .handle_request(req, Peer::new("shoal-sim", Role::Client))
            .await;
        let Response::Events(events) = answer else {
            continue;
        };
        let about: Vec<_> = events
            .iter()
            .filter(|e| e.replica.as_deref() == Some(name.as_str()))
            .collect();
        for e in &about[about.len().saturating_sub(DECISIONS_MAX)..] {
            let at = e.at_ms.saturating_sub(crate::clock::BASE_MS) as f64 / 1000.0;
            trace.line(
                now,
                format!(
                    "  n{} decided {} {name} at {at:.1} s (its clock): {}",
                    h + 1,
                    e.kind,
                    e.reason
                ),
            );
        }
    }
}

/// Host indices live in `chitchat`'s view (itself included).
pub(super) fn live_set(chitchat: &Chitchat) -> BTreeSet<u32> {
    chitchat
        .live_nodes()
        .filter_map(|id| host_index(&id.node_id))
        .collect()
}

pub(super) async fn holds(host: &HostView<'_>, workload: &str) -> Option<Option<String>> {
    let api = host.api?.clone();
    let req = Request::Get {
        name: workload.to_string(),
    };
    match api
        .handle_request(req, Peer::new("shoal-sim", Role::Client))
        .await
    {
        Response::Workload(w) => Some(Some(w.version)),
        _ => Some(None),
    }
}

impl Checker {
    /// A host crashed holding `held`: time its replacements and its detection by every observer.
    pub fn host_crashed(
        &mut self,
        now: u64,
        h: u32,
        name: &str,
        generation: Option<u64>,
        held: Vec<ReplicaId>,
        hosts: &[HostView<'_>],
    ) {
        for replica in held {
            let spec = self
                .latest
                .get(&replica.workload)
                .and_then(|(_, s)| s.as_ref());
            let exclusive = spec.is_some_and(|s| s.placement.exclusive);
            self.pending_replacements.push(PendingReplacement {
                replica,
                host: h,
                crash_ms: now,
                exclusive,
            });
        }
        if let Some(generation) = generation {
            // Only the crashed host's cell gossips with it (every host without cells).
            let cell = hosts[h as usize].cell;
            let observers = hosts
                .iter()
                .filter(|o| o.serving() && o.index != h && o.cell == cell)
                .map(|o| o.index)
                .collect();
            self.pending_detections.push(PendingDetection {
                name: name.into(),
                generation,
                crash_ms: now,
                observers,
            });
        }
    }

    pub(super) async fn check_agents(
        &mut self,
        now: u64,
        hosts: &[HostView<'_>],
        net: &SimNet,
        trace: &mut Trace,
    ) {
        self.check_detections(now, hosts, trace);
        if now.is_multiple_of(VERDICT_EVERY_MS) {
            self.check_verdicts(now, hosts, net, trace);
        }
        self.check_propagation(now, hosts).await;
    }

    fn check_detections(&mut self, now: u64, hosts: &[HostView<'_>], trace: &mut Trace) {
        for p in &mut self.pending_detections {
            let mut seen = Vec::new();
            for &o in &p.observers {
                let host = &hosts[o as usize];
                let Some(node) = host.node.filter(|_| host.serving()) else {
                    seen.push((o, None));
                    continue;
                };
                let chitchat = node.gossip().chitchat();
                let Ok(guard) = chitchat.try_lock() else {
                    continue;
                };
                let alive = guard
                    .live_nodes()
                    .any(|id| *id.node_id == *p.name && id.generation_id == p.generation);
                if !alive {
                    seen.push((o, Some(now - p.crash_ms)));
                }
            }
            for (o, ms) in seen {
                p.observers.remove(&o);
                self.detection_ms.extend(ms);
            }
            if p.observers.is_empty() {
                let ms = now - p.crash_ms;
                self.detection_all_ms.push(ms);
                trace.line(
                    now,
                    format!("{} seen dead by every live observer after {ms} ms", p.name),
                );
            }
        }
        self.pending_detections.retain(|p| !p.observers.is_empty());
    }

    /// A false verdict: an observer's view drops a host that is up, not paused, and reachable
    /// (no partition anywhere), both settled for [`SETTLED_MS`].
    fn check_verdicts(
        &mut self,
        now: u64,
        hosts: &[HostView<'_>],
        net: &SimNet,
        trace: &mut Trace,
    ) {
        let calm = !net.any_blocked() && hosts.iter().all(|h| !h.paused);
        let settled: BTreeSet<u32> = hosts
            .iter()
            .filter(|h| h.serving() && now - h.up_since_ms >= SETTLED_MS)
            .map(|h| h.index)
            .collect();
        for o in hosts {
            let Some(node) = o.node else {
                self.last_live.remove(&o.index);
                continue;
            };
            let chitchat = node.gossip().chitchat();
            let Ok(guard) = chitchat.try_lock() else {
                continue;
            };
            let live = live_set(&guard);
            drop(guard);
            if let Some(before) = self.last_live.get(&o.index) {
                if calm && settled.contains(&o.index) {
                    for x in before.difference(&live).filter(|x| settled.contains(x)) {
                        self.false_dead += 1;
                        trace.line(
                            now,
                            format!("false dead verdict: {} declared n{} dead", o.name, x + 1),
                        );
                    }
                }
            }
            self.last_live.insert(o.index, live);
        }
    }

    async fn check_propagation(&mut self, now: u64, hosts: &[HostView<'_>]) {
        let serving: BTreeSet<u32> = hosts
            .iter()
            .filter(|h| h.serving())
            .map(|h| h.index)
            .collect();
        let mut acks = std::mem::take(&mut self.acks);
        for ack in &mut acks {
            let missing = ack.missing.get_or_insert_with(|| serving.clone());
            let mut reached = Vec::new();
            for &h in missing.iter() {
                if !serving.contains(&h) {
                    continue;
                }
                let held = holds(&hosts[h as usize], &ack.workload).await;
                if held.as_ref().is_some_and(|v| *v == ack.version) {
                    reached.push(h);
                }
            }
            for h in reached {
                missing.remove(&h);
            }
            missing.retain(|h| serving.contains(h));
            if missing.is_empty() {
                self.propagation_ms.push(now - ack.at_ms);
            }
        }
        acks.retain(|a| a.missing.as_ref().is_none_or(|m| !m.is_empty()));
        // An older ack superseded by a newer one of the same workload is no longer awaited.
        let latest: Vec<(String, u64)> =
            acks.iter().map(|a| (a.workload.clone(), a.at_ms)).collect();
        acks.retain(|a| !latest.iter().any(|(w, t)| *w == a.workload && *t > a.at_ms));
        self.acks = acks;
    }

    /// End of the run: every live agent must hold the last acknowledged version of every
    /// workload; convergence must have happened within the bound.
    pub async fn finish(&mut self, now: u64, hosts: &[HostView<'_>], trace: &mut Trace) {
        for (w, (version, _)) in self.latest.clone() {
            for h in hosts.iter().filter(|h| h.serving()) {
                let held = holds(h, &w).await;
                if held.as_ref() != Some(&version) {
                    let shown = |v: Option<&str>, none: &str| {
                        v.map_or(none.to_string(), |v| {
                            format!("version {}", format_version(v))
                        })
                    };
                    let detail = format!(
                        "{w}: acknowledged {} but {} holds {}",
                        shown(version.as_deref(), "its deletion"),
                        h.name,
                        shown(held.flatten().as_deref(), "no live spec")
                    );
                    self.violation(trace, now, "acknowledged-spec-missing", detail);
                }
            }
        }
        for p in &self.pending_replacements {
            trace.line(
                now,
                format!(
                    "{} (on n{} when it crashed) never came back healthy",
                    p.replica,
                    p.host + 1
                ),
            );
        }
        match self.converged_at_ms {
            Some(t) => trace.line(
                now,
                format!(
                    "converged at {t} ms ({} ms after the last fault)",
                    t.saturating_sub(self.last_fault_ms)
                ),
            ),
            None => trace.line(now, "not converged at the end of the run"),
        }
    }
}
