//! Learning that an instance's process exited, as soon as it does.
//!
//! A child the agent spawned is reaped with `wait`, which also gives its exit code. An adopted
//! process (found in a state file after an agent restart) is not our child, so it cannot be
//! waited for: it is watched through a pidfd, which the kernel makes readable the moment the
//! process exits (Linux 5.3 and later). Only where no pidfd can be had is `/proc` polled, every
//! `adopted_poll_interval`; its exit code is unknown either way.

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::watch;

use super::state::{self, InstanceState};
use super::Inner;

/// Reaps our own child and records its exit code (or 128 + signal).
pub(super) async fn watch_child(
    inner: Arc<Inner>,
    handle: String,
    mut child: tokio::process::Child,
    tx: watch::Sender<bool>,
) {
    let status = child.wait().await;
    let code = status
        .ok()
        .and_then(|s| s.code().or(s.signal().map(|n| 128 + n)));
    inner.record_exit(&handle, code, &tx);
}

/// Waits for an adopted process to exit (or for the runtime to be dropped, when polling), then
/// records the exit.
pub(super) async fn watch_adopted(
    inner: Arc<Inner>,
    state: InstanceState,
    tx: watch::Sender<bool>,
) {
    if let Some(exit) = exit_fd(&state) {
        // Readable once the process exited; an error here leaves the polling below to decide.
        let _ = exit.readable().await;
    }
    let interval = inner.config.adopted_poll_interval;
    while state::is_same_live_process(state.pid, state.proc_start_ticks) {
        tokio::time::sleep(interval).await;
        if inner.detached.load(Ordering::SeqCst) {
            return;
        }
    }
    inner.record_exit(&state.handle, None, &tx);
}

/// A pidfd of the instance's process, registered with tokio; `None` where the kernel or the
/// sandbox refuses one, or when the pid no longer names the instance's process.
fn exit_fd(state: &InstanceState) -> Option<AsyncFd<OwnedFd>> {
    let pid = rustix::process::Pid::from_raw(state.pid)?;
    let fd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(e) => {
            tracing::debug!(pid = state.pid, error = %e, "no pidfd: polling /proc for the exit");
            return None;
        }
    };
    // The pid may have been reused between the state file's check and the open: the fd is
    // trusted only if the process it names still has the recorded start time.
    if !state::is_same_live_process(state.pid, state.proc_start_ticks) {
        return None;
    }
    register(fd)
}

/// Registers the pidfd with tokio's reactor. tokio 1.54 deprecated its safe constructors (its
/// #8587: any `AsRawFd` could hand it an fd that changes or closes under it) in favour of an
/// `unsafe` one, which this crate forbids. An `OwnedFd` moved in and never handed out again is
/// exactly the sound case, so the deprecated call stays until tokio has a safe one for owned fds.
#[allow(deprecated)]
fn register(fd: OwnedFd) -> Option<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(fd, Interest::READABLE).ok()
}
