//! `mrguard certs generate`: a development CA and serving certificate
//! (certs/README.md), written by [`crate::pki::generate_dev`].

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::pki::{generate_dev, DevRequest};

/// `mrguard certs` subcommands.
#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Write a dev CA and a serving certificate for localhost and the
    /// in-cluster Service name.
    Generate(GenerateArgs),
}

/// The arguments of `mrguard certs generate`.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Folder for ca.crt, ca.key, tls.crt and tls.key.
    #[arg(long, default_value = "certs")]
    pub(crate) out: PathBuf,
    /// Name of the Service the API server calls (the chart's full name).
    #[arg(long, default_value = "mrguard")]
    pub(crate) service_name: String,
    /// Namespace of that Service.
    #[arg(long, default_value = "crossplane-system")]
    pub(crate) namespace: String,
    /// Another DNS name or IP address for the certificate (repeatable).
    #[arg(long = "name", value_name = "NAME")]
    pub(crate) extra_names: Vec<String>,
    /// Lifetime of the serving certificate, in days.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u64).range(1..=3650))]
    pub(crate) days: u64,
    /// Lifetime of a newly generated CA, in days.
    #[arg(long, default_value_t = 1825, value_parser = clap::value_parser!(u64).range(1..=7300))]
    pub(crate) ca_days: u64,
    /// Replace an existing CA instead of reusing it.
    #[arg(long)]
    pub(crate) force: bool,
}

/// Runs `mrguard certs`; returns the process exit code.
pub fn run(cmd: CertsCommand) -> i32 {
    let CertsCommand::Generate(a) = cmd;
    let req = DevRequest {
        out: a.out,
        service: a.service_name,
        namespace: a.namespace,
        extra_names: a.extra_names,
        days: a.days,
        ca_days: a.ca_days,
        force: a.force,
    };
    match generate_dev(&req) {
        Ok(generated) => {
            println!("{generated}");
            0
        }
        Err(e) => {
            eprintln!("mrguard certs generate: {e}");
            1
        }
    }
}
