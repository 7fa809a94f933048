//! The command line (docs/cli.md): clap definitions with an environment
//! variable for every serve flag, and one runner per subcommand.

mod completion;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::app;
pub use crate::app::audit::AuditArgs;
pub use crate::app::certs::CertsCommand;
pub use crate::app::check::CheckArgs;
pub use crate::app::controller_args::{ControllerArgs, PolicyReports};
pub use crate::app::explain::ExplainArgs;
pub use crate::app::parse::parse_duration;
pub use crate::app::plan::PlanArgs;
pub use crate::app::serve::ServeArgs;
pub use crate::app::test::TestArgs;

/// A flag given twice takes its last value (`args_override_self`), as
/// kubectl and most Kubernetes components do: the chart's `extraArgs` come
/// after the flags the chart sets, so they can override them. clap's own
/// default refuses the second occurrence, which crash-looped the pod.
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
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the mutating and validating webhooks over HTTPS.
    #[command(args_override_self = true)]
    Serve(Box<ServeArgs>),
    /// Mutate and validate manifests offline, as the webhooks would.
    Check(Box<CheckArgs>),
    /// Evaluate the validation rules on every MR in a cluster.
    Audit(Box<AuditArgs>),
    /// Preview what applying manifests (and deleting objects) does to the
    /// external resources: exits 0 when nothing is denied, 1 when anything
    /// is, 2 when the input cannot be judged (see --detailed-exitcode).
    Plan(Box<PlanArgs>),
    /// Explain one MR: its states, deletion outcome, and who set each field.
    Explain(Box<ExplainArgs>),
    /// Run YAML test suites of a configuration: requests and the verdicts
    /// they should get; exits 0 when all pass, 1 when one fails, 2 on bad input.
    Test(Box<TestArgs>),
    /// Work with configuration files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Export the configuration for the API server to enforce itself.
    #[command(subcommand)]
    Export(ExportCommand),
    /// Development certificates for local TLS.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    Completion(completion::CompletionArgs),
    /// Print the man page, mrguard(1), in roff.
    Man,
    /// What mrguard derives from CRD files.
    #[command(subcommand)]
    Crd(app::crd::CrdCommand),
}

/// `mrguard config` subcommands.
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

