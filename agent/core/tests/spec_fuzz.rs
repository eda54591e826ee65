//! Specs never panic, whatever the input: arbitrary text and bytes, random mutations of valid
//! files, and pathological nesting. And every valid spec survives rendering and re-parsing.
#![allow(
    clippy::disallowed_methods,
    reason = "reads the fixtures and PROPTEST_CASES; the no-I/O rule is for the library"
)]

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use shoal_core::spec::*;
use shoal_core::{Constraint, Resources};

/// Parses `text` every way a spec can arrive; a panic fails the test. When it is accepted, the
/// spec must also re-validate and round-trip, whatever odd path led there.
fn parse_all_ways(text: &str) {
    for file in ["fuzz.toml", "fuzz.json", "fuzz"] {
        match WorkloadSpec::from_bytes(text.as_bytes(), file) {
            Ok(spec) => {
                assert_eq!(spec.validate(), Ok(()));
                assert_eq!(
                    WorkloadSpec::from_toml_str(&spec.to_toml_string(), "r.toml"),
                    Ok(spec)
                );
            }
            Err(errors) => {
                assert!(!errors.is_empty());
                assert!(errors
                    .errors()
                    .iter()
                    .all(|e| e.file == file && !e.message.is_empty()));
            }
        }
    }
}

/// Valid inputs to mutate: the fixtures and the examples.
fn seeds() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in [
        root.join("tests/fixtures/spec"),
        root.join("../../examples"),
    ] {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e != "expected") {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    out.push(text);
                }
            }
        }
    }
    out.sort();
    out
}

const SNIPPETS: &[&str] = &[
    "=",
    "\"",
    "'",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "\n",
    "[[",
    "]]",
    "#",
    "\\",
    "\\u",
    "0x",
    "1e9999",
    "-",
    ".",
    "inf",
    "nan",
    "\u{0}",
    "é",
    "\"\"\"",
    "name",
    "process",
    "container",
    "resources",
    "health",
    "command",
    "[process]",
    "[container]",
    "[health.http]",
    "[reload]",
    "[settings]",
    "ports = [{container = 0}]",
    "replicas = -1",
    "cpu = \"fast\"",
    "{}",
    "[]",
    "null",
    "true",
    "99999999999999999999999999999999999999999",
    "1979-05-27T07:32:00Z",
    "a.b.c = 1",
    "\t",
    "\r\n",
];

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1..20usize).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), 0..SNIPPETS.len()).prop_map(|(a, s)| Edit::Insert(a, s)),
        any::<usize>().prop_map(Edit::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
    ]
}

fn floor_boundary(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &mut String, e: &Edit) {
    let at =
        |i: usize, t: &String| floor_boundary(t, if t.is_empty() { 0 } else { i % (t.len() + 1) });
    match *e {
        Edit::Delete(a, n) => {
            let start = at(a, text);
            let end = floor_boundary(text, start + n);
            text.replace_range(start..end, "");
        }
        Edit::Insert(a, s) => {
            let i = at(a, text);
            text.insert_str(i, SNIPPETS[s]);
        }
        Edit::DuplicateLine(a) | Edit::SwapLines(a, _) if text.lines().count() == 0 => {
            let _ = a;
        }
        Edit::DuplicateLine(a) => {
            let mut lines: Vec<&str> = text.lines().collect();
            let i = a % lines.len();
            lines.insert(i, lines[i]);
            *text = lines.join("\n");
        }
        Edit::SwapLines(a, b) => {
            let mut lines: Vec<&str> = text.lines().collect();
            let n = lines.len();
            lines.swap(a % n, b % n);
            *text = lines.join("\n");
        }
    }
}

proptest! {
    // PROPTEST_CASES=100000 for a longer soak.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        parse_all_ways(&text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        for file in ["b.toml", "b.json", "b"] {
            let _ = WorkloadSpec::from_bytes(&bytes, file);
        }
    }

    #[test]
    fn mutated_valid_files_never_panic(
        seed in any::<prop::sample::Index>(),
        edits in proptest::collection::vec(edit(), 1..6),
    ) {
        let seeds = seeds();
        let mut text = seed.get(&seeds).clone();
        for e in &edits {
            apply(&mut text, e);
        }
        parse_all_ways(&text);
    }

    #[test]
    fn valid_specs_round_trip_through_both_formats(spec in arb_spec()) {
        prop_assert_eq!(spec.validate(), Ok(()));
        let toml = spec.to_toml_string();
        prop_assert_eq!(WorkloadSpec::from_toml_str(&toml, "r.toml"), Ok(spec.clone()), "{}", toml);
        let json = spec.to_json_string();
        prop_assert_eq!(WorkloadSpec::from_json_str(&json, "r.json"), Ok(spec.clone()), "{}", json);
        let wire = serde_json::to_string(&spec).unwrap();
        prop_assert_eq!(serde_json::from_str::<WorkloadSpec>(&wire).unwrap(), spec);
    }
}

