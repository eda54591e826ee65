//! Probe execution shared by the runtimes: a TCP connect, a minimal HTTP/1.1 GET, and a host
//! command with a deadline. Each returns a [`ProbeOutcome`] and never an error: a probe that
//! cannot run is a failed probe, with the reason.
//!
//! The HTTP client is deliberately tiny: one GET, `Connection: close`, and only the status line is
//! read (at most [`HTTP_STATUS_LINE_BYTES_MAX`] bytes), so a hostile or broken server cannot make
//! the agent buffer a body.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::core::spec::format_duration_ms;
use crate::node::runtime::ProbeOutcome;

/// The longest HTTP status line a probe reads before giving up.
pub const HTTP_STATUS_LINE_BYTES_MAX: usize = 4096;

/// How much of a failed command's stderr is quoted in the reason.
pub const EXEC_STDERR_QUOTED_BYTES_MAX: usize = 512;

/// Healthy when a TCP connection to `addr` is accepted within `timeout`.
pub async fn tcp(addr: SocketAddr, timeout: Duration) -> ProbeOutcome {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(_)) => ProbeOutcome::Healthy,
        Ok(Err(e)) => ProbeOutcome::fail(format!("tcp connect to {addr}: {e}")),
        Err(_) => ProbeOutcome::fail(format!(
            "tcp connect to {addr}: no answer within {}",
            format_duration_ms(timeout.as_millis() as u64)
        )),
    }
}

/// Healthy when `GET path` on `addr` answers with a status in `200..=399` within `timeout`.
pub async fn http(addr: SocketAddr, path: &str, timeout: Duration) -> ProbeOutcome {
    match tokio::time::timeout(timeout, http_status(addr, path)).await {
        Ok(Ok(status)) if (200..=399).contains(&status) => ProbeOutcome::Healthy,
        Ok(Ok(status)) => ProbeOutcome::fail(format!("http GET {addr}{path}: status {status}")),
        Ok(Err(e)) => ProbeOutcome::fail(format!("http GET {addr}{path}: {e}")),
        Err(_) => ProbeOutcome::fail(format!(
            "http GET {addr}{path}: no answer within {}",
            format_duration_ms(timeout.as_millis() as u64)
        )),
    }
}

/// Sends the request and returns the status code from the first line of the answer.
async fn http_status(addr: SocketAddr, path: &str) -> Result<u16, String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: shoal-probe\r\nAccept: */*\r\n\
         Connection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut line = Vec::with_capacity(128);
    let mut chunk = [0u8; 512];
    while !line.contains(&b'\n') {
        if line.len() >= HTTP_STATUS_LINE_BYTES_MAX {
            return Err(format!(
                "no status line in the first {HTTP_STATUS_LINE_BYTES_MAX} bytes"
            ));
        }
        let want = chunk.len().min(HTTP_STATUS_LINE_BYTES_MAX - line.len());
        let n = stream
            .read(&mut chunk[..want])
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before a status line".into());
        }
        line.extend_from_slice(&chunk[..n]);
    }
    parse_status_line(&line)
}

/// Parses `HTTP/1.x NNN ...` at the start of `bytes`.
pub(crate) fn parse_status_line(bytes: &[u8]) -> Result<u16, String> {
    let end = bytes
        .iter()
        .position(|b| *b == b'\n')
        .unwrap_or(bytes.len());
    let line = String::from_utf8_lossy(&bytes[..end]);
    let mut parts = line.split_ascii_whitespace();
    let version = parts.next().unwrap_or_default();
    let status = parts.next().and_then(|s| s.parse::<u16>().ok());
    match status {
        Some(code) if version.starts_with("HTTP/1.") && (100..=999).contains(&code) => Ok(code),
        _ => Err(format!(
            "not an HTTP/1.x status line: {:?}",
            line.trim_end()
        )),
    }
}

/// Runs `command` with exactly `env`, in `dir`, as the leader of its own process group; healthy
/// on exit status 0. After `timeout` the whole group is killed. `prefix` (a program and its
/// arguments that exec the command, such as `setpriv` changing the user) goes in front of it;
/// messages name the command's own program.
pub async fn exec_host(
    prefix: &[String],
    command: &[String],
    env: &BTreeMap<String, String>,
    dir: &Path,
    timeout: Duration,
) -> ProbeOutcome {
    let Some(program) = command.first() else {
        return ProbeOutcome::fail("empty command");
    };
    let mut run = prefix.iter().chain(command);
    let spawned = tokio::process::Command::new(run.next().expect("the command is not empty"))
        .args(run)
        .env_clear()
        .envs(env)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return ProbeOutcome::fail(format!("command {program:?} not found"))
        }
        Err(e) => return ProbeOutcome::fail(format!("running {program:?}: {e}")),
    };
    let pid = child.id();
    let mut stderr = child.stderr.take();
    let run = async {
        let quoted = read_quoted(stderr.as_mut()).await;
        (child.wait().await, quoted)
    };
    let outcome = tokio::time::timeout(timeout, run).await;
    match outcome {
        Ok((Ok(status), _)) if status.success() => ProbeOutcome::Healthy,
        Ok((Ok(status), quoted)) => {
            let how = match (status.code(), status.signal()) {
                (Some(code), _) => format!("exit status {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => "unknown exit".to_string(),
            };
            let tail = if quoted.is_empty() {
                String::new()
            } else {
                format!(": {quoted}")
            };
            ProbeOutcome::fail(format!("{program:?} failed with {how}{tail}"))
        }
        Ok((Err(e), _)) => ProbeOutcome::fail(format!("waiting for {program:?}: {e}")),
        Err(_) => {
            if let Some(pid) = pid {
                let group = nix::unistd::Pid::from_raw(pid as i32);
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            }
            let timeout = format_duration_ms(timeout.as_millis() as u64);
            ProbeOutcome::fail(format!("{program:?} did not finish within {timeout}"))
        }
    }
}

/// Reads a child's stderr to the end, keeping the first bytes (trimmed, lossy UTF-8).
async fn read_quoted(stderr: Option<&mut tokio::process::ChildStderr>) -> String {
    let Some(stderr) = stderr else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut chunk = [0u8; 1024];
    while let Ok(n) = stderr.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        let room = EXEC_STDERR_QUOTED_BYTES_MAX.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..n.min(room)]);
    }
    String::from_utf8_lossy(&kept).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::parse_status_line;

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line(b"HTTP/1.1 204 No Content\r\n"), Ok(204));
        assert_eq!(parse_status_line(b"HTTP/1.0 302 Found\r\n"), Ok(302));
        assert!(parse_status_line(b"SSH-2.0-OpenSSH\r\n").is_err());
        assert!(parse_status_line(b"HTTP/1.1 abc\r\n").is_err());
        assert!(parse_status_line(b"").is_err());
    }
}
