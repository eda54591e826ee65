//! Imports run one way (docs/ARCHITECTURE.md, "Layers"): in `agent/src`, `agent/core/src` and
//! `sim/src`, the modules of every folder form a DAG, and no circle runs through a folder.
//!
//! A module is a file or a folder; an edge is a `crate::...` path (or `shoal::...` in the shell,
//! `super::...` resolved) outside comments, from the file that writes it to the module it names,
//! counted at the folder where the two first part. At a crate's root no circle is allowed at
//! all; below it, sibling files of one folder may import each other (one algorithm's parts), but
//! a circle through a folder (a directory with its own `mod.rs`) may not; a file split into parts
//! (`accept.rs` beside `accept/`) counts as a file. A failure names every edge of the circle with
//! the two files.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module: its path from the crate root (`["state", "mesh", "node"]`), empty for the root.
type ModPath = Vec<String>;

/// One crate's source tree: every module and whether it is a folder.
struct Tree {
    root: PathBuf,
    /// Module path -> is a folder (a directory with a `mod.rs`).
    modules: BTreeMap<ModPath, bool>,
    /// Module path of each source file.
    files: Vec<(PathBuf, ModPath)>,
}

fn scan(root: &Path) -> Tree {
    let mut tree = Tree {
        root: root.to_path_buf(),
        modules: BTreeMap::new(),
        files: Vec::new(),
    };
    tree.modules.insert(Vec::new(), true);
    walk(root, &mut Vec::new(), &mut tree);
    tree
}

fn walk(dir: &Path, at: &mut ModPath, tree: &mut Tree) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            at.push(name);
            tree.modules
                .insert(at.clone(), path.join("mod.rs").exists());
            walk(&path, at, tree);
            at.pop();
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let module = if matches!(stem, "mod" | "lib" | "main") {
                at.clone()
            } else {
                let mut m = at.clone();
                m.push(stem.to_string());
                tree.modules.entry(m.clone()).or_insert(false); // `x.rs` beside `x/`: a file
                m
            };
            tree.files.push((path, module));
        }
    }
}

/// The text without `//` comments (doc comments included) and `/* */` blocks.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            rest = &rest[end..];
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |i| i + 2);
            rest = &rest[end..];
        } else if rest.starts_with('"') {
            // Skip string literals, so a "//" inside one does not start a comment.
            let bytes = rest.as_bytes();
            let mut i = 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            let end = (i + 1).min(rest.len());
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path a file names from `prefixes` (`crate`, `shoal`, `super`), with `{a, b::c}` groups
/// expanded one level, as segments after the prefix word.
fn named_paths(code: &str, prefixes: &[&str]) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for prefix in prefixes {
        let needle = format!("{prefix}::");
        let mut from = 0;
        while let Some(i) = code[from..].find(&needle) {
            let start = from + i;
            from = start + needle.len();
            if code[..start].chars().next_back().is_some_and(is_ident) {
                continue; // `shoal_core::`, `my_crate::`
            }
            let mut supers = 0;
            let mut rest = &code[from..];
            if *prefix == "super" {
                supers = 1;
                while let Some(r) = rest.strip_prefix("super::") {
                    supers += 1;
                    rest = r;
                }
            }
            let head = if *prefix == "super" {
                format!("super{supers}")
            } else {
                prefix.to_string()
            };
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for part in group[..end].split(',') {
                    found.push((head.clone(), segments(part.trim())));
                }
            } else {
                found.push((head, segments(rest)));
            }
        }
    }
    found
}

/// `a::b::Name...` -> `["a", "b", "Name"]`, stopping at the first non-path character.
fn segments(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(r) if r.starts_with(|c: char| is_ident(c)) => rest = r,
            _ => break,
        }
    }
    out
}

/// The longest module path that `named` starts with.
fn resolve(tree: &Tree, named: &[String]) -> ModPath {
    let mut best = Vec::new();
    for len in 1..=named.len() {
        if tree.modules.contains_key(&named[..len]) {
            best = named[..len].to_vec();
        } else {
            break;
        }
    }
    best
}

/// An edge counted at a folder: from one child of it to another, with the files that make it.
type Edges = BTreeMap<ModPath, BTreeMap<(String, String), BTreeSet<(String, String)>>>;

