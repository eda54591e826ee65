//! Data-driven spec tests. Every input in `tests/fixtures/spec/` (`NAME.toml`, `NAME.json`, or any
//! other extension to exercise format sniffing) has a `NAME.expected` beside it holding either the
//! exact messages, one per line, or `valid` followed by the canonical rendering of the spec (which
//! shows every default filled in).
//!
//! To accept new output after a deliberate change, run
//! `UPDATE_EXPECT=1 cargo test -p shoal-core --test spec_fixtures` and review the diff.
#![allow(
    clippy::disallowed_methods,
    reason = "reads (with UPDATE_EXPECT, rewrites) its fixtures; the no-I/O rule is for the library"
)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use shoal_core::spec::WorkloadSpec;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spec")
}

/// What a fixture is expected to produce, with the round-trip checks valid specs must pass.
fn outcome(bytes: &[u8], file_name: &str) -> String {
    match WorkloadSpec::from_bytes(bytes, file_name) {
        Ok(spec) => {
            assert_eq!(
                spec.validate(),
                Ok(()),
                "{file_name}: a decoded spec must re-validate"
            );
            let toml = spec.to_toml_string();
            let again = WorkloadSpec::from_toml_str(&toml, "rendered.toml");
            assert_eq!(
                again.as_ref(),
                Ok(&spec),
                "{file_name}: TOML rendering must round-trip:\n{toml}"
            );
            let json = spec.to_json_string();
            let again = WorkloadSpec::from_json_str(&json, "rendered.json");
            assert_eq!(
                again.as_ref(),
                Ok(&spec),
                "{file_name}: JSON rendering must round-trip:\n{json}"
            );
            format!("valid\n{toml}")
        }
        Err(errors) => format!("{errors}\n"),
    }
}

#[test]
fn every_fixture_matches_its_expectation() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some_and(|v| v != "0");
    let mut entries: Vec<PathBuf> = fs::read_dir(fixtures_dir())
        .expect("fixtures directory")
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    let inputs: Vec<&PathBuf> = entries
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e != "expected"))
        .collect();
    let mut stems = BTreeSet::new();
    let mut failures = Vec::new();
    for input in &inputs {
        let stem = input.file_stem().unwrap().to_string_lossy().to_string();
        assert!(
            stems.insert(stem.clone()),
            "two fixtures share the stem {stem:?}"
        );
        let file_name = input.file_name().unwrap().to_string_lossy().to_string();
        let actual = outcome(&fs::read(input).unwrap(), &file_name);
        let expected_path = input.with_extension("expected");
        if update {
            fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        match fs::read_to_string(&expected_path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "{file_name}: output differs\n--- expected\n{expected}--- actual\n{actual}"
            )),
            Err(_) => failures.push(format!(
                "{file_name}: no {stem}.expected\n--- actual\n{actual}"
            )),
        }
    }
    for orphan in entries
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "expected"))
    {
        let stem = orphan.file_stem().unwrap().to_string_lossy().to_string();
        if !stems.contains(&stem) {
            failures.push(format!(
                "{}: expectation without an input",
                orphan.display()
            ));
        }
    }
    assert!(inputs.len() >= 30, "only {} fixtures found", inputs.len());
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed (UPDATE_EXPECT=1 accepts the new output):\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The example from the issue, character for character.
#[test]
fn the_issue_example_message() {
    let text = "name = \"web\"\nreplicas = 2\n[process]\ncommand = [\"web\"]\n\n[resources]\ncpu = \"fast\"\nmemory = \"64Mi\"\n";
    let errors = WorkloadSpec::from_toml_str(text, "web.toml").unwrap_err();
    assert_eq!(
        errors.to_string(),
        "web.toml:7:7: resources.cpu: \"fast\" is not a CPU quantity (examples: 250m, 0.5, 2)"
    );
}
