//! Golden cases for the cell level, as text fixtures: every `NAME.cells` in
//! `tests/fixtures/cells/` has a `NAME.expected` beside it with the placement it must give, bit
//! for bit. If one changes, the cell-level algorithm changed: say why in the commit.
//!
//! Input lines (`#` starts a comment):
//! - `cell NAME cap=CORES/GIB [members=N] [largest=CORES/GIB] [free=CORES/GIB]
//!   [zones=Z:CORES/GIB,...] [labels=KEY=VALUE:CORES/GIB,...] [down]`; members default to 10,
//!   largest to a tenth of the capacity, free to half of it.
//! - `workload ID replicas=N req=MILLICORES/MIB [spread=zone] [priority=P] [runtime=KIND] [root]
//!   [algorithm=A] [| CONSTRAINT]...`; the needs (`runtime`, `root`) are judged by the cell level
//!   as placement algorithm 9 judges them (`cell_level_needs`), unless `algorithm` is below 9.
//!   What a cell's members lack is in its labels: `labels=shoal:lacks:process=yes:CORES/GIB`.
//!
//! Output: one line per replica, `workload/index cell` (with ` unsure` when the summaries say the
//! cell has no room or does not offer what it asks), `workload/index ! reason`, then the home
//! zones of zone-spread workloads and the rejected inputs.
//!
//! To accept new output after a deliberate change, run
//! `UPDATE_EXPECT=1 cargo test -p shoal-core --test cells_golden` and review the diff.
#![allow(
    clippy::disallowed_methods,
    reason = "the test reads and (with UPDATE_EXPECT) writes its fixtures; the no-I/O rule is for the library"
)]

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use shoal_core::cells::{place_cells, Cell, CellSummary, LabelOffer, ZoneOffer};
use shoal_core::constraint::Constraint;
use shoal_core::placement::{Runtime, Spread, Workload};
use shoal_core::resources::Resources;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cells")
}

/// `CORES/GIB` as resources.
fn cores_gib(text: &str) -> Resources {
    let (c, g) = text.split_once('/').expect("CORES/GIB");
    Resources::new(
        c.parse::<u64>().unwrap() * 1000,
        g.parse::<u64>().unwrap() * GIB,
    )
}

/// `NAME:CORES/GIB` pairs, comma-separated.
fn offers(text: &str) -> Vec<(String, Resources)> {
    text.split(',')
        .map(|o| {
            let (name, cap) = o.rsplit_once(':').expect("NAME:CORES/GIB");
            (name.to_string(), cores_gib(cap))
        })
        .collect()
}

fn cell(words: &[&str]) -> Cell {
    let mut s = CellSummary {
        cell: words[0].to_string(),
        version: 1,
        members: 10,
        capacity: Resources::default(),
        largest: Resources::default(),
        free: Resources::default(),
        zones: Vec::new(),
        labels: Vec::new(),
        contacts: vec![format!("{}.envoy:7100", words[0])],
        sees: Vec::new(),
    };
    let (mut largest, mut free, mut down) = (None, None, false);
    for w in &words[1..] {
        match w.split_once('=') {
            Some(("cap", v)) => s.capacity = cores_gib(v),
            Some(("members", v)) => s.members = v.parse().unwrap(),
            Some(("largest", v)) => largest = Some(cores_gib(v)),
            Some(("free", v)) => free = Some(cores_gib(v)),
            Some(("zones", v)) => {
                s.zones = offers(v)
                    .into_iter()
                    .map(|(zone, capacity)| ZoneOffer { zone, capacity })
                    .collect()
            }
            Some(("labels", v)) => {
                s.labels = offers(v)
                    .into_iter()
                    .map(|(kv, capacity)| {
                        let (key, value) = kv.split_once('=').expect("KEY=VALUE");
                        LabelOffer {
                            key: key.into(),
                            value: value.into(),
                            capacity,
                        }
                    })
                    .collect()
            }
            None if *w == "down" => down = true,
            _ => panic!("unknown cell field {w:?}"),
        }
    }
    let tenth = Resources::new(s.capacity.cpu_millis / 10, s.capacity.memory_bytes / 10);
    s.largest = largest.unwrap_or(tenth);
    s.free = free.unwrap_or(Resources::new(
        s.capacity.cpu_millis / 2,
        s.capacity.memory_bytes / 2,
    ));
    Cell { summary: s, down }
}

