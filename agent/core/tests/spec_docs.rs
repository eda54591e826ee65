//! Every example in docs/spec.md is a complete, valid spec: the documentation cannot drift from
//! the validator.
#![allow(
    clippy::disallowed_methods,
    reason = "the test reads docs/spec.md; the no-I/O rule is for the library"
)]

use shoal_core::spec::WorkloadSpec;

/// The fenced blocks of `lang` in `markdown`, with the line each starts on.
fn blocks(markdown: &str, lang: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        match current.as_mut() {
            None if line.trim_start() == format!("```{lang}") => {
                current = Some((i + 2, String::new()))
            }
            Some(_) if line.trim_start() == "```" => out.extend(current.take()),
            Some((_, text)) => {
                text.push_str(line);
                text.push('\n');
            }
            None => {}
        }
    }
    assert!(current.is_none(), "an unterminated ```{lang} block");
    out
}

#[test]
fn every_example_in_the_spec_docs_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/spec.md");
    let markdown = std::fs::read_to_string(path).expect("docs/spec.md");
    let toml = blocks(&markdown, "toml");
    let json = blocks(&markdown, "json");
    assert!(toml.len() >= 8, "only {} toml examples", toml.len());
    assert!(!json.is_empty());
    let mut failures = Vec::new();
    for (line, text) in &toml {
        if let Err(e) =
            WorkloadSpec::from_toml_str(text, &format!("docs/spec.md block at line {line}"))
        {
            failures.push(e.to_string());
        }
    }
    for (line, text) in &json {
        if let Err(e) =
            WorkloadSpec::from_json_str(text, &format!("docs/spec.md block at line {line}"))
        {
            failures.push(e.to_string());
        }
    }
    assert!(
        failures.is_empty(),
        "invalid examples:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_text_blocks_show_real_messages() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/spec.md");
    let markdown = std::fs::read_to_string(path).expect("docs/spec.md");
    let shown = &blocks(&markdown, "text")[0].1;
    let text = "name = \"web\"\nreplica = 2\n[process]\ncommand = [\"web\"]\n\n[resources]\ncpu = \"fast\"\nmemory = \"64Mi\"\n\n[placement]\nspread = \"rack\"\n";
    let errors = WorkloadSpec::from_toml_str(text, "web.toml").unwrap_err();
    assert_eq!(&format!("{errors}\n"), shown);
}
