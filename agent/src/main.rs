//! The `shoal` binary: the agent and its command line in one executable. Everything it does is
//! in the `shoal` library and `shoal_core`; this file only hands over to the CLI.
#![forbid(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
