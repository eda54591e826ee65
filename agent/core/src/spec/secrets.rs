//! `secret_env`: variables given to a workload's instances like `env`, whose values no answer
//! to a client shows. The agent keeps them in its store and hands them to the runtime; every
//! spec shown to a client is [`WorkloadSpec::redacted`] (the values replaced by
//! [`SECRET_PLACEHOLDER`], no hash and no length, which would leak a short value), except a
//! `get --spec --show-secrets` by a write-role client, which the agent audits.

use super::validate::Report;
use super::{Run, WorkloadSpec};

/// What a redacted secret value reads as. An apply refuses it as a value (it is what
/// `get --spec` prints, not a secret: applying that text back would replace every secret).
pub const SECRET_PLACEHOLDER: &str = "<secret>";

/// Names, limits, and no name in both `secret_env` and the runtime's `env`.
pub(crate) fn check(spec: &WorkloadSpec, r: &mut Report) {
    let Some(secrets) = &spec.secret_env else {
        return;
    };
    super::validate::check_env(r, "secret_env", secrets);
    let (env, env_path) = match &spec.run {
        Run::Process(p) => (&p.env, "process.env"),
        Run::Container(c) => (&c.env, "container.env"),
    };
    for name in secrets.keys().filter(|n| env.contains_key(*n)) {
        r.err(
            format!("secret_env.{name}"),
            format!(
                "{name} is also in {env_path}: a variable is either secret or not, give it once"
            ),
        );
    }
}

/// An apply's check: no value is the placeholder `get --spec` prints.
pub(crate) fn check_placeholders(spec: &WorkloadSpec, r: &mut Report) {
    for (name, value) in spec.secret_env.iter().flatten() {
        if value == SECRET_PLACEHOLDER {
            r.err(
                format!("secret_env.{name}"),
                format!(
                    "is {SECRET_PLACEHOLDER:?}, what `shoal get --spec` prints in place of a \
                     secret value: give the value itself (a write-role client reads it with \
                     `shoal get NAME --spec --show-secrets`)"
                ),
            );
        }
    }
}

impl WorkloadSpec {
    /// This spec as a client may see it: every `secret_env` value replaced by
    /// [`SECRET_PLACEHOLDER`] (names kept). Every answer that carries a spec to a client is
    /// built from this.
    pub fn redacted(&self) -> WorkloadSpec {
        let mut spec = self.clone();
        if let Some(secrets) = &mut spec.secret_env {
            for value in secrets.values_mut() {
                *value = SECRET_PLACEHOLDER.to_string();
            }
        }
        spec
    }

