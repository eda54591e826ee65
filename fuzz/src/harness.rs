//! The fuzz harness bodies: one function per decoder family, each feeding untrusted bytes to the
//! agent's real decode entry points and checking a cheap property where one exists (decode ->
//! encode -> decode gives the same value). Shared by the cargo-fuzz targets (fuzz/fuzz_targets/)
//! and the stable corpus replay in CI (agent/tests/fuzz_corpus.rs, which includes this file by
//! path), so it names the agent only as `shoal` (and its core as `shoal::core`).
//!
//! A harness returns normally for any input the decoders refuse or accept; it panics only when a
//! decoder panics or a property fails.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use shoal::core::cells::{CellEntry, CellTable, Known};
use shoal::core::reconcile::{InstanceStatus, Issue, SpecEntry};
use shoal::core::spec::WorkloadSpec;
use shoal::core::store::{Digest, DigestSummary};
use shoal::wire::api::{Request, Response};
use shoal::wire::{
    decode_body_at, decode_envelope, decode_frame, encode_frame_at, FrameKind, API_FRAME_MAX_BYTES,
    GOSSIP_FRAME_MAX_BYTES, WIRE_CUR, WIRE_MIN,
};

/// A harness body: feeds one input to one decoder family.
pub type Harness = fn(&[u8]);

/// The targets, by name: the name of each fuzz target, its corpus directory
/// (fuzz/corpus/NAME) and its harness.
pub const TARGETS: &[(&str, Harness)] = &[
    ("wire", wire),
    ("gossip", gossip),
    ("cells", cells),
    ("store", store),
    ("crl", crl),
    ("dns", dns),
    ("spec", spec),
];

/// The version byte `sel` picks among the versions this build speaks.
fn version_of(sel: u8) -> u16 {
    WIRE_MIN + u16::from(sel) % (WIRE_CUR - WIRE_MIN + 1)
}

/// Encodes `value` in `version` and decodes it back, twice: the second encoding must equal the
/// first (what a decoded message re-encodes to is stable), for types without `PartialEq`.
fn bincode_fixpoint<T: serde::Serialize + serde::de::DeserializeOwned>(version: u16, value: &T) {
    let Ok(first) = encode_frame_at(version, FrameKind::Request, value, usize::MAX >> 1) else {
        return; // e.g. a field this version cannot carry: refused, not a decoder matter
    };
    let body = decode_frame(&first, usize::MAX >> 1)
        .expect("own frame")
        .body;
    let again: T = decode_body_at::<T, { usize::MAX >> 1 }>(version, body)
        .unwrap_or_else(|e| panic!("a re-encoded message does not decode in {version}: {e}"));
    let second = encode_frame_at(version, FrameKind::Request, &again, usize::MAX >> 1)
        .expect("a decoded message encodes again");
    assert_eq!(
        first, second,
        "re-encoding is not stable in version {version}"
    );
}

/// Wire frames and API bodies: the first byte picks the entry point (and a version for bodies),
/// the rest is the frame or body.
pub fn wire(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 5 {
        // A request frame as the API server reads it.
        0 => {
            let _ = decode_frame(rest, API_FRAME_MAX_BYTES);
            let _ = decode_envelope(rest);
            if let Ok((version, request)) = shoal::transport::rpc::decode_request::<Request>(rest) {
                bincode_fixpoint(version, &request);
            }
        }
        // An answer frame as a caller reads it (a response or a reject).
        1 => {
            if let Ok(response) = shoal::transport::rpc::decode_answer::<Response>(rest) {
                if let Ok(frame) = decode_frame(rest, API_FRAME_MAX_BYTES) {
                    bincode_fixpoint(frame.version, &response);
                }
            }
        }
        // A gossip frame (plain or zstd) as the gossip transport reads it.
        2 => {
            let _ = decode_frame(rest, GOSSIP_FRAME_MAX_BYTES);
            let _ = shoal::transport::gossip::quic::decode_gossip(rest);
        }
        // A request body in the version the selector picks.
        3 => {
            let version = version_of(sel / 5);
            if let Ok(request) = decode_body_at::<Request, API_FRAME_MAX_BYTES>(version, rest) {
                bincode_fixpoint(version, &request);
            }
        }
        // A response body in the version the selector picks.
        _ => {
            let version = version_of(sel / 5);
            if let Ok(response) = decode_body_at::<Response, API_FRAME_MAX_BYTES>(version, rest) {
                bincode_fixpoint(version, &response);
            }
        }
    }
}

