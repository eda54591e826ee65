//! The guard (`shoal guard`, the real binary) against real process groups and the real Docker
//! engine: it kills the guarded instances when the lease is not renewed, at once when the lease
//! file is tampered with, a restarted agent adopts it instead of starting a second one, and a
//! guard that cannot start says why. The agent's side is the library's `GuardLink`, as the agent
//! uses it. (`guard_agent.rs` runs the whole agent and freezes it with SIGSTOP.)

mod runtime_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use runtime_support::{exit_of, process_spec, request};
use shoal::core::reconcile::ReconcileConfig;
use shoal::node::guard::{GuardConfig, GuardLink, GuardRuntime};
use shoal::node::runtime::process::{ProcessConfig, ProcessRuntime};
use shoal::node::runtime::Runtime;

const NODE: &str = "g1";
const LEASE_MS: u64 = 1_500;

fn config(data_dir: &Path, runtime: GuardRuntime) -> GuardConfig {
    let mut config = GuardConfig::new(data_dir, NODE, runtime, &ReconcileConfig::default());
    config.lease_ms = LEASE_MS;
    config.exe = PathBuf::from(env!("CARGO_BIN_EXE_shoal"));
    config
}

async fn start_guard(data_dir: &Path) -> GuardLink {
    let mut link = GuardLink::start(config(data_dir, GuardRuntime::Process));
    link.wait_ready(Duration::from_secs(5)).await;
    assert_eq!(link.unavailable(), None, "{}", guard_log(data_dir));
    assert!(link.pid().is_some());
    link
}

fn guard_log(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("guard/guard.log")).unwrap_or_default()
}

/// Live (not zombie) members of process group `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        if fields[0] != "Z" && fields[0] != "X" && fields[2] == pgid.to_string() {
            members.push(pid);
        }
    }
    members
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
}

