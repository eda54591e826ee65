//! Hybrid logical clock: monotonic output, causality across nodes, the skew bound, restarts.

use proptest::prelude::*;
use shoal_core::hlc::{
    format_utc_ms, format_version, parse_utc_ms, Clock, ClockError, Hlc, Version,
};

const DRIFT_MS: u64 = 1_000;

#[derive(Clone, Debug)]
enum Op {
    Tick { now_ms: u64 },
    Observe { remote: Hlc, now_ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..5_000).prop_map(|now_ms| Op::Tick { now_ms }),
        (0u64..7_000, any::<u32>(), 0u64..5_000).prop_map(|(w, l, now_ms)| Op::Observe {
            remote: Hlc::new(w, l),
            now_ms
        }),
    ]
}

proptest! {
    /// Whatever physical time does, every timestamp the clock hands out is larger than the last;
    /// a rejected observation leaves the clock as it was.
    #[test]
    fn output_is_strictly_monotonic(ops in prop::collection::vec(op(), 1..200)) {
        let mut clock = Clock::new(DRIFT_MS);
        let mut last = clock.last();
        for op in ops {
            let out = match op {
                Op::Tick { now_ms } => Ok(clock.tick(now_ms)),
                Op::Observe { remote, now_ms } => clock.observe(remote, now_ms),
            };
            match out {
                Ok(ts) => {
                    prop_assert!(ts > last, "{ts} not after {last}");
                    prop_assert_eq!(clock.last(), ts);
                    last = ts;
                }
                Err(ClockError::TooFarAhead { .. }) => prop_assert_eq!(clock.last(), last),
            }
        }
    }

    /// Nodes exchanging messages: a receive is ordered after its send and after everything the
    /// receiver did before; timestamps never run ahead of the largest physical time seen anywhere.
    #[test]
    fn causality_is_preserved(
        steps in prop::collection::vec((0usize..4, 0usize..4, 0u64..50, any::<bool>()), 1..300),
    ) {
        let mut clocks = vec![Clock::new(DRIFT_MS); 4];
        // Each node's physical clock runs at its own offset, within the skew bound.
        let offsets = [0u64, 300, 600, 900];
        let mut time_ms = 10_000u64;
        let mut physical_max_ms = 0;
        for (from, to, advance_ms, send) in steps {
            time_ms += advance_ms;
            let now = |i: usize| time_ms + offsets[i];
            physical_max_ms = physical_max_ms.max(now(from)).max(now(to));
            let sent = clocks[from].tick(now(from));
            if send {
                let before = clocks[to].last();
                let received = clocks[to].observe(sent, now(to)).expect("within the skew bound");
                prop_assert!(received > sent, "receive {received} not after send {sent}");
                prop_assert!(received > before);
            }
            for c in &clocks {
                prop_assert!(c.last().wall_ms <= physical_max_ms);
            }
        }
    }

    /// Versions order by timestamp first and node id only to break ties.
    #[test]
    fn version_order_is_hlc_then_node(a in (0u64..3, 0u32..3, "[ab]"), b in (0u64..3, 0u32..3, "[ab]")) {
        let va = Version::new(Hlc::new(a.0, a.1), a.2.clone());
        let vb = Version::new(Hlc::new(b.0, b.1), b.2.clone());
        let expected = (Hlc::new(a.0, a.1), a.2).cmp(&(Hlc::new(b.0, b.1), b.2));
        prop_assert_eq!(va.cmp(&vb), expected);
    }
}

#[test]
fn tick_follows_physical_time_when_it_advances() {
    let mut clock = Clock::new(DRIFT_MS);
    assert_eq!(clock.tick(100), Hlc::new(100, 0));
    assert_eq!(clock.tick(100), Hlc::new(100, 1));
    assert_eq!(
        clock.tick(90),
        Hlc::new(100, 2),
        "time went backwards: logical counts on"
    );
    assert_eq!(clock.tick(101), Hlc::new(101, 0));
}

#[test]
fn observe_takes_the_larger_of_local_and_remote() {
    let mut clock = Clock::new(DRIFT_MS);
    clock.tick(100);
    assert_eq!(clock.observe(Hlc::new(500, 7), 200), Ok(Hlc::new(500, 8)));
    assert_eq!(clock.observe(Hlc::new(500, 3), 200), Ok(Hlc::new(500, 9)));
    assert_eq!(clock.observe(Hlc::new(10, 3), 600), Ok(Hlc::new(600, 0)));
}

#[test]
fn a_remote_clock_far_in_the_future_is_rejected_not_adopted() {
    let mut clock = Clock::new(DRIFT_MS);
    clock.tick(1_000);
    let year_ms = 365 * 24 * 3600 * 1000;
    let err = clock
        .observe(Hlc::new(1_000 + year_ms, 0), 1_000)
        .unwrap_err();
    let ClockError::TooFarAhead {
        ahead_ms,
        drift_ms_max,
        ..
    } = err.clone();
    assert_eq!((ahead_ms, drift_ms_max), (year_ms, DRIFT_MS));
    assert!(
        err.to_string().contains("NTP"),
        "the message says what to check: {err}"
    );
    assert_eq!(clock.last(), Hlc::new(1_000, 0), "the clock did not move");
    // Exactly at the bound is still accepted.
    assert_eq!(
        clock.observe(Hlc::new(2_000, 0), 1_000),
        Ok(Hlc::new(2_000, 1))
    );
}

