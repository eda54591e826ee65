//! Replays every committed fuzz corpus (fuzz/corpus/TARGET/*) through the same harness the
//! cargo-fuzz targets run (fuzz/src/harness.rs): the CI smoke of docs/fuzzing.md, on stable,
//! without cargo-fuzz. A decoder that panics on a corpus input, or a round trip that no longer
//! holds, fails here.

#[path = "../../fuzz/src/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::path::{Path, PathBuf};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_input_of_every_target_decodes_without_panic() {
    let mut total = 0;
    for (target, harness) in harness::TARGETS {
        let files = inputs(&corpus_dir(target));
        assert!(
            !files.is_empty(),
            "no corpus committed for fuzz target {target}"
        );
        for file in &files {
            let data = std::fs::read(file).expect("corpus file");
            let outcome = std::panic::catch_unwind(|| harness(&data));
            assert!(
                outcome.is_ok(),
                "fuzz target {target} panics on {}",
                file.display()
            );
        }
        total += files.len();
    }
    assert!(total > 0);
}

#[test]
fn every_fuzz_target_has_a_binary_and_a_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for (target, _) in harness::TARGETS {
        assert!(
            root.join("fuzz_targets")
                .join(format!("{target}.rs"))
                .is_file(),
            "fuzz/fuzz_targets/{target}.rs missing"
        );
        assert!(
            manifest.contains(&format!("name = \"{target}\"")),
            "fuzz/Cargo.toml has no [[bin]] {target}"
        );
        assert!(corpus_dir(target).is_dir(), "fuzz/corpus/{target} missing");
    }
}

/// The crash inputs found by fuzzing, kept as regressions (fuzz/regressions/TARGET/*).
#[test]
fn fuzz_regressions_stay_fixed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions");
    for (target, harness) in harness::TARGETS {
        let dir = root.join(target);
        if !dir.is_dir() {
            continue;
        }
        for file in inputs(&dir) {
            let data = std::fs::read(&file).expect("regression file");
            harness(&data);
        }
    }
}
