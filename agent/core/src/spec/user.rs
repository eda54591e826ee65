//! `user`: who a workload's instances run as, as Docker's `--user` writes it: a user name or
//! numeric id, optionally `:` and a group name or numeric id. The agent resolves names on its host
//! (a process) or the engine inside the image (a container); the core checks the form only.

use super::WorkloadSpec;

/// A user or group: by name or by numeric id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Id {
    /// A name, looked up where the instance runs.
    Name(String),
    /// A numeric id, used as is.
    Num(u32),
}

/// A parsed `user` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserRef {
    /// The user.
    pub user: Id,
    /// The group; `None`: the user's primary group.
    pub group: Option<Id>,
}

/// Longest user or group name (useradd's limit).
pub const NAME_LEN_MAX: usize = 32;

/// Parses `text` (`nobody`, `1000`, `1000:1000`, `app:app`), or says what is wrong with it.
pub fn parse(text: &str) -> Result<UserRef, String> {
    if text.len() > super::USER_BYTES_MAX {
        return Err(format!(
            "{} bytes, more than {}",
            text.len(),
            super::USER_BYTES_MAX
        ));
    }
    let (user, group) = match text.split_once(':') {
        Some((user, group)) => (user, Some(group)),
        None => (text, None),
    };
    Ok(UserRef {
        user: id(user, "user")?,
        group: group.map(|g| id(g, "group")).transpose()?,
    })
}

fn id(text: &str, what: &str) -> Result<Id, String> {
    if text.is_empty() {
        return Err(format!(
            "the {what} is empty: write a name or a numeric id, e.g. \"nobody\" or \"1000:1000\""
        ));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<u32>() {
            Ok(n) if n < u32::MAX => Ok(Id::Num(n)),
            _ => Err(format!("{what} id {text} is out of range")),
        };
    }
    let valid = text.len() <= NAME_LEN_MAX
        && !text.starts_with('-')
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if valid {
        Ok(Id::Name(text.to_string()))
    } else {
        Err(format!(
            "{what} {text:?} is neither a numeric id nor a name (letters, digits, `_`, `-`, `.`, \
             not starting with `-`, at most {NAME_LEN_MAX})"
        ))
    }
}

/// The check an apply runs on `user`.
pub(crate) fn check(text: &str) -> Result<(), String> {
    parse(text).map(|_| ())
}

impl WorkloadSpec {
    /// The fields this spec sets that were added at a wire version, with that version: what an
    /// apply checks against the mesh version (`crate::upgrade::refuse_spec`).
    pub fn fields_since(&self) -> Vec<(&'static str, u16)> {
        let mut fields = Vec::new();
        if self.user.is_some() {
            fields.push(("user", 8));
        }
        fields
    }

    /// The parsed `user`, when set and valid (an apply refused an invalid one).
    pub fn run_as(&self) -> Option<UserRef> {
        self.user.as_deref().and_then(|u| parse(u).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_docker_takes() {
        assert_eq!(
            parse("nobody").unwrap(),
            UserRef {
                user: Id::Name("nobody".into()),
                group: None
            }
        );
        assert_eq!(
            parse("1000:1000").unwrap(),
            UserRef {
                user: Id::Num(1000),
                group: Some(Id::Num(1000))
            }
        );
        assert_eq!(
            parse("app:www-data").unwrap().group,
            Some(Id::Name("www-data".into()))
        );
    }

    #[test]
    fn bad_forms_say_what_is_wrong() {
        for (bad, says) in [
            ("", "user is empty"),
            (":1", "user is empty"),
            ("app:", "group is empty"),
            ("a b", "neither a numeric id nor a name"),
            ("-x", "neither"),
            ("99999999999", "out of range"),
            ("4294967295", "out of range"),
            ("a:b:c", "neither"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        assert!(parse(&"x".repeat(100)).unwrap_err().contains("bytes"));
    }
}
