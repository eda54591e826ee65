//! Count and size limits (too long for fixture files), re-validation of typed specs, and the
//! live-change rule.
#![allow(
    clippy::disallowed_methods,
    reason = "the test reads examples/sleeper.toml; the no-I/O rule is for the library"
)]

use shoal_core::spec::*;

const BASE: &str = "name = \"web\"\n[resources]\ncpu = \"1\"\nmemory = \"1Gi\"\n";

fn messages(text: &str) -> Vec<String> {
    match WorkloadSpec::from_toml_str(text, "t.toml") {
        Ok(_) => Vec::new(),
        Err(errors) => errors
            .errors()
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect(),
    }
}

fn process_with(lines: &str) -> String {
    format!("{BASE}[process]\ncommand = [\"web\"]\n{lines}")
}

fn env_table(n: usize) -> String {
    let vars: Vec<String> = (0..n).map(|i| format!("V{i} = \"x\"")).collect();
    format!("[process.env]\n{}\n", vars.join("\n"))
}

#[test]
fn environment_is_bounded() {
    assert_eq!(
        messages(&process_with(&env_table(ENV_VARS_MAX))),
        Vec::<String>::new()
    );
    assert_eq!(
        messages(&process_with(&env_table(ENV_VARS_MAX + 1))),
        ["process.env: has 257 variables; at most 256"]
    );
    let long = format!(
        "[process.env]\nBIG = \"{}\"\n",
        "x".repeat(ENV_VALUE_BYTES_MAX + 1)
    );
    assert_eq!(
        messages(&process_with(&long)),
        ["process.env.BIG: is 32769 bytes; at most 32768"]
    );
}

#[test]
fn commands_are_bounded() {
    let args = |n: usize| vec!["\"a\""; n].join(", ");
    let text = format!("{BASE}[process]\ncommand = [{}]\n", args(COMMAND_ARGS_MAX));
    assert_eq!(messages(&text), Vec::<String>::new());
    let text = format!(
        "{BASE}[process]\ncommand = [{}]\n",
        args(COMMAND_ARGS_MAX + 1)
    );
    assert_eq!(
        messages(&text),
        ["process.command: has 257 arguments; at most 256"]
    );
    let text = format!(
        "{BASE}[process]\ncommand = [\"a\", \"{}\"]\n",
        "y".repeat(STRING_BYTES_MAX + 1)
    );
    assert_eq!(
        messages(&text),
        ["process.command[1]: is 4097 bytes; at most 4096"]
    );
}

#[test]
fn constraints_ports_and_settings_are_bounded() {
    let constraints = |n: usize| vec!["\"gpu\""; n].join(", ");
    let text = process_with(&format!(
        "[placement]\nconstraints = [{}]\n",
        constraints(CONSTRAINTS_MAX + 1)
    ));
    assert_eq!(
        messages(&text),
        ["placement.constraints: has 33 constraints; at most 32"]
    );

    let ports: Vec<String> = (0..=PORTS_MAX)
        .map(|i| format!("{{ container = {} }}", 1000 + i))
        .collect();
    let text = format!(
        "{BASE}[container]\nimage = \"nginx\"\nports = [{}]\n",
        ports.join(", ")
    );
    assert_eq!(
        messages(&text),
        ["container.ports: has 65 ports; at most 64"]
    );

    let settings: Vec<String> = (0..=SETTINGS_MAX)
        .map(|i| format!("s{i} = \"x\""))
        .collect();
    let text = process_with(&format!(
        "[settings]\n{}\n[reload]\nsignal = \"HUP\"\n",
        settings.join("\n")
    ));
    assert_eq!(messages(&text), ["settings: has 65 settings; at most 64"]);
}

#[test]
fn names_up_to_63_characters() {
    let named = |n: usize| {
        process_with("").replace(
            "\"web\"\n[resources]",
            &format!("\"{}\"\n[resources]", "a".repeat(n)),
        )
    };
    assert_eq!(messages(&named(NAME_LEN_MAX)), Vec::<String>::new());
    assert_eq!(
        messages(&named(NAME_LEN_MAX + 1)),
        ["name: is 64 characters; a name is at most 63"]
    );
}

#[test]
fn oversized_input_is_refused_before_parsing() {
    let mut text = process_with("");
    text.push_str(&"#".repeat(SPEC_BYTES_MAX));
    let expected = format!(
        "t.toml: the file is {} bytes; a spec may be at most 1048576 bytes (1 MiB)",
        text.len()
    );
    let errors = WorkloadSpec::from_toml_str(&text, "t.toml").unwrap_err();
    assert_eq!(errors.to_string(), expected);
    let errors = WorkloadSpec::from_bytes(text.as_bytes(), "t.toml").unwrap_err();
    assert_eq!(errors.to_string(), expected);
}

fn sleeper() -> WorkloadSpec {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/sleeper.toml"
    ))
    .unwrap();
    WorkloadSpec::from_toml_str(&text, "sleeper.toml").unwrap()
}

#[test]
fn sleeper_example_decodes_with_defaults() {
    let spec = sleeper();
    assert_eq!(spec.name, "sleeper");
    assert_eq!(spec.replicas, 3);
    assert_eq!(
        spec.run,
        Run::Process(ProcessSpec {
            command: vec!["sleep".into(), "3600".into()],
            ..Default::default()
        })
    );
    assert_eq!(spec.resources, shoal_core::Resources::new(100, 16 << 20));
    assert_eq!(spec.placement, Placement::default());
    assert_eq!(spec.health, None);
    assert_eq!(
        spec.restart,
        RestartPolicy {
            policy: RestartMode::Always,
            backoff_initial_ms: 10_000,
            backoff_max_ms: 300_000,
            backoff_reset_ms: 600_000
        }
    );
    assert_eq!(
        spec.update,
        UpdateStrategy {
            max_unavailable: 1,
            max_surge: 0,
            auto_rollback: true,
            progress_deadline_ms: 120_000,
            failure_threshold: 0,
        }
    );
}

