//! How a bench over real agents starts and ends.

use std::future::Future;
use std::path::Path;

use anyhow::{bail, Context};

/// Fails unless the `shoal` binary the bench runs exists.
pub fn require_binary(shoal: &Path) -> anyhow::Result<()> {
    if !shoal.is_file() {
        bail!(
            "{} not found: run cargo build --release first (or pass --shoal PATH)",
            shoal.display()
        );
    }
    Ok(())
}

/// Runs `bench` of the agents of the binary `shoal` (which must exist) on a current-thread tokio
/// runtime until it ends or Ctrl-C interrupts it; either way what it started is dropped, which
/// stops every process it started.
pub fn run_bench<T>(
    shoal: &Path,
    bench: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    require_binary(shoal)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        tokio::select! {
            result = bench => result,
            _ = tokio::signal::ctrl_c() => bail!("interrupted (every process started was stopped)"),
        }
    })
}

/// Runs `one_run(run)` for each run of `0..runs` in turn, a failure named by its run (from 1);
/// after each, prints `run N/RUNS: ` and `line(&result)` on stderr.
pub async fn each_run<T, F>(
    runs: usize,
    mut one_run: impl FnMut(usize) -> F,
    line: impl Fn(&T) -> String,
) -> anyhow::Result<Vec<T>>
where
    F: Future<Output = anyhow::Result<T>>,
{
    let mut results = Vec::with_capacity(runs);
    for run in 0..runs {
        let result = one_run(run)
            .await
            .with_context(|| format!("run {}", run + 1))?;
        eprintln!("run {}/{runs}: {}", run + 1, line(&result));
        results.push(result);
    }
    Ok(results)
}
