//! An exclusive replica never runs in two places, checked with real `shoal agent` processes, each in
//! a network namespace of its own (common/netns.rs), against what really runs: the test scans
//! /proc every 100 ms for the workload's processes (`sleep <marker>`) and the namespace each is in.
//!
//! From a converged mesh of three agents (`SHOAL_NETNS_AGENTS=5` for five) with exactly one copy,
//! the owner
//! - cannot send (iptables DROP on its OUTPUT) or cannot receive (DROP on its INPUT) until the others
//!   have started a replacement, then heals;
//! - is frozen (SIGSTOP of its agent alone, not its guard or instances) for 30 s, then thawed;
//! - dies with its host (agent, guard and instances SIGKILLed): the replacement must run within
//!   `fencing_delay_ms` + 2 s of the death.
//!
//! In every case: never two copies at once, and after recovery exactly one, back on the owner.
//! Agents run with the default timings (`shoal agent` has no flags for them): a 20 s fencing delay,
//! 10 s self-fencing, a failure detector that confirms a death in about 2 s. Needs root, iproute2,
//! iptables and nsenter; `SHOAL_SKIP_NETNS_TESTS=1` skips. docs/reconcile.md, "Tested with real
//! processes", has the figures.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::netns::{self, Cut, Hosts};
use common::*;

/// Agents per mesh: 3, or `SHOAL_NETNS_AGENTS` (3 to 9; the cut owner is then a smaller minority).
fn agents() -> usize {
    let Ok(text) = std::env::var("SHOAL_NETNS_AGENTS") else {
        return 3;
    };
    let n: usize = text
        .parse()
        .unwrap_or_else(|_| panic!("SHOAL_NETNS_AGENTS={text:?}: expected a number of agents"));
    assert!((3..=9).contains(&n), "SHOAL_NETNS_AGENTS={n}: use 3 to 9");
    n
}
/// The longest a cut is held waiting for the others to start a replacement: a confirmed death
/// (about 2 s) plus the 20 s fencing delay, with room for a loaded machine.
const HOLD_MAX: Duration = Duration::from_secs(40);
/// How long after the fault ends the mesh may take to settle on one copy on the owner again: the
/// replacement stops once its node sees the owner live, the owner claims for 3 s and starts.
const RECOVERY_MAX: Duration = Duration::from_secs(30);
/// A copy counts as settled once the same process has run this long.
const SETTLED: Duration = Duration::from_secs(3);

/// One running process of the workload and the host whose namespace it is in (None: none of them).
#[derive(Clone, Debug, PartialEq)]
struct Copy {
    pid: i32,
    host: Option<usize>,
}

/// The live (not zombie) processes whose command line is `sleep <marker>`, with their hosts.
fn copies(marker: u64, inodes: &[u64]) -> Vec<Copy> {
    let want = format!("sleep\0{marker}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default() != want.as_bytes() {
            continue;
        }
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'));
        if zombie {
            continue;
        }
        let host = std::fs::read_link(format!("/proc/{pid}/ns/net"))
            .ok()
            .and_then(|l| {
                let l = l.to_string_lossy().into_owned();
                l.strip_prefix("net:[")?
                    .strip_suffix(']')?
                    .parse::<u64>()
                    .ok()
            })
            .and_then(|inode| inodes.iter().position(|i| *i == inode));
        found.push(Copy { pid, host });
    }
    found
}

/// What the sampler saw at one moment.
struct Sample {
    at: Instant,
    copies: Vec<Copy>,
}

/// Scans /proc every 100 ms on a thread of its own until finished.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    fn start(marker: u64, inodes: Vec<u64>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let at = Instant::now();
                let copies = copies(marker, &inodes);
                samples.push(Sample { at, copies });
                std::thread::sleep(Duration::from_millis(100).saturating_sub(at.elapsed()));
            }
            samples
        });
        Sampler { stop, thread }
    }

    /// Every sample so far, with times in ms since `fault` (negative before it).
    fn finish(self, fault: Instant) -> Timeline {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().expect("the sampler panicked");
        let ms = |at: Instant| match at.checked_duration_since(fault) {
            Some(after) => after.as_millis() as i64,
            None => -((fault - at).as_millis() as i64),
        };
        Timeline(samples.into_iter().map(|s| (ms(s.at), s.copies)).collect())
    }
}

