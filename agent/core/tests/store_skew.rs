//! Clock skew and the store: a local write never gets a version below one the node stores or
//! one it refused as too far ahead (it is refused instead), and the skew monitor's verdict.

use shoal_core::hlc::{Hlc, Version, DRIFT_MS_MAX_DEFAULT};
use shoal_core::store::skew::{SkewConfig, SkewMonitor};
use shoal_core::store::{
    Body, Entry, Rejection, Store, StoreConfig, StoreError, REFUSED_NEWER_NAMES_MAX,
    REFUSED_NEWER_TTL_MS,
};

const NOW_MS: u64 = 1_800_000_000_000;
const SECOND: u64 = 1_000;

fn remote(name: &str, wall_ms: u64, node: &str) -> Entry {
    Entry {
        name: name.into(),
        version: Version::new(Hlc::new(wall_ms, 0), node),
        body: Body::Live(b"theirs".to_vec()),
        proof: Vec::new(),
    }
}

/// n2's store holding web at version `NOW_MS`, offered n7's newer web written `ahead_ms` ahead
/// of n2's clock.
fn store_offered(ahead_ms: u64) -> Store {
    let mut store = Store::new("n2", StoreConfig::default());
    store.apply_local("web", b"mine".to_vec(), NOW_MS).unwrap();
    store.merge_entries([remote("web", NOW_MS + ahead_ms, "n7")], NOW_MS);
    store.check_invariants();
    store
}

