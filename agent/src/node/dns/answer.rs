//! [`answer`]: one DNS query's bytes in, the response's bytes out (or a reason to drop it),
//! computed from an [`EndpointTable`]. Pure: the server tasks call it; tests call it directly.
//!
//! Names under the zone (default `shoal.`):
//! - `NAME` A/AAAA: the hosts of NAME's serving replicas;
//! - `REPLICA.NAME` A/AAAA: that replica's host;
//! - `_PORT._tcp.NAME` / `_PORT._udp.NAME` SRV (and `_PORT._tcp.REPLICA.NAME`): for a port the
//!   spec names PORT (a process's `ports`, a container's named mapping), each serving replica's
//!   own host port of that name (allocated by its agent, or fixed); for a container port number
//!   PORT published on a fixed host port, that host port; the target being `REPLICA.NAME`
//!   (whose addresses go in the additional section).

use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SRV};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};

use super::table::{EndpointTable, WorkloadEndpoints};

/// Time to live of every answer, seconds: short, so a resolver's cache follows health within
/// a few seconds of the agent.
pub const TTL_SECS: u32 = 5;
/// Longest query accepted, bytes; longer ones are dropped (a question needs far fewer).
pub const QUERY_BYTES_MAX: usize = 1024;
/// Largest UDP response, whatever the query's EDNS size says (the DNS flag day's 1232).
pub const UDP_PAYLOAD_MAX: u16 = 1232;
/// Largest UDP response as a multiple of its query's size: a spoofed query reflects at most this
/// many times its bytes at the victim. Larger answers go out truncated (TC=1) and the resolver
/// asks again over TCP, which cannot be spoofed.
pub const AMPLIFICATION_MAX: usize = 5;
/// Largest response over TCP (the two-byte length prefix's bound).
pub const TCP_PAYLOAD_MAX: usize = 65_535;
/// Most records in one answer section.
pub const ANSWERS_MAX: usize = 64;

/// How the query came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// UDP: the response is bounded by the query's EDNS size (512 without) and by
    /// [`AMPLIFICATION_MAX`] times the query's size, else truncated.
    Udp,
    /// TCP: the response is bounded by [`TCP_PAYLOAD_MAX`].
    Tcp,
}

/// Why a query got no response at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// Shorter than a DNS header: nothing to answer to.
    Short,
    /// Longer than [`QUERY_BYTES_MAX`].
    Oversized,
    /// A response, not a query (answering it could loop between two servers).
    NotQuery,
}

/// What to do with a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Send these bytes back.
    Reply {
        /// The encoded response.
        bytes: Vec<u8>,
        /// Its response code.
        rcode: ResponseCode,
        /// The answer did not fit and was left out (TC set).
        truncated: bool,
    },
    /// Send nothing.
    Drop(Dropped),
}

/// The zone served: a lowercase, fully qualified name such as `shoal.`.
#[derive(Clone, Debug)]
pub struct Zone {
    origin: Name,
}

impl Zone {
    /// The zone `domain` (`shoal`, `shoal.`, `svc.example.`); an error says what is wrong.
    pub fn new(domain: &str) -> Result<Zone, String> {
        let mut origin = Name::from_ascii(domain)
            .map_err(|e| format!("--dns-domain {domain:?} is not a domain name: {e}"))?
            .to_lowercase();
        origin.set_fqdn(true);
        if origin.is_root() {
            return Err("--dns-domain must not be the root".to_string());
        }
        Ok(Zone { origin })
    }

    /// The zone's name, fully qualified.
    pub fn origin(&self) -> &Name {
        &self.origin
    }
}

