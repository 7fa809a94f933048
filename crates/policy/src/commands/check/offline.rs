//! `check` without a cluster: each document wrapped in the AdmissionReview
//! the API server would send and run through the API server's chain
//! ([`crate::admission::api_server`]), with
//! the CRDs and XRDs of `--crd` and the old objects of `--old`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::judge::{CheckReport, CrdFiles, DocumentResult};
use super::request::CheckRequest;
use super::{
    composition_report, inactive_composed, is_composition, CheckError, CheckFinding, CheckResult,
};
use crate::admission::api_server::{identity, label, Judged};
use crate::admission::config::{Config, ConfigSource};
use crate::admission::crd::{builtin_group, schema_for, CrdVersion, Crds, SchemaFor};
use crate::admission::decider::Decider;
use crate::admission::kube_version::KubeVersion;
use crate::admission::model::{Action, Operation};
use crate::cluster::activation::{Activations, MRAP_KIND};
use crate::cluster::composition::{self, XrSchemas};
use crate::cluster::Cluster;
use crate::commands::manifest::{self, FileText, Manifest, ManifestError};

/// What every document is judged with.
struct Inputs<'a> {
    config: Config,
    xrs: XrSchemas,
    crds: Option<Crds>,
    op: Operation,
    /// `--crd` as given, for messages.
    crd_path: String,
    /// What a cluster with these CRDs would know (documented immutable
    /// fields, activations).
    cluster: Cluster,
    request: &'a CheckRequest,
    now: jiff::Timestamp,
}

/// Judges every document of `request` offline.
pub(super) fn judge(
    request: &CheckRequest,
    config: &ConfigSource,
    crds: Option<CrdFiles>,
    now: jiff::Timestamp,
) -> CheckReport {
    let mut judgement = CheckReport::default();
    let inputs = match inputs(request, config, crds, now, &mut judgement.notes) {
        Ok(i) => i,
        Err(e) => {
            judgement.error = Some(e);
            return judgement;
        }
    };
    for m in &request.manifests {
        match judge_one(&inputs, m) {
            Ok(o) => judgement.outcomes.push(o),
            Err(e) => {
                judgement.error = Some(e);
                break;
            }
        }
    }
    judgement
}

fn inputs<'a>(
    request: &'a CheckRequest,
    config: &ConfigSource,
    crds: Option<CrdFiles>,
    now: jiff::Timestamp,
    notes: &mut Vec<String>,
) -> Result<Inputs<'a>, CheckError> {
    let options = &request.options;
    let config = config.load()?;
    let (kube, newer) = options.kube_version.judged_as();
    if let (Some(n), Some(_)) = (newer, &crds) {
        notes.push(n);
    }
    let (mut xrs, crd_path, crds) = match crds {
        Some(CrdFiles { path, files }) => {
            // XR schemas serve only the report on a Composition: without
            // one, no file is parsed for them.
            let compositions = request.manifests.iter().any(|m| is_composition(&m.object));
            let mut xrs = XrSchemas::default();
            let groups = crd_groups(&request.manifests);
            let files = files.inspect(|f| {
                if let (true, Ok(f)) = (compositions, f) {
                    add_xr_schemas(&mut xrs, f, options.max_documents);
                }
            });
            let crds = crds_from(&path, files, Some(&groups), kube);
            // XRDs alone are enough to judge Compositions.
            let crds = match crds {
                Err(CheckError::NoCrd(_)) if !xrs.is_empty() => Crds::judged_as(kube),
                other => other?,
            };
            (xrs, path, Some(crds))
        }
        None => (XrSchemas::default(), String::new(), None),
    };
    for d in &request.manifests {
        xrs.add(&d.object);
    }
    let op = options.operation.unwrap_or(if request.olds.is_some() {
        Operation::Update
    } else {
        Operation::Create
    });
    let cluster = crds.as_ref().map(Crds::cluster).unwrap_or_default();
    Ok(Inputs {
        config,
        xrs,
        crds,
        op,
        crd_path,
        cluster,
        request,
        now,
    })
}

/// The CRDs in `files` (read from `path`); documents that are not CRDs
/// are ignored. With `groups`, a file whose text names none of them is
/// not parsed: a CRD of group G holds the text G, so nothing the
/// manifests need is skipped, and checking a few kinds against a provider
/// family's 2,000 CRDs parses only their files.
pub fn crds_from(
    path: &str,
    files: impl IntoIterator<Item = Result<FileText, ManifestError>>,
    groups: Option<&BTreeSet<String>>,
    kube: KubeVersion,
) -> Result<Crds, CheckError> {
    let mut crds = Crds::judged_as(kube);
    let mut any = false;
    for f in files {
        let f = f?;
        if let Some(groups) = groups {
            // An MRAP names no group, only patterns; a provider config
            // CRD names its family's group (`aws.m.upbound.io`), not the
            // MRs' (`ec2.aws.m.upbound.io`), and provider-config-kind
            // needs it.
            let mrap = f.text.contains(MRAP_KIND);
            let provider_config = f.text.contains("providerconfig");
            if !mrap && !provider_config && !groups.iter().any(|g| f.text.contains(g.as_str())) {
                any |= f.text.contains("CustomResourceDefinition");
                continue;
            }
        }
        crds.add_yaml(&f.file, &f.text)?;
    }
    if crds.is_empty() && !any {
        return Err(CheckError::NoCrd(path.to_string()));
    }
    Ok(crds)
}

