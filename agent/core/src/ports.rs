//! [`PortBook`]: the host ports this node has handed to its instances, and the allocation of new
//! ones from the agent's `--port-range`.
//!
//! Pure: the shell says which ports the host already uses (a predicate that tries to bind them)
//! and what its runtime lists; the book decides. A port is held from the moment it is allocated
//! for a start until the runtime lists that instance as exited (or no longer lists it), so two
//! instances on one host never get the same port, even while a start is in flight. An instance
//! the agent adopts after a restart carries its ports (in its recorded environment or labels):
//! [`PortBook::handle_listed`] holds them again, whatever the range is now.
//!
//! A replica that starts again gets its previous ports back when they are still free, so a
//! restart does not move it in DNS.

use std::collections::BTreeMap;

use crate::instance::ReplicaId;

/// The default `--port-range`: above the registered ports most services take, below Linux's
/// ephemeral range (32768-60999), where outgoing connections would take them.
pub const PORT_RANGE_DEFAULT: PortRange = PortRange {
    low: 20_000,
    high: 32_767,
};
/// Most ports one allocation tries to bind before it gives up (the rest of the range may still
/// be free: the next start tries again from where this one stopped).
pub const BIND_CHECKS_MAX: usize = 256;
/// Most replicas whose last ports are remembered for their next start.
pub const REMEMBERED_MAX: usize = 4096;
/// Rounds a finished start keeps its ports without the runtime listing its instance.
const UNLISTED_ROUNDS_MAX: u32 = 8;

/// An inclusive range of ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// The lowest port handed out.
    pub low: u16,
    /// The highest port handed out.
    pub high: u16,
}

impl PortRange {
    /// Parses `LOW-HIGH` (`20000-32767`); both at least 1, `LOW <= HIGH`.
    pub fn parse(text: &str) -> Result<PortRange, String> {
        let bad = || format!("{text:?} is not a port range: write LOW-HIGH, e.g. 20000-32767");
        let (low, high) = text.split_once('-').ok_or_else(bad)?;
        let low: u16 = low.trim().parse().map_err(|_| bad())?;
        let high: u16 = high.trim().parse().map_err(|_| bad())?;
        if low == 0 || low > high {
            return Err(format!(
                "{text:?}: the range must start at 1 or more and not end below its start"
            ));
        }
        Ok(PortRange { low, high })
    }

    /// How many ports it holds.
    pub fn len(self) -> usize {
        usize::from(self.high - self.low) + 1
    }

    /// Never empty (a range holds at least its `low`); for clippy's `len` rule.
    pub fn is_empty(self) -> bool {
        false
    }

    /// Whether `port` is in it.
    pub fn contains(self, port: u16) -> bool {
        (self.low..=self.high).contains(&port)
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.low, self.high)
    }
}

/// Why an allocation failed. Nothing is held after it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// Every port of the range is held by this node's instances or used on the host.
    #[error(
        "no free port in {range} for {replica} ({held} held by this node's instances, \
         {in_use} used by other programs): widen --port-range or run fewer instances here"
    )]
    Exhausted {
        /// The range.
        range: PortRange,
        /// The replica that wanted a port.
        replica: String,
        /// Ports of the range held by this node's instances.
        held: usize,
        /// Ports of the range found in use on the host.
        in_use: usize,
    },
    /// A host port the spec fixes is in use on this host: by another workload's instance that
    /// fixes it too, or by another program. Placement does not know fixed numbers.
    #[error(
        "host port {port}/{protocol}, which {replica}'s spec fixes, is in use on this host (by \
         another workload that fixes it, or another program): two workloads that fix one port \
         cannot share a host; keep them apart with placement constraints, or leave the number to \
         the agent"
    )]
    FixedInUse {
        /// The port.
        port: u16,
        /// `tcp` or `udp`.
        protocol: &'static str,
        /// The replica that wanted it.
        replica: String,
    },
    /// [`BIND_CHECKS_MAX`] candidates in a row were in use on the host.
    #[error(
        "no free port for {replica}: the {tried} ports tried in {range} are used by other \
         programs on this host; the next start tries further"
    )]
    Busy {
        /// The range.
        range: PortRange,
        /// The replica.
        replica: String,
        /// Ports tried.
        tried: usize,
    },
}

/// Who holds a port.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Holder {
    /// A start in flight (its ticket); `Some(handle)` once the runtime answered.
    Start {
        ticket: u64,
        handle: Option<String>,
        unlisted_rounds: u32,
    },
    /// An instance the runtime lists alive.
    Instance(String),
}

