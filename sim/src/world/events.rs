//! Firing timeline events: selectors resolved with the run's generator, faults applied to hosts
//! and links, spec changes sent through an agent's real API.

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use shoal::identity::pki::Role;
use shoal::identity::tls::Peer;
use shoal::state::mesh::record::NODE_KEY;
use shoal::wire::api::Request;
use shoal_core::spec::WorkloadSpec;

use super::{views, ApiAnswer, Origin, Step, World};
use crate::host::{revision, set_revision, HostState};
use crate::scenario::select::Pool;
use crate::scenario::{Action, PartitionKind, RevisionFaults, Selector};

/// Time between two attempts of a spec change that found no serving agent.
const SPEC_RETRY_MS: u64 = 500;

impl World {
    /// Hosts in `states`, sorted.
    fn hosts_in(&self, up_only: bool) -> Vec<u32> {
        let hosts = self
            .hosts
            .iter()
            .filter(|h| !up_only || h.state != HostState::Down);
        hosts.map(|h| h.index).collect()
    }

    /// Resolves `sel` among `hosts` with the run's generator.
    pub(super) fn resolve(&mut self, sel: &Selector, hosts: &[u32]) -> Vec<u32> {
        let zones: Vec<String> = self.hosts.iter().map(|h| h.record.zone.clone()).collect();
        let owners = self
            .checker
            .owners_snapshot(&views(&self.hosts), self.now_ms());
        let zone_of = |h: u32| zones[h as usize].clone();
        let owners_of = |w: &str| {
            owners
                .iter()
                .filter(|(r, _)| r.workload == w)
                .map(|(_, h)| *h)
                .collect()
        };
        let pool = Pool {
            hosts,
            mesh_size: self.hosts.len() as u32,
            zone_of: &zone_of,
            owners_of: &owners_of,
        };
        sel.resolve(&pool, &mut self.rng)
    }

