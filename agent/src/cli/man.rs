//! `shoal man --dir DIR`: manual pages generated from the command line's definition.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;

/// Arguments of `shoal man`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal man --dir /usr/local/share/man/man1\n  \
    shoal man --dir /tmp/man && man -l /tmp/man/shoal-agent.1"
)]
pub struct Args {
    /// Where to write the pages (created if missing): shoal.1 and one page per subcommand
    /// (shoal-agent.1, shoal-pki-issue.1, ...).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
}

/// Writes the manual pages of `C` into `args.dir` and prints each path written.
pub fn run<C: CommandFactory>(args: Args) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating --dir {}", args.dir.display()))?;
    clap_mangen::generate_to(C::command(), &args.dir)
        .with_context(|| format!("writing manual pages into {}", args.dir.display()))?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&args.dir)
        .with_context(|| format!("listing {}", args.dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.extension().is_some_and(|e| e == "1")
                && path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n == "shoal.1" || n.starts_with("shoal-"))
        })
        .collect();
    pages.sort();
    for page in pages {
        println!("{}", page.display());
    }
    Ok(ExitCode::SUCCESS)
}
