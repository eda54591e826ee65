//! Running shipped scenarios from the simulator's tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// The built simulator.
pub fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shoal-sim"))
}

/// The path of `scenarios/NAME.toml`.
pub fn scenario(name: &str) -> String {
    format!("{}/../scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"))
}

/// Runs scenario `name` with `seed` (its files written to `out`, if given); returns the JSON
/// report.
pub fn run(name: &str, seed: u64, out: Option<&Path>) -> serde_json::Value {
    let mut cmd = sim();
    cmd.args([
        "run",
        &scenario(name),
        "--seed",
        &seed.to_string(),
        "--json",
    ]);
    if let Some(dir) = out {
        cmd.arg("--out").arg(dir);
    }
    let output = cmd.output().expect("shoal-sim runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| {
        panic!(
            "{name} seed {seed}: no JSON report ({e}); stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}
