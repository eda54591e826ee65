//! Firing timeline events: selectors resolved with the run's generator, faults applied to hosts
//! and links, spec changes sent through an agent's real API.

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use shoal::mesh::api::Request;
use shoal::mesh::record::NODE_KEY;
use shoal::tls::PeerName;
use shoal_core::spec::{Run, WorkloadSpec};

use super::{ApiAnswer, HostState, Step, World};
use crate::scenario::select::Pool;
use crate::scenario::{Action, PartitionKind, Selector};

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
        let owners = self.checker.owners_snapshot(&self.hosts, self.now_ms());
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

    pub(super) fn fire(&mut self, action: Action) {
        let now = self.now_ms();
        let spec_change = matches!(
            action,
            Action::Apply { .. }
                | Action::Scale { .. }
                | Action::Update { .. }
                | Action::Delete { .. }
        );
        if spec_change && !self.hosts.iter().any(|h| h.serving()) {
            // No agent to talk to yet (the mesh is starting, or every host is down): retry.
            self.schedule_step(now + 500, Step::Fire(action));
            return;
        }
        let c = Selector::concrete;
        match action {
            Action::Crash {
                target,
                keep_data,
                restart_after_ms,
            } => {
                let hosts = self.resolve(&target, &self.hosts_in(true));
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
                    self.schedule_step(now + d, Step::Restart(hosts));
                }
            }
            Action::Restart { target } => {
                let down: Vec<u32> = self
                    .hosts
                    .iter()
                    .filter(|h| h.state == HostState::Down)
                    .map(|h| h.index)
                    .collect();
                let hosts = self.resolve(&target, &down);
                self.log(format!("restart {}", c(&hosts)));
                self.schedule_step(now, Step::Restart(hosts));
            }
            Action::Pause {
                target,
                duration_ms,
            } => {
                let hosts = self.resolve(&target, &self.hosts_in(true));
                self.set_paused(&hosts, true);
                self.checker.fault_window(now, now + duration_ms, "pause");
                self.schedule_step(now + duration_ms, Step::Resume(hosts));
            }
            Action::Partition {
                kind,
                target,
                duration_ms,
            } => {
                self.partition(kind, target.as_ref());
                let end = duration_ms.map_or(self.scenario.duration_ms, |d| now + d);
                self.checker.fault_window(now, end, "partition");
                if let Some(d) = duration_ms {
                    self.schedule_step(now + d, Step::Heal);
                }
            }
            Action::Heal => self.schedule_step(now, Step::Heal),
            Action::Link {
                from,
                to,
                fault,
                duration_ms,
            } => {
                let end = duration_ms.map_or(self.scenario.duration_ms, |d| now + d);
                self.checker.fault_window(now, end, "link");
                if from == Selector::All && to == Selector::All {
                    self.net.set_default_fault(fault);
                    self.log(format!("link all -> all: {fault:?}"));
                    if let Some(d) = duration_ms {
                        self.schedule_step(now + d, Step::ClearLinks(Vec::new(), true));
                    }
                    return;
                }
                let all = self.hosts_in(false);
                let (a, b) = (self.resolve(&from, &all), self.resolve(&to, &all));
                let mut links = Vec::new();
                for &x in &a {
                    for &y in b.iter().filter(|y| **y != x) {
                        self.net.set_link_fault(x, y, Some(fault));
                        links.push((x, y));
                    }
                }
                self.log(format!("link {} -> {}: {fault:?}", c(&a), c(&b)));
                if let Some(d) = duration_ms {
                    self.schedule_step(now + d, Step::ClearLinks(links, false));
                }
            }
            Action::Clock {
                target,
                jump_ms,
                drift_ppm,
            } => {
                let hosts = self.resolve(&target, &self.hosts_in(false));
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
                    .insert(workload.clone(), profile);
                for host in &self.hosts {
                    crate::host::apply_profiles(&host.mem, &self.profiles);
                }
                self.log(format!("instances of {workload}: {profile:?}"));
            }
            Action::Apply { spec, via } => self.send_spec(*spec, &via, "apply"),
            Action::Scale {
                workload,
                replicas,
                via,
            } => {
                if let Some(mut spec) = self.specs.get(&workload).cloned() {
                    spec.replicas = replicas;
                    self.send_spec(spec, &via, "scale");
                }
            }
            Action::Update { workload, via } => {
                if let Some(mut spec) = self.specs.get(&workload).cloned() {
                    bump_revision(&mut spec);
                    self.send_spec(spec, &via, "update");
                }
            }
            Action::Delete { workload, via } => {
                let Some(h) = self.api_host(&via) else { return };
                self.log(format!("delete {workload} via n{}", h + 1));
                self.specs.remove(&workload);
                self.call_api(
                    h,
                    Request::Delete {
                        name: workload.clone(),
                    },
                    "delete",
                    workload,
                    None,
                );
            }
            Action::Drain { target, draining } => {
                let hosts = self.resolve(&target, &self.hosts_in(true));
                for &h in &hosts {
                    let host = &mut self.hosts[h as usize];
                    host.record.draining = draining;
                    if let Some(node) = host.node() {
                        let chitchat = node.gossip().chitchat();
                        let locked = chitchat.try_lock();
                        if let Ok(mut guard) = locked {
                            guard.self_node_state().set(NODE_KEY, host.record.encode());
                        }
                    }
                }
                let what = if draining { "drain" } else { "undrain" };
                self.log(format!("{what} {}", c(&hosts)));
            }
            Action::Flap {
                target,
                down_ms,
                up_ms,
                count,
                crash,
            } => {
                let hosts = self.resolve(&target, &self.hosts_in(true));
                for k in 0..u64::from(count) {
                    let at = now + k * (down_ms + up_ms);
                    self.schedule_step(at, Step::FlapDown(hosts.clone(), crash));
                    self.schedule_step(at + down_ms, Step::FlapUp(hosts.clone(), crash));
                    self.checker.fault_window(at, at + down_ms, "flap");
                }
            }
        }
    }

    pub(super) fn flap(&mut self, hosts: &[u32], crash: bool, down: bool) {
        let others: Vec<u32> = self
            .hosts_in(false)
            .into_iter()
            .filter(|h| !hosts.contains(h))
            .collect();
        match (crash, down) {
            (true, true) => {
                for &h in hosts {
                    self.crash_host(h, true);
                }
            }
            (true, false) => return self.run_step(Step::Restart(hosts.to_vec())),
            (false, _) => {
                for &a in hosts {
                    for &b in &others {
                        self.net.set_blocked(a, b, down);
                        self.net.set_blocked(b, a, down);
                    }
                }
            }
        }
        let what = if down { "flap down" } else { "flap up" };
        self.log(format!(
            "{what} {} ({})",
            Selector::concrete(hosts),
            if crash { "crash" } else { "network" }
        ));
    }

    fn partition(&mut self, kind: PartitionKind, target: Option<&Selector>) {
        let all = self.hosts_in(false);
        let n = all.len();
        let up = self.hosts_in(true);
        let mut chosen = match target {
            Some(sel) => self.resolve(sel, &up),
            None if matches!(
                kind,
                PartitionKind::Isolate | PartitionKind::OneWay | PartitionKind::Bridge
            ) =>
            {
                self.resolve(&Selector::One, &up)
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
        if kind == PartitionKind::Bridge {
            // The chosen host bridges two halves of the others.
            let half = side_b.len() / 2;
            let (x, y) = side_b.split_at(half);
            for &a in x {
                for &b in y {
                    self.net.set_blocked(a, b, true);
                    self.net.set_blocked(b, a, true);
                }
            }
            return self.log(format!(
                "partition bridge: {} | {} joined only by {}",
                c(x),
                c(y),
                c(&chosen)
            ));
        }
        for &a in &side_a {
            for &b in &side_b {
                self.net.set_blocked(a, b, true);
                if kind != PartitionKind::OneWay {
                    self.net.set_blocked(b, a, true);
                }
            }
        }
        let arrow = if kind == PartitionKind::OneWay {
            "-/->"
        } else {
            "|"
        };
        self.log(format!(
            "partition {kind:?}: {} {arrow} {}",
            c(&chosen),
            c(&side_b)
        ));
    }

    fn api_host(&mut self, via: &Selector) -> Option<u32> {
        let serving: Vec<u32> = self
            .hosts
            .iter()
            .filter(|h| h.serving())
            .map(|h| h.index)
            .collect();
        let picked = self.resolve(via, &serving);
        let h = picked.first().copied();
        if h.is_none() {
            self.log(format!(
                "no live agent matches {via:?}: spec change skipped"
            ));
        }
        h
    }

    fn send_spec(&mut self, spec: WorkloadSpec, via: &Selector, what: &str) {
        let Some(h) = self.api_host(via) else { return };
        let name = spec.name.clone();
        self.log(format!(
            "{what} {name} (replicas {}) via n{}",
            spec.replicas,
            h + 1
        ));
        self.specs.insert(name.clone(), spec.clone());
        self.call_api(
            h,
            Request::Apply {
                specs: vec![spec.clone()],
            },
            what,
            name,
            Some(spec),
        );
    }

    fn call_api(
        &mut self,
        h: u32,
        req: Request,
        what: &str,
        workload: String,
        spec: Option<WorkloadSpec>,
    ) {
        let Some(api) = self.hosts[h as usize]
            .running
            .as_ref()
            .map(|a| a.api().clone())
        else {
            return;
        };
        let (tx, sent_ms, what) = (self.api_tx.clone(), self.now_ms(), what.to_string());
        tokio::spawn(async move {
            let response = api.handle_request(req, PeerName("shoal-sim".into())).await;
            let _ = tx.send(ApiAnswer {
                sent_ms,
                via: h,
                what,
                workload,
                spec,
                response,
            });
        });
    }
}

/// A new spec version: one environment variable changes, so every replica is replaced.
fn bump_revision(spec: &mut WorkloadSpec) {
    let env = match &mut spec.run {
        Run::Process(p) => &mut p.env,
        Run::Container(c) => &mut c.env,
    };
    let next = env
        .get("SHOAL_SIM_REVISION")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    env.insert("SHOAL_SIM_REVISION".into(), next.to_string());
}
