//! One record of a log file: `<RFC 3339 UTC time with ns> <stream> <F|P> <text>\n`, the CRI
//! format, and the RFC 3339 times the docker engine stamps its lines with.

use super::{LogLine, Stream};

/// The record of `line`, with its newline.
pub fn format(line: &LogLine) -> String {
    let tag = if line.partial { 'P' } else { 'F' };
    format!(
        "{} {} {tag} {}\n",
        rfc3339_ns(line.at_ns),
        line.stream.as_str(),
        line.text
    )
}

/// The line of one record (without its newline); `None` for a record that is not one (a torn
/// write after a crash).
pub fn parse(record: &str) -> Option<LogLine> {
    let mut parts = record.splitn(4, ' ');
    let at_ns = parse_rfc3339_ns(parts.next()?)?;
    let stream = match parts.next()? {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        _ => return None,
    };
    let partial = match parts.next()? {
        "F" => false,
        "P" => true,
        _ => return None,
    };
    let text = parts.next().unwrap_or("").to_string();
    Some(LogLine {
        at_ns,
        stream,
        partial,
        text,
    })
}

/// `ns` since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
pub fn rfc3339_ns(ns: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ns as i128)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.nanosecond()
    )
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (UTC only, 0 to 9 fraction digits) to ns since the
/// Unix epoch.
pub fn parse_rfc3339_ns(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, clock) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i32>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut c = hms.splitn(3, ':').map(|p| p.parse::<u8>().ok());
    let (hour, minute, second) = (c.next()??, c.next()??, c.next()??);
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: u32 = format!("{fraction:0<9}").parse().ok()?;
    let month = time::Month::try_from(u8::try_from(month).ok()?).ok()?;
    let date = time::Date::from_calendar_date(year, month, u8::try_from(day).ok()?).ok()?;
    let clock = time::Time::from_hms_nano(hour, minute, second, nanos).ok()?;
    let ns = time::PrimitiveDateTime::new(date, clock)
        .assume_utc()
        .unix_timestamp_nanos();
    u64::try_from(ns).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let line = LogLine {
            at_ns: 1_796_083_200_123_456_789,
            stream: Stream::Stderr,
            partial: true,
            text: "a b  c".into(),
        };
        let record = format(&line);
        assert_eq!(record, "2026-12-01T00:00:00.123456789Z stderr P a b  c\n");
        assert_eq!(parse(record.trim_end_matches('\n')), Some(line));
        assert_eq!(parse("2026-12-01T00:00:00Z stdout F"), {
            Some(LogLine {
                at_ns: 1_796_083_200_000_000_000,
                stream: Stream::Stdout,
                partial: false,
                text: String::new(),
            })
        });
        assert_eq!(parse("garbage"), None);
        assert_eq!(parse("2026-12-01T00:00:00Z other F x"), None);
    }

    #[test]
    fn engine_times_parse_with_short_fractions() {
        assert_eq!(
            parse_rfc3339_ns("1970-01-01T00:00:01.5Z"),
            Some(1_500_000_000)
        );
        assert_eq!(parse_rfc3339_ns("1970-01-01T00:00:01+01:00"), None);
        assert_eq!(parse_rfc3339_ns("1970-13-01T00:00:01Z"), None);
    }
}
