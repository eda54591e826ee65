//! Commands run inside a container (exec probes, reload commands) and the host address of a
//! container port (tcp and http probes).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::ContainerInspectResponse;
use bollard::Docker;
use futures_util::StreamExt;

use super::body::{error_chain, port_key};
use crate::core::spec::{format_duration_ms, Protocol};
use crate::node::runtime::probe::EXEC_STDERR_QUOTED_BYTES_MAX;
use crate::node::runtime::ProbeOutcome;

/// Runs `command` in container `id` with the extra `env` (`NAME=value`); healthy on exit 0.
/// On timeout the outcome is a failure; the engine offers no way to kill an exec, so a hung
/// command is left to the container.
pub(crate) async fn exec_in_container(
    docker: &Docker,
    id: &str,
    command: &[String],
    env: Vec<String>,
    timeout: Duration,
) -> ProbeOutcome {
    let program = command.first().cloned().unwrap_or_default();
    let run = async {
        let options = CreateExecOptions {
            cmd: Some(command.to_vec()),
            env: Some(env),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..CreateExecOptions::default()
        };
        let created = docker.create_exec(id, options).await?;
        let mut quoted = Vec::new();
        if let StartExecResults::Attached { mut output, .. } =
            docker.start_exec(&created.id, None).await?
        {
            while let Some(chunk) = output.next().await {
                let bytes = chunk?.into_bytes();
                let room = EXEC_STDERR_QUOTED_BYTES_MAX.saturating_sub(quoted.len());
                quoted.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
        }
        let inspected = docker.inspect_exec(&created.id).await?;
        Ok::<_, bollard::errors::Error>((inspected.exit_code, quoted))
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok((Some(0), _))) => ProbeOutcome::Healthy,
        Ok(Ok((code, quoted))) => {
            let how = code.map_or("an unknown status".to_string(), |c| {
                format!("exit status {c}")
            });
            let output = String::from_utf8_lossy(&quoted).trim().to_string();
            let tail = if output.is_empty() {
                String::new()
            } else {
                format!(": {output}")
            };
            ProbeOutcome::fail(format!("{program:?} failed with {how}{tail}"))
        }
        Ok(Err(e)) => ProbeOutcome::fail(format!("exec {program:?}: {}", error_chain(&e))),
        Err(_) => {
            let timeout = format_duration_ms(timeout.as_millis() as u64);
            ProbeOutcome::fail(format!("{program:?} did not finish within {timeout}"))
        }
    }
}

/// Where the host reaches container port `port`: its published binding, on loopback when the
/// engine bound every interface. Unpublished ports are not probed through the container's bridge
/// address on purpose: publish the port (`container.ports`) to probe it.
pub(crate) fn published_addr(
    inspected: &ContainerInspectResponse,
    port: u16,
    protocol: Protocol,
) -> Result<SocketAddr, String> {
    let key = port_key(port, protocol);
    let bindings = inspected
        .network_settings
        .as_ref()
        .and_then(|n| n.ports.as_ref())
        .and_then(|ports| ports.get(&key).cloned().flatten())
        .unwrap_or_default();
    let mut candidates: Vec<SocketAddr> = bindings
        .iter()
        .filter_map(|b| {
            let host_port: u16 = b.host_port.as_deref()?.parse().ok()?;
            let ip = match b.host_ip.as_deref().unwrap_or("") {
                "" | "0.0.0.0" | "::" => IpAddr::V4(Ipv4Addr::LOCALHOST),
                other => other.parse().ok()?,
            };
            Some(SocketAddr::new(ip, host_port))
        })
        .collect();
    candidates.sort_by_key(|a| !a.is_ipv4()); // IPv4 first
    candidates.into_iter().next().ok_or_else(|| {
        format!("container port {key} is not published on the host: add it to container.ports")
    })
}

/// Where the host reaches the named port `name`: the host port recorded in the container's
/// labels (allocated by the agent or fixed by the spec), on the IP it is published on
/// (`--publish-addr`), or on loopback when it is published on every interface.
pub(crate) fn named_addr(
    inspected: &ContainerInspectResponse,
    name: &str,
) -> Result<SocketAddr, String> {
    let labels = inspected.config.as_ref().and_then(|c| c.labels.as_ref());
    let port = labels
        .map(super::body::ports_of)
        .and_then(|ports| ports.get(name).copied());
    match port {
        Some(port) => Ok(SocketAddr::new(bound_ip(inspected, port), port)),
        None => Err(format!(
            "the container has no host port named {name:?} (started before the spec named it?)"
        )),
    }
}

