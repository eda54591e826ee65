//! Stamps the build with its commit (`SHOAL_COMMIT`): `shoal version`, the gossiped build facts
//! and `shoal_build_info` name it. A checkout without git (a source tarball) says `unknown`
//! unless `SHOAL_COMMIT` is set in the environment of the build.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SHOAL_COMMIT");
    let commit = std::env::var("SHOAL_COMMIT").ok().or_else(git_commit);
    let commit = commit.unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SHOAL_COMMIT={commit}");
    if let Some(git_dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            let path = format!("{git_dir}/{head_ref}");
            // A packed ref has no file of its own; HEAD moving still reruns this.
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
}

fn git_commit() -> Option<String> {
    git(&["rev-parse", "--short=7", "HEAD"])
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}
