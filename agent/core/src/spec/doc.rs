//! A small document tree with source locations, built from TOML or JSON, so that one decoder can
//! walk either format and point at the exact line and column of every problem.

use toml::de::{DeTable, DeValue};

use super::error::{LineIndex, Location};

/// The input format, which also decides how types are named in messages ("table" or "object").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Toml,
    Json,
}

/// A value and where it starts.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) at: Option<Location>,
    pub(crate) value: Value,
}

/// A table entry: the key, where the key starts, and the value.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) key_at: Option<Location>,
    pub(crate) node: Node,
}

/// The values both formats can express. Integers too large for `i128` saturate, which every limit
/// then rejects.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    Str(String),
    Int(i128),
    Float(f64),
    Bool(bool),
    Datetime,
    Null,
    Array(Vec<Node>),
    Table(Vec<Entry>),
    /// Nested deeper than any spec field; kept only so that its kind can be named.
    TooDeep,
}

/// Deeper than any spec field (e.g. `container.ports[0].protocol` is depth 4); values below this
/// depth are never inspected, so they are not converted.
pub(crate) const DEPTH_MAX: usize = 16;

impl Value {
    /// "a string", "an integer", ...: the article-led kind used in "expected X, found Y".
    pub(crate) fn kind(&self, format: Format) -> &'static str {
        match (self, format) {
            (Value::Str(_), _) => "a string",
            (Value::Int(_), _) => "an integer",
            (Value::Float(_), Format::Toml) => "a float",
            (Value::Float(_), Format::Json) => "a number with a fraction",
            (Value::Bool(_), _) => "a boolean",
            (Value::Datetime, _) => "a datetime",
            (Value::Null, _) => "null",
            (Value::Array(_), _) => "an array",
            (Value::Table(_), Format::Toml) => "a table",
            (Value::Table(_), Format::Json) => "an object",
            (Value::TooDeep, _) => "a deeply nested value",
        }
    }
}

/// Names the table kind in the format's own words.
pub(crate) fn table_word(format: Format) -> &'static str {
    match format {
        Format::Toml => "a table",
        Format::Json => "an object",
    }
}

/// A TOML syntax error, already located.
pub(crate) struct SyntaxError {
    pub(crate) at: Option<Location>,
    pub(crate) message: String,
}

/// Parses TOML into a located tree. On syntax errors, returns the first error of each line: the
/// parser recovers and goes on, but later errors on the same line are mostly echoes of the first.
pub(crate) fn parse_toml(text: &str, lines: &LineIndex) -> Result<Node, Vec<SyntaxError>> {
    let (root, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        let mut out: Vec<SyntaxError> = Vec::new();
        for e in errors {
            let at = e.span().map(|s| lines.locate(s.start));
            if out
                .iter()
                .any(|seen| seen.at.map(|l| l.line) == at.map(|l| l.line))
            {
                continue;
            }
            out.push(SyntaxError {
                at,
                message: e.message().trim_end().to_string(),
            });
        }
        return Err(out);
    }
    let table = convert_table(root.get_ref(), lines, 1);
    Ok(Node {
        at: None,
        value: table,
    })
}

fn convert_table(table: &DeTable<'_>, lines: &LineIndex, depth: usize) -> Value {
    let mut entries: Vec<Entry> = table
        .iter()
        .map(|(k, v)| Entry {
            key: k.get_ref().to_string(),
            key_at: Some(lines.locate(k.span().start)),
            node: Node {
                at: Some(lines.locate(v.span().start)),
                value: convert(v.get_ref(), lines, depth + 1),
            },
        })
        .collect();
    // The TOML map is sorted by key; source order reads better in messages and renderings.
    entries.sort_by_key(|e| e.key_at);
    Value::Table(entries)
}

fn convert(value: &DeValue<'_>, lines: &LineIndex, depth: usize) -> Value {
    if depth > DEPTH_MAX {
        return Value::TooDeep;
    }
    match value {
        DeValue::String(s) => Value::Str(s.to_string()),
        DeValue::Integer(i) => {
            Value::Int(i128::from_str_radix(i.as_str(), i.radix()).unwrap_or(i128::MAX))
        }
        DeValue::Float(f) => Value::Float(parse_toml_float(f.as_str())),
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(_) => Value::Datetime,
        DeValue::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| Node {
                    at: Some(lines.locate(v.span().start)),
                    value: convert(v.get_ref(), lines, depth + 1),
                })
                .collect(),
        ),
        DeValue::Table(t) => convert_table(t, lines, depth),
    }
}

fn parse_toml_float(text: &str) -> f64 {
    let t = text.replace('_', "");
    match t.as_str() {
        "inf" | "+inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        "nan" | "+nan" | "-nan" => f64::NAN,
        _ => t.parse().unwrap_or(f64::NAN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(node: &Node) -> &[Entry] {
        match &node.value {
            Value::Table(e) => e,
            other => panic!("not a table: {other:?}"),
        }
    }

    #[test]
    fn toml_tree_keeps_source_order_and_locations() {
        let text = "name = \"x\"\nreplicas = 0x10\n[resources]\ncpu = 0.5\n";
        let lines = LineIndex::new(text);
        let root = parse_toml(text, &lines).ok().unwrap();
        let entries = table(&root);
        let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["name", "replicas", "resources"]);
        assert!(matches!(entries[1].node.value, Value::Int(16)));
        assert_eq!(
            entries[1].node.at,
            Some(Location {
                line: 2,
                column: 12
            })
        );
        let cpu = &table(&entries[2].node)[0];
        assert!(matches!(cpu.node.value, Value::Float(f) if f == 0.5));
        assert_eq!(cpu.key_at, Some(Location { line: 4, column: 1 }));
    }

    #[test]
    fn toml_syntax_errors_are_located_once_per_line() {
        let text = "name = \"x\nreplicas = 3 4\n";
        let lines = LineIndex::new(text);
        let errors = parse_toml(text, &lines).err().unwrap();
        let at: Vec<u32> = errors.iter().map(|e| e.at.unwrap().line).collect();
        assert_eq!(at, [1, 2]);
    }
}