/// Gossip values: the first byte picks the key whose decoder reads the rest (chitchat values are
/// strings; the byte-valued ones are store bodies gossip and sync carry).
pub fn gossip(data: &[u8]) {
    use shoal::state::mesh::{build::BuildRecord, capabilities::CapabilitiesRecord};
    use shoal::state::mesh::{history, record::NodeRecord};
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match sel % 12 {
        0 => {
            let decoded = NodeRecord::decode(&text);
            assert_eq!(
                NodeRecord::decode_cached(&text),
                decoded,
                "cached decode differs"
            );
            if let Ok(record) = decoded {
                assert_eq!(NodeRecord::decode(&record.encode()), Ok(record));
            }
        }
        1 => {
            if let Ok(record) = BuildRecord::decode(&text) {
                assert_eq!(BuildRecord::decode(&record.encode()), Ok(record));
            }
        }
        2 => {
            if let Ok(record) = CapabilitiesRecord::decode(&text) {
                assert_eq!(CapabilitiesRecord::decode(&record.encode()), Ok(record));
            }
        }
        // Instance status lists (`instances`), as the host loop and `cell copies` read them.
        3 => {
            if let Ok(list) = serde_json::from_str::<Vec<InstanceStatus>>(&text) {
                let again = serde_json::to_string(&list).expect("statuses encode");
                assert_eq!(
                    serde_json::from_str::<Vec<InstanceStatus>>(&again).ok(),
                    Some(list)
                );
            }
        }
        // Issues (`issues`, `clock_issue`), as `shoal issues` reads them.
        4 => {
            if let Ok(list) = serde_json::from_str::<Vec<Issue>>(&text) {
                let again = serde_json::to_string(&list).expect("issues encode");
                assert_eq!(serde_json::from_str::<Vec<Issue>>(&again).ok(), Some(list));
            }
        }
        5 => {
            if let Some(record) = history::decode_record(Some(rest)) {
                let again = history::encode_record(&record);
                assert_eq!(history::decode_record(Some(&again)), Some(record));
            }
        }
        6 => {
            let held = history::History::decode(Some(rest));
            assert_eq!(history::History::decode(Some(&held.encode())), held);
        }
        7 => {
            use shoal::identity::authority::caps::NodeCaps;
            if let Some(caps) = NodeCaps::decode(rest) {
                assert_eq!(NodeCaps::decode(&caps.encode()), Some(caps));
            }
        }
        8 => {
            use shoal::identity::authority::proof::Proof;
            if let Ok(proof) = Proof::decode(rest) {
                assert_eq!(Proof::decode(&proof.encode()), Ok(proof));
            }
        }
        9 => {
            let _ = shoal::state::mesh::upgrade::decode_version(Some(rest));
        }
        // The store digest a peer answers `Digest` with, and the summary it gossips.
        10 => {
            if let Ok(digest) = Digest::decode(rest) {
                let again = Digest::decode(&digest.encode()).expect("own digest decodes");
                assert_eq!(again.encode(), digest.encode());
                let _ = digest.diff_buckets(&again);
            }
        }
        _ => {
            if let Ok(summary) = DigestSummary::decode(rest) {
                assert_eq!(DigestSummary::decode(&summary.encode()).ok(), Some(summary));
            }
        }
    }
}

