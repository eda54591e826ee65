//! `shoal-sim`: runs scenarios against real agents on a simulated network (see docs/sim.md).
//!
//! One simulation per process: `--seeds A..B` runs each seed in a child process of this binary.

mod entropy;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use shoal_sim::report::{self, Report};
use shoal_sim::scenario::{parse_scenario, Scenario};
use shoal_sim::world::World;

#[derive(Parser)]
#[command(name = "shoal-sim", version, about = "Shoal's chaos simulator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a scenario on one seed (in this process) or on a range of seeds (one child each).
    Run {
        /// The scenario file.
        scenario: PathBuf,
        /// The seed (default: the scenario's).
        #[arg(long, conflicts_with = "seeds")]
        seed: Option<u64>,
        /// A range of seeds, `A..B` (B excluded), each run in its own process.
        #[arg(long)]
        seeds: Option<String>,
        /// Writes the JSON report, the timeline SVG and the trace here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Prints the JSON report as the last line of stdout.
        #[arg(long)]
        json: bool,
    },
    /// Checks scenario files and reports every problem with its location.
    Check {
        /// Scenario files.
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
    },
    /// Runs the model tier (discrete events, no tokio) on a scenario, at any size.
    Model(shoal_sim::model::ModelArgs),
    /// Swarm testing: derives a whole scenario from the seed (mesh, workloads, timing, a random
    /// fault schedule) and runs it with the liveness phase.
    Swarm {
        /// The seed: it fixes the scenario and the run.
        #[arg(long)]
        seed: u64,
        /// Prints the derived scenario TOML and exits (save a failing seed with it).
        #[arg(long)]
        print_scenario: bool,
        /// Writes the JSON report, the timeline SVG and the trace here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Prints the JSON report as the last line of stdout.
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    let code = match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shoal-sim: {e:#}");
            2
        }
    };
    std::process::exit(code);
}

fn load(path: &Path) -> anyhow::Result<Scenario> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_scenario(&text, &path.display().to_string())?)
}

fn real_main() -> anyhow::Result<i32> {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { scenarios } => {
            let mut bad = 0;
            for path in &scenarios {
                match load(path) {
                    Ok(sc) => println!(
                        "{}: ok ({} hosts, {} events)",
                        path.display(),
                        sc.mesh.nodes,
                        sc.events.len()
                    ),
                    Err(e) => {
                        bad += 1;
                        eprintln!("{e:#}");
                    }
                }
            }
            Ok(i32::from(bad > 0))
        }
        Command::Model(args) => shoal_sim::model::main(args),
        Command::Swarm {
            seed,
            print_scenario,
            out,
            json,
        } => {
            let text = shoal_sim::swarm::scenario_text(seed);
            if print_scenario {
                print!("{text}");
                return Ok(0);
            }
            let sc = parse_scenario(&text, &format!("swarm seed {seed}"))?;
            let replay = format!("shoal-sim swarm --seed {seed}");
            run_one(sc, seed, out.as_deref(), json, replay)
        }
        Command::Run {
            scenario,
            seeds: Some(range),
            out,
            json,
            ..
        } => {
            let sc = load(&scenario)?;
            shoal_sim::seeds::run_many(&scenario, &sc, &range, out.as_deref(), json)
        }
        Command::Run {
            scenario,
            seed,
            seeds: None,
            out,
            json,
        } => {
            let sc = load(&scenario)?;
            let seed = seed.unwrap_or(sc.seed);
            let replay = format!("shoal-sim run {} --seed {seed}", scenario.display());
            run_one(sc, seed, out.as_deref(), json, replay)
        }
    }
}

