//! An operator's command in a running process instance (`shoal exec`): the instance's
//! environment and working directory, its cgroup when it has one, its own process group (killed
//! whole when the command exits, the session ends or the instance exits), a child of the agent.
//!
//! With a terminal (`exec -t`) the command's three streams are the slave of a new pseudo
//! terminal, which must also become its controlling terminal (job control, Ctrl-C as SIGINT):
//! that takes `setsid()` and `TIOCSCTTY` in the child, which this crate cannot do without
//! `unsafe`, so the command is started through util-linux's `setsid --ctty` (not forking: the
//! child is not a group leader when it runs, so `setsid` makes it the leader of a new session
//! and group whose id is its pid, and the group kill works as for pipes).

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use nix::sys::signal::Signal;
use tokio::sync::{mpsc, oneshot};

use super::{signal_group, state, Inner};
use crate::node::runtime::exec::{pump, ExecChild, ExecRequest, OUTPUT_CHANNEL_CHUNKS};
use crate::node::runtime::logs::Stream;
use crate::node::runtime::RuntimeError;

/// util-linux's `setsid`, which gives a command its terminal as controlling terminal.
const SETSID: &str = "setsid";

impl Inner {
    /// Spawns `request`'s command beside the live instance `handle`.
    pub(super) fn exec(
        &self,
        handle: &str,
        request: &ExecRequest,
    ) -> Result<ExecChild, RuntimeError> {
        let failed = |reason: String| RuntimeError::ExecFailed { reason };
        let (state, mut instance_exited) = self.snapshot(handle)?;
        if state.exited() || !state::is_same_live_process(state.pid, state.proc_start_ticks) {
            return Err(failed(format!("instance {handle} is not running")));
        }
        let Some((program, args)) = request.command.split_first() else {
            return Err(failed("the command is empty".into()));
        };
        let path = state.env.get("PATH").map(String::as_str).unwrap_or("");
        if state.run_as.is_some()
            && request.tty.is_none()
            && !program_exists(program, path, &state.working_dir)
        {
            // Through setpriv a missing program is setpriv's exit 127: say it as without it.
            return Err(failed(format!(
                "{program:?} not found in instance {handle} (its PATH is {path:?})"
            )));
        }
        let mut terminal = None;
        let mut command = match request.tty {
            None => {
                let mut command = super::user::command(state.run_as.as_ref(), program);
                let stdin = if request.stdin {
                    Stdio::piped()
                } else {
                    Stdio::null()
                };
                command
                    .args(args)
                    .stdin(stdin)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .process_group(0);
                command
            }
            Some(size) => {
                let winsize = nix::pty::Winsize {
                    ws_row: size.rows,
                    ws_col: size.cols,
                    ws_xpixel: 0,
                    ws_ypixel: 0,
                };
                let pty = nix::pty::openpty(&winsize, None)
                    .map_err(|e| failed(format!("opening a terminal: {e}")))?;
                let slave = |what: &str| {
                    pty.slave
                        .try_clone()
                        .map(Stdio::from)
                        .map_err(|e| failed(format!("the terminal's {what}: {e}")))
                };
                let mut command = super::user::command(state.run_as.as_ref(), SETSID);
                command
                    .args(["--ctty", "--"])
                    .arg(program)
                    .args(args)
                    .stdin(slave("stdin")?)
                    .stdout(slave("stdout")?)
                    .stderr(slave("stderr")?);
                terminal = Some((pty.master, size));
                command
            }
        };
        command
            .env_clear()
            .envs(&state.env)
            .current_dir(&state.working_dir)
            .kill_on_drop(true);
        if request.tty.is_some() && !state.env.contains_key("TERM") {
            command.env("TERM", "xterm");
        }
        let spawned = command.spawn();
        // The terminal's slave copies go with the command object: the master then reads the
        // end of the output when the command and what it started are gone.
        drop(command);
        let mut child = spawned.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound if request.tty.is_some() => failed(format!(
                "a terminal needs {SETSID} (util-linux) on this node, or {program:?} is not in \
                 instance {handle}'s PATH"
            )),
            std::io::ErrorKind::NotFound => failed(format!(
                "{program:?} not found in instance {handle} (its PATH is {:?})",
                state.env.get("PATH").map(String::as_str).unwrap_or("")
            )),
            _ => failed(format!("spawning {program:?} in instance {handle}: {e}")),
        })?;
        let pid = child.id().map(|id| id as i32).unwrap_or_default();
        // Its limits are the instance's: the command counts against them (best effort, as for
        // the instance: the moment between spawn and the move is outside).
        if let Some(dir) = &state.cgroup {
            if let Err(e) = std::fs::write(dir.join("cgroup.procs"), pid.to_string()) {
                tracing::debug!(handle, error = %e, "exec command left outside the cgroup");
            }
        }
        let (output_tx, output) = mpsc::channel(OUTPUT_CHANNEL_CHUNKS);
        let mut stdin = child
            .stdin
            .take()
            .map(|s| Box::pin(s) as std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>);
        let mut resize = None;
        if let Some((master, size)) = terminal {
            let writer = master
                .try_clone()
                .map_err(|e| failed(format!("the terminal's input: {e}")))?;
            let sizer = master
                .try_clone()
                .map_err(|e| failed(format!("the terminal's size: {e}")))?;
            let (tx, mut rx) = tokio::sync::watch::channel(size);
            tokio::spawn(async move {
                // Until the session drops the sender. The kernel sends the command SIGWINCH.
                while rx.changed().await.is_ok() {
                    let size = *rx.borrow_and_update();
                    let winsize = rustix::termios::Winsize {
                        ws_row: size.rows,
                        ws_col: size.cols,
                        ws_xpixel: 0,
                        ws_ypixel: 0,
                    };
                    if let Err(e) = rustix::termios::tcsetwinsize(&sizer, winsize) {
                        tracing::debug!(error = %e, "exec terminal not resized");
                    }
                }
            });
            resize = Some(tx);
            let reader = tokio::fs::File::from_std(std::fs::File::from(master));
            // The terminal's output is one stream; its end (EIO once no process holds the
            // slave) ends the pump like a pipe's end.
            tokio::spawn(pump(reader, Stream::Stdout, output_tx.clone()));
            stdin = Some(Box::pin(tokio::fs::File::from_std(std::fs::File::from(
                writer,
            ))));
        }
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(pump(stdout, Stream::Stdout, output_tx.clone()));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(pump(stderr, Stream::Stderr, output_tx.clone()));
        }
        let (exit_tx, exit) = oneshot::channel();
        let (kill, kill_rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                _ = kill_rx => {
                    signal_group(pid, Signal::SIGKILL);
                    child.wait().await
                }
                // Like a command in a container that stops: it goes with its instance (its
                // cgroup could not be removed while it ran, and what it works on is gone).
                // (A sender gone means the instance was forgotten: it had exited.)
                _ = async { instance_exited.wait_for(|exited| *exited).await.map(|_| ()) } => {
                    signal_group(pid, Signal::SIGKILL);
                    let note = b"shoal: the instance exited; this command was killed with it\n";
                    let _ = output_tx.send((Stream::Stderr, note.to_vec())).await;
                    child.wait().await
                }
            };
            drop(output_tx);
            // What it left behind in its group goes with it, so its output ends.
            signal_group(pid, Signal::SIGKILL);
            let code = status
                .ok()
                .and_then(|s| s.code().or(s.signal().map(|n| 128 + n)));
            let _ = exit_tx.send(code);
        });
        Ok(ExecChild {
            stdin,
            output,
            exit,
            kill,
            resize,
        })
    }
}

/// Whether `program` names a file: as a path when it has a `/` (from `working_dir` when
/// relative), else in a directory of `path`.
pub(super) fn program_exists(program: &str, path: &str, working_dir: &std::path::Path) -> bool {
    if program.contains('/') {
        return working_dir.join(program).is_file();
    }
    std::env::split_paths(path).any(|dir| dir.join(program).is_file())
}