    pub(super) fn fire(&mut self, action: Action, origin: Origin, tries: u32) {
        let now = self.now_ms();
        let spec_change = matches!(
            action,
            Action::Apply { .. }
                | Action::Scale { .. }
                | Action::Update { .. }
                | Action::Delete { .. }
        );
        if spec_change && !self.hosts.iter().any(|h| h.serving()) {
            // No agent to talk to (the mesh is starting, or every host is down or paused):
            // retry; one still postponed when the timeline ends fails the run.
            if tries == 0 {
                self.log(format!("{origin} postponed: no agent serves its API"));
            }
            let step = Step::Fire {
                action,
                origin,
                tries: tries + 1,
            };
            self.schedule_step(now + SPEC_RETRY_MS, step);
            return;
        }
        let c = Selector::concrete;
        match action {
            Action::Crash {
                target,
                keep_data,
                restart_after_ms,
            } => {
                let pool = self.hosts_in(true);
                let Some(hosts) = self.pick(&origin, "target", &target, &pool, "live hosts") else {
                    return;
                };
                for &h in &hosts {
                    self.crash_host(h, keep_data);
                }
                let data = if keep_data {
                    "keeping data"
                } else {
                    "losing data"
                };
                self.log(format!("crash {} ({data})", c(&hosts)));
                let end = now + restart_after_ms.unwrap_or(1_000);
                self.checker.fault_window(now, end, "crash");
                if let Some(d) = restart_after_ms {
                    let step = Step::Restart {
                        hosts,
                        origin,
                        tries: 0,
                    };
                    self.schedule_step(now + d, step);
                }
            }
            Action::Upgrade { target, down_ms } => {
                // Only an agent that runs can stop for a planned restart: a host starting, down
                // or paused (a frozen agent does not act on SIGTERM until it thaws) fails the
                // event (it did not happen), as every event that cannot act.
                let pool: Vec<u32> = self
                    .hosts
                    .iter()
                    .filter(|h| h.serving() && h.running.is_some())
                    .map(|h| h.index)
                    .collect();
                let Some(hosts) = self.pick(&origin, "target", &target, &pool, "up hosts") else {
                    return;
                };
                let stopped: Vec<u32> = hosts
                    .iter()
                    .copied()
                    .filter(|&h| self.upgrade_host(h))
                    .collect();
                assert_eq!(stopped, hosts, "the pool holds only hosts whose agent runs");
                self.log(format!(
                    "upgrade {} (agents restart, instances run on)",
                    c(&stopped)
                ));
                self.checker.fault_window(now, now + down_ms, "upgrade");
                let step = Step::Restart {
                    hosts: stopped,
                    origin,
                    tries: 0,
                };
                self.schedule_step(now + down_ms, step);
            }
            Action::Restart { target } => {
                let down: Vec<u32> = self
                    .hosts
                    .iter()
                    .filter(|h| h.state == HostState::Down)
                    .map(|h| h.index)
                    .collect();
                let Some(hosts) = self.pick(&origin, "target", &target, &down, "crashed hosts")
                else {
                    return;
                };
                self.log(format!("restart {}", c(&hosts)));
                self.restart(hosts, origin, 0);
            }
            Action::Pause {
                target,
                duration_ms,
            } => {
                // A host a starve freezes now is still paused by this event (its agent
                // runs, slowly); one already paused by a pause event is not.
                let pool: Vec<u32> = self
                    .hosts
                    .iter()
                    .filter(|h| h.state == HostState::Up && !self.pause_holds(h.index))
                    .map(|h| h.index)
                    .collect();
                let Some(hosts) = self.pick(&origin, "target", &target, &pool, "serving hosts")
                else {
                    return;
                };
                self.checker.fault_window(now, now + duration_ms, "pause");
                self.pause(&hosts, duration_ms, origin);
            }
            Action::Starve {
                target,
                frozen_ms,
                period_ms,
                delay_ms,
                duration_ms,
            } => {
                let pool: Vec<u32> = self
                    .hosts
                    .iter()
                    .filter(|h| h.state == HostState::Up && !self.pause_holds(h.index))
                    .map(|h| h.index)
                    .collect();
                let Some(hosts) = self.pick(&origin, "target", &target, &pool, "serving hosts")
                else {
                    return;
                };
                self.checker.fault_window(now, now + duration_ms, "starve");
                let shape = (frozen_ms, period_ms, delay_ms, duration_ms);
                self.starve(hosts, shape, origin);
            }
            Action::SlowLink {
                target,
                fault,
                duration_ms,
            } => {
                let all = self.hosts_in(false);
                let Some(hosts) = self.pick(&origin, "target", &target, &all, "hosts") else {
                    return;
                };
                self.checker
                    .fault_window(now, now + duration_ms, "slow-link");
                self.slow_link(&hosts, fault, duration_ms, origin);
            }
            Action::Partition {
                kind,
                target,
                duration_ms,
            } => {
                if !self.partition(kind, target.as_ref(), duration_ms, &origin) {
                    return;
                }
                let end = duration_ms.map_or(self.scenario.duration_ms, |d| now + d);
                self.checker.fault_window(now, end, "partition");
            }
            Action::Heal => {
                let healed = self.heal_all();
                if healed == 0 {
                    self.event_failed(&origin, "nothing to heal: no partition in force");
                    return;
                }
                self.log(format!("heal: {healed} partitions healed"));
            }
            Action::Link {
                from,
                to,
                fault,
                duration_ms,
            } => {
                let end = duration_ms.map_or(self.scenario.duration_ms, |d| now + d);
                let links = if from == Selector::All && to == Selector::All {
                    self.log(format!("link all -> all: {fault:?}"));
                    None
                } else {
                    let all = self.hosts_in(false);
                    let Some(a) = self.pick(&origin, "from", &from, &all, "hosts") else {
                        return;
                    };
                    let Some(b) = self.pick(&origin, "to", &to, &all, "hosts") else {
                        return;
                    };
                    let links: Vec<(u32, u32)> = a
                        .iter()
                        .flat_map(|&x| b.iter().filter(move |&&y| y != x).map(move |&y| (x, y)))
                        .collect();
                    if links.is_empty() {
                        let why = format!("from {} to {} names no link", c(&a), c(&b));
                        self.event_failed(&origin, why);
                        return;
                    }
                    self.log(format!("link {} -> {}: {fault:?}", c(&a), c(&b)));
                    Some(links)
                };
                self.checker.fault_window(now, end, "link");
                let id = self.add_link_layer(links, fault);
                if let Some(d) = duration_ms {
                    self.schedule_step(now + d, Step::EndLink { id, origin });
                }
            }
            Action::Clock {
                target,
                jump_ms,
                drift_ppm,
            } => {
                let all = self.hosts_in(false);
                let Some(hosts) = self.pick(&origin, "target", &target, &all, "hosts") else {
                    return;
                };
                for &h in &hosts {
                    self.hosts[h as usize].clock.adjust(jump_ms, drift_ppm);
                }
                self.log(format!(
                    "clock {}: jump {jump_ms} ms, drift {drift_ppm:?} ppm",
                    c(&hosts)
                ));
            }
            Action::Instance { workload, profile } => {
                self.profiles
                    .lock()
                    .expect("profiles")
                    .workloads
                    .insert(workload.clone(), profile);
                for host in &self.hosts {
                    crate::host::apply_profiles(&host.mem, &self.profiles);
                }
                self.log(format!("instances of {workload}: {profile:?}"));
            }
            Action::Apply { spec, via } => {
                self.send_spec(*spec, &via, "apply", origin);
            }
            Action::Scale {
                workload,
                replicas,
                via,
            } => {
                let Some(mut spec) = self.sent_spec(&workload, &origin) else {
                    return;
                };
                spec.replicas = replicas;
                self.send_spec(spec, &via, "scale", origin);
            }
            Action::Update {
                workload,
                via,
                faults,
                expect,
            } => {
                let Some(mut spec) = self.sent_spec(&workload, &origin) else {
                    return;
                };
                let from = revision(&spec);
                let high = self.revisions.get(&workload).copied().unwrap_or(0);
                let to = high.max(from) + 1;
                set_revision(&mut spec, to);
                if !faults.is_empty() {
                    self.revision_faults(&workload, to, faults);
                }
                if self.send_spec(spec, &via, "update", origin.clone()) {
                    let rollout = crate::check::RolloutStart {
                        workload,
                        event: origin.to_string(),
                        from_revision: from,
                        revision: to,
                        expect,
                    };
                    self.checker.rollout_started(now, rollout);
                }
            }
            Action::Delete { workload, via } => {
                if !self.sent.contains(&workload) {
                    let why = format!("no spec of {workload} was ever sent");
                    return self.event_failed(&origin, why);
                }
                let Some(h) = self.api_host(&via, &origin) else {
                    return;
                };
                self.log(format!("delete {workload} via n{}", h + 1));
                self.specs.remove(&workload);
                self.checker.rollouts_superseded(now, &workload);
                let req = Request::Delete {
                    name: workload.clone(),
                    purge_data: false,
                };
                self.call_api(h, req, "delete", workload, None, origin);
            }
            Action::Drain { target, draining } => self.drain(&target, draining, &origin),
            Action::Flap {
                target,
                down_ms,
                up_ms,
                count,
                crash,
            } => {
                let pool = self.hosts_in(true);
                let Some(hosts) = self.pick(&origin, "target", &target, &pool, "live hosts") else {
                    return;
                };
                for k in 0..u64::from(count) {
                    let at = now + k * (down_ms + up_ms);
                    let step = Step::FlapDown {
                        hosts: hosts.clone(),
                        crash,
                        down_ms,
                        origin: origin.clone(),
                    };
                    self.schedule_step(at, step);
                    self.checker.fault_window(at, at + down_ms, "flap");
                }
            }
        }
    }