    /// Whether the spec has any secret value.
    pub fn has_secrets(&self) -> bool {
        self.secret_env.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// What changed in `secret_env` from `before` to `self`, by name only (never a value):
    /// `secret_env.NAME added`, `changed` or `removed`, sorted by name.
    pub fn secret_changes(&self, before: &WorkloadSpec) -> Vec<String> {
        let empty = Default::default();
        let (old, new) = (
            before.secret_env.as_ref().unwrap_or(&empty),
            self.secret_env.as_ref().unwrap_or(&empty),
        );
        let mut names: Vec<&String> = old.keys().chain(new.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter_map(|name| {
                let what = match (old.get(name), new.get(name)) {
                    (None, Some(_)) => "added",
                    (Some(_), None) => "removed",
                    (Some(a), Some(b)) if a != b => "changed",
                    _ => return None,
                };
                Some(format!("secret_env.{name} {what}"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"
name = "sec"
secret_env = { DB_PASSWORD = "hunter2", API_KEY = "k" }
[process]
command = ["sleep", "60"]
env = { MODE = "prod" }
[resources]
cpu = "100m"
memory = "16Mi"
"#;

    fn parse(text: &str) -> Result<WorkloadSpec, String> {
        WorkloadSpec::from_bytes(text.as_bytes(), "s.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn secret_env_parses_renders_and_redacts() {
        let spec = parse(SPEC).unwrap();
        let secrets = spec.secret_env.clone().unwrap();
        assert_eq!(secrets["DB_PASSWORD"], "hunter2");
        assert_eq!(secrets.len(), 2);
        let shown = spec.redacted();
        let text = shown.to_toml_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains("DB_PASSWORD = \"<secret>\""),
            "names stay, values go: {text}"
        );
        assert!(!shown.to_json_string().contains("hunter2"));
        assert!(!format!("{shown:?}").contains("hunter2"));
        // The full spec round-trips through its rendering.
        assert_eq!(parse(&spec.to_toml_string()).unwrap(), spec);
        // And in JSON.
        let json = spec.to_json_string();
        assert_eq!(
            WorkloadSpec::from_bytes(json.as_bytes(), "s.json").unwrap(),
            spec
        );
    }

    #[test]
    fn an_empty_secret_env_is_none() {
        let spec = parse(&SPEC.replace(
            "secret_env = { DB_PASSWORD = \"hunter2\", API_KEY = \"k\" }",
            "secret_env = {}",
        ))
        .unwrap();
        assert_eq!(spec.secret_env, None);
        assert!(spec.fields_since().is_empty());
    }

    #[test]
    fn a_name_in_env_and_secret_env_is_refused_where_it_is() {
        let text = SPEC.replace("MODE = \"prod\"", "DB_PASSWORD = \"x\"");
        let err = parse(&text).unwrap_err();
        assert!(err.contains("secret_env.DB_PASSWORD"), "{err}");
        assert!(err.contains("also in process.env"), "{err}");
        assert!(!err.contains("hunter2"), "no value in the error: {err}");
    }

    #[test]
    fn bad_names_too_long_values_and_the_placeholder_are_refused() {
        let err = parse(&SPEC.replace("API_KEY", "\"1BAD\"")).unwrap_err();
        assert!(
            err.contains("secret_env.1BAD") && err.contains("not a valid variable name"),
            "{err}"
        );
        let long = "x".repeat(crate::spec::ENV_VALUE_BYTES_MAX + 1);
        let err = parse(&SPEC.replace("\"k\"", &format!("\"{long}\""))).unwrap_err();
        assert!(err.contains("secret_env.API_KEY"), "{err}");
        let err = parse(&SPEC.replace("\"hunter2\"", "\"<secret>\"")).unwrap_err();
        assert!(
            err.contains("secret_env.DB_PASSWORD") && err.contains("--show-secrets"),
            "{err}"
        );
        let err = parse(&SPEC.replace("secret_env = {", "secret_env = { A = 1,")).unwrap_err();
        assert!(err.contains("secret_env.A"), "{err}");
    }

    #[test]
    fn too_many_secrets_are_refused() {
        let many: Vec<String> = (0..=crate::spec::ENV_VARS_MAX)
            .map(|i| format!("S{i} = \"v\""))
            .collect();
        let text = SPEC.replace(
            "secret_env = { DB_PASSWORD = \"hunter2\", API_KEY = \"k\" }",
            &format!("secret_env = {{ {} }}", many.join(", ")),
        );
        let err = parse(&text).unwrap_err();
        assert!(
            err.contains("secret_env") && err.contains("at most"),
            "{err}"
        );
    }

    #[test]
    fn secret_env_is_a_field_of_wire_10() {
        let spec = parse(SPEC).unwrap();
        assert_eq!(spec.fields_since(), [("secret_env", 10)]);
        let bytes = |s: &WorkloadSpec| {
            bincode::serde::encode_to_vec(s, bincode::config::standard()).map_err(|e| e.to_string())
        };
        let err = crate::version::with_layout(9, || bytes(&spec)).unwrap_err();
        assert!(err.contains("wire version 10"), "{err}");
        let mut plain = spec.clone();
        plain.secret_env = None;
        let at_9 = crate::version::with_layout(9, || bytes(&plain)).unwrap();
        let at_10 = bytes(&plain).unwrap();
        assert_eq!(at_10.len(), at_9.len() + 1, "one None byte at 10");
        let back: (WorkloadSpec, usize) =
            bincode::serde::decode_from_slice(&bytes(&spec).unwrap(), bincode::config::standard())
                .unwrap();
        assert_eq!(back.0, spec);
    }

    #[test]
    fn a_changed_secret_changes_the_spec_and_is_said_by_name_only() {
        let before = parse(SPEC).unwrap();
        let after = parse(
            &SPEC
                .replace("hunter2", "hunter3")
                .replace(", API_KEY = \"k\"", ", NEW = \"n\""),
        )
        .unwrap();
        assert_ne!(before, after, "a new value is a new spec (a new version)");
        assert_eq!(
            after.secret_changes(&before),
            [
                "secret_env.API_KEY removed",
                "secret_env.DB_PASSWORD changed",
                "secret_env.NEW added"
            ]
        );
        assert!(before.secret_changes(&before).is_empty());
    }
}
