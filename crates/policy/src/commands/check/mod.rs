//! `mrguard check`, the decision, in two steps around the runtime's reads:
//! [`request::CheckRequest::parse`] turns the files' text into manifests and
//! says what must be read to judge them ([`request::Needs`]); the runtime
//! reads exactly that ([`judge::Fetched`]: CRD files, or the live objects,
//! CRDs, claimants and activations of a cluster); [`judge::judge`] decides
//! every manifest. Here too: one manifest judged against its live object as
//! the UPDATE (or CREATE) applying it would send, each finding at the line
//! of its field, the text and SARIF renderings of the results, and
//! `check`'s report on a Composition, at its lines.

pub mod judge;
mod live;
pub mod offline;
pub mod request;

use serde::Serialize;
use serde_json::Value;

use crate::admission::api_server::{self, identity};
use crate::admission::config::Config;
use crate::admission::crd::{Crds, Lookup};
use crate::admission::model::{Action, Operation};
use crate::cluster::composition::{self, XrSchemas};
use crate::cluster::identity::report::IdentityReport;
use crate::cluster::identity::IdentityIndex;
use crate::commands::manifest::Manifest;
use crate::commands::merge;
use crate::commands::sarif::Annotation;

/// Why `check` could not judge its input.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// One manifest could not be judged against its live object.
    #[error("{object}: {reason}")]
    Judge {
        /// `Kind/name` of the manifest.
        object: String,
        /// What failed (the merge, or the API server's chain).
        reason: String,
    },
    /// A manifest file does not parse.
    #[error(transparent)]
    Manifest(#[from] crate::commands::manifest::ManifestError),
    /// A document cannot be judged offline.
    #[error("failed to judge {path}, {at}: {reason}")]
    Document {
        /// The file.
        path: String,
        /// "document 2".
        at: String,
        /// Why.
        reason: String,
    },
    /// The configuration read is not valid.
    #[error(transparent)]
    Config(#[from] crate::admission::config::SourceError),
    /// A CRD given cannot be used.
    #[error("{0}")]
    Crd(#[from] crate::admission::crd::CrdError),
    /// `--crd` names no CRD.
    #[error("failed to find a CustomResourceDefinition in {0}")]
    NoCrd(String),
    /// An UPDATE's document has no old version in `--old`.
    #[error("failed to match {what} ({at} of {path}) in {old}: no object with that kind, namespace and name")]
    NoOld {
        /// `Kind/name`.
        what: String,
        /// "document 2".
        at: String,
        /// The manifest file.
        path: String,
        /// The `--old` file.
        old: String,
    },
    /// A manifest to judge against the cluster has no name to find it by.
    #[error("failed to judge {path}, document {doc}: metadata.name is missing; a live check needs the name to find the object")]
    NoName {
        /// The file.
        path: String,
        /// 1-based document number.
        doc: usize,
    },
}

/// What became of one manifest.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckResult {
    /// The file.
    pub file: String,
    /// 1-based document number.
    pub document: usize,
    /// The line the object starts on.
    pub line: usize,
    /// `Kind/name` or `Kind/namespace/name`.
    pub object: String,
    /// `CREATE`, `UPDATE`, or `NONE` when nothing would be sent or judged.
    pub operation: String,
    /// `allowed`, `denied`, `invalid` (the API server would refuse it),
    /// `unchanged` or `skipped` (not a managed resource).
    pub verdict: String,
    /// Rule findings, each with the line it points at.
    pub findings: Vec<CheckFinding>,
    /// Every warning the API server would pass on (mutation and validation).
    pub warnings: Vec<String>,
    /// Why the API server itself would refuse it.
    pub invalid: Option<String>,
    /// Things worth knowing about how it was judged.
    pub notes: Vec<String>,
    /// Its external identity and the other live MRs that claim it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<IdentityReport>,
}

/// One rule finding of a live check.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckFinding {
    /// The rule.
    pub rule: String,
    /// `Deny`, `Warn`, or `Info` (a Composition finding the XRD makes harmless).
    pub action: String,
    /// The message, with the fix.
    pub message: String,
    /// The field it is about, when known.
    pub field: Option<String>,
    /// The line of that field in the manifest (or the nearest line).
    pub line: usize,
}

