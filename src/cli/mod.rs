//! The command line (docs/cli.md): clap definitions with an environment
//! variable for every serve flag, and one runner per subcommand.

mod audit;
mod certs;
mod check;
mod cluster;
mod controller_args;
mod crd;
mod explain;
mod lines;
mod live;
mod manifests;
mod parse;
mod sarif;
pub mod serve;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use audit::AuditArgs;
pub use certs::CertsCommand;
pub use check::CheckArgs;
pub use controller_args::{ControllerArgs, PolicyReports};
pub use explain::ExplainArgs;
pub use parse::parse_duration;
pub use serve::ServeArgs;

/// A flag given twice takes its last value (`args_override_self`), as
/// kubectl and most Kubernetes components do: the chart's `extraArgs` come
/// after the flags the chart sets, so they can override them. Before, clap
/// refused the second occurrence and the pod crash-looped.
#[derive(Debug, Parser)]
#[command(
    name = "mrguard",
    version,
    about = "Admission webhook and controller for Crossplane managed resources",
    args_override_self = true
)]
pub struct Cli {
    #[command(flatten)]
    pub(crate) log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the mutating and validating webhooks over HTTPS.
    #[command(args_override_self = true)]
    Serve(Box<ServeArgs>),
    /// Mutate and validate manifests offline, as the webhooks would.
    Check(Box<CheckArgs>),
    /// Evaluate the validation rules on every MR in a cluster.
    Audit(Box<AuditArgs>),
    /// Explain one MR: its states, deletion outcome, and who set each field.
    Explain(Box<explain::ExplainArgs>),
    /// Work with configuration files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Development certificates for local TLS.
    #[command(subcommand)]
    Certs(certs::CertsCommand),
    /// What mrguard derives from CRD files.
    #[command(subcommand)]
    Crd(crd::CrdCommand),
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a configuration file; exits 0 when valid and 1 when not.
    /// Warns (on stderr) when a valid file is empty or drops a built-in
    /// protection.
    Check {
        /// The configuration file (YAML).
        file: PathBuf,
    },
    /// Print the built-in default configuration.
    Default,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// Log filter, in tracing's EnvFilter syntax (e.g. "info,mrguard=debug").
    #[arg(long, global = true, env = "MRGUARD_LOG", default_value = "info")]
    pub(crate) log_level: String,
    /// Log output format.
    #[arg(
        long,
        global = true,
        env = "MRGUARD_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub(crate) log_format: LogFormat,
}

fn init_logging(log: &LogArgs) {
    let filter = tracing_subscriber::EnvFilter::try_new(&log.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for people at a terminal: pods and CI read plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = match log.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Runs the command line; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Serve(args) => {
            init_logging(&cli.log);
            serve::run(*args)
        }
        Command::Check(args) => check::run(*args),
        Command::Audit(args) => audit::run(*args),
        Command::Explain(args) => explain::run(*args),
        Command::Certs(cmd) => certs::run(cmd),
        Command::Crd(cmd) => crd::run(cmd),
        Command::Config(ConfigCommand::Check { file }) => match crate::config::load_file(&file) {
            Ok((config, bytes)) => {
                for w in config_warnings(&config, &bytes) {
                    eprintln!("{}: warning: {w}", file.display());
                }
                println!("{}: valid", file.display());
                0
            }
            Err(e) => {
                eprintln!("{e}");
                1
            }
        },
        Command::Config(ConfigCommand::Default) => {
            print!("{}", mrguard_policy::config::BUILTIN_YAML);
            0
        }
    }
}

/// What a valid configuration file may still get wrong: being empty (it
/// then configures nothing, not the built-in defaults) and dropping the
/// built-in protections, which `--config` replaces whole.
fn config_warnings(config: &mrguard_policy::config::Config, bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let text = String::from_utf8_lossy(bytes);
    let empty = serde_saphyr::from_multiple::<serde_json::Value>(&text)
        .map(|docs| docs.iter().all(serde_json::Value::is_null))
        .unwrap_or(false);
    if empty {
        out.push(
            "the file is empty: it configures nothing, and replaces the built-in configuration \
             (print that with `mrguard config default`)"
                .to_string(),
        );
    }
    out.extend(config.lost_protections());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Bug 6 (regression): a flag given again later wins instead of
    /// failing with "cannot be used multiple times".
    #[test]
    fn a_later_flag_wins() {
        let cli = Cli::try_parse_from([
            "mrguard",
            "serve",
            "--audit-interval=10m",
            "--listen=0.0.0.0:9443",
            "--controller",
            "--audit-interval=30s",
            "--listen=127.0.0.1:1",
            "--controller",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(args.listen.to_string(), "127.0.0.1:1");
        let parsed = format!("{args:?}");
        assert!(parsed.contains("audit_interval: 30s"), "{parsed}");
    }
}
