//! `mrguard check`: the webhooks' mutation and validation over manifest
//! files, offline or against a cluster (`--live`). The command reads what
//! it was given, asks `mrguard_policy::commands::check` what more judging
//! it needs, fetches exactly that (the `--crd` files, or the cluster's
//! answers: [`live::fetch`]), judges once, and prints.

pub mod live;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use mrguard_policy::admission::crd::Crds;
use mrguard_policy::admission::kube_version::KubeVersion;
use mrguard_policy::admission::model::Operation;
use mrguard_policy::commands::check::judge::{judge, CheckReport, CrdFiles, Fetched};
use mrguard_policy::commands::check::offline::crds_from;
use mrguard_policy::commands::check::request::{CheckOptions, CheckRequest};
use mrguard_policy::commands::check::{annotations, render_text, CheckResult};
use mrguard_policy::commands::sarif;

use super::cluster::{ClusterContext, ClusterError, ConfigOrigin};
use super::manifests::{self, ManifestError};
use live::CheckOutput;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub(crate) enum CheckOperation {
    Create,
    Update,
    Delete,
}

/// Arguments of `mrguard check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Manifest file (multi-document YAML), or folder (read recursively);
    /// "-" reads standard input. Repeatable.
    #[arg(short = 'f', long = "file", required_unless_present = "files")]
    pub(crate) file: Vec<PathBuf>,
    /// More manifest files or folders, as -f (how pre-commit passes them).
    #[arg(value_name = "FILE")]
    pub(crate) files: Vec<PathBuf>,
    /// The previous version of the objects, for UPDATE (matched by kind, namespace and name).
    #[arg(long)]
    pub(crate) old: Option<PathBuf>,
    /// The operation to judge [default: CREATE, or UPDATE with --old].
    #[arg(long, value_enum)]
    pub(crate) operation: Option<CheckOperation>,
    /// Configuration file; the built-in default when absent.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// The requesting username, for exemptUsernames.
    #[arg(long, default_value = "")]
    pub(crate) username: String,
    /// Print the JSON Patch of each object instead of the defaulted object.
    #[arg(long)]
    pub(crate) patch: bool,
    /// CRD file, or folder of CRD files: also apply their schema defaults
    /// before mutation, and check types, enums, required fields and
    /// x-kubernetes-validations rules after it, as the API server would.
    /// Crossplane's ManagedResourceDefinitions are read like the CRDs they
    /// become; with them (and the ManagedResourceActivationPolicies), kinds
    /// that no MRAP activates are warned about.
    #[arg(long, value_name = "PATH")]
    pub(crate) crd: Option<PathBuf>,
    /// With --crd: fail an object whose API group no CRD in PATH defines,
    /// as an API server without that CRD would ("no matches for kind"),
    /// instead of judging it with a note that its schema was not checked.
    /// Built-in Kubernetes groups (core, apps, batch, *.k8s.io, ...) need no CRD.
    #[arg(long, requires = "crd")]
    pub(crate) require_crd: bool,
    /// With --crd: judge as the API server of this Kubernetes release
    /// would (1.20 or newer; "v" and a patch number are accepted): CRD
    /// validation rules and strict field validation only from 1.25, unknown
    /// fields pruned with a note before. A release newer than mrguard knows
    /// is judged as the newest it knows, with a note.
    #[arg(long, value_name = "MAJOR.MINOR", requires = "crd", default_value_t = KubeVersion::NEWEST)]
    pub(crate) kube_version: KubeVersion,
    /// The most YAML documents read from the manifest file (and from --old);
    /// a larger file is refused rather than read without bound.
    #[arg(long, value_name = "N", default_value_t = manifests::MAX_DOCUMENTS)]
    pub(crate) max_documents: usize,
    #[command(flatten)]
    pub(crate) live: live::LiveArgs,
}

/// Why `check` could not judge its input.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckCommandError {
    /// A file could not be read.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The cluster could not be asked.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// What was read cannot be judged.
    #[error(transparent)]
    Judge(#[from] mrguard_policy::commands::check::CheckError),
    /// No async runtime for the cluster's client.
    #[error("failed to start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl From<CheckOperation> for Operation {
    fn from(op: CheckOperation) -> Self {
        match op {
            CheckOperation::Create => Operation::Create,
            CheckOperation::Update => Operation::Update,
            CheckOperation::Delete => Operation::Delete,
        }
    }
}

/// The CRDs in a CRD file, or in every `.yaml`, `.yml` and `.json` file
/// under a folder; with `groups`, only the files that name one of them
/// are parsed (`mrguard_policy::commands::check::offline::crds_from`).
pub(crate) fn load_crds(
    path: &Path,
    groups: Option<&BTreeSet<String>>,
    kube: KubeVersion,
) -> Result<Crds, CheckCommandError> {
    let files = manifests::read_lazily(path)?;
    Ok(crds_from(&path.display().to_string(), files, groups, kube)?)
}

