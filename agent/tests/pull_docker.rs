//! Image pulls against a real registry on loopback (issue 16, deliverable 1): Debian's
//! `docker-registry` with htpasswd auth, started by the test (`registry_support`), busybox images
//! with layers of their own pushed to it and removed locally. Two docker agents share the
//! engine: `pl-good` has a `--registry-auth` config.json with the right password, `pl-bad` one
//! with a wrong password; specs pick one with a `creds` label.
//!
//! - pulled with credentials and healthy, two replicas of one image pulled once (single flight);
//! - pulled by digest (`@sha256:`) and healthy;
//! - wrong credentials: an issue naming the image with the engine's reason, and pull attempts
//!   (counted at the registry over 10 s, 3 replicas retrying every second) bounded by backoff;
//! - an unknown registry (a closed port) and a digest the registry does not have: issues;
//! - `pull = "never"` with a missing image: a clear issue, no pull at all;
//! - the password is in no agent log.
//!
//! Needs a reachable Docker engine, `/bin/busybox`, `docker-registry` and `htpasswd` (see
//! runtime_docker.rs for SHOAL_SKIP_DOCKER_TESTS; .ci/run installs the rest).

mod common;
mod registry_support;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{docker_allowed, free_tcp_addr, shoal_bin, stderr, wait_until, Cluster};
use registry_support::{push_marked_image, remove_local, Registry, PASSWORD};

const GOOD: &str = "pl-good";
const BAD: &str = "pl-bad";

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn engine() -> bollard::Docker {
    use shoal::node::runtime::docker::{ensure_busybox_image, DockerConfig, DockerRuntime};
    let rt = DockerRuntime::connect(DockerConfig::new("image-setup"))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the Docker engine is unreachable ({e}); start it or set SHOAL_SKIP_DOCKER_TESTS=1"
            )
        });
    let docker = rt.docker().await.unwrap();
    ensure_busybox_image(&docker, "shoal-busybox", "latest")
        .await
        .expect("busybox image");
    docker
}

/// Removes this test's containers, and the pulled images, however the test ends.
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for node in [GOOD, BAD] {
            let out = Command::new("docker")
                .args(["ps", "-aq", "--filter", &format!("label=shoal.node={node}")])
                .output()
                .unwrap();
            for id in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = Command::new("docker").args(["rm", "-f", id]).output();
            }
        }
        for image in &self.0 {
            let _ = Command::new("docker").args(["rmi", "-f", image]).output();
        }
    }
}

fn spec(name: &str, replicas: u32, image: &str, creds: &str, extra: &str) -> String {
    format!(
        "name = \"{name}\"\nreplicas = {replicas}\n[container]\nimage = \"{image}\"\n{extra}\
         command = [\"sh\", \"-c\", \"exec sleep 600\"]\n\
         [resources]\ncpu = \"50m\"\nmemory = \"16Mi\"\n\
         [placement]\nconstraints = [\"creds == {creds}\"]\n\
         [restart]\nbackoff_initial = \"1s\"\nbackoff_max = \"2s\"\n"
    )
}

fn apply(c: &Cluster, name: &str, text: &str) {
    let path = c.dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let out = c.cli(0, &["apply", "-f", path.to_str().unwrap()]);
    assert!(out.status.success(), "apply {name}: {}", stderr(&out));
}

/// `shoal issues` on agent 0.
fn issues(c: &Cluster) -> String {
    String::from_utf8_lossy(&c.cli(0, &["issues"]).stdout).to_string()
}

/// Waits for an issue line about workload `name` (its replica's, or its rollout's) that
/// contains every one of `words`.
fn wait_issue(c: &Cluster, name: &str, words: &[&str], within: Duration) {
    let found = wait_until(within, || {
        issues(c)
            .lines()
            .any(|l| l.contains(name) && words.iter().all(|w| l.contains(w)))
    });
    assert!(
        found,
        "no issue for {name} with {words:?} within {within:?}:\n{}\nlogs:\n{}",
        issues(c),
        c.logs()
    );
    eprintln!(
        "{name}: {}",
        issues(c).lines().find(|l| l.contains(name)).unwrap_or("")
    );
}

/// Replicas of `name` running healthy, from `status -o json`.
fn healthy(c: &Cluster, name: &str) -> usize {
    let out = c.cli(0, &["status", name, "-o", "json"]);
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return 0;
    };
    json["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["phase"] == "running" && i["healthy"] == true)
        .count()
}

#[test]
fn a_missing_or_malformed_registry_auth_file_stops_the_agent_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let malformed = dir.path().join("config.json");
    std::fs::write(
        &malformed,
        "{\"auths\": {\"h\": {\"auth\": \"not base64!\"}}}",
    )
    .unwrap();
    for (file, why) in [
        (dir.path().join("absent.json"), "cannot read it"),
        (malformed, "`auth` is not base64"),
    ] {
        let out = Command::new(shoal_bin())
            .args(["agent", "--name", "n1", "--runtime", "docker"])
            .args(["--gossip", "127.0.0.1:1", "--api", "127.0.0.1:1"])
            .args(["--data-dir", dir.path().to_str().unwrap()])
            .args(["--pki", dir.path().to_str().unwrap()])
            .args(["--registry-auth", file.to_str().unwrap()])
            .output()
            .unwrap();
        let text = stderr(&out);
        assert!(!out.status.success(), "{text}");
        assert!(
            text.contains(file.to_str().unwrap()) && text.contains(why),
            "{text}"
        );
    }
}

