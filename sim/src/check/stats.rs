//! Small statistics over samples in ms.

use serde::Serialize;

/// The p-th percentile (nearest rank) of `values`, or None when empty.
pub fn percentile(values: &[u64], p: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// A duration that may be unknown, for people: `1234 ms`, or `-` when there is none.
pub fn show_ms(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".to_string(), |ms| format!("{ms} ms"))
}

/// Count, p50, p99 and max of a set of durations.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Dist {
    /// Samples.
    pub count: usize,
    /// Median (ms).
    pub p50_ms: Option<u64>,
    /// 99th percentile (ms).
    pub p99_ms: Option<u64>,
    /// Largest (ms).
    pub max_ms: Option<u64>,
}

impl Dist {
    /// The distribution of `values`.
    pub fn of(values: &[u64]) -> Self {
        Dist {
            count: values.len(),
            p50_ms: percentile(values, 50.0),
            p99_ms: percentile(values, 99.0),
            max_ms: values.iter().copied().max(),
        }
    }

    /// `p50 / p99 / max ms (n)` for the terminal.
    pub fn show(&self) -> String {
        match (self.p50_ms, self.p99_ms, self.max_ms) {
            (Some(a), Some(b), Some(c)) => {
                format!("p50 {a} ms, p99 {b} ms, max {c} ms (n={})", self.count)
            }
            _ => "no samples".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_durations_read_as_a_dash() {
        assert_eq!(show_ms(Some(2001)), "2001 ms");
        assert_eq!(show_ms(None), "-");
        assert_eq!(Dist::of(&[]).show(), "no samples");
    }

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
