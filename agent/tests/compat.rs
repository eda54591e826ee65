//! Compatibility kept by tests, not by care: what older builds wrote, read by this one.
//!
//! `agent/tests/compat/wire-V/` holds frames and store payloads recorded by a build that speaks
//! wire V (`scripts/compat-fixtures.sh COMMIT V`; wire 7 by `71428bd`, wire 8 by this tree), and
//! `layout-L/` a data dir written by a build of store layout L with what it must contain
//! (`expect.json`). This build must decode every frame in the version it came in, re-encode it in
//! that version to the same bytes (so an older peer reads what this build sends it), decode every
//! payload and write it back identically, and open the data dir with everything in it.
//!
//! The guard: every version this build speaks and the layout it writes must have fixtures, so
//! bumping `WIRE_CUR` or the layout without recording them fails here, and a change to the
//! layout of a type of the newest version without a bump fails the byte-for-byte check.

use std::path::{Path, PathBuf};

use shoal::mesh::api::{Request, Response};
use shoal::mesh::history::History;
use shoal::mesh::view::{decode_spec, encode_spec};
use shoal::rpc::{decode_answer, decode_request, RpcError};
use shoal::store_db::{DesiredStore, LAYOUT};
use shoal::wire::{
    decode_frame, encode_frame_at, FrameKind, API_FRAME_MAX_BYTES, GOSSIP_FRAME_MAX_BYTES,
    WIRE_CUR, WIRE_MIN,
};
use shoal_core::spec::WorkloadSpec;
use shoal_core::store::StoreConfig;

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
    let layout = fixtures().join(format!("layout-{LAYOUT}"));
    assert!(
        layout.join("desired.redb").is_file(),
        "{} is missing: this build writes store layout {LAYOUT}; a new layout needs a migration \
         from the one before and a data dir of it (scripts/compat-fixtures.sh)",
        layout.display()
    );
}

#[test]
fn every_recorded_frame_decodes_in_its_version_and_re_encodes_to_the_same_bytes() {
    for version in WIRE_MIN..=WIRE_CUR {
        let dir = fixtures().join(format!("wire-{version}"));
        for path in files(&dir, "frame") {
            let bytes = std::fs::read(&path).unwrap();
            let name = stem(&path);
            let max = if name == "gossip" {
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
                check_request(&name, &request);
                encode_frame_at(version, FrameKind::Request, &request, API_FRAME_MAX_BYTES)
            } else if name.starts_with("resp-") {
                let response = decode_answer::<Response>(&bytes)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                check_response(&name, &response);
                encode_frame_at(version, FrameKind::Response, &response, API_FRAME_MAX_BYTES)
            } else if name == "reject" {
                let Err(RpcError::Rejected(reason)) = decode_answer::<Response>(&bytes) else {
                    panic!("{}: not a reject", path.display())
                };
                assert_eq!(reason, "handler took over 30s");
                Ok(shoal::rpc::encode_reject_at(version, &reason))
            } else if name == "gossip" {
                let message = shoal::gossip::quic::decode_gossip(&bytes)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                shoal::gossip::quic::encode_gossip_at(version, &message, None)
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

fn check_request(name: &str, request: &Request) {
    match (name, request) {
        ("req-apply", Request::Apply { specs }) => {
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["web", "pg", "box"]);
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

fn check_response(name: &str, response: &Response) {
    match (name, response) {
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

#[derive(serde::Deserialize)]
struct Expect {
    commit: String,
    live: Vec<String>,
    tombstoned: Vec<String>,
    history: Vec<String>,
    data_records: Vec<String>,
    replicas: std::collections::BTreeMap<String, u32>,
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
            assert_eq!(Some(&spec.replicas), expect.replicas.get(&entry.name));
        }
        for name in &expect.tombstoned {
            assert!(
                store.get(name).is_some_and(|e| e.is_tombstone()),
                "{name} is not a tombstone in {}",
                layout.display()
            );
        }
        for name in &expect.history {
            let history = History::decode(store.get(name).and_then(|e| e.body.live()));
            assert!(!history.versions.is_empty(), "{name} is empty");
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
    future[1] = 9;
    let err = decode_spec(&future).unwrap_err();
    assert!(
        err.contains("layout 9") && err.contains("newer build"),
        "{err}"
    );
}