#[test]
fn a_restarted_clock_never_goes_below_its_high_water_mark() {
    let high_water = Hlc::new(5_000, 42);
    let mut clock = Clock::with_high_water(high_water, DRIFT_MS);
    // The host's clock was set back during the restart.
    assert_eq!(clock.tick(1_000), Hlc::new(5_000, 43));
}

#[test]
fn a_full_logical_counter_carries_into_the_wall_time() {
    assert_eq!(Hlc::new(5, u32::MAX).successor(), Hlc::new(6, 0));
    let mut clock = Clock::with_high_water(Hlc::new(5, u32::MAX), DRIFT_MS);
    assert_eq!(clock.tick(5), Hlc::new(6, 0));
}

#[test]
fn utc_times_read_as_calendar_dates() {
    assert_eq!(format_utc_ms(0), "1970-01-01 00:00:00.000Z");
    assert_eq!(format_utc_ms(1_800_000_000_000), "2027-01-15 08:00:00.000Z");
    assert_eq!(format_utc_ms(1_709_210_096_789), "2024-02-29 12:34:56.789Z");
    assert_eq!(format_utc_ms(1_796_012_707_068), "2026-11-30 04:25:07.068Z");
    assert_eq!(
        format_utc_ms(253_402_300_799_999),
        "9999-12-31 23:59:59.999Z"
    );
    assert!(format_utc_ms(u64::MAX).ends_with('Z'), "no overflow");
}

#[test]
fn a_version_shows_when_and_by_whom() {
    let v = Version::new(Hlc::new(1_796_012_707_068, 0), "n3");
    assert_eq!(v.human(), "2026-11-30 04:25:07.068Z by n3");
    let v = Version::new(Hlc::new(1_796_012_707_068, 2), "n3");
    assert_eq!(v.human(), "2026-11-30 04:25:07.068Z #2 by n3");
    // The raw form stays what machines read.
    assert_eq!(v.to_string(), "1796012707068.2@n3");
    assert_eq!(
        format_version("1796012707068.2@n3"),
        "2026-11-30 04:25:07.068Z #2 by n3"
    );
    assert_eq!(format_version("v1"), "v1", "not a version: shown as it is");
}

#[test]
fn malformed_versions_do_not_parse() {
    for bad in [
        "", "1.2", "1@n1", "a.0@n1", "1.b@n1", "1.0@", ".0@n1", "1.@n1", "-1.0@n1",
    ] {
        assert!(bad.parse::<Version>().is_err(), "{bad:?} parsed");
    }
    let node_with_at = "5.1@host@dc".parse::<Version>().unwrap();
    assert_eq!(node_with_at, Version::new(Hlc::new(5, 1), "host@dc"));
}

#[test]
fn every_shown_form_of_a_version_parses_back() {
    let v = Version::new(Hlc::new(1_796_012_707_068, 0), "n3");
    for text in [
        "1796012707068.0@n3",
        "2026-11-30 04:25:07.068Z by n3",
        "  2026-11-30T04:25:07.068Z by n3 ",
    ] {
        assert_eq!(Version::parse_any(text), Ok(v.clone()), "{text:?}");
    }
    let counted = Version::new(Hlc::new(1_796_012_707_068, 2), "n3");
    assert_eq!(
        Version::parse_any("2026-11-30 04:25:07.068Z #2 by n3"),
        Ok(counted)
    );
    assert_eq!(parse_utc_ms("1970-01-01 00:00:00Z"), Some(0));
    assert_eq!(
        parse_utc_ms("2024-02-29 12:34:56.789Z"),
        Some(1_709_210_096_789)
    );
    for bad in [
        "",
        "yesterday",
        "2026-11-30 04:25:07.068Z",
        "2026-11-30 04:25:07.068Z by ",
        "2026-11-30 04:25:07.068 by n3",
        "2026-02-30 04:25:07.068Z by n3",
        "2026-11-30 24:00:00.000Z by n3",
        "1969-12-31 23:59:59.999Z by n3",
        "2026-11-30 04:25:07.068Z #x by n3",
        "2026-11-30 04:25:07.068Z by two words",
    ] {
        let err = Version::parse_any(bad).unwrap_err();
        assert!(err.contains("is not a version"), "{bad:?}: {err}");
    }
}

proptest! {
    /// Every human form parses back to the version it came from.
    #[test]
    fn the_human_form_round_trips(wall in 0u64..253_402_300_800_000, logical in any::<u32>(), node in "[a-z0-9.-]{1,20}") {
        let v = Version::new(Hlc::new(wall, logical), node);
        prop_assert_eq!(Version::parse_any(&v.human()), Ok(v));
    }

    /// The raw form parses back to the version it came from.
    #[test]
    fn the_raw_form_round_trips(wall in any::<u64>(), logical in any::<u32>(), node in "[a-z0-9.-]{1,20}") {
        let v = Version::new(Hlc::new(wall, logical), node);
        prop_assert_eq!(v.to_string().parse::<Version>(), Ok(v));
    }

    /// Up to year 9999 the UTC text sorts as the time does: two versions compare at a glance.
    #[test]
    fn utc_text_sorts_as_time(a in 0u64..253_402_300_800_000, b in 0u64..253_402_300_800_000) {
        let (ta, tb) = (format_utc_ms(a), format_utc_ms(b));
        prop_assert_eq!(a.cmp(&b), ta.cmp(&tb), "{} vs {}", ta, tb);
    }
}