/// Processes started as `shoal guard --data-dir DATA_DIR`.
fn guards_of(data_dir: &Path) -> Vec<i32> {
    let want = data_dir.as_os_str().as_encoded_bytes();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.get(1) == Some(&b"guard".as_slice()) && args.contains(&want) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Renews every 200 ms for `how_long`, guarding workload `db` and `handles`.
async fn renew_for(link: &mut GuardLink, handles: &[&str], how_long: Duration) {
    let exclusive = BTreeSet::from(["db".to_string()]);
    let handles: BTreeSet<String> = handles.iter().map(|h| h.to_string()).collect();
    let until = Instant::now() + how_long;
    while Instant::now() < until {
        link.renew(&exclusive, handles.clone(), LEASE_MS);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the group has no live member; returns how long that took.
async fn killed_within(pgid: i32, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if group_members(pgid).is_empty() {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// A process runtime over `data_dir` running one instance of `db` (a shell with a child, so the
/// group has two members) and one of `web`, which is not exclusive.
async fn db_and_web(data_dir: &Path) -> (ProcessRuntime, String, i32, i32) {
    let rt = ProcessRuntime::open(ProcessConfig::new(data_dir, NODE))
        .await
        .unwrap();
    let db = process_spec("db", &["sh", "-c", "sleep 300 & exec sleep 301"]);
    let db = rt.start(request(&db, 0, NODE)).await.unwrap();
    let web = process_spec("web", &["sleep", "302"]);
    let web = rt.start(request(&web, 0, NODE)).await.unwrap();
    let (db_pid, web_pid) = (rt.pid(&db.handle).unwrap(), rt.pid(&web.handle).unwrap());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(group_members(db_pid).len(), 2, "sh and its sleep");
    (rt, db.handle, db_pid, web_pid)
}

async fn release(mut link: GuardLink, data_dir: &Path) {
    let pid = link.pid().expect("guard running");
    link.release();
    let t0 = Instant::now();
    while alive(pid) && t0.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !alive(pid),
        "a released guard exits\n{}",
        guard_log(data_dir)
    );
}

#[tokio::test]
async fn the_guard_kills_the_group_when_the_lease_is_not_renewed() {
    let dir = tempfile::tempdir().unwrap();
    let (rt, handle, db_pid, web_pid) = db_and_web(dir.path()).await;
    let mut events = rt.events();
    let mut link = start_guard(dir.path()).await;

    // Renewed for twice the lease: nothing happens.
    renew_for(&mut link, &[&handle], Duration::from_millis(2 * LEASE_MS)).await;
    assert_eq!(group_members(db_pid).len(), 2);

    // Renewals stop (the agent froze): the group dies within the lease and a poll.
    let took = killed_within(db_pid, Duration::from_secs(5)).await;
    let took = took.unwrap_or_else(|| panic!("not killed\n{}", guard_log(dir.path())));
    eprintln!("killed {took:?} after the last renewal (lease {LEASE_MS} ms)");
    assert!(
        took <= Duration::from_millis(LEASE_MS + 300),
        "killed {took:?} after the last renewal, lease {LEASE_MS} ms"
    );
    assert_eq!(
        exit_of(&mut events, &handle, Duration::from_secs(5)).await,
        Some(137)
    );
    assert!(
        alive(web_pid),
        "a normal instance is not the guard's business"
    );

    // The guard keeps running and says what it did.
    let guard_pid = link.pid().unwrap();
    assert!(alive(guard_pid));
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let fired = link.take_fired();
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(
        fired[0].reason.contains("did not renew"),
        "{}",
        fired[0].reason
    );
    assert_eq!(fired[0].killed.len(), 1);
    assert_eq!(fired[0].killed[0].handle, handle);
    assert_eq!(fired[0].killed[0].workload, "db");

    // A renewal arms it again, and a release makes it exit.
    renew_for(&mut link, &[], Duration::from_millis(400)).await;
    release(link, dir.path()).await;
    assert!(alive(web_pid));
    for i in rt.list().await.unwrap() {
        let _ = rt.stop(&i.handle, Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn an_instance_started_after_the_last_renewal_is_found_by_its_workload() {
    let dir = tempfile::tempdir().unwrap();
    let rt = ProcessRuntime::open(ProcessConfig::new(dir.path(), NODE))
        .await
        .unwrap();
    let mut link = start_guard(dir.path()).await;
    renew_for(&mut link, &[], Duration::from_millis(400)).await;
    // Started after the last renewal: the lease names its workload, not its handle.
    let db = process_spec("db", &["sleep", "303"]);
    let db = rt.start(request(&db, 1, NODE)).await.unwrap();
    let pid = rt.pid(&db.handle).unwrap();
    let took = killed_within(pid, Duration::from_secs(5)).await;
    assert!(took.is_some(), "not killed\n{}", guard_log(dir.path()));
    release(link, dir.path()).await;
}

#[tokio::test]
async fn a_tampered_lease_file_kills_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let lease = dir.path().join("guard/lease.json");
    let (rt, handle, db_pid, web_pid) = db_and_web(dir.path()).await;
    let mut link = start_guard(dir.path()).await;
    renew_for(&mut link, &[&handle], Duration::from_millis(400)).await;

    std::fs::write(&lease, b"{\"version\": 1, \"node\": \"g1\", garbage").unwrap();
    let took = killed_within(db_pid, Duration::from_secs(2)).await;
    let took = took.unwrap_or_else(|| panic!("not killed\n{}", guard_log(dir.path())));
    assert!(
        took < Duration::from_millis(500),
        "{took:?}: no waiting for the lease to end"
    );
    assert!(alive(web_pid));
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let fired = link.take_fired();
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0].reason.contains("tampered"), "{}", fired[0].reason);
    assert!(
        fired[0].reason.contains("does not parse"),
        "{}",
        fired[0].reason
    );
    assert_eq!(fired[0].killed[0].handle, handle);

    // The agent's next renewal is valid again; a deleted lease file is tampering too, reported
    // even with nothing left to kill.
    renew_for(&mut link, &[], Duration::from_millis(1_200)).await;
    std::fs::remove_file(&lease).unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let fired = link.take_fired();
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(
        fired[0].reason.contains("cannot read"),
        "{}",
        fired[0].reason
    );
    assert!(fired[0].killed.is_empty());

    // A lease that claims to last longer than the guard allows is refused the same way.
    let (_, handle2, db2_pid, _) = {
        let db = process_spec("db", &["sleep", "304"]);
        let db = rt.start(request(&db, 2, NODE)).await.unwrap();
        let pid = rt.pid(&db.handle).unwrap();
        ((), db.handle, pid, ())
    };
    renew_for(&mut link, &[&handle2], Duration::from_millis(400)).await;
    let mut text: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&lease).unwrap()).unwrap();
    text["expires_boot_ms"] = serde_json::json!(shoal::node::guard::boot_now_ms() + 3_600_000);
    std::fs::write(&lease, serde_json::to_vec(&text).unwrap()).unwrap();
    assert!(killed_within(db2_pid, Duration::from_secs(2))
        .await
        .is_some());
    release(link, dir.path()).await;
    for i in rt.list().await.unwrap() {
        let _ = rt.stop(&i.handle, Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn a_restarted_agent_adopts_the_running_guard() {
    let dir = tempfile::tempdir().unwrap();
    let (rt, handle, db_pid, _) = db_and_web(dir.path()).await;
    let mut first = start_guard(dir.path()).await;
    renew_for(&mut first, &[&handle], Duration::from_millis(400)).await;
    let pid = first.pid().unwrap();
    drop(first); // the agent crashed: no release

    let mut second = GuardLink::start(config(dir.path(), GuardRuntime::Process));
    assert_eq!(second.pid(), Some(pid), "adopted at once, nothing spawned");
    assert_eq!(second.unavailable(), None);
    assert_eq!(
        guards_of(dir.path()),
        vec![pid],
        "one guard per data directory"
    );

    // The lease continues: renewed through the new link for twice its length, nothing killed.
    renew_for(&mut second, &[&handle], Duration::from_millis(2 * LEASE_MS)).await;
    assert_eq!(group_members(db_pid).len(), 2);

    // A guard started by hand for the same directory refuses, and says why.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["guard", "--data-dir"])
        .arg(dir.path())
        .args([
            "--node",
            NODE,
            "--runtime",
            "process",
            "--lease-max-ms",
            "1500",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("another guard holds"), "{stderr}");

    release(second, dir.path()).await;
    assert!(
        group_members(db_pid).is_empty(),
        "released: exclusive instances stopped"
    );
    for i in rt.list().await.unwrap() {
        let _ = rt.stop(&i.handle, Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn a_guard_that_cannot_start_says_why_and_is_tried_again() {
    // The guard's directory cannot be created.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("guard"), b"not a directory").unwrap();
    let link = GuardLink::start(config(dir.path(), GuardRuntime::Process));
    let why = link.unavailable().expect("unavailable");
    assert!(why.contains("cannot create the guard's directory"), "{why}");

    // The binary is missing.
    let dir = tempfile::tempdir().unwrap();
    let mut bad = config(dir.path(), GuardRuntime::Process);
    bad.exe = PathBuf::from("/nonexistent/shoal");
    let link = GuardLink::start(bad);
    let why = link.unavailable().expect("unavailable");
    assert!(why.contains("cannot run the guard"), "{why}");

    // Something else holds the guard's lock: the guard exits with the reason; once the lock is
    // free, the next attempt starts it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("guard")).unwrap();
    let lock = std::fs::File::create(dir.path().join("guard/guard.lock")).unwrap();
    lock.try_lock().unwrap();
    let mut config = config(dir.path(), GuardRuntime::Process);
    config.retry_every = Duration::from_millis(300);
    let mut link = GuardLink::start(config);
    link.wait_ready(Duration::from_secs(5)).await;
    let why = link.unavailable().expect("unavailable");
    assert!(why.contains("another guard holds"), "{why}");
    drop(lock);
    let t0 = Instant::now();
    while link.unavailable().is_some() && t0.elapsed() < Duration::from_secs(5) {
        link.renew(&BTreeSet::new(), BTreeSet::new(), LEASE_MS);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(link.unavailable(), None, "{}", guard_log(dir.path()));
    release(link, dir.path()).await;
}

#[tokio::test]
async fn a_removed_data_directory_ends_the_guard() {
    let dir = tempfile::tempdir().unwrap();
    let link = start_guard(dir.path()).await;
    let pid = link.pid().unwrap();
    drop(link);
    std::fs::remove_dir_all(dir.path()).unwrap();
    let t0 = Instant::now();
    while alive(pid) && t0.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "the guard of a removed directory exits");
}

/// The inode of the lease file now (each write is a create and a rename: a new inode).
fn lease_inode(data_dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(data_dir.join("guard/lease.json"))
        .ok()
        .map(|m| m.ino())
}

/// Renews a 10 s lease every 100 ms for 4 s guarding `exclusive`; returns how many times the
/// lease was written (changes of the file's inode between samples).
async fn lease_writes(link: &mut GuardLink, data_dir: &Path, exclusive: BTreeSet<String>) -> usize {
    let mut last = lease_inode(data_dir);
    let mut changes = 0;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        link.renew(&exclusive, BTreeSet::new(), 10_000);
        let now = lease_inode(data_dir);
        changes += usize::from(now != last);
        last = now;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    changes
}

#[tokio::test]
async fn an_idle_agent_writes_its_lease_every_few_seconds_and_a_guarded_one_every_second() {
    // A 10 s lease renewed every 100 ms for 4 s: with nothing guarded it is written at most
    // when it starts and then only after half of it passed (not within 4 s); guarding workload
    // `db`, it is written at once and then every second.
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), GuardRuntime::Process);
    config.lease_ms = 10_000;
    let mut link = GuardLink::start(config);
    link.wait_ready(Duration::from_secs(5)).await;
    assert_eq!(link.unavailable(), None, "{}", guard_log(dir.path()));
    let idle = lease_writes(&mut link, dir.path(), BTreeSet::new()).await;
    assert!(idle <= 1, "idle: {idle} writes in 4 s (at most the first)");
    let guarded = lease_writes(&mut link, dir.path(), BTreeSet::from(["db".to_string()])).await;
    assert!(
        (4..=6).contains(&guarded),
        "guarded: {guarded} writes in 4 s"
    );
    assert_eq!(link.unavailable(), None, "{}", guard_log(dir.path()));
    release(link, dir.path()).await;
}
