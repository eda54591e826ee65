//! Volumes on a real agent (issue 16, item 2): a process workload with a data volume and a host
//! path appends a line to `$SHOAL_DATA_DIR/count` at each start. The data survives a crash of the
//! instance (restarted), a SIGKILL of the agent with its instance (restarted by the new agent
//! over the same data dir), a `delete` (kept, and found again by the same name applied again),
//! and goes with `delete --purge-data`; a host path outside `--volume-root` is refused at apply.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{stderr, wait_until, Cluster};

/// The lines of the count file, 0 when it is missing.
fn starts(count: &Path) -> usize {
    std::fs::read_to_string(count)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// Kills the workload's instance (its `sleep`), as a crash would.
fn crash(marker: &str) {
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", &format!("sleep {marker}")])
        .status();
}

/// Whether the workload's instance runs.
fn running(marker: &str) -> bool {
    Command::new("pgrep")
        .args(["-f", &format!("sleep {marker}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn data_outlives_restarts_and_deletes_until_purged() {
    let mut c = Cluster::new();
    let root = c.dir.path().join("allowed");
    let shared = root.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    // The workload runs as the agents' workload user (nobody), and a host path is the
    // operator's to open to it: the way there traversable, the directory its own.
    {
        use std::os::unix::fs::PermissionsExt;
        for dir in [c.dir.path(), root.as_path()] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        }
        // Not root: the agent runs workloads as itself, the owner already.
        let _ = std::os::unix::fs::chown(&shared, Some(65534), Some(65534));
    }
    let marker = format!("8{}", std::process::id() % 100_000);
    c.cleanup.push(format!("sleep {marker}"));
    c.agent_args = vec!["--volume-root".into(), root.display().to_string()];
    c.add("n1");
    c.wait_members(1, Duration::from_secs(20));
    // Another workload lives throughout: deleting the only one would leave instances running
    // with no spec at all, a view the agent distrusts (its stops wait for an approval).
    let keeper = c.dir.path().join("keeper.toml");
    let keep = format!("9{}", std::process::id() % 100_000);
    c.cleanup.push(format!("sleep {keep}"));
    let text = format!(
        "name = \"keeper\"\n[process]\ncommand = [\"sleep\", \"{keep}\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
    );
    std::fs::write(&keeper, text).unwrap();
    let out = c.cli(0, &["apply", "-f", keeper.to_str().unwrap()]);
    assert!(out.status.success(), "apply keeper: {}", stderr(&out));

    let spec = c.dir.path().join("counter.toml");
    let text = format!(
        "name = \"counter\"\n[process]\n\
         command = [\"sh\", \"-c\", \"echo start >> $SHOAL_DATA_DIR/count && \
         echo $SHOAL_DATA_DIR > $SHOAL_VOLUME_SHARED/seen && exec sleep {marker}\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\
         [[volumes]]\nname = \"data\"\n\
         [[volumes]]\nname = \"shared\"\nkind = \"host\"\nhost_path = \"{}\"\n",
        shared.display()
    );
    std::fs::write(&spec, text).unwrap();
    let apply = |c: &Cluster| {
        let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
        assert!(out.status.success(), "apply: {}", stderr(&out));
    };
    apply(&c);
    let data = c.agents[0].data_dir.join("volumes/counter/0/data");
    let count = data.join("count");
    let started = |n: usize, c: &Cluster| {
        let ok = wait_until(Duration::from_secs(30), || {
            starts(&count) == n && running(&marker)
        });
        assert!(
            ok,
            "{n} starts recorded (found {})\n{}",
            starts(&count),
            c.logs()
        );
    };
    started(1, &c);
    // The host path is the replica's too, and SHOAL_DATA_DIR names the agent's directory.
    let seen = std::fs::read_to_string(shared.join("seen")).unwrap();
    assert_eq!(seen.trim(), data.display().to_string());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&data).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "a data volume is private");

    // A crash: the replica restarts and finds its data.
    crash(&marker);
    started(2, &c);

    // The agent and its instance die together; a new agent over the same data dir starts the
    // replica again, on the same data.
    c.kill(0);
    crash(&marker);
    c.start(0, None);
    started(3, &c);

    // A delete keeps the data and says where it is.
    let out = c.cli(0, &["delete", "counter"]);
    assert!(out.status.success(), "delete: {}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("volumes/counter/"), "delete output: {said}");
    assert!(
        wait_until(Duration::from_secs(30), || !running(&marker)),
        "the instance stops after the delete\n{}",
        c.logs()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(starts(&count), 3, "a delete leaves the data");

    // The same name applied again finds it.
    apply(&c);
    started(4, &c);

    // A delete with --purge-data removes it once the instance stopped.
    let out = c.cli(0, &["delete", "counter", "--purge-data"]);
    assert!(
        out.status.success(),
        "delete --purge-data: {}",
        stderr(&out)
    );
    let workload_dir = c.agents[0].data_dir.join("volumes/counter");
    let purged = wait_until(Duration::from_secs(30), || !workload_dir.exists());
    assert!(purged, "the data is purged\n{}", c.logs());
    assert!(!running(&marker));
    assert!(shared.join("seen").exists(), "a host path is never purged");

    // A host path outside --volume-root is refused by the agent at apply, naming the volume.
    let outside = c.dir.path().join("outside.toml");
    let text = "name = \"outside\"\n[process]\ncommand = [\"sleep\", \"1\"]\n\
                [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\
                [[volumes]]\nname = \"etc\"\nkind = \"host\"\nhost_path = \"/etc\"\n";
    std::fs::write(&outside, text).unwrap();
    let out = c.cli(0, &["apply", "-f", outside.to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "a host path outside the roots applied"
    );
    let err = stderr(&out);
    assert!(
        err.contains("volume \"etc\"") && err.contains("/etc") && err.contains("--volume-root"),
        "{err}"
    );
    // And `..` never gets as far as an agent: validate refuses it with its place.
    let dots = c.dir.path().join("dots.toml");
    let text = format!(
        "name = \"dots\"\n[process]\ncommand = [\"sleep\", \"1\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n\
         [[volumes]]\nname = \"up\"\nkind = \"host\"\nhost_path = \"{}/../../etc\"\n",
        root.display()
    );
    std::fs::write(&dots, text).unwrap();
    let out = c.cli(0, &["validate", "-f", dots.to_str().unwrap()]);
    assert!(!out.status.success());
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(
        said.contains("dots.toml:10:13: volumes[0].host_path:") && said.contains("`..`"),
        "{said}"
    );
}