#[test]
fn pathological_nesting_is_refused_without_overflow() {
    let deep = 100_000;
    let inputs = [
        format!("a = {}", "[".repeat(deep)),
        format!("a = {}{}", "[".repeat(deep), "]".repeat(deep)),
        format!("a = {}", "{a = ".repeat(deep)),
        format!("{} = 1", vec!["a"; deep].join(".")),
        format!("[{}]", vec!["a"; deep].join(".")),
        "[".repeat(deep),
        format!("{}{}", "[".repeat(deep), "]".repeat(deep)),
        "{\"a\":".repeat(deep),
    ];
    for text in &inputs {
        parse_all_ways(text);
    }
}

fn arb_strings(first: &'static str) -> impl Strategy<Value = Vec<String>> {
    (
        first,
        proptest::collection::vec("[a-zA-Z0-9 ._\"'\\\\=$é-]{0,12}", 0..4),
    )
        .prop_map(|(f, rest)| {
            let mut v = vec![f];
            v.extend(rest);
            v
        })
}

fn arb_env() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map("[A-Za-z_][A-Za-z0-9_]{0,8}", "[^\u{0}]{0,10}", 0..4)
}

fn arb_run() -> impl Strategy<Value = Run> {
    let process = (
        arb_strings("[a-z/][a-z0-9/._-]{0,10}"),
        arb_env(),
        proptest::option::of("/[a-z0-9/]{0,10}"),
        proptest::collection::vec((any::<bool>(), any::<bool>()), 0..4),
    )
        .prop_map(|(command, env, working_dir, ports)| {
            let ports = ports
                .into_iter()
                .enumerate()
                .map(|(i, (fixed, udp))| NamedPort {
                    name: format!("p{i}"),
                    port: fixed.then_some(3000 + i as u16),
                    protocol: if udp { Protocol::Udp } else { Protocol::Tcp },
                })
                .collect();
            Run::Process(ProcessSpec {
                command,
                env,
                working_dir,
                ports,
            })
        });
    let image = "[a-z0-9]{1,8}(/[a-z0-9._-]{1,8})?(:[A-Za-z0-9._-]{1,8})?";
    let ports = proptest::collection::vec((any::<bool>(), any::<bool>()), 0..5).prop_map(|flags| {
        let port = |i: usize, (host, udp): (bool, bool)| PortMapping {
            name: (host != udp).then(|| format!("c-{i}")),
            container: 1000 + i as u16,
            host: host.then_some(2000 + i as u16),
            protocol: if udp { Protocol::Udp } else { Protocol::Tcp },
        };
        flags
            .into_iter()
            .enumerate()
            .map(|(i, f)| port(i, f))
            .collect::<Vec<_>>()
    });
    let commands = prop_oneof![Just(Vec::new()), arb_strings("[a-z/][a-z0-9/._-]{0,10}")];
    let pulls = prop_oneof![
        Just(PullPolicy::IfNotPresent),
        Just(PullPolicy::Always),
        Just(PullPolicy::Never)
    ];
    let container = (image, commands, arb_env(), ports, pulls).prop_map(
        |(image, command, env, ports, pull)| {
            Run::Container(ContainerSpec {
                image,
                command,
                env,
                ports,
                pull,
            })
        },
    );
    prop_oneof![process, container]
}

fn arb_placement() -> impl Strategy<Value = Placement> {
    let texts = [
        "disk == ssd",
        "zone != eu-1c",
        "rack in (r1, r2)",
        "arch not in (arm64)",
        "gpu",
        "!spot",
    ];
    let constraints =
        proptest::sample::subsequence(texts.to_vec(), 0..=texts.len()).prop_map(|t| {
            t.iter()
                .map(|c| Constraint::parse(c).unwrap())
                .collect::<Vec<_>>()
        });
    let spread = prop_oneof![Just(Spread::Node), Just(Spread::Zone)];
    (
        spread,
        constraints,
        any::<bool>(),
        PRIORITY_MIN..=PRIORITY_MAX,
    )
        .prop_map(|(spread, constraints, exclusive, priority)| Placement {
            spread,
            constraints,
            exclusive,
            priority,
            // Valid only with exclusive and a data volume: the fixtures and
            // reconcile_data.rs cover them.
            sticky_for_ms: None,
            on_data_loss: None,
        })
}

