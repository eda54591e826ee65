//! What /proc and the process tools say about the processes a bench started.

use std::fmt::Display;
use std::process::Command;

use anyhow::Context;

/// Pids that `pgrep ARGS` lists.
pub fn pgrep(args: &[&str]) -> Vec<i32> {
    let Ok(out) = Command::new("pgrep").args(args).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Clock ticks per second (`getconf CLK_TCK`), the unit of /proc/PID/stat's times.
pub fn clock_ticks_per_sec() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Field `n` (numbered from 1 as in proc(5), at least 3) of /proc/PID/stat.
pub fn stat_field(pid: impl Display, n: usize) -> anyhow::Result<u64> {
    let [field] = stat_fields(pid, [n])?;
    Ok(field)
}

/// Fields `ns` (numbered from 1 as in proc(5), each at least 3) of one reading of /proc/PID/stat.
pub fn stat_fields<const N: usize>(pid: impl Display, ns: [usize; N]) -> anyhow::Result<[u64; N]> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} is gone"))?;
    // The command name may hold spaces: the fields start after its closing parenthesis, with
    // the state (field 3).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("malformed /proc/PID/stat")?
        .1
        .split_whitespace()
        .collect();
    let mut values = [0; N];
    for (value, n) in values.iter_mut().zip(ns) {
        assert!(
            n >= 3,
            "field {n} of /proc/PID/stat: only fields 3 on are read"
        );
        *value = fields.get(n - 3).context("short /proc/PID/stat")?.parse()?;
    }
    Ok(values)
}

/// A `NAME: VALUE kB` line of /proc/PID/status, in KiB (`name` with its colon: `"VmRSS:"`).
pub fn status_kib(pid: impl Display, name: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("process {pid} is gone"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no {name} in /proc/PID/status"))
}

/// Time spent on a CPU, in nanoseconds, from a schedstat file (its first field):
/// `/proc/PID/schedstat`, or `/proc/thread-self/schedstat` for the calling thread.
pub fn schedstat_ns(path: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{path} is gone"))?;
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("malformed {path}"))
}
