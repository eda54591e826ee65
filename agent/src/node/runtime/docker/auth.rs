//! Registry credentials from a Docker `config.json` (`shoal agent --registry-auth FILE`).
//!
//! Only `auths` is read: per registry, either `auth` (base64 of `user:password`) or `username`
//! and `password`. Keys may be a bare host (`registry.local:5000`) or a URL
//! (`https://index.docker.io/v1/` is Docker Hub, as `docker login` writes it); an image matches
//! the entry of its registry host ([`ImageRef::registry`]). Credential helpers (`credsStore`,
//! `credHelpers`) are not run: an agent executes no programs named by a file.
//!
//! The secrets stay on this agent: they are never gossiped, stored, or logged, and every
//! `Debug` here prints `<redacted>` in their place.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use bollard::auth::DockerCredentials;
use serde::Deserialize;

use crate::core::spec::{ImageRef, DEFAULT_REGISTRY};

/// Largest `config.json` read: a real one is a few KiB.
const CONFIG_BYTES_MAX: u64 = 1 << 20;

/// Why `--registry-auth` could not be used. Nothing was read into the agent.
#[derive(Debug, thiserror::Error)]
pub enum RegistryAuthError {
    /// The file could not be read.
    #[error("--registry-auth {path}: cannot read it: {source}")]
    Unreadable {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a Docker `config.json` this agent understands.
    #[error("--registry-auth {path}: {reason} (expected a Docker config.json: {{\"auths\": {{\"HOST\": {{\"auth\": \"BASE64(user:password)\"}}}}}})")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong, without any secret.
        reason: String,
    },
}

/// One registry's user and password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The user name.
    pub username: String,
    password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Credentials by registry host.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RegistryAuth {
    by_registry: BTreeMap<String, Credential>,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("registries", &self.by_registry.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[derive(Deserialize)]
struct ConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

impl RegistryAuth {
    /// Reads a Docker `config.json`.
    pub fn load(path: &Path) -> Result<RegistryAuth, RegistryAuthError> {
        let shown = path.display().to_string();
        let unreadable = |source| RegistryAuthError::Unreadable {
            path: shown.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(unreadable)?;
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(file, CONFIG_BYTES_MAX + 1),
            &mut text,
        )
        .map_err(unreadable)?;
        if text.len() as u64 > CONFIG_BYTES_MAX {
            return Err(RegistryAuthError::Malformed {
                path: shown,
                reason: format!("larger than {CONFIG_BYTES_MAX} bytes"),
            });
        }
        Self::parse(&text).map_err(|reason| RegistryAuthError::Malformed {
            path: shown,
            reason,
        })
    }

    /// Parses the text of a Docker `config.json`; the error names the entry, never a secret.
    pub fn parse(text: &str) -> Result<RegistryAuth, String> {
        // serde_json's message may quote the offending text, which may be a secret: keep only
        // where it is.
        let file: ConfigFile = serde_json::from_str(text).map_err(|e| {
            format!(
                "not valid JSON of the expected shape at line {} column {}",
                e.line(),
                e.column()
            )
        })?;
        let mut by_registry = BTreeMap::new();
        for (key, entry) in file.auths {
            let credential = entry
                .credential()
                .map_err(|why| format!("auths.{key:?}: {why}"))?;
            by_registry.insert(registry_of_key(&key), credential);
        }
        Ok(RegistryAuth { by_registry })
    }

    /// The registries this holds credentials for.
    pub fn registries(&self) -> impl Iterator<Item = &str> {
        self.by_registry.keys().map(String::as_str)
    }

    /// The credentials for `image`'s registry, as the engine takes them; `None` for an invalid
    /// reference or a registry without an entry (the pull is then anonymous).
    pub fn for_image(&self, image: &str) -> Option<DockerCredentials> {
        let registry = ImageRef::parse(image).ok()?.registry();
        let credential = self.by_registry.get(registry)?;
        Some(DockerCredentials {
            username: Some(credential.username.clone()),
            password: Some(credential.password.clone()),
            serveraddress: Some(registry.to_string()),
            ..DockerCredentials::default()
        })
    }
}

impl AuthEntry {
    fn credential(self) -> Result<Credential, String> {
        if let Some(auth) = self.auth.filter(|a| !a.is_empty()) {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|_| "`auth` is not base64".to_string())?;
            let decoded =
                String::from_utf8(decoded).map_err(|_| "`auth` is not UTF-8".to_string())?;
            let (username, password) = decoded
                .split_once(':')
                .ok_or_else(|| "`auth` does not decode to user:password".to_string())?;
            return Ok(Credential {
                username: username.to_string(),
                password: password.to_string(),
            });
        }
        match (self.username, self.password) {
            (Some(username), Some(password)) => Ok(Credential { username, password }),
            _ => Err("has neither `auth` nor `username` and `password`".to_string()),
        }
    }
}

/// The registry host an `auths` key names: `https://host/v1/` -> `host`; Docker Hub's legacy
/// names -> [`DEFAULT_REGISTRY`].
fn registry_of_key(key: &str) -> String {
    let host = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = host.split('/').next().unwrap_or(host);
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            DEFAULT_REGISTRY.to_string()
        }
        _ => host.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{
        "auths": {
            "127.0.0.1:5000": { "auth": "YWxpY2U6czNjcmV0" },
            "https://index.docker.io/v1/": { "username": "bob", "password": "hunter2" }
        },
        "credsStore": "desktop"
    }"#;

    #[test]
    fn matches_an_image_to_its_registry() {
        let auth = RegistryAuth::parse(CONFIG).unwrap();
        let local = auth.for_image("127.0.0.1:5000/app:1").unwrap();
        assert_eq!(local.username.as_deref(), Some("alice"));
        assert_eq!(local.password.as_deref(), Some("s3cret"));
        assert_eq!(local.serveraddress.as_deref(), Some("127.0.0.1:5000"));
        let hub = auth.for_image("nginx:1.27").unwrap();
        assert_eq!(hub.username.as_deref(), Some("bob"));
        assert!(auth.for_image("other.example:5000/app").is_none());
        assert!(auth.for_image("Not Valid").is_none());
    }

    #[test]
    fn debug_never_shows_a_secret() {
        let auth = RegistryAuth::parse(CONFIG).unwrap();
        let shown = format!("{auth:?} {:?}", auth.by_registry);
        assert!(
            !shown.contains("s3cret") && !shown.contains("hunter2"),
            "{shown}"
        );
        assert!(shown.contains("<redacted>") && shown.contains("127.0.0.1:5000"));
    }

    #[test]
    fn malformed_files_say_what_is_wrong_without_secrets() {
        let bad = [
            (r#"{"auths": {"h": {"auth": "!!"}}}"#, "not base64"),
            (
                r#"{"auths": {"h": {"auth": "bm9jb2xvbg=="}}}"#,
                "user:password",
            ),
            (r#"{"auths": {"h": {"username": "u"}}}"#, "neither"),
            (r#"{"auths": {"h": {"password": "topsecret"}}} x"#, "line 1"),
            (r#"{"auths": ["topsecret"]}"#, "expected shape"),
        ];
        for (text, why) in bad {
            let error = RegistryAuth::parse(text).unwrap_err();
            assert!(error.contains(why), "{text}: {error}");
            assert!(!error.contains("topsecret"), "{error}");
        }
        let missing = RegistryAuth::load(Path::new("/nonexistent/config.json")).unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent/config.json"),
            "{missing}"
        );
        assert_eq!(RegistryAuth::parse("{}").unwrap(), RegistryAuth::default());
    }
}
