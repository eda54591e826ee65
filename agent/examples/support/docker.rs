//! The Docker engine's containers a bench leaves behind.

use std::process::{Command, Stdio};

/// `docker rm -f` of every container matching a `docker ps` filter.
pub fn remove_containers(filter: &str) {
    let Ok(out) = Command::new("docker")
        .args(["ps", "-aq", "--filter", filter])
        .output()
    else {
        return;
    };
    let ids = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = ids.split_whitespace().collect();
    if out.status.success() && !ids.is_empty() {
        let _ = Command::new("docker")
            .args(["rm", "-f"])
            .args(&ids)
            .stdout(Stdio::null())
            .status();
    }
}