fn workload(line: &str) -> Workload {
    let mut parts = line.split('|');
    let words: Vec<&str> = parts.next().unwrap().split_whitespace().collect();
    let mut w = Workload {
        id: words[0].to_string(),
        replicas: 1,
        request: Resources::default(),
        spread: Spread::Node,
        constraints: parts
            .map(|c| Constraint::parse(c.trim()).expect("valid constraint"))
            .collect(),
        exclusive: false,
        priority: 0,
        sticky: Default::default(),
        needs: Default::default(),
        yields_when_short: false,
        yields_unplaced: false,
        cell_level_needs: true,
        ports_exclusive: false,
    };
    for word in &words[1..] {
        match word.split_once('=') {
            Some(("replicas", v)) => w.replicas = v.parse().unwrap(),
            Some(("req", v)) => {
                let (c, m) = v.split_once('/').expect("MILLICORES/MIB");
                w.request = Resources::new(c.parse().unwrap(), m.parse::<u64>().unwrap() * MIB);
            }
            Some(("spread", "zone")) => w.spread = Spread::Zone,
            Some(("priority", v)) => w.priority = v.parse().unwrap(),
            Some(("runtime", "process")) => w.needs.runtime = Some(Runtime::Process),
            Some(("runtime", "container")) => w.needs.runtime = Some(Runtime::Container),
            Some(("algorithm", v)) => w.cell_level_needs = v.parse::<u32>().unwrap() >= 9,
            None if *word == "root" => w.needs.root = true,
            _ => panic!("unknown workload field {word:?}"),
        }
    }
    w
}

/// The placement of a fixture, as text.
fn outcome(text: &str) -> String {
    let (mut cells, mut workloads) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let line = line.split('#').next().unwrap().trim();
        if let Some(rest) = line.strip_prefix("cell ") {
            cells.push(cell(&rest.split_whitespace().collect::<Vec<_>>()));
        } else if let Some(rest) = line.strip_prefix("workload ") {
            workloads.push(workload(rest));
        } else {
            assert!(line.is_empty(), "unknown line {line:?}");
        }
    }
    let p = place_cells(&cells, &workloads);
    // The same inputs in another order give the same placement.
    cells.reverse();
    workloads.reverse();
    assert_eq!(
        place_cells(&cells, &workloads),
        p,
        "order changed the placement"
    );
    let mut out = String::new();
    for (r, c) in &p.assigned {
        let unsure = if p.unsure.contains(&r) { " unsure" } else { "" };
        writeln!(out, "{r} {c}{unsure}").unwrap();
    }
    for (r, why) in &p.unschedulable {
        writeln!(out, "{r} ! {why}").unwrap();
    }
    for (w, zones) in &p.home_zones {
        writeln!(out, "home {w}: {}", zones.join(" ")).unwrap();
    }
    for e in &p.rejected {
        writeln!(out, "rejected: {e}").unwrap();
    }
    out
}

#[test]
fn every_fixture_matches_its_expectation() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some_and(|v| v != "0");
    let mut inputs: Vec<PathBuf> = fs::read_dir(fixtures_dir())
        .expect("fixtures directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "cells"))
        .collect();
    inputs.sort();
    let mut failures = Vec::new();
    for input in &inputs {
        let actual = outcome(&fs::read_to_string(input).unwrap());
        let expected_path = input.with_extension("expected");
        if update {
            fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        match fs::read_to_string(&expected_path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "{}: output differs\n--- expected\n{expected}--- actual\n{actual}",
                input.display()
            )),
            Err(_) => failures.push(format!("{}: no expectation\n{actual}", input.display())),
        }
    }
    assert!(inputs.len() >= 6, "only {} fixtures found", inputs.len());
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed (UPDATE_EXPECT=1 accepts the new output):\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}
