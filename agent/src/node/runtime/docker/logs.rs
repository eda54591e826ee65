//! `shoal logs` of a container: the engine's own log (whatever its log driver keeps), read with
//! timestamps. Docker bounds and rotates it (the `json-file` driver's `max-size`/`max-file`
//! options, set in the engine's `daemon.json`), not Shoal.
//!
//! A follow cursor is the stamp of the last line read ([`LogCursor::Time`]): the next read asks
//! the engine for lines since that second and drops those not after it. Two lines stamped in the
//! same nanosecond on either side of a read would lose the second; the engine stamps in ns.

use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptionsBuilder;
use futures_util::StreamExt;

use super::DockerRuntime;
use crate::core::instance::{Phase, ReplicaId};
use crate::node::runtime::logs::{
    line::parse_rfc3339_ns, LogCursor, LogLine, LogPage, LogQuery, LogStart, Stream, PAGE_LINES_MAX,
};
use crate::node::runtime::{Runtime, RuntimeError};

/// Reads the logs of the replica's newest container here (or of the one before it).
pub(super) async fn read(
    runtime: &DockerRuntime,
    replica: &ReplicaId,
    previous: bool,
    query: &LogQuery,
) -> Result<LogPage, RuntimeError> {
    let mut instances: Vec<_> = runtime
        .list()
        .await?
        .into_iter()
        .filter(|i| &i.replica == replica)
        .collect();
    instances.sort_by_key(|i| (i.started_at_ms, i.handle.clone()));
    let newest = instances.pop();
    let picked = if previous { instances.pop() } else { newest };
    let Some(instance) = picked else {
        let reason = if previous {
            format!(
                "no previous container of {replica} is kept on node {}: the agent removes an \
                 exited container once its replacement runs, and its engine logs with it",
                runtime.config.node
            )
        } else {
            format!("no container of {replica} on node {}", runtime.config.node)
        };
        return Err(RuntimeError::NoLogs { reason });
    };
    let mut options = LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .timestamps(true);
    let start = query.start_for(&instance.handle);
    let after_ns = match start {
        LogStart::After(LogCursor::Time { after_ns }) => Some(after_ns),
        LogStart::After(LogCursor::File { .. }) => {
            return Err(RuntimeError::NoLogs {
                reason: "a file cursor is the process runtime's; this replica is a container \
                         (it moved between runtimes): read again without one"
                    .into(),
            })
        }
        _ => None,
    };
    let since_ns = after_ns
        .into_iter()
        .chain(query.since_ms.map(|ms| ms.saturating_mul(1_000_000)))
        .max();
    if let Some(ns) = since_ns {
        options = options.since((ns / 1_000_000_000).min(i32::MAX as u64) as i32);
    }
    if let LogStart::Tail(n) = start {
        options = options.tail(&n.min(PAGE_LINES_MAX as u32).to_string());
    }
    let docker = runtime.client.get().await?;
    let mut stream = docker.logs(&instance.handle, Some(options.build()));
    let mut lines: Vec<LogLine> = Vec::new();
    let mut text_bytes = 0;
    let mut more = false;
    while let Some(item) = stream.next().await {
        let (stream_kind, message) = match item {
            Ok(LogOutput::StdOut { message }) => (Stream::Stdout, message),
            Ok(LogOutput::StdErr { message }) => (Stream::Stderr, message),
            Ok(_) => continue,
            Err(e) => return Err(super::body::engine_error("read container logs", e)),
        };
        let Some(line) = engine_line(&message, stream_kind) else {
            continue;
        };
        if after_ns.is_some_and(|after| line.at_ns <= after) || !query.admits(line.at_ns) {
            continue;
        }
        if (text_bytes + line.text.len() > query.budget() || lines.len() >= PAGE_LINES_MAX)
            && !lines.is_empty()
        {
            more = true;
            break;
        }
        text_bytes += line.text.len();
        lines.push(line);
    }
    if matches!(start, LogStart::Tail(_)) {
        // The engine's tail counts lines before the byte budget: keep the newest.
        let mut kept = 0;
        let mut bytes = 0;
        for line in lines.iter().rev() {
            if bytes + line.text.len() > query.budget() && kept > 0 {
                break;
            }
            bytes += line.text.len();
            kept += 1;
        }
        lines.drain(..lines.len() - kept);
    }
    let last = lines.last().map(|l| l.at_ns);
    let cursor = LogCursor::Time {
        after_ns: last.or(after_ns).unwrap_or(0),
    };
    Ok(LogPage {
        instance: instance.handle,
        running: instance.phase == Phase::Running,
        lines,
        cursor,
        more,
        skipped: false,
    })
}

/// One engine log line: `<RFC 3339 time> <text>`, with its newline.
fn engine_line(message: &[u8], stream: Stream) -> Option<LogLine> {
    let text = String::from_utf8_lossy(message);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let (stamp, text) = text.split_once(' ').unwrap_or((text, ""));
    Some(LogLine {
        at_ns: parse_rfc3339_ns(stamp)?,
        stream,
        partial: false,
        text: text.to_string(),
    })
}
