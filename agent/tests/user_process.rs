//! `user` on the process runtime, against real processes: the instance runs as that user and its
//! group with no supplementary group (never root's), as its own output through the log relay and
//! `/proc` both say; it owns its working directory and data volume, not a host path (a change of
//! user hands over the previous user's files only, and no link's target); `exec` (on
//! pipes and on a terminal), exec probes and reload hooks run as it too, also `exec` in an
//! instance a fresh runtime adopted; a user
//! this host does not know fails the start with a reason naming the user and the replica, and
//! leaves nothing behind. On a real agent: `shoal logs` and `shoal exec` show the user, and an
//! unknown user is a `start-failed` event and an issue with the reason.
//!
//! Needs root (the agent's user in production), as CI runs: without it each test says so and
//! checks nothing else.

mod common;
mod runtime_support;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use common::{stderr, wait_until, Cluster};
use runtime_support::{eventually, request, spec};
use shoal::core::spec::{Probe, ReloadHook};
use shoal::node::runtime::exec::{ExecRequest, TtySize};
use shoal::node::runtime::logs::Stream;
use shoal::node::runtime::process::{ProcessConfig, ProcessRuntime};
use shoal::node::runtime::Runtime;

const NODE: &str = "n1";
const WAIT: Duration = Duration::from_secs(10);
/// Marks the agent test's processes, so that the cluster's cleanup kills them.
const MARK: &str = ": user-process-test";

fn is_root() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        eprintln!("SKIPPED: changing an instance's user needs root (CI runs as root)");
    }
    root
}

