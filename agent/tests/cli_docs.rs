//! docs/cli.md stays true to the command tree: every `shoal ...` command line it shows names
//! subcommands that exist and flags each of them takes, as the built binary's `--help` lists
//! them. No agent is started.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// What `shoal PATH --help` says: its subcommands and its long flags.
#[derive(Default)]
struct Help {
    subcommands: BTreeSet<String>,
    flags: BTreeSet<String>,
}

/// Runs `shoal PATH --help` once per path into `cache`.
fn help(path: &[String], cache: &mut BTreeMap<Vec<String>, Help>) {
    if !cache.contains_key(path) {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(path)
            .arg("--help")
            .output()
            .expect("run shoal --help");
        assert!(
            out.status.success(),
            "shoal {} --help failed: {}",
            path.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        cache.insert(path.to_vec(), parse_help(&text));
    }
}

/// Subcommands are the first word of each line in the `Commands:` section; flags every
/// `--long` anywhere in the text (options and their descriptions alike: a doc line naming a
/// flag the help only mentions still names a real one).
fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut in_commands = false;
    for line in text.lines() {
        if line.ends_with(':') && !line.starts_with(' ') {
            in_commands = line == "Commands:";
            continue;
        }
        if in_commands {
            if let Some(word) = line.split_whitespace().next() {
                if line.starts_with("  ") && !line.starts_with("        ") {
                    help.subcommands.insert(word.to_string());
                }
            }
        }
        for flag in long_flags(line) {
            help.flags.insert(flag);
        }
    }
    help
}

/// Every `--name` in a text (without `=VALUE`).
fn long_flags(text: &str) -> Vec<String> {
    let mut flags = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("--") {
        let after = &rest[at + 2..];
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(after.len());
        let name = &after[..end];
        // `--` alone (end of options, `exec NAME -- CMD`) names no flag.
        let starts_word = at == 0 || !rest[..at].ends_with(|c: char| c.is_ascii_alphanumeric());
        if starts_word && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            flags.push(name.to_string());
        }
        rest = &after[end..];
    }
    flags
}

/// Every command line docs/cli.md shows: in backticks, `shoal ...` up to the closing backtick,
/// split where one span chains several (`a && b`, `a; b`, `a | b`), and the `$ shoal ...` lines
/// of its sessions.
fn documented_commands(doc: &str) -> Vec<String> {
    // Sessions shown in code blocks: `$ shoal ...` lines.
    let mut commands: Vec<String> = doc
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("$ "))
        .filter(|l| l.starts_with("shoal "))
        .map(String::from)
        .collect();
    for (i, span) in doc.split('`').enumerate() {
        if i % 2 == 0 {
            continue; // outside backticks
        }
        let span = span.split_whitespace().collect::<Vec<_>>().join(" ");
        for part in span.split(" && ").flat_map(|p| p.split("; ")) {
            for piece in part.split(" | ") {
                if piece.starts_with("shoal ") {
                    commands.push(piece.to_string());
                }
            }
        }
    }
    commands
}

/// Where a documented command does not match the binary, or `None`.
fn check(command: &str, cache: &mut BTreeMap<Vec<String>, Help>) -> Option<String> {
    let words: Vec<&str> = command.split_whitespace().skip(1).collect();
    let mut path: Vec<String> = Vec::new();
    let mut rest = words.as_slice();
    loop {
        help(&path, cache);
        let here = &cache[&path];
        match rest.first() {
            Some(word) if here.subcommands.contains(*word) => {
                path.push(word.to_string());
                rest = &rest[1..];
            }
            // A word where a subcommand is due that is none: a made-up command.
            Some(word)
                if !here.subcommands.is_empty()
                    && word.starts_with(|c: char| c.is_ascii_lowercase()) =>
            {
                return Some(format!(
                    "`{command}`: `{word}` is not a subcommand of `shoal {}` (it has: {})",
                    path.join(" "),
                    here.subcommands
                        .iter()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            _ => break,
        }
    }
    let here = &cache[&path];
    let unknown: Vec<String> = long_flags(&rest.join(" "))
        .into_iter()
        .filter(|f| !here.flags.contains(f))
        .collect();
    (!unknown.is_empty()).then(|| {
        format!(
            "`{command}`: `shoal {}` has no {}",
            path.join(" "),
            unknown
                .iter()
                .map(|f| format!("--{f}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

#[test]
fn every_command_in_cli_md_exists_with_its_flags() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md"))
        .expect("docs/cli.md");
    let commands = documented_commands(&doc);
    assert!(commands.len() > 50, "too few commands found: {commands:?}");
    let mut cache = BTreeMap::new();
    let wrong: Vec<String> = commands
        .iter()
        .filter_map(|c| check(c, &mut cache))
        .collect();
    assert!(
        wrong.is_empty(),
        "docs/cli.md shows commands the binary does not have:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_catches_a_made_up_command_and_flag() {
    let mut cache = BTreeMap::new();
    assert_eq!(check("shoal get NAME --spec -o json", &mut cache), None);
    assert_eq!(check("shoal rollout undo web --to V", &mut cache), None);
    let flag = check("shoal get NAME --yaml", &mut cache).expect("a made-up flag");
    assert!(flag.contains("has no --yaml"), "{flag}");
    let sub = check("shoal rollout redo web", &mut cache).expect("a made-up subcommand");
    assert!(sub.contains("`redo` is not a subcommand"), "{sub}");
    assert_eq!(
        long_flags("[--follow|-f] --tail=3 exec NAME -- CMD a--b"),
        ["follow", "tail"]
    );
    assert_eq!(
        documented_commands("x `shoal a --b && shoal c` y `kubectl z` `shoal d\n  --e`\n$ shoal f"),
        ["shoal f", "shoal a --b", "shoal c", "shoal d --e"]
    );
}

#[test]
fn the_top_level_help_names_every_rollout_subcommand() {
    let mut cache = BTreeMap::new();
    let rollout = ["rollout".to_string()];
    help(&rollout, &mut cache);
    let subcommands = &cache[rollout.as_slice()].subcommands;
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .arg("--help")
        .output()
        .expect("run shoal --help");
    let top = String::from_utf8_lossy(&out.stdout);
    let line = top
        .lines()
        .find(|l| l.trim_start().starts_with("rollout "))
        .expect("rollout in shoal --help");
    for sub in subcommands.iter().filter(|s| *s != "help") {
        assert!(line.contains(sub.as_str()), "{line:?} does not name {sub}");
    }
}

#[test]
fn the_hints_to_issue_a_certificate_name_the_role() {
    let dir = tempfile::tempdir().unwrap();
    let shoal = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(args)
            .output()
            .expect("run shoal");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let pki = dir.path().to_str().unwrap();
    let init = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["pki", "init", "--dir", pki])
        .output()
        .unwrap();
    assert!(init.status.success());
    // A CA key alone issues nothing without --self-issue (docs/cli.md says so).
    let said = shoal(&["get", "--pki", pki, "--timeout", "1s"]);
    assert!(said.contains("--role client"), "{said}");
    let said = shoal(&["pki", "renew", "--dir", pki, "--name", "n9"]);
    assert!(said.contains("--role node|client"), "{said}");
}
