//! What fits, said on real agents (issue 26): two process agents (4 CPU each) run `web`; `plan`
//! of a workload far too big says how much would fit and that no replica of `web` would move,
//! writing nothing; `apply` of it notes the same; `apply --wait` stops on the unplaceable
//! replicas instead of waiting out its timeout; `status` says it first; `web` keeps every replica
//! where it was, serving. And a fixed host port something else holds is seen by the agents'
//! probe: the workload that fixes it is unplaceable with the port named until it is freed.

mod common;

use std::time::{Duration, Instant};

use common::{stderr, wait_until, write_spec, Cluster};

fn big(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("big.toml");
    std::fs::write(
        &path,
        "name = \"big\"\nreplicas = 1000\n[process]\ncommand = [\"sleep\", \"3600\"]\n\
         [resources]\ncpu = \"1\"\nmemory = \"16Mi\"\n",
    )
    .unwrap();
    path
}

#[test]
fn a_workload_too_big_is_said_to_fit_in_part_and_moves_nothing_that_fits() {
    let mut c = Cluster::new();
    c.cleanup.push("sleep 3600".to_string());
    c.add("fit1");
    c.add("fit2");
    c.wait_members(2, Duration::from_secs(30));
    assert!(wait_until(Duration::from_secs(30), || {
        c.cli_json(0, &["upgrade", "status", "-o", "json"])["mesh_version"]
            == shoal_core::version::WIRE_CUR
    }));
    let dir = c.dir.path().to_path_buf();
    let web = write_spec(&dir, "web", 2);
    let out = c.cli(0, &["apply", "-f", web.to_str().unwrap(), "--wait"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let placed = |c: &Cluster| {
        let status = c.cli_json(0, &["status", "web", "-o", "json"]);
        let mut rows: Vec<(u64, String)> = status["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["phase"] == "running" && i["healthy"] == true)
            .map(|i| (i["replica"].as_u64().unwrap(), i["node"].to_string()))
            .collect();
        rows.sort();
        rows
    };
    let before = placed(&c);
    assert_eq!(before.len(), 2);

    // plan: nothing written, exit 1, how much fits, nothing of web moves.
    let big = big(&dir);
    let out = c.cli(0, &["plan", "-f", big.to_str().unwrap(), "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = &plan["workloads"][0];
    assert_eq!(w["change"], "create");
    let fit = w["fit"].as_str().unwrap();
    assert!(
        fit.starts_with("only ") && fit.contains("of 1000 replicas of big fit"),
        "{fit}"
    );
    assert!(fit.contains("lack CPU"), "{fit}");
    assert_eq!(plan["moves_count"], 0, "{plan}");
    assert_eq!(w["rows"].as_array().unwrap().len(), 1000);
    assert!(
        c.workloads(0).unwrap() == vec!["web".to_string()],
        "plan wrote nothing"
    );
    let out = c.cli(0, &["plan", "-f", web.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("web: unchanged") && text.contains("stays"),
        "{text}"
    );

    // apply: the note says it; --wait stops on it.
    let began = Instant::now();
    let out = c.cli(0, &["apply", "-f", big.to_str().unwrap(), "--wait"]);
    let waited = began.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("note: only "), "{said}");
    let err = stderr(&out);
    assert!(
        err.contains("not waiting for replicas no node can take"),
        "{err}"
    );
    assert!(
        waited < Duration::from_secs(30),
        "apply --wait took {waited:?}: it waited out its timeout"
    );
    let status = c.cli(0, &["status", "big"]);
    let text = String::from_utf8_lossy(&status.stdout);
    let second = text.lines().nth(1).unwrap_or_default();
    assert!(
        second.starts_with("only "),
        "the fit comes first: {text:.400}"
    );
    // `shoal issues`: one issue for the workload, not one per replica, on every agent asked,
    // with the same id.
    let mut ids = Vec::new();
    for i in 0..2 {
        let issues = c.cli_json(i, &["issues", "-o", "json"]);
        let mine: Vec<&serde_json::Value> = issues
            .as_array()
            .into_iter()
            .flatten()
            .filter(|x| x["kind"] == "unplaceable")
            .collect();
        assert_eq!(mine.len(), 1, "one unplaceable issue, for big: {issues}");
        let message = mine[0]["message"].as_str().unwrap();
        assert!(
            message.starts_with("only ") && message.contains("of 1000 replicas of big fit"),
            "{message}"
        );
        ids.push(mine[0]["id"].clone());
    }
    assert_eq!(ids[0], ids[1], "every agent names the issue alike");
    // web is where it was, serving.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(placed(&c), before, "{}", c.logs());
}

#[test]
fn a_fixed_port_something_else_holds_keeps_the_workload_off_until_freed() {
    let mut c = Cluster::new();
    c.cleanup.push("sleep 3601".to_string());
    c.add("port1");
    c.add("port2");
    c.wait_members(2, Duration::from_secs(30));
    // Something other than the mesh holds the port on this host (where both agents run).
    let holder = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let spec = c.dir.path().join("fixed.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"fixed\"\nreplicas = 1\n[process]\ncommand = [\"sleep\", \"3601\"]\n\
             ports = [{{ name = \"http\", port = {port} }}]\n\
             [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
        ),
    )
    .unwrap();
    let out = c.cli(0, &["apply", "-f", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let reason = |c: &Cluster| {
        let status = c.cli_json(0, &["status", "fixed", "-o", "json"]);
        status["instances"][0]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let needs = format!("needs host port {port}/tcp free");
    let seen = wait_until(Duration::from_secs(40), || reason(&c).contains(&needs));
    assert!(
        seen,
        "not unplaceable for the port: {:?}\n{}",
        reason(&c),
        c.logs()
    );
    drop(holder);
    let runs = wait_until(Duration::from_secs(40), || {
        c.serving_replicas(0, "fixed") == 1
    });
    assert!(runs, "not placed once the port was freed: {:?}", reason(&c));
}
