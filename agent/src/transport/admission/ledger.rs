//! What an endpoint's connections hold, counted by state, by IP address and by certificate name,
//! and whether one more may start a handshake, become established, or join its certificate's
//! connections. Pure: the shell (`super`) asks before each step and reports each end.
//!
//! At a handshake cap the oldest handshake in progress (of the address, or overall) gives way to
//! the new attempt, as in a SYN cache ([`AdmissionConfig::handshake_make_room`]): a legitimate
//! handshake finishes in a few round trips, so a flood of validated attempts must bring a cap's
//! worth of new ones within that time to push it out, where refusing new attempts locks every
//! caller out as soon as the flood holds the cap. Established connections are never pushed out:
//! at their caps the new one is refused.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use super::AdmissionConfig;

/// A cap: what refused a connection, or made the oldest handshake give way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// Handshakes in progress at [`AdmissionConfig::handshakes_max`].
    HandshakesMax,
    /// Handshakes in progress from one IP at [`AdmissionConfig::handshakes_per_ip_max`].
    HandshakesPerIp,
    /// Established connections at [`AdmissionConfig::connections_max`].
    ConnectionsMax,
    /// Connections from one IP at [`AdmissionConfig::connections_per_ip_max`].
    ConnectionsPerIp,
    /// Connections of one certificate at [`AdmissionConfig::connections_per_peer_max`].
    ConnectionsPerPeer,
}

impl Cap {
    /// The cap as metrics and logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Cap::HandshakesMax => "handshakes_max",
            Cap::HandshakesPerIp => "handshakes_per_ip",
            Cap::ConnectionsMax => "connections_max",
            Cap::ConnectionsPerIp => "connections_per_ip",
            Cap::ConnectionsPerPeer => "connections_per_peer",
        }
    }
}

impl std::fmt::Display for Cap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A handshake in progress; ids grow, so the smallest is the oldest.
pub type HandshakeId = u64;

/// An attempt let in: its handshake's id, and the handshake that gave way to it, if one did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// The new handshake.
    pub id: HandshakeId,
    /// The oldest handshake of the address or overall, dropped for the new one, and which cap
    /// made it give way. The shell must abandon it.
    pub dropped: Option<(HandshakeId, IpAddr, Cap)>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct PerIp {
    handshakes: usize,
    connections: usize,
}

/// The counts. An IP address or a name has an entry only while it holds something, so the maps
/// are bounded by the caps.
#[derive(Debug)]
pub struct Ledger {
    config: AdmissionConfig,
    next_id: HandshakeId,
    /// Handshakes in progress, oldest first.
    handshakes: BTreeMap<HandshakeId, IpAddr>,
    connections: usize,
    per_ip: HashMap<IpAddr, PerIp>,
    per_peer: HashMap<String, usize>,
}

impl Ledger {
    /// Empty counts under `config`'s caps (each at least 1).
    pub fn new(config: AdmissionConfig) -> Self {
        let c = &config;
        assert!(c.handshakes_max > 0 && c.handshakes_per_ip_max > 0 && c.connections_max > 0);
        assert!(c.connections_per_ip_max > 0 && c.connections_per_peer_max > 0);
        Ledger {
            config,
            next_id: 0,
            handshakes: BTreeMap::new(),
            connections: 0,
            per_ip: HashMap::new(),
            per_peer: HashMap::new(),
        }
    }

    /// A connection attempt from `ip` (validated, when validation is on): starts a handshake,
    /// pushing out the oldest one at a handshake cap, or names the cap that refuses it (an
    /// established-connection cap: an attempt that could not become established is not worth a
    /// handshake; a handshake cap without `handshake_make_room`).
    pub fn handle_attempt(&mut self, ip: IpAddr) -> Result<Admitted, Cap> {
        let c = &self.config;
        let here = self.per_ip.get(&ip).copied().unwrap_or_default();
        if self.connections >= c.connections_max {
            return Err(Cap::ConnectionsMax);
        }
        if here.connections >= c.connections_per_ip_max {
            return Err(Cap::ConnectionsPerIp);
        }
        let full = if here.handshakes >= c.handshakes_per_ip_max {
            Some(Cap::HandshakesPerIp)
        } else if self.handshakes.len() >= c.handshakes_max {
            Some(Cap::HandshakesMax)
        } else {
            None
        };
        if let (Some(cap), false) = (full, c.handshake_make_room) {
            return Err(cap);
        }
        let oldest = if here.handshakes >= c.handshakes_per_ip_max {
            let of_ip = self.handshakes.iter().find(|(_, a)| **a == ip);
            of_ip.map(|(id, _)| (*id, Cap::HandshakesPerIp))
        } else if self.handshakes.len() >= c.handshakes_max {
            self.handshakes
                .first_key_value()
                .map(|(id, _)| (*id, Cap::HandshakesMax))
        } else {
            None
        };
        let dropped = oldest.map(|(id, cap)| {
            let ip = self.end_handshake(id).expect("the oldest is in progress");
            (id, ip, cap)
        });
        let id = self.next_id;
        self.next_id += 1;
        self.handshakes.insert(id, ip);
        self.per_ip.entry(ip).or_default().handshakes += 1;
        Ok(Admitted { id, dropped })
    }

