//! The process runtime against real processes: start, list, stop with grace (SIGTERM honoured,
//! SIGKILL for a process that ignores it), exit codes, environment and logs, adoption by a fresh
//! runtime over the same data directory, pid-reuse safety, reload hooks, exec probes and clear
//! errors for what cannot start.

mod runtime_support;

use std::time::{Duration, Instant};

use runtime_support::{eventually, exit_of, process_spec, request, spec};
use shoal::core::instance::Phase;
use shoal::core::spec::{Probe, ReloadHook, ReloadSignal};
use shoal::node::runtime::logs::Stream;
use shoal::node::runtime::process::{ProcessConfig, ProcessRuntime};
use shoal::node::runtime::{Runtime, RuntimeError};

const NODE: &str = "n1";
const EVENT_WAIT: Duration = Duration::from_secs(5);

async fn open(dir: &std::path::Path) -> ProcessRuntime {
    ProcessRuntime::open(ProcessConfig::new(dir, NODE))
        .await
        .expect("open runtime")
}

/// Whether `pid` is a live process (not a zombie).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            !matches!(stat.rsplit(')').next().map(str::trim_start), Some(s) if s.starts_with('Z'))
        }
        Err(_) => false,
    }
}

#[tokio::test]
async fn start_list_stop_and_remove_a_sleep() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(dir.path()).await;
    let mut events = rt.events();
    let spec = process_spec("sleeper", &["sleep", "30"]);
    let started = rt.start(request(&spec, 2, NODE)).await.expect("start");
    assert_eq!(started.phase, Phase::Running);
    assert!(
        started.handle.starts_with("sleeper-2-"),
        "{}",
        started.handle
    );
    let pid = rt.pid(&started.handle).expect("pid");
    assert!(alive(pid));

    let listed = rt.list().await.unwrap();
    assert_eq!(listed, vec![started.clone()]);
    assert_eq!(listed[0].spec_version, "v1");

    let t0 = Instant::now();
    rt.stop(&started.handle, Duration::from_secs(5))
        .await
        .expect("stop");
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "sleep honours SIGTERM at once"
    );
    assert_eq!(
        exit_of(&mut events, &started.handle, EVENT_WAIT).await,
        Some(128 + 15)
    );
    assert!(!alive(pid));
    let listed = rt.list().await.unwrap();
    assert_eq!(listed[0].phase, Phase::Exited);
    assert_eq!(listed[0].exit_code, Some(143));

    rt.remove(&started.handle).await.expect("remove");
    assert!(rt.list().await.unwrap().is_empty());
    assert!(!rt.instance_dir(&started.handle).exists());
    rt.remove(&started.handle)
        .await
        .expect("remove is idempotent");
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(dir.path()).await;
    let mut events = rt.events();
    let spec = process_spec(
        "stubborn",
        &[
            "sh",
            "-c",
            "trap '' TERM; echo ready; while :; do sleep 0.05; done",
        ],
    );
    let inst = rt.start(request(&spec, 0, NODE)).await.unwrap();
    eventually(EVENT_WAIT, "the trap to be set", || {
        rt.output(&inst.handle, Stream::Stdout).contains("ready")
    })
    .await;
    let grace = Duration::from_millis(400);
    let t0 = Instant::now();
    rt.stop(&inst.handle, grace).await.expect("stop");
    let took = t0.elapsed();
    assert!(took >= grace, "killed before the grace: {took:?}");
    assert!(took < grace + Duration::from_secs(2), "took {took:?}");
    assert_eq!(
        exit_of(&mut events, &inst.handle, EVENT_WAIT).await,
        Some(128 + 9)
    );
}

