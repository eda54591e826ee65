//! Store merge: last-writer-wins, tombstones, and convergence under any order and duplication.

use proptest::prelude::*;
use shoal_core::hlc::{Hlc, Version};
use shoal_core::store::{Body, Entry, Rejection, Store, StoreConfig};

const NOW_MS: u64 = 10_000;

fn entry(name: &str, wall_ms: u64, logical: u32, node: &str, body: Body) -> Entry {
    Entry {
        name: name.into(),
        version: Version::new(Hlc::new(wall_ms, logical), node),
        body,
        proof: Vec::new(),
    }
}

fn live(bytes: &[u8]) -> Body {
    Body::Live(bytes.to_vec())
}

/// Entries over few names, versions and bodies, so that collisions (same name, same version,
/// different body) happen often.
fn arb_entry() -> impl Strategy<Value = Entry> {
    let body = prop_oneof![
        prop::collection::vec(0u8..3, 0..3).prop_map(Body::Live),
        (0u64..4).prop_map(|deleted_at_ms| Body::Tombstone {
            deleted_at_ms,
            purge_data: false
        }),
    ];
    ("[a-e]", 0u64..4, 0u32..3, "n[1-3]", body)
        .prop_map(|(name, w, l, node, body)| entry(&name, w, l, &node, body))
}

/// The observable state of a store: every entry, in name order.
fn state(store: &Store) -> Vec<Entry> {
    store.iter().cloned().collect()
}

fn merged(deliveries: &[Vec<Entry>]) -> Store {
    let mut store = Store::new("receiver", StoreConfig::default());
    for batch in deliveries {
        store.merge_entries(batch.clone(), NOW_MS);
        store.check_invariants();
    }
    store
}

proptest! {
    /// Any permutation, duplication and batching of the same deliveries converges to one state,
    /// equal to merging everything at once.
    #[test]
    fn deliveries_in_any_order_converge(
        entries in prop::collection::vec(arb_entry(), 0..30),
        seed in any::<u64>(),
        batch in 1usize..5,
    ) {
        let reference = merged(std::slice::from_ref(&entries));
        let mut shuffled = entries.clone();
        shuffled.extend(entries.iter().take(entries.len() / 2).cloned());
        let mut rng = seed;
        for i in (1..shuffled.len()).rev() {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (rng >> 33) as usize % (i + 1));
        }
        let batches: Vec<Vec<Entry>> = shuffled.chunks(batch).map(<[Entry]>::to_vec).collect();
        let other = merged(&batches);
        prop_assert_eq!(state(&other), state(&reference));
        prop_assert_eq!(other.digest(), reference.digest());
    }

    /// merge(A, B) == merge(B, A); merge(merge(A, B), C) == merge(A, merge(B, C)).
    #[test]
    fn merge_is_commutative_and_associative(
        a in prop::collection::vec(arb_entry(), 0..10),
        b in prop::collection::vec(arb_entry(), 0..10),
        c in prop::collection::vec(arb_entry(), 0..10),
    ) {
        prop_assert_eq!(state(&merged(&[a.clone(), b.clone()])), state(&merged(&[b.clone(), a.clone()])));
        let ab_then_c = merged(&[a.clone(), b.clone(), c.clone()]);
        let bc = state(&merged(&[b, c]));
        prop_assert_eq!(state(&ab_then_c), state(&merged(&[a, bc])));
    }

    /// Merging what the store already holds changes nothing and reports nothing changed.
    #[test]
    fn merge_is_idempotent(entries in prop::collection::vec(arb_entry(), 0..30)) {
        let mut store = merged(std::slice::from_ref(&entries));
        let before = state(&store);
        let outcome = store.merge_entries(entries, NOW_MS);
        prop_assert!(outcome.changed.is_empty());
        prop_assert_eq!(state(&store), before.clone());
        let outcome = store.merge_entries(before.clone(), NOW_MS);
        prop_assert!(outcome.changed.is_empty());
    }

    /// The merged state holds, per name, the entry that wins over every delivered one.
    #[test]
    fn the_highest_version_wins(entries in prop::collection::vec(arb_entry(), 1..30)) {
        let store = merged(std::slice::from_ref(&entries));
        for e in &entries {
            let kept = store.get(&e.name).expect("every delivered name is kept");
            prop_assert!(kept == e || kept.supersedes(e));
        }
    }
}

#[test]
fn a_tombstone_wins_over_older_writes_and_loses_to_newer_ones() {
    let mut store = Store::new("n1", StoreConfig::default());
    store.merge_entries([entry("web", 100, 0, "n2", live(b"v1"))], NOW_MS);
    let tomb = entry(
        "web",
        200,
        0,
        "n3",
        Body::Tombstone {
            deleted_at_ms: 200,
            purge_data: false,
        },
    );
    assert_eq!(
        store.merge_entries([tomb.clone()], NOW_MS).changed,
        vec!["web"]
    );
    let late = store.merge_entries([entry("web", 150, 0, "n2", live(b"v2"))], NOW_MS);
    assert!(
        late.changed.is_empty() && late.rejected.is_empty(),
        "an older write is ignored"
    );
    assert_eq!(store.get("web"), Some(&tomb));
    assert_eq!(store.get_live("web"), None);
    store.merge_entries([entry("web", 300, 0, "n2", live(b"v3"))], NOW_MS);
    assert_eq!(
        store.get_live("web"),
        Some(&b"v3"[..]),
        "a newer write recreates it"
    );
}