    /// Handshake `id` from `ip` ended (if it had not already given way, its slot is freed). When
    /// it `succeeded`, the connection takes an established slot, or the named cap refuses it.
    pub fn handle_handshake_end(
        &mut self,
        id: HandshakeId,
        ip: IpAddr,
        succeeded: bool,
    ) -> Result<(), Cap> {
        if let Some(was) = self.end_handshake(id) {
            assert_eq!(was, ip, "handshake {id} ended from another address");
        }
        if !succeeded {
            return Ok(());
        }
        let here = self.per_ip.get(&ip).copied().unwrap_or_default();
        if self.connections >= self.config.connections_max {
            return Err(Cap::ConnectionsMax);
        }
        if here.connections >= self.config.connections_per_ip_max {
            return Err(Cap::ConnectionsPerIp);
        }
        self.per_ip.entry(ip).or_default().connections += 1;
        self.connections += 1;
        Ok(())
    }

    /// A connection this endpoint dials: counts toward [`AdmissionConfig::connections_max`] only.
    pub fn handle_dial(&mut self) -> Result<(), Cap> {
        if self.connections >= self.config.connections_max {
            return Err(Cap::ConnectionsMax);
        }
        self.connections += 1;
        Ok(())
    }

    /// An established connection presents the certificate `name`: counted; an `accepted` one is
    /// refused when the name already has its cap of connections (dialed ones never are: this
    /// endpoint chose to make them).
    pub fn handle_peer(&mut self, name: &str, accepted: bool) -> Result<(), Cap> {
        let held = self.per_peer.get(name).copied().unwrap_or(0);
        if accepted && held >= self.config.connections_per_peer_max {
            return Err(Cap::ConnectionsPerPeer);
        }
        *self.per_peer.entry(name.to_string()).or_default() += 1;
        Ok(())
    }

    /// Counts one more connection of certificate `name` past its cap: the caller has just closed
    /// the oldest of them (newest wins), whose slot is freed when its task ends.
    pub fn handle_peer_superseding(&mut self, name: &str) {
        *self.per_peer.entry(name.to_string()).or_default() += 1;
    }

    /// An established connection ended (`ip`: `None` for a dialed one).
    pub fn handle_connection_end(&mut self, ip: Option<IpAddr>) {
        assert!(
            self.connections > 0,
            "a connection ended that was never counted"
        );
        self.connections -= 1;
        if let Some(ip) = ip {
            let entry = self.per_ip.get_mut(&ip).expect("a connection from this ip");
            assert!(entry.connections > 0);
            entry.connections -= 1;
            self.forget_ip_if_idle(ip);
        }
    }

    /// A connection of certificate `name` ended; returns how many that name still has.
    pub fn handle_peer_end(&mut self, name: &str) -> usize {
        let held = self
            .per_peer
            .get_mut(name)
            .expect("a connection of this name");
        *held -= 1;
        let left = *held;
        if left == 0 {
            self.per_peer.remove(name);
        }
        left
    }

    /// Handshakes in progress.
    pub fn handshakes(&self) -> usize {
        self.handshakes.len()
    }

    /// Established connections (on gossip: accepted and dialed).
    pub fn connections(&self) -> usize {
        self.connections
    }

    /// Removes handshake `id` if in progress; returns its address.
    fn end_handshake(&mut self, id: HandshakeId) -> Option<IpAddr> {
        let ip = self.handshakes.remove(&id)?;
        let entry = self.per_ip.get_mut(&ip).expect("a handshake from this ip");
        entry.handshakes -= 1;
        self.forget_ip_if_idle(ip);
        Some(ip)
    }

    fn forget_ip_if_idle(&mut self, ip: IpAddr) {
        if self.per_ip.get(&ip) == Some(&PerIp::default()) {
            self.per_ip.remove(&ip);
        }
    }

