//! Disk faults under the desired-state store (simulated with `MemDisk`): a failed or full write
//! returns a clear error and changes nothing, and power loss keeps every acknowledged write.

use shoal::core::hlc::{Hlc, Version};
use shoal::core::store::{Body, Entry, StoreConfig};
use shoal::state::store_db::{DesiredStore, MemDisk, StoreDbError};

fn open(disk: &MemDisk) -> DesiredStore {
    DesiredStore::open_in_memory(disk, "n1", StoreConfig::default()).expect("open the store")
}

fn names(store: &DesiredStore) -> Vec<String> {
    store
        .core()
        .iter()
        .map(|e| format!("{}={}", e.name, e.version))
        .collect()
}

#[test]
fn a_failed_write_is_reported_and_changes_nothing() {
    let disk = MemDisk::new();
    let mut store = open(&disk);
    store.apply("web", b"v1".to_vec(), 1_000).unwrap();
    let before = (names(&store), store.digest());

    disk.set_failing(true);
    let err = store.apply("db", b"v1".to_vec(), 1_001).unwrap_err();
    assert!(matches!(err, StoreDbError::Write(_)), "{err:?}");
    assert!(err.to_string().contains("not acknowledged"), "{err}");
    assert!(matches!(
        store.delete("web", 1_002),
        Err(StoreDbError::Write(_))
    ));
    let peer = Entry {
        name: "cache".into(),
        version: Version::new(Hlc::new(1_003, 0), "n2"),
        body: Body::Live(b"v1".to_vec()),
        proof: Vec::new(),
    };
    assert!(matches!(
        store.merge_remote(vec![peer.clone()], 1_003),
        Err(StoreDbError::Write(_))
    ));
    assert!(store.generation_next(1_004).is_err());
    assert_eq!(
        (names(&store), store.digest()),
        before,
        "memory did not move"
    );
    assert_eq!(
        store.get("web").and_then(|e| e.body.live()),
        Some(&b"v1"[..])
    );

    disk.set_failing(false);
    // Once the disk works again, so does the same store (it reopens the database).
    store.merge_remote(vec![peer.clone()], 1_005).unwrap();
    store.apply("db", b"v1".to_vec(), 1_006).unwrap();
    store.check_invariants();
    let after = (names(&store), store.digest());
    drop(store);
    let store = open(&disk);
    assert_eq!(
        (names(&store), store.digest()),
        after,
        "disk holds what was acknowledged"
    );
    store.check_invariants();
}

#[test]
fn a_failed_write_leaves_the_disk_at_its_previous_state() {
    let disk = MemDisk::new();
    let mut store = open(&disk);
    store.apply("web", b"v1".to_vec(), 1_000).unwrap();
    let before = names(&store);
    disk.set_failing(true);
    store.apply("db", b"v1".to_vec(), 1_001).unwrap_err();
    drop(store);
    disk.set_failing(false);
    disk.crash();
    assert_eq!(names(&open(&disk)), before);
}

#[test]
fn a_full_disk_fails_the_write_and_keeps_what_was_acknowledged() {
    let disk = MemDisk::new();
    let mut store = open(&disk);
    disk.set_capacity_bytes(Some(disk.len_bytes() + 2 * 1024 * 1024));
    let mut acknowledged = Vec::new();
    let err = loop {
        let name = format!("w{}", acknowledged.len());
        match store.apply(&name, vec![0xab; 200 * 1024], 1_000) {
            Ok(entry) => acknowledged.push(entry),
            Err(err) => break err,
        }
        assert!(acknowledged.len() < 100, "the disk never filled");
    };
    assert!(!acknowledged.is_empty(), "some writes fit");
    assert!(err.to_string().contains("free space"), "{err}");
    assert_eq!(store.core().len(), acknowledged.len());
    store.check_invariants();

    drop(store);
    disk.crash();
    disk.set_capacity_bytes(None);
    let store = open(&disk);
    for entry in &acknowledged {
        assert_eq!(store.get(&entry.name), Some(entry));
    }
    assert_eq!(store.core().len(), acknowledged.len());
}

#[test]
fn power_loss_keeps_every_acknowledged_write() {
    let disk = MemDisk::new();
    let mut store = open(&disk);
    let mut acknowledged = Vec::new();
    for i in 0..20 {
        acknowledged.push(
            store
                .apply(&format!("w{i}"), vec![i as u8; 64], 1_000 + i)
                .unwrap(),
        );
        if i % 3 == 0 {
            store.delete(&format!("w{i}"), 2_000 + i).unwrap();
            acknowledged.pop();
        }
    }
    let generation = store.generation_next(7).unwrap();
    drop(store);
    disk.crash();
    let mut store = open(&disk);
    store.check_invariants();
    for entry in &acknowledged {
        assert_eq!(store.get(&entry.name), Some(entry));
    }
    assert_eq!(store.list_live().count(), acknowledged.len());
    assert!(store.generation_next(7).unwrap() > generation);
}
