//! A real registry on loopback for pull tests and the pull benchmark: Debian's `docker-registry`
//! (the distribution registry) started with a temp config (filesystem storage in a temp dir,
//! `127.0.0.1:<port>`, htpasswd auth with a bcrypt line from `htpasswd -B`), and the images it
//! serves: a busybox image with a layer of its own, pushed through the engine with credentials
//! and removed locally, so that a pull downloads it. The engine treats 127.0.0.0/8 registries as
//! insecure-allowed, so plain HTTP works. `.ci/run` installs `docker-registry` and
//! `apache2-utils`; without them the tests fail with a message saying so.
#![allow(dead_code, reason = "each test binary uses its own part")]

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bollard::auth::DockerCredentials;
use bollard::query_parameters::{
    PushImageOptionsBuilder, RemoveImageOptionsBuilder, TagImageOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;

/// The user the registry accepts.
pub const USER: &str = "shoal";
/// Its password.
pub const PASSWORD: &str = "pull-test-secret";

/// A running registry; killed (by its pid) when dropped.
pub struct Registry {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry on `addr` (a free loopback port) and waits until it answers.
    pub fn start(addr: SocketAddr) -> Registry {
        let dir = tempfile::tempdir().expect("temp dir");
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", USER, PASSWORD])
            .output()
            .unwrap_or_else(|e| {
                panic!("htpasswd did not run ({e}): install apache2-utils (.ci/run does)")
            });
        assert!(htpasswd.status.success(), "htpasswd failed");
        std::fs::write(dir.path().join("htpasswd"), &htpasswd.stdout).unwrap();
        let config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: {addr}\nauth:\n  htpasswd:\n    realm: shoal-test\n    path: {}\n",
            dir.path().join("data").display(),
            dir.path().join("htpasswd").display(),
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "docker-registry did not start ({e}): install Debian's docker-registry \
                     (.ci/run does), or set SHOAL_SKIP_DOCKER_TESTS=1 to skip the docker tests"
                )
            });
        let mut registry = Registry { child, addr, dir };
        let began = Instant::now();
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = registry.child.try_wait() {
                panic!("docker-registry exited ({status}):\n{}", registry.log());
            }
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "docker-registry did not listen on {addr} within 20 s:\n{}",
                registry.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    /// `127.0.0.1:PORT`, the registry part of its image references.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// What it logged (its access log included).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Pull attempts of `repository` so far: the engine starts each with one `HEAD` of the
    /// manifest (answered 401 without valid credentials, 404 for an unknown tag or digest).
    pub fn pull_attempts(&self, repository: &str) -> usize {
        let needle = format!("\"HEAD /v2/{repository}/manifests/");
        self.log().lines().filter(|l| l.contains(&needle)).count()
    }

    /// Requests for the API root (`GET /v2/`) so far: every pull attempt starts with one.
    pub fn pings(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains("\"GET /v2/ HTTP/1.1\""))
            .count()
    }

    /// The credentials it accepts, as the engine takes them.
    pub fn credentials(&self) -> DockerCredentials {
        DockerCredentials {
            username: Some(USER.into()),
            password: Some(PASSWORD.into()),
            serveraddress: Some(self.host()),
            ..DockerCredentials::default()
        }
    }

    /// Writes a Docker `config.json` for it with `user:password` in `auth`, into `dir`.
    pub fn config_json(&self, dir: &Path, user: &str, password: &str) -> PathBuf {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let path = dir.join(format!("registry-auth-{user}-{}.json", password.len()));
        let text = format!(
            "{{\"auths\": {{\"{}\": {{\"auth\": \"{auth}\"}}}}}}\n",
            self.host()
        );
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes a busybox image whose layer is its own (`marker` in it), pushes it to `registry` as
/// `repository:tag` with credentials, and removes it locally. Returns the reference and the
/// manifest digest the registry gave it.
pub async fn push_marked_image(
    docker: &Docker,
    registry: &Registry,
    repository: &str,
    tag: &str,
    marker: &str,
) -> (String, String) {
    let local = format!("shoal-pull-src-{repository}");
    shoal::node::runtime::docker::import_marked_busybox_image(docker, &local, tag, marker)
        .await
        .expect("import a marked busybox image");
    let remote = format!("{}/{repository}", registry.host());
    let options = TagImageOptionsBuilder::default()
        .repo(&remote)
        .tag(tag)
        .build();
    docker
        .tag_image(&format!("{local}:{tag}"), Some(options))
        .await
        .expect("tag for the registry");
    let options = PushImageOptionsBuilder::default().tag(tag).build();
    let mut push = docker.push_image(&remote, Some(options), Some(registry.credentials()));
    let mut digest = None;
    while let Some(step) = push.next().await {
        let info = step.unwrap_or_else(|e| panic!("push {remote}:{tag}: {e}\n{}", registry.log()));
        if let Some(status) = info.status.as_deref() {
            if let Some(at) = status.find("digest: ") {
                digest = status[at + 8..]
                    .split_whitespace()
                    .next()
                    .map(str::to_string);
            }
        }
    }
    let digest = digest.expect("the push reported the manifest digest");
    remove_local(docker, &format!("{remote}:{tag}")).await;
    remove_local(docker, &format!("{local}:{tag}")).await;
    (format!("{remote}:{tag}"), digest)
}

/// Removes an image reference from the engine (and the image once nothing else names it).
pub async fn remove_local(docker: &Docker, reference: &str) {
    let options = RemoveImageOptionsBuilder::default().force(true).build();
    match docker.remove_image(reference, Some(options), None).await {
        Ok(_) => {}
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => {}
        Err(e) => panic!("remove image {reference}: {e}"),
    }
}