    /// The spec the simulator last sent for `workload`, or a failure of `origin`.
    fn sent_spec(&mut self, workload: &str, origin: &str) -> Option<WorkloadSpec> {
        let spec = self.specs.get(workload).cloned();
        if spec.is_none() {
            let why = format!("no spec of {workload} was sent yet (not applied, or deleted)");
            self.event_failed(origin, why);
        }
        spec
    }

    /// Drains or undrains hosts: an up host publishes its record at once, a down one with its
    /// next start (a starting host already took its old record along, so it is not a candidate).
    fn drain(&mut self, target: &Selector, draining: bool, origin: &str) {
        let pool: Vec<u32> = self
            .hosts
            .iter()
            .filter(|h| h.state != HostState::Starting && h.record.draining != draining)
            .map(|h| h.index)
            .collect();
        let among = if draining {
            "hosts not draining (and not starting)"
        } else {
            "hosts draining (and not starting)"
        };
        let Some(hosts) = self.pick(origin, "target", target, &pool, among) else {
            return;
        };
        for &h in &hosts {
            let host = &mut self.hosts[h as usize];
            host.record.draining = draining;
            let Some(node) = host.node() else {
                continue;
            };
            let chitchat = node.gossip().chitchat();
            let published = chitchat
                .try_lock()
                .map(|mut guard| guard.self_node_state().set(NODE_KEY, host.record.encode()))
                .is_ok();
            if !published {
                let why = format!(
                    "n{}'s gossip state was busy: its record was not published",
                    h + 1
                );
                self.event_failed(origin, why);
            }
        }
        let what = if draining { "drain" } else { "undrain" };
        self.log(format!("{what} {}", Selector::concrete(&hosts)));
    }

