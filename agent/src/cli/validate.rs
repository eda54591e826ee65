//! `shoal validate -f FILE...`: checks spec files without contacting any agent.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use shoal_core::spec::{SpecErrors, WorkloadSpec, SPEC_BYTES_MAX};

use super::EXIT_FAILURE;

/// Arguments of `shoal validate`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal validate -f web.toml\n  shoal validate -f a.toml -f b.json\n  cat web.toml | shoal validate -f -"
)]
pub struct Args {
    /// Spec files, TOML or JSON (by extension, else by content); `-` reads standard input.
    #[arg(short = 'f', long = "file", value_name = "FILE", required = true, num_args = 1..)]
    files: Vec<PathBuf>,

    /// Print nothing for valid files.
    #[arg(short, long)]
    quiet: bool,
}

/// Validates every file, printing each valid one on stdout and every problem on stderr.
/// Exits 1 when any file is invalid or unreadable.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let mut invalid_files = 0usize;
    let mut problems = 0usize;
    for path in &args.files {
        match load(path) {
            Ok(spec) => {
                if !args.quiet {
                    let replicas = plural(spec.replicas as usize, "replica");
                    println!("{}: valid ({}, {replicas})", label(path), spec.name);
                }
            }
            Err(errors) => {
                invalid_files += 1;
                problems += errors.total();
                eprintln!("{errors}");
            }
        }
    }
    if invalid_files == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    let files = plural(args.files.len(), "file");
    eprintln!(
        "{} in {invalid_files} of {files}",
        plural(problems, "problem")
    );
    Ok(ExitCode::from(EXIT_FAILURE))
}

/// How a file is named in messages: as the user wrote it, or `<stdin>` for `-`.
fn label(path: &Path) -> String {
    match path.to_str() {
        Some("-") => "<stdin>".to_string(),
        _ => path.display().to_string(),
    }
}

/// Loads every file with [`load`], printing each file's problems on stderr; `None` when any file
/// had one (after all were read, so every problem is shown at once).
pub fn load_all(paths: &[std::path::PathBuf]) -> Option<Vec<WorkloadSpec>> {
    let mut specs = Vec::new();
    let mut invalid = false;
    for path in paths {
        match load(path) {
            Ok(spec) => specs.push(spec),
            Err(errors) => {
                invalid = true;
                eprintln!("{errors}");
            }
        }
    }
    (!invalid).then_some(specs)
}

/// Reads a spec file (at most one byte past the limit, so that an oversized or endless input is
/// reported rather than loaded) and validates it.
pub fn load(path: &Path) -> Result<WorkloadSpec, SpecErrors> {
    let label = label(path);
    let read = |reader: &mut dyn Read| -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        reader
            .take(SPEC_BYTES_MAX as u64 + 1)
            .read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    let bytes = if path.to_str() == Some("-") {
        read(&mut io::stdin().lock())
    } else {
        std::fs::File::open(path).and_then(|mut f| read(&mut f))
    };
    match bytes {
        Ok(bytes) => WorkloadSpec::from_bytes(&bytes, &label),
        Err(e) => Err(SpecErrors::single(&label, format!("cannot read: {e}"))),
    }
}