/// One instance as the runtime lists it, for [`PortBook::handle_listed`].
#[derive(Clone, Debug)]
pub struct Listed<'a> {
    /// The runtime's handle.
    pub handle: &'a str,
    /// Its replica.
    pub replica: &'a ReplicaId,
    /// A process or container may be alive (it holds its ports).
    pub alive: bool,
    /// Its ports by name, as recorded with it.
    pub ports: &'a BTreeMap<String, u16>,
}

/// The ports held on this node and the next place to look for free ones.
#[derive(Clone, Debug)]
pub struct PortBook {
    range: PortRange,
    held: BTreeMap<u16, Holder>,
    /// Each replica's last ports, preferred by its next start.
    last: BTreeMap<ReplicaId, BTreeMap<String, u16>>,
    /// Where the next search starts (round robin: a port just released is not reused at once).
    cursor: u16,
    tickets: u64,
}

impl PortBook {
    /// An empty book over `range`.
    pub fn new(range: PortRange) -> PortBook {
        PortBook {
            range,
            held: BTreeMap::new(),
            last: BTreeMap::new(),
            cursor: range.low,
            tickets: 0,
        }
    }

    /// The range it allocates from.
    pub fn range(&self) -> PortRange {
        self.range
    }

    /// Allocates a port for each of `names` for a start of `replica`: its last ports first when
    /// still free, then the range from the cursor on, skipping held ports and those `in_use`
    /// says the host already uses (called at most [`BIND_CHECKS_MAX`] times). Returns the ports
    /// and a ticket for [`PortBook::handle_started`] or [`PortBook::handle_start_failed`].
    pub fn allocate(
        &mut self,
        replica: &ReplicaId,
        names: &[&str],
        in_use: &mut dyn FnMut(u16) -> bool,
    ) -> Result<(BTreeMap<String, u16>, u64), PortError> {
        self.tickets += 1;
        let ticket = self.tickets;
        let mut out = BTreeMap::new();
        let mut checks = 0usize;
        let mut busy = 0usize;
        let last = self.last.get(replica).cloned().unwrap_or_default();
        for name in names {
            let preferred = last
                .get(*name)
                .copied()
                .filter(|p| self.range.contains(*p) && !self.held.contains_key(p));
            if let Some(port) = preferred {
                checks += 1;
                if !in_use(port) {
                    self.hold(port, ticket);
                    out.insert(name.to_string(), port);
                    continue;
                }
            }
            match self.search(&mut checks, &mut busy, in_use) {
                Some(port) => {
                    self.hold(port, ticket);
                    out.insert(name.to_string(), port);
                }
                None => {
                    self.release_ticket(ticket);
                    let replica = replica.to_string();
                    let range = self.range;
                    if checks >= BIND_CHECKS_MAX && busy == checks {
                        return Err(PortError::Busy {
                            range,
                            replica,
                            tried: checks,
                        });
                    }
                    let held = self.held.keys().filter(|p| range.contains(**p)).count();
                    return Err(PortError::Exhausted {
                        range,
                        replica,
                        held,
                        in_use: busy,
                    });
                }
            }
        }
        if !out.is_empty() {
            self.remember(replica, &out);
        }
        Ok((out, ticket))
    }

    /// The next free port from the cursor, wrapping once around the range.
    fn search(
        &mut self,
        checks: &mut usize,
        busy: &mut usize,
        in_use: &mut dyn FnMut(u16) -> bool,
    ) -> Option<u16> {
        let range = self.range;
        let start = if range.contains(self.cursor) {
            self.cursor
        } else {
            range.low
        };
        let offset = usize::from(start - range.low);
        for step in 0..range.len() {
            let port = range.low + ((offset + step) % range.len()) as u16;
            if self.held.contains_key(&port) {
                continue;
            }
            if *checks >= BIND_CHECKS_MAX {
                return None;
            }
            *checks += 1;
            if in_use(port) {
                *busy += 1;
                continue;
            }
            self.cursor = if port == range.high {
                range.low
            } else {
                port + 1
            };
            return Some(port);
        }
        None
    }

    fn hold(&mut self, port: u16, ticket: u64) {
        let previous = self.held.insert(
            port,
            Holder::Start {
                ticket,
                handle: None,
                unlisted_rounds: 0,
            },
        );
        assert!(previous.is_none(), "port {port} allocated twice");
    }

    fn remember(&mut self, replica: &ReplicaId, ports: &BTreeMap<String, u16>) {
        self.last.insert(replica.clone(), ports.clone());
        while self.last.len() > REMEMBERED_MAX {
            self.last.pop_first();
        }
    }

