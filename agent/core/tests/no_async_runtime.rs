//! The core is sans-IO: no async runtime among its normal dependencies, direct or transitive.
//!
//! Its direct normal dependencies come from its Cargo.toml (`[dependencies]` and every
//! `[target.*.dependencies]`); the rest of the graph from the workspace's Cargo.lock. The lock does
//! not say which edges are build dependencies, so those are walked too: an over-approximation
//! that can only make the test stricter. Dev-dependencies of the core (criterion, proptest) are
//! not walked: they never link into the library.
#![allow(
    clippy::disallowed_methods,
    reason = "the test reads Cargo.toml and Cargo.lock; the no-I/O rule is for the library"
)]

use std::collections::{BTreeMap, BTreeSet};

use toml::{Table, Value};

/// Crates that are, or bring, an executor or a reactor.
const ASYNC_RUNTIMES: &[&str] = &[
    "tokio",
    "tokio-uring",
    "async-std",
    "smol",
    "async-executor",
    "async-global-executor",
    "async-io",
    "futures-executor",
    "glommio",
    "monoio",
    "actix-rt",
    "embassy-executor",
];

/// The core's direct normal dependencies, by package name (a `package = "..."` rename counts
/// under the real name).
fn direct_dependencies(manifest: &Table) -> BTreeSet<String> {
    let mut tables: Vec<&Table> = manifest
        .get("dependencies")
        .and_then(Value::as_table)
        .into_iter()
        .collect();
    if let Some(targets) = manifest.get("target").and_then(Value::as_table) {
        tables.extend(
            targets
                .values()
                .filter_map(|t| t.get("dependencies").and_then(Value::as_table)),
        );
    }
    tables
        .into_iter()
        .flat_map(|t| t.iter())
        .map(|(key, spec)| {
            let renamed = spec.get("package").and_then(Value::as_str);
            renamed.unwrap_or(key).to_string()
        })
        .collect()
}

/// A string field of a lock entry, empty when absent.
fn field<'t>(package: &'t Table, key: &str) -> &'t str {
    package.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Every package (name, version) reachable from `roots` in the lock, with the chain of names that
/// reaches it.
fn reachable(lock: &Table, roots: &BTreeSet<String>) -> BTreeMap<(String, String), Vec<String>> {
    let packages: Vec<&Table> = lock
        .get("package")
        .and_then(Value::as_array)
        .expect("Cargo.lock has packages")
        .iter()
        .filter_map(Value::as_table)
        .collect();
    // A dependency is written "name", or "name version" (and a source) when several versions
    // are locked; edges are followed by name and, when given, version.
    let find = |dep: &str| -> Vec<&Table> {
        let mut parts = dep.split(' ');
        let name = parts.next().unwrap_or_default();
        let version = parts.next();
        packages
            .iter()
            .copied()
            .filter(|p| field(p, "name") == name)
            .filter(|p| version.is_none_or(|v| field(p, "version") == v))
            .collect()
    };
    let mut seen = BTreeMap::new();
    let mut queue: Vec<(String, Vec<String>)> =
        roots.iter().map(|r| (r.clone(), vec![r.clone()])).collect();
    while let Some((dep, chain)) = queue.pop() {
        for package in find(&dep) {
            let id = (
                field(package, "name").to_string(),
                field(package, "version").to_string(),
            );
            if seen.contains_key(&id) {
                continue;
            }
            seen.insert(id, chain.clone());
            let deps = package.get("dependencies").and_then(Value::as_array);
            for next in deps.into_iter().flatten().filter_map(Value::as_str) {
                let mut longer = chain.clone();
                longer.push(next.split(' ').next().unwrap_or_default().to_string());
                queue.push((next.to_string(), longer));
            }
        }
    }
    seen
}

/// The async runtimes among what `roots` pulls in, each with how it gets in.
fn runtimes_in(lock: &Table, roots: &BTreeSet<String>) -> Vec<String> {
    reachable(lock, roots)
        .into_iter()
        .filter(|((name, _), _)| ASYNC_RUNTIMES.contains(&name.as_str()))
        .map(|((name, version), chain)| format!("{name} {version} (via {})", chain.join(" -> ")))
        .collect()
}

fn read_toml(path: &str) -> Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.parse()
        .unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

#[test]
fn the_core_pulls_in_no_async_runtime() {
    let manifest = read_toml(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
    let lock = read_toml(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock"));
    let roots = direct_dependencies(&manifest);
    assert!(roots.contains("serde"), "read no dependencies: {roots:?}");
    let reached = reachable(&lock, &roots);
    assert!(
        reached.keys().any(|(name, _)| name == "serde_derive"),
        "the lock walk found too little: {:?}",
        reached.keys()
    );
    let found = runtimes_in(&lock, &roots);
    assert!(
        found.is_empty(),
        "shoal-core must stay sans-IO, but its dependencies bring an async runtime: {}. \
         Time and I/O are inputs to the core; the runtime belongs to the agent (agent/Cargo.toml)",
        found.join("; ")
    );
}

/// The check itself can fail: a runtime two levels down, behind a version-qualified edge and a
/// renamed target-specific dependency, is found.
#[test]
fn the_check_finds_a_runtime_deep_in_the_graph() {
    let manifest: Table = r#"
        [dependencies]
        serde = "1"
        [target.'cfg(unix)'.dependencies]
        net = { package = "netlib", version = "1" }
    "#
    .parse()
    .unwrap();
    let lock: Table = r#"
        [[package]]
        name = "serde"
        version = "1.0.0"
        [[package]]
        name = "netlib"
        version = "1.0.0"
        dependencies = ["reactor 2.0.0"]
        [[package]]
        name = "reactor"
        version = "1.0.0"
        [[package]]
        name = "reactor"
        version = "2.0.0"
        dependencies = ["tokio"]
        [[package]]
        name = "tokio"
        version = "1.0.0"
    "#
    .parse()
    .unwrap();
    let roots = direct_dependencies(&manifest);
    assert_eq!(roots, ["netlib", "serde"].map(String::from).into());
    assert_eq!(
        runtimes_in(&lock, &roots),
        ["tokio 1.0.0 (via netlib -> reactor -> tokio)"]
    );
}