/// Who applies a manifest, and when.
#[derive(Debug, Clone, Copy)]
pub struct Applier<'a> {
    /// The user the apply runs as (for exemptions).
    pub username: &'a str,
    /// When the request is judged: staged rules and exceptions are judged
    /// at this instant. The caller's clock: the crate is pure, and a
    /// what-if tool or a test judges at a chosen time.
    pub now: jiff::Timestamp,
}

/// Judges one manifest against its live object, as the request applying
/// it would be judged: `merged` is the server-side-apply dry run's result
/// (server mode), else the new object is kubectl's client-side three-way
/// merge of the manifest into `live`; no live object is a CREATE. `by` is
/// who applies it and when. `crds` are the CRDs the credentials could
/// read. `live_mrs` records the live MRs whose external identity can
/// collide with this one's in an index (None: they were not listed), so
/// that `external-identity` judges as admission would and the result names
/// the other claimants.
pub fn judge_manifest(
    m: &Manifest,
    live: Option<&Value>,
    merged: Option<Value>,
    by: Applier<'_>,
    config: &Config,
    crds: Option<&Crds>,
    live_mrs: Option<&dyn Fn(&IdentityIndex)>,
) -> Result<CheckResult, CheckError> {
    let report = |obj: &Value, index: &IdentityIndex| {
        if let Some(fill) = live_mrs {
            fill(index);
        }
        Some(IdentityReport::of(obj, config, index, live_mrs.is_some()))
    };
    let label = api_server::label(&m.object);
    let mut notes = Vec::new();
    let (op, new) = match (live, merged) {
        (live, Some(result)) => (
            if live.is_some() {
                Operation::Update
            } else {
                Operation::Create
            },
            result,
        ),
        (None, None) => (Operation::Create, merge::with_last_applied(&m.object)),
        (Some(live), None) => {
            let applied =
                merge::client_side_apply(live, &m.object).map_err(|e| CheckError::Judge {
                    object: label.clone(),
                    reason: e.to_string(),
                })?;
            if !applied.had_last_applied {
                notes.push(format!(
                    "the live object has no {} annotation: kubectl would delete no field and add the annotation",
                    merge::LAST_APPLIED
                ));
            }
            if applied.patch.is_none() {
                return Ok(CheckResult {
                    file: m.file.clone(),
                    document: m.doc,
                    line: m.lines.start,
                    object: label,
                    operation: "NONE".into(),
                    verdict: "unchanged".into(),
                    findings: vec![],
                    warnings: vec![],
                    invalid: None,
                    notes: vec![
                        "kubectl apply would send nothing: the manifest matches the live object"
                            .into(),
                    ],
                    identity: report(live, &IdentityIndex::default()),
                });
            }
            (Operation::Update, applied.object)
        }
    };
    let (api_version, kind, _, _) = identity(&new);
    let crd = match crds.map(|c| c.lookup(&api_version, &kind)) {
        Some(Lookup::Found(v)) if v.ensure_supported().is_ok() => Some(v),
        Some(Lookup::Found(_)) => {
            notes.push(
                "the CRD has validation rules mrguard cannot evaluate; judged without its schema"
                    .into(),
            );
            None
        }
        _ => None,
    };
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let cluster = crds
        .map(|c| c.cluster_for(group, &kind))
        .unwrap_or_default();
    let identity = report(&new, cluster.identities());
    let judged = crate::admission::decider::Decider::new(config, &cluster, by.now)
        .judge(op, &new, live, by.username, crd)
        .map_err(|e| CheckError::Judge {
            object: label.clone(),
            reason: e.to_string(),
        })?;
    let findings: Vec<CheckFinding> = judged
        .findings
        .iter()
        .map(|f| CheckFinding::at(f, m))
        .collect();
    // Why an allowed UPDATE would be denied once the MR exists.
    notes.extend(judged.notes.iter().cloned());
    let verdict = if judged.invalid.is_some() {
        "invalid"
    } else if judged.findings.iter().any(|f| f.action == Action::Deny) {
        "denied"
    } else {
        "allowed"
    };
    Ok(CheckResult {
        file: m.file.clone(),
        document: m.doc,
        line: m.lines.start,
        object: label,
        operation: op.as_str().into(),
        verdict: verdict.into(),
        findings,
        warnings: judged.warnings,
        invalid: judged.invalid,
        notes,
        identity,
    })
}