/// `mrguard export` subcommands.
#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// Write ValidatingAdmissionPolicies and bindings (admissionregistration.k8s.io/v1,
    /// Kubernetes 1.30 or later) for the rules CEL can express; what cannot be
    /// exported is listed on stderr.
    Vap {
        /// Configuration file; the built-in default when absent.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Write a MutatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1,
    /// Kubernetes 1.36 or later) for the defaults `/mutate` sets; what a policy
    /// cannot express is listed on stderr.
    Map {
        /// Configuration file; the built-in default when absent.
        #[arg(long)]
        config: Option<PathBuf>,
    },
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

/// The log filter: the user's, with kube's watcher kept to errors unless
/// the user names it. The controller logs every failed watch itself, once
/// per failure streak; kube's watcher warned again on every retry.
fn log_directives(filter: &str) -> String {
    if filter.contains("kube_runtime") {
        filter.to_string()
    } else {
        format!("{filter},kube_runtime::watcher=error")
    }
}

/// [`log_directives`] for a one-shot command (all but `serve`), which
/// reports a failed call to the cluster itself, in its own words on
/// stderr: kube's client logging it again at ERROR is a second, vaguer
/// line before the one a script reads. Unless the user names kube_client.
fn command_directives(filter: &str, serve: bool) -> String {
    let d = log_directives(filter);
    if serve || filter.contains("kube_client") {
        d
    } else {
        format!("{d},kube_client=off")
    }
}

fn init_logging(log: &LogArgs, serve: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(command_directives(&log.log_level, serve))
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

/// The name kubectl gives a plugin's executable: `kubectl mrguard ...`
/// runs `kubectl-mrguard` from PATH (a symlink to this binary, or krew's
/// copy of it).
const KUBECTL_PLUGIN: &str = "kubectl-mrguard";

/// Parses the process's arguments. Run as `kubectl-mrguard`, usage and
/// errors say `kubectl mrguard`, the way the user typed it.
pub fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = Cli::command();
    if invoked_as_plugin(std::env::args_os().next()) {
        cmd = cmd.bin_name("kubectl mrguard");
    }
    let matches = cmd.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn invoked_as_plugin(argv0: Option<std::ffi::OsString>) -> bool {
    argv0
        .as_deref()
        .map(std::path::Path::new)
        .and_then(|p| p.file_stem())
        .is_some_and(|name| name == KUBECTL_PLUGIN)
}

impl Command {
    /// The subcommand's name, as typed.
    fn name(&self) -> &'static str {
        match self {
            Command::Serve(_) => "serve",
            Command::Check(_) => "check",
            Command::Audit(_) => "audit",
            Command::Plan(_) => "plan",
            Command::Explain(_) => "explain",
            Command::Test(_) => "test",
            Command::Config(_) => "config",
            Command::Export(_) => "export",
            Command::Certs(_) => "certs",
            Command::Completion(_) => "completion",
            Command::Man => "man",
            Command::Crd(_) => "crd",
        }
    }
}

/// Runs the command line; returns the process exit code. `--log-level`
/// and `--log-format` are global, so every subcommand logs by them: the
/// ones that talk to a cluster (`audit`, `check --live`, `explain`) log
/// through the controller's code what they cannot do.
pub fn run(cli: Cli) -> i32 {
    init_logging(&cli.log, matches!(cli.command, Command::Serve(_)));
    tracing::debug!(
        command = cli.command.name(),
        version = env!("CARGO_PKG_VERSION"),
        "mrguard starting"
    );
    match cli.command {
        Command::Serve(args) => app::serve::run(*args),
        Command::Check(args) => app::check::run(*args),
        Command::Audit(args) => app::audit::run(*args),
        Command::Plan(args) => app::plan::run(*args),
        Command::Explain(args) => app::explain::run(*args),
        Command::Test(args) => app::test::run(*args),
        Command::Certs(cmd) => app::certs::run(cmd),
        Command::Completion(args) => {
            completion::completion(&args, <Cli as clap::CommandFactory>::command())
        }
        Command::Man => completion::man(<Cli as clap::CommandFactory>::command()),
        Command::Crd(cmd) => app::crd::run(cmd),
        Command::Config(ConfigCommand::Check { file }) => app::config::check(&file),
        Command::Export(ExportCommand::Vap { config }) => {
            app::export::export_vap(config.as_deref())
        }
        Command::Export(ExportCommand::Map { config }) => {
            app::export::export_map(config.as_deref())
        }
        Command::Config(ConfigCommand::Default) => app::config::print_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_plugin_name_is_recognised_wherever_it_lives() {
        for (argv0, plugin) in [
            ("/usr/local/bin/kubectl-mrguard", true),
            ("kubectl-mrguard", true),
            ("C:\\krew\\bin\\kubectl-mrguard.exe", cfg!(windows)),
            ("/usr/local/bin/mrguard", false),
            ("kubectl-mrguard-old", false),
        ] {
            assert_eq!(invoked_as_plugin(Some(argv0.into())), plugin, "{argv0}");
        }
        assert!(!invoked_as_plugin(None));
    }

    #[test]
    fn the_man_page_names_every_command_and_its_flags() {
        let page = String::from_utf8(completion::render_man(Cli::command()).unwrap()).unwrap();
        for section in [
            "MRGUARD CHECK",
            "MRGUARD CONFIG CHECK",
            "MRGUARD SERVE",
            "MRGUARD COMPLETION",
        ] {
            assert!(page.contains(section), "{section} missing");
        }
        assert!(page.contains("\\-\\-max\\-documents"), "check's flags");
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// kube's watcher is kept to errors unless the filter names kube_runtime.
    #[test]
    fn kube_watcher_warnings_are_filtered_unless_asked_for() {
        assert_eq!(log_directives("info"), "info,kube_runtime::watcher=error");
        assert_eq!(log_directives("kube_runtime=debug"), "kube_runtime=debug");
        assert!(
            tracing_subscriber::EnvFilter::try_new(log_directives("info,mrguard=debug")).is_ok()
        );
    }

    /// A one-shot command leaves kube's client out of its log unless
    /// asked; `serve` keeps it.
    #[test]
    fn a_command_leaves_kube_client_out_unless_asked() {
        assert_eq!(
            command_directives("info", false),
            "info,kube_runtime::watcher=error,kube_client=off"
        );
        assert_eq!(
            command_directives("info", true),
            "info,kube_runtime::watcher=error"
        );
        assert_eq!(
            command_directives("kube_client=debug", false),
            "kube_client=debug,kube_runtime::watcher=error"
        );
    }

    /// A flag given again later wins instead of failing with "cannot be
    /// used multiple times", so the chart's `extraArgs` can override.
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