#[test]
fn images_are_pulled_from_a_loopback_registry_and_pull_failures_back_off() {
    if !docker_allowed() {
        return;
    }
    let _cleanup = Cleanup(Vec::new());
    drop(Cleanup(Vec::new())); // containers a killed earlier run left
    let registry = Registry::start(free_tcp_addr());
    let marker = format!("{}-{:?}", std::process::id(), std::time::SystemTime::now());
    let tokio = tokio();
    let pushed = tokio.block_on(async {
        let docker = engine().await;
        let mut pushed = Vec::new();
        for repository in ["pull-ok", "pull-digest", "pull-locked", "pull-never"] {
            let marked = format!("{marker}-{repository}");
            let image = push_marked_image(&docker, &registry, repository, "1", &marked).await;
            pushed.push(image);
        }
        pushed
    });
    let [ok, (_, digest), locked, never] = <[(String, String); 4]>::try_from(pushed).unwrap();
    let by_digest = format!("{}/pull-digest@{digest}", registry.host());
    let _cleanup = Cleanup(vec![ok.0.clone(), by_digest.clone(), locked.0.clone()]);

    let mut c = Cluster::new();
    let good = registry.config_json(c.dir.path(), registry_support::USER, PASSWORD);
    let bad = registry.config_json(c.dir.path(), registry_support::USER, "wrong-password");
    for (node, auth, creds) in [(GOOD, &good, "good"), (BAD, &bad, "bad")] {
        c.agent_args = vec![
            "--runtime".into(),
            "docker".into(),
            "--registry-auth".into(),
            auth.to_str().unwrap().into(),
            "--label".into(),
            format!("creds={creds}"),
        ];
        c.add(node);
    }
    c.wait_members(2, Duration::from_secs(20));

    // Pulled with the credentials, two replicas of one image in one pull, then healthy.
    let began = Instant::now();
    apply(&c, "pulled", &spec("pulled", 2, &ok.0, "good", ""));
    let up = wait_until(Duration::from_secs(60), || healthy(&c, "pulled") == 2);
    assert!(up, "pulled never healthy:\n{}\n{}", issues(&c), c.logs());
    eprintln!(
        "2 replicas pulled and healthy {:?} after apply",
        began.elapsed()
    );
    assert_eq!(
        registry.pull_attempts("pull-ok"),
        1,
        "two replicas of one image on one host share one pull:\n{}",
        registry.log()
    );

    // By digest.
    apply(&c, "digested", &spec("digested", 1, &by_digest, "good", ""));
    let up = wait_until(Duration::from_secs(60), || healthy(&c, "digested") == 1);
    assert!(up, "digested never healthy:\n{}\n{}", issues(&c), c.logs());

    // A digest the registry does not have, and a registry that is not there.
    let zeros = "0".repeat(64);
    let mismatch = format!("{}/pull-digest@sha256:{zeros}", registry.host());
    apply(&c, "mismatch", &spec("mismatch", 1, &mismatch, "good", ""));
    let closed = format!("127.0.0.1:{}/nothing:1", free_tcp_addr().port());
    apply(&c, "nowhere", &spec("nowhere", 1, &closed, "good", ""));
    // Never pulled, although the registry has it.
    let never_spec = spec("never", 1, &never.0, "good", "pull = \"never\"\n");
    apply(&c, "never", &never_spec);
    let within = Duration::from_secs(30);
    wait_issue(&c, "mismatch", &[&mismatch, "manifest unknown"], within);
    wait_issue(&c, "nowhere", &[&closed, "connection refused"], within);
    wait_issue(&c, "never", &[&never.0, "pull = \"never\""], within);
    assert_eq!(
        registry.pull_attempts("pull-never"),
        0,
        "pull = never pulled"
    );

    // Wrong credentials: an issue with the engine's reason, and no storm of pulls although
    // three replicas retry after 1 s each.
    apply(&c, "locked", &spec("locked", 3, &locked.0, "bad", ""));
    wait_issue(
        &c,
        "locked",
        &[&locked.0, "authentication required"],
        within,
    );
    let before = registry.pull_attempts("pull-locked");
    std::thread::sleep(Duration::from_secs(10));
    let during = registry.pull_attempts("pull-locked") - before;
    eprintln!("pull attempts with wrong credentials over 10 s: {during} (1 before)");
    assert!(before >= 1, "the locked image was never tried");
    assert!(
        during <= 3,
        "{during} pull attempts in 10 s: the per-image backoff (5 s, doubling) allows 3"
    );
    let logs = c.logs();
    assert!(!logs.contains(PASSWORD), "an agent logged the password");
    assert!(
        !logs.contains("wrong-password"),
        "an agent logged the password"
    );
    tokio.block_on(async {
        let docker = engine().await;
        remove_local(&docker, &ok.0).await;
    });
}
