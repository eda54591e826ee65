//! The limits of one endpoint's admission, their defaults, and `KEY=VALUE` settings for them
//! (`shoal agent --admission api.handshakes_max=32`).

use std::time::Duration;

use shoal_core::resources::parse_memory_bytes;
use shoal_core::spec::parse_duration_ms;

/// What an endpoint lets a remote address or a certificate hold. The arithmetic behind the
/// defaults is in docs/operations.md, "Limits before and after the handshake".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Answer a connection attempt from an address that has not proved it receives our packets
    /// with a QUIC Retry (stateless: nothing is kept until the client echoes the token), so that
    /// a flood from spoofed source addresses holds no handshake state.
    pub address_validation: bool,
    /// A handshake not finished within this long is dropped.
    pub handshake_timeout: Duration,
    /// Most handshakes in progress at once.
    pub handshakes_max: usize,
    /// Most handshakes in progress at once from one IP address.
    pub handshakes_per_ip_max: usize,
    /// At a handshake cap, the oldest handshake in progress (overall, or of the address) gives
    /// way to the new attempt; off: the new attempt is refused, as before these limits.
    pub handshake_make_room: bool,
    /// Most established connections at once (on gossip: accepted and dialed).
    pub connections_max: usize,
    /// Most established connections accepted from one IP address.
    pub connections_per_ip_max: usize,
    /// Most established connections presenting the same certificate name (on gossip, dialed
    /// ones count but are never refused).
    pub connections_per_peer_max: usize,
    /// Request frame bytes the connections of one certificate may hold being read at once (a
    /// stream waits until the whole length its frame declares fits); `None`: no budget (the
    /// gossip reader reads one stream per connection at a time instead).
    pub request_bytes_per_peer_max: Option<usize>,
}

/// Handshake timeout of both endpoints: a lost Initial is sent again after about 1 s and then 2 s
/// later (quinn's first probe timeout with its 333 ms initial RTT), so a handshake that lost two
/// packets still finishes.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

impl AdmissionConfig {
    /// Limits of the API endpoint: CLI calls (one short connection each, one certificate shared
    /// by an operator's scripts) and agents (one cached connection per peer and server name).
    pub fn api() -> Self {
        AdmissionConfig {
            address_validation: true,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            handshakes_max: 64,
            handshakes_per_ip_max: 16,
            handshake_make_room: true,
            connections_max: 256,
            connections_per_ip_max: 64,
            connections_per_peer_max: 8,
            // Two of the largest request frames (crate::wire::API_FRAME_MAX_BYTES) at once.
            request_bytes_per_peer_max: Some(8 << 20),
        }
    }

    /// Limits of the gossip endpoint: one agent per peer, usually one connection each way. The
    /// per-address cap is high because test and benchmark meshes run hundreds of agents on one
    /// loopback address; certificates are what tells agents apart.
    pub fn gossip() -> Self {
        AdmissionConfig {
            address_validation: true,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            handshakes_max: 64,
            handshakes_per_ip_max: 16,
            handshake_make_room: true,
            connections_max: 4096,
            connections_per_ip_max: 1024,
            connections_per_peer_max: 4,
            request_bytes_per_peer_max: None,
        }
    }

    /// The keys [`Self::set`] takes.
    pub const KEYS: &'static [&'static str] = &[
        "address_validation",
        "handshake_timeout",
        "handshakes_max",
        "handshakes_per_ip_max",
        "handshake_make_room",
        "connections_max",
        "connections_per_ip_max",
        "connections_per_peer_max",
        "request_bytes_per_peer_max",
    ];

    /// Sets one limit from text: `address_validation=on|off`, `handshake_make_room=on|off`,
    /// `handshake_timeout=5s`, a count for the `*_max` keys, `request_bytes_per_peer_max=8Mi|none`.
    /// Nothing changes on error.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let count = || match value.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{key}={value:?}: expected a count above zero")),
        };
        let switch = || match value.trim() {
            "on" | "true" => Ok(true),
            "off" | "false" => Ok(false),
            _ => Err(format!("{key}={value:?}: expected on or off")),
        };
        match key {
            "address_validation" => self.address_validation = switch()?,
            "handshake_make_room" => self.handshake_make_room = switch()?,
            "handshake_timeout" => {
                let ms = parse_duration_ms(value).map_err(|e| format!("{key}: {e}"))?;
                if ms == 0 {
                    return Err(format!("{key}={value:?}: must be above zero"));
                }
                self.handshake_timeout = Duration::from_millis(ms);
            }
            "handshakes_max" => self.handshakes_max = count()?,
            "handshakes_per_ip_max" => self.handshakes_per_ip_max = count()?,
            "connections_max" => self.connections_max = count()?,
            "connections_per_ip_max" => self.connections_per_ip_max = count()?,
            "connections_per_peer_max" => self.connections_per_peer_max = count()?,
            "request_bytes_per_peer_max" => {
                self.request_bytes_per_peer_max = match value.trim() {
                    "none" => None,
                    text => {
                        let bytes = parse_memory_bytes(text).map_err(|e| format!("{key}: {e}"))?;
                        let bytes = usize::try_from(bytes)
                            .ok()
                            .filter(|b| (1..=u32::MAX as usize).contains(b))
                            .ok_or_else(|| format!("{key}={value:?}: expected 1 byte to 4Gi"))?;
                        Some(bytes)
                    }
                }
            }
            _ => {
                return Err(format!(
                    "unknown admission limit {key:?} (known: {})",
                    Self::KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_or_say_what_is_wrong() {
        let mut config = AdmissionConfig::api();
        for (key, value) in [
            ("address_validation", "off"),
            ("handshake_timeout", "30s"),
            ("handshakes_max", "256"),
            ("request_bytes_per_peer_max", "none"),
        ] {
            config.set(key, value).unwrap();
        }
        assert!(!config.address_validation);
        assert_eq!(config.handshake_timeout, Duration::from_secs(30));
        assert_eq!(config.handshakes_max, 256);
        assert_eq!(config.request_bytes_per_peer_max, None);
        config.set("request_bytes_per_peer_max", "4Mi").unwrap();
        assert_eq!(config.request_bytes_per_peer_max, Some(4 << 20));

        let before = config.clone();
        for (key, value, says) in [
            ("handshakes_max", "0", "above zero"),
            ("handshakes_max", "many", "count"),
            ("address_validation", "maybe", "on or off"),
            ("handshake_timeout", "0s", "above zero"),
            ("retry", "on", "unknown admission limit"),
        ] {
            let err = config.set(key, value).unwrap_err();
            assert!(err.contains(says), "{key}={value}: {err}");
        }
        assert_eq!(config, before);
    }
}