impl CheckFinding {
    /// A rule finding on manifest `m`, at the line of the field it names.
    pub fn at(f: &crate::admission::model::Finding, m: &Manifest) -> Self {
        let mut finding = CheckFinding::unplaced(f);
        let path = crate::commands::sarif::finding_path(&f.rule, &f.message);
        finding.line = path
            .as_ref()
            .map(|p| m.lines.line_of(p))
            .unwrap_or(m.lines.start);
        finding
    }

    /// A rule finding on an object without a file (line 0).
    pub fn unplaced(f: &crate::admission::model::Finding) -> Self {
        let path = crate::commands::sarif::finding_path(&f.rule, &f.message);
        CheckFinding {
            rule: f.rule.to_string(),
            action: f.action.as_str().to_string(),
            message: match &f.fix {
                Some(fix) => format!("{}. Fix: {fix}", f.message),
                None => f.message.clone(),
            },
            field: path
                .as_ref()
                .map(|p| crate::commands::explain::display_path(p)),
            line: 0,
        }
    }
}

/// A manifest not judged, and why.
pub fn skipped(m: &Manifest, why: &str) -> CheckResult {
    CheckResult {
        file: m.file.clone(),
        document: m.doc,
        line: m.lines.start,
        object: api_server::label(&m.object),
        operation: "NONE".into(),
        verdict: "skipped".into(),
        findings: vec![],
        warnings: vec![],
        invalid: None,
        notes: vec![why.to_string()],
        identity: None,
    }
}

/// A manifest the API server refused in the server-side-apply dry run.
pub fn rejected(m: &Manifest, op: Operation, message: String) -> CheckResult {
    CheckResult {
        file: m.file.clone(),
        document: m.doc,
        line: m.lines.start,
        object: api_server::label(&m.object),
        operation: op.as_str().into(),
        verdict: "invalid".into(),
        findings: vec![],
        warnings: vec![],
        invalid: Some(message),
        notes: vec!["the server-side-apply dry run was refused by the API server".into()],
        identity: None,
    }
}

/// The text output: one block per manifest.
pub fn render_text(results: &[CheckResult]) -> String {
    let mut s = String::new();
    for r in results {
        let op = if r.operation == "NONE" {
            String::new()
        } else {
            format!("{} ", r.operation)
        };
        s.push_str(&format!(
            "{}:{}: {}: {op}{}\n",
            r.file, r.line, r.object, r.verdict
        ));
        for f in &r.findings {
            s.push_str(&format!(
                "  {}:{}: {} {}: {}\n",
                r.file,
                f.line,
                f.action.to_lowercase(),
                f.rule,
                f.message
            ));
        }
        for w in r.warnings.iter().filter(|w| {
            !r.findings
                .iter()
                .any(|f| w.starts_with(&format!("{}: ", f.rule)))
        }) {
            s.push_str(&format!("  warning: {w}\n"));
        }
        if let Some(i) = &r.invalid {
            s.push_str(&format!("  invalid: {i}\n"));
        }
        for l in r.identity.iter().flat_map(IdentityReport::lines) {
            s.push_str(&format!("  {l}\n"));
        }
        for n in &r.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
    }
    s
}

