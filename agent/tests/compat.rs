//! Compatibility kept by tests, not by care: what older builds wrote, read by this one.
//!
//! `agent/tests/compat/wire-V/` holds frames and store payloads recorded by a build that speaks
//! wire V (`scripts/compat-fixtures.sh COMMIT V`; wire 7 by `71428bd`, wire 8 by this tree), and
//! `layout-L/` a data dir written by a build of store layout L with what it must contain
//! (`expect.json`). This build must decode every frame in the version it came in, re-encode it in
//! that version to the same bytes (so an older peer reads what this build sends it), decode every
//! payload and write it back identically, and open the data dir with everything in it.
//! `placement-A.json` is an older build's placement of a seeded input under algorithm A, which
//! every agent of a mesh version naming A must compute alike.
//!
//! The guard: every version this build speaks and the layout it writes must have fixtures, so
//! bumping `WIRE_CUR` or the layout without recording them fails here, and a change to the
//! layout of a type of the newest version without a bump fails the byte-for-byte check.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use shoal::state::mesh::history::History;
use shoal::state::mesh::view::{decode_spec, encode_spec};
use shoal::state::store_db::{DesiredStore, LAYOUT, LAYOUTS_READ};
use shoal::transport::rpc::{decode_answer, decode_request, RpcError};
use shoal::wire::api::{Request, Response};
use shoal::wire::{
    decode_frame, encode_frame_at, FrameKind, API_FRAME_MAX_BYTES, GOSSIP_FRAME_MAX_BYTES,
    WIRE_CUR, WIRE_MIN,
};
use shoal_core::placement::{for_algorithm, Node, Workload, PLACEMENT_ALGORITHM_VERSION};
use shoal_core::spec::WorkloadSpec;
use shoal_core::stacking::place_stacked;
use shoal_core::store::StoreConfig;
use shoal_core::upgrade::placement_algorithm;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/compat")
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    out.sort();
    out
}

fn stem(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().to_string()
}

/// The spec in the TOML file `path`, parsed by this build.
fn spec_source(path: &Path) -> WorkloadSpec {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    WorkloadSpec::from_toml_str(&text, &path.display().to_string())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_version_spoken_and_the_layout_written_have_fixtures() {
    for version in WIRE_MIN..=WIRE_CUR {
        let dir = fixtures().join(format!("wire-{version}"));
        assert!(
            dir.is_dir() && !files(&dir, "frame").is_empty(),
            "{} is missing: this build speaks wire {version}; record its fixtures with \
             `scripts/compat-fixtures.sh COMMIT {version}` (HEAD for this tree's newest)",
            dir.display()
        );
    }
    for read in LAYOUTS_READ {
        let layout = fixtures().join(format!("layout-{read}"));
        assert!(
            layout.join("desired.redb").is_file(),
            "{} is missing: this build reads store layout {read} (it writes {LAYOUT}); a new \
             layout needs a migration from the one before (agent/src/state/store_db/migrate.rs) \
             and a data dir of each layout read (scripts/compat-fixtures.sh)",
            layout.display()
        );
    }
}

#[test]
fn every_recorded_frame_decodes_in_its_version_and_re_encodes_to_the_same_bytes() {
    for version in WIRE_MIN..=WIRE_CUR {
        let dir = fixtures().join(format!("wire-{version}"));
        for path in files(&dir, "frame") {
            let bytes = std::fs::read(&path).unwrap();
            let name = stem(&path);
            let max = if name.starts_with("gossip") {
                GOSSIP_FRAME_MAX_BYTES
            } else {
                API_FRAME_MAX_BYTES
            };
            let frame =
                decode_frame(&bytes, max).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(frame.version, version, "{}", path.display());
            let again = if name.starts_with("req-") {
                let (v, request) = decode_request::<Request>(&bytes)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert_eq!(v, version);
                check_request(&dir, &name, &request);
                encode_frame_at(version, FrameKind::Request, &request, API_FRAME_MAX_BYTES)
            } else if name.starts_with("resp-") {
                let response = decode_answer::<Response>(&bytes)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                check_response(&dir, &name, &response);
                encode_frame_at(version, FrameKind::Response, &response, API_FRAME_MAX_BYTES)
            } else if name == "reject" {
                let Err(RpcError::Rejected(reason)) = decode_answer::<Response>(&bytes) else {
                    panic!("{}: not a reject", path.display())
                };
                assert_eq!(reason, "handler took over 30s");
                Ok(shoal::transport::rpc::encode_reject_at(version, &reason))
            } else if name.starts_with("gossip") {
                let message = shoal::transport::gossip::quic::decode_gossip(&bytes)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                shoal::transport::gossip::quic::encode_gossip_at(version, &message, None)
            } else {
                panic!("{}: unknown fixture kind", path.display())
            };
            assert_eq!(
                again.unwrap(),
                bytes,
                "{}: this build does not write wire {version} as the build that recorded it",
                path.display()
            );
        }
    }
}

/// The recorded request is the one the recorder built: the apply's specs are the recorded TOML
/// sources (every field of wire 7 among them) as this build parses them.
fn check_request(dir: &Path, name: &str, request: &Request) {
    match (name, request) {
        ("req-apply", Request::Apply { specs }) => {
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["web", "pg", "box"]);
            for (spec, source) in specs.iter().zip(["process", "exclusive", "container"]) {
                assert_eq!(*spec, spec_source(&dir.join(format!("{source}.toml"))));
            }
            assert_eq!(specs[0].stop_grace_ms, Some(45_000));
            assert!(specs[1].placement.exclusive);
            assert!(specs.iter().all(|s| s.user.is_none()));
        }
        ("req-status", Request::Status { name, after, limit }) => {
            assert_eq!((name.as_str(), *after, *limit), ("web", Some(1), 100));
        }
        ("req-delete", Request::Delete { name, purge_data }) => {
            assert_eq!((name.as_str(), *purge_data), ("web", true));
        }
        ("req-exec", Request::Exec { replica, tty, .. }) => {
            assert_eq!(*replica, 2);
            assert_eq!(tty.map(|t| (t.rows, t.cols)), Some((24, 80)));
        }
        (name, other) => panic!("{name}: unexpected {other:?}"),
    }
}

