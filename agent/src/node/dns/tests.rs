//! Tests of [`answer`] over the sample table of `table.rs`: every kind of name, every error,
//! truncation, and random bytes.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};
use proptest::prelude::*;

use super::answer::{answer, Dropped, Outcome, Transport, Zone};
use super::table::tests::{sample, spec, status};
use super::table::{EndpointTable, HostInfo, TableInput};

fn query(name: &str, qtype: RecordType) -> Message {
    let mut m = Message::new(0x1234, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    m
}

/// Asks `name` for `qtype` over UDP without EDNS: the response, decoded, and whether it was cut.
fn ask(table: &EndpointTable, name: &str, qtype: RecordType) -> Message {
    ask_with(table, query(name, qtype), Transport::Udp)
}

fn ask_with(table: &EndpointTable, q: Message, transport: Transport) -> Message {
    let zone = Zone::new("shoal").unwrap();
    match answer(table, &zone, &q.to_vec().unwrap(), transport) {
        Outcome::Reply { bytes, .. } => Message::from_vec(&bytes).expect("a decodable response"),
        Outcome::Drop(why) => panic!("dropped: {why:?}"),
    }
}

/// The answer section as text: `A 10.0.0.1`, `SRV 8080 0.web.shoal.`.
fn answers(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .map(|r| match &r.data {
            RData::A(a) => format!("A {}", a.0),
            RData::AAAA(a) => format!("AAAA {}", a.0),
            RData::SRV(s) => format!("SRV {} {}", s.port, s.target),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn a_workload_answers_its_serving_hosts() {
    let r = ask(&sample(), "web.shoal.", RecordType::A);
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert!(r.metadata.authoritative && r.metadata.recursion_desired);
    assert_eq!(r.metadata.id, 0x1234);
    assert_eq!(answers(&r), ["A 10.0.0.1", "A 10.0.0.2"]);
    assert!(r.answers.iter().all(|a| a.ttl == super::answer::TTL_SECS));
    // Names are case-insensitive; the owner name is echoed as asked.
    let r = ask(&sample(), "WEB.Shoal.", RecordType::A);
    assert_eq!(answers(&r), ["A 10.0.0.1", "A 10.0.0.2"]);
    // No IPv6 addresses: an empty NOERROR.
    let r = ask(&sample(), "web.shoal.", RecordType::AAAA);
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert!(r.answers.is_empty());
}

#[test]
fn a_replica_answers_its_host_or_nothing() {
    let t = sample();
    assert_eq!(
        answers(&ask(&t, "1.web.shoal.", RecordType::A)),
        ["A 10.0.0.2"]
    );
    let unhealthy = ask(&t, "2.web.shoal.", RecordType::A);
    assert_eq!(unhealthy.metadata.response_code, ResponseCode::NoError);
    assert!(unhealthy.answers.is_empty());
    let dead_node = ask(&t, "1.pg.shoal.", RecordType::A);
    assert_eq!(dead_node.metadata.response_code, ResponseCode::NoError);
    assert!(dead_node.answers.is_empty());
    for name in [
        "3.web.shoal.",
        "01.web.shoal.",
        "x.web.shoal.",
        "0.nope.shoal.",
    ] {
        let r = ask(&t, name, RecordType::A);
        assert_eq!(r.metadata.response_code, ResponseCode::NXDomain, "{name}");
    }
}

#[test]
fn known_names_without_serving_replicas_are_empty_and_unknown_ones_nxdomain() {
    let t = sample();
    let idle = ask(&t, "idle.shoal.", RecordType::A);
    assert_eq!(idle.metadata.response_code, ResponseCode::NoError);
    assert!(idle.answers.is_empty());
    let apex = ask(&t, "shoal.", RecordType::A);
    assert_eq!(apex.metadata.response_code, ResponseCode::NoError);
    for name in ["nope.shoal.", "a.b.c.d.web.shoal."] {
        let r = ask(&t, name, RecordType::A);
        assert_eq!(r.metadata.response_code, ResponseCode::NXDomain, "{name}");
    }
}

#[test]
fn srv_names_the_fixed_host_ports() {
    let t = sample();
    let r = ask(&t, "_80._tcp.web.shoal.", RecordType::SRV);
    assert_eq!(
        answers(&r),
        ["SRV 8080 0.web.shoal.", "SRV 8080 1.web.shoal."]
    );
    assert_eq!(r.additionals.len(), 2, "the targets' addresses");
    let one = ask(&t, "_80._tcp.1.web.shoal.", RecordType::SRV);
    assert_eq!(answers(&one), ["SRV 8080 1.web.shoal."]);
    // Published on a port the engine picks: known, but no port to give.
    let unknown_port = ask(&t, "_9000._tcp.web.shoal.", RecordType::SRV);
    assert_eq!(unknown_port.metadata.response_code, ResponseCode::NoError);
    assert!(unknown_port.answers.is_empty());
    for name in [
        "_81._tcp.web.shoal.",
        "_80._udp.web.shoal.",
        "_80._tcp.pg.shoal.",
    ] {
        let r = ask(&t, name, RecordType::SRV);
        assert_eq!(r.metadata.response_code, ResponseCode::NXDomain, "{name}");
    }
}

#[test]
fn other_zones_and_classes_are_refused() {
    let t = sample();
    let r = ask(&t, "example.com.", RecordType::A);
    assert_eq!(r.metadata.response_code, ResponseCode::Refused);
    assert!(!r.metadata.authoritative);
    let mut chaos = query("web.shoal.", RecordType::A);
    chaos.queries[0].set_query_class(DNSClass::CH);
    let r = ask_with(&t, chaos, Transport::Udp);
    assert_eq!(r.metadata.response_code, ResponseCode::Refused);
}

#[test]
fn other_opcodes_and_question_counts_are_errors() {
    let t = sample();
    let mut notify = query("web.shoal.", RecordType::A);
    notify.metadata.op_code = OpCode::Notify;
    assert_eq!(
        ask_with(&t, notify, Transport::Udp).metadata.response_code,
        ResponseCode::NotImp
    );
    let mut two = query("web.shoal.", RecordType::A);
    two.add_query(Query::query(
        Name::from_ascii("pg.shoal.").unwrap(),
        RecordType::A,
    ));
    assert_eq!(
        ask_with(&t, two, Transport::Udp).metadata.response_code,
        ResponseCode::FormErr
    );
}

/// A workload with 40 replicas on 40 hosts: 40 A records do not fit 512 bytes.
fn wide() -> EndpointTable {
    let specs = BTreeMap::from([("big".to_string(), spec("big", 40, &[(80, Some(8080))]))]);
    let hosts: BTreeMap<String, HostInfo> = (0..40u8)
        .map(|i| {
            let addr = Some(IpAddr::from([10, 0, 1, i]));
            (format!("n{i}"), HostInfo { addr, live: true })
        })
        .collect();
    let peers = (0..40u32)
        .map(|i| (format!("n{i}"), vec![status("big", i, true)]))
        .collect();
    EndpointTable::build(&TableInput {
        specs: &specs,
        hosts: &hosts,
        me: "n0",
        own: &[status("big", 0, true)],
        peers: &peers,
    })
}

#[test]
fn ipv6_hosts_answer_aaaa_and_srv_targets_their_address() {
    let specs = BTreeMap::from([("v6".to_string(), spec("v6", 2, &[(53, Some(5353))]))]);
    let hosts = BTreeMap::from([
        (
            "n1".to_string(),
            HostInfo {
                addr: Some("fd00::1".parse().unwrap()),
                live: true,
            },
        ),
        (
            "n2".to_string(),
            HostInfo {
                addr: Some(IpAddr::from([10, 0, 0, 2])),
                live: true,
            },
        ),
    ]);
    let peers = BTreeMap::from([("n2".to_string(), vec![status("v6", 1, true)])]);
    let t = EndpointTable::build(&TableInput {
        specs: &specs,
        hosts: &hosts,
        me: "n1",
        own: &[status("v6", 0, true)],
        peers: &peers,
    });
    assert_eq!(
        answers(&ask(&t, "v6.shoal.", RecordType::AAAA)),
        ["AAAA fd00::1"]
    );
    assert_eq!(
        answers(&ask(&t, "v6.shoal.", RecordType::A)),
        ["A 10.0.0.2"]
    );
    assert_eq!(
        answers(&ask(&t, "0.v6.shoal.", RecordType::AAAA)),
        ["AAAA fd00::1"]
    );
    let srv = ask(&t, "_53._tcp.v6.shoal.", RecordType::SRV);
    assert_eq!(
        answers(&srv),
        ["SRV 5353 0.v6.shoal.", "SRV 5353 1.v6.shoal."]
    );
    let glue: Vec<String> = srv.additionals.iter().map(|r| r.data.to_string()).collect();
    assert_eq!(glue, ["fd00::1", "10.0.0.2"]);
}

#[test]
fn udp_answers_past_the_size_are_truncated_and_tcp_ones_are_whole() {
    let t = wide();
    let r = ask(&t, "big.shoal.", RecordType::A);
    assert!(r.metadata.truncation, "40 records exceed 512 bytes");
    assert!(r.answers.is_empty());
    assert_eq!(r.queries.len(), 1);
    let mut with_edns = query("big.shoal.", RecordType::A);
    let mut edns = Edns::new();
    edns.set_max_payload(4096);
    with_edns.set_edns(edns.clone());
    let r = ask_with(&t, with_edns.clone(), Transport::Udp);
    assert!(
        r.metadata.truncation,
        "fits the EDNS size but not 5x the query"
    );
    assert!(r.answers.is_empty());
    assert!(r.edns.is_some(), "EDNS answered with EDNS");
    let mut six = query("6.big.shoal.", RecordType::A);
    six.set_edns(edns);
    let r = ask_with(&t, six, Transport::Udp);
    assert!(!r.metadata.truncation, "one record fits");
    assert_eq!(answers(&r), ["A 10.0.1.6"]);
    let r = ask_with(&t, query("big.shoal.", RecordType::A), Transport::Tcp);
    assert!(!r.metadata.truncation);
    assert_eq!(r.answers.len(), 40);
}

/// The size of the response to `q` over `transport`, and whether it was truncated.
fn size_of(table: &EndpointTable, q: &Message, transport: Transport) -> (usize, usize, bool) {
    let zone = Zone::new("shoal").unwrap();
    let bytes = q.to_vec().unwrap();
    match answer(table, &zone, &bytes, transport) {
        Outcome::Reply {
            bytes: out,
            truncated,
            ..
        } => (bytes.len(), out.len(), truncated),
        Outcome::Drop(why) => panic!("dropped: {why:?}"),
    }
}

#[test]
fn a_big_srv_answer_over_udp_is_truncated_to_at_most_5x_the_query() {
    let t = wide();
    let mut q = query("_80._tcp.big.shoal.", RecordType::SRV);
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    q.set_edns(edns);
    let (asked, got, truncated) = size_of(&t, &q, Transport::Udp);
    assert!(truncated, "40 SRV records and their glue are far over 5x");
    assert!(got <= 5 * asked, "{got} bytes for a {asked}-byte query");
    let r = ask_with(&t, q.clone(), Transport::Udp);
    assert!(r.metadata.truncation && r.answers.is_empty() && r.additionals.is_empty());
    assert_eq!(
        r.queries, q.queries,
        "the question is echoed for the retry over TCP"
    );
    // Over TCP the whole answer comes: 40 SRV records, 40 addresses.
    let (_, whole, truncated) = size_of(&t, &q, Transport::Tcp);
    assert!(!truncated && whole > 1232, "{whole} bytes over TCP");
    let r = ask_with(&t, q, Transport::Tcp);
    assert_eq!((r.answers.len(), r.additionals.len()), (40, 40));
    // Every name of the sample answers within 5x over UDP.
    for (name, qtype) in [
        ("big.shoal.", RecordType::A),
        ("0.big.shoal.", RecordType::A),
        ("_80._tcp.0.big.shoal.", RecordType::SRV),
        ("nope.shoal.", RecordType::A),
        ("elsewhere.", RecordType::A),
    ] {
        let (asked, got, _) = size_of(&t, &query(name, qtype), Transport::Udp);
        assert!(got <= 5 * asked, "{name}: {got} bytes for {asked}");
    }
}

#[test]
fn truncated_keeps_the_header_and_question_only() {
    let t = wide();
    let q = query("_80._tcp.0.big.shoal.", RecordType::SRV);
    let zone = Zone::new("shoal").unwrap();
    let Outcome::Reply { bytes, .. } = answer(&t, &zone, &q.to_vec().unwrap(), Transport::Udp)
    else {
        panic!("no reply")
    };
    let whole = Message::from_vec(&bytes).unwrap();
    assert_eq!(whole.answers.len(), 1, "one replica's SRV fits");
    let cut = super::answer::truncated(&bytes).expect("our own response decodes");
    let cut = Message::from_vec(&cut).unwrap();
    assert!(cut.metadata.truncation && cut.answers.is_empty() && cut.additionals.is_empty());
    assert_eq!(
        (cut.metadata.id, cut.queries.clone()),
        (whole.metadata.id, whole.queries)
    );
    assert_eq!(super::answer::truncated(b"junk"), None);
}

/// The server: a source over its budget of amplification gets truncated answers over UDP (each
/// at most 5x its query), counted; TCP still answers in full.
#[tokio::test]
async fn a_source_over_its_budget_gets_truncated_answers_and_tcp_answers_whole() {
    use super::limit::ResponseLimiter;
    use super::server::{DnsConfig, DnsServer, TableSource};
    use super::DnsStats;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let table = Arc::new(wide());
    let source: TableSource = Arc::new(move || table.clone());
    let stats = Arc::new(DnsStats::default());
    let config = DnsConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        zone: Zone::new("shoal").unwrap(),
    };
    // 1,000 bytes at once, 10 a second: about 15 answers of one SRV record and its address.
    let limiter = ResponseLimiter::new(10, 1000, 16);
    let server = DnsServer::start_with(config, source, stats.clone(), limiter)
        .await
        .unwrap();
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let q = query("_80._tcp.0.big.shoal.", RecordType::SRV)
        .to_vec()
        .unwrap();
    let mut buf = [0u8; 2048];
    let (mut whole, mut cut, mut excess) = (0, 0, 0);
    for _ in 0..100 {
        socket.send_to(&q, server.local_addr).await.unwrap();
        let (len, _) = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            socket.recv_from(&mut buf),
        )
        .await
        .expect("every query is answered")
        .unwrap();
        assert!(
            len <= 5 * q.len(),
            "{len} bytes for a {}-byte query",
            q.len()
        );
        let r = Message::from_vec(&buf[..len]).unwrap();
        if r.metadata.truncation {
            assert!(r.answers.is_empty());
            assert!(
                len <= q.len() + 16,
                "a slipped answer is about the query's size: {len}"
            );
            cut += 1;
        } else {
            assert_eq!(answers(&r), ["SRV 8080 0.big.shoal."]);
            excess = len - q.len();
            whole += 1;
        }
    }
    // The burst's worth, plus at most one more from the refill while the test runs.
    let burst = 1000 / excess;
    assert!(
        whole == burst || whole == burst + 1,
        "{whole} whole answers of {excess} bytes over the query, {cut} truncated"
    );
    assert_eq!(stats.slipped(), cut);
    // TCP is not limited: the whole answer.
    let mut tcp = tokio::net::TcpStream::connect(server.local_addr)
        .await
        .unwrap();
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    tcp.write_all(&framed).await.unwrap();
    let mut prefix = [0u8; 2];
    tcp.read_exact(&mut prefix).await.unwrap();
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
    tcp.read_exact(&mut body).await.unwrap();
    let r = Message::from_vec(&body).unwrap();
    assert!(!r.metadata.truncation);
    assert_eq!(answers(&r), ["SRV 8080 0.big.shoal."]);
}

#[test]
fn malformed_queries_get_formerr_or_are_dropped() {
    let t = sample();
    let zone = Zone::new("shoal.").unwrap();
    let drop = |bytes: &[u8]| answer(&t, &zone, bytes, Transport::Udp);
    assert_eq!(drop(&[1, 2, 3]), Outcome::Drop(Dropped::Short));
    assert_eq!(drop(&[0u8; 2000]), Outcome::Drop(Dropped::Oversized));
    let mut response = query("web.shoal.", RecordType::A).to_vec().unwrap();
    response[2] |= 0x80;
    assert_eq!(drop(&response), Outcome::Drop(Dropped::NotQuery));
    // A header announcing a question that is not there.
    let garbage = [0xab, 0xcd, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xff];
    let Outcome::Reply { bytes, rcode, .. } = drop(&garbage) else {
        panic!("a FORMERR is sent");
    };
    assert_eq!(rcode, ResponseCode::FormErr);
    let m = Message::from_vec(&bytes).unwrap();
    assert_eq!(
        (m.metadata.id, m.metadata.response_code),
        (0xabcd, ResponseCode::FormErr)
    );
}

#[test]
fn zones_are_checked() {
    assert!(Zone::new(".").is_err());
    assert!(Zone::new("a..b").is_err());
    assert_eq!(
        Zone::new("Svc.Example").unwrap().origin().to_string(),
        "svc.example."
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
        let (t, zone) = (sample(), Zone::new("shoal").unwrap());
        for transport in [Transport::Udp, Transport::Tcp] {
            if let Outcome::Reply { bytes: out, .. } = answer(&t, &zone, &bytes, transport) {
                prop_assert!(out.len() <= 65_535);
                if transport == Transport::Udp {
                    prop_assert!(out.len() <= 1232);
                }
            }
        }
    }

    /// A valid query with random flips in it: never a panic, never a response to a response.
    #[test]
    fn mutated_queries_never_panic(flips in proptest::collection::vec((0usize..64, any::<u8>()), 1..8)) {
        let (t, zone) = (sample(), Zone::new("shoal").unwrap());
        let mut bytes = query("_80._tcp.web.shoal.", RecordType::SRV).to_vec().unwrap();
        for (at, value) in flips {
            let at = at % bytes.len();
            bytes[at] = value;
        }
        let outcome = answer(&t, &zone, &bytes, Transport::Udp);
        if bytes[2] & 0x80 != 0 {
            prop_assert_eq!(outcome, Outcome::Drop(Dropped::NotQuery));
        }
    }
}

#[test]
fn srv_names_each_replicas_own_allocated_port() {
    let text = "name = \"api\"\nreplicas = 3\n[process]\ncommand = [\"api\"]\n\
                ports = [{ name = \"http\" }, { name = \"admin\", port = 9100 }]\n\
                [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";
    let spec = shoal_core::spec::WorkloadSpec::from_toml_str(text, "api.toml").unwrap();
    let entry = shoal_core::reconcile::SpecEntry {
        version: "1".into(),
        spec: std::sync::Arc::new(spec),
        paused: false,
    };
    let specs = BTreeMap::from([("api".to_string(), entry)]);
    let hosts = BTreeMap::from([(
        "n1".to_string(),
        HostInfo {
            addr: Some(IpAddr::from([10, 0, 0, 1])),
            live: true,
        },
    )]);
    let with_ports = |replica: u32, http: u16, healthy: bool| {
        let mut s = status("api", replica, healthy);
        s.ports = BTreeMap::from([
            ("http".to_string(), http),
            ("admin".to_string(), 9100),
            ("forged".to_string(), 1),
        ]);
        s
    };
    // Two replicas on one host, each with its own port; the third is not healthy.
    let own = vec![
        with_ports(0, 20001, true),
        with_ports(1, 20002, true),
        with_ports(2, 20003, false),
    ];
    let t = EndpointTable::build(&TableInput {
        specs: &specs,
        hosts: &hosts,
        me: "n1",
        own: &own,
        peers: &BTreeMap::new(),
    });
    let r = ask(&t, "_http._tcp.api.shoal.", RecordType::SRV);
    assert_eq!(
        answers(&r),
        ["SRV 20001 0.api.shoal.", "SRV 20002 1.api.shoal."]
    );
    let r = ask(&t, "_admin._tcp.1.api.shoal.", RecordType::SRV);
    assert_eq!(answers(&r), ["SRV 9100 1.api.shoal."]);
    // A second copy of replica 0 (a surge during an update) on its own port: both answer.
    let mut surge = with_ports(0, 20009, true);
    surge.handle = Some("api-0-new".into());
    let own2 = [own.clone(), vec![surge]].concat();
    let t2 = EndpointTable::build(&TableInput {
        specs: &specs,
        hosts: &hosts,
        me: "n1",
        own: &own2,
        peers: &BTreeMap::new(),
    });
    let r = ask(&t2, "_http._tcp.0.api.shoal.", RecordType::SRV);
    assert_eq!(
        answers(&r),
        ["SRV 20001 0.api.shoal.", "SRV 20009 0.api.shoal."]
    );
    // A name the spec does not declare, or another protocol: NXDOMAIN.
    for name in ["_forged._tcp.api.shoal.", "_http._udp.api.shoal."] {
        let r = ask(&t, name, RecordType::SRV);
        assert_eq!(r.metadata.response_code, ResponseCode::NXDomain, "{name}");
    }
    let api = t.get("api").unwrap();
    assert_eq!(
        api.endpoints[0].ports,
        BTreeMap::from([("admin".to_string(), 9100), ("http".to_string(), 20001)]),
        "only declared names are kept from gossip"
    );
}