/// The SARIF annotations of the results.
pub fn annotations(results: &[CheckResult]) -> Vec<Annotation> {
    let mut out = Vec::new();
    for r in results {
        for f in &r.findings {
            out.push(Annotation {
                rule: f.rule.clone(),
                level: match f.action.as_str() {
                    "Deny" => "error",
                    "Warn" => "warning",
                    _ => "note",
                },
                message: format!("{}: {}", r.object, f.message),
                file: r.file.clone(),
                line: f.line,
                logical: match &f.field {
                    Some(p) => format!("{} {p}", r.object),
                    None => r.object.clone(),
                },
            });
        }
        if let Some(i) = &r.invalid {
            out.push(Annotation {
                rule: "api-server".into(),
                level: "error",
                message: format!("{}: {i}", r.object),
                file: r.file.clone(),
                line: r.line,
                logical: r.object.clone(),
            });
        }
    }
    out
}

/// `Info`: the action of a finding the XRD already makes harmless.
pub const INFO: &str = "Info";

/// What `check` reports for one Composition.
pub struct CompositionReport {
    /// Findings in Composition order, with their lines.
    pub findings: Vec<CheckFinding>,
    /// What was skipped.
    pub notes: Vec<String>,
}

/// Whether `object` is a Composition.
pub fn is_composition(object: &serde_json::Value) -> bool {
    let (api_version, kind, _, _) = identity(object);
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    composition::is_composition(group, &kind)
}

/// `mrguard check` on a Composition with MRDs known: one warning per
/// composed resource whose kind no MRAP activates, at the line of its
/// `base`. Empty for any other object.
pub fn inactive_composed(
    m: &Manifest,
    known: &crate::cluster::activation::Activations,
) -> Vec<String> {
    if !is_composition(&m.object) {
        return Vec::new();
    }
    composition::inactive(&m.object, known)
        .into_iter()
        .map(|(c, why)| format!("{}:{}: {why}", m.file, m.lines.line_of(&c.location)))
        .collect()
}