fn arb_health() -> impl Strategy<Value = HealthCheck> {
    let probe = prop_oneof![
        arb_strings("[a-z/][a-z0-9/._-]{0,10}").prop_map(|command| Probe::Exec { command }),
        (1..=u16::MAX).prop_map(|port| Probe::Tcp { port: port.into() }),
        (1..=u16::MAX, "/[a-z0-9/._-]{0,12}").prop_map(|(port, path)| Probe::Http {
            port: port.into(),
            path
        }),
    ];
    let duration = 1..=DURATION_MS_MAX;
    (
        probe,
        duration.clone(),
        duration,
        1..=HEALTH_FAILURE_THRESHOLD_MAX,
        0..DURATION_MS_MAX, // a rollout's deadline must be longer
    )
        .prop_map(
            |(probe, a, b, failure_threshold, start_grace_ms)| HealthCheck {
                probe,
                interval_ms: a.max(b),
                timeout_ms: a.min(b),
                failure_threshold,
                start_grace_ms,
            },
        )
}

fn arb_spec() -> impl Strategy<Value = WorkloadSpec> {
    let duration = 1..=DURATION_MS_MAX;
    let restart = (0..3usize, duration.clone(), duration.clone(), duration).prop_map(
        |(mode, a, b, reset)| {
            let policy = [
                RestartMode::Always,
                RestartMode::OnFailure,
                RestartMode::Never,
            ][mode];
            RestartPolicy {
                policy,
                backoff_initial_ms: a.min(b),
                backoff_max_ms: a.max(b),
                backoff_reset_ms: reset,
            }
        },
    );
    let update = (
        0..=REPLICAS_MAX,
        0..=REPLICAS_MAX,
        any::<bool>(),
        UPDATE_PROGRESS_DEADLINE_MS_MIN..=DURATION_MS_MAX,
        0..=REPLICAS_MAX,
    )
        .prop_map(
            |(
                max_unavailable,
                max_surge,
                auto_rollback,
                progress_deadline_ms,
                failure_threshold,
            )| {
                UpdateStrategy {
                    max_unavailable,
                    max_surge,
                    auto_rollback,
                    progress_deadline_ms,
                    failure_threshold,
                }
            },
        );
    let settings = proptest::collection::btree_map("[a-z][a-z0-9_]{0,8}", "[^\u{0}]{0,8}", 0..3);
    let reload = proptest::option::of(prop_oneof![
        prop_oneof![
            Just(ReloadSignal::Hup),
            Just(ReloadSignal::Usr1),
            Just(ReloadSignal::Usr2)
        ]
        .prop_map(ReloadHook::Signal),
        arb_strings("[a-z/][a-z0-9/._-]{0,10}").prop_map(|command| ReloadHook::Exec { command }),
    ]);
    let resources = (1..=CPU_MILLIS_MAX, MEMORY_BYTES_MIN..=MEMORY_BYTES_MAX)
        .prop_map(|(c, m)| Resources::new(c, m));
    (
        (
            "[a-z]([a-z0-9-]{0,20}[a-z0-9])?",
            0..=REPLICAS_MAX,
            arb_run(),
            resources,
            arb_placement(),
        ),
        (
            proptest::option::of(arb_health()),
            restart,
            update,
            settings,
            reload,
            proptest::collection::vec((0..3u8, "/[a-z]{1,6}", any::<bool>()), 0..3),
        ),
    )
        .prop_map(
            |(
                (name, replicas, run, resources, placement),
                (health, restart, mut update, settings, reload, volumes),
            )| {
                // Fix up the cross-field rules rather than filtering: every case stays useful.
                let fixes_host_port = match &run {
                    Run::Process(p) => p.ports.iter().any(|p| p.port.is_some()),
                    Run::Container(c) => c.ports.iter().any(|p| p.host.is_some()),
                };
                if placement.exclusive || fixes_host_port {
                    update.max_surge = 0;
                }
                if update.max_unavailable == 0 && update.max_surge == 0 {
                    update.max_unavailable = 1;
                }
                if let Some(h) = &health {
                    update.progress_deadline_ms =
                        update.progress_deadline_ms.max(h.start_grace_ms + 1);
                }
                let reload = if settings.is_empty() {
                    reload
                } else {
                    reload.or(Some(ReloadHook::Signal(ReloadSignal::Hup)))
                };
                let container = matches!(run, Run::Container(_));
                let volumes = volumes
                    .into_iter()
                    .enumerate()
                    .map(|(i, (kind, host_path, read_only))| {
                        let kind = match kind {
                            1 => VolumeKind::Host,
                            2 if container => VolumeKind::Docker,
                            _ => VolumeKind::Data,
                        };
                        Volume {
                            name: format!("v{i}"),
                            kind,
                            path: container.then(|| format!("/m{i}")),
                            host_path: (kind == VolumeKind::Host).then_some(host_path),
                            source: None,
                            read_only: container && read_only,
                        }
                    })
                    .collect();
                WorkloadSpec {
                    name,
                    replicas,
                    run,
                    resources,
                    placement,
                    health,
                    restart,
                    update,
                    settings,
                    reload,
                    restarted_at: None,
                    stop_grace_ms: None,
                    user: None,
                    secret_env: None,
                    volumes,
                }
            },
        )
}
