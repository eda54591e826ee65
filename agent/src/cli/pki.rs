//! `shoal pki`: the cluster CA, node and client certificates, renewal and revocation.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use shoal::identity::pki::{IssueOptions, Role, LEAF_VALIDITY_DAYS_DEFAULT};
use shoal::wire::api::{Request, Response};

use super::connect::{call, ClientOpts};

/// Arguments of `shoal pki`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  shoal pki init --dir ./pki\n  shoal pki issue --dir ./pki --name n1 --role node --ip 10.0.0.1\n  shoal pki issue --dir ./pki --name alice --role client\n  shoal pki revoke --dir ./pki --name n3 && shoal pki publish-crl --crl ./pki/crl.pem"
)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

/// The role flag of `issue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RoleArg {
    /// An agent (`shoal agent --name NAME`).
    Node,
    /// An operator or a tool (the CLI); add --read-only for the reads only.
    Client,
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
        after_help = "Examples:\n  shoal pki issue --dir /etc/shoal/pki --name n1 --role node --ip 10.0.0.1\n  shoal pki issue --dir /etc/shoal/pki --name alice --role client\n  shoal pki issue --dir /etc/shoal/pki --name grafana --role client --read-only\n\nWhat each role may ask: the table in docs/operations.md, \"Who may make which request\"."
    )]
    Issue {
        /// Directory holding ca.crt and ca.key.
        #[arg(long)]
        dir: PathBuf,
        /// The node id or client name the certificate carries.
        #[arg(long)]
        name: String,
        /// What the holder may do: an agent (node) or an operator (client).
        #[arg(long, value_enum)]
        role: RoleArg,
        /// With --role client: the reads only (get, status, nodes, issues, events, cells, caps,
        /// history, endpoints, logs, upgrade status; docs/operations.md, "Who may make which
        /// request", lists every request and the role it needs).
        #[arg(long)]
        read_only: bool,
        /// IP addresses to add as subject alternative names (repeatable).
        #[arg(long = "ip")]
        ips: Vec<IpAddr>,
        /// Life of the certificate in days (1 to 1825).
        #[arg(long, default_value_t = LEAF_VALIDITY_DAYS_DEFAULT)]
        days: u32,
    },
    /// Replace NAME.crt and NAME.key with new ones of the same role and IPs; an agent using them
    /// switches within a second, without a restart.
    #[command(after_help = "Example:\n  shoal pki renew --dir /etc/shoal/pki --name n1")]
    Renew {
        /// Directory holding ca.crt, ca.key and NAME.crt.
        #[arg(long)]
        dir: PathBuf,
        /// The certificate to renew.
        #[arg(long)]
        name: String,
        /// Life of the new certificate in days (default: 365).
        #[arg(long)]
        days: Option<u32>,
    },
    /// Revoke every certificate issued under NAME: writes DIR/crl.pem, signed by the CA. Give it
    /// to one agent (`shoal pki publish-crl`, or crl.pem in its --pki directory) to spread it.
    #[command(after_help = "Example:\n  shoal pki revoke --dir /etc/shoal/pki --name n3")]
    Revoke {
        /// Directory holding ca.crt and ca.key.
        #[arg(long)]
        dir: PathBuf,
        /// The node or client whose certificates to revoke.
        #[arg(long)]
        name: String,
    },
    /// Give a revocation list to the agent at --agent: it checks the CA's signature, applies it
    /// and spreads it to every agent of the mesh.
    #[command(
        after_help = "Example:\n  shoal pki publish-crl --crl ./pki/crl.pem --agent 10.0.0.1:7001"
    )]
    PublishCrl {
        /// The CRL file (PEM or DER) `shoal pki revoke` wrote.
        #[arg(long)]
        crl: PathBuf,
        #[command(flatten)]
        client: ClientOpts,
    },
}

/// Runs a pki subcommand.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Init { dir } => {
            shoal::identity::pki::init(&dir)?;
            println!(
                "cluster CA written to {} (keep ca.key off the hosts: agents need only ca.crt)",
                dir.display()
            );
        }
        Command::Issue {
            dir,
            name,
            role,
            read_only,
            ips,
            days,
        } => {
            let role = match (role, read_only) {
                (RoleArg::Node, true) => bail!("--read-only applies to --role client only"),
                (RoleArg::Node, false) => Role::Node,
                (RoleArg::Client, false) => Role::Client,
                (RoleArg::Client, true) => Role::Reader,
            };
            let options = IssueOptions { role, ips, days };
            let files = shoal::identity::pki::issue(&dir, &name, &options)?;
            println!(
                "issued {} and {} ({role}, {days} days)",
                files.cert.display(),
                files.key.display()
            );
        }
        Command::Renew { dir, name, days } => {
            let files = shoal::identity::pki::renew(&dir, &name, days)?;
            println!(
                "renewed {} and {}; copy them over the old ones (an agent picks them up live)",
                files.cert.display(),
                files.key.display()
            );
        }
        Command::Revoke { dir, name } => {
            let revoked = shoal::identity::pki::revoke(&dir, &name)?;
            println!(
                "{} (number {}): {} certificate(s) of {name} revoked now, {} in the list; \
                 publish it with `shoal pki publish-crl --crl {}`",
                revoked.crl.display(),
                revoked.number,
                revoked.added.len(),
                revoked.total,
                revoked.crl.display()
            );
        }
        Command::PublishCrl { crl, client } => {
            let bytes =
                std::fs::read(&crl).with_context(|| format!("reading {}", crl.display()))?;
            let der = shoal::identity::crl::der_from_pem_or_der(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: {e}", crl.display()))?;
            let Response::CrlPublished {
                number,
                revoked,
                adopted,
            } = call(&client, Request::PublishCrl { der })?
            else {
                bail!("unexpected answer from the agent");
            };
            let what = if adopted { "adopted" } else { "already held" };
            println!(
                "CRL number {number} ({revoked} revoked) {what} by {}; it spreads to every agent",
                client.agent
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