#[test]
fn equal_timestamps_are_ordered_by_node_id() {
    let mut store = Store::new("n1", StoreConfig::default());
    store.merge_entries([entry("web", 100, 0, "b", live(b"from b"))], NOW_MS);
    store.merge_entries([entry("web", 100, 0, "a", live(b"from a"))], NOW_MS);
    assert_eq!(store.get_live("web"), Some(&b"from b"[..]));
}

#[test]
fn a_local_write_after_a_merge_wins_even_with_a_slow_local_clock() {
    let mut store = Store::new("slow", StoreConfig::default());
    // The peer's clock is 5 s ahead of ours.
    store.merge_entries([entry("web", 15_000, 3, "fast", live(b"v1"))], NOW_MS);
    let tomb = store.delete_local("web", NOW_MS).unwrap();
    assert!(tomb.version > Version::new(Hlc::new(15_000, 3), "fast"));
    assert_eq!(
        tomb.body,
        Body::Tombstone {
            deleted_at_ms: 15_000,
            purge_data: false,
        }
    );
    assert_eq!(store.get("web"), Some(&tomb));
    store.check_invariants();
}

#[test]
fn gc_purges_tombstones_only_after_the_grace_period() {
    let config = StoreConfig {
        tombstone_grace_ms: 1_000,
        ..StoreConfig::default()
    };
    let mut store = Store::new("n1", config);
    store.apply_local("web", b"v1".to_vec(), 5_000).unwrap();
    store.apply_local("db", b"v1".to_vec(), 5_000).unwrap();
    store.delete_local("web", 5_100).unwrap();
    assert!(store.gc(6_000).is_empty(), "still within grace");
    assert_eq!(store.gc(6_100), vec!["web"]);
    assert_eq!(store.len(), 1);
    store.check_invariants();
    // A peer that has not purged yet sends the tombstone back: refused, it stays purged.
    let stale = entry(
        "web",
        5_100,
        0,
        "n1",
        Body::Tombstone {
            deleted_at_ms: 5_100,
            purge_data: false,
        },
    );
    let outcome = store.merge_entries([stale], 6_200);
    assert!(outcome.changed.is_empty());
    assert_eq!(
        outcome.rejected,
        vec![(
            "web".into(),
            Rejection::TombstoneExpired { purge_at_ms: 6_100 }
        )]
    );
    assert_eq!(store.get("web"), None);
}

#[test]
fn restore_resumes_the_clock_above_every_stored_version() {
    let entries = vec![
        entry("web", 9_000, 4, "n2", live(b"v1")),
        entry("web", 8_000, 0, "n2", live(b"older")),
        entry(
            "db",
            100,
            0,
            "n1",
            Body::Tombstone {
                deleted_at_ms: 100,
                purge_data: false,
            },
        ),
    ];
    let mut store = Store::restore("n1", StoreConfig::default(), Hlc::new(50, 0), entries).unwrap();
    assert_eq!(
        store.get_live("web"),
        Some(&b"v1"[..]),
        "the newer duplicate wins on restore"
    );
    assert_eq!(store.clock().last(), Hlc::new(9_000, 4));
    let e = store.apply_local("web", b"v2".to_vec(), 1_000).unwrap();
    assert_eq!(e.version, Version::new(Hlc::new(9_000, 5), "n1"));
    store.check_invariants();
}

#[test]
fn a_plan_changes_nothing_until_committed() {
    let mut store = Store::new("n1", StoreConfig::default());
    let plan = store.prepare_local("web", b"v1".to_vec(), 1_000).unwrap();
    assert_eq!(plan.puts().len(), 1);
    assert_eq!(plan.hlc_high_water(), Hlc::new(1_000, 0));
    assert!(store.get("web").is_none() && store.digest().count == 0);
    drop(plan); // the shell's disk write failed
    store.check_invariants();
    let plan = store.prepare_local("web", b"v1".to_vec(), 1_000).unwrap();
    assert_eq!(store.commit(plan), vec!["web"]);
    assert_eq!(store.get("web").unwrap().version.hlc, Hlc::new(1_000, 1));
}

/// A write just above a version (an automatic rollback) replaces exactly that version, loses to
/// any write made after it elsewhere, and keeps the clock ahead of it.
#[test]
fn a_write_just_above_a_version_is_a_compare_and_set_that_later_writes_win_over() {
    let mut a = Store::new("a", StoreConfig::default());
    let plan = a.prepare_local("web", b"v2".to_vec(), NOW_MS).unwrap();
    let failed = plan.puts()[0].clone();
    a.commit(plan);
    let plan = a
        .prepare_local_after("web", b"v1".to_vec(), &failed.version, NOW_MS + 5_000)
        .unwrap();
    let back = plan.puts()[0].clone();
    a.commit(plan);
    assert_eq!(back.version.hlc.wall_ms, failed.version.hlc.wall_ms);
    assert_eq!(back.version.hlc.logical, failed.version.hlc.logical + 1);
    assert!(back.supersedes(&failed));
    // The compare-and-set fails once the version moved, and says what it found.
    let err = a
        .prepare_local_after("web", b"v1".to_vec(), &failed.version, NOW_MS + 5_000)
        .unwrap_err();
    assert!(err.to_string().contains("expected version"), "{err}");
    // An apply made a millisecond after the failed version on another node, before the
    // rollback reached it, wins wherever both meet.
    let later = entry("web", NOW_MS + 1, 0, "b", live(b"v3"));
    a.merge_entries(vec![later.clone()], NOW_MS + 5_000);
    assert_eq!(a.get_live("web"), Some(&b"v3"[..]));
    // The next local write comes after the rollback.
    let plan = a.prepare_local("web", b"v4".to_vec(), NOW_MS).unwrap();
    let next = plan.puts()[0].clone();
    assert!(next.supersedes(&back) && next.supersedes(&later));
}