    /// Cuts the network as `kind` says; false (and the event failed) when it cuts nothing.
    fn partition(
        &mut self,
        kind: PartitionKind,
        target: Option<&Selector>,
        duration_ms: Option<u64>,
        origin: &Origin,
    ) -> bool {
        let all = self.hosts_in(false);
        let n = all.len();
        let up = self.hosts_in(true);
        let needs_target = matches!(
            kind,
            PartitionKind::Isolate
                | PartitionKind::OneWay
                | PartitionKind::OneWayIn
                | PartitionKind::Bridge
        );
        let mut chosen = match target {
            Some(sel) => match self.pick(origin, "target", sel, &up, "live hosts") {
                Some(hosts) => hosts,
                None => return false,
            },
            None if needs_target => {
                match self.pick(origin, "target", &Selector::One, &up, "live hosts") {
                    Some(hosts) => hosts,
                    None => return false,
                }
            }
            None => Vec::new(),
        };
        let size = match kind {
            PartitionKind::Bisect => n / 2,
            PartitionKind::Minority => (n.saturating_sub(1) / 2).max(1),
            PartitionKind::Majority => n / 2 + 1,
            _ => chosen.len(),
        };
        let mut rest: Vec<u32> = all
            .iter()
            .copied()
            .filter(|h| !chosen.contains(h))
            .collect();
        rest.shuffle(&mut self.rng);
        while chosen.len() < size {
            match rest.pop() {
                Some(h) => chosen.push(h),
                None => break,
            }
        }
        chosen.truncate(size.max(1));
        chosen.sort_unstable();
        let side_a: BTreeSet<u32> = chosen.iter().copied().collect();
        let side_b: Vec<u32> = all
            .iter()
            .copied()
            .filter(|h| !side_a.contains(h))
            .collect();
        let c = Selector::concrete;
        let mut links = BTreeSet::new();
        let mut unheard = Vec::new();
        let line = if kind == PartitionKind::Bridge {
            // The chosen host bridges two halves of the others.
            let (x, y) = side_b.split_at(side_b.len() / 2);
            for &a in x {
                for &b in y {
                    links.insert((a, b));
                    links.insert((b, a));
                }
            }
            format!(
                "partition bridge: {} | {} joined only by {}",
                c(x),
                c(y),
                c(&chosen)
            )
        } else {
            for &a in &side_a {
                for &b in &side_b {
                    if kind != PartitionKind::OneWayIn {
                        links.insert((a, b));
                    }
                    if kind != PartitionKind::OneWay {
                        links.insert((b, a));
                    }
                }
            }
            if kind == PartitionKind::OneWay {
                unheard = chosen.clone();
            }
            let arrow = match kind {
                PartitionKind::OneWay => "-/->",
                PartitionKind::OneWayIn => "<-/-",
                _ => "|",
            };
            format!("partition {kind:?}: {} {arrow} {}", c(&chosen), c(&side_b))
        };
        if links.is_empty() {
            let why = format!("{line} cuts no link (the mesh has {n} hosts)");
            self.event_failed(origin, why);
            return false;
        }
        self.log(line);
        let id = self.add_cut(links, unheard);
        if let Some(d) = duration_ms {
            let now = self.now_ms();
            let step = Step::EndCut {
                id,
                origin: origin.clone(),
            };
            self.schedule_step(now + d, step);
        }
        true
    }