/// The host IP `host_port` is published on, as the container was created: loopback for every
/// interface (no IP, `0.0.0.0`, `::`).
fn bound_ip(inspected: &ContainerInspectResponse, host_port: u16) -> IpAddr {
    let port = host_port.to_string();
    inspected
        .host_config
        .as_ref()
        .and_then(|h| h.port_bindings.as_ref())
        .into_iter()
        .flat_map(|bindings| bindings.values().flatten().flatten())
        .filter(|b| b.host_port.as_deref() == Some(port.as_str()))
        .filter_map(|b| b.host_ip.as_deref()?.parse::<IpAddr>().ok())
        .find(|ip| !ip.is_unspecified())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Starts an operator's command in container `id` (`shoal exec`), attached to its output (and
/// stdin when asked), on a terminal of the asked size when asked (its output then comes as
/// stdout). The engine cannot kill an exec: a kill sends SIGKILL to the
/// exec's host pid as the engine reports it, which works where the agent may signal the
/// engine's processes (the usual root agent beside its engine).
pub(crate) async fn exec_session(
    docker: &Docker,
    id: &str,
    request: &crate::node::runtime::exec::ExecRequest,
) -> Result<crate::node::runtime::exec::ExecChild, crate::node::runtime::RuntimeError> {
    use crate::node::runtime::exec::{ExecChild, OUTPUT_CHANNEL_CHUNKS, OUTPUT_CHUNK_BYTES_MAX};
    use crate::node::runtime::logs::Stream;
    use bollard::container::LogOutput;
    use tokio::sync::{mpsc, oneshot};

    let failed =
        |what: &str, e: bollard::errors::Error| crate::node::runtime::RuntimeError::ExecFailed {
            reason: format!("{what} in container {id}: {}", error_chain(&e)),
        };
    let options = CreateExecOptions {
        cmd: Some(request.command.clone()),
        attach_stdin: Some(request.stdin || request.tty.is_some()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(request.tty.is_some()),
        ..CreateExecOptions::default()
    };
    let mut config: bollard::models::ExecConfig = options.into();
    // The terminal has the client's size from its start ([rows, columns]).
    config.console_size = request
        .tty
        .map(|size| vec![usize::from(size.rows), usize::from(size.cols)]);
    let created = docker
        .create_exec(id, config)
        .await
        .map_err(|e| failed("creating the exec", e))?;
    let start = request.tty.map(|_| bollard::exec::StartExecOptions {
        detach: false,
        tty: true,
        output_capacity: None,
    });
    let started = docker
        .start_exec(&created.id, start)
        .await
        .map_err(|e| failed("starting the exec", e))?;
    let StartExecResults::Attached { mut output, input } = started else {
        return Err(crate::node::runtime::RuntimeError::ExecFailed {
            reason: format!("the engine started the exec in container {id} detached"),
        });
    };
    let resize = request.tty.map(|size| {
        let (tx, mut rx) = tokio::sync::watch::channel(size);
        let (docker, exec_id) = (docker.clone(), created.id.clone());
        tokio::spawn(async move {
            // Each new size, until the session drops the sender.
            while rx.changed().await.is_ok() {
                let size = *rx.borrow_and_update();
                let options = bollard::query_parameters::ResizeExecOptionsBuilder::new()
                    .h(i32::from(size.rows))
                    .w(i32::from(size.cols))
                    .build();
                if let Err(e) = docker.resize_exec(&exec_id, options).await {
                    // The command keeps the size it has; not worth failing it.
                    tracing::debug!(error = %error_chain(&e), "exec terminal not resized");
                }
            }
        });
        tx
    });
    let (output_tx, output_rx) = mpsc::channel(OUTPUT_CHANNEL_CHUNKS);
    let (exit_tx, exit) = oneshot::channel();
    let (kill, mut kill_rx) = oneshot::channel::<()>();
    let docker = docker.clone();
    let exec_id = created.id;
    tokio::spawn(async move {
        let killed = loop {
            let chunk = tokio::select! {
                chunk = output.next() => chunk,
                _ = &mut kill_rx => break true,
            };
            let (stream, bytes) = match chunk {
                None | Some(Err(_)) => break false,
                Some(Ok(LogOutput::StdErr { message })) => (Stream::Stderr, message),
                Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                    (Stream::Stdout, message)
                }
                Some(Ok(LogOutput::StdIn { .. })) => continue,
            };
            for piece in bytes.chunks(OUTPUT_CHUNK_BYTES_MAX) {
                if output_tx.send((stream, piece.to_vec())).await.is_err() {
                    break;
                }
            }
        };
        drop(output_tx);
        let inspected = docker.inspect_exec(&exec_id).await.ok();
        if killed {
            if let Some(pid) = inspected.as_ref().and_then(|i| i.pid).filter(|p| *p > 1) {
                let pid = nix::unistd::Pid::from_raw(pid as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
            let _ = exit_tx.send(Some(137));
            return;
        }
        let code = inspected
            .and_then(|i| i.exit_code)
            .map(|c| i32::try_from(c).unwrap_or(i32::MAX));
        let _ = exit_tx.send(code);
    });
    Ok(ExecChild {
        stdin: (request.stdin || request.tty.is_some()).then_some(input),
        output: output_rx,
        exit,
        kill,
        resize,
    })
}