#[tokio::test]
async fn exit_codes_env_working_dir_and_logs() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(dir.path()).await;
    let mut events = rt.events();
    let spec = spec(
        r#"name = "echoer"
[process]
command = ["sh", "-c", "echo $SHOAL_WORKLOAD/$SHOAL_REPLICA@$SHOAL_NODE $GREETING $SHOAL_SETTING_MODE; pwd; echo oops >&2; exit 7"]
env = { GREETING = "hello" }
[resources]
cpu = "100m"
memory = "16Mi"
[settings]
mode = "fast"
[reload]
signal = "HUP"
"#,
    );
    let inst = rt.start(request(&spec, 1, NODE)).await.unwrap();
    assert_eq!(
        exit_of(&mut events, &inst.handle, EVENT_WAIT).await,
        Some(7)
    );
    let read = |stream| rt.output(&inst.handle, stream);
    let replica_dir = dir.path().join("replicas/echoer/1");
    let expected = format!(
        "echoer/1@n1 hello fast\n{}\n",
        replica_dir.canonicalize().unwrap().display()
    );
    // The log relay writes each line as it reads it; the exit may be reported a moment before.
    eventually(EVENT_WAIT, "the output to be relayed", || {
        read(Stream::Stdout) == expected && read(Stream::Stderr) == "oops\n"
    })
    .await;
    assert_eq!(read(Stream::Stdout), expected);
    assert_eq!(read(Stream::Stderr), "oops\n");
    let listed = rt.list().await.unwrap();
    assert_eq!(
        (listed[0].phase, listed[0].exit_code),
        (Phase::Exited, Some(7))
    );
    assert!(listed[0].exited_at_ms.unwrap() >= listed[0].started_at_ms);
}

#[tokio::test]
async fn a_fresh_runtime_adopts_running_processes_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path()).await;
    let spec = process_spec("sleeper", &["sleep", "30"]);
    let a = first.start(request(&spec, 0, NODE)).await.unwrap();
    let b = first.start(request(&spec, 1, NODE)).await.unwrap();
    let pid_a = first.pid(&a.handle).unwrap();
    drop(first); // the agent restarts; its processes keep running

    let second = open(dir.path()).await;
    let listed = second.list().await.unwrap();
    assert_eq!(listed.len(), 2, "adopted, not duplicated: {listed:?}");
    assert!(listed.iter().all(|i| i.phase == Phase::Running));
    assert_eq!(listed.iter().map(|i| &i.handle).collect::<Vec<_>>(), {
        let mut handles = vec![&a.handle, &b.handle];
        handles.sort();
        handles
    });
    assert_eq!(second.pid(&a.handle), Some(pid_a));

    // An adopted process is not our child: its exit is seen through its pidfd, code unknown.
    let mut events = second.events();
    second
        .stop(&a.handle, Duration::from_secs(5))
        .await
        .expect("stop adopted");
    assert_eq!(exit_of(&mut events, &a.handle, EVENT_WAIT).await, None);
    assert!(!alive(pid_a));

    // Killed behind the agent's back while no agent runs: reported exited on the next open.
    let pid_b = second.pid(&b.handle).unwrap();
    drop(second);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid_b),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually(EVENT_WAIT, "the process to die", || !alive(pid_b)).await;
    let third = open(dir.path()).await;
    let listed = third.list().await.unwrap();
    let gone = listed.iter().find(|i| i.handle == b.handle).unwrap();
    assert_eq!(gone.phase, Phase::Exited);
    assert!(
        gone.error.as_deref().unwrap().contains("exit code unknown"),
        "{gone:?}"
    );
}

/// An adopted process's crash is reported at once: through its pidfd, not by the `/proc` poll,
/// which is set here far slower than the wait allows.
#[tokio::test]
async fn an_adopted_process_that_crashes_is_reported_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path()).await;
    let spec = process_spec("sleeper", &["sleep", "30"]);
    let inst = first.start(request(&spec, 0, NODE)).await.unwrap();
    let pid = first.pid(&inst.handle).unwrap();
    drop(first);

    let config = ProcessConfig {
        adopted_poll_interval: Duration::from_secs(60),
        ..ProcessConfig::new(dir.path(), NODE)
    };
    let second = ProcessRuntime::open(config).await.expect("open runtime");
    let mut events = second.events();
    let killed = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_eq!(exit_of(&mut events, &inst.handle, EVENT_WAIT).await, None);
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "the exit took {:?} to be reported",
        killed.elapsed()
    );
    let listed = second.list().await.unwrap();
    assert_eq!(listed[0].phase, Phase::Exited, "{listed:?}");
}

