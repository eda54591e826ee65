//! `shoal validate` as a user runs it: the built binary, real files, exit codes and output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn shoal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .output()
        .expect("run shoal")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Writes `text` to a fresh file under cargo's per-target temporary directory.
fn temp_file(name: &str, text: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_validate");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn every_example_is_valid() {
    let mut examples: Vec<String> = std::fs::read_dir(repo_root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    examples.sort();
    assert!(examples.len() >= 3, "examples/ holds {examples:?}");
    let mut args = vec!["validate", "-f"];
    args.extend(examples.iter().map(String::as_str));
    let out = shoal(&args);
    assert!(out.status.success(), "stderr:\n{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), examples.len());
    assert!(stdout(&out).contains("sleeper.toml: valid (sleeper, 3 replicas)"));
    assert_eq!(stderr(&out), "");
}

#[test]
fn invalid_file_prints_every_problem_and_exits_1() {
    let path = temp_file(
        "web.toml",
        b"name = \"web\"\nreplica = 2\n[process]\ncommand = [\"web\"]\n\n[resources]\ncpu = \"fast\"\nmemory = \"64Mi\"\n",
    );
    let p = path.display().to_string();
    let out = shoal(&["validate", "-f", &p]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    let expected = format!(
        "{p}:2:1: unknown field `replica`, did you mean `replicas`?\n\
         {p}:7:7: resources.cpu: \"fast\" is not a CPU quantity (examples: 250m, 0.5, 2)\n\
         2 problems in 1 of 1 file\n"
    );
    assert_eq!(stderr(&out), expected);
}

#[test]
fn mixed_files_report_each_and_exit_1() {
    let good = repo_root()
        .join("examples/sleeper.toml")
        .display()
        .to_string();
    let bad = temp_file("bad.json", b"{\"name\": \"x\",}")
        .display()
        .to_string();
    let missing = "/nonexistent/spec.toml";
    let out = shoal(&["validate", "-f", &good, "-f", &bad, missing]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("sleeper.toml: valid"));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{bad}:1:14: trailing comma")),
        "{err}"
    );
    assert!(err.contains(&format!("{missing}: cannot read: ")), "{err}");
    assert!(err.ends_with("2 problems in 2 of 3 files\n"), "{err}");
}

#[test]
fn quiet_prints_nothing_for_valid_files() {
    let good = repo_root().join("examples/web.toml").display().to_string();
    let out = shoal(&["validate", "--quiet", "--file", &good]);
    assert!(out.status.success());
    assert_eq!(stdout(&out), "");
}

#[test]
fn reads_standard_input() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["validate", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let spec = br#"{"name": "piped", "process": {"command": ["x"]}, "resources": {"cpu": "1", "memory": "1Gi"}}"#;
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), spec).unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "<stdin>: valid (piped, 1 replica)\n");
}

#[test]
fn oversized_file_is_refused_with_a_clear_message() {
    let mut text = b"name = \"big\"\n".to_vec();
    text.resize(2 << 20, b'#');
    let path = temp_file("big.toml", &text).display().to_string();
    let out = shoal(&["validate", "-f", &path]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("a spec may be at most 1048576 bytes (1 MiB)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["validate"][..],
        &["validate", "--bogus", "x"],
        &["no-such-command"],
        &[],
    ] {
        let out = shoal(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn help_lists_validate() {
    let out = shoal(&["--help"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("validate"));
    let out = shoal(&["validate", "--help"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("--file <FILE>"));
}

#[test]
fn completions_are_printed_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "_shoal()"),
        ("zsh", "#compdef shoal"),
        ("fish", "complete -c shoal"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(marker), "{shell} completions lack {marker:?}");
        assert!(
            text.contains("apply"),
            "{shell} completions lack the apply command"
        );
    }
}

#[test]
fn every_command_has_help_with_examples() {
    let commands = [
        "validate",
        "agent",
        "pki",
        "apply",
        "get",
        "delete",
        "status",
        "nodes",
        "issues",
        "approve",
        "events",
        "drain",
        "undrain",
        "demo",
        "completions",
    ];
    for command in commands {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args([command, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{command} --help failed");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Example"),
            "`shoal {command} --help` shows no example"
        );
    }
}

#[test]
fn a_reader_that_closes_the_pipe_ends_the_command_quietly() {
    // `shoal completions bash | head -c 0`, deterministically: the reading end is closed before
    // the command starts, so its first write meets the closed pipe.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["completions", "bash"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}
