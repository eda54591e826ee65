//! The web UI in a real browser (issue 27, item 6): five `shoal agent` processes on loopback,
//! agent 0 serving `--ui`, a workload of process replicas; `ui_browser.py` opens the pages in
//! headless Chromium through selenium, checks the hosts and the replicas, has a host killed
//! (SIGKILL, its instances too) and sees it dead and its replicas running elsewhere within 5 s
//! without a reload, with no console errors, and saves screenshots (into docs/ui/ with `SHOAL_UI_SHOTS=docs/ui`).
//!
//! Needs `chromium`, `chromium-driver` (Debian) and Python `selenium` (.ci/run installs them);
//! without them the test fails and says what is missing, unless SHOAL_SKIP_BROWSER_TESTS=1.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_tcp_addr, wait_until, Cluster};

const AGENTS: usize = 5;
const REPLICAS: u32 = 6;
/// The replicas run `sleep MARKER`: it tells this test's processes from any other's.
const MARKER: u32 = 86_427;

fn browser_ready() -> Result<(), String> {
    for bin in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        if !std::path::Path::new(bin).exists() {
            return Err(format!(
                "{bin} is missing (apt-get install chromium chromium-driver)"
            ));
        }
    }
    let selenium = Command::new("python3")
        .args(["-c", "import selenium"])
        .status()
        .map_err(|e| format!("python3: {e}"))?;
    if !selenium.success() {
        return Err("Python selenium is missing (pip install selenium)".into());
    }
    Ok(())
}

fn hosts_of(c: &Cluster, name: &str) -> Vec<String> {
    let status = c.cli_json(0, &["status", name, "-o", "json"]);
    status["instances"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|i| i["phase"] == "running")
                .filter_map(|i| i["node"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn browser_sees_hosts_replicas_and_a_host_death_live() {
    if std::env::var("SHOAL_SKIP_BROWSER_TESTS").as_deref() == Ok("1") {
        eprintln!("SHOAL_SKIP_BROWSER_TESTS=1: skipped");
        return;
    }
    if let Err(missing) = browser_ready() {
        panic!("the browser test needs {missing}; or set SHOAL_SKIP_BROWSER_TESTS=1 to skip it deliberately");
    }
    let started = Instant::now();
    let mut c = Cluster::new();
    c.cleanup.push(format!("^sleep {MARKER}$"));
    for i in 0..AGENTS {
        if i == 0 {
            // Agent 0 serves the UI: add it by hand so its --ui is in its first command line.
            c.agents.push(common::Agent {
                name: "n1".into(),
                gossip: common::free_addr(),
                api: common::free_addr(),
                data_dir: c.dir.path().join("data-0-n1"),
                child: None,
                log: c.dir.path().join("0-n1.log"),
                metrics: None,
                ui: Some(free_tcp_addr()),
                netns: None,
            });
            c.start(0, None);
        } else {
            c.add(&format!("n{}", i + 1));
        }
    }
    c.wait_members(AGENTS, Duration::from_secs(15));
    let spec = c.dir.path().join("web.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"web\"\nreplicas = {REPLICAS}\n\
             [process]\ncommand = [\"sh\", \"-c\", \"echo hello from replica $SHOAL_REPLICA; exec sleep {MARKER}\"]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
        ),
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap(), "--wait"]);
    assert!(out.status.success(), "apply: {}", common::stderr(&out));
    assert!(wait_until(Duration::from_secs(10), || hosts_of(&c, "web")
        .len()
        == REPLICAS as usize));
    // The victim: a host with a replica, not the one serving the UI.
    let on = hosts_of(&c, "web");
    let victim = (1..AGENTS)
        .find(|&i| on.contains(&c.agents[i].name))
        .expect("a replica on n2..n5");
    let victim_name = c.agents[victim].name.clone();

    // Screenshots go to the test's temp dir; `SHOAL_UI_SHOTS=docs/ui` (from the workspace root)
    // refreshes the ones docs/ui.md shows.
    let shots = match std::env::var("SHOAL_UI_SHOTS") {
        Ok(dir) => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(dir),
        Err(_) => c.dir.path().join("shots"),
    };
    std::fs::create_dir_all(&shots).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui_browser.py");
    let base = format!("http://{}", c.agents[0].ui.unwrap());
    let mut driver = Command::new("python3")
        .arg(&script)
        .args([
            &base,
            "web",
            &REPLICAS.to_string(),
            &AGENTS.to_string(),
            &victim_name,
        ])
        .arg(&shots)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut stdin = driver.stdin.take().unwrap();
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let mut last = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        eprintln!("browser: {line}");
        if line == "kill" {
            let agent_pid = c.agents[victim].child.as_ref().unwrap().id();
            let children = Command::new("pgrep")
                .args(["-P", &agent_pid.to_string()])
                .output()
                .unwrap();
            c.kill(victim);
            for pid in String::from_utf8_lossy(&children.stdout).lines() {
                let _ = Command::new("kill").args(["-9", pid.trim()]).status();
            }
            writeln!(stdin, "killed").unwrap();
            stdin.flush().unwrap();
        }
        last = line;
    }
    let status = driver.wait().unwrap();
    assert!(
        status.success(),
        "the browser checks failed: {last}\n{}",
        c.logs()
    );
    let figures: serde_json::Value = serde_json::from_str(&last).expect("figures");
    assert!(
        figures["dead_shown_s"].as_f64().unwrap() <= 5.0,
        "{figures}"
    );
    assert!(
        figures["moved_shown_s"].as_f64().unwrap() <= 5.0,
        "{figures}"
    );
    for shot in [
        "mesh.png",
        "workloads.png",
        "workload.png",
        "logs.png",
        "issues.png",
        "events.png",
        "mesh-host-dead.png",
        "workload-moved.png",
    ] {
        assert!(shots.join(shot).exists(), "{shot}");
    }
    eprintln!("ui_browser: {figures} in {:?}", started.elapsed());
}