    /// Panics if the counts disagree with each other or exceed a cap.
    pub fn check_invariants(&self) {
        let c = &self.config;
        assert!(self.handshakes.len() <= c.handshakes_max);
        assert!(self.connections <= c.connections_max);
        let handshakes: usize = self.per_ip.values().map(|p| p.handshakes).sum();
        let accepted: usize = self.per_ip.values().map(|p| p.connections).sum();
        assert_eq!(handshakes, self.handshakes.len());
        assert!(accepted <= self.connections);
        for (ip, p) in &self.per_ip {
            assert!(
                *p != PerIp::default(),
                "{ip} holds nothing but has an entry"
            );
            let in_progress = self.handshakes.values().filter(|a| *a == ip).count();
            assert_eq!(p.handshakes, in_progress, "{ip}");
            assert!(p.handshakes <= c.handshakes_per_ip_max, "{ip}: {p:?}");
            assert!(p.connections <= c.connections_per_ip_max, "{ip}: {p:?}");
        }
        assert!(self.handshakes.keys().all(|id| *id < self.next_id));
        let named: usize = self.per_peer.values().sum();
        assert!(named <= self.connections);
        assert!(self.per_peer.values().all(|n| *n > 0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> AdmissionConfig {
        AdmissionConfig {
            handshakes_max: 3,
            handshakes_per_ip_max: 2,
            connections_max: 4,
            connections_per_ip_max: 2,
            connections_per_peer_max: 1,
            ..AdmissionConfig::api()
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn attempt(l: &mut Ledger, from: u8) -> Result<(HandshakeId, Option<Cap>), Cap> {
        let admitted = l.handle_attempt(ip(from))?;
        l.check_invariants();
        Ok((admitted.id, admitted.dropped.map(|(_, _, cap)| cap)))
    }

    #[test]
    fn at_a_handshake_cap_the_oldest_gives_way() {
        let mut l = Ledger::new(small());
        assert_eq!(attempt(&mut l, 1), Ok((0, None)));
        assert_eq!(attempt(&mut l, 1), Ok((1, None)));
        // 10.0.0.1 at its cap: its oldest (0) gives way.
        let third = l.handle_attempt(ip(1)).unwrap();
        assert_eq!(third.dropped, Some((0, ip(1), Cap::HandshakesPerIp)));
        assert_eq!(attempt(&mut l, 2), Ok((3, None)));
        // The endpoint at its cap: the oldest overall (1, of 10.0.0.1) gives way to 10.0.0.3.
        let fifth = l.handle_attempt(ip(3)).unwrap();
        assert_eq!(fifth.dropped, Some((1, ip(1), Cap::HandshakesMax)));
        assert_eq!(l.handshakes(), 3);
        l.check_invariants();
        // A handshake that gave way and then ends changes nothing; one that succeeded anyway
        // becomes established.
        assert_eq!(l.handle_handshake_end(0, ip(1), false), Ok(()));
        assert_eq!(l.handle_handshake_end(1, ip(1), true), Ok(()));
        assert_eq!((l.handshakes(), l.connections()), (3, 1));
        l.check_invariants();
    }

    #[test]
    fn without_making_room_a_handshake_cap_refuses() {
        let config = AdmissionConfig {
            handshake_make_room: false,
            ..small()
        };
        let mut l = Ledger::new(config);
        assert_eq!(attempt(&mut l, 1), Ok((0, None)));
        assert_eq!(attempt(&mut l, 1), Ok((1, None)));
        assert_eq!(attempt(&mut l, 1), Err(Cap::HandshakesPerIp));
        assert_eq!(attempt(&mut l, 2), Ok((2, None)));
        assert_eq!(attempt(&mut l, 3), Err(Cap::HandshakesMax));
    }

    #[test]
    fn established_caps_refuse_new_attempts_and_finished_handshakes() {
        let mut l = Ledger::new(small());
        let a = l.handle_attempt(ip(1)).unwrap().id;
        let b = l.handle_attempt(ip(1)).unwrap().id;
        assert_eq!(l.handle_handshake_end(a, ip(1), true), Ok(()));
        assert_eq!(l.handle_handshake_end(b, ip(1), true), Ok(()));
        assert_eq!(l.handle_attempt(ip(1)), Err(Cap::ConnectionsPerIp));
        // A failed handshake only frees its slot.
        let c = l.handle_attempt(ip(2)).unwrap().id;
        let d = l.handle_attempt(ip(3)).unwrap().id;
        assert_eq!(l.handle_handshake_end(c, ip(2), false), Ok(()));
        l.handle_dial().unwrap();
        l.handle_dial().unwrap();
        assert_eq!(l.handle_attempt(ip(4)), Err(Cap::ConnectionsMax));
        assert_eq!(l.handle_dial(), Err(Cap::ConnectionsMax));
        // One that finishes over the cap (others finished meanwhile) is refused then.
        assert_eq!(
            l.handle_handshake_end(d, ip(3), true),
            Err(Cap::ConnectionsMax)
        );
        assert_eq!((l.handshakes(), l.connections()), (0, 4));
        l.check_invariants();
    }

    #[test]
    fn certificates_are_capped_on_accepted_connections_only() {
        let mut l = Ledger::new(small());
        assert_eq!(l.handle_peer("n1", true), Ok(()));
        assert_eq!(l.handle_peer("n1", true), Err(Cap::ConnectionsPerPeer));
        assert_eq!(l.handle_peer("n1", false), Ok(()));
        assert_eq!(l.handle_peer("n2", true), Ok(()));
    }

    #[test]
    fn ends_release_everything_and_leave_no_entries() {
        let mut l = Ledger::new(small());
        let a = l.handle_attempt(ip(1)).unwrap().id;
        l.handle_handshake_end(a, ip(1), true).unwrap();
        l.handle_peer("n1", true).unwrap();
        l.handle_dial().unwrap();
        l.handle_peer("n1", false).unwrap();
        assert_eq!(l.handle_peer_end("n1"), 1);
        l.handle_connection_end(None);
        assert_eq!(l.handle_peer_end("n1"), 0);
        l.handle_connection_end(Some(ip(1)));
        l.check_invariants();
        assert_eq!((l.handshakes(), l.connections()), (0, 0));
        assert!(l.per_ip.is_empty() && l.per_peer.is_empty());
    }
}