    /// The agent a spec change goes through: one `via` picks among the serving ones.
    fn api_host(&mut self, via: &Selector, origin: &str) -> Option<u32> {
        let serving: Vec<u32> = self
            .hosts
            .iter()
            .filter(|h| h.serving())
            .map(|h| h.index)
            .collect();
        let picked = self.pick(origin, "via", via, &serving, "serving agents")?;
        picked.first().copied()
    }

    /// The instances of `workload`'s revision `to` fail as `faults` say, over the workload's
    /// profile of now.
    fn revision_faults(&mut self, workload: &str, to: u64, faults: RevisionFaults) {
        let profile = {
            let mut table = self.profiles.lock().expect("profiles");
            let base = table.workloads.get(workload).copied().unwrap_or_default();
            let profile = faults.over(base);
            table.revisions.insert((workload.to_string(), to), profile);
            profile
        };
        for host in &self.hosts {
            crate::host::apply_profiles(&host.mem, &self.profiles);
        }
        self.log(format!(
            "instances of {workload} revision {to}: {profile:?}"
        ));
    }

    /// Sends `spec` through an agent's API (`via`); false (and the event failed) when no agent
    /// could take it.
    fn send_spec(
        &mut self,
        spec: WorkloadSpec,
        via: &Selector,
        what: &str,
        origin: Origin,
    ) -> bool {
        let Some(h) = self.api_host(via, &origin) else {
            return false;
        };
        let revision = revision(&spec);
        let high = self.revisions.entry(spec.name.clone()).or_default();
        *high = (*high).max(revision);
        let name = spec.name.clone();
        self.log(format!(
            "{what} {name} (replicas {}) via n{}",
            spec.replicas,
            h + 1
        ));
        self.specs.insert(name.clone(), spec.clone());
        self.sent.insert(name.clone());
        self.checker.spec_sent(&spec);
        let req = Request::Apply {
            specs: vec![spec.clone()],
        };
        self.call_api(h, req, what, name, Some(spec), origin)
    }

    fn call_api(
        &mut self,
        h: u32,
        req: Request,
        what: &str,
        workload: String,
        spec: Option<WorkloadSpec>,
        origin: Origin,
    ) -> bool {
        let Some(api) = self.hosts[h as usize]
            .running
            .as_ref()
            .map(|a| a.api().clone())
        else {
            let why = format!("n{} has no agent to call", h + 1);
            self.event_failed(&origin, why);
            return false;
        };
        self.api_seq += 1;
        let id = self.api_seq;
        let label = format!("{what} {workload} via n{}", h + 1);
        self.api_pending
            .insert(id, (label, origin, workload.clone()));
        let (tx, sent_ms, what) = (self.api_tx.clone(), self.now_ms(), what.to_string());
        // Served by the agent: it waits while the agent is frozen.
        let freeze = self.hosts[h as usize].freeze.clone();
        tokio::spawn(async move {
            let request = api.handle_request(req, Peer::new("shoal-sim", Role::Client));
            let response = freeze.gate(request).await;
            let _ = tx.send(ApiAnswer {
                id,
                sent_ms,
                via: h,
                what,
                workload,
                spec,
                response,
            });
        });
        true
    }
}
