//! The desired-state store on disk: what is written comes back after a reopen, node facts persist,
//! and corrupt bytes on disk are reported by key, never a panic.

use std::net::SocketAddr;
use std::path::Path;

use shoal::core::hlc::Hlc;
use shoal::core::hlc::Version;
use shoal::core::store::{Body, Entry, Rejection, StoreConfig};
use shoal::state::store_db::{DesiredStore, StoreDbError, DB_FILE, PEERS_MAX};

fn open(dir: &Path) -> DesiredStore {
    DesiredStore::open(dir, "n1", StoreConfig::default()).expect("open the store")
}

fn remote(name: &str, wall_ms: u64, body: &[u8]) -> Entry {
    Entry {
        name: name.into(),
        version: Version::new(Hlc::new(wall_ms, 0), "n2"),
        body: Body::Live(body.to_vec()),
        proof: Vec::new(),
    }
}

#[test]
fn what_is_written_is_read_back_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let web = store.apply("web", b"spec-web".to_vec(), 1_000).unwrap();
    store.apply("db", b"spec-db".to_vec(), 1_001).unwrap();
    let tomb = store.delete("db", 1_002).unwrap();
    let merged = store
        .merge_remote(vec![remote("cache", 1_500, b"spec-cache")], 1_003)
        .unwrap();
    assert_eq!(merged.changed, vec!["cache"]);
    let digest = store.digest();
    store.check_invariants();
    drop(store);

    let mut store = open(dir.path());
    store.check_invariants();
    assert_eq!(store.get("web"), Some(&web));
    assert_eq!(store.get("db"), Some(&tomb));
    assert_eq!(
        store.get("cache").and_then(|e| e.body.live()),
        Some(&b"spec-cache"[..])
    );
    let live: Vec<&str> = store.list_live().map(|e| e.name.as_str()).collect();
    assert_eq!(live, ["cache", "web"]);
    assert_eq!(store.digest(), digest);
    // The clock resumes above everything stored, even with the host clock set back.
    let next = store.apply("web", b"v2".to_vec(), 10).unwrap();
    assert_eq!(next.version.hlc, Hlc::new(1_500, 2));
}

#[test]
fn the_clock_high_water_mark_outlives_purged_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        tombstone_grace_ms: 100,
        ..StoreConfig::default()
    };
    let mut store = DesiredStore::open(dir.path(), "n1", config.clone()).unwrap();
    store.apply("web", b"v1".to_vec(), 5_000).unwrap();
    let tomb = store.delete("web", 5_000).unwrap();
    assert_eq!(store.gc(6_000).unwrap(), vec!["web"]);
    drop(store);
    let mut store = DesiredStore::open(dir.path(), "n1", config).unwrap();
    assert!(store.core().is_empty());
    let again = store.apply("web", b"v2".to_vec(), 1_000).unwrap();
    assert!(
        again.version > tomb.version,
        "{} not above {}",
        again.version,
        tomb.version
    );
}

#[test]
fn the_generation_grows_on_every_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let first = store.generation_next(5).unwrap();
    assert_eq!(first, 5);
    drop(store);
    let mut store = open(dir.path());
    assert_eq!(
        store.generation_next(5).unwrap(),
        6,
        "the host clock stood still"
    );
    assert_eq!(
        store.generation_next(1_000).unwrap(),
        1_000,
        "time moved on"
    );
    drop(store);
    let lost = tempfile::tempdir().unwrap();
    assert_eq!(
        open(lost.path()).generation_next(2_000).unwrap(),
        2_000,
        "a lost data dir still grows"
    );
}

#[test]
fn peers_are_remembered_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    assert!(store.peers_load().unwrap().is_empty());
    let peers: Vec<SocketAddr> = vec![
        "127.0.0.1:7000".parse().unwrap(),
        "[::1]:7001".parse().unwrap(),
    ];
    store.peers_save(&peers).unwrap();
    let too_many = vec![peers[0]; PEERS_MAX + 1];
    assert!(
        matches!(store.peers_save(&too_many), Err(StoreDbError::TooManyPeers { len }) if len == PEERS_MAX + 1)
    );
    drop(store);
    assert_eq!(open(dir.path()).peers_load().unwrap(), peers);
}

#[test]
fn the_member_count_at_the_last_majority_is_remembered_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    assert_eq!(store.members_known_load().unwrap(), None);
    store.members_known_save(9).unwrap();
    store.members_known_save(12).unwrap();
    drop(store);
    assert_eq!(open(dir.path()).members_known_load().unwrap(), Some(12));
}

#[test]
fn refusals_change_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        body_bytes_max: 8,
        ..StoreConfig::default()
    };
    let mut store = DesiredStore::open(dir.path(), "n1", config.clone()).unwrap();
    let err = store.apply("web", vec![0; 9], 1).unwrap_err();
    assert!(
        err.to_string().contains("exceeds the bound of 8 bytes"),
        "{err}"
    );
    assert!(matches!(
        store.delete("web", 1),
        Err(StoreDbError::Store(_))
    ));
    let outcome = store
        .merge_remote(vec![remote("big", 1, &[0; 9])], 1)
        .unwrap();
    assert!(outcome.changed.is_empty());
    assert!(matches!(
        outcome.rejected[0].1,
        Rejection::BodyTooLarge { .. }
    ));
    drop(store);
    let store = DesiredStore::open(dir.path(), "n1", config).unwrap();
    assert!(store.core().is_empty());
    store.check_invariants();
}

