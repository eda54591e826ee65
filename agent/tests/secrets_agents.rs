//! Secrets on real agents (issue 29, item 1): a spec's `secret_env` reaches the instance's
//! environment and no read command shows it, to a read-only client or anyone, in text or JSON;
//! `get --spec --show-secrets` is refused to a read-only client and, for a write client, prints
//! the value and is recorded as a `show-secrets` event naming it; the agents' own logs never
//! carry it; `scale` keeps it.

mod common;

use std::time::Duration;

use common::{stderr, wait_until, Cluster};

const SECRET: &str = "hunter2-5e4f1d";

#[test]
fn secret_values_reach_the_instance_and_no_read_shows_them() {
    let mut c = Cluster::new();
    c.cleanup.push("sleep 86421".to_string());
    c.add("sec1");
    c.add("sec2");
    c.wait_members(2, Duration::from_secs(30));
    assert!(wait_until(Duration::from_secs(30), || {
        c.cli_json(0, &["upgrade", "status", "-o", "json"])["mesh_version"]
            == shoal_core::version::WIRE_CUR
    }));
    // A read-only client certificate beside the write client's.
    let out = common::run_cli_in(
        None,
        &[
            "pki",
            "issue",
            "--dir",
            c.pki.to_str().unwrap(),
            "--name",
            "viewer",
        ],
        None,
    );
    let out = match out.status.success() {
        true => out,
        false => common::run_cli_in(
            None,
            &[
                "pki",
                "issue",
                "--dir",
                c.pki.to_str().unwrap(),
                "--name",
                "viewer",
                "--role",
                "client",
                "--read-only",
            ],
            None,
        ),
    };
    assert!(out.status.success(), "pki issue: {}", stderr(&out));
    let spec = c.dir.path().join("sec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"sec\"\n\
             secret_env = {{ DB_PASSWORD = \"{SECRET}\" }}\n\
             [process]\ncommand = [\"sh\", \"-c\", \"echo len=${{#DB_PASSWORD}} \
             sum=$(printf %s \\\"$DB_PASSWORD\\\" | sha256sum | cut -c1-16); exec sleep 86421\"]\n\
             env = {{ MODE = \"test\" }}\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
        ),
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap(), "--wait"]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains(SECRET));

    // The instance has the value: its output says its length and a hash prefix.
    let want_sum = {
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("printf %s '{SECRET}' | sha256sum | cut -c1-16"),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let mut logs = String::new();
    let seen = wait_until(Duration::from_secs(20), || {
        logs = String::from_utf8_lossy(&c.cli(0, &["logs", "sec/0"]).stdout).into_owned();
        logs.contains(&format!("len={} sum={want_sum}", SECRET.len()))
    });
    assert!(seen, "the instance sees the secret: {logs}");

    // Every read, as the read-only client and as the write client: no value anywhere.
    let reads: &[&[&str]] = &[
        &["get"],
        &["get", "-o", "json"],
        &["get", "sec"],
        &["get", "sec", "-o", "json"],
        &["get", "sec", "--spec"],
        &["status", "sec"],
        &["status", "sec", "-o", "json"],
        &["history", "sec"],
        &["history", "sec", "-o", "json"],
        &["events"],
        &["events", "-o", "json"],
        &["issues", "-o", "json"],
        &["nodes", "-o", "json"],
    ];
    for who in [Some("viewer"), None] {
        for read in reads {
            let mut args: Vec<&str> = read.to_vec();
            if let Some(name) = who {
                args.extend(["--client-name", name]);
            }
            let out = c.cli(0, &args);
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
            assert!(!text.contains(SECRET), "{args:?} shows the secret:\n{text}");
        }
    }
    let spec_text =
        String::from_utf8_lossy(&c.cli(0, &["get", "sec", "--spec"]).stdout).into_owned();
    assert!(
        spec_text.contains("DB_PASSWORD = \"<secret>\""),
        "the name stays, the value is replaced: {spec_text}"
    );

    // --show-secrets: refused to the read-only client, shown to the write client and recorded.
    let out = c.cli(
        0,
        &[
            "get",
            "sec",
            "--spec",
            "--show-secrets",
            "--client-name",
            "viewer",
        ],
    );
    assert!(!out.status.success(), "a read-only client read the secrets");
    assert!(stderr(&out).contains("read-only"), "{}", stderr(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains(SECRET));
    let out = c.cli(0, &["get", "sec", "--spec", "--show-secrets"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(SECRET));
    let recorded = wait_until(Duration::from_secs(10), || {
        String::from_utf8_lossy(&c.cli(0, &["events", "-o", "json"]).stdout)
            .contains("show-secrets")
    });
    assert!(recorded, "a show-secrets event");

    // scale keeps the value (it reads it back to apply the spec again).
    let out = c.cli(0, &["scale", "sec", "2"]);
    assert!(out.status.success(), "scale: {}", stderr(&out));
    let out = c.cli(0, &["get", "sec", "--spec", "--show-secrets"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(SECRET) && text.contains("replicas = 2"),
        "{text}"
    );

    // The agents' own logs never carry it.
    assert!(!c.logs().contains(SECRET), "an agent logged the secret");
}
