//! Reading the located tree: a context that collects every problem, a table reader that notices
//! unknown and duplicate fields, and typed getters that say what was expected and what was found.

use std::collections::{BTreeMap, BTreeSet};

use super::doc::{table_word, Entry, Format, Node, Value};
use super::error::{Location, SpecError};
use super::suggest::closest;

/// Everything learned while decoding one document.
pub(crate) struct Ctx {
    pub(crate) file: String,
    pub(crate) format: Format,
    pub(crate) errors: Vec<SpecError>,
    /// Paths already reported; later checks on them or on anything under them stay quiet, so one
    /// mistake gives one message.
    pub(crate) broken: BTreeSet<String>,
    /// Where the value at each path starts, for locating problems found on the typed spec.
    pub(crate) located: BTreeMap<String, Location>,
}

impl Ctx {
    pub(crate) fn new(file: &str, format: Format) -> Self {
        Ctx {
            file: file.to_string(),
            format,
            errors: Vec::new(),
            broken: BTreeSet::new(),
            located: BTreeMap::new(),
        }
    }

    /// Records a problem at `path` and keeps later checks on it quiet.
    pub(crate) fn error(&mut self, at: Option<Location>, path: &str, message: impl Into<String>) {
        if !path.is_empty() {
            self.broken.insert(path.to_string());
        }
        self.problem(at, path, message);
    }

    /// Records a problem about how `path` is put together (a missing or surplus part) without
    /// silencing checks on the fields inside it.
    pub(crate) fn problem(&mut self, at: Option<Location>, path: &str, message: impl Into<String>) {
        self.errors.push(SpecError {
            file: self.file.clone(),
            location: at,
            path: path.to_string(),
            message: message.into(),
        });
    }

    /// "expected X, found Y", with a hint when the value is merely quoted.
    pub(crate) fn wrong_type(&mut self, path: &str, node: &Node, expected: &str) {
        let found = node.value.kind(self.format);
        let mut message = format!("expected {expected}, found {found}");
        match &node.value {
            Value::Str(s) => {
                let t = s.trim();
                let unquoted = (expected.contains("integer") && t.parse::<i64>().is_ok())
                    || (expected.contains("boolean") && (t == "true" || t == "false"));
                if unquoted {
                    message.push_str(&format!(" (write {t} without quotes)"));
                }
            }
            Value::Int(_) | Value::Float(_) | Value::Bool(_)
                if expected.starts_with("a string") =>
            {
                message.push_str(" (put it in quotes)");
            }
            _ => {}
        }
        self.error(node.at, path, message);
    }

    /// True when `path` or an enclosing or enclosed path was already reported.
    pub(crate) fn is_broken(&self, path: &str) -> bool {
        self.broken
            .iter()
            .any(|b| is_within(path, b) || is_within(b, path))
    }

    /// The location of `path`, or of its nearest located ancestor.
    pub(crate) fn locate(&self, path: &str) -> Option<Location> {
        let mut p = path;
        loop {
            if let Some(at) = self.located.get(p) {
                return Some(*at);
            }
            p = &p[..p.rfind(['.', '['])?];
        }
    }
}

/// True when `inner` is `outer` or a field or element below it.
fn is_within(inner: &str, outer: &str) -> bool {
    outer.is_empty()
        || inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with(['.', '[']))
}

/// The path of field `key` in the table at `parent`; keys that are not bare words are quoted.
pub(crate) fn join(parent: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let key = if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

/// The path of element `i` of the array at `parent`.
pub(crate) fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// Unknown fields reported one by one in a table; the rest are summed up.
const UNKNOWN_FIELDS_REPORTED_MAX: usize = 20;

/// Reads the fields of one table, remembering which names the decoder asked for so that every
/// other key can be reported as unknown.
pub(crate) struct Fields<'n> {
    path: String,
    at: Option<Location>,
    entries: &'n [Entry],
    asked: Vec<&'static str>,
}

