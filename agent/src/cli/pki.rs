//! `shoal pki init` and `shoal pki issue`: the cluster CA and node or client certificates.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `shoal pki`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal pki init --dir ./pki\n  shoal pki issue --dir ./pki --name n1 --ip 10.0.0.1"
)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Create a cluster CA (ca.crt, ca.key) in DIR; refuses to overwrite one.
    #[command(after_help = "Example:\n  shoal pki init --dir /etc/shoal/pki")]
    Init {
        /// Where to write the CA.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Issue a node or client certificate (NAME.crt, NAME.key) signed by the CA in DIR.
    #[command(
        after_help = "Examples:\n  shoal pki issue --dir /etc/shoal/pki --name n1 --ip 10.0.0.1\n  shoal pki issue --dir /etc/shoal/pki --name alice"
    )]
    Issue {
        /// Directory holding ca.crt and ca.key.
        #[arg(long)]
        dir: PathBuf,
        /// The node id or client name the certificate carries.
        #[arg(long)]
        name: String,
        /// IP addresses to add as subject alternative names (repeatable).
        #[arg(long = "ip")]
        ips: Vec<IpAddr>,
    },
}

/// Runs a pki subcommand.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Init { dir } => {
            shoal::pki::init(&dir)?;
            println!(
                "cluster CA written to {} (keep ca.key private)",
                dir.display()
            );
        }
        Command::Issue { dir, name, ips } => {
            let files = shoal::pki::issue(&dir, &name, &ips)?;
            println!(
                "issued {} and {}",
                files.cert.display(),
                files.key.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
