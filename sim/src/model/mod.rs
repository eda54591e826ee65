//! The model tier: a plain discrete-event loop (a heap of events, one seeded ChaCha generator,
//! no tokio, no chitchat) for meshes of ten thousand hosts, driving the same placement and
//! reconcile core as the agent: the real `PlacementEngine` (once per distinct view) and one real
//! `shoal_core::reconcile::Reconciler` per host, behind a shell of its own (`shell.rs`) on a
//! fake runtime that behaves as `MemRuntime`.
//!
//! Gossip is a delay model calibrated on the real-code tier (`delays.rs`, docs/sim.md): an
//! observer learns of a crash after `detect_base + detect_per_log2 * log2(N) + U(0,
//! detect_spread)`, of a host's return after the join time plus the same spread, of a spec epoch
//! within `spec_spread`; a host's published observed state reaches the others `report_ms` after
//! its round (`gossip.rs`). Each host's reconciler input is restricted to the replicas that
//! concern it (`input.rs`), so a round costs what the host's slice costs.
//!
//! A mesh of cells (`[mesh] cells`) is modelled as agents see it: two-level placement per view
//! (`views.rs`), deaths learned inside the cell only, other cells through news of cells held
//! down (`Delays::cell_down`), back up and republished summaries, and instances handed off to
//! another cell once a copy there serves (`input.rs`). Exclusive workloads in a mesh of cells
//! are refused (the copies questions between cells are not modelled).
//!
//! Modelled events: crashes, restarts, crash flaps and instance profile changes; the others
//! (partitions, pauses, links, clocks, spec changes after the scenario's initial applies, drains)
//! are listed as ignored. Probes always pass.

mod delays;
mod faults;
mod gossip;
mod input;
mod metrics;
mod run;
mod shell;
mod views;

use std::path::PathBuf;

use serde::Serialize;

use crate::check::stats::Dist;
pub use delays::Delays;
pub use run::simulate;

/// Command-line arguments of `shoal-sim model`.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// The scenario file (crash, restart, flap with mode crash and instance events are
    /// modelled; other events are listed as ignored).
    pub scenario: PathBuf,
    /// Hosts (default: the scenario's).
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Scale every workload's replicas by this factor (to keep load per host at a larger size).
    #[arg(long, default_value_t = 1.0)]
    pub replicas_scale: f64,
    /// The seed (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Prints the JSON report as the last line of stdout.
    #[arg(long)]
    pub json: bool,
}

/// What the model tier measured.
#[derive(Clone, Debug, Serialize)]
pub struct ModelReport {
    /// Scenario name.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Hosts.
    pub nodes: u32,
    /// Replicas desired at the end.
    pub replicas: u64,
    /// Crash to "dead" at each observer.
    pub detection: Dist,
    /// Crash to "dead" at every observer.
    pub detection_all: Dist,
    /// Replicas of crashed hosts: crash to a running copy elsewhere (normal and exclusive).
    pub replacement: Dist,
    /// p99 of that (the headline figure, as in the real tier).
    pub replacement_p99_ms: Option<u64>,
    /// The same for exclusive replicas only (they wait for the fencing delay).
    pub replacement_exclusive: Dist,
    /// Of all replacements, those of hosts whose cell (or mesh) survived the crash.
    pub replacement_host: Dist,
    /// Of all replacements, those of cells lost whole (to other cells).
    pub replacement_cell_lost: Dist,
    /// Replicas of crashed hosts still desired and without a copy at the end.
    pub unreplaced: u64,
    /// Membership changes.
    pub membership_changes: u64,
    /// Replica moves they caused (placement diff).
    pub moves: u64,
    /// Moves of replicas whose host left.
    pub forced_moves: u64,
    /// Starts executed (churn).
    pub starts: u64,
    /// Stops executed.
    pub stops: u64,
    /// Times a copy of an exclusive replica became ready while another copy was alive.
    pub exclusive_duplicates: u64,
    /// Replicas desired at the end with no alive copy.
    pub missing_at_end: u64,
    /// Time from the end of the last fault to the last start, stop or ready copy (0 when nothing
    /// happened after it).
    pub converged_after_last_fault_ms: Option<u64>,
    /// Reconcile rounds run (all hosts).
    pub rounds: u64,
    /// Events processed.
    pub events: u64,
    /// Events ignored (not modelled).
    pub ignored: Vec<String>,
    /// Wall-clock seconds.
    pub wall_seconds: f64,
    /// Simulated seconds.
    pub sim_seconds: f64,
}

/// Runs the model tier and prints the report.
pub fn main(args: ModelArgs) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(&args.scenario)?;
    let mut sc = crate::scenario::parse_scenario(&text, &args.scenario.display().to_string())?;
    if let Some(w) = sc.workloads.iter().find(|w| w.spec.placement.exclusive) {
        if sc.mesh.cells > 0 {
            anyhow::bail!(
                "{}: workload {} is exclusive in a mesh of {} cells: the model tier does not \
                 model the copies questions between cells that exclusive replicas wait for; run \
                 it in the real-code tier: shoal-sim run {}",
                args.scenario.display(),
                w.spec.name,
                sc.mesh.cells,
                args.scenario.display()
            );
        }
    }
    if let Some(n) = args.nodes {
        sc.mesh.nodes = n;
    }
    for w in &mut sc.workloads {
        w.spec.replicas =
            ((f64::from(w.spec.replicas) * args.replicas_scale).round() as u32).max(1);
    }
    let seed = args.seed.unwrap_or(sc.seed);
    let wall = std::time::Instant::now();
    let mut report = simulate(&sc, seed, &Delays::default());
    report.wall_seconds = (wall.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    let summary = format!(
        "model {} seed {seed}: {} hosts, {} replicas, {:.0} sim s in {:.2} wall s\n  \
         detection (per observer): {}\n  detection (all observers): {}\n  replacement: {}\n  \
         replacement after a host crash: {}\n  replacement of a lost cell: {}\n  \
         moves {} ({} forced) over {} membership changes; starts {}, stops {}\n  \
         exclusive duplicates {}, unreplaced {}, missing at the end {}; {} rounds\n  \
         converged after the last fault: {}; ignored events: {}\n",
        report.scenario,
        report.nodes,
        report.replicas,
        report.sim_seconds,
        report.wall_seconds,
        report.detection.show(),
        report.detection_all.show(),
        report.replacement.show(),
        report.replacement_host.show(),
        report.replacement_cell_lost.show(),
        report.moves,
        report.forced_moves,
        report.membership_changes,
        report.starts,
        report.stops,
        report.exclusive_duplicates,
        report.unreplaced,
        report.missing_at_end,
        report.rounds,
        crate::check::stats::show_ms(report.converged_after_last_fault_ms),
        if report.ignored.is_empty() {
            "none".to_string()
        } else {
            report.ignored.join(", ")
        }
    );
    if args.json {
        eprint!("{summary}");
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{summary}");
    }
    Ok(0)
}
