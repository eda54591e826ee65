//! Placement constraints on node labels: `"disk == ssd"`, `"zone != eu-1c"`, `"gpu"` (present),
//! `"!spot"` (absent), `"rack in (r1, r2)"`, `"arch not in (arm64)"`.
//!
//! A node's labels are matched together with the built-in keys ([`BUILT_IN_KEYS`]): `zone`
//! (the node's zone), `node` (its id), `os` and `arch`. A label a node does not have never equals anything and always differs.

/// Keys every node answers without a label: `zone` (its zone), `node` (its id), and since
/// placement algorithm 8, `os` and `arch` (its build's `std::env::consts::OS` and `ARCH`, as its
/// capabilities gossip them; the agents set them as labels). An agent refuses a `--label` of
/// one of them.
pub const BUILT_IN_KEYS: &[&str] = &["zone", "node", "os", "arch"];

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One constraint, parsed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Constraint {
    /// The label key (or `zone` / `node`).
    pub key: String,
    /// What must hold of the key's value.
    pub op: ConstraintOp,
}

/// The comparison a constraint makes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConstraintOp {
    /// The value equals this.
    Eq(String),
    /// The value is absent or differs from this.
    Ne(String),
    /// The value is one of these.
    In(Vec<String>),
    /// The value is absent or none of these.
    NotIn(Vec<String>),
    /// The key is present, whatever its value.
    Exists,
    /// The key is absent.
    Absent,
}

/// Longest constraint text accepted.
pub const CONSTRAINT_LEN_MAX: usize = 256;

/// Whether `s` may be a label key or value that constraints can name: 1 to 63 bytes of ASCII
/// letters, digits, `-`, `_`, `.` and `/`.
pub fn valid_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
}

impl Constraint {
    /// Parses the text form. The error says what was expected.
    pub fn parse(text: &str) -> Result<Constraint, String> {
        const HELP: &str =
            "expected `key == value`, `key != value`, `key in (a, b)`, `key not in (a, b)`, `key` or `!key`";
        if text.len() > CONSTRAINT_LEN_MAX {
            return Err(format!("constraint longer than {CONSTRAINT_LEN_MAX} bytes"));
        }
        let t = text.trim();
        let bad = || format!("{text:?} is not a constraint: {HELP}");
        let key_ok = |k: &str| -> Result<String, String> {
            if valid_token(k) {
                Ok(k.to_string())
            } else {
                Err(bad())
            }
        };
        for (sym, ne) in [("==", false), ("!=", true)] {
            if let Some((k, v)) = t.split_once(sym) {
                let (k, v) = (k.trim(), v.trim());
                if !valid_token(v) {
                    return Err(bad());
                }
                let op = if ne {
                    ConstraintOp::Ne(v.into())
                } else {
                    ConstraintOp::Eq(v.into())
                };
                return Ok(Constraint {
                    key: key_ok(k)?,
                    op,
                });
            }
        }
        for (sym, not) in [(" not in ", true), (" in ", false)] {
            if let Some((k, rest)) = t.split_once(sym) {
                let rest = rest.trim();
                let inner = rest
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(bad)?;
                let mut values: Vec<String> = Vec::new();
                for v in inner.split(',') {
                    let v = v.trim();
                    if !valid_token(v) {
                        return Err(bad());
                    }
                    values.push(v.to_string());
                }
                values.sort();
                values.dedup();
                let op = if not {
                    ConstraintOp::NotIn(values)
                } else {
                    ConstraintOp::In(values)
                };
                return Ok(Constraint {
                    key: key_ok(k.trim())?,
                    op,
                });
            }
        }
        if let Some(k) = t.strip_prefix('!') {
            return Ok(Constraint {
                key: key_ok(k.trim())?,
                op: ConstraintOp::Absent,
            });
        }
        Ok(Constraint {
            key: key_ok(t)?,
            op: ConstraintOp::Exists,
        })
    }

    /// True when a node with these labels, zone and id satisfies the constraint.
    pub fn matches(&self, labels: &BTreeMap<String, String>, zone: &str, node_id: &str) -> bool {
        let value: Option<&str> = match self.key.as_str() {
            "zone" => Some(zone).filter(|z| !z.is_empty()),
            "node" => Some(node_id),
            k => labels.get(k).map(String::as_str),
        };
        match &self.op {
            ConstraintOp::Eq(v) => value == Some(v.as_str()),
            ConstraintOp::Ne(v) => value != Some(v.as_str()),
            ConstraintOp::In(vs) => value.is_some_and(|x| vs.iter().any(|v| v == x)),
            ConstraintOp::NotIn(vs) => !value.is_some_and(|x| vs.iter().any(|v| v == x)),
            ConstraintOp::Exists => value.is_some(),
            ConstraintOp::Absent => value.is_none(),
        }
    }
}

impl std::fmt::Display for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = &self.key;
        match &self.op {
            ConstraintOp::Eq(v) => write!(f, "{k} == {v}"),
            ConstraintOp::Ne(v) => write!(f, "{k} != {v}"),
            ConstraintOp::In(vs) => write!(f, "{k} in ({})", vs.join(", ")),
            ConstraintOp::NotIn(vs) => write!(f, "{k} not in ({})", vs.join(", ")),
            ConstraintOp::Exists => write!(f, "{k}"),
            ConstraintOp::Absent => write!(f, "!{k}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_and_displays_every_form() {
        for text in [
            "disk == ssd",
            "zone != eu-1c",
            "rack in (r1, r2)",
            "arch not in (arm64)",
            "gpu",
            "!spot",
        ] {
            let c = Constraint::parse(text).unwrap();
            assert_eq!(c.to_string(), text);
            assert_eq!(Constraint::parse(&c.to_string()).unwrap(), c);
        }
        assert_eq!(
            Constraint::parse("disk==ssd").unwrap().to_string(),
            "disk == ssd"
        );
    }

    #[test]
    fn rejects_malformed() {
        for text in [
            "",
            "==",
            "disk ==",
            "== ssd",
            "a b",
            "rack in r1",
            "rack in ()",
            "x == y z",
            "k ~= v",
        ] {
            assert!(Constraint::parse(text).is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn matching() {
        let l = labels(&[("disk", "ssd"), ("rack", "r2")]);
        let m = |t: &str| Constraint::parse(t).unwrap().matches(&l, "eu-1a", "n7");
        assert!(m("disk == ssd"));
        assert!(!m("disk == hdd"));
        assert!(m("zone != eu-1c"));
        assert!(!m("zone != eu-1a"));
        assert!(m("rack in (r1, r2)"));
        assert!(!m("rack not in (r2)"));
        assert!(m("gpu not in (a100)"));
        assert!(!m("gpu"));
        assert!(m("!gpu"));
        assert!(m("node == n7"));
        assert!(!m("missing == x"));
        assert!(m("missing != x"));
    }
}
