//! Container image references and the pull policy: `[host[:port]/]path[:tag][@algo:hex]`, which
//! registry serves an image (for its credentials), and which policy applies when a spec names
//! none.
//!
//! Deliberately a plausibility check, not the full grammar: the engine has the last word.

use serde::{Deserialize, Serialize};

use super::limits::IMAGE_LEN_MAX;

/// The registry an image without a registry host comes from (Docker Hub), as Docker's
/// `config.json` names it in `auths`.
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// When the docker runtime pulls a container's image through the engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PullPolicy {
    /// Pull only when the engine does not have the image (`if-not-present`).
    #[default]
    IfNotPresent,
    /// Pull before every start, so a moved tag is picked up (`always`).
    Always,
    /// Never pull: a missing image is a start failure (`never`).
    Never,
}

impl PullPolicy {
    /// Every policy with its spelling in a spec.
    pub const NAMES: [(&'static str, PullPolicy); 3] = [
        ("if-not-present", PullPolicy::IfNotPresent),
        ("always", PullPolicy::Always),
        ("never", PullPolicy::Never),
    ];

    /// The spelling in a spec.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::IfNotPresent => "if-not-present",
            PullPolicy::Always => "always",
            PullPolicy::Never => "never",
        }
    }

    /// The policy when a spec gives none: `always` for a reference whose tag is `latest` or
    /// absent (which means `latest`) and that has no digest, since such a tag moves; otherwise
    /// `if-not-present` (as Kubernetes' `imagePullPolicy`). An invalid reference gets
    /// `if-not-present`; validation reports it.
    pub fn default_for(image: &str) -> PullPolicy {
        match ImageRef::parse(image) {
            Ok(r) if r.digest.is_none() && r.tag.is_none_or(|t| t == "latest") => {
                PullPolicy::Always
            }
            _ => PullPolicy::IfNotPresent,
        }
    }
}

/// The parts of an image reference, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageRef<'a> {
    /// The registry host (with its port) when the reference names one: the part before the
    /// first `/` when it has a `.` or `:` or is `localhost`.
    pub host: Option<&'a str>,
    /// The repository path (`library/nginx` is spelt `nginx` on Docker Hub).
    pub path: &'a str,
    /// The tag, when given.
    pub tag: Option<&'a str>,
    /// The digest (`sha256:<hex>`), when given.
    pub digest: Option<&'a str>,
}

impl<'a> ImageRef<'a> {
    /// Splits and checks a reference; the error says what is wrong with it.
    pub fn parse(image: &'a str) -> Result<ImageRef<'a>, String> {
        if image.is_empty() {
            return Err("must not be empty (e.g. \"nginx:1.27\")".to_string());
        }
        if image.len() > IMAGE_LEN_MAX {
            return Err(format!(
                "is {} characters; an image reference is at most {IMAGE_LEN_MAX}",
                image.len()
            ));
        }
        if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "{image:?} contains whitespace; an image reference has none"
            ));
        }
        let bad = |why: &str| Err(format!("{image:?} is not a valid image reference: {why}"));
        let (name, digest) = match image.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (image, None),
        };
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let (repo, tag) = match name[last_slash..].rfind(':') {
            Some(colon) => (
                &name[..last_slash + colon],
                Some(&name[last_slash + colon + 1..]),
            ),
            None => (name, None),
        };
        let (host, path) = match repo.split_once('/') {
            Some((host, rest)) if host.contains(['.', ':']) || host == "localhost" => {
                let port_ok = host.split_once(':').is_none_or(|(_, port)| {
                    !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
                });
                if !port_ok {
                    return bad("a registry port is a number, as in registry.local:5000/app");
                }
                (Some(host), rest)
            }
            _ => (None, repo),
        };
        let path_ok = path.split('/').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        });
        if !path_ok {
            return bad("repository names use lowercase letters, digits, '.', '_', '-' and '/' between non-empty parts");
        }
        let tag_ok = |t: &str| {
            !t.is_empty()
                && t.len() <= 128
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if tag.is_some_and(|t| !tag_ok(t)) {
            return bad("a tag is 1 to 128 letters, digits, '.', '_' or '-'");
        }
        let digest_ok = |d: &str| {
            d.split_once(':').is_some_and(|(algo, hex)| {
                !algo.is_empty() && !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit())
            })
        };
        if digest.is_some_and(|d| !digest_ok(d)) {
            return bad("a digest looks like sha256:<hex>");
        }
        Ok(ImageRef {
            host,
            path,
            tag,
            digest,
        })
    }

    /// The registry that serves the image: its host, or [`DEFAULT_REGISTRY`].
    pub fn registry(&self) -> &'a str {
        self.host.unwrap_or(DEFAULT_REGISTRY)
    }

    /// The repository with its registry host, without tag or digest: what the engine's image
    /// create endpoint takes as `fromImage`.
    pub fn repository(&self) -> String {
        match self.host {
            Some(host) => format!("{host}/{}", self.path),
            None => self.path.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_references() {
        let r = ImageRef::parse("127.0.0.1:5000/team/app:1.2@sha256:abc").unwrap();
        assert_eq!(r.host, Some("127.0.0.1:5000"));
        assert_eq!(r.path, "team/app");
        assert_eq!(r.tag, Some("1.2"));
        assert_eq!(r.digest, Some("sha256:abc"));
        assert_eq!(r.repository(), "127.0.0.1:5000/team/app");
        let hub = ImageRef::parse("nginx").unwrap();
        assert_eq!((hub.registry(), hub.tag), (DEFAULT_REGISTRY, None));
        assert_eq!(
            ImageRef::parse("localhost/a").unwrap().registry(),
            "localhost"
        );
        assert_eq!(
            ImageRef::parse("team/app").unwrap().registry(),
            DEFAULT_REGISTRY
        );
    }

    #[test]
    fn moving_tags_are_always_pulled_by_default() {
        assert_eq!(PullPolicy::default_for("nginx"), PullPolicy::Always);
        assert_eq!(PullPolicy::default_for("nginx:latest"), PullPolicy::Always);
        assert_eq!(
            PullPolicy::default_for("host:5000/nginx"),
            PullPolicy::Always
        );
        assert_eq!(
            PullPolicy::default_for("nginx:1.27"),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            PullPolicy::default_for("nginx@sha256:abcd"),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            PullPolicy::default_for("nginx:latest@sha256:abcd"),
            PullPolicy::IfNotPresent
        );
        assert_eq!(PullPolicy::default_for("NGINX"), PullPolicy::IfNotPresent);
    }
}