/// One simulation in this process, on its own thread with its own entropy stream.
fn run_one(
    sc: Scenario,
    seed: u64,
    out: Option<&Path>,
    json: bool,
    replay: String,
) -> anyhow::Result<i32> {
    entropy::reseed(seed);
    entropy::check().map_err(|e| anyhow::anyhow!("the entropy override is not in effect: {e}"))?;
    let progress_ms = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    // A result per 4 agents at the cell level and per 2 at the node level (the defaults up to
    // 128 and 512 hosts): while 5,000 agents form a mesh of cells, hundreds of their views stand
    // at once (docs/measurements.md, the fourth pass at 5,000 agents); at 10,000 in 100 cells,
    // one per 20 let the checker's sample, 100 ms after an agent placed its new view, find it
    // evicted by the views placed since ("The real tier at 10,000 agents, a first look").
    let hosts = sc.mesh.nodes as usize;
    let memo = Arc::new(shoal_core::cells::PlacementMemo::with_capacity(
        hosts / 4,
        hosts / 2,
    ));
    let bar = spawn_progress(&sc, progress_ms.clone(), done.clone(), memo.clone());
    let wall = std::time::Instant::now();
    let p = progress_ms.clone();
    let sim = std::thread::Builder::new()
        .name("shoal-sim-run".into())
        .stack_size(256 << 20)
        .spawn(move || -> anyhow::Result<Report> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()?;
            rt.block_on(async move {
                let mut world = World::new(sc, seed);
                world.share_placement_memo(memo);
                world.run(&|ms| p.store(ms, Ordering::Relaxed)).await;
                Ok(report::build(&world, 0.0, replay))
            })
        })?;
    let mut report = sim
        .join()
        .map_err(|_| anyhow::anyhow!("the simulation panicked"))??;
    done.store(true, Ordering::Relaxed);
    if let Some(bar) = bar {
        let _ = bar.join();
    }
    report.wall_seconds = (wall.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    report.sim_per_wall =
        (report.sim_seconds / report.wall_seconds.max(1e-9) * 10.0).round() / 10.0;
    if let Some(dir) = out {
        write_outputs(dir, &report)?;
    }
    let summary = report.summary();
    if json {
        eprint!("{summary}");
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{summary}");
    }
    std::io::stdout().flush()?;
    Ok(i32::from(!report.passed))
}

fn write_outputs(dir: &Path, report: &Report) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stem = format!("{}-seed{}", report.scenario, report.seed);
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(dir.join(format!("{stem}.json")), &json)?;
    // The page, per seed and as `report.html` (the last run written to the directory).
    let page = report::html_page(report, &json);
    std::fs::write(dir.join(format!("{stem}.html")), &page)?;
    std::fs::write(dir.join("report.html"), &page)?;
    std::fs::write(
        dir.join(format!("{stem}.svg")),
        report::timeline_svg(report),
    )?;
    std::fs::write(
        dir.join(format!("{stem}.series.json")),
        serde_json::to_string(&report.series)?,
    )?;
    std::fs::write(
        dir.join(format!("{stem}.trace.txt")),
        report.trace.join("\n") + "\n",
    )?;
    Ok(())
}

/// The progress bar, on its own thread (its entropy stream is its own), only on a terminal.
fn spawn_progress(
    sc: &Scenario,
    ms: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    memo: Arc<shoal_core::cells::PlacementMemo>,
) -> Option<std::thread::JoinHandle<()>> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let total = sc.duration_ms;
    let name = sc.name.clone();
    std::thread::Builder::new()
        .name("progress".into())
        .spawn(move || {
            let bar = indicatif::ProgressBar::new(total / 1000);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:40}] {pos}/{len} sim s ({elapsed})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(name.clone());
            while !done.load(Ordering::Relaxed) {
                bar.set_position(ms.load(Ordering::Relaxed) / 1000);
                // What the agents' placements cost so far: the cell level and the node level
                // computed, of what was asked (`shoal_core::cells::PlacementMemo`).
                let m = memo.stats();
                if m.cell_hits + m.cell_misses + m.node_hits + m.node_misses > 0 {
                    bar.set_message(format!(
                        "{name} (placed: cell level {}/{}, node level {}/{})",
                        m.cell_misses,
                        m.cell_hits + m.cell_misses,
                        m.node_misses,
                        m.node_hits + m.node_misses
                    ));
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            bar.finish_and_clear();
        })
        .ok()
}