#[test]
fn typed_specs_from_elsewhere_are_revalidated() {
    let mut spec = sleeper();
    assert_eq!(spec.validate(), Ok(()));
    spec.name = "Bad Name".into();
    spec.replicas = REPLICAS_MAX + 1;
    spec.resources.cpu_millis = 0;
    spec.placement.exclusive = true;
    spec.update.max_surge = 1;
    spec.run = Run::Container(ContainerSpec {
        image: "nginx".into(),
        ports: vec![
            PortMapping {
                name: None,
                container: 80,
                host: Some(8080),
                protocol: Protocol::Tcp,
            },
            PortMapping {
                name: None,
                container: 80,
                host: Some(8080),
                protocol: Protocol::Tcp,
            },
        ],
        ..Default::default()
    });
    let errors = spec.validate().unwrap_err();
    let expected = [
        "container.ports[1].container: container port 80/tcp is already published by ports[0]",
        "container.ports[1].host: host port 8080/tcp is already used by ports[0]",
        "name: \"Bad Name\" is not a valid name: use lowercase letters, digits and '-', starting and ending with a letter or digit (a DNS label)",
        "replicas: must be between 0 and 10000, got 10001",
        "resources.cpu: must be more than 0 (e.g. \"100m\")",
        "update.max_surge: must be 0 for an exclusive workload: its replicas never run twice at once",
    ];
    assert_eq!(errors.to_string(), expected.join("\n"));
    let labelled = errors.with_file("peer:n7");
    assert!(labelled
        .to_string()
        .starts_with("peer:n7: container.ports[1].container: "));
}

#[test]
fn only_settings_changes_are_live() {
    let mut old = sleeper();
    old.settings.insert("level".into(), "info".into());
    old.reload = Some(ReloadHook::Signal(ReloadSignal::Hup));
    let mut newer = old.clone();
    assert!(
        !old.is_live_change(&newer),
        "no change at all is not a live change"
    );
    newer.settings.insert("level".into(), "debug".into());
    assert!(old.is_live_change(&newer));
    newer.replicas += 1;
    assert!(
        !old.is_live_change(&newer),
        "a change beyond settings needs the normal path"
    );
    let mut no_hook = old.clone();
    no_hook.reload = None;
    let mut changed = no_hook.clone();
    changed.settings.insert("level".into(), "debug".into());
    assert!(
        !no_hook.is_live_change(&changed),
        "without a hook nothing is live"
    );
}

#[test]
fn floods_of_problems_are_summed_up() {
    let keys: Vec<String> = (0..5000).map(|i| format!("k{i} = 1")).collect();
    let text = process_with(&format!("[placement]\n{}\n", keys.join("\n")));
    let errors = WorkloadSpec::from_toml_str(&text, "t.toml").unwrap_err();
    assert_eq!(errors.len(), 21);
    assert_eq!(errors.errors()[20].message, "4980 more unknown fields");

    let bad = vec!["\"a ~ b\""; 5000].join(", ");
    let text = process_with(&format!("[placement]\nconstraints = [{bad}]\n"));
    let errors = WorkloadSpec::from_toml_str(&text, "t.toml").unwrap_err();
    assert_eq!(errors.total(), 5000);
    assert_eq!(errors.len(), ERRORS_MAX + 1);
    assert_eq!(
        errors.errors()[ERRORS_MAX].to_string(),
        "t.toml: 4900 more problems not shown"
    );
}

#[test]
fn image_references() {
    let with_image = |image: &str| format!("{BASE}[container]\nimage = {image:?}\n");
    for good in [
        "nginx",
        "nginx:1.27",
        "library/nginx:1.27-alpine",
        "registry.local:5000/team/web:1.4.2",
        "localhost/x",
        "ghcr.io/o/r@sha256:0123abcd",
        "postgres:16@sha256:ff",
    ] {
        assert_eq!(messages(&with_image(good)), Vec::<String>::new(), "{good}");
    }
    for bad in [
        "/x",
        "a//b",
        "nginx:",
        "Nginx",
        "nginx:a/b",
        "x@sha256",
        "x@sha256:zz",
        "a:b:c",
    ] {
        let m = messages(&with_image(bad));
        assert_eq!(m.len(), 1, "{bad}: {m:?}");
        assert!(m[0].starts_with("container.image: "), "{bad}: {m:?}");
    }
}

#[test]
fn a_rule_added_later_refuses_new_specs_but_not_stored_ones() {
    // Applied under an agent that did not know the rule: a fixed port and a surge.
    let mut spec = sleeper();
    spec.update.max_surge = 1;
    spec.run = Run::Process(ProcessSpec {
        command: vec!["web".into()],
        ports: vec![NamedPort {
            name: "http".into(),
            port: Some(8080),
            protocol: Protocol::Tcp,
        }],
        ..Default::default()
    });
    let errors = spec.validate().unwrap_err().to_string();
    assert!(
        errors.starts_with(
            "update.max_surge: must be 0 while process.ports[0].port fixes host port 8080"
        ),
        "{errors}"
    );
    assert_eq!(
        spec.validate_stored(),
        Ok(()),
        "a stored spec keeps running"
    );
    // The stored rules are still every other rule.
    spec.replicas = REPLICAS_MAX + 1;
    assert!(spec.validate_stored().is_err());
    // Without the fixed number the surge is fine.
    spec.replicas = 3;
    if let Run::Process(p) = &mut spec.run {
        p.ports[0].port = None;
    }
    assert_eq!(spec.validate(), Ok(()));
}
