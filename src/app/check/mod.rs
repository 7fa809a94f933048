//! `mrguard check`: the webhooks' mutation and validation, offline, over a
//! multi-document YAML file. Each document is wrapped in the AdmissionReview
//! the API server would send and judged by the same pure functions.

pub mod live;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use mrguard_policy::admission::api_server::{identity, label, Judged};
use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::crd::{
    builtin_group, schema_for, CrdError, CrdVersion, Crds, SchemaFor,
};
use mrguard_policy::admission::decider::Decider;
use mrguard_policy::admission::kube_version::KubeVersion;
use mrguard_policy::admission::model::Operation;
use mrguard_policy::cluster::composition::{self, XrSchemas};
use mrguard_policy::cluster::Cluster;

use super::manifests::{self, Manifest, ManifestError};
use live::{CheckFinding, CheckOutput, CheckResult};

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
    #[error("failed to match {what} ({at} of {path}) in {old}: no object with that kind, namespace and name")]
    NoOld {
        what: String,
        at: String,
        path: String,
        old: String,
    },
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
/// folder; documents that are not CRDs are ignored. With `groups`, a file
/// whose text names none of them is not parsed: a CRD of group G holds the
/// text G, so nothing the manifests need is skipped, and checking a few
/// kinds against a provider family's 2,000 CRDs parses only their files.
pub(crate) fn load_crds(
    path: &Path,
    groups: Option<&BTreeSet<String>>,
    kube: KubeVersion,
) -> Result<Crds, CheckError> {
    let mut crds = Crds::judged_as(kube);
    let mut any = false;
    for f in manifests::files(path)? {
        let text = manifests::read_text(&f)?;
        if let Some(groups) = groups {
            // An MRAP names no group, only patterns; a provider config
            // CRD names its family's group (`aws.m.upbound.io`), not the
            // MRs' (`ec2.aws.m.upbound.io`), and provider-config-kind
            // needs it.
            let mrap = text.contains(mrguard_policy::cluster::activation::MRAP_KIND);
            let provider_config = text.contains("providerconfig");
            if !mrap && !provider_config && !groups.iter().any(|g| text.contains(g.as_str())) {
                any |= text.contains("CustomResourceDefinition");
                continue;
            }
        }
        crds.add_yaml(&f.display().to_string(), &text)?;
    }
    if crds.is_empty() && !any {
        return Err(CheckError::NoCrd(path.display().to_string()));
    }
    Ok(crds)
}

/// The API groups of `docs` that need a CRD (built-in groups do not),
/// and those of the kinds their Compositions compose (their MRDs say
/// whether they are active).
fn crd_groups(docs: &[Manifest]) -> BTreeSet<String> {
    let composed = docs
        .iter()
        .flat_map(|m| composition::composed(&m.object))
        .map(|c| c.api_version);
    docs.iter()
        .filter_map(|m| m.object.get("apiVersion").and_then(|v| v.as_str()))
        .map(str::to_string)
        .chain(composed)
        .filter_map(|a| a.rsplit_once('/').map(|(g, _)| g.to_string()))
        .filter(|g| !builtin_group(g))
        .collect()
}

/// What every document is judged with: the configuration, the manifests
/// and their old versions, and the CRDs and XRDs given.
struct Inputs {
    config: Config,
    xrs: XrSchemas,
    docs: Vec<Manifest>,
    /// `--old`: its path and its documents.
    olds: Option<(PathBuf, Vec<Manifest>)>,
    crds: Option<Crds>,
    op: CheckOperation,
    /// `--crd` as given, for messages.
    crd_path: String,
    /// What a cluster with these CRDs would know (documented immutable
    /// fields).
    cluster: Cluster,
    /// When every document is judged: one instant for the whole command.
    now: jiff::Timestamp,
}