fn check_response(dir: &Path, name: &str, response: &Response) {
    match (name, response) {
        ("resp-workload", Response::Workload(view)) => {
            assert_eq!((view.name.as_str(), view.replicas), ("pg", 1));
            assert_eq!(view.version, "1796349308286.3@n2");
            assert_eq!(view.spec, spec_source(&dir.join("exclusive.toml")));
        }
        ("resp-applied", Response::Applied(applied)) => {
            assert_eq!(applied[0].durable_on, ["n1", "n3"]);
        }
        ("resp-error", Response::Error(err)) => assert!(err.message.contains("nope")),
        (name, other) => panic!("{name}: unexpected {other:?}"),
    }
}

#[test]
fn every_recorded_spec_payload_decodes_as_its_source_and_is_written_back_identically() {
    for version in WIRE_MIN..=WIRE_CUR {
        let dir = fixtures().join(format!("wire-{version}"));
        for path in files(&dir, "spec") {
            let payload = std::fs::read(&path).unwrap();
            let spec = decode_spec(&payload).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let source = std::fs::read_to_string(path.with_extension("toml")).unwrap();
            let parsed = WorkloadSpec::from_toml_str(&source, "fixture.toml").unwrap();
            assert_eq!(spec, parsed, "{}", path.display());
            assert_eq!(encode_spec(&spec), payload, "{}", path.display());
        }
    }
}

/// What a recorded data dir holds (`layout-L/expect.json`); every live workload's spec is also
/// there as `NAME.toml`, its source after the changes the script made.
#[derive(serde::Deserialize)]
struct Expect {
    commit: String,
    live: Vec<String>,
    tombstoned: Vec<String>,
    /// History key to the number of past versions in it.
    history: BTreeMap<String, usize>,
    data_records: Vec<String>,
}

#[test]
fn a_data_dir_of_every_layout_read_opens_with_everything_in_it() {
    let mut layouts: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| stem(p).starts_with("layout-"))
        .collect();
    layouts.sort();
    assert!(!layouts.is_empty());
    for layout in layouts {
        let expect: Expect =
            serde_json::from_slice(&std::fs::read(layout.join("expect.json")).unwrap()).unwrap();
        // On a copy: opening writes nothing today, but a migration would.
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(layout.join("desired.redb"), dir.path().join("desired.redb")).unwrap();
        let store = DesiredStore::open(dir.path(), "n1", StoreConfig::default())
            .unwrap_or_else(|e| panic!("{} ({}): {e}", layout.display(), expect.commit));
        let live: Vec<&str> = store.list_live().map(|e| e.name.as_str()).collect();
        assert_eq!(live, expect.live, "{}", layout.display());
        for entry in store.list_live() {
            let body = entry.body.live().unwrap();
            let spec = decode_spec(body).unwrap_or_else(|e| panic!("{}: {e}", entry.name));
            let source = layout.join(format!("{}.toml", entry.name));
            assert_eq!(spec, spec_source(&source), "{}", layout.display());
        }
        for name in &expect.tombstoned {
            assert!(
                store.get(name).is_some_and(|e| e.is_tombstone()),
                "{name} is not a tombstone in {}",
                layout.display()
            );
        }
        for (name, versions) in &expect.history {
            let history = History::decode(store.get(name).and_then(|e| e.body.live()));
            assert_eq!(
                history.versions.len(),
                *versions,
                "{name} in {}",
                layout.display()
            );
            for past in &history.versions {
                decode_spec(&past.spec).unwrap();
            }
        }
        for name in &expect.data_records {
            assert!(
                store.get(name).and_then(|e| e.body.live()).is_some(),
                "{name} missing in {}",
                layout.display()
            );
        }
    }
}

