//! Anti-entropy digest: equal stores have equal digests, a digest diff plus a bucket pull both ways
//! makes two stores equal, and the encoding is compact and robust.

use proptest::prelude::*;
use shoal_core::hlc::{Hlc, Version};
use shoal_core::store::{
    bucket_of, Body, Digest, DigestSummary, Entry, Store, StoreConfig, BUCKETS, DIGEST_BYTES_MAX,
    SUMMARY_BYTES_MAX,
};

const NOW_MS: u64 = 10_000;

fn arb_entry() -> impl Strategy<Value = Entry> {
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..8).prop_map(Body::Live),
        (0u64..4).prop_map(|deleted_at_ms| Body::Tombstone {
            deleted_at_ms,
            purge_data: false
        }),
    ];
    ("[a-z]{1,3}", 0u64..4, 0u32..3, "n[1-3]", body).prop_map(|(name, w, l, node, body)| Entry {
        name,
        version: Version::new(Hlc::new(w, l), node),
        body,
        proof: Vec::new(),
    })
}

fn store_of(entries: Vec<Entry>) -> Store {
    let mut store = Store::new("n0", StoreConfig::default());
    store.merge_entries(entries, NOW_MS);
    store
}

/// One anti-entropy round from `a`'s side: compare digests, pull the differing buckets from `b`,
/// push the same buckets of `a` to `b`.
fn sync(a: &mut Store, b: &mut Store) {
    let buckets = a.digest().diff_buckets(&b.digest());
    let from_b: Vec<Entry> = b.entries_in_buckets(&buckets).cloned().collect();
    let from_a: Vec<Entry> = a.entries_in_buckets(&buckets).cloned().collect();
    a.merge_entries(from_b, NOW_MS);
    b.merge_entries(from_a, NOW_MS);
}

proptest! {
    /// One round of digest, diff and bucket pull makes two arbitrary stores identical.
    #[test]
    fn one_sync_round_converges(
        shared in prop::collection::vec(arb_entry(), 0..20),
        only_a in prop::collection::vec(arb_entry(), 0..20),
        only_b in prop::collection::vec(arb_entry(), 0..20),
    ) {
        let mut a = store_of([shared.clone(), only_a].concat());
        let mut b = store_of([shared, only_b].concat());
        sync(&mut a, &mut b);
        prop_assert_eq!(a.digest(), b.digest());
        prop_assert_eq!(a.iter().collect::<Vec<_>>(), b.iter().collect::<Vec<_>>());
        prop_assert!(a.digest().diff_buckets(&b.digest()).is_empty());
        prop_assert_eq!(a.digest().summary(), b.digest().summary());
        a.check_invariants();
        b.check_invariants();
    }

    /// Differing stores have differing digests, only in the buckets of the names that differ.
    #[test]
    fn a_difference_shows_in_its_bucket(entries in prop::collection::vec(arb_entry(), 0..20), extra in arb_entry()) {
        let a = store_of(entries.clone());
        let b = store_of([entries, vec![extra.clone()]].concat());
        if a.get(&extra.name) != b.get(&extra.name) {
            prop_assert_eq!(a.digest().diff_buckets(&b.digest()), vec![bucket_of(&extra.name)]);
            prop_assert_ne!(a.digest().summary(), b.digest().summary());
        }
    }

    /// The encodings round-trip and stay within their stated bounds.
    #[test]
    fn encoding_round_trips(entries in prop::collection::vec(arb_entry(), 0..40)) {
        let digest = store_of(entries).digest();
        let bytes = digest.encode();
        prop_assert!(bytes.len() <= DIGEST_BYTES_MAX);
        prop_assert_eq!(Digest::decode(&bytes), Ok(digest.clone()));
        let summary = digest.summary();
        let bytes = summary.encode();
        prop_assert!(bytes.len() <= SUMMARY_BYTES_MAX);
        prop_assert_eq!(DigestSummary::decode(&bytes), Ok(summary));
    }

    /// Garbage never panics the decoders.
    #[test]
    fn decoding_garbage_is_an_error_not_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..1200)) {
        let _ = Digest::decode(&bytes);
        let _ = DigestSummary::decode(&bytes);
    }
}

#[test]
fn encoded_sizes_are_small_and_fixed() {
    let mut store = Store::new("node-1", StoreConfig::default());
    assert_eq!(store.digest().encode().len(), 774, "empty store");
    assert_eq!(store.digest().summary().encode().len(), 14);
    store.apply_local("web", b"spec".to_vec(), 1_000).unwrap();
    // 787 bytes plus the node id of the highest version ("node-1", 6 bytes).
    assert_eq!(store.digest().encode().len(), 787 + 6);
    assert_eq!(store.digest().summary().encode().len(), 27 + 6);
    assert_eq!(DIGEST_BYTES_MAX, 787 + 253);
    assert_eq!(BUCKETS, 64);
}

#[test]
fn malformed_digests_are_rejected() {
    let mut store = Store::new("node-1", StoreConfig::default());
    store.apply_local("web", b"spec".to_vec(), 1_000).unwrap();
    let bytes = store.digest().encode();
    assert!(
        Digest::decode(&bytes[..bytes.len() - 1]).is_err(),
        "truncated"
    );
    assert!(
        Digest::decode(&[bytes.clone(), vec![0]].concat()).is_err(),
        "trailing byte"
    );
    let mut wrong_count = bytes.clone();
    wrong_count[1] = 9;
    assert!(
        Digest::decode(&wrong_count).is_err(),
        "count disagrees with the buckets"
    );
    let mut wrong_format = bytes;
    wrong_format[0] = 7;
    let err = Digest::decode(&wrong_format).unwrap_err();
    assert!(err.to_string().contains("incompatible version"), "{err}");
}

#[test]
fn bucket_assignment_is_stable() {
    // Pinned values: a change here changes the wire format between agent versions.
    let pinned: Vec<u16> = ["web", "db", "cache", ""]
        .iter()
        .map(|n| bucket_of(n))
        .collect();
    assert_eq!(pinned, PINNED_BUCKETS);
    assert!(pinned.iter().all(|&b| usize::from(b) < BUCKETS));
}

const PINNED_BUCKETS: [u16; 4] = [31, 41, 46, 2];

#[test]
fn entries_in_buckets_ignores_out_of_range_ids() {
    let mut store = Store::new("n1", StoreConfig::default());
    store.apply_local("web", b"spec".to_vec(), 1_000).unwrap();
    assert_eq!(store.entries_in_buckets(&[u16::MAX, 64]).count(), 0);
    assert_eq!(store.entries_in_buckets(&[bucket_of("web")]).count(), 1);
}