/// Reads the configuration, the manifests, `--old` and the CRDs; a note
/// goes to `err` when the release asked for is newer than mrguard knows.
fn read_inputs(args: &CheckArgs, err: &mut dyn Write) -> Result<Inputs, CheckError> {
    let config = match &args.config {
        Some(p) => crate::config::load_file(p)?.0,
        None => Config::builtin(),
    };
    let mut xrs = match &args.crd {
        Some(p) => super::compositions::xr_schemas_in(p, args.max_documents)?,
        None => Default::default(),
    };
    let read = |p: &PathBuf| manifests::read(std::slice::from_ref(p), args.max_documents);
    let docs = manifests::read(&args.file, args.max_documents)?;
    let olds = match &args.old {
        Some(p) => Some((p.clone(), read(p)?)),
        None => None,
    };
    let (kube, newer) = args.kube_version.judged_as();
    if let (Some(n), Some(_)) = (newer, &args.crd) {
        let _ = writeln!(err, "mrguard check: note: {n}");
    }
    // Read after the manifests, to parse only the CRDs of their groups.
    let crds = match &args.crd {
        // XRDs alone are enough to judge Compositions.
        Some(p) => match load_crds(p, Some(&crd_groups(&docs)), kube) {
            Err(CheckError::NoCrd(_)) if !xrs.is_empty() => Some(Crds::judged_as(kube)),
            other => Some(other?),
        },
        None => None,
    };
    let op = args.operation.unwrap_or(if olds.is_some() {
        CheckOperation::Update
    } else {
        CheckOperation::Create
    });
    let crd_path = args
        .crd
        .as_deref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let cluster = crds.as_ref().map(Crds::cluster).unwrap_or_default();
    for d in &docs {
        xrs.add(&d.object);
    }
    Ok(Inputs {
        config,
        xrs,
        docs,
        olds,
        crds,
        op,
        crd_path,
        cluster,
        now: jiff::Timestamp::now(),
    })
}

/// The old version of `m` for an UPDATE: the document of `--old` with its
/// kind, namespace and name.
fn old_of<'a>(inputs: &'a Inputs, m: &Manifest) -> Result<Option<&'a Value>, CheckError> {
    let (Some((path, olds)), CheckOperation::Update) = (&inputs.olds, inputs.op) else {
        return Ok(None);
    };
    let id = identity(&m.object);
    let found = olds.iter().find(|o| identity(&o.object) == id);
    let old = found.ok_or_else(|| CheckError::NoOld {
        what: label(&m.object),
        at: m.at.clone(),
        path: m.file.clone(),
        old: path.display().to_string(),
    })?;
    Ok(Some(&old.object))
}

/// The CRD version that judges `doc`, or why there is none: `missing` when
/// an API server would refuse the kind, a note when it is judged unchecked.
fn crd_of<'a>(
    args: &CheckArgs,
    inputs: &'a Inputs,
    doc: &Value,
    notes: &mut Vec<String>,
) -> Result<(Option<&'a CrdVersion>, Option<String>), CheckError> {
    let Some(crds) = &inputs.crds else {
        return Ok((None, None));
    };
    let (api_version, kind, _, _) = identity(doc);
    let deleting = inputs.op == CheckOperation::Delete;
    Ok(
        match schema_for(
            crds,
            &api_version,
            &kind,
            deleting,
            args.require_crd,
            &inputs.crd_path,
        )? {
            SchemaFor::Found(v) => (Some(v), None),
            SchemaFor::NoMatch(why) => (None, Some(why)),
            SchemaFor::Unchecked(note) => {
                notes.push(note);
                (None, None)
            }
            SchemaFor::None => (None, None),
        },
    )
}

/// Why `doc`'s kind cannot be created yet, when the MRDs and MRAPs given
/// say it is not activated.
fn activation_problem(
    doc: &Value,
    activations: &mrguard_policy::cluster::activation::Activations,
) -> Option<String> {
    let (api_version, kind, _, _) = identity(doc);
    activations.state_of(&api_version, &kind).problem()
}

