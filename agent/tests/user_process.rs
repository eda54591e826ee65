//! `user` on the process runtime, against real processes: the instance runs as that user and its
//! group with no supplementary group (never root's), writes its own data volume, and a user this
//! host does not know fails the start with a reason naming it. Needs root (the agent's user in
//! production), as CI runs: without it the test says so and checks nothing else.

mod runtime_support;

use std::time::Duration;

use runtime_support::{eventually, request, spec};
use shoal::runtime::process::{ProcessConfig, ProcessRuntime};
use shoal::runtime::Runtime;

const NODE: &str = "n1";

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// The `Uid:`, `Gid:` and `Groups:` lines of `/proc/PID/status`, their first values.
fn ids(pid: i32) -> (String, String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .map(|l| l[key.len()..].trim().to_string())
            .unwrap_or_default()
    };
    let first = |s: String| s.split_whitespace().next().unwrap_or("").to_string();
    (first(line("Uid:")), first(line("Gid:")), line("Groups:"))
}

#[tokio::test]
async fn an_instance_runs_as_its_user_with_no_group_of_root_and_owns_its_volume() {
    if !is_root() {
        eprintln!("SKIPPED: changing an instance's user needs root (CI runs as root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // An agent's data dir may be private: the instance still reaches its own directories.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let rt = ProcessRuntime::open(ProcessConfig::new(dir.path(), NODE))
        .await
        .unwrap();
    let asuser = spec(
        "name = \"asuser\"\nuser = \"nobody:nogroup\"\n[process]\n\
         command = [\"sh\", \"-c\", \"id -u > $SHOAL_VOLUME_DATA/who && exec sleep 30\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[[volumes]]\nname = \"data\"\n",
    );
    let started = rt.start(request(&asuser, 0, NODE)).await.expect("start");
    let pid = rt.pid(&started.handle).expect("pid");
    let volume = dir.path().join("volumes/asuser/0/data");
    eventually(
        Duration::from_secs(5),
        "the instance writes its volume",
        || volume.join("who").exists(),
    )
    .await;
    let nobody = std::process::Command::new("id")
        .args(["-u", "nobody"])
        .output()
        .unwrap();
    let nobody = String::from_utf8(nobody.stdout).unwrap().trim().to_string();
    let who = std::fs::read_to_string(volume.join("who")).unwrap();
    assert_eq!(who.trim(), nobody, "the command ran as nobody");
    let (uid, _gid, groups) = ids(pid);
    assert_eq!(uid, nobody, "the instance's process runs as nobody");
    assert!(
        !groups.split_whitespace().any(|g| g == "0"),
        "no supplementary group of root: {groups:?}"
    );
    // A fresh runtime over the same directory adopts it, as any instance.
    let again = ProcessRuntime::open(ProcessConfig::new(dir.path(), NODE))
        .await
        .unwrap();
    assert_eq!(again.list().await.unwrap().len(), 1);
    rt.stop(&started.handle, Duration::from_secs(5))
        .await
        .unwrap();

    let unknown = spec(
        "name = \"ghost\"\nuser = \"no-such-user-shoal\"\n[process]\ncommand = [\"true\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n",
    );
    let err = rt
        .start(request(&unknown, 0, NODE))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ghost/0")
            && err.contains("no-such-user-shoal")
            && err.contains("no such user"),
        "{err}"
    );
    let numeric = spec(
        "name = \"numeric\"\nuser = \"4242\"\n[process]\ncommand = [\"true\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n",
    );
    let err = rt
        .start(request(&numeric, 0, NODE))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("give one (\"4242:4242\")"), "{err}");
}
