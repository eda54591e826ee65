//! The model tier (filled in below).

/// Command-line arguments of `shoal-sim model`.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// The scenario file.
    pub scenario: std::path::PathBuf,
}

/// Runs the model tier.
pub fn main(_args: ModelArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not yet")
}