#[tokio::test]
async fn a_reused_pid_is_never_adopted_nor_signalled() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path()).await;
    let spec = process_spec("sleeper", &["sleep", "30"]);
    let inst = first.start(request(&spec, 0, NODE)).await.unwrap();
    let pid = first.pid(&inst.handle).unwrap();
    drop(first);
    // Make the state file describe another process that had the same pid earlier.
    let state_path = dir
        .path()
        .join("instances")
        .join(&inst.handle)
        .join("state.json");
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state_path).unwrap()).unwrap();
    let ticks = state["proc_start_ticks"].as_u64().unwrap();
    state["proc_start_ticks"] = (ticks + 1).into();
    std::fs::write(&state_path, serde_json::to_vec(&state).unwrap()).unwrap();

    let second = open(dir.path()).await;
    let listed = second.list().await.unwrap();
    assert_eq!(listed[0].phase, Phase::Exited, "{listed:?}");
    second
        .stop(&inst.handle, Duration::from_millis(100))
        .await
        .expect("stop of an exited instance");
    assert!(alive(pid), "the process now owning that pid was signalled");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

#[tokio::test]
async fn what_cannot_start_is_a_clear_error_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(dir.path()).await;
    let missing = process_spec("ghost", &["no-such-command-shoal-test", "1"]);
    let err = rt.start(request(&missing, 0, NODE)).await.unwrap_err();
    assert!(
        matches!(err, RuntimeError::CommandNotFound { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "command \"no-such-command-shoal-test\" not found: install it, or fix the spec's command or PATH"
    );
    assert!(rt.list().await.unwrap().is_empty());
    assert_eq!(
        std::fs::read_dir(dir.path().join("instances"))
            .unwrap()
            .count(),
        0
    );
    // No log directory either (it would pass for the replica's newest instance).
    let ghost_logs = dir.path().join("logs/ghost/0");
    assert_eq!(std::fs::read_dir(&ghost_logs).map_or(0, |d| d.count()), 0);
    let query = shoal::node::runtime::logs::LogQuery {
        start: shoal::node::runtime::logs::LogStart::Tail(10),
        since_ms: None,
        bytes_max: 1024,
        instance: None,
    };
    let replica = shoal::core::instance::ReplicaId::new("ghost", 0);
    let err = rt.logs(&replica, false, &query).await.unwrap_err();
    assert!(matches!(err, RuntimeError::NoLogs { .. }), "{err:?}");

    let nowhere = spec(
        "name = \"w\"\n[process]\ncommand = [\"true\"]\nworking_dir = \"/no/such/dir\"\n\
         [resources]\ncpu = \"1\"\nmemory = \"1Mi\"\n",
    );
    let err = rt.start(request(&nowhere, 0, NODE)).await.unwrap_err();
    assert!(
        err.to_string().contains("\"/no/such/dir\" does not exist"),
        "{err}"
    );

    let container = spec(
        "name = \"c\"\n[container]\nimage = \"x:1\"\n[resources]\ncpu = \"1\"\nmemory = \"1Mi\"\n",
    );
    let reason = rt.supports(&container).unwrap_err();
    assert!(reason.contains("docker runtime"), "{reason}");
    let err = rt.start(request(&container, 0, NODE)).await.unwrap_err();
    assert!(matches!(err, RuntimeError::Unsupported { .. }), "{err:?}");
    let err = rt
        .start(request(&missing, 0, "other-node"))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::WrongNode { .. }), "{err:?}");
    assert!(rt.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn limits_are_enforced_or_said_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(dir.path()).await;
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    match rt.limits_note() {
        Some(note) => assert!(
            note.starts_with("cpu/memory limits not enforced: "),
            "{note}"
        ),
        None => assert!(v2, "no note, so cgroup v2 must be there"),
    }
    if !v2 {
        assert!(rt
            .limits_note()
            .unwrap()
            .contains("cgroup v2 is not mounted"));
    }
}

