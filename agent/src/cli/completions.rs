//! `shoal completions SHELL`: completion scripts for the shell.

use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

/// Arguments of `shoal completions`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal completions bash > /etc/bash_completion.d/shoal\n  \
    shoal completions zsh > \"${fpath[1]}/_shoal\"\n  shoal completions fish > ~/.config/fish/completions/shoal.fish"
)]
pub struct Args {
    /// The shell.
    #[arg(value_enum)]
    shell: Shell,
}

/// Prints the completion script of `C` for the shell on stdout.
pub fn run<C: CommandFactory>(args: Args) -> anyhow::Result<ExitCode> {
    let mut command = C::command();
    clap_complete::generate(args.shell, &mut command, "shoal", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
