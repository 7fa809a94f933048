//! `mrguard check`: the webhooks' mutation and validation, offline, over a
//! multi-document YAML file. Each document is wrapped in the AdmissionReview
//! the API server would send and judged by the same pure functions.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::json;

use mrguard_policy::config::Config;
use mrguard_policy::crd::{CrdError, Crds, Lookup};
use mrguard_policy::model::Operation;
use mrguard_policy::offline::{self, identity, label};

use super::manifests::{self, Manifest, ManifestError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub(crate) enum CheckOperation {
    Create,
    Update,
    Delete,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Manifest file (multi-document YAML); "-" reads standard input. With
    /// --live: repeatable, and folders are read recursively.
    #[arg(short = 'f', long = "file", required = true)]
    pub(crate) file: Vec<PathBuf>,
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
    #[arg(long, value_name = "PATH")]
    pub(crate) crd: Option<PathBuf>,
    /// With --crd: fail an object whose API group no CRD in PATH defines,
    /// as an API server without that CRD would ("no matches for kind"),
    /// instead of judging it with a note that its schema was not checked.
    /// Built-in Kubernetes groups (core, apps, batch, *.k8s.io, ...) need no CRD.
    #[arg(long, requires = "crd")]
    pub(crate) require_crd: bool,
    /// The most YAML documents read from the manifest file (and from --old);
    /// a larger file is refused rather than read without bound.
    #[arg(long, value_name = "N", default_value_t = manifests::MAX_DOCUMENTS)]
    pub(crate) max_documents: usize,
    #[command(flatten)]
    pub(crate) live: super::live::LiveArgs,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("failed to judge {path}, {at}: {reason}")]
    Document {
        path: String,
        at: String,
        reason: String,
    },
    #[error("{0}")]
    Config(#[from] crate::config::ConfigFileError),
    #[error("{0}")]
    Crd(#[from] CrdError),
    #[error("failed to find a CustomResourceDefinition in {0}")]
    NoCrd(String),
    #[error("failed to read manifests: an offline check reads one -f file; several files and folders need --live")]
    OneFile,
    #[error("failed to match {what} ({at} of {path}) in {old}: no object with that kind, namespace and name")]
    NoOld {
        what: String,
        at: String,
        path: String,
        old: String,
    },
}

/// API groups the API server serves itself: their objects need no CRD.
fn builtin_group(group: &str) -> bool {
    matches!(
        group,
        "" | "apps" | "autoscaling" | "batch" | "policy" | "extensions"
    ) || group.ends_with(".k8s.io")
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

/// Reads a CRD file, or every `.yaml`, `.yml` and `.json` file under a
/// folder; documents that are not CRDs are ignored.
fn load_crds(path: &Path) -> Result<Crds, CheckError> {
    let mut crds = Crds::default();
    for f in manifests::files(path)? {
        let text = manifests::read_text(&f)?;
        crds.add_yaml(&f.display().to_string(), &text)?;
    }
    if crds.is_empty() {
        return Err(CheckError::NoCrd(path.display().to_string()));
    }
    Ok(crds)
}

fn execute(args: &CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<bool, CheckError> {
    let file = match args.file.as_slice() {
        [one] => one,
        _ => return Err(CheckError::OneFile),
    };
    let config = match &args.config {
        Some(p) => crate::config::load_file(p)?.0,
        None => Config::builtin(),
    };
    let crds = match &args.crd {
        Some(p) => Some(load_crds(p)?),
        None => None,
    };
    let read = |p: &PathBuf| manifests::read(std::slice::from_ref(p), args.max_documents);
    let docs = read(file)?;
    let olds = match &args.old {
        Some(p) => Some((p, read(p)?)),
        None => None,
    };
    let op = args.operation.unwrap_or(if olds.is_some() {
        CheckOperation::Update
    } else {
        CheckOperation::Create
    });
    let crd_path = args.crd.as_deref().map(Path::display);
    // What a cluster with these CRDs would know (documented immutable fields).
    let cluster = crds.as_ref().map(Crds::cluster).unwrap_or_default();
    let mut any_denied = false;
    for Manifest {
        at, object: doc, ..
    } in &docs
    {
        let old = match (&olds, op) {
            (Some((path, olds)), CheckOperation::Update) => {
                let id = identity(doc);
                let found = olds.iter().find(|o| identity(&o.object) == id);
                Some(
                    &found
                        .ok_or_else(|| CheckError::NoOld {
                            what: label(doc),
                            at: at.clone(),
                            path: file.display().to_string(),
                            old: path.display().to_string(),
                        })?
                        .object,
                )
            }
            _ => None,
        };
        let (api_version, kind, _, _) = identity(doc);
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let mut notes = Vec::new();
        let (crd, missing) = match crds.as_ref().map(|c| c.lookup(&api_version, &kind)) {
            Some(Lookup::Found(v)) => {
                // Never judge with only part of a CRD's rules.
                v.ensure_supported()?;
                (Some(v), None)
            }
            Some(Lookup::NoVersion(c)) if op != CheckOperation::Delete => {
                let served: Vec<&str> = c.versions.iter().map(|v| v.name.as_str()).collect();
                let why = format!(
                    "no matches for kind {kind:?} in version {api_version:?} (CRD {} serves {})",
                    c.name,
                    served.join(", ")
                );
                (None, Some(why))
            }
            Some(Lookup::NoKind(same_group)) if op != CheckOperation::Delete => {
                let kinds: Vec<&str> = same_group.iter().map(|c| c.kind.as_str()).collect();
                let why = format!(
                    "no matches for kind {kind:?} in version {api_version:?} (the CRDs of {group} in {} define {})",
                    crd_path.as_ref().map(ToString::to_string).unwrap_or_default(),
                    kinds.join(", ")
                );
                (None, Some(why))
            }
            Some(Lookup::NoCrd) if !builtin_group(group) => {
                let path = crd_path
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                if args.require_crd && op != CheckOperation::Delete {
                    let why = format!(
                        "no matches for kind {kind:?} in version {api_version:?} (no CRD in {path} defines group {group:?}, and --require-crd is set)"
                    );
                    (None, Some(why))
                } else {
                    notes.push(format!(
                        "schema not checked: no CRD in {path} defines group {group:?} (--require-crd makes this a failure)"
                    ));
                    (None, None)
                }
            }
            _ => (None, None),
        };
        let mut judged =
            offline::judge_in(op.into(), doc, old, &args.username, &config, crd, &cluster)
                .map_err(|reason| CheckError::Document {
                    path: file.display().to_string(),
                    at: at.clone(),
                    reason,
                })?;
        if args.patch {
            let p = judged.patch.clone().unwrap_or_else(|| json!([]));
            let _ = writeln!(
                out,
                "# {}\n{}",
                judged.label,
                serde_json::to_string_pretty(&p).unwrap_or_default()
            );
        } else if op != CheckOperation::Delete {
            let yaml = serde_saphyr::to_string(&judged.object).unwrap_or_default();
            let _ = write!(out, "---\n{yaml}");
        }
        notes.extend(judged.notes.iter().cloned());
        for n in &notes {
            let _ = writeln!(err, "{}: note: {n}", judged.label);
        }
        for w in &judged.warnings {
            let _ = writeln!(err, "{}: warning: {w}", judged.label);
        }
        if let Some(d) = &judged.denial {
            any_denied = true;
            let _ = writeln!(err, "{}: denied: {d}", judged.label);
        }
        if missing.is_some() {
            judged.invalid = missing;
        }
        if let Some(i) = &judged.invalid {
            any_denied = true;
            let _ = writeln!(err, "{}: invalid: {i}", judged.label);
        }
    }
    Ok(any_denied)
}

/// Runs the check; 0 allowed, 1 denied or invalid, 2 unreadable input
/// (or a CRD rule mrguard cannot evaluate).
pub(crate) fn run(args: CheckArgs) -> i32 {
    if args.live.live {
        return super::live::run(&super::live::LiveCheck {
            files: &args.file,
            config: args.config.as_ref(),
            username: &args.username,
            max_documents: args.max_documents,
            live: &args.live,
        });
    }
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    match execute(&args, &mut out, &mut err) {
        Ok(false) => 0,
        Ok(true) => 1,
        Err(e) => {
            let _ = writeln!(err, "mrguard check: {e}");
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
        assert!(matches!(load_crds(dir.path()), Err(CheckError::NoCrd(_))));
        std::fs::write(dir.path().join("bad.yaml"), "a: [").unwrap();
        let e = load_crds(dir.path()).unwrap_err().to_string();
        assert!(e.contains("bad.yaml"), "{e}");
        assert!(matches!(
            load_crds(&dir.path().join("nope")),
            Err(CheckError::Manifest(ManifestError::Read { .. }))
        ));
    }
}
