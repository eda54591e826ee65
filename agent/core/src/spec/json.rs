//! JSON into the located tree. serde_json checks the syntax first (its messages and positions are
//! good, and its recursion limit bounds ours); a small walker then builds the tree over the text
//! known to be valid, recording where every key and value starts.

use super::doc::{Entry, Node, SyntaxError, Value, DEPTH_MAX};
use super::error::LineIndex;

/// Parses JSON into a located tree, or returns the syntax error.
pub(crate) fn parse_json(text: &str, lines: &LineIndex) -> Result<Node, SyntaxError> {
    if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let full = e.to_string();
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
        let at = (e.line() > 0).then(|| lines.locate(lines.offset_of(e.line(), e.column())));
        return Err(SyntaxError { at, message });
    }
    let mut walker = Walker {
        text,
        bytes: text.as_bytes(),
        i: 0,
        lines,
    };
    // The text is valid JSON, so the walker cannot fail; if it ever did, say so rather than panic.
    walker.value(1).ok_or_else(|| SyntaxError {
        at: None,
        message: "internal error: could not walk this JSON document".to_string(),
    })
}

struct Walker<'t> {
    text: &'t str,
    bytes: &'t [u8],
    i: usize,
    lines: &'t LineIndex<'t>,
}

impl Walker<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.skip_ws();
        (self.peek() == Some(b)).then(|| self.i += 1)
    }

    fn value(&mut self, depth: usize) -> Option<Node> {
        self.skip_ws();
        let at = Some(self.lines.locate(self.i));
        let value = match self.peek()? {
            b'{' => self.object(depth)?,
            b'[' => self.array(depth)?,
            b'"' => Value::Str(self.string()?),
            b't' => self.literal("true", Value::Bool(true))?,
            b'f' => self.literal("false", Value::Bool(false))?,
            b'n' => self.literal("null", Value::Null)?,
            _ => self.number()?,
        };
        let value = if depth > DEPTH_MAX {
            Value::TooDeep
        } else {
            value
        };
        Some(Node { at, value })
    }

    fn object(&mut self, depth: usize) -> Option<Value> {
        self.eat(b'{')?;
        let mut entries = Vec::new();
        if self.eat(b'}').is_some() {
            return Some(Value::Table(entries));
        }
        loop {
            self.skip_ws();
            let key_at = Some(self.lines.locate(self.i));
            let key = self.string()?;
            self.eat(b':')?;
            let node = self.value(depth + 1)?;
            entries.push(Entry { key, key_at, node });
            if self.eat(b',').is_none() {
                self.eat(b'}')?;
                return Some(Value::Table(entries));
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<Value> {
        self.eat(b'[')?;
        let mut items = Vec::new();
        if self.eat(b']').is_some() {
            return Some(Value::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            if self.eat(b',').is_none() {
                self.eat(b']')?;
                return Some(Value::Array(items));
            }
        }
    }

    /// A string token, decoded by serde_json (escapes, surrogate pairs).
    fn string(&mut self) -> Option<String> {
        let start = self.i;
        (self.peek() == Some(b'"')).then_some(())?;
        self.i += 1;
        loop {
            match self.peek()? {
                b'\\' => self.i += 2,
                b'"' => break,
                _ => self.i += 1,
            }
        }
        self.i += 1;
        serde_json::from_str(self.text.get(start..self.i)?).ok()
    }

    fn literal(&mut self, word: &str, value: Value) -> Option<Value> {
        let end = self.i + word.len();
        (self.text.get(self.i..end)? == word).then_some(())?;
        self.i = end;
        Some(value)
    }

    fn number(&mut self) -> Option<Value> {
        let start = self.i;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.i += 1;
        }
        let token = self.text.get(start..self.i)?;
        if token.is_empty() {
            return None;
        }
        if token.contains(['.', 'e', 'E']) {
            return Some(Value::Float(token.parse().unwrap_or(f64::INFINITY)));
        }
        // Valid JSON integers are all digits after an optional minus, so only overflow can fail.
        let saturated = if token.starts_with('-') {
            i128::MIN
        } else {
            i128::MAX
        };
        Some(Value::Int(token.parse().unwrap_or(saturated)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::error::Location;

    #[test]
    fn builds_located_tree() {
        let text = "{\n  \"name\": \"a\\\"b\",\n  \"ports\": [1, 2.5, -3, 1e2, null, true],\n  \"x\": {}\n}";
        let lines = LineIndex::new(text);
        let root = parse_json(text, &lines).ok().unwrap();
        let Value::Table(entries) = &root.value else {
            panic!("not a table")
        };
        assert_eq!(entries[0].key, "name");
        assert!(matches!(&entries[0].node.value, Value::Str(s) if s == "a\"b"));
        assert_eq!(entries[0].key_at, Some(Location { line: 2, column: 3 }));
        assert_eq!(
            entries[0].node.at,
            Some(Location {
                line: 2,
                column: 11
            })
        );
        let Value::Array(items) = &entries[1].node.value else {
            panic!("not an array")
        };
        assert!(matches!(items[0].value, Value::Int(1)));
        assert!(matches!(items[1].value, Value::Float(f) if f == 2.5));
        assert!(matches!(items[2].value, Value::Int(-3)));
        assert!(matches!(items[3].value, Value::Float(f) if f == 100.0));
        assert!(matches!(items[4].value, Value::Null));
        assert!(matches!(items[5].value, Value::Bool(true)));
        assert!(matches!(&entries[2].node.value, Value::Table(t) if t.is_empty()));
    }

    #[test]
    fn syntax_error_is_located() {
        let text = "{\n  \"name\": \"a\",\n  \"replicas\": 3,\n}";
        let lines = LineIndex::new(text);
        let e = parse_json(text, &lines).err().unwrap();
        assert_eq!(e.at, Some(Location { line: 4, column: 1 }));
        assert_eq!(e.message, "trailing comma");
    }
}
