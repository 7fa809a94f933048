//! `mrguard check`: the webhooks' mutation and validation, offline, over a
//! multi-document YAML file. Each document is wrapped in the AdmissionReview
//! the API server would send and judged by the same pure functions.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use mrguard_policy::config::Config;
use mrguard_policy::crd::{CrdError, Crds, Lookup};
use mrguard_policy::model::Operation;
use mrguard_policy::offline::{self, identity, label};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum CheckOperation {
    Create,
    Update,
    Delete,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Manifest file (multi-document YAML); "-" reads standard input. With
    /// --live: repeatable, and folders are read recursively.
    #[arg(short = 'f', long = "file", required = true)]
    pub file: Vec<PathBuf>,
    /// The previous version of the objects, for UPDATE (matched by kind, namespace and name).
    #[arg(long)]
    pub old: Option<PathBuf>,
    /// The operation to judge [default: CREATE, or UPDATE with --old].
    #[arg(long, value_enum)]
    pub operation: Option<CheckOperation>,
    /// Configuration file; the built-in default when absent.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The requesting username, for exemptUsernames.
    #[arg(long, default_value = "")]
    pub username: String,
    /// Print the JSON Patch of each object instead of the defaulted object.
    #[arg(long)]
    pub patch: bool,
    /// CRD file, or folder of CRD files: also apply their schema defaults
    /// before mutation, and check types, enums, required fields and
    /// x-kubernetes-validations rules after it, as the API server would.
    #[arg(long, value_name = "PATH")]
    pub crd: Option<PathBuf>,
    #[command(flatten)]
    pub live: super::live::LiveArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("failed to read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse {path}: {reason}")]
    Parse { path: String, reason: String },
    #[error("failed to read {path}, document {doc}: {reason}")]
    Document {
        path: String,
        doc: usize,
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
    #[error("failed to match {what} (document {doc} of {path}) in {old}: no object with that kind, namespace and name")]
    NoOld {
        what: String,
        doc: usize,
        path: String,
        old: String,
    },
}

fn read_docs(path: &Path) -> Result<Vec<Value>, CheckError> {
    let p = path.display().to_string();
    let text = if path == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map_err(|source| {
            CheckError::Read {
                path: p.clone(),
                source,
            }
        })?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|source| CheckError::Read {
            path: p.clone(),
            source,
        })?
    };
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| CheckError::Parse {
        path: p.clone(),
        reason: e.to_string(),
    })?;
    let mut out = Vec::new();
    for (i, d) in docs.into_iter().enumerate() {
        match d {
            Value::Null => continue,
            Value::Object(_) => {
                let doc = i + 1;
                for field in ["apiVersion", "kind"] {
                    if d.get(field)
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        return Err(CheckError::Document {
                            path: p.clone(),
                            doc,
                            reason: format!("{field} is missing"),
                        });
                    }
                }
                out.push(d);
            }
            other => {
                return Err(CheckError::Document {
                    path: p.clone(),
                    doc: i + 1,
                    reason: format!("expected a mapping, found {}", json_type(&other)),
                })
            }
        }
    }
    Ok(out)
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
    let mut files = Vec::new();
    collect_files(path, &mut files)?;
    let mut crds = Crds::default();
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|source| CheckError::Read {
            path: f.display().to_string(),
            source,
        })?;
        crds.add_yaml(&f.display().to_string(), &text)?;
    }
    if crds.is_empty() {
        return Err(CheckError::NoCrd(path.display().to_string()));
    }
    Ok(crds)
}

fn collect_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), CheckError> {
    let read_err = |source| CheckError::Read {
        path: path.display().to_string(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if !meta.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            collect_files(&e, out)?;
        } else if e
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"))
        {
            out.push(e);
        }
    }
    Ok(())
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
    let docs = read_docs(file)?;
    let olds = match &args.old {
        Some(p) => Some((p, read_docs(p)?)),
        None => None,
    };
    let op = args.operation.unwrap_or(if olds.is_some() {
        CheckOperation::Update
    } else {
        CheckOperation::Create
    });
    let mut any_denied = false;
    for (i, doc) in docs.iter().enumerate() {
        let old =
            match (&olds, op) {
                (Some((path, olds)), CheckOperation::Update) => {
                    let id = identity(doc);
                    Some(olds.iter().find(|o| identity(o) == id).ok_or_else(|| {
                        CheckError::NoOld {
                            what: label(doc),
                            doc: i + 1,
                            path: file.display().to_string(),
                            old: path.display().to_string(),
                        }
                    })?)
                }
                _ => None,
            };
        let (api_version, kind, _, _) = identity(doc);
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
            _ => (None, None),
        };
        let mut judged = offline::judge(op.into(), doc, old, &args.username, &config, crd)
            .map_err(|reason| CheckError::Document {
                path: file.display().to_string(),
                doc: i + 1,
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

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Runs the check; 0 allowed, 1 denied or invalid, 2 unreadable input
/// (or a CRD rule mrguard cannot evaluate).
pub fn run(args: CheckArgs) -> i32 {
    if args.live.live {
        return super::live::run(&args);
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
            Err(CheckError::Read { .. })
        ));
    }
}
