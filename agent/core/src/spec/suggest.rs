//! "Did you mean ...?": the known word nearest to a misspelt one.

/// The candidate nearest to `word` by edit distance (adjacent swaps count once), if near enough
/// to be a plausible typo.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    let typo = candidates
        .iter()
        .map(|c| (edit_distance(&word, c), *c))
        .filter(|(d, c)| *d <= (c.len() / 3).max(1))
        .min()
        .map(|(_, c)| c);
    // A part of a compound name (`grace` for `start_grace`) is a near miss too.
    typo.or_else(|| {
        candidates
            .iter()
            .copied()
            .find(|c| !word.is_empty() && c.split('_').any(|part| part == word))
    })
}

/// Optimal string alignment distance over characters; inputs are short field names, so the
/// quadratic table is cheap. Long inputs are cut off first: no field name is that long.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(64).collect();
    let b: Vec<char> = b.chars().take(64).collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_typos_not_strangers() {
        let known = ["name", "replicas", "process", "container", "resources"];
        assert_eq!(closest("replica", &known), Some("replicas"));
        assert_eq!(closest("resoruces", &known), Some("resources"));
        assert_eq!(closest("Name", &known), Some("name"));
        assert_eq!(closest("image", &known), None);
        assert_eq!(closest("", &known), None);
        assert_eq!(
            closest("grace", &["interval", "start_grace"]),
            Some("start_grace")
        );
    }
}