/// Every sample of a case, from the apply on: (ms since the fault, what ran).
struct Timeline(Vec<(i64, Vec<Copy>)>);

impl Timeline {
    /// The most copies seen at once.
    fn most(&self) -> usize {
        self.0.iter().map(|(_, c)| c.len()).max().unwrap_or(0)
    }

    /// The first moment (ms since the fault) when `f` held, at or after `from_ms`.
    fn first(&self, from_ms: i64, f: impl Fn(&[Copy]) -> bool) -> Option<i64> {
        self.0
            .iter()
            .find(|(at, c)| *at >= from_ms && f(c))
            .map(|(at, _)| *at)
    }

    /// The samples where what ran changed, one line each.
    fn changes(&self, names: &[String]) -> String {
        let mut out = format!(
            "{} samples from the apply on; changes (s since the first fault):\n",
            self.0.len()
        );
        let mut last = None;
        for (at, copies) in &self.0 {
            if last == Some(copies) {
                continue;
            }
            last = Some(copies);
            let running: Vec<String> = copies
                .iter()
                .map(|c| {
                    let host = c.host.map_or("outside the hosts", |h| names[h].as_str());
                    format!("pid {} on {host}", c.pid)
                })
                .collect();
            out += &format!("  {:>7.1}: {:?}\n", *at as f64 / 1000.0, running);
        }
        out
    }
}

/// [`agents`] agents, each in its own namespace, running one exclusive `sleep <marker>` between them.
struct Mesh {
    // Dropped first: the agents, then every process left in the namespaces and the namespaces.
    c: Cluster,
    hosts: Hosts,
    marker: u64,
    inodes: Vec<u64>,
    /// The agents' names, by host index.
    names: Vec<String>,
    /// Samples from the apply on.
    sampler: Option<Sampler>,
}