/// The cell exchange: a peer's table entries (`CellsPush`, the `Cells` answer) merged into a
/// table, what it says it holds (`Cells`' `known`), and the contacts a summary carries.
pub fn cells(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let version = version_of((sel & 0x7f) / 3);
    let now_wall = 1_800_000_000_000;
    let now_mono = 10_000_000;
    match sel % 3 {
        0 => {
            let Ok(mut entries) =
                decode_body_at::<Vec<CellEntry>, API_FRAME_MAX_BYTES>(version, rest)
            else {
                return;
            };
            // Half the inputs carry the right content versions, as an honest envoy's do (a
            // fuzzer cannot find the hash), so that merging goes past the version check.
            if sel & 0x80 != 0 {
                for entry in &mut entries {
                    if let Some(summary) = &entry.summary {
                        entry.version = shoal::core::cells::content_version(summary);
                    }
                }
            }
            let mut table = CellTable::new("own");
            let outcome = table.merge(entries.clone(), now_mono, now_wall);
            assert!(
                table.len() <= shoal::core::cells::CELLS_MAX + 1,
                "table over its bound"
            );
            // Merging the same entries again changes nothing.
            let again = table.merge(entries, now_mono, now_wall);
            assert!(
                again.updated.is_empty(),
                "a second merge updated {:?}",
                again.updated
            );
            let _ = (
                outcome,
                table.list(now_mono),
                table.placement_cells(now_mono),
            );
            let _ = (table.quorum(now_mono, 1), table.up_cells(now_mono));
            let known = table.known();
            assert!(
                table.newer_than(&known, now_mono).is_empty(),
                "newer than itself"
            );
        }
        1 => {
            let Ok(known) = decode_body_at::<Vec<Known>, API_FRAME_MAX_BYTES>(version, rest) else {
                return;
            };
            let table = CellTable::new("own");
            let _ = table.newer_than(&known, now_mono);
        }
        _ => {
            let text = String::from_utf8_lossy(rest);
            if let Some(contact) = shoal::state::cells::parse_contact(&text) {
                let again =
                    shoal::state::cells::contact_text(&contact.name, contact.api, contact.gossip);
                assert_eq!(shoal::state::cells::parse_contact(&again), Some(contact));
            }
        }
    }
}

/// Store records: spec bodies (as gossip, sync and `desired.redb` carry them) and the rows and
/// facts of `desired.redb`.
pub fn store(data: &[u8]) {
    use shoal::state::mesh::view::{decode_spec, encode_spec};
    use shoal::state::store_db::fuzz;
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 6 {
        0 => {
            if let Ok(spec) = decode_spec(rest) {
                let again = decode_spec(&encode_spec(&spec))
                    .unwrap_or_else(|e| panic!("a re-encoded spec does not decode: {e}"));
                assert_eq!(again, spec);
            }
        }
        1 => {
            if let Ok(entry) = fuzz::entry(rest) {
                assert_eq!(fuzz::entry(&fuzz::encode_entry(&entry)).ok(), Some(entry));
            }
        }
        2 => {
            let _ = fuzz::fact_hlc(rest);
        }
        3 => {
            let _ = fuzz::fact_peers(rest);
        }
        4 => {
            let _ = fuzz::fact_u64(rest);
        }
        _ => {
            let _ = fuzz::fact_schema(rest);
        }
    }
}

/// The CA certificate (DER) the CRL target verifies against: fuzz/ca.der, whose key signed the
/// seed CRLs in fuzz/corpus/crl (without it a CRL parses but never verifies).
fn crl_ca() -> &'static [Vec<u8>] {
    static CA: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CA.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/ca.der")
            .canonicalize();
        path.ok()
            .and_then(|p| std::fs::read(p).ok())
            .into_iter()
            .collect()
    })
}

/// CRLs as the agent reads them from the store (checked against the CA), and certificate serials.
pub fn crl(data: &[u8]) {
    use rustls::pki_types::CertificateDer;
    let cas: Vec<CertificateDer<'_>> = crl_ca()
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    if let Ok(crl) = shoal::identity::crl::Crl::parse_verified(data, &cas) {
        assert_eq!(crl.der, data);
    }
    let _ = shoal::identity::crl::serial_of(&CertificateDer::from(data));
}