/// The XR schemas in one file: XRDs, and the CRDs Crossplane generates
/// from them. Files without objects are the CRD loader's to report.
fn add_xr_schemas(xrs: &mut XrSchemas, f: &FileText, max_documents: usize) {
    if let Ok(docs) = manifest::parse(&f.file, &f.text, max_documents) {
        for d in docs {
            xrs.add(&d.object);
        }
    }
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

/// The old version of `m` for an UPDATE: the document of `--old` with its
/// kind, namespace and name.
fn old_of<'a>(inputs: &'a Inputs<'_>, m: &Manifest) -> Result<Option<&'a Value>, CheckError> {
    let (Some((path, olds)), Operation::Update) = (&inputs.request.olds, inputs.op) else {
        return Ok(None);
    };
    let id = identity(&m.object);
    let found = olds.iter().find(|o| identity(&o.object) == id);
    let old = found.ok_or_else(|| CheckError::NoOld {
        what: label(&m.object),
        at: m.at.clone(),
        path: m.file.clone(),
        old: path.clone(),
    })?;
    Ok(Some(&old.object))
}

/// The CRD version that judges `doc`, or why there is none: `missing` when
/// an API server would refuse the kind, a note when it is judged unchecked.
fn crd_of<'a>(
    inputs: &'a Inputs<'_>,
    doc: &Value,
    notes: &mut Vec<String>,
) -> Result<(Option<&'a CrdVersion>, Option<String>), CheckError> {
    let Some(crds) = &inputs.crds else {
        return Ok((None, None));
    };
    let (api_version, kind, _, _) = identity(doc);
    let deleting = inputs.op == Operation::Delete;
    Ok(
        match schema_for(
            crds,
            &api_version,
            &kind,
            deleting,
            inputs.request.options.require_crd,
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
fn activation_problem(doc: &Value, activations: &Activations) -> Option<String> {
    let (api_version, kind, _, _) = identity(doc);
    activations.state_of(&api_version, &kind).problem()
}

/// Judges one document.
fn judge_one(inputs: &Inputs<'_>, m: &Manifest) -> Result<DocumentResult, CheckError> {
    let options = &inputs.request.options;
    let op = inputs.op;
    let doc = &m.object;
    let old = old_of(inputs, m)?;
    let mut notes = Vec::new();
    let (crd, missing) = crd_of(inputs, doc, &mut notes)?;
    let mut judged = Decider::new(&inputs.config, &inputs.cluster, inputs.now)
        .judge(op, doc, old, &options.username, crd)
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
    judged.warnings.extend(inactive_composed(m, &activations));
    let composition = composition_report(m, &inputs.config, &inputs.xrs, inputs.now);
    if let Some(c) = &composition {
        // The report replaces the webhook's view: it knows the lines
        // and the XRDs given.
        judged
            .warnings
            .retain(|w| !w.starts_with(&format!("{}: ", composition::RULE)));
        judged.denial = None;
        notes.extend(c.notes.iter().cloned());
    }
    let mut object_text = String::new();
    if options.text && options.patch {
        let p = judged.patch.clone().unwrap_or_else(|| json!([]));
        let _ = writeln!(
            object_text,
            "# {}\n{}",
            judged.label,
            serde_json::to_string_pretty(&p).unwrap_or_default()
        );
    } else if options.text && op != Operation::Delete {
        let yaml = serde_saphyr::to_string(&judged.object).unwrap_or_default();
        let _ = write!(object_text, "---\n{yaml}");
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
    let verdict_text = if options.text {
        verdict_lines(&judged, &notes, &findings, m)
    } else {
        String::new()
    };
    let result = CheckResult {
        file: m.file.clone(),
        document: m.doc,
        line: m.lines.start,
        object: judged.label,
        operation: op.as_str().into(),
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
    };
    Ok(DocumentResult {
        result,
        object_text,
        verdict_text,
    })
}

/// The text output's lines for one document: notes, warnings, audit
/// findings, the composition report, then the denial and invalidity.
fn verdict_lines(
    judged: &Judged,
    notes: &[String],
    findings: &[CheckFinding],
    m: &Manifest,
) -> String {
    let mut err = String::new();
    for n in notes {
        let _ = writeln!(err, "{}: note: {n}", judged.label);
    }
    for w in &judged.warnings {
        let _ = writeln!(err, "{}: warning: {w}", judged.label);
    }
    // Audit findings change nothing for the request; say them anyway,
    // so a check shows what an Audit rule would deny once enforced.
    for f in judged.findings.iter().filter(|f| f.action == Action::Audit) {
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
    err
}