/// The response to `query`, from `table`. Never panics, whatever the bytes.
pub fn answer(table: &EndpointTable, zone: &Zone, query: &[u8], transport: Transport) -> Outcome {
    if query.len() > QUERY_BYTES_MAX {
        return Outcome::Drop(Dropped::Oversized);
    }
    if query.len() < 12 {
        return Outcome::Drop(Dropped::Short);
    }
    if query[2] & 0x80 != 0 {
        return Outcome::Drop(Dropped::NotQuery);
    }
    let id = u16::from_be_bytes([query[0], query[1]]);
    let Ok(request) = Message::from_vec(query) else {
        return encode(
            Message::error_msg(id, OpCode::Query, ResponseCode::FormErr),
            512,
        );
    };
    let mut response = Message::response(id, request.metadata.op_code);
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.metadata.checking_disabled = request.metadata.checking_disabled;
    response.queries = request.queries.clone();
    if request.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(UDP_PAYLOAD_MAX);
        response.set_edns(edns);
    }
    let limit = match transport {
        Transport::Udp => usize::from(request.max_payload().min(UDP_PAYLOAD_MAX))
            .min(query.len().saturating_mul(AMPLIFICATION_MAX)),
        Transport::Tcp => TCP_PAYLOAD_MAX,
    };
    if request.metadata.message_type != MessageType::Query {
        return Outcome::Drop(Dropped::NotQuery);
    }
    response.metadata.response_code = if request.metadata.op_code != OpCode::Query {
        ResponseCode::NotImp
    } else if request.queries.len() != 1 {
        ResponseCode::FormErr
    } else {
        resolve(table, zone, &request, &mut response)
    };
    encode(response, limit)
}

/// Fills `response` for the one question of `request`; returns the response code.
fn resolve(
    table: &EndpointTable,
    zone: &Zone,
    request: &Message,
    response: &mut Message,
) -> ResponseCode {
    let question = &request.queries[0];
    let name = question.name();
    if question.query_class() != DNSClass::IN || !zone.origin.zone_of(name) {
        return ResponseCode::Refused;
    }
    response.metadata.authoritative = true;
    let relative = usize::from(name.num_labels() - zone.origin.num_labels());
    let labels: Vec<String> = name
        .iter()
        .take(relative)
        .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
        .collect();
    let found = match labels.as_slice() {
        [] => Some(Found::Apex),
        [workload] => table.get(workload).map(|w| Found::Hosts(w, None)),
        [replica, workload] => {
            replica_of(table, workload, replica).map(|(w, r)| Found::Hosts(w, Some(r)))
        }
        [port, proto, workload] => service(table, workload, None, port, proto),
        [port, proto, replica, workload] => replica_of(table, workload, replica)
            .and_then(|(_, r)| service(table, workload, Some(r), port, proto)),
        _ => None,
    };
    let Some(found) = found else {
        return ResponseCode::NXDomain;
    };
    let qtype = question.query_type();
    match found {
        Found::Apex => {}
        Found::Hosts(w, replica) => {
            let addrs = w.serving_addrs(replica);
            response.answers = address_records(name, &addrs, qtype);
        }
        Found::Service(w, replica, port)
            if qtype == RecordType::SRV || qtype == RecordType::ANY =>
        {
            service_records(zone, name, w, replica, port, response);
        }
        Found::Service(..) => {}
    }
    ResponseCode::NoError
}

enum Found<'a> {
    Apex,
    Hosts(&'a WorkloadEndpoints, Option<u32>),
    /// A workload, maybe one replica, and the host port.
    Service(&'a WorkloadEndpoints, Option<u32>, HostPort),
}

/// Where an SRV answer's port comes from.
enum HostPort {
    /// The same on every host (`None`: published on a port the engine picks, unknown here).
    Fixed(Option<u16>),
    /// Each instance's own port of this name.
    Named(String),
}

fn replica_of<'a>(
    table: &'a EndpointTable,
    workload: &str,
    replica: &str,
) -> Option<(&'a WorkloadEndpoints, u32)> {
    let w = table.get(workload)?;
    // Digits only: `+1` and `01` are not replica names.
    let canonical = !replica.is_empty() && replica.bytes().all(|b| b.is_ascii_digit());
    let index: u32 = replica.parse().ok().filter(|_| canonical)?;
    (index < w.replicas && index.to_string() == replica).then_some((w, index))
}