#[test]
fn entries_in_buckets_pages_through_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    for i in 0..200 {
        store
            .apply(&format!("w{i:03}"), vec![7; 100], 1_000 + i)
            .unwrap();
    }
    let all: Vec<u16> = (0..64).collect();
    let (mut seen, mut after, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let page = store.entries_in_buckets(&all, after.as_deref(), 1_000);
        assert!(
            !page.entries.is_empty() && page.entries.len() <= 8,
            "pages are bounded"
        );
        seen.extend(page.entries.into_iter().map(|e| e.name));
        pages += 1;
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = store.core().iter().map(|e| e.name.clone()).collect();
    assert_eq!(seen, expected);
    assert!(pages >= 200 / 8);
}

/// Overwrites one raw value in a closed store.
fn poke(dir: &Path, table: &str, key: &str, value: &[u8]) {
    let db = redb::Database::create(dir.join(DB_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(redb::TableDefinition::<&str, &[u8]>::new(table))
        .unwrap()
        .insert(key, value)
        .unwrap();
    txn.commit().unwrap();
}

fn open_err(dir: &Path) -> StoreDbError {
    DesiredStore::open(dir, "n1", StoreConfig::default())
        .expect_err("the store must refuse to open")
}

#[test]
fn a_corrupt_entry_is_an_error_naming_its_key() {
    let dir = tempfile::tempdir().unwrap();
    open(dir.path()).apply("web", b"spec".to_vec(), 1).unwrap();
    poke(dir.path(), "entries", "web", &[0xff; 40]);
    let err = open_err(dir.path());
    assert!(
        matches!(&err, StoreDbError::Corrupt { table: "entries", key, .. } if key == "web"),
        "{err:?}"
    );
    assert!(err.to_string().contains("key \"web\""), "{err}");

    // A valid entry with bytes after it, and a valid entry stored under another name.
    let mut bytes =
        bincode::serde::encode_to_vec(remote("web", 1, b"x"), bincode::config::standard()).unwrap();
    poke(dir.path(), "entries", "other", &bytes);
    poke(dir.path(), "entries", "web", &{
        bytes.push(0);
        bytes
    });
    let err = open_err(dir.path());
    assert!(
        matches!(&err, StoreDbError::Corrupt { key, .. } if key == "other"),
        "{err:?}"
    );
}

#[test]
fn a_corrupt_fact_is_an_error_naming_its_key() {
    let dir = tempfile::tempdir().unwrap();
    open(dir.path()).apply("web", b"spec".to_vec(), 1).unwrap();
    poke(dir.path(), "facts", "hlc_high_water", &[0xff; 3]);
    let err = open_err(dir.path());
    assert!(
        matches!(&err, StoreDbError::Corrupt { table: "facts", key, .. } if key == "hlc_high_water")
    );
    poke(dir.path(), "facts", "hlc_high_water", &[]);
    poke(dir.path(), "facts", "schema", &[99]);
    assert!(matches!(
        open_err(dir.path()),
        StoreDbError::Schema {
            found: 99,
            expected: 7
        }
    ));
}

#[test]
fn a_garbage_database_file_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let garbage: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.path().join(DB_FILE), garbage).unwrap();
    let err = open_err(dir.path());
    assert!(matches!(err, StoreDbError::Open { .. }), "{err:?}");
    assert!(
        err.to_string().contains(DB_FILE),
        "the message names the file: {err}"
    );
}

#[test]
fn a_node_out_of_sync_longer_than_the_grace_period_discards_its_entries() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        tombstone_grace_ms: 1_000,
        ..StoreConfig::default()
    };
    let mut store = DesiredStore::open(dir.path(), "n1", config.clone()).unwrap();
    assert!(
        !store.is_stale(0).unwrap(),
        "an empty new store is not stale"
    );
    let web = store.apply("web", b"v1".to_vec(), 5_000).unwrap();
    assert!(
        !store.is_stale(50_000).unwrap(),
        "entries but never a recorded sync: not stale (discarding could lose acknowledged specs)"
    );
    store.mark_synced(5_000).unwrap();
    assert!(!store.is_stale(6_000).unwrap());
    drop(store);

    let mut store = DesiredStore::open(dir.path(), "n1", config.clone()).unwrap();
    assert_eq!(store.synced_at_ms().unwrap(), Some(5_000));
    assert!(store.is_stale(6_001).unwrap());
    assert_eq!(store.discard_all().unwrap(), 1);
    assert!(store.core().is_empty());
    store.check_invariants();
    drop(store);
    let mut store = DesiredStore::open(dir.path(), "n1", config).unwrap();
    assert!(store.core().is_empty(), "the discard is durable");
    let next = store.apply("web", b"v2".to_vec(), 10).unwrap();
    assert!(next.version > web.version, "the clock survived the discard");
}

#[test]
fn the_store_file_is_its_owners_only_also_one_an_older_build_left_readable() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mode = |dir: &Path| {
        let meta = std::fs::metadata(dir.join(DB_FILE)).unwrap();
        meta.permissions().mode() & 0o777
    };
    drop(open(dir.path()));
    assert_eq!(mode(dir.path()), 0o600);
    std::fs::set_permissions(
        dir.path().join(DB_FILE),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    drop(open(dir.path()));
    assert_eq!(mode(dir.path()), 0o600, "tightened at the next open");
}
