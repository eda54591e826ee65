//! Durations as operators write them: `500ms`, `10s`, `5m`, `1h30m`.

const UNITS_MS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Parses a duration into milliseconds: one or more `<integer><unit>` parts with units `h`, `m`,
/// `s`, `ms`, largest first, e.g. `1h30m` or `2s500ms`. Bounds are checked by the caller.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a duration (examples: 500ms, 10s, 5m, 1h30m)");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut smallest_seen = usize::MAX; // index into UNITS_MS of the last unit, to enforce order
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 12 {
            return Err(bad());
        }
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, tail) = tail.split_at(unit_len);
        let index = UNITS_MS
            .iter()
            .position(|(u, _)| *u == unit)
            .ok_or_else(bad)?;
        if smallest_seen != usize::MAX && index <= smallest_seen {
            return Err(format!(
                "{text:?}: write the units of a duration once each, largest first (e.g. 1h30m)"
            ));
        }
        smallest_seen = index;
        let n: u64 = number.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(UNITS_MS[index].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| format!("{text:?} is too long"))?;
        rest = tail;
    }
    Ok(total)
}

/// Formats milliseconds in the shortest form [`parse_duration_ms`] reads back: `0s`, `1h30m`.
pub fn format_duration_ms(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, size) in UNITS_MS {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_compounds() {
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("10s"), Ok(10_000));
        assert_eq!(parse_duration_ms("5m"), Ok(300_000));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("2s500ms"), Ok(2_500));
        assert_eq!(parse_duration_ms("0s"), Ok(0));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "10",
            "s",
            "10 s",
            "1.5s",
            "-1s",
            "10sec",
            "1d",
            "ms5",
            "999999999999999h",
        ] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(
            parse_duration_ms("10").unwrap_err(),
            "\"10\" is not a duration (examples: 500ms, 10s, 5m, 1h30m)"
        );
        assert!(parse_duration_ms("30s1m")
            .unwrap_err()
            .contains("largest first"));
        assert!(parse_duration_ms("1s1s").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for ms in [0, 1, 999, 1000, 60_000, 5_400_000, 86_400_000, 3_723_004] {
            assert_eq!(parse_duration_ms(&format_duration_ms(ms)), Ok(ms), "{ms}");
        }
        assert_eq!(format_duration_ms(3_723_004), "1h2m3s4ms");
    }
}
