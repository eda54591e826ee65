//! `shoal demo` in its normal mode: the mesh heals, every replica answers HTTP, exit 0, nothing
//! left behind.

#[test]
fn the_demo_heals_and_cleans_up() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["demo", "--port", "28100"])
        .output()
        .expect("run shoal demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the demo failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("healed: host death detected in"),
        "{stdout}"
    );
    for replica in 0..6 {
        assert!(
            stdout.contains(&format!("replica {replica} on n")),
            "replica {replica} not checked:\n{stdout}"
        );
    }
    let dir = stdout
        .lines()
        .find_map(|l| l.split("data under ").nth(1))
        .map(|d| d.trim_end_matches(')').to_string())
        .expect("the demo names its directory");
    assert!(!std::path::Path::new(&dir).exists(), "{dir} left behind");
    let left = std::process::Command::new("pgrep")
        .args(["-f", &dir])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "processes left behind: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}