/// How the flags ask to judge; `live` is the namespace of manifests that
/// name none, for a live check.
fn options(args: &CheckArgs, live: Option<String>) -> CheckOptions {
    CheckOptions {
        operation: args.operation.map(Operation::from),
        username: args.username.clone(),
        require_crd: args.require_crd,
        kube_version: args.kube_version,
        max_documents: args.max_documents,
        text: args.live.output == CheckOutput::Text,
        patch: args.patch,
        live,
    }
}

/// Reads what the command was given, asks the pure side what judging it
/// needs, fetches exactly that, and judges once.
fn fetch_then_judge(args: &CheckArgs) -> Result<CheckReport, CheckCommandError> {
    let manifests = manifests::read_sources(&args.file)?;
    let old = match &args.old {
        Some(p) => Some((
            p.display().to_string(),
            manifests::read_sources(std::slice::from_ref(p))?,
        )),
        None => None,
    };
    let origin = ConfigOrigin::from_flags(
        args.config.as_ref(),
        args.live.config_from_cluster.config_from_cluster.as_ref(),
    );
    let cluster = if args.live.live {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CheckCommandError::Runtime)?;
        let live = &args.live;
        let ctx = runtime.block_on(ClusterContext::connect(
            &live.cluster,
            live.namespace.as_deref(),
            &origin,
        ))?;
        Some((runtime, ctx))
    } else {
        None
    };
    let default_namespace = cluster.as_ref().map(|(_, c)| c.default_namespace.clone());
    let request = CheckRequest::parse(&manifests, old, options(args, default_namespace))?;
    let fetched = match cluster {
        Some((runtime, mut ctx)) => {
            Fetched::Live(runtime.block_on(live::fetch(&mut ctx, &args.live, &request.needs))?)
        }
        None => Fetched::Offline {
            config: origin.read_local()?,
            crds: match &args.crd {
                Some(p) => Some(CrdFiles {
                    path: p.display().to_string(),
                    files: Box::new(manifests::read_lazily(p)?),
                }),
                None => None,
            },
        },
    };
    Ok(judge(&request, fetched, jiff::Timestamp::now()))
}

/// Prints the judgement; 0 allowed, 1 denied or invalid, 2 when judging
/// stopped.
fn report(args: &CheckArgs, judgement: CheckReport) -> i32 {
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    for n in &judgement.notes {
        let _ = writeln!(err, "mrguard check: note: {n}");
    }
    // Offline text: each object on stdout and its verdict on stderr, in
    // the order judged, up to where judging stopped.
    for o in &judgement.outcomes {
        let _ = write!(out, "{}", o.object_text);
        let _ = write!(err, "{}", o.verdict_text);
    }
    if let Some(e) = &judgement.error {
        let _ = writeln!(err, "mrguard check: {e}");
        return 2;
    }
    let results: Vec<CheckResult> = judgement.outcomes.into_iter().map(|o| o.result).collect();
    let written = match args.live.output {
        CheckOutput::Text if args.live.live => write!(out, "{}", render_text(&results)),
        CheckOutput::Text => Ok(()),
        CheckOutput::Json => match serde_json::to_string_pretty(&results) {
            Ok(s) => writeln!(out, "{s}"),
            Err(e) => writeln!(err, "mrguard check: failed to encode the results: {e}"),
        },
        CheckOutput::Sarif => {
            match serde_json::to_string_pretty(&sarif::log(&annotations(&results))) {
                Ok(s) => writeln!(out, "{s}"),
                Err(e) => writeln!(err, "mrguard check: failed to encode the results: {e}"),
            }
        }
    };
    if written.is_err() {
        return 2;
    }
    let count = |v: &str| results.iter().filter(|r| r.verdict == v).count();
    if args.live.live {
        let _ = writeln!(
            err,
            "{} manifest(s): {} denied, {} invalid, {} allowed, {} unchanged, {} skipped",
            results.len(),
            count("denied"),
            count("invalid"),
            count("allowed"),
            count("unchanged"),
            count("skipped")
        );
        i32::from(count("denied") + count("invalid") > 0)
    } else {
        i32::from(results.iter().any(|r| r.verdict != "allowed"))
    }
}

/// Runs the check; 0 allowed, 1 denied or invalid, 2 unreadable input,
/// an unreachable or forbidden cluster, or a CRD rule mrguard cannot
/// evaluate.
pub(crate) fn run(mut args: CheckArgs) -> i32 {
    let positional = std::mem::take(&mut args.files);
    args.file.extend(positional);
    match fetch_then_judge(&args) {
        Ok(judgement) => report(&args, judgement),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "mrguard check: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_files_name_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            load_crds(dir.path(), None, KubeVersion::NEWEST),
            Err(CheckCommandError::Judge(
                mrguard_policy::commands::check::CheckError::NoCrd(_)
            ))
        ));
        std::fs::write(dir.path().join("bad.yaml"), "a: [").unwrap();
        let e = load_crds(dir.path(), None, KubeVersion::NEWEST)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.yaml"), "{e}");
        assert!(matches!(
            load_crds(&dir.path().join("nope"), None, KubeVersion::NEWEST),
            Err(CheckCommandError::Manifest(ManifestError::Read { .. }))
        ));
    }
}