#[test]
fn a_write_that_would_lose_to_a_refused_newer_version_is_refused() {
    let ahead_ms = DRIFT_MS_MAX_DEFAULT + 15 * SECOND;
    let mut store = store_offered(ahead_ms);
    assert_eq!(
        store.get_live("web"),
        Some(&b"mine"[..]),
        "the newer entry is too far ahead to store"
    );
    let newer = Version::new(Hlc::new(NOW_MS + ahead_ms, 0), "n7");
    assert_eq!(store.refused_newer("web", NOW_MS + SECOND), Some(&newer));
    assert_eq!(store.newest_known("web", NOW_MS + SECOND), Some(&newer));

    let last = store.clock().last();
    let err = store
        .apply_local("web", b"scale".to_vec(), NOW_MS + SECOND)
        .unwrap_err();
    match &err {
        StoreError::NewerVersionRefused {
            name,
            newer: v,
            ahead_ms: a,
            drift_ms_max,
        } => {
            assert_eq!((name.as_str(), v), ("web", &newer));
            assert_eq!(*a, ahead_ms - SECOND);
            assert_eq!(*drift_ms_max, DRIFT_MS_MAX_DEFAULT);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("NTP") && text.contains("n7"), "{text}");
    assert_eq!(store.clock().last(), last, "a refused write must not tick");
    assert!(matches!(
        store.delete_local("web", NOW_MS + SECOND),
        Err(StoreError::NewerVersionRefused { .. })
    ));
    // Other workloads are not concerned: their writes win over everything the mesh holds.
    store
        .apply_local("api", b"x".to_vec(), NOW_MS + SECOND)
        .unwrap();
    store.check_invariants();
}

#[test]
fn the_refusal_ends_when_the_newer_version_is_stored_or_no_longer_offered() {
    let ahead_ms = DRIFT_MS_MAX_DEFAULT + 15 * SECOND;
    let mut store = store_offered(ahead_ms);
    // Once this clock has caught up (fixed, or time passed), the entry is accepted and the write
    // after it wins.
    let later = NOW_MS + 20 * SECOND;
    let outcome = store.merge_entries([remote("web", NOW_MS + ahead_ms, "n7")], later);
    assert_eq!(outcome.changed, ["web"]);
    assert_eq!(store.refused_newer("web", later), None);
    let mine = store.apply_local("web", b"scale".to_vec(), later).unwrap();
    assert!(mine.version.hlc > Hlc::new(NOW_MS + ahead_ms, 0));
    store.check_invariants();

    // A refused version that nobody offers again is forgotten after the TTL (its writer may be
    // gone for good).
    let mut store = store_offered(ahead_ms);
    let after_ttl = NOW_MS + REFUSED_NEWER_TTL_MS + 1;
    assert_eq!(store.refused_newer("web", after_ttl), None);
    store
        .apply_local("web", b"scale".to_vec(), after_ttl)
        .unwrap();
}

#[test]
fn a_newer_version_within_the_bound_is_stored_and_the_next_write_beats_it() {
    let mut store = Store::new("n2", StoreConfig::default());
    let ahead = NOW_MS + DRIFT_MS_MAX_DEFAULT - SECOND;
    let outcome = store.merge_entries([remote("web", ahead, "n7")], NOW_MS);
    assert_eq!(outcome.changed, ["web"]);
    assert_eq!(store.refused_newer("web", NOW_MS), None);
    // The physical clock is still a minute behind the stored version: the HLC is not.
    let mine = store.apply_local("web", b"scale".to_vec(), NOW_MS).unwrap();
    assert_eq!(mine.version.hlc.wall_ms, ahead);
    assert!(mine.supersedes(&remote("web", ahead, "n7")));
    store.check_invariants();
}

#[test]
fn a_restored_store_issues_versions_above_every_stored_entry() {
    let stored = remote("web", NOW_MS + 30 * SECOND, "n7");
    let mut store = Store::restore(
        "n2",
        StoreConfig::default(),
        Hlc::default(),
        [stored.clone()],
    )
    .unwrap();
    // The physical clock jumped back after the restart.
    let mine = store
        .apply_local("web", b"x".to_vec(), NOW_MS - 30 * SECOND)
        .unwrap();
    assert!(
        mine.supersedes(&stored),
        "{} vs {}",
        mine.version,
        stored.version
    );
}

#[test]
fn refused_versions_are_bounded_and_only_kept_when_newer_than_the_stored_one() {
    let mut store = Store::new("n2", StoreConfig::default());
    let far = NOW_MS + DRIFT_MS_MAX_DEFAULT + SECOND;
    let many: Vec<Entry> = (0..REFUSED_NEWER_NAMES_MAX + 10)
        .map(|i| remote(&format!("w{i}"), far, "n7"))
        .collect();
    let outcome = store.merge_entries(many, NOW_MS);
    assert!(outcome
        .rejected
        .iter()
        .all(|(_, r)| matches!(r, Rejection::Clock(_))));
    assert_eq!(
        store.refused_newer_all(NOW_MS).count(),
        REFUSED_NEWER_NAMES_MAX
    );
    store.check_invariants();
}

fn monitor() -> SkewMonitor {
    SkewMonitor::new(SkewConfig::default())
}

#[test]
fn a_jump_of_this_clock_shows_against_every_peer_at_once() {
    let mut m = monitor();
    // Peers n1..n5 all agree with this node (wall = NOW_MS + mono), 2 ms round trips.
    for (i, peer) in ["n1", "n3", "n4", "n5", "n6"].iter().enumerate() {
        let sent = 1_000 + i as u64 * 10;
        assert!(m.handle_sample(peer, NOW_MS + sent + 1, sent, sent + 2));
    }
    let v = m.verdict(NOW_MS + 2_000, 2_000, 5);
    assert_eq!((v.sampled, v.beyond, v.skewed), (5, 0, false));
    assert_eq!(v.offset_ms, Some(0));

    // This node's clock jumps 30 s back: no new sample needed.
    let v = m.verdict(NOW_MS + 2_500 - 30 * SECOND, 2_500, 5);
    assert!(v.skewed, "{v:?}");
    assert_eq!(v.offset_ms, Some(30_000));
    assert_eq!(v.direction(), "behind");
    // And forward by 45 s.
    let v = m.verdict(NOW_MS + 2_500 + 45 * SECOND, 2_500, 5);
    assert!(v.skewed, "{v:?}");
    assert_eq!(v.offset_ms, Some(-45_000));
    assert_eq!(v.direction(), "ahead of");
}

#[test]
fn one_wrong_peer_does_not_stop_writes_on_the_right_ones() {
    let mut m = monitor();
    m.handle_sample("n1", NOW_MS + 10, 10, 12);
    m.handle_sample("n2", NOW_MS + 90 * SECOND, 10, 12);
    m.handle_sample("n3", NOW_MS + 11, 10, 12);
    let v = m.verdict(NOW_MS + 20, 20, 3);
    assert_eq!((v.sampled, v.beyond, v.skewed), (3, 1, false));
    // In a mesh of three, the wrong one sees both others beyond the bound.
    let mut wrong = monitor();
    wrong.handle_sample("n1", NOW_MS + 10, 10, 12);
    wrong.handle_sample("n3", NOW_MS + 11, 10, 12);
    assert!(wrong.verdict(NOW_MS + 90 * SECOND, 20, 2).skewed);
}

#[test]
fn too_few_slow_or_stale_samples_give_no_verdict() {
    let mut m = monitor();
    // A slow round trip says little about the offset: dropped.
    assert!(!m.handle_sample("n1", NOW_MS, 0, 5_000));
    // An answer before the question (a confused caller): dropped.
    assert!(!m.handle_sample("n1", NOW_MS, 10, 5));
    // One sample among many live peers is not enough.
    assert!(m.handle_sample("n1", NOW_MS + 90 * SECOND, 10, 12));
    assert!(!m.verdict(NOW_MS, 20, 10).skewed);
    // ... but it is when it is the only peer.
    assert!(m.verdict(NOW_MS, 20, 1).skewed);
    // Samples expire.
    let ttl = SkewConfig::default().sample_ttl_ms;
    let v = m.verdict(NOW_MS + ttl + 100, ttl + 100, 1);
    assert_eq!((v.sampled, v.skewed, v.offset_ms), (0, false, None));
    // Hostile extremes saturate instead of overflowing.
    m.handle_sample("n9", u64::MAX, 0, 0);
    let offsets: Vec<_> = m.offsets(0, 0).collect();
    assert!(offsets.iter().any(|(p, o)| *p == "n9" && *o > 0));
}

#[test]
fn samples_are_bounded() {
    let config = SkewConfig {
        peers_max: 4,
        ..SkewConfig::default()
    };
    let mut m = SkewMonitor::new(config);
    for i in 0..10u64 {
        m.handle_sample(&format!("n{i}"), NOW_MS, i, i + 1);
    }
    assert_eq!(m.offsets(NOW_MS, 10).count(), 4);
    m.forget("n9");
    assert_eq!(m.offsets(NOW_MS, 10).count(), 3);
}