fn service<'a>(
    table: &'a EndpointTable,
    workload: &str,
    replica: Option<u32>,
    port: &str,
    proto: &str,
) -> Option<Found<'a>> {
    let w = table.get(workload)?;
    let port = port.strip_prefix('_')?;
    let protocol = proto.strip_prefix('_')?;
    let named = w
        .ports
        .iter()
        .find(|p| p.name.as_deref() == Some(port) && p.protocol == protocol);
    if let Some(named) = named {
        let name = named.name.clone().unwrap_or_default();
        return Some(Found::Service(w, replica, HostPort::Named(name)));
    }
    let container: u16 = port.parse().ok()?;
    let published = w
        .ports
        .iter()
        .find(|p| p.container == Some(container) && p.protocol == protocol)?;
    Some(Found::Service(w, replica, HostPort::Fixed(published.host)))
}

fn address_records(name: &Name, addrs: &[IpAddr], qtype: RecordType) -> Vec<Record> {
    addrs
        .iter()
        .filter_map(|addr| match (addr, qtype) {
            (IpAddr::V4(v4), RecordType::A | RecordType::ANY) => Some(RData::A(A(*v4))),
            (IpAddr::V6(v6), RecordType::AAAA | RecordType::ANY) => Some(RData::AAAA(AAAA(*v6))),
            _ => None,
        })
        .take(ANSWERS_MAX)
        .map(|rdata| Record::from_rdata(name.clone(), TTL_SECS, rdata))
        .collect()
}

fn service_records(
    zone: &Zone,
    name: &Name,
    w: &WorkloadEndpoints,
    replica: Option<u32>,
    port: HostPort,
    response: &mut Message,
) {
    let mut last = None;
    for e in w
        .serving()
        .filter(|e| replica.is_none_or(|r| e.replica == r))
    {
        if response.answers.len() >= ANSWERS_MAX {
            break;
        }
        let Some(addr) = e.addr else { continue };
        let port = match &port {
            HostPort::Fixed(Some(p)) => *p,
            HostPort::Fixed(None) => return,
            HostPort::Named(name) => match e.ports.get(name) {
                Some(p) => *p,
                None => continue, // started before the port was declared
            },
        };
        if last == Some((e.replica, port)) {
            continue; // a second copy (handoff): the target name already answers both
        }
        last = Some((e.replica, port));
        let Ok(target) = Name::parse(&format!("{}.{}", e.replica, w.name), Some(&zone.origin))
        else {
            continue;
        };
        let srv = SRV::new(0, 10, port, target.clone());
        response
            .answers
            .push(Record::from_rdata(name.clone(), TTL_SECS, RData::SRV(srv)));
        let rdata = match addr {
            IpAddr::V4(v4) => RData::A(A(v4)),
            IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
        };
        response
            .additionals
            .push(Record::from_rdata(target, TTL_SECS, rdata));
    }
}

/// Encodes `response` within `limit` bytes: when it does not fit, the records go and TC is set
/// (the resolver asks again over TCP).
fn encode(mut response: Message, limit: usize) -> Outcome {
    let rcode = response.metadata.response_code;
    let Ok(bytes) = response.to_vec() else {
        return server_failure(response);
    };
    if bytes.len() <= limit {
        return Outcome::Reply {
            bytes,
            rcode,
            truncated: false,
        };
    }
    response.answers.clear();
    response.additionals.clear();
    response.authorities.clear();
    response.metadata.truncation = true;
    match response.to_vec() {
        Ok(bytes) if bytes.len() <= limit => Outcome::Reply {
            bytes,
            rcode,
            truncated: true,
        },
        _ => server_failure(response),
    }
}

/// The truncated form of a response this module encoded (TC=1, no records: the header, the
/// question and EDNS), for a source over its rate ([`super::limit`]); `None` if `response` does
/// not decode.
pub fn truncated(response: &[u8]) -> Option<Vec<u8>> {
    let mut message = Message::from_vec(response).ok()?;
    message.answers.clear();
    message.additionals.clear();
    message.authorities.clear();
    message.metadata.truncation = true;
    message.to_vec().ok()
}

/// A bare SERVFAIL, for a response that cannot be encoded (never expected).
fn server_failure(response: Message) -> Outcome {
    let id = response.metadata.id;
    let failure = Message::error_msg(id, OpCode::Query, ResponseCode::ServFail);
    match failure.to_vec() {
        Ok(bytes) => Outcome::Reply {
            bytes,
            rcode: ResponseCode::ServFail,
            truncated: false,
        },
        Err(_) => Outcome::Drop(Dropped::Short),
    }
}