/// `id ARGS` on this host, trimmed.
fn id(args: &[&str]) -> String {
    let out = std::process::Command::new("id")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "id {args:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
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

/// What `command` prints when `rt` execs it in `handle` (on a terminal with `tty`).
async fn exec_output(rt: &ProcessRuntime, handle: &str, command: &str, tty: bool) -> String {
    let request = ExecRequest {
        command: vec!["sh".into(), "-c".into(), command.into()],
        stdin: false,
        tty: tty.then_some(TtySize { rows: 24, cols: 80 }),
    };
    let mut child = rt.exec(handle, &request).await.expect("exec");
    let mut out = Vec::new();
    while let Some((_, chunk)) = tokio::time::timeout(WAIT, child.output.recv())
        .await
        .expect("exec output")
    {
        out.extend(chunk);
    }
    let code = tokio::time::timeout(WAIT, child.exit).await.expect("exit");
    assert_eq!(code.ok().flatten(), Some(0), "{command}");
    String::from_utf8_lossy(&out).replace("\r\n", "\n")
}

#[tokio::test]
async fn an_instance_runs_as_its_user_with_no_group_of_root_and_owns_its_directories() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // An agent's data dir may be private: the instance still reaches its own directories.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let host_path = tempfile::tempdir().unwrap();
    let rt = ProcessRuntime::open(ProcessConfig::new(dir.path(), NODE))
        .await
        .unwrap();
    let asuser = spec(&format!(
        "name = \"asuser\"\nuser = \"nobody:nogroup\"\n[process]\n\
         command = [\"sh\", \"-c\", \"id -u; id -G; id -u > $SHOAL_VOLUME_DATA/who && \
         touch mine && exec sleep 30\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[[volumes]]\nname = \"data\"\n\
         [[volumes]]\nname = \"shared\"\nkind = \"host\"\nhost_path = {:?}\n",
        host_path.path().to_str().unwrap()
    ));
    let started = rt.start(request(&asuser, 0, NODE)).await.expect("start");
    let pid = rt.pid(&started.handle).expect("pid");
    let (nobody, nogroup) = (id(&["-u", "nobody"]), id(&["-g", "nobody"]));

    // Its own output, through the log relay: nobody's uid, then its only group.
    let expected = format!("{nobody}\n{nogroup}\n");
    eventually(WAIT, "the output to be relayed", || {
        rt.output(&started.handle, Stream::Stdout) == expected
    })
    .await;
    let (uid, gid, groups) = ids(pid);
    assert_eq!((uid, gid), (nobody.clone(), nogroup.clone()));
    assert!(
        !groups.split_whitespace().any(|g| g == "0"),
        "no supplementary group of root: {groups:?}"
    );

    // It wrote its data volume and its working directory, which are its own; a host path is
    // the operator's and stays root's.
    let volume = dir.path().join("volumes/asuser/0/data");
    let working = dir.path().join("replicas/asuser/0");
    eventually(WAIT, "the instance writes its directories", || {
        volume.join("who").exists() && working.join("mine").exists()
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(volume.join("who")).unwrap().trim(),
        nobody
    );
    for owned in [&volume, &working, &working.join("mine")] {
        let meta = std::fs::metadata(owned).unwrap();
        assert_eq!(
            (meta.uid().to_string(), meta.gid().to_string()),
            (nobody.clone(), nogroup.clone()),
            "{}",
            owned.display()
        );
    }
    assert_eq!(std::fs::metadata(host_path.path()).unwrap().uid(), 0);

    // exec runs as the instance's user, on pipes and on a terminal.
    let pipes = exec_output(&rt, &started.handle, "id -u; id -G", false).await;
    assert_eq!(pipes, expected);
    let terminal = exec_output(&rt, &started.handle, "id -u", true).await;
    assert_eq!(terminal.trim(), nobody);

    // So do exec probes and reload hooks: run as root, they would run what the user can write.
    let as_nobody = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("test \"$(id -u):$(id -G)\" = {nobody}:{nogroup}"),
    ];
    let probe = Probe::Exec {
        command: as_nobody.clone(),
    };
    let outcome = rt.probe(&started.handle, &probe, WAIT).await;
    assert!(
        outcome.is_healthy(),
        "the exec probe ran as nobody: {outcome:?}"
    );
    let hook = ReloadHook::Exec { command: as_nobody };
    let settings = Default::default();
    let reloaded = rt.reload(&started.handle, &hook, &settings, WAIT).await;
    assert!(
        reloaded.is_ok(),
        "the reload hook ran as nobody: {reloaded:?}"
    );

    // A fresh runtime over the same directory adopts it, and its exec is still as nobody.
    drop(rt);
    let again = ProcessRuntime::open(ProcessConfig::new(dir.path(), NODE))
        .await
        .unwrap();
    assert_eq!(again.list().await.unwrap().len(), 1);
    assert_eq!(again.pid(&started.handle), Some(pid));
    let adopted = exec_output(&again, &started.handle, "id -u; id -G", false).await;
    assert_eq!(adopted, expected);
    again
        .stop(&started.handle, Duration::from_secs(5))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_change_of_user_hands_over_the_previous_users_files_and_follows_no_link() {
    if !is_root() {
        return;
    }
    use std::os::unix::fs::{chown, lchown, symlink};
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("roots");
    std::fs::write(&target, "root's").unwrap();
    // The data volume as an instance running as 65534 left it: its own file, a link to a file
    // of root's elsewhere, and a file of root's (what a hard link to one would be).
    let volume = dir.path().join("volumes/handover/0/data");
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::write(volume.join("mine"), "data").unwrap();
    std::fs::write(volume.join("roots"), "root's").unwrap();
    symlink(&target, volume.join("link")).unwrap();
    for path in [&volume, &volume.join("mine")] {
        chown(path, Some(65534), Some(65534)).unwrap();
    }
    lchown(volume.join("link"), Some(65534), Some(65534)).unwrap();

    let rt = ProcessRuntime::open(ProcessConfig::new(dir.path(), NODE))
        .await
        .unwrap();
    let handover = spec(
        "name = \"handover\"\nuser = \"4242:4242\"\n[process]\ncommand = [\"sleep\", \"30\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[[volumes]]\nname = \"data\"\n",
    );
    let started = rt.start(request(&handover, 0, NODE)).await.expect("start");
    let owner = |path: &std::path::Path| {
        let meta = std::fs::symlink_metadata(path).unwrap();
        (meta.uid(), meta.gid())
    };
    assert_eq!(owner(&volume), (4242, 4242));
    assert_eq!(owner(&volume.join("mine")), (4242, 4242));
    assert_eq!(owner(&volume.join("link")), (4242, 4242), "the link itself");
    assert_eq!(owner(&target), (0, 0), "never the link's target");
    assert_eq!(
        owner(&volume.join("roots")),
        (0, 0),
        "only the previous user's files"
    );
    rt.stop(&started.handle, Duration::from_secs(5))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_user_the_host_does_not_know_fails_the_start_with_the_reason() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rt = ProcessRuntime::open(ProcessConfig::new(dir.path(), NODE))
        .await
        .unwrap();
    let start_error = |text: &str| {
        let spec = spec(&format!(
            "name = \"ghost\"\nuser = {text:?}\n[process]\ncommand = [\"true\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[[volumes]]\nname = \"data\"\n"
        ));
        let rt = &rt;
        async move {
            rt.start(request(&spec, 2, NODE))
                .await
                .unwrap_err()
                .to_string()
        }
    };
    let err = start_error("no-such-user-shoal").await;
    assert!(
        err.contains("ghost/2: user \"no-such-user-shoal\": no such user on this host"),
        "{err}"
    );
    let err = start_error("nobody:no-such-group-shoal").await;
    assert!(err.contains("no group \"no-such-group-shoal\""), "{err}");
    // A uid without an entry has no primary group: it must be given, never root's taken.
    let err = start_error("4242").await;
    assert!(err.contains("give one (\"4242:4242\")"), "{err}");
    // Nothing was started nor left behind.
    assert!(rt.list().await.unwrap().is_empty());
    assert!(!dir.path().join("volumes/ghost").exists());
    let instances = dir.path().join("instances");
    assert_eq!(std::fs::read_dir(&instances).map_or(0, |d| d.count()), 0);
}

/// A one-agent mesh: what an operator sees of `user` through the CLI.
#[test]
fn on_an_agent_logs_and_exec_show_the_user_and_an_unknown_one_is_an_issue() {
    if !is_root() {
        return;
    }
    let mut c = Cluster::new();
    c.cleanup.push(MARK.trim_start_matches(": ").to_string());
    c.add("n1");
    c.wait_members(1, WAIT);
    let write = |name: &str, user: &str| {
        let path = c.dir.path().join(format!("{name}.toml"));
        let text = format!(
            "name = \"{name}\"\nuser = \"{user}\"\n[process]\n\
             command = [\"sh\", \"-c\", \"{MARK}; id -u; exec sleep 600\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n[restart]\nbackoff_initial = \"1s\"\n"
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    let nobody = id(&["-u", "nobody"]);
    // A new mesh starts at version 7 and moves to 8 once its view settled (seconds); until
    // then an apply of `user` is refused and says to apply again.
    for (name, user) in [("asnobody", "nobody"), ("asghost", "no-such-user-shoal")] {
        let path = write(name, user);
        let mut last = String::new();
        let applied = wait_until(Duration::from_secs(20), || {
            let out = c.cli(0, &["apply", "-f", path.to_str().unwrap()]);
            last = stderr(&out);
            assert!(
                out.status.success() || last.contains("apply again shortly"),
                "apply {name}: {last}"
            );
            out.status.success()
        });
        assert!(applied, "apply {name}: {last}\n{}", c.logs());
    }

    let logs = || String::from_utf8_lossy(&c.cli(0, &["logs", "asnobody/0"]).stdout).to_string();
    assert!(
        wait_until(Duration::from_secs(20), || logs().trim() == nobody),
        "shoal logs: {:?}\n{}",
        logs(),
        c.logs()
    );
    let out = c.cli(0, &["exec", "asnobody/0", "--", "id", "-u"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        nobody,
        "{}",
        stderr(&out)
    );

    let says = |text: &str| {
        text.contains("asghost/0")
            && text.contains("no-such-user-shoal")
            && text.contains("no such user on this host")
    };
    let issues = || String::from_utf8_lossy(&c.cli(0, &["issues"]).stdout).to_string();
    assert!(
        wait_until(Duration::from_secs(20), || says(&issues())),
        "shoal issues: {}\n{}",
        issues(),
        c.logs()
    );
    let out = c.cli(0, &["events", "-o", "json"]);
    let recorded = String::from_utf8_lossy(&out.stdout).lines().any(|line| {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        e["kind"] == "start-failed" && says(line)
    });
    assert!(
        recorded,
        "no start-failed event: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