#[test]
fn a_spec_of_wire_8_is_stored_tagged_and_refused_at_7_with_a_reason() {
    let text = "name = \"asuser\"\nuser = \"nobody\"\n[process]\ncommand = [\"true\"]\n\
                [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n";
    let spec = WorkloadSpec::from_toml_str(text, "asuser.toml").unwrap();
    let payload = encode_spec(&spec);
    assert_eq!(&payload[..2], &[0xff, 8], "tagged with its layout");
    assert_eq!(decode_spec(&payload).unwrap(), spec);
    let request = Request::Apply { specs: vec![spec] };
    let err = encode_frame_at(7, FrameKind::Request, &request, API_FRAME_MAX_BYTES).unwrap_err();
    assert!(err.to_string().contains("wire version 8"), "{err}");
    // A payload of a layout from the future is refused, saying so.
    let mut future = payload.clone();
    future[1] = (WIRE_CUR + 1) as u8;
    let err = decode_spec(&future).unwrap_err();
    assert!(
        err.contains(&format!("layout {}", WIRE_CUR + 1)) && err.contains("newer build"),
        "{err}"
    );
}

#[test]
fn every_placement_algorithm_spoken_has_an_older_builds_placement_and_this_build_agrees() {
    let mut checked = BTreeSet::new();
    for version in WIRE_MIN..=WIRE_CUR {
        let algorithm = placement_algorithm(version);
        let path = fixtures().join(format!("placement-{algorithm}.json"));
        assert!(
            path.is_file(),
            "{} is missing: mesh version {version} runs placement algorithm {algorithm}; record \
             it with `scripts/compat-fixtures.sh COMMIT VERSION` from a build that runs it",
            path.display()
        );
        assert!(algorithm <= PLACEMENT_ALGORITHM_VERSION);
        if checked.insert(algorithm) {
            check_placement(&path, algorithm);
        }
    }
    assert!(
        checked.contains(&PLACEMENT_ALGORITHM_VERSION),
        "the newest algorithm {PLACEMENT_ALGORITHM_VERSION} is named by no mesh version this \
         build speaks"
    );
}

#[derive(serde::Deserialize)]
struct RecordedPlacement {
    algorithm: u32,
    nodes: Vec<Node>,
    workloads: Vec<Workload>,
    assigned: BTreeMap<String, String>,
    unschedulable: BTreeMap<String, serde_json::Value>,
}

/// This build's placement, as a mesh running `algorithm` computes it (`for_algorithm`), equals
/// the one recorded by a build of that algorithm.
fn check_placement(path: &Path, algorithm: u32) {
    let mut recorded: RecordedPlacement =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(recorded.algorithm, algorithm);
    if algorithm >= 7 {
        // Capabilities and needs are exercised: nodes without them, needs no node meets.
        assert!(recorded.nodes.iter().any(|n| n.caps.is_none()));
        assert!(recorded.workloads.iter().all(|w| w.needs.runtime.is_some()));
        assert!(recorded
            .unschedulable
            .values()
            .any(|u| u.get("Incapable").is_some()));
    }
    for_algorithm(algorithm, &mut recorded.nodes, &mut recorded.workloads);
    // The input must exercise what the algorithm decides: down and draining nodes, data holders,
    // layers of workloads with more replicas than nodes, replicas left without a node.
    assert!(recorded.nodes.iter().any(|n| n.down) && recorded.nodes.iter().any(|n| n.draining));
    assert!(recorded.workloads.iter().any(|w| !w.sticky.is_empty()));
    assert!(recorded.assigned.len() > 150 && !recorded.unschedulable.is_empty());
    let placement = place_stacked(&recorded.nodes, &recorded.workloads);
    let assigned: BTreeMap<String, String> = placement
        .assigned
        .iter()
        .map(|(replica, node)| (replica.to_string(), node.clone()))
        .collect();
    let moved: Vec<String> = recorded
        .assigned
        .iter()
        .filter(|(replica, node)| assigned.get(*replica) != Some(node))
        .map(|(replica, node)| format!("{replica}: {node} -> {:?}", assigned.get(replica)))
        .collect();
    assert!(
        moved.is_empty() && assigned.len() == recorded.assigned.len(),
        "{}: this build places differently from the build that recorded algorithm {} \
         ({} replicas placed here, {} there); an output change needs a new algorithm version \
         and mesh version: {moved:?}",
        path.display(),
        recorded.algorithm,
        assigned.len(),
        recorded.assigned.len()
    );
    let unschedulable: BTreeSet<String> = placement
        .unschedulable
        .keys()
        .map(|r| r.to_string())
        .collect();
    let recorded_unschedulable: BTreeSet<String> = recorded.unschedulable.into_keys().collect();
    assert_eq!(unschedulable, recorded_unschedulable, "{}", path.display());
}
