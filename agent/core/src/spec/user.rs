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

impl UserRef {
    /// Whether this names root by its form: user `root` or uid 0, whatever the group. A name
    /// that resolves to uid 0 on some host is only known there (the agent refuses it).
    pub fn is_root(&self) -> bool {
        match &self.user {
            Id::Num(uid) => *uid == 0,
            Id::Name(name) => name == "root",
        }
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
        if self.secret_env.is_some() {
            fields.push(("secret_env", 10));
        }
        fields
    }

    /// Whether the spec asks to run as root (`user` is `root`, `0` or `0:GROUP`): only agents
    /// started with `--allow-root-workloads` run it.
    pub fn asks_root(&self) -> bool {
        self.run_as().is_some_and(|u| u.is_root())
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
    fn root_is_user_root_or_uid_0_whatever_the_group() {
        for root in ["root", "0", "0:0", "0:1000", "root:wheel"] {
            assert!(parse(root).unwrap().is_root(), "{root}");
        }
        for not_root in ["nobody", "1000", "1000:0", "rooty", "00x"] {
            if let Ok(user) = parse(not_root) {
                assert!(!user.is_root(), "{not_root}");
            }
        }
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

#[cfg(test)]
mod layout_tests {
    use super::*;
    use crate::version::with_layout;

    fn spec(user: &str) -> WorkloadSpec {
        let text = format!(
            "name = \"web\"\n{user}[process]\ncommand = [\"web\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"64Mi\"\n"
        );
        WorkloadSpec::from_toml_str(&text, "web.toml").unwrap()
    }

    fn bin(spec: &WorkloadSpec, layout: u16) -> Result<Vec<u8>, String> {
        with_layout(layout, || {
            bincode::serde::encode_to_vec(spec, bincode::config::standard())
        })
        .map_err(|e| e.to_string())
    }

    fn unbin(bytes: &[u8], layout: u16) -> WorkloadSpec {
        let (spec, used): (WorkloadSpec, usize) = with_layout(layout, || {
            bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        })
        .unwrap();
        assert_eq!(used, bytes.len(), "every byte read at layout {layout}");
        spec
    }

    /// `user` is the last field: at 8 a spec without it is the layout-7 bytes and one `None`
    /// byte, so at 7 it is exactly what the builds before 8 wrote (agent/tests/compat.rs checks
    /// that against their recorded bytes).
    #[test]
    fn without_user_the_layout_7_bytes_are_the_older_builds() {
        let plain = spec("");
        let at_7 = bin(&plain, 7).unwrap();
        let at_8 = bin(&plain, 8).unwrap();
        assert_eq!(at_8.len(), at_7.len() + 1);
        assert_eq!((&at_8[..at_7.len()], at_8[at_7.len()]), (&at_7[..], 0));
        assert_eq!(unbin(&at_7, 7), plain);
        assert_eq!(unbin(&at_8, 8), plain);
        assert!(plain.fields_since().is_empty());
    }

    #[test]
    fn with_user_it_is_refused_at_7_and_kept_at_8() {
        let as_user = spec("user = \"nobody\"\n");
        assert_eq!(as_user.fields_since(), [("user", 8)]);
        let err = bin(&as_user, 7).unwrap_err();
        assert!(err.contains("wire version 8"), "{err}");
        let at_8 = bin(&as_user, 8).unwrap();
        assert_eq!(unbin(&at_8, 8), as_user);
        assert_eq!(
            as_user.run_as(),
            Some(UserRef {
                user: Id::Name("nobody".into()),
                group: None
            })
        );
    }
}
