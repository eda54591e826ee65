//! Store bounds and typed errors: every refusal names what was wrong and changes nothing.

use shoal_core::hlc::{ClockError, Hlc, Version};
use shoal_core::store::{Body, Entry, Rejection, Store, StoreConfig, StoreError};

fn small() -> StoreConfig {
    StoreConfig {
        entries_max: 3,
        body_bytes_max: 16,
        bytes_total_max: 35,
        name_bytes_max: 8,
        drift_ms_max: 1_000,
        ..StoreConfig::default()
    }
}

fn rejected(result: Result<Entry, StoreError>) -> Rejection {
    match result {
        Err(StoreError::Rejected { reason, .. }) => reason,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn local_writes_respect_every_bound() {
    let mut store = Store::new("n1", small());
    let too_big = rejected(store.apply_local("web", vec![0; 17], 1));
    assert_eq!(too_big, Rejection::BodyTooLarge { len: 17, max: 16 });
    assert!(matches!(
        rejected(store.apply_local("", vec![], 1)),
        Rejection::NameInvalid { .. }
    ));
    assert!(matches!(
        rejected(store.apply_local("much-too-long", vec![], 1)),
        Rejection::NameInvalid { len: 13, max: 8 }
    ));
    assert!(matches!(
        rejected(store.apply_local("a\nb", vec![], 1)),
        Rejection::NameInvalid { .. }
    ));
    for name in ["a", "b", "c"] {
        store.apply_local(name, vec![0; 10], 1).unwrap();
    }
    assert_eq!(
        rejected(store.apply_local("d", vec![], 1)),
        Rejection::TooManyEntries { max: 3 }
    );
    // Replacing an entry needs no new slot, but the byte total still counts.
    assert_eq!(
        rejected(store.apply_local("a", vec![0; 16], 1)),
        Rejection::TooManyBytes { total: 36, max: 35 }
    );
    store.apply_local("a", vec![0; 12], 1).unwrap();
    assert_eq!(store.bytes_total(), 32);
    store.check_invariants();
}

#[test]
fn errors_say_what_was_wrong() {
    let mut store = Store::new("n1", small());
    let err = store.apply_local("web", vec![0; 17], 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "workload \"web\": payload of 17 bytes exceeds the bound of 16 bytes"
    );
    let err = store.delete_local("nothing", 1).unwrap_err();
    assert_eq!(
        err,
        StoreError::NotFound {
            name: "nothing".into()
        }
    );
    assert_eq!(err.to_string(), "workload \"nothing\" not found");
}

#[test]
fn deleting_a_tombstone_is_not_found_but_deletion_always_fits() {
    let mut store = Store::new("n1", small());
    for name in ["a", "b", "c"] {
        store.apply_local(name, vec![0; 10], 1).unwrap();
    }
    store.delete_local("a", 2).unwrap();
    assert!(matches!(
        store.delete_local("a", 3),
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(store.bytes_total(), 20);
    store.check_invariants();
}

#[test]
fn merge_refuses_bad_entries_one_by_one() {
    let mut store = Store::new("n1", small());
    let e = |name: &str, wall_ms: u64, node: &str, body: Body| Entry {
        name: name.into(),
        version: Version::new(Hlc::new(wall_ms, 0), node),
        body,
        proof: Vec::new(),
    };
    let year_ms = 365 * 24 * 3600 * 1000;
    let outcome = store.merge_entries(
        [
            e("ok", 10, "n2", Body::Live(vec![1])),
            e("future", 10 + year_ms, "n9", Body::Live(vec![1])),
            e("big", 10, "n2", Body::Live(vec![0; 17])),
            e("anon", 10, "", Body::Live(vec![])),
            e("ok2", 10, "n2", Body::Live(vec![])),
            e("ok3", 10, "n2", Body::Live(vec![])),
            e("zfull", 10, "n2", Body::Live(vec![])),
        ],
        100,
    );
    assert_eq!(outcome.changed, vec!["ok", "ok2", "ok3"]);
    let reasons: Vec<(&str, &Rejection)> = outcome
        .rejected
        .iter()
        .map(|(n, r)| (n.as_str(), r))
        .collect();
    assert!(matches!(
        reasons[0],
        ("big", Rejection::BodyTooLarge { .. })
    ));
    assert!(matches!(
        reasons[1],
        ("anon", Rejection::NodeIdInvalid { .. })
    ));
    assert!(matches!(
        reasons[2],
        ("future", Rejection::Clock(ClockError::TooFarAhead { .. }))
    ));
    assert!(matches!(
        reasons[3],
        ("zfull", Rejection::TooManyEntries { max: 3 })
    ));
    assert_eq!(reasons.len(), 4);
    assert!(
        store.clock().last().wall_ms < year_ms,
        "the future clock did not leak in"
    );
    store.check_invariants();
}

#[test]
fn hostile_names_are_truncated_in_reports() {
    let mut store = Store::new("n1", small());
    let huge = "x".repeat(100_000);
    let entry = Entry {
        name: huge,
        version: Version::new(Hlc::new(1, 0), "n2"),
        body: Body::Live(vec![]),
        proof: Vec::new(),
    };
    let outcome = store.merge_entries([entry], 1);
    assert_eq!(outcome.rejected.len(), 1);
    assert_eq!(outcome.rejected[0].0.len(), 8);
}

#[test]
fn restore_refuses_entries_over_the_bounds() {
    let entries = (0..4).map(|i| Entry {
        name: format!("w{i}"),
        version: Version::new(Hlc::new(1, 0), "n1"),
        body: Body::Live(vec![]),
        proof: Vec::new(),
    });
    let err = Store::restore("n1", small(), Hlc::default(), entries).unwrap_err();
    assert!(matches!(
        err,
        StoreError::Rejected {
            reason: Rejection::TooManyEntries { .. },
            ..
        }
    ));
}