impl<'n> Fields<'n> {
    /// Opens `node` as a table, reporting a type error (and returning `None`) when it is not one.
    pub(crate) fn open(ctx: &mut Ctx, path: &str, node: &'n Node) -> Option<Fields<'n>> {
        let Value::Table(entries) = &node.value else {
            ctx.wrong_type(path, node, table_word(ctx.format));
            return None;
        };
        let mut seen: BTreeMap<&str, Option<Location>> = BTreeMap::new();
        for e in entries {
            if let Some(first) = seen.get(e.key.as_str()) {
                let line = first.map(|l| format!(" (first at {}:{})", l.line, l.column));
                let message = format!("duplicate field `{}`{}", e.key, line.unwrap_or_default());
                ctx.error(e.key_at, &join(path, &e.key), message);
            } else {
                seen.insert(&e.key, e.key_at);
            }
        }
        Some(Fields {
            path: path.to_string(),
            at: node.at,
            entries,
            asked: Vec::new(),
        })
    }

    /// The value of field `name` and its path, if present.
    pub(crate) fn get(&mut self, ctx: &mut Ctx, name: &'static str) -> Option<(&'n Node, String)> {
        self.asked.push(name);
        let entry = self.entries.iter().find(|e| e.key == name)?;
        let path = join(&self.path, name);
        if let Some(at) = entry.node.at {
            ctx.located.insert(path.clone(), at);
        }
        Some((&entry.node, path))
    }

    /// Like [`Fields::get`], reporting the field as missing when absent.
    pub(crate) fn require(
        &mut self,
        ctx: &mut Ctx,
        name: &'static str,
    ) -> Option<(&'n Node, String)> {
        let found = self.get(ctx, name);
        if found.is_none() {
            ctx.error(
                self.at,
                &join(&self.path, name),
                "required field is missing",
            );
        }
        found
    }

    /// Reports every key the decoder did not ask for, suggesting the closest known field, or the
    /// section where the key belongs (from `elsewhere`: section path and its fields).
    /// Past [`UNKNOWN_FIELDS_REPORTED_MAX`] unknown keys in one table, the rest are counted in one
    /// line: a file of garbage keys should not cost a suggestion search each.
    pub(crate) fn finish(self, ctx: &mut Ctx, elsewhere: &[(&str, &[&str])]) {
        let is_unknown = |e: &&Entry| !self.asked.contains(&e.key.as_str());
        let unknown_count = self.entries.iter().filter(is_unknown).count();
        for (reported, e) in self.entries.iter().filter(is_unknown).enumerate() {
            if reported == UNKNOWN_FIELDS_REPORTED_MAX {
                let rest = unknown_count - reported;
                ctx.problem(e.key_at, &self.path, format!("{rest} more unknown fields"));
                break;
            }
            let mut message = format!("unknown field `{}`", e.key);
            if let Some(close) = closest(&e.key, &self.asked) {
                message.push_str(&format!(", did you mean `{close}`?"));
            } else if let Some((section, _)) = elsewhere
                .iter()
                .find(|(s, fields)| *s != self.path && fields.contains(&e.key.as_str()))
            {
                message.push_str(&format!(", did you mean `{}`?", join(section, &e.key)));
            } else {
                message.push_str(&format!("; expected one of: {}", self.asked.join(", ")));
            }
            ctx.problem(e.key_at, &self.path, message);
        }
    }
}

/// A string value.
pub(crate) fn string(ctx: &mut Ctx, path: &str, node: &Node) -> Option<String> {
    match &node.value {
        Value::Str(s) => Some(s.clone()),
        _ => {
            ctx.wrong_type(path, node, "a string");
            None
        }
    }
}

/// A boolean value.
pub(crate) fn boolean(ctx: &mut Ctx, path: &str, node: &Node) -> Option<bool> {
    match node.value {
        Value::Bool(b) => Some(b),
        _ => {
            ctx.wrong_type(path, node, "a boolean (true or false)");
            None
        }
    }
}

/// An integer that fits `T`; when it does not, reports `range` (the same message the typed
/// validation gives for values `T` can hold but the limits reject).
pub(crate) fn integer<T: TryFrom<i128>>(
    ctx: &mut Ctx,
    path: &str,
    node: &Node,
    range: impl Fn(i128) -> String,
) -> Option<T> {
    match node.value {
        Value::Int(i) => match T::try_from(i) {
            Ok(v) => Some(v),
            Err(_) => {
                ctx.error(node.at, path, range(i));
                None
            }
        },
        _ => {
            ctx.wrong_type(path, node, "an integer");
            None
        }
    }
}

/// An array of strings. Each bad element is reported at its own path.
pub(crate) fn strings(ctx: &mut Ctx, path: &str, node: &Node) -> Option<Vec<String>> {
    let Value::Array(items) = &node.value else {
        ctx.wrong_type(path, node, "an array of strings");
        return None;
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = index(path, i);
        if let Some(at) = item.at {
            ctx.located.insert(p.clone(), at);
        }
        out.push(string(ctx, &p, item));
    }
    out.into_iter().collect()
}

/// A table of string values (environment, settings). Each bad value is reported at its own path
/// and left out, so that the names of the others are still checked.
pub(crate) fn string_map(
    ctx: &mut Ctx,
    path: &str,
    node: &Node,
) -> Option<BTreeMap<String, String>> {
    let Value::Table(entries) = &node.value else {
        ctx.wrong_type(
            path,
            node,
            &format!("{} of strings", table_word(ctx.format)),
        );
        return None;
    };
    // Duplicate keys are only possible in JSON; report them like any table does.
    Fields::open(ctx, path, node)?;
    let mut out = BTreeMap::new();
    for e in entries {
        let p = join(path, &e.key);
        if let Some(at) = e.node.at {
            ctx.located.insert(p.clone(), at);
        }
        if let Some(v) = string(ctx, &p, &e.node) {
            out.insert(e.key.clone(), v);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_nesting() {
        assert_eq!(join("", "name"), "name");
        assert_eq!(join("process.env", "A.B"), "process.env.\"A.B\"");
        assert_eq!(index("container.ports", 2), "container.ports[2]");
        assert!(is_within("process.command[0]", "process.command"));
        assert!(is_within("anything", ""));
        assert!(!is_within("process.commands", "process.command"));
    }
}