#[tokio::test]
async fn reload_hooks_and_exec_probes_run_in_the_instance_context() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(dir.path()).await;
    // `wait` for a background sleep: a trapped signal interrupts `wait` at once and the trap
    // runs (with a foreground `sleep` it waits for the child).
    let script = "trap 'echo got-hup' HUP; echo ready; while :; do sleep 0.05 & wait $!; done";
    let spec = process_spec("reloader", &["sh", "-c", script]);
    let inst = rt.start(request(&spec, 0, NODE)).await.unwrap();
    let log = || rt.output(&inst.handle, Stream::Stdout);
    eventually(EVENT_WAIT, "the trap to be set", || log().contains("ready")).await;
    let settings = [("max_conn".to_string(), "42".to_string())].into();
    let timeout = Duration::from_secs(2);
    rt.reload(
        &inst.handle,
        &ReloadHook::Signal(ReloadSignal::Hup),
        &settings,
        timeout,
    )
    .await
    .expect("signal reload");
    eventually(EVENT_WAIT, "the HUP to be handled", || {
        log().contains("got-hup")
    })
    .await;

    let command = vec![
        "sh".into(),
        "-c".into(),
        "echo $SHOAL_SETTING_MAX_CONN > applied".into(),
    ];
    rt.reload(
        &inst.handle,
        &ReloadHook::Exec { command },
        &settings,
        timeout,
    )
    .await
    .expect("exec reload");
    let applied = dir.path().join("replicas/reloader/0/applied");
    assert_eq!(std::fs::read_to_string(applied).unwrap(), "42\n");
    let failing = vec!["false".to_string()];
    let err = rt
        .reload(
            &inst.handle,
            &ReloadHook::Exec { command: failing },
            &settings,
            timeout,
        )
        .await;
    assert!(err.unwrap_err().to_string().contains("exit status 1"));

    let exec = |args: &[&str]| Probe::Exec {
        command: args.iter().map(|s| s.to_string()).collect(),
    };
    let ok = rt
        .probe(
            &inst.handle,
            &exec(&["sh", "-c", "test \"$SHOAL_WORKLOAD\" = reloader"]),
            timeout,
        )
        .await;
    assert!(ok.is_healthy(), "{ok:?}");
    let bad = rt
        .probe(
            &inst.handle,
            &exec(&["sh", "-c", "echo broken >&2; exit 3"]),
            timeout,
        )
        .await;
    assert_eq!(
        bad,
        shoal::node::runtime::ProbeOutcome::fail("\"sh\" failed with exit status 3: broken")
    );
    let t0 = Instant::now();
    let slow = rt
        .probe(
            &inst.handle,
            &exec(&["sleep", "5"]),
            Duration::from_millis(200),
        )
        .await;
    assert!(
        !slow.is_healthy() && t0.elapsed() < Duration::from_secs(2),
        "{slow:?}"
    );
    let unknown = rt.probe("nope", &exec(&["true"]), timeout).await;
    assert!(!unknown.is_healthy());
    rt.stop(&inst.handle, Duration::from_secs(2)).await.unwrap();
}