/// The endpoint table and zone the DNS target answers from.
fn dns_table() -> &'static (shoal::node::dns::EndpointTable, shoal::node::dns::Zone) {
    use shoal::node::dns::{EndpointTable, HostInfo, TableInput, Zone};
    static TABLE: OnceLock<(EndpointTable, Zone)> = OnceLock::new();
    TABLE.get_or_init(|| {
        let spec = |text: &str| SpecEntry {
            version: "1".into(),
            spec: Arc::new(WorkloadSpec::from_toml_str(text, "t.toml").expect("spec")),
            paused: false,
        };
        let specs = BTreeMap::from([
            (
                "web".to_string(),
                spec(
                    "name = \"web\"\nreplicas = 3\n[container]\nimage = \"busybox\"\n\
                     ports = [{ container = 80, host = 8080 }, { container = 9000 }]\n\
                     [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n",
                ),
            ),
            (
                "pg".to_string(),
                spec(
                    "name = \"pg\"\nreplicas = 2\n[process]\ncommand = [\"sleep\", \"1\"]\n\
                     [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n",
                ),
            ),
        ]);
        let host = |i: u8| HostInfo {
            addr: Some(IpAddr::from([10, 0, 0, i])),
            live: true,
        };
        let hosts = BTreeMap::from([("n1".to_string(), host(1)), ("n2".to_string(), host(2))]);
        let status = |w: &str, r: u32| {
            InstanceStatus::new(
                shoal::core::placement::model::ReplicaId::new(w, r),
                Some(format!("{w}-{r}")),
                shoal::core::instance::Phase::Running,
                "1",
            )
        };
        let own = vec![status("web", 0), status("pg", 0)];
        let peers = BTreeMap::from([(
            "n2".to_string(),
            vec![status("web", 1), status("web", 2), status("pg", 1)],
        )]);
        let table = EndpointTable::build(&TableInput {
            specs: &specs,
            hosts: &hosts,
            me: "n1",
            own: &own,
            peers: &peers,
        });
        (table, Zone::new("shoal").expect("zone"))
    })
}

/// DNS queries as the agent's DNS server answers them, over UDP (the first byte even) or TCP.
pub fn dns(data: &[u8]) {
    use shoal::node::dns::{answer, Outcome, Transport};
    let Some((&sel, query)) = data.split_first() else {
        return;
    };
    let (table, zone) = dns_table();
    let transport = if sel % 2 == 0 {
        Transport::Udp
    } else {
        Transport::Tcp
    };
    if let Outcome::Reply { bytes, .. } = answer(table, zone, query, transport) {
        let max = match transport {
            Transport::Udp => 4096,
            Transport::Tcp => 65_535,
        };
        assert!(bytes.len() <= max, "a {}-byte answer", bytes.len());
    }
}

/// Spec files, TOML or JSON as `shoal apply` reads them (the first byte picks the reader): a
/// spec that parses renders to TOML and JSON that parse back to it.
pub fn spec(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let parsed = match sel % 3 {
        0 => WorkloadSpec::from_bytes(rest, "fuzz.toml"),
        1 => WorkloadSpec::from_bytes(rest, "fuzz.json"),
        _ => match std::str::from_utf8(rest) {
            Ok(text) => WorkloadSpec::from_toml_str(text, "fuzz.toml"),
            Err(_) => return,
        },
    };
    if let Ok(spec) = parsed {
        let toml = spec.to_toml_string();
        let back = WorkloadSpec::from_toml_str(&toml, "again.toml")
            .unwrap_or_else(|e| panic!("rendered TOML does not parse: {e}\n{toml}"));
        assert_eq!(back, spec, "TOML round trip differs:\n{toml}");
        let json = spec.to_json_string();
        let back = WorkloadSpec::from_json_str(&json, "again.json")
            .unwrap_or_else(|e| panic!("rendered JSON does not parse: {e}\n{json}"));
        assert_eq!(back, spec, "JSON round trip differs:\n{json}");
    }
}