    fn release_ticket(&mut self, ticket: u64) {
        self.held
            .retain(|_, h| !matches!(h, Holder::Start { ticket: t, .. } if *t == ticket));
    }

    /// The start of `ticket` gave instance `handle`: its ports stay held until the runtime lists
    /// it (then as the instance's) or [`UNLISTED_ROUNDS_MAX`] lists pass without it.
    pub fn handle_started(&mut self, ticket: u64, handle: &str) {
        for holder in self.held.values_mut() {
            if let Holder::Start {
                ticket: t,
                handle: h,
                ..
            } = holder
            {
                if *t == ticket {
                    *h = Some(handle.to_string());
                }
            }
        }
    }

    /// The start of `ticket` failed: nothing runs, its ports are free again.
    pub fn handle_start_failed(&mut self, ticket: u64) {
        self.release_ticket(ticket);
    }

    /// What the runtime lists now: ports of alive instances are held (adopted ones too, even
    /// outside the range), those of exited or vanished instances released; starts in flight keep
    /// theirs.
    pub fn handle_listed(&mut self, listed: &[Listed<'_>]) {
        let alive: BTreeMap<&str, &Listed<'_>> = listed
            .iter()
            .filter(|l| l.alive)
            .map(|l| (l.handle, l))
            .collect();
        let listed_handles: std::collections::BTreeSet<&str> =
            listed.iter().map(|l| l.handle).collect();
        self.held.retain(|_, holder| match holder {
            Holder::Instance(_) => false, // held again below if still alive
            Holder::Start { handle: None, .. } => true,
            Holder::Start {
                handle: Some(h),
                unlisted_rounds,
                ..
            } => {
                *unlisted_rounds += 1;
                !listed_handles.contains(h.as_str()) && *unlisted_rounds <= UNLISTED_ROUNDS_MAX
            }
        });
        for l in alive.values() {
            for port in l.ports.values() {
                // A start in flight cannot hold a port an alive instance has: both were free of
                // each other when allocated, and adoption happens before any start.
                self.held
                    .entry(*port)
                    .or_insert_with(|| Holder::Instance(l.handle.to_string()));
            }
        }
        for l in listed.iter().filter(|l| !l.ports.is_empty()) {
            if !self.last.contains_key(l.replica) {
                self.remember(l.replica, l.ports);
            }
        }
    }

    /// Whether `port` is held.
    pub fn is_held(&self, port: u16) -> bool {
        self.held.contains_key(&port)
    }

    /// How many ports are held.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Asserts what must always hold: the cursor is in the range, every remembered set is
    /// bounded, and no ticket was issued that is not counted.
    pub fn check_invariants(&self) {
        assert!(self.range.contains(self.cursor), "cursor out of the range");
        assert!(self.last.len() <= REMEMBERED_MAX);
        for holder in self.held.values() {
            if let Holder::Start { ticket, .. } = holder {
                assert!(*ticket <= self.tickets, "a ticket from the future");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(low: u16, high: u16) -> PortRange {
        PortRange { low, high }
    }

    fn free(_: u16) -> bool {
        false
    }

    fn web(i: u32) -> ReplicaId {
        ReplicaId::new("web", i)
    }

    #[test]
    fn ranges_parse_and_refuse() {
        assert_eq!(PortRange::parse("20000-32767"), Ok(PORT_RANGE_DEFAULT));
        assert_eq!(PortRange::parse("5-5").map(|r| r.len()), Ok(1));
        assert!(PortRange::parse("9-8").is_err());
        assert!(PortRange::parse("0-8").is_err());
        assert!(PortRange::parse("8000").is_err());
        assert!(PortRange::parse("a-b").is_err());
        assert!(PortRange::parse("1-70000").is_err());
    }

    #[test]
    fn replicas_on_one_host_never_share_a_port() {
        let mut book = PortBook::new(range(20000, 20009));
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..5 {
            let (ports, _) = book
                .allocate(&web(i), &["http", "admin"], &mut free)
                .unwrap();
            assert_eq!(ports.len(), 2);
            for p in ports.values() {
                assert!(seen.insert(*p), "port {p} handed out twice");
                assert!(range(20000, 20009).contains(*p));
            }
            book.check_invariants();
        }
        assert_eq!(book.held_count(), 10);
        let err = book.allocate(&web(5), &["http"], &mut free).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no free port in 20000-20009 for web/5 (10 held by this node's instances, 0 used \
             by other programs): widen --port-range or run fewer instances here"
        );
    }

    #[test]
    fn ports_in_use_on_the_host_are_skipped() {
        let mut book = PortBook::new(range(20000, 20003));
        let mut in_use = |p: u16| p == 20000 || p == 20001;
        let (ports, _) = book.allocate(&web(0), &["http"], &mut in_use).unwrap();
        assert_eq!(ports["http"], 20002);
        let (ports, _) = book.allocate(&web(1), &["http"], &mut in_use).unwrap();
        assert_eq!(ports["http"], 20003);
        let err = book.allocate(&web(2), &["http"], &mut in_use).unwrap_err();
        assert!(
            matches!(
                err,
                PortError::Exhausted {
                    held: 2,
                    in_use: 2,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(book.held_count(), 2, "a failed allocation holds nothing");
    }

    #[test]
    fn a_failed_allocation_releases_what_it_took() {
        let mut book = PortBook::new(range(20000, 20001));
        book.allocate(&web(0), &["a"], &mut free).unwrap();
        let err = book.allocate(&web(1), &["a", "b"], &mut free).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("no free port in 20000-20001 for web/1"));
        assert_eq!(book.held_count(), 1);
    }

    #[test]
    fn bind_checks_are_bounded() {
        let mut book = PortBook::new(range(1000, 60000));
        let mut calls = 0;
        let mut busy = |_: u16| {
            calls += 1;
            true
        };
        let err = book.allocate(&web(0), &["http"], &mut busy).unwrap_err();
        assert!(matches!(
            err,
            PortError::Busy {
                tried: BIND_CHECKS_MAX,
                ..
            }
        ));
        assert_eq!(calls, BIND_CHECKS_MAX);
    }

    #[test]
    fn a_start_holds_until_listed_and_an_exit_releases() {
        let mut book = PortBook::new(range(20000, 20001));
        let (ports, ticket) = book.allocate(&web(0), &["http"], &mut free).unwrap();
        let port = ports["http"];
        // A list taken before the start finished does not release it.
        book.handle_listed(&[]);
        assert!(book.is_held(port));
        book.handle_started(ticket, "h0");
        let w0 = web(0);
        let listed = |alive| Listed {
            handle: "h0",
            replica: &w0,
            alive,
            ports: &ports,
        };
        book.handle_listed(&[listed(true)]);
        assert!(book.is_held(port));
        book.handle_listed(&[listed(false)]);
        assert!(!book.is_held(port), "an exited instance releases its port");
        // A failed start releases at once.
        let (ports, ticket) = book.allocate(&web(1), &["http"], &mut free).unwrap();
        book.handle_start_failed(ticket);
        assert!(!book.is_held(ports["http"]));
        book.check_invariants();
    }

    #[test]
    fn a_started_instance_never_listed_lets_go_after_a_few_lists() {
        let mut book = PortBook::new(range(20000, 20000));
        let (_, ticket) = book.allocate(&web(0), &["http"], &mut free).unwrap();
        book.handle_started(ticket, "gone");
        for _ in 0..UNLISTED_ROUNDS_MAX {
            book.handle_listed(&[]);
        }
        assert_eq!(book.held_count(), 1);
        book.handle_listed(&[]);
        assert_eq!(book.held_count(), 0);
    }

    #[test]
    fn adopted_instances_keep_their_ports_and_a_restart_gets_its_port_back() {
        // A fresh book (an agent restart) lists an instance started by the previous agent.
        let mut book = PortBook::new(range(20000, 20009));
        let ports = BTreeMap::from([("http".to_string(), 20007)]);
        let outside = BTreeMap::from([("http".to_string(), 9000)]);
        let (w0, w1) = (web(0), web(1));
        book.handle_listed(&[
            Listed {
                handle: "h0",
                replica: &w0,
                alive: true,
                ports: &ports,
            },
            Listed {
                handle: "h1",
                replica: &w1,
                alive: true,
                ports: &outside,
            },
        ]);
        assert!(book.is_held(20007) && book.is_held(9000), "held again");
        for i in 2..11 {
            let got = book.allocate(&web(i), &["http"], &mut free);
            if let Ok((p, _)) = got {
                assert_ne!(p["http"], 20007);
            }
        }
        // web/0 exits; its next start gets 20007 back.
        let mut book = PortBook::new(range(20000, 20009));
        let w0 = web(0);
        let listed = |alive| Listed {
            handle: "h0",
            replica: &w0,
            alive,
            ports: &ports,
        };
        book.handle_listed(&[listed(true)]);
        book.allocate(&web(3), &["http"], &mut free).unwrap();
        book.handle_listed(&[listed(false)]);
        let (again, _) = book.allocate(&web(0), &["http"], &mut free).unwrap();
        assert_eq!(again["http"], 20007);
    }
}
