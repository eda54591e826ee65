//! Times in the agents' messages for people: a UTC time an agent wrote (`next attempt at
//! 2026-12-03 17:24:30.163Z (backoff)`) gets how far it is from now, `(in 12 s)`. The agents
//! write absolute times (their messages do not change with every tick); the CLI, reading at one
//! moment, adds the relative one.

use shoal_core::hlc::parse_utc_ms;

/// Length of `2026-12-03 17:24:30.163Z`.
const STAMP_LEN: usize = 24;

/// How far from `now_ms` a time still reads relative (beyond, the date says enough).
const RELATIVE_MS_MAX: u64 = 24 * 3_600_000;

/// `text` with ` (in 12 s)` or ` (3 min ago)` after each UTC time in it within a day of
/// `now_ms`, except where a version's ` by NODE` follows (a version is a name, not a moment).
pub fn with_relative_times(text: &str, now_ms: u64) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(at) = find_stamp(rest) {
        let end = at + STAMP_LEN;
        out.push_str(&rest[..end]);
        let ms = parse_utc_ms(&rest[at..end]).expect("find_stamp checked it");
        let after = &rest[end..];
        let version = after.starts_with(" by ") || after.starts_with(" #");
        if !version && ms.abs_diff(now_ms) <= RELATIVE_MS_MAX {
            out.push_str(&format!(" ({})", relative(ms, now_ms)));
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Where the first `YYYY-MM-DD HH:MM:SS.mmmZ` in `text` starts.
fn find_stamp(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    (0..bytes.len().saturating_sub(STAMP_LEN - 1)).find(|&i| {
        text.is_char_boundary(i)
            && text.is_char_boundary(i + STAMP_LEN)
            && bytes[i + 4] == b'-'
            && bytes[i + 10] == b' '
            && bytes[i + STAMP_LEN - 1] == b'Z'
            && parse_utc_ms(&text[i..i + STAMP_LEN]).is_some()
    })
}

/// `in 12 s`, `3 min ago`, `now`.
pub fn relative(at_ms: u64, now_ms: u64) -> String {
    let secs = at_ms.abs_diff(now_ms) / 1000;
    let amount = match secs {
        0 => return "now".to_string(),
        1..=119 => format!("{secs} s"),
        120..=7199 => format!("{} min", secs / 60),
        _ => format!("{} h", secs / 3600),
    };
    match at_ms > now_ms {
        true => format!("in {amount}"),
        false => format!("{amount} ago"),
    }
}

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_796_318_658_163; // 2026-12-03 17:24:18.163Z

    #[test]
    fn agent_times_read_relative() {
        assert_eq!(
            with_relative_times(
                "exited; 3 consecutive failures, next attempt at 2026-12-03 17:24:30.163Z (backoff)",
                NOW
            ),
            "exited; 3 consecutive failures, next attempt at 2026-12-03 17:24:30.163Z (in 12 s) \
             (backoff)"
        );
        assert_eq!(
            with_relative_times("failed at 2026-12-03 17:21:18.163Z", NOW),
            "failed at 2026-12-03 17:21:18.163Z (3 min ago)"
        );
    }

    #[test]
    fn versions_and_far_times_stay_as_they_are() {
        for text in [
            "the new copy at 2026-12-03 17:20:03.563Z by n1 failed",
            "the new copy at 2026-12-03 17:20:03.563Z #2 by n1 failed",
            "next attempt at 2027-01-15 08:00:00.000Z",
            "no time here, 2026-12-03 but not a stamp",
            "",
            "ünïcödé 2026-12-03 17:24:30.163Z",
        ] {
            let shown = with_relative_times(text, NOW);
            if text.starts_with('ü') {
                assert_eq!(shown, format!("{text} (in 12 s)"));
            } else {
                assert_eq!(shown, text);
            }
        }
        assert_eq!(relative(NOW, NOW), "now");
        assert_eq!(relative(NOW + 3 * 3_600_000, NOW), "in 3 h");
    }
}
