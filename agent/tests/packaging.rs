//! What an operator installs besides the binary: `shoal version`, the manual pages
//! (`shoal man`), the systemd unit (dist/shoal.service), logs a journal can read.

use std::path::Path;
use std::process::Command;

fn shoal() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
}

#[test]
fn version_prints_version_commit_and_wire_range() {
    let out = shoal().args(["version", "--local"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let version = env!("CARGO_PKG_VERSION");
    let wire = format!(
        "wire {}..={}",
        shoal_core::version::WIRE_MIN,
        shoal_core::version::WIRE_CUR
    );
    assert!(text.contains(&format!("shoal {version} (")), "{text}");
    assert!(text.contains(&wire), "{text}");

    let out = shoal()
        .args(["version", "--local", "-o", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["cli"]["version"], version);
    let commit = json["cli"]["commit"].as_str().unwrap();
    assert!(!commit.is_empty(), "{json}");
    assert_eq!(json["cli"]["wire_min"], shoal_core::version::WIRE_MIN);
    assert_eq!(json["cli"]["wire_max"], shoal_core::version::WIRE_CUR);
}

#[test]
fn man_writes_one_troff_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("man1"); // created by the command
    let out = shoal()
        .args(["man", "--dir"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed = String::from_utf8_lossy(&out.stdout);
    let mut pages: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for page in [
        "shoal.1",
        "shoal-agent.1",
        "shoal-apply.1",
        "shoal-pki-issue.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "{page} missing: {pages:?}");
    }
    // Hidden commands (`log-relay`) get no page.
    assert!(!pages.iter().any(|p| p.contains("log-relay")), "{pages:?}");
    assert!(pages.len() > 20, "{pages:?}");
    for page in &pages {
        assert!(
            listed.contains(page.as_str()),
            "{page} not printed: {listed}"
        );
        let text = std::fs::read_to_string(out_dir.join(page)).unwrap();
        assert!(text.contains(".TH "), "{page} is not troff: {text}");
        assert!(text.contains(".SH NAME"), "{page} has no NAME: {text}");
    }
    let agent = std::fs::read_to_string(out_dir.join("shoal-agent.1")).unwrap();
    assert!(
        agent.contains("metrics"),
        "the agent's flags are documented"
    );

    // A directory that cannot be created is a clear error, not a panic.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let out = shoal()
        .args(["man", "--dir"])
        .arg(file.join("sub"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("creating --dir"),
        "{out:?}"
    );
}

fn unit_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/shoal.service")
}

/// `[section] -> key -> values` of a unit file, continuation lines joined.
fn parse_unit(text: &str) -> Vec<(String, String, String)> {
    let mut entries = Vec::new();
    let mut section = String::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim_end();
        if pending.is_empty() && (line.starts_with('#') || line.starts_with(';')) {
            continue;
        }
        let joined = format!("{pending}{line}");
        if let Some(rest) = joined.strip_suffix('\\') {
            pending = format!("{rest} ");
            continue;
        }
        pending.clear();
        let joined = joined.trim();
        if joined.is_empty() {
            continue;
        }
        if let Some(name) = joined.strip_prefix('[') {
            section = name.strip_suffix(']').expect("a closed section").into();
            continue;
        }
        let (key, value) = joined
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {joined}"));
        entries.push((section.clone(), key.trim().into(), value.trim().into()));
    }
    assert!(pending.is_empty(), "the unit ends inside a continued line");
    entries
}

#[test]
fn systemd_unit_is_valid_and_matches_the_docs() {
    let text = std::fs::read_to_string(unit_path()).unwrap();
    let entries = parse_unit(&text);
    let get = |section: &str, key: &str| {
        entries
            .iter()
            .find(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.clone())
            .unwrap_or_else(|| panic!("[{section}] {key} missing"))
    };
    let exec = get("Service", "ExecStart");
    assert!(exec.starts_with("/usr/local/bin/shoal agent "), "{exec}");
    assert!(Path::new(exec.split_whitespace().next().unwrap()).is_absolute());
    for flag in [
        "--name",
        "--gossip",
        "--api",
        "--data-dir",
        "--pki",
        "--log-format json",
    ] {
        assert!(exec.contains(flag), "ExecStart lacks {flag}: {exec}");
    }
    assert_eq!(
        get("Service", "KillMode"),
        "process",
        "instances outlive a restart"
    );
    assert_eq!(get("Service", "Restart"), "always");
    assert_eq!(get("Install", "WantedBy"), "multi-user.target");
    assert!(get("Unit", "After").contains("network-online.target"));

    // docs/operations.md shows the same unit.
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"),
    )
    .unwrap();
    let shown = docs
        .split("```ini\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/operations.md shows the unit in an ini block");
    assert_eq!(
        parse_unit(shown),
        entries,
        "docs/operations.md and dist/shoal.service differ"
    );
    assert!(
        docs.contains("dist/shoal.service"),
        "the docs point at the file"
    );

    // The flags the unit passes are the agent's.
    let help = shoal().args(["agent", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in exec.split_whitespace().filter(|w| w.starts_with("--")) {
        assert!(help.contains(flag), "`shoal agent` has no {flag}");
    }

    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!(
            "systemd-analyze not found: skipped `systemd-analyze verify` (INI checks passed)"
        );
        return;
    };
    assert!(version.status.success());
    // verify needs ExecStart's binary to exist: this build's binary stands in for the install path.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("shoal.service");
    std::fs::write(
        &copy,
        text.replace("/usr/local/bin/shoal", env!("CARGO_BIN_EXE_shoal")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
    // Unknown keys and bad values are only warnings there: none may be about this unit.
    assert!(
        !stderr.contains("shoal.service:"),
        "systemd-analyze verify: {stderr}"
    );
}

#[test]
fn logs_have_no_colour_off_a_terminal() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let out = shoal()
        .args(["pki", "init", "--dir"])
        .arg(&pki)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // stderr is a pipe here, as under systemd or `2> file`.
    let mut agent = shoal()
        .args([
            "agent",
            "--name",
            "n1",
            "--self-issue",
            "--runtime",
            "process",
        ])
        .args(["--gossip", "127.0.0.1:0", "--api", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--pki")
        .arg(&pki)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = agent.stderr.take().unwrap();
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        let seen = line.contains("capabilities");
        lines.push(line);
        if seen || lines.len() > 200 {
            break;
        }
    }
    let _ = agent.kill();
    let _ = agent.wait();
    let text = lines.join("\n");
    assert!(text.contains(" INFO "), "the agent logged: {text}");
    assert!(
        !text.contains('\u{1b}'),
        "ANSI escapes in piped logs: {text:?}"
    );
}