fn edges(tree: &Tree, prefixes: &[&str]) -> Edges {
    let mut edges: Edges = BTreeMap::new();
    for (file, from) in &tree.files {
        let text = fs::read_to_string(file).expect("read source");
        for (head, named) in named_paths(&strip_comments(&text), prefixes) {
            let to = if let Some(n) = head.strip_prefix("super") {
                let n: usize = n.parse().unwrap();
                // `super` is the module's parent: a folder's mod.rs is the folder's module.
                let up = n;
                if up > from.len() {
                    continue;
                }
                let mut base = from[..from.len() - up].to_vec();
                base.extend(named);
                resolve(tree, &base)
            } else {
                resolve(tree, &named)
            };
            // The folder where the two part, and the child of it on each side.
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common >= from.len() || common >= to.len() {
                continue; // one contains the other
            }
            let rel = |p: &Path| {
                p.strip_prefix(&tree.root)
                    .unwrap_or(p)
                    .display()
                    .to_string()
            };
            edges
                .entry(from[..common].to_vec())
                .or_default()
                .entry((from[common].clone(), to[common].clone()))
                .or_default()
                .insert((rel(file), to.join("::")));
        }
    }
    edges
}

/// Strongly connected components of more than one node (Tarjan, iterative enough for a folder).
fn circles(nodes: &BTreeSet<String>, arrows: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let next = |n: &String| -> Vec<String> {
        arrows
            .iter()
            .filter(|(a, _)| a == n)
            .map(|(_, b)| b.clone())
            .collect()
    };
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for m in next(&n) {
                if seen.insert(m.clone()) {
                    stack.push(m);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<String, BTreeSet<String>> =
        nodes.iter().map(|n| (n.clone(), reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in nodes {
        if done.contains(n) {
            continue;
        }
        let scc: Vec<String> = nodes
            .iter()
            .filter(|m| *m == n || (reached[n].contains(*m) && reached[*m].contains(n)))
            .cloned()
            .collect();
        done.extend(scc.iter().cloned());
        if scc.len() > 1 {
            out.push(scc);
        }
    }
    out
}

/// Every circle the rules forbid in one crate, described.
fn violations(root: &Path, prefixes: &[&str]) -> Vec<String> {
    let tree = scan(root);
    let mut found = Vec::new();
    for (folder, level) in edges(&tree, prefixes) {
        let arrows: BTreeSet<(String, String)> = level.keys().cloned().collect();
        let nodes: BTreeSet<String> = arrows
            .iter()
            .flat_map(|(a, b)| [a.clone(), b.clone()])
            .collect();
        for scc in circles(&nodes, &arrows) {
            let is_folder = |child: &String| {
                let mut p = folder.clone();
                p.push(child.clone());
                tree.modules.get(&p).copied().unwrap_or(false)
            };
            if !folder.is_empty() && !scc.iter().any(is_folder) {
                continue; // sibling files of one folder
            }
            let mut text = format!(
                "{}/{}: a circle between {}:",
                root.display(),
                folder.join("/"),
                scc.join(", ")
            );
            for ((a, b), uses) in &level {
                if scc.contains(a) && scc.contains(b) {
                    for (file, target) in uses {
                        text.push_str(&format!("\n  {a} -> {b}: {file} names {target}"));
                    }
                }
            }
            found.push(text);
        }
    }
    found
}

fn crate_dir(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

#[test]
fn the_shell_imports_one_way() {
    let found = violations(&crate_dir("src"), &["crate", "shoal", "super"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_core_imports_one_way() {
    let found = violations(&crate_dir("core/src"), &["crate", "super"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_simulator_imports_one_way() {
    let found = violations(&crate_dir("../sim/src"), &["crate", "super"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The checker itself: a made-up tree with a circle through a folder is caught and named, sibling
/// files that import each other are not, and neither is a path in a comment.
#[test]
fn a_back_arrow_is_named_with_its_files() {
    let dir = std::env::temp_dir().join(format!("shoal-layering-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    write("lib.rs", "pub mod low;\npub mod high;\n");
    write(
        "low/mod.rs",
        "pub mod a;\npub mod b;\n// crate::high::Thing in a comment\n",
    );
    write("low/a.rs", "use super::b::B;\npub struct A;\n");
    write("low/b.rs", "use super::a::A;\npub struct B;\n");
    write("high/mod.rs", "use crate::low::a::A;\npub struct Thing;\n");
    assert!(violations(&dir, &["crate", "super"]).is_empty());
    write(
        "low/b.rs",
        "use super::a::A;\nuse crate::{high::Thing};\npub struct B;\n",
    );
    let found = violations(&dir, &["crate", "super"]);
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("high -> low: high/mod.rs names low::a"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("low -> high: low/b.rs names high"),
        "{}",
        found[0]
    );
}
