//! A real process writing to the store is aborted at an arbitrary moment (possibly mid-commit):
//! the store reopens cleanly and holds every write the process had acknowledged.

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use shoal::core::store::StoreConfig;
use shoal::state::store_db::DesiredStore;

const CHILD_ENV: &str = "SHOAL_STORE_CRASH_CHILD";
const TEST_NAME: &str = "acknowledged_writes_survive_a_process_abort";

/// The child: write as fast as possible, print each acknowledgement, abort after a while.
fn child(dir: &str) -> ! {
    let mut store = DesiredStore::open(dir.as_ref(), "n1", StoreConfig::default()).unwrap();
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(300));
        std::process::abort();
    });
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        let name = format!("w{}", i % 500);
        let entry = store
            .apply(
                &name,
                vec![(i % 251) as u8; 1_000 + (i as usize % 3_000)],
                1_000 + i,
            )
            .unwrap();
        writeln!(
            out,
            "ACK {} {} {}",
            entry.name, entry.version.hlc.wall_ms, entry.version.hlc.logical
        )
        .unwrap();
        out.flush().unwrap();
    }
    unreachable!()
}

#[test]
fn acknowledged_writes_survive_a_process_abort() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(&dir);
    }
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let output = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .output()
            .unwrap();
        assert!(!output.status.success(), "the child must die by abort");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let acks: Vec<(String, u64, u32)> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("ACK "))
            .map(|l| {
                let parts: Vec<&str> = l.split(' ').collect();
                (
                    parts[0].to_owned(),
                    parts[1].parse().unwrap(),
                    parts[2].parse().unwrap(),
                )
            })
            .collect();
        assert!(
            acks.len() > 5,
            "round {round}: the child acknowledged only {} writes",
            acks.len()
        );

        let store = DesiredStore::open(dir.path(), "n1", StoreConfig::default()).unwrap();
        store.check_invariants();
        // The last acknowledgement per name is what the store must hold (or something newer,
        // if the abort hit after the commit but before the acknowledgement was printed).
        let mut last = std::collections::BTreeMap::new();
        for (name, wall_ms, logical) in acks {
            last.insert(name, (wall_ms, logical));
        }
        for (name, (wall_ms, logical)) in last {
            let hlc = store
                .get(&name)
                .unwrap_or_else(|| panic!("{name} lost"))
                .version
                .hlc;
            assert!(
                (hlc.wall_ms, hlc.logical) >= (wall_ms, logical),
                "{name} went back to {hlc}"
            );
        }
    }
}