#[tokio::test]
async fn group_members_outliving_the_leader_are_killed_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(dir.path()).await;
    // The leader dies of SIGTERM at once; a member of its group ignores it.
    let script = "sh -c 'trap \"\" TERM; echo $$ > member.pid; while :; do sleep 0.05; done' & \
                  exec sleep 30";
    let spec = process_spec("family", &["sh", "-c", script]);
    let inst = rt.start(request(&spec, 0, NODE)).await.unwrap();
    let pid_file = dir.path().join("replicas/family/0/member.pid");
    // The shell creates the file before it writes the pid: wait for a whole number.
    let read_pid =
        || -> Option<i32> { std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok() };
    eventually(EVENT_WAIT, "the member to start", || read_pid().is_some()).await;
    let member = read_pid().expect("a pid");
    let grace = Duration::from_millis(300);
    let t0 = Instant::now();
    rt.stop(&inst.handle, grace).await.expect("stop");
    assert!(
        t0.elapsed() >= grace,
        "the member had the whole grace: {:?}",
        t0.elapsed()
    );
    eventually(EVENT_WAIT, "the member to be killed", || !alive(member)).await;
}

#[tokio::test]
async fn named_ports_reach_the_process_its_probes_and_a_fresh_runtime() {
    use shoal::core::spec::PortRef;
    let dir = tempfile::tempdir().unwrap();
    let rt = open(dir.path()).await;
    let web = spec(
        "name = \"web\"\n[process]\n\
         command = [\"sh\", \"-c\", \"echo $SHOAL_ADDR $SHOAL_PORT_HTTP $SHOAL_PORT_GRPC_ADMIN; \
         exec python3 -m http.server $SHOAL_PORT_HTTP --bind $SHOAL_ADDR\"]\n\
         ports = [{ name = \"http\" }, { name = \"grpc-admin\", port = 9 }]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n",
    );
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut req = request(&web, 0, NODE);
    req.addr = std::net::IpAddr::from([127, 0, 0, 33]);
    req.ports = std::collections::BTreeMap::from([
        ("http".to_string(), port),
        ("grpc-admin".to_string(), 9),
    ]);
    let started = rt.start(req).await.expect("start");
    assert_eq!(started.ports["http"], port);
    let h = &started.handle;
    let named = Probe::Http {
        port: PortRef::Named("http".into()),
        path: "/".into(),
    };
    let timeout = Duration::from_secs(1);
    let deadline = Instant::now() + EVENT_WAIT;
    while !rt.probe(h, &named, timeout).await.is_healthy() {
        assert!(
            Instant::now() < deadline,
            "the named probe reaches 127.0.0.33:{port}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // By number the probe goes to 127.0.0.1, where nothing listens on that port.
    let local = rt
        .probe(h, &Probe::Tcp { port: port.into() }, timeout)
        .await;
    assert!(!local.is_healthy(), "{local:?}");
    let unknown = rt
        .probe(
            h,
            &Probe::Tcp {
                port: PortRef::Named("admin".into()),
            },
            timeout,
        )
        .await;
    assert!(!unknown.is_healthy());
    eventually(EVENT_WAIT, "the output to be relayed", || {
        !rt.output(h, Stream::Stdout).is_empty()
    })
    .await;
    let out = rt.output(h, Stream::Stdout);
    assert_eq!(
        out.lines().next(),
        Some(format!("127.0.0.33 {port} 9").as_str())
    );
    // A fresh runtime over the same directory adopts it with its ports.
    drop(rt);
    let again = open(dir.path()).await;
    let listed = again.list().await.unwrap();
    assert_eq!(listed[0].ports, started.ports);
    assert!(again.probe(h, &named, timeout).await.is_healthy());
    again.stop(h, Duration::from_secs(2)).await.unwrap();
}

/// An agent started under `nohup` inherits SIGHUP ignored, and a process inherits ignored signals
/// across exec: its instances could not trap HUP (a shell refuses to trap a signal ignored on
/// entry), so a reload by HUP did nothing (found when `.ci/run` ran under `nohup`). The runtime
/// now catches the signals instances are sent, so they start at their defaults. This runs the
/// HUP reload test above again in this binary under `nohup`.
#[test]
fn a_reload_by_hup_reaches_instances_of_an_agent_started_under_nohup() {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new("nohup")
        .arg(exe)
        .args([
            "reload_hooks_and_exec_probes_run_in_the_instance_context",
            "--exact",
        ])
        .output()
        .expect("running nohup (coreutils)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "under nohup: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