/// Judges one document; the object (or its patch) goes to `out` in text
/// output, and the verdict's lines to `err`.
fn check_one(
    args: &CheckArgs,
    inputs: &Inputs,
    m: &Manifest,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<CheckResult, CheckError> {
    let op = inputs.op;
    let doc = &m.object;
    let old = old_of(inputs, m)?;
    let mut notes = Vec::new();
    let (crd, missing) = crd_of(args, inputs, doc, &mut notes)?;
    let mut judged = Decider::new(&inputs.config, &inputs.cluster, inputs.now)
        .judge(op.into(), doc, old, &args.username, crd)
        .map_err(|e| e.to_string())
        .map_err(|reason| CheckError::Document {
            path: m.file.clone(),
            at: m.at.clone(),
            reason,
        })?;
    let activations = inputs.cluster.activations().snapshot();
    judged
        .warnings
        .extend(activation_problem(doc, &activations));
    judged
        .warnings
        .extend(mrguard_policy::commands::check::inactive_composed(
            m,
            &activations,
        ));
    let composition = mrguard_policy::commands::check::composition_report(
        m,
        &inputs.config,
        &inputs.xrs,
        inputs.now,
    );
    if let Some(c) = &composition {
        // The report replaces the webhook's view: it knows the lines
        // and the XRDs given.
        judged
            .warnings
            .retain(|w| !w.starts_with(&format!("{}: ", composition::RULE)));
        judged.denial = None;
        notes.extend(c.notes.iter().cloned());
    }
    let text = args.live.output == CheckOutput::Text;
    if text && args.patch {
        let p = judged.patch.clone().unwrap_or_else(|| json!([]));
        let _ = writeln!(
            out,
            "# {}\n{}",
            judged.label,
            serde_json::to_string_pretty(&p).unwrap_or_default()
        );
    } else if text && op != CheckOperation::Delete {
        let yaml = serde_saphyr::to_string(&judged.object).unwrap_or_default();
        let _ = write!(out, "---\n{yaml}");
    }
    notes.extend(judged.notes.iter().cloned());
    if missing.is_some() {
        judged.invalid = missing;
    }
    let findings = match composition {
        Some(c) => c.findings,
        None => judged
            .findings
            .iter()
            .map(|f| CheckFinding::at(f, m))
            .collect(),
    };
    let denied = judged.denial.is_some() || findings.iter().any(|f| f.action == "Deny");
    if text {
        print_verdict(&judged, &notes, &findings, m, err);
    }
    Ok(CheckResult {
        file: m.file.clone(),
        document: m.doc,
        line: m.lines.start,
        object: judged.label,
        operation: Operation::from(op).as_str().into(),
        verdict: if judged.invalid.is_some() {
            "invalid"
        } else if denied {
            "denied"
        } else {
            "allowed"
        }
        .into(),
        findings,
        warnings: judged.warnings,
        invalid: judged.invalid,
        notes,
        identity: None,
    })
}

/// The text output's lines for one document: notes, warnings, audit
/// findings, the composition report, then the denial and invalidity.
fn print_verdict(
    judged: &Judged,
    notes: &[String],
    findings: &[CheckFinding],
    m: &Manifest,
    err: &mut dyn Write,
) {
    for n in notes {
        let _ = writeln!(err, "{}: note: {n}", judged.label);
    }
    for w in &judged.warnings {
        let _ = writeln!(err, "{}: warning: {w}", judged.label);
    }
    // Audit findings change nothing for the request; say them anyway,
    // so a check shows what an Audit rule would deny once enforced.
    for f in judged
        .findings
        .iter()
        .filter(|f| f.action == mrguard_policy::admission::model::Action::Audit)
    {
        let _ = writeln!(err, "{}: audit: {}: {}", judged.label, f.rule, f.message);
    }
    for f in findings.iter().filter(|f| f.rule == composition::RULE) {
        let level = match f.action.as_str() {
            "Deny" => "denied",
            "Warn" => "warning",
            _ => "note",
        };
        let _ = writeln!(
            err,
            "{}: {level}: {}:{}: {}: {}",
            judged.label, m.file, f.line, f.rule, f.message
        );
    }
    if let Some(d) = &judged.denial {
        let _ = writeln!(err, "{}: denied: {d}", judged.label);
    }
    if let Some(i) = &judged.invalid {
        let _ = writeln!(err, "{}: invalid: {i}", judged.label);
    }
}

/// The JSON or SARIF output of every result; text was printed as it went.
fn print_results(output: CheckOutput, results: &[CheckResult], out: &mut dyn Write) {
    match output {
        CheckOutput::Text => {}
        CheckOutput::Json => {
            let s = serde_json::to_string_pretty(results).unwrap_or_default();
            let _ = writeln!(out, "{s}");
        }
        CheckOutput::Sarif => {
            let log = mrguard_policy::commands::sarif::log(
                &mrguard_policy::commands::check::annotations(results),
            );
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&log).unwrap_or_default()
            );
        }
    }
}

/// Judges every document; `Ok(true)` when any is denied or invalid.
fn execute(args: &CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<bool, CheckError> {
    let inputs = read_inputs(args, err)?;
    let mut results = Vec::new();
    for m in &inputs.docs {
        results.push(check_one(args, &inputs, m, out, err)?);
    }
    let any_denied = results.iter().any(|r| r.verdict != "allowed");
    print_results(args.live.output, &results, out);
    Ok(any_denied)
}

/// Runs the check; 0 allowed, 1 denied or invalid, 2 unreadable input
/// (or a CRD rule mrguard cannot evaluate).
pub(crate) fn run(mut args: CheckArgs) -> i32 {
    let positional = std::mem::take(&mut args.files);
    args.file.extend(positional);
    if args.live.live {
        return live::run(&live::LiveCheck {
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
        assert!(matches!(
            load_crds(dir.path(), None, KubeVersion::NEWEST),
            Err(CheckError::NoCrd(_))
        ));
        std::fs::write(dir.path().join("bad.yaml"), "a: [").unwrap();
        let e = load_crds(dir.path(), None, KubeVersion::NEWEST)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.yaml"), "{e}");
        assert!(matches!(
            load_crds(&dir.path().join("nope"), None, KubeVersion::NEWEST),
            Err(CheckError::Manifest(ManifestError::Read { .. }))
        ));
    }
}
