//! Validation problems: each one says where (file, line, column, field path) and what is wrong.

use std::cell::Cell;
use std::fmt;

/// A place in a source text: 1-based line and column (columns count characters, not bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    /// Line number, starting at 1.
    pub line: u32,
    /// Column number, starting at 1, in characters.
    pub column: u32,
}

/// One problem found in a spec.
///
/// Displayed as `file:line:col: path: message`, leaving out the parts that are unknown: a spec that
/// arrived over the network has no file, a JSON field error may have no location, a syntax error
/// has no field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The file name as the user gave it, or empty when the spec did not come from a file.
    pub file: String,
    /// Where in the file, when the format tells.
    pub location: Option<Location>,
    /// The field path, e.g. `resources.cpu` or `container.ports[1].host`; empty for the document.
    pub path: String,
    /// What is wrong and, where it helps, what to write instead.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.file.is_empty() {
            write!(f, "{}", self.file)?;
            if let Some(at) = self.location {
                write!(f, ":{}:{}", at.line, at.column)?;
            }
            f.write_str(": ")?;
        } else if let Some(at) = self.location {
            write!(f, "{}:{}: ", at.line, at.column)?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in one spec, in source order: at most [`super::ERRORS_MAX`], then a line
/// counting the rest. Never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecErrors {
    errors: Vec<SpecError>,
    total: usize,
}

impl SpecErrors {
    /// Wraps a list of problems, sorted by location (problems without one first) then by path,
    /// keeping the first [`super::ERRORS_MAX`].
    ///
    /// # Panics
    /// If `errors` is empty: an error value must carry at least one problem.
    pub fn new(mut errors: Vec<SpecError>) -> Self {
        assert!(!errors.is_empty(), "SpecErrors needs at least one problem");
        errors.sort_by(|a, b| (a.location, &a.path).cmp(&(b.location, &b.path)));
        errors.dedup();
        let total = errors.len();
        if errors.len() > super::ERRORS_MAX {
            let more = errors.len() - super::ERRORS_MAX;
            errors.truncate(super::ERRORS_MAX);
            let file = errors[0].file.clone();
            errors.push(SpecError {
                file,
                location: None,
                path: String::new(),
                message: format!("{more} more problems not shown"),
            });
        }
        SpecErrors { errors, total }
    }

    /// One problem with no location, for whole-input failures such as an oversized file.
    pub fn single(file: &str, message: impl Into<String>) -> Self {
        SpecErrors::new(vec![SpecError {
            file: file.to_string(),
            location: None,
            path: String::new(),
            message: message.into(),
        }])
    }

    /// The problems, in source order, with the "more problems not shown" line when there are
    /// too many.
    pub fn errors(&self) -> &[SpecError] {
        &self.errors
    }

    /// How many lines [`SpecErrors::errors`] holds (see [`SpecErrors::total`]).
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// How many problems were found, including those past [`super::ERRORS_MAX`] not listed.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Always false: kept for the `len` convention.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Sets the file name on every problem (e.g. for a spec re-validated after a network hop).
    pub fn with_file(mut self, file: &str) -> Self {
        for e in &mut self.errors {
            e.file = file.to_string();
        }
        self
    }
}

impl fmt::Display for SpecErrors {
    /// One problem per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecErrors {}

impl IntoIterator for SpecErrors {
    type Item = SpecError;
    type IntoIter = std::vec::IntoIter<SpecError>;
    fn into_iter(self) -> Self::IntoIter {
        self.errors.into_iter()
    }
}

/// Maps byte offsets of a text to 1-based line and character column.
pub(crate) struct LineIndex<'t> {
    text: &'t str,
    line_starts: Vec<usize>,
    /// The last offset located and its column: walks locate in increasing order, so counting
    /// resumes from here instead of from the line start (long one-line JSON stays linear).
    last: Cell<(usize, usize)>,
}

impl<'t> LineIndex<'t> {
    pub(crate) fn new(text: &'t str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex {
            text,
            line_starts,
            last: Cell::new((0, 1)),
        }
    }

    /// The location of a byte offset; offsets past the end or inside a character are clamped.
    pub(crate) fn locate(&self, offset: usize) -> Location {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let start = self.line_starts[line - 1];
        let (last_offset, last_column) = self.last.get();
        let column = if (start..=offset).contains(&last_offset) {
            last_column + self.text[last_offset..offset].chars().count()
        } else {
            self.text[start..offset].chars().count() + 1
        };
        self.last.set((offset, column));
        Location {
            line: saturate(line),
            column: saturate(column),
        }
    }

    /// The byte offset of a 1-based line and byte column (as serde_json reports them), clamped.
    pub(crate) fn offset_of(&self, line: usize, byte_column: usize) -> usize {
        let start = match line.checked_sub(1).and_then(|l| self.line_starts.get(l)) {
            Some(&s) => s,
            None => return self.text.len(),
        };
        start
            .saturating_add(byte_column.saturating_sub(1))
            .min(self.text.len())
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_leaves_out_unknown_parts() {
        let mut e = SpecError {
            file: "web.toml".into(),
            location: Some(Location { line: 7, column: 7 }),
            path: "resources.cpu".into(),
            message: "bad".into(),
        };
        assert_eq!(e.to_string(), "web.toml:7:7: resources.cpu: bad");
        e.location = None;
        assert_eq!(e.to_string(), "web.toml: resources.cpu: bad");
        e.path.clear();
        assert_eq!(e.to_string(), "web.toml: bad");
        e.file.clear();
        e.path = "name".into();
        assert_eq!(e.to_string(), "name: bad");
    }

    #[test]
    fn line_index_counts_characters() {
        let idx = LineIndex::new("ab\néé = 1\n");
        assert_eq!(idx.locate(0), Location { line: 1, column: 1 });
        assert_eq!(idx.locate(3), Location { line: 2, column: 1 });
        assert_eq!(idx.locate(7), Location { line: 2, column: 3 });
        assert_eq!(
            idx.locate(4),
            Location { line: 2, column: 1 },
            "inside a character"
        );
        assert_eq!(idx.locate(999), Location { line: 3, column: 1 });
        assert_eq!(idx.offset_of(2, 3), 5);
        assert_eq!(idx.offset_of(9, 1), 12);
    }
}
