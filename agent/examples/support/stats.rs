//! A median and a percentile of integer samples.

/// The median (the mean of the two middle values for an even count).
pub fn median(values: &[u64]) -> Option<u64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2),
    }
}

/// The `p`th percentile by nearest rank (`p` in 1..=100): the smallest value with at least `p`
/// percent of the values at or below it.
pub fn percentile(values: &[u64], p: u32) -> Option<u64> {
    assert!((1..=100).contains(&p), "a percentile is 1..=100, not {p}");
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * p as usize).div_ceil(100);
    sorted.get(rank.checked_sub(1)?).copied()
}