impl Mesh {
    /// A converged mesh with one copy running, or None when the test is skipped.
    fn start(tag: &str, subnet: u8, case: u64, n: usize) -> Option<Mesh> {
        if !netns::require() {
            return None;
        }
        let hosts = Hosts::new(tag, n, subnet);
        let mut c = Cluster::new();
        let names: Vec<String> = (1..=n).map(|i| format!("n{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            let ip = hosts.ip(i);
            c.add_at(
                name,
                SocketAddr::new(ip, 7000),
                SocketAddr::new(ip, 7001),
                Some(hosts.names[i].clone()),
            );
        }
        let inodes = (0..n).map(|i| hosts.inode(i)).collect();
        // Unique to this test process and case, so that no other test's processes are counted.
        let marker = 50_000_000 + u64::from(std::process::id()) * 8 + case;
        let mut mesh = Mesh {
            c,
            hosts,
            marker,
            inodes,
            names,
            sampler: None,
        };
        mesh.c.wait_members(n, Duration::from_secs(30));
        let spec = mesh.c.dir.path().join("db.toml");
        std::fs::write(
            &spec,
            format!(
                "name = \"db\"\nreplicas = 1\n[process]\ncommand = [\"sleep\", \"{marker}\"]\n\
                 [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[restart]\n\
                 backoff_initial = \"1s\"\n[placement]\nexclusive = true\n"
            ),
        )
        .unwrap();
        mesh.sampler = Some(Sampler::start(marker, mesh.inodes.clone()));
        let out = mesh.c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
        assert!(out.status.success(), "apply failed: {}", stderr(&out));
        assert!(
            mesh.settled(None, Duration::from_secs(60)).is_some(),
            "the exclusive replica did not start once: {:?}\n{}",
            mesh.copies(),
            mesh.c.logs()
        );
        Some(mesh)
    }

    fn copies(&self) -> Vec<Copy> {
        copies(self.marker, &self.inodes)
    }

    /// The host running the only copy.
    fn owner(&self) -> usize {
        let now = self.copies();
        assert_eq!(now.len(), 1, "{now:?}");
        now[0].host.expect("the copy runs on one of the hosts")
    }

    /// Waits until one copy (on `on`, if given) has run for [`SETTLED`] and every agent sees every
    /// agent live; returns how long that took, or None after `within`.
    fn settled(&self, on: Option<usize>, within: Duration) -> Option<Duration> {
        let t0 = Instant::now();
        let mut since: Option<(i32, Instant)> = None;
        while t0.elapsed() < within {
            let now = self.copies();
            let one =
                (now.len() == 1 && on.is_none_or(|h| now[0].host == Some(h))).then(|| now[0].pid);
            since = match (one, since) {
                (Some(pid), Some((same, at))) if pid == same => Some((same, at)),
                (Some(pid), _) => Some((pid, Instant::now())),
                (None, _) => None,
            };
            if since.is_some_and(|(_, at)| at.elapsed() >= SETTLED)
                && (0..self.names.len()).all(|i| {
                    self.c
                        .alive_nodes(i)
                        .is_some_and(|v| v.len() == self.names.len())
                })
            {
                return Some(t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }

    /// Waits until a copy runs on a host other than `owner`; returns when, or None after `within`.
    fn replaced(&self, owner: usize, within: Duration) -> Option<Instant> {
        let mut at = None;
        wait_until(within, || {
            let elsewhere = self.copies().iter().any(|c| c.host != Some(owner));
            if elsewhere {
                at = Some(Instant::now());
            }
            elsewhere
        });
        at
    }

    /// Stops sampling; times in the timeline count from `fault`.
    fn timeline(&mut self, fault: Instant) -> Timeline {
        self.sampler.take().expect("sampling").finish(fault)
    }

    /// Fails with the timeline and the agents' logs if two copies ever ran at once.
    fn assert_never_two(&self, timeline: &Timeline) {
        assert!(
            timeline.most() <= 1,
            "two copies of the exclusive replica ran at once\n{}\n{}",
            timeline.changes(&self.names),
            self.c.logs()
        );
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        // A case that failed before taking its timeline: the sampler stops with it.
        if let Some(sampler) = &self.sampler {
            sampler.stop.store(true, Ordering::Relaxed);
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn ms(at_ms: Option<i64>) -> String {
    at_ms.map_or("never".into(), |m| format!("{:.1} s", m as f64 / 1000.0))
}

/// The owner's packets are dropped one way until the others run a replacement, then it heals.
fn one_way_cut(tag: &str, subnet: u8, case: u64, cut: Cut) {
    let Some(mut m) = Mesh::start(tag, subnet, case, agents()) else {
        return;
    };
    let owner = m.owner();
    let fault = Instant::now();
    m.hosts.cut(owner, cut);
    let replaced = m.replaced(owner, HOLD_MAX);
    // The replacement runs a moment longer while the owner is still cut off.
    std::thread::sleep(Duration::from_secs(2));
    m.hosts.heal(owner, cut);
    let healed = fault.elapsed();
    let recovered = m.settled(Some(owner), RECOVERY_MAX);
    let timeline = m.timeline(fault);
    eprintln!(
        "{cut:?} cut on {} of {}: its copy gone at {}, replacement at {}, healed at {}, its copy \
         back at {} (settled {} after healing)\n{}",
        m.names[owner],
        m.names.len(),
        ms(timeline.first(0, |c| c.iter().all(|c| c.host != Some(owner)))),
        replaced.map_or("never".into(), |at| secs(at - fault)),
        secs(healed),
        ms(timeline.first(healed.as_millis() as i64, |c| {
            c.iter().any(|c| c.host == Some(owner))
        })),
        recovered.map_or("never".into(), secs),
        timeline.changes(&m.names)
    );
    m.assert_never_two(&timeline);
    assert!(
        replaced.is_some(),
        "no replacement within {HOLD_MAX:?} of the {cut:?} cut\n{}",
        m.c.logs()
    );
    assert!(
        recovered.is_some(),
        "not one copy on {} within {RECOVERY_MAX:?} of healing: {:?}\n{}",
        m.names[owner],
        m.copies(),
        m.c.logs()
    );
}

#[test]
fn an_owner_that_cannot_send_is_fenced_before_its_replacement_starts() {
    one_way_cut("send", 61, 1, Cut::Send);
}

#[test]
fn an_owner_that_cannot_receive_is_fenced_before_its_replacement_starts() {
    one_way_cut("recv", 62, 2, Cut::Receive);
}

/// The owner is heard again just before the others' fencing delay ends: its successor may still
/// hold it dead and start the replica while the peers that already hear it again confirm so, which
/// would let the owner start too if its claim, published all through the cut but seen by nobody,
/// counted (docs/reconcile.md, rule 6). Needs five agents and a successor whose name is above the
/// owner's (the lower name wins a claim tie otherwise): `db` on n1..n5 is owned by n3, then n4.
/// A first cut measures when the successor starts; the next ones heal that long after the cut,
/// less a lead.
#[test]
fn an_owner_heard_again_just_before_its_replacement_starts_does_not_start_a_second_copy() {
    let Some(mut m) = Mesh::start("heal", 65, 5, agents().max(5)) else {
        return;
    };
    let owner = m.owner();
    let origin = Instant::now();
    m.hosts.cut(owner, Cut::Send);
    let first = m.replaced(owner, HOLD_MAX);
    let successor = m
        .copies()
        .iter()
        .find_map(|c| c.host.filter(|h| *h != owner));
    m.hosts.heal(owner, Cut::Send);
    let takes = first.expect("the others took over") - origin;
    let successor = successor.expect("a copy on another host");
    assert!(
        m.names[successor] > m.names[owner],
        "the successor {} is below the owner {}: this case needs another workload name",
        m.names[successor],
        m.names[owner]
    );
    let mut rounds = vec![format!(
        "cut: {} started it {} after the cut",
        m.names[successor],
        secs(takes)
    )];
    let mut recovered = m.settled(Some(owner), RECOVERY_MAX).is_some();
    for lead_ms in [200, 500, 800] {
        if !recovered {
            break;
        }
        let cut = Instant::now();
        m.hosts.cut(owner, Cut::Send);
        std::thread::sleep(takes.saturating_sub(Duration::from_millis(lead_ms)));
        m.hosts.heal(owner, Cut::Send);
        let healed = cut.elapsed();
        let settled = m.settled(Some(owner), RECOVERY_MAX);
        recovered = settled.is_some();
        rounds.push(format!(
            "cut at {}, healed {} later (lead {lead_ms} ms), one copy on {} {} after healing",
            secs(cut - origin),
            secs(healed),
            m.names[owner],
            settled.map_or("never".into(), secs)
        ));
    }
    let timeline = m.timeline(origin);
    eprintln!(
        "{} of {}, successor {}:\n  {}\n{}",
        m.names[owner],
        m.names.len(),
        m.names[successor],
        rounds.join("\n  "),
        timeline.changes(&m.names)
    );
    m.assert_never_two(&timeline);
    assert!(
        recovered,
        "not one copy on {} within {RECOVERY_MAX:?} of healing: {:?}\n{}",
        m.names[owner],
        m.copies(),
        m.c.logs()
    );
}

fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).expect("signal");
}

#[test]
fn an_owner_frozen_for_30_s_is_fenced_by_its_guard_and_replaced_once() {
    let Some(mut m) = Mesh::start("stop", 63, 3, agents()) else {
        return;
    };
    let owner = m.owner();
    let agent = m.c.agents[owner].child.as_ref().unwrap().id();
    let cmdline = std::fs::read(format!("/proc/{agent}/cmdline")).unwrap();
    assert!(
        cmdline.split(|b| *b == 0).nth(1) == Some(b"agent"),
        "nsenter executed the agent in place: the child is the agent"
    );
    let fault = Instant::now();
    signal(agent, nix::sys::signal::Signal::SIGSTOP);
    let replaced = m.replaced(owner, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(30).saturating_sub(fault.elapsed()));
    signal(agent, nix::sys::signal::Signal::SIGCONT);
    let thawed = fault.elapsed();
    let recovered = m.settled(Some(owner), RECOVERY_MAX);
    let timeline = m.timeline(fault);
    eprintln!(
        "{} of {} frozen: its copy killed at {}, replacement at {}, thawed at {}, its copy back \
         at {} (settled {} after the thaw)\n{}",
        m.names[owner],
        m.names.len(),
        ms(timeline.first(0, |c| c.iter().all(|c| c.host != Some(owner)))),
        replaced.map_or("never".into(), |at| secs(at - fault)),
        secs(thawed),
        ms(timeline.first(thawed.as_millis() as i64, |c| {
            c.iter().any(|c| c.host == Some(owner))
        })),
        recovered.map_or("never".into(), secs),
        timeline.changes(&m.names)
    );
    m.assert_never_two(&timeline);
    assert!(
        replaced.is_some(),
        "no replacement while {} was frozen for 30 s\n{}",
        m.names[owner],
        m.c.logs()
    );
    assert!(
        recovered.is_some(),
        "not one copy on {} within {RECOVERY_MAX:?} of the thaw: {:?}\n{}",
        m.names[owner],
        m.copies(),
        m.c.logs()
    );
}

#[test]
fn after_a_host_dies_its_exclusive_replica_runs_elsewhere_within_the_fencing_delay_and_2_s() {
    let Some(mut m) = Mesh::start("death", 64, 4, agents()) else {
        return;
    };
    let fencing_delay = Duration::from_millis(
        shoal::node::host::HostConfig::default()
            .reconcile
            .fencing_delay_ms,
    );
    let bound = fencing_delay + Duration::from_secs(2);
    let owner = m.owner();
    let death = Instant::now();
    // The whole host dies at once: its agent, its guard and its instance.
    let killed = m.hosts.kill_all(owner);
    if let Some(mut child) = m.c.agents[owner].child.take() {
        let _ = child.wait();
    }
    // A survivor that loses sight of the majority (a false suspicion of the other survivor on a
    // loaded machine) trusts no death verdict until it regains one, and counts the fencing
    // delay from then (rule 5, agent/core/src/reconcile/exclusive.rs): the bound runs from the
    // later of the death and the last regain the new owner logged, seen by polling its log.
    let survivors: Vec<usize> = (0..m.names.len()).filter(|&i| i != owner).collect();
    let mut seen: Vec<usize> = survivors.iter().map(|&i| regains(&m.c.log(i))).collect();
    let mut regained: Vec<Option<Instant>> = vec![None; survivors.len()];
    let mut replaced = None;
    wait_until(bound * 2 + Duration::from_secs(15), || {
        for (k, &i) in survivors.iter().enumerate() {
            let count = regains(&m.c.log(i));
            if count > seen[k] {
                (seen[k], regained[k]) = (count, Some(Instant::now()));
            }
        }
        let elsewhere = m.copies().iter().find(|c| c.host != Some(owner)).cloned();
        if let Some(copy) = &elsewhere {
            replaced = Some((death.elapsed(), copy.host));
        }
        elsewhere.is_some()
    });
    std::thread::sleep(Duration::from_secs(2));
    let timeline = m.timeline(death);
    let took = replaced.map_or("never".into(), |(t, _)| secs(t));
    eprintln!(
        "host {} of {} died (pids {killed:?} killed): its replica ran elsewhere {took} later; \
         bound fencing_delay_ms {} + 2 s = {}\n{}",
        m.names[owner],
        m.names.len(),
        fencing_delay.as_millis(),
        secs(bound),
        timeline.changes(&m.names)
    );
    m.assert_never_two(&timeline);
    let (took, on) = replaced.unwrap_or_else(|| panic!("no replacement\n{}", m.c.logs()));
    let from = survivors
        .iter()
        .position(|&i| Some(i) == on)
        .and_then(|k| regained[k])
        .map_or(Duration::ZERO, |at| at.saturating_duration_since(death));
    if !from.is_zero() {
        eprintln!(
            "the new owner lost and regained its majority after the death; it regained it {} \
             after the death, so the bound counts from then",
            secs(from)
        );
    }
    assert!(
        took <= from + bound,
        "the replacement took {took:?}, more than fencing_delay_ms + 2 s = {bound:?} after the \
         later of the death and the new owner's regain of a majority ({from:?} after it)\n{}",
        m.c.logs()
    );
}

/// How many times an agent's log says it saw a majority of the mesh again.
fn regains(log: &str) -> usize {
    log.matches("majority-regained").count()
}
