//! `mrguard check`: the webhooks' mutation and validation, offline, over a
//! multi-document YAML file. Each document is wrapped in the AdmissionReview
//! the API server would send and judged by the same pure functions.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use crate::admission;
use crate::config::Config;
use crate::crd::{CrdError, CrdVersion, Crds, Lookup};
use crate::rules::Action;

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
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Crd(#[from] CrdError),
    #[error("failed to match {what} (document {doc} of {path}) in {old}: no object with that kind, namespace and name")]
    NoOld {
        what: String,
        doc: usize,
        path: String,
        old: String,
    },
}

/// One judged document.
#[derive(Debug)]
pub struct Judged {
    pub label: String,
    pub object: Value,
    pub patch: Option<Value>,
    pub warnings: Vec<String>,
    pub denial: Option<String>,
    /// What the API server would reject, given `--crd` (kubectl's wording).
    pub invalid: Option<String>,
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
                    reason: format!("expected a mapping, found {}", crate::rules::show(&other)),
                })
            }
        }
    }
    Ok(out)
}

fn identity(v: &Value) -> (String, String, String, String) {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name"),
    )
}

fn label(v: &Value) -> String {
    let (_, kind, ns, name) = identity(v);
    if ns.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{ns}/{name}")
    }
}

/// Wraps an object in the AdmissionReview the API server would send.
pub fn review_for(
    op: CheckOperation,
    object: Option<&Value>,
    old: Option<&Value>,
    username: &str,
) -> Value {
    let subject = object.or(old).cloned().unwrap_or(Value::Null);
    let api_version = subject
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
    let (_, _, ns, name) = identity(&subject);
    let mut request = json!({
        "uid": "mrguard-check",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
        "name": name,
        "operation": match op { CheckOperation::Create => "CREATE", CheckOperation::Update => "UPDATE", CheckOperation::Delete => "DELETE" },
        "userInfo": {"username": username},
        "object": object,
        "oldObject": old,
        "dryRun": true,
    });
    if !ns.is_empty() {
        request["namespace"] = json!(ns);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

fn decode(review: Value) -> Result<admission::Request, String> {
    let bytes = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
    admission::decode(&bytes).map_err(|e| e.to_string())
}

/// Mutates then validates one object, as the API server chains the webhooks.
pub fn judge(
    op: CheckOperation,
    object: &Value,
    old: Option<&Value>,
    username: &str,
    config: &Config,
) -> Result<Judged, String> {
    judge_with(op, object, old, username, config, None)
}

/// [`judge`], plus what the API server does with the object's CRD: its
/// defaults before the mutating webhook (and again after it, as the API
/// server re-defaults a patched object), then its schema and rules after.
pub fn judge_with(
    op: CheckOperation,
    object: &Value,
    old: Option<&Value>,
    username: &str,
    config: &Config,
    crd: Option<&CrdVersion>,
) -> Result<Judged, String> {
    let label = label(object);
    // The API server does not validate objects being deleted.
    let crd = crd.filter(|_| op != CheckOperation::Delete);
    let defaulted = |v: &Value| {
        let mut v = v.clone();
        if let Some(c) = crd {
            c.apply_defaults(&mut v);
        }
        v
    };
    let (object, old) = (&defaulted(object), old.map(defaulted));
    let old = old.as_ref();
    let (mut current, mut patch, mut warnings) = (object.clone(), None, Vec::new());
    if op != CheckOperation::Delete {
        let req = decode(review_for(op, Some(object), old, username))?;
        let d = admission::mutate(&req, config);
        warnings.extend(d.response.warnings.clone().unwrap_or_default());
        if let Some(m) = d.mutated {
            patch = Some(
                serde_json::to_value(crate::admission::patch::build(object, &m))
                    .map_err(|e| e.to_string())?,
            );
            current = defaulted(&m);
        }
    }
    if let Some(c) = crd {
        c.prune(&mut current);
    }
    let req = match op {
        CheckOperation::Delete => decode(review_for(op, None, Some(object), username))?,
        _ => decode(review_for(op, Some(&current), old, username))?,
    };
    let d = admission::validate(&req, config);
    warnings.extend(d.response.warnings.clone().unwrap_or_default());
    let denial = (!d.response.allowed).then(|| d.response.result.message.clone());
    debug_assert!(d.findings.iter().all(|f| f.action != Action::Off));
    let invalid = match crd {
        None => None,
        Some(c) => {
            // Strict field validation judges what the client sent.
            let mut errors = c.unknown_fields(object);
            errors.extend(c.validate(&current, old).map_err(|e| e.to_string())?);
            let (_, kind, _, name) = identity(&current);
            (!errors.is_empty()).then(|| crate::crd::render(&kind, &name, &errors))
        }
    };
    Ok(Judged {
        label,
        object: current,
        patch,
        warnings,
        denial,
        invalid,
    })
}

fn execute(args: &CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<bool, CheckError> {
    let config = match &args.config {
        Some(p) => Config::from_file(p)?,
        None => Config::builtin(),
    };
    let crds = match &args.crd {
        Some(p) => Some(Crds::load(p)?),
        None => None,
    };
    let docs = read_docs(&args.file)?;
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
                            path: args.file.display().to_string(),
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
        let mut judged =
            judge_with(op, doc, old, &args.username, &config, crd).map_err(|reason| {
                CheckError::Document {
                    path: args.file.display().to_string(),
                    doc: i + 1,
                    reason,
                }
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
    fn review_carries_scope_and_operation() {
        let obj = json!({"apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket", "metadata": {"name": "b", "namespace": "t"}, "spec": {"forProvider": {}}});
        let r = review_for(CheckOperation::Create, Some(&obj), None, "u");
        assert_eq!(r["request"]["namespace"], "t");
        assert_eq!(r["request"]["kind"]["group"], "s3.aws.m.upbound.io");
        let req = decode(r).unwrap();
        assert_eq!(req.name, "b");
    }

    #[test]
    fn judge_defaults_and_denies() {
        let cfg = Config::builtin();
        let obj = json!({"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket", "metadata": {"name": "b"}, "spec": {"forProvider": {"region": "us-east-1"}}});
        let j = judge(CheckOperation::Create, &obj, None, "", &cfg).unwrap();
        assert_eq!(j.object["spec"]["deletionPolicy"], "Delete");
        assert!(j.denial.is_none());
        let mut bad = obj.clone();
        bad["spec"]["deletionPolicy"] = json!("delete");
        let j = judge(CheckOperation::Create, &bad, None, "", &cfg).unwrap();
        assert!(j.denial.unwrap().contains("[deletion-policy]"));
    }
}
