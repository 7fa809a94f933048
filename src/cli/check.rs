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
    /// Manifest file (multi-document YAML); "-" reads standard input.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
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
    /// With --crd: fail an object whose API group no CRD in PATH defines,
    /// as an API server without that CRD would ("no matches for kind"),
    /// instead of judging it with a note that its schema was not checked.
    /// Built-in Kubernetes groups (core, apps, batch, *.k8s.io, ...) need no CRD.
    #[arg(long, requires = "crd")]
    pub require_crd: bool,
    /// The most YAML documents read from the manifest file (and from --old);
    /// a larger file is refused rather than read without bound.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_documents: usize,
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
    #[error("failed to read {path}, {at}: {reason}")]
    Document {
        path: String,
        /// "document 2", or "document 2, item 5" inside a List.
        at: String,
        reason: String,
    },
    #[error("failed to read {path}: it has more than {max} YAML documents; raise --max-documents to read them all")]
    TooManyDocuments { path: String, max: usize },
    /// What `kubectl apply` says of such a file: "no objects passed to apply".
    #[error("failed to find an object in {path}: it is empty, or holds only comments or `---` separators")]
    NoObjects { path: String },
    #[error("{0}")]
    Config(#[from] crate::config::ConfigFileError),
    #[error("{0}")]
    Crd(#[from] CrdError),
    #[error("failed to find a CustomResourceDefinition in {0}")]
    NoCrd(String),
    #[error("failed to match {what} ({at} of {path}) in {old}: no object with that kind, namespace and name")]
    NoOld {
        what: String,
        at: String,
        path: String,
        old: String,
    },
}

/// One object of a manifest file, with where it was found.
struct Doc {
    /// "document 2", or "document 2, item 5" inside a List.
    at: String,
    value: Value,
}

/// `kubectl get -o yaml` prints several objects as a `List` (or a typed
/// `<Kind>List`); `kubectl apply` applies its items.
fn list_items(v: &Value) -> Option<&Vec<Value>> {
    let kind = v.get("kind").and_then(Value::as_str)?;
    if !kind.ends_with("List") {
        return None;
    }
    v.get("items").and_then(Value::as_array)
}

/// Parses YAML documents with at most `max` documents; parse errors name
/// `path` instead of the parser's placeholder.
fn parse_documents(path: &str, text: &str, max: usize) -> Result<Vec<Value>, CheckError> {
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_documents: max,
        },
    };
    serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
        if let serde_saphyr::Error::Budget {
            breach: serde_saphyr::budget::BudgetBreach::Documents { .. },
            ..
        } = e.without_snippet()
        {
            return CheckError::TooManyDocuments {
                path: path.to_string(),
                max,
            };
        }
        CheckError::Parse {
            path: path.to_string(),
            reason: e
                .to_string()
                .replace("--> <input>:", &format!("--> {path}:")),
        }
    })
}

fn read_docs(path: &Path, max_documents: usize) -> Result<Vec<Doc>, CheckError> {
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
    let docs = parse_documents(&p, &text, max_documents)?;
    let mut out = Vec::new();
    for (i, d) in docs.into_iter().enumerate() {
        let at = format!("document {}", i + 1);
        if d.is_null() {
            continue;
        }
        match list_items(&d) {
            Some(items) => {
                for (j, item) in items.iter().enumerate() {
                    let at = format!("{at}, item {}", j + 1);
                    check_object(&p, &at, item)?;
                    out.push(Doc {
                        at,
                        value: item.clone(),
                    });
                }
            }
            None => {
                check_object(&p, &at, &d)?;
                out.push(Doc { at, value: d });
            }
        }
    }
    if out.is_empty() {
        return Err(CheckError::NoObjects { path: p });
    }
    Ok(out)
}

/// Every object needs a kind and an apiVersion, as for the API server.
fn check_object(path: &str, at: &str, d: &Value) -> Result<(), CheckError> {
    if !d.is_object() {
        return Err(CheckError::Document {
            path: path.to_string(),
            at: at.to_string(),
            reason: format!("expected a mapping, found {}", json_type(d)),
        });
    }
    for field in ["apiVersion", "kind"] {
        if d.get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(CheckError::Document {
                path: path.to_string(),
                at: at.to_string(),
                reason: format!("{field} is missing"),
            });
        }
    }
    Ok(())
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
    let config = match &args.config {
        Some(p) => crate::config::load_file(p)?.0,
        None => Config::builtin(),
    };
    let crds = match &args.crd {
        Some(p) => Some(load_crds(p)?),
        None => None,
    };
    let docs = read_docs(&args.file, args.max_documents)?;
    let olds = match &args.old {
        Some(p) => Some((p, read_docs(p, args.max_documents)?)),
        None => None,
    };
    let op = args.operation.unwrap_or(if olds.is_some() {
        CheckOperation::Update
    } else {
        CheckOperation::Create
    });
    let crd_path = args.crd.as_deref().map(Path::display);
    let mut any_denied = false;
    for Doc { at, value: doc } in &docs {
        let old = match (&olds, op) {
            (Some((path, olds)), CheckOperation::Update) => {
                let id = identity(doc);
                let found = olds.iter().find(|o| identity(&o.value) == id);
                Some(
                    &found
                        .ok_or_else(|| CheckError::NoOld {
                            what: label(doc),
                            at: at.clone(),
                            path: args.file.display().to_string(),
                            old: path.display().to_string(),
                        })?
                        .value,
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
        let mut judged = offline::judge(op.into(), doc, old, &args.username, &config, crd)
            .map_err(|reason| CheckError::Document {
                path: args.file.display().to_string(),
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