/// `mrguard check` on a Composition: the patches [`composition::analyse`]
/// finds, each at the line of its `toFieldPath` with the action in force
/// at `now`; `None` when `m` is not a Composition.
pub fn composition_report(
    m: &Manifest,
    config: &Config,
    xrs: &XrSchemas,
    now: jiff::Timestamp,
) -> Option<CompositionReport> {
    if !is_composition(&m.object) {
        return None;
    }
    let xrs = (!xrs.is_empty()).then_some(xrs);
    let analysis = composition::analyse(&m.object, config, xrs);
    let findings = analysis
        .findings
        .iter()
        .filter_map(|f| {
            let action = if f.informational {
                INFO
            } else {
                match config.action(
                    config.resource(&f.group, &f.kind),
                    composition::RULE,
                    Action::Warn,
                    now,
                ) {
                    Action::Off => return None,
                    a => a.as_str(),
                }
            };
            let mut at = f.location.clone();
            at.push("toFieldPath".into());
            Some(CheckFinding {
                rule: composition::RULE.into(),
                action: action.into(),
                message: format!("{}. Fix: {}", f.message(), f.fix()),
                field: Some(f.target.clone()),
                line: m.lines.line_of(&at),
            })
        })
        .collect();
    Some(CompositionReport {
        findings,
        notes: analysis.notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CFG: &str = "resources:\n  - apiGroups: ['rds.aws.upbound.io']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n";

    /// Nobody in particular, now.
    fn anyone() -> Applier<'static> {
        Applier {
            username: "",
            now: jiff::Timestamp::now(),
        }
    }

    fn manifest(text: &str) -> Manifest {
        crate::commands::manifest::parse(
            "gitops/db.yaml",
            text,
            crate::commands::manifest::MAX_DOCUMENTS,
        )
        .unwrap()
        .remove(0)
    }

    const DB: &str = "\
apiVersion: rds.aws.upbound.io/v1beta1
kind: Instance
metadata:
  name: prod-db
spec:
  forProvider:
    instanceClass: db.t3.micro
    region: eu-west-1
";

    fn live_db(created: bool) -> Value {
        let mut m: Value = serde_saphyr::from_str(DB).unwrap();
        m["spec"]["forProvider"]["region"] = json!("us-east-1");
        let mut live = merge::with_last_applied(&m);
        live["metadata"]["uid"] = json!("u");
        live["spec"]["deletionPolicy"] = json!("Delete");
        if created {
            live["metadata"]["annotations"]["crossplane.io/external-create-succeeded"] =
                json!("2024-01-01T00:00:00Z");
        }
        live
    }

    #[test]
    fn an_immutable_change_to_a_created_mr_is_denied_at_its_line() {
        let cfg = Config::from_yaml(CFG).unwrap();
        let m = manifest(DB);
        let live = live_db(true);
        let r = judge_manifest(&m, Some(&live), None, anyone(), &cfg, None, None).unwrap();
        assert_eq!(r.operation, "UPDATE");
        assert_eq!(r.verdict, "denied");
        assert_eq!(r.findings[0].rule, "immutable-field");
        assert_eq!(r.findings[0].line, 8);
        assert_eq!(
            r.findings[0].field.as_deref(),
            Some("spec.forProvider.region")
        );
        let a = annotations(std::slice::from_ref(&r));
        assert_eq!(a[0].line, 8);
        assert_eq!(a[0].level, "error");
        let text = render_text(&[r]);
        assert!(
            text.starts_with("gitops/db.yaml:1: Instance/prod-db: UPDATE denied\n"),
            "{text}"
        );
        assert!(
            text.contains("gitops/db.yaml:8: deny immutable-field"),
            "{text}"
        );
    }

    #[test]
    fn before_creation_the_same_change_is_allowed() {
        let cfg = Config::from_yaml(CFG).unwrap();
        let r = judge_manifest(
            &manifest(DB),
            Some(&live_db(false)),
            None,
            anyone(),
            &cfg,
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            (r.operation.as_str(), r.verdict.as_str()),
            ("UPDATE", "allowed")
        );
    }

    #[test]
    fn the_username_counts_for_exemptions() {
        let cfg = Config::from_yaml(&format!(
            "exemptUsernames: ['system:serviceaccount:crossplane-system:*']\n{CFG}"
        ))
        .unwrap();
        let r = judge_manifest(
            &manifest(DB),
            Some(&live_db(true)),
            None,
            Applier {
                username: "system:serviceaccount:crossplane-system:provider-aws",
                now: jiff::Timestamp::now(),
            },
            &cfg,
            None,
            None,
        )
        .unwrap();
        assert_eq!(r.verdict, "allowed");
    }

    #[test]
    fn no_live_object_is_a_create_and_an_equal_one_is_unchanged() {
        let cfg = Config::from_yaml(CFG).unwrap();
        let m = manifest(DB);
        let r = judge_manifest(&m, None, None, anyone(), &cfg, None, None).unwrap();
        assert_eq!(
            (r.operation.as_str(), r.verdict.as_str()),
            ("CREATE", "allowed")
        );
        let mut live = merge::with_last_applied(&m.object);
        live["spec"]["deletionPolicy"] = json!("Delete");
        let r = judge_manifest(&m, Some(&live), None, anyone(), &cfg, None, None).unwrap();
        assert_eq!(r.verdict, "unchanged");
    }

    #[test]
    fn server_mode_judges_the_dry_run_result() {
        let cfg = Config::from_yaml(CFG).unwrap();
        let m = manifest(DB);
        let live = live_db(true);
        let mut result = live.clone();
        result["spec"]["forProvider"]["region"] = json!("eu-west-1");
        let r = judge_manifest(&m, Some(&live), Some(result), anyone(), &cfg, None, None).unwrap();
        assert_eq!(r.verdict, "denied");
        assert!(r.notes.is_empty());
    }
}
