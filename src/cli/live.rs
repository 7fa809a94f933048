//! `mrguard check --live`: a preflight of manifests against the cluster
//! they are headed for. Each MR manifest is merged with its live object the
//! way the API server would (kubectl's client-side three-way merge, or a
//! server-side-apply dry run) and judged as that UPDATE, or as a CREATE when
//! there is no live object, by the same `offline::judge` as `check`. It
//! never writes: client mode only reads, server mode sends `dryRun=All`.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use kube::api::{Patch, PatchParams};
use serde::Serialize;
use serde_json::Value;

use super::cluster::{self, api_error, ClusterError, ConfigSource, Discovery};
use super::manifests::{self, Manifest, ManifestError};
use super::progress::Progress;
use super::sarif::{self, Annotation};
use mrguard_policy::config::Config;
use mrguard_policy::crd::{Crds, Lookup};
use mrguard_policy::identity::report::IdentityReport;
use mrguard_policy::identity::IdentityIndex;
use mrguard_policy::merge;
use mrguard_policy::model::{Action, Operation};
use mrguard_policy::offline::{self, identity};

use crate::claimants::{Families, Family};

/// How the new object is computed from the manifest and the live object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum MergeMode {
    /// kubectl apply's client-side three-way JSON merge (needs `get`).
    Client,
    /// A server-side-apply dry run (needs `patch`; runs the cluster's own
    /// admission too).
    Server,
}

/// Output formats of `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LiveOutput {
    /// One block per manifest, for people.
    Text,
    /// A JSON array of results.
    Json,
    /// SARIF 2.1.0, for pull-request annotations.
    Sarif,
}

/// The flags of `check --live` (flattened into `check`).
#[derive(Debug, Clone, Args)]
pub(crate) struct LiveArgs {
    /// Judge the manifests against the live objects of a cluster: each as
    /// the UPDATE (or CREATE) applying it would send. Never writes.
    #[arg(long, conflicts_with_all = ["old", "operation", "patch", "crd"])]
    pub(crate) live: bool,
    /// Kubeconfig [default: $KUBECONFIG or ~/.kube/config, else in-cluster].
    #[arg(long, requires = "live")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The kubeconfig context [default: the current context].
    #[arg(long, requires = "live")]
    pub(crate) context: Option<String>,
    /// Namespace of manifests that name none [default: the context's].
    #[arg(short = 'n', long, requires = "live")]
    pub(crate) namespace: Option<String>,
    /// How the new object is computed: kubectl's client-side three-way
    /// merge (needs get), or a server-side-apply dry run (needs patch).
    #[arg(long, value_enum, default_value = "client", requires = "live")]
    pub(crate) merge: MergeMode,
    /// Field manager of the server-side-apply dry run; use your GitOps
    /// tool's to see what its apply would remove.
    #[arg(long, default_value = "mrguard-check", requires = "live")]
    pub(crate) field_manager: String,
    /// Read the configuration from the installed release's ConfigMap
    /// (key config.yaml) instead of --config.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        conflicts_with = "config",
        requires = "live"
    )]
    pub(crate) config_from_cluster: Option<String>,
    /// Output format: text (with --live one block per manifest; offline,
    /// objects on stdout and findings on stderr), or a JSON array of
    /// results, or SARIF, on stdout.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub(crate) output: LiveOutput,
    /// No progress on stderr (shown only when stderr is a terminal).
    #[arg(long, requires = "live")]
    pub(crate) quiet: bool,
}

/// Why a live check could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LiveError {
    /// A manifest could not be read.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A manifest cannot be judged against the cluster.
    #[error("failed to judge {path}, document {doc}: {reason}")]
    Document {
        /// The file.
        path: String,
        /// 1-based document number.
        doc: usize,
        /// Why.
        reason: String,
    },
    /// The cluster could not be asked.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// Anything else on the way (configuration, merge).
    #[error("{0}")]
    Other(String),
}

/// What became of one manifest.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LiveResult {
    /// The file.
    pub(crate) file: String,
    /// 1-based document number.
    pub(crate) document: usize,
    /// The line the object starts on.
    pub(crate) line: usize,
    /// `Kind/name` or `Kind/namespace/name`.
    pub(crate) object: String,
    /// `CREATE`, `UPDATE`, or `NONE` when nothing would be sent or judged.
    pub(crate) operation: String,
    /// `allowed`, `denied`, `invalid` (the API server would refuse it),
    /// `unchanged` or `skipped` (not a managed resource).
    pub(crate) verdict: String,
    /// Rule findings, each with the line it points at.
    pub(crate) findings: Vec<LiveFinding>,
    /// Every warning the API server would pass on (mutation and validation).
    pub(crate) warnings: Vec<String>,
    /// Why the API server itself would refuse it.
    pub(crate) invalid: Option<String>,
    /// Things worth knowing about how it was judged.
    pub(crate) notes: Vec<String>,
    /// Its external identity and the other live MRs that claim it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) identity: Option<IdentityReport>,
}

/// One rule finding of a live check.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LiveFinding {
    /// The rule.
    pub(crate) rule: String,
    /// `Deny`, `Warn`, or `Info` (a Composition finding the XRD makes harmless).
    pub(crate) action: String,
    /// The message, with the fix.
    pub(crate) message: String,
    /// The field it is about, when known.
    pub(crate) field: Option<String>,
    /// The line of that field in the manifest (or the nearest line).
    pub(crate) line: usize,
}

/// Judges one manifest against its live object; `crd` is the kind's CRD
/// when the credentials may read it.
#[cfg(test)]
pub(crate) fn judge_manifest(
    m: &Manifest,
    live: Option<&Value>,
    merged: Option<Value>,
    mode: MergeMode,
    username: &str,
    config: &Config,
    crds: Option<&Crds>,
) -> Result<LiveResult, LiveError> {
    judge_manifest_in(m, live, merged, mode, username, config, crds, None)
}

/// [`judge_manifest`], with the live MRs whose identity can collide with
/// this one's (`None`: not listed), so `external-identity` judges as
/// admission would and the result names the other claimants.
#[allow(clippy::too_many_arguments)]
pub(crate) fn judge_manifest_in(
    m: &Manifest,
    live: Option<&Value>,
    merged: Option<Value>,
    mode: MergeMode,
    username: &str,
    config: &Config,
    crds: Option<&Crds>,
    family: Option<&Family>,
) -> Result<LiveResult, LiveError> {
    let report = |obj: &Value, index: &IdentityIndex| {
        family.inspect(|f| f.fill(index));
        Some(IdentityReport::of(obj, config, index, family.is_some()))
    };
    let label = offline::label(&m.object);
    let mut notes = Vec::new();
    let (op, new) = match (mode, live, merged) {
        (MergeMode::Server, live, Some(result)) => (
            if live.is_some() {
                Operation::Update
            } else {
                Operation::Create
            },
            result,
        ),
        (_, None, _) => (Operation::Create, merge::with_last_applied(&m.object)),
        (_, Some(live), _) => {
            let applied = merge::client_side_apply(live, &m.object)
                .map_err(|e| LiveError::Other(format!("{label}: {e}")))?;
            if !applied.had_last_applied {
                notes.push(format!(
                    "the live object has no {} annotation: kubectl would delete no field and add the annotation",
                    merge::LAST_APPLIED
                ));
            }
            if applied.patch.is_none() {
                return Ok(LiveResult {
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
    let judged = offline::judge_in(op, &new, live, username, config, crd, &cluster)
        .map_err(|e| LiveError::Other(format!("{label}: {e}")))?;
    let findings: Vec<LiveFinding> = judged
        .findings
        .iter()
        .map(|f| LiveFinding::at(f, m))
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
    Ok(LiveResult {
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

impl LiveFinding {
    /// A rule finding on manifest `m`, at the line of the field it names.
    pub(crate) fn at(f: &mrguard_policy::model::Finding, m: &Manifest) -> Self {
        let path = sarif::finding_path(&f.rule, &f.message);
        LiveFinding {
            rule: f.rule.to_string(),
            action: f.action.as_str().to_string(),
            message: match &f.fix {
                Some(fix) => format!("{}. Fix: {fix}", f.message),
                None => f.message.clone(),
            },
            field: path
                .as_ref()
                .map(|p| mrguard_policy::explain::display_path(p)),
            line: path
                .as_ref()
                .map(|p| m.lines.line_of(p))
                .unwrap_or(m.lines.start),
        }
    }
}

fn skipped(m: &Manifest, why: &str) -> LiveResult {
    LiveResult {
        file: m.file.clone(),
        document: m.doc,
        line: m.lines.start,
        object: offline::label(&m.object),
        operation: "NONE".into(),
        verdict: "skipped".into(),
        findings: vec![],
        warnings: vec![],
        invalid: None,
        notes: vec![why.to_string()],
        identity: None,
    }
}

fn rejected(m: &Manifest, op: Operation, message: String) -> LiveResult {
    LiveResult {
        file: m.file.clone(),
        document: m.doc,
        line: m.lines.start,
        object: offline::label(&m.object),
        operation: op.as_str().into(),
        verdict: "invalid".into(),
        findings: vec![],
        warnings: vec![],
        invalid: Some(message),
        notes: vec!["the server-side-apply dry run was refused by the API server".into()],
        identity: None,
    }
}

/// What `check --live` reads from the flags of `check`.
pub(crate) struct LiveCheck<'a> {
    pub(crate) files: &'a [PathBuf],
    pub(crate) config: Option<&'a PathBuf>,
    pub(crate) username: &'a str,
    pub(crate) max_documents: usize,
    pub(crate) live: &'a LiveArgs,
}

/// Everything the live check does with the cluster, in order.
async fn check_all(
    args: &LiveCheck<'_>,
    manifests: Vec<Manifest>,
) -> Result<Vec<LiveResult>, LiveError> {
    let live = args.live;
    let client = cluster::client(live.kubeconfig.as_deref(), live.context.as_deref()).await?;
    let config = ConfigSource::from_flags(args.config, live.config_from_cluster.as_ref())
        .load(Some(&client))
        .await
        .map_err(|e| LiveError::Other(e.to_string()))?;
    let default_ns = live
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let mut discovery = Discovery::default();
    let mut crds = Crds::default();
    // Per CRD name: why it could not be used, if it could not.
    let mut crd_tried: std::collections::HashMap<String, Option<String>> =
        std::collections::HashMap::new();
    let mut families = Families::default();
    let mut out = Vec::new();
    let progress = Progress::new(manifests.len() as u64, "manifests", live.quiet);
    for mut m in manifests {
        let _done = progress.item();
        if !mrguard_policy::mr::is_managed(&m.object) {
            out.push(skipped(&m, "not a managed resource (spec.forProvider is not an object): mrguard does not judge it"));
            continue;
        }
        let (api_version, kind, _, name) = identity(&m.object);
        if name.is_empty() {
            return Err(LiveError::Document {
                path: m.file.clone(),
                doc: m.doc,
                reason: "metadata.name is missing; a live check needs the name to find the object"
                    .into(),
            });
        }
        let resource = match discovery.resolve(&client, &api_version, &kind).await {
            Ok(r) => r,
            Err(ClusterError::Discovery {
                reason,
                not_served: true,
                ..
            }) => {
                out.push(rejected(
                    &m,
                    Operation::Create,
                    format!("no matches for kind {kind:?} in version {api_version:?}: {reason}"),
                ));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        // Scope as the API server and kubectl see it.
        let ns = if resource.namespaced {
            let ns = m
                .object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or(&default_ns)
                .to_string();
            m.object["metadata"]["namespace"] = Value::String(ns.clone());
            ns
        } else {
            if let Some(meta) = m.object["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
            String::new()
        };
        let api = resource.api(&client, &ns);
        let what = resource.object(&ns, &name);
        let live_obj = api
            .get_opt(&name)
            .await
            .map_err(|e| api_error("get", what.clone(), e))?
            .map(|o| serde_json::to_value(o).unwrap_or(Value::Null));
        if live.merge == MergeMode::Client && !crd_tried.contains_key(&resource.display()) {
            // The CRD gives defaults and schema checks, as the API server
            // applies them; without read access to CRDs, judge without and
            // say so.
            let crd_api: kube::Api<
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
            > = kube::Api::all(client.clone());
            let name = resource.display();
            let problem = match crd_api.get_opt(&name).await {
                Ok(Some(crd)) => serde_json::to_value(&crd)
                    .map_err(|e| e.to_string())
                    .and_then(|v| crds.add(&name, &v).map_err(|e| e.to_string()))
                    .err(),
                Ok(None) => Some("it does not exist".to_string()),
                Err(e) => Some(e.to_string()),
            };
            crd_tried.insert(name, problem);
        }
        let merged = match live.merge {
            MergeMode::Client => None,
            MergeMode::Server => {
                let pp = PatchParams::apply(&live.field_manager).force().dry_run();
                match api.patch(&name, &pp, &Patch::Apply(&m.object)).await {
                    Ok(o) => Some(serde_json::to_value(o).unwrap_or(Value::Null)),
                    Err(kube::Error::Api(s)) if s.code != 403 && s.code != 401 => {
                        let op = if live_obj.is_some() {
                            Operation::Update
                        } else {
                            Operation::Create
                        };
                        out.push(rejected(&m, op, format!("{} ({})", s.message, s.code)));
                        continue;
                    }
                    Err(e) => {
                        return Err(api_error(
                            "patch",
                            format!("{what} (server-side apply, dry run)"),
                            e,
                        )
                        .into())
                    }
                }
            }
        };
        let (group, kind) = (&resource.api.group, &resource.api.kind);
        let family = families.get(&client, &config, group, kind).await;
        let mut result = judge_manifest_in(
            &m,
            live_obj.as_ref(),
            merged,
            live.merge,
            args.username,
            &config,
            (!crds.is_empty()).then_some(&crds),
            family.ok(),
        )?;
        if let Err(e) = family {
            result
                .notes
                .push(format!("other claimants of its identity unknown: {e}"));
        }
        if let Some(Some(why)) = crd_tried.get(&resource.display()) {
            result.notes.push(format!(
                "judged without the CRD's defaults and schema: failed to read customresourcedefinitions.apiextensions.k8s.io {:?}: {why}",
                resource.display()
            ));
        }
        out.push(result);
    }
    progress.finish();
    Ok(out)
}

/// The text output: one block per manifest.
pub(crate) fn render_text(results: &[LiveResult]) -> String {
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
pub(crate) fn annotations(results: &[LiveResult]) -> Vec<Annotation> {
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

/// Runs `check --live`; 0 allowed, 1 denied or invalid, 2 unreadable input
/// or an unreachable or forbidden cluster.
pub(crate) fn run(args: &LiveCheck<'_>) -> i32 {
    // Not locked for the whole run: the progress bar's ticker thread
    // writes to stderr while the check runs (holding the lock deadlocked).
    let mut err = std::io::stderr();
    let manifests = match manifests::read(args.files, args.max_documents) {
        Ok(m) => m,
        Err(e) => {
            let _ = writeln!(err, "mrguard check: {e}");
            return 2;
        }
    };
    let Some(runtime) = super::cluster::runtime("check") else {
        return 2;
    };
    let results = match runtime.block_on(check_all(args, manifests)) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "mrguard check: {e}");
            return 2;
        }
    };
    let mut out = std::io::stdout().lock();
    let written = match args.live.output {
        LiveOutput::Text => write!(out, "{}", render_text(&results)),
        LiveOutput::Json => match serde_json::to_string_pretty(&results) {
            Ok(s) => writeln!(out, "{s}"),
            Err(e) => writeln!(err, "mrguard check: failed to encode the results: {e}"),
        },
        LiveOutput::Sarif => {
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
    if count("denied") + count("invalid") > 0 {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CFG: &str = "resources:\n  - apiGroups: ['rds.aws.upbound.io']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n";

    fn manifest(text: &str) -> Manifest {
        manifests::parse("gitops/db.yaml", text, manifests::MAX_DOCUMENTS)
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
        let r = judge_manifest(&m, Some(&live), None, MergeMode::Client, "", &cfg, None).unwrap();
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
            MergeMode::Client,
            "",
            &cfg,
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
            MergeMode::Client,
            "system:serviceaccount:crossplane-system:provider-aws",
            &cfg,
            None,
        )
        .unwrap();
        assert_eq!(r.verdict, "allowed");
    }

    #[test]
    fn no_live_object_is_a_create_and_an_equal_one_is_unchanged() {
        let cfg = Config::from_yaml(CFG).unwrap();
        let m = manifest(DB);
        let r = judge_manifest(&m, None, None, MergeMode::Client, "", &cfg, None).unwrap();
        assert_eq!(
            (r.operation.as_str(), r.verdict.as_str()),
            ("CREATE", "allowed")
        );
        let mut live = merge::with_last_applied(&m.object);
        live["spec"]["deletionPolicy"] = json!("Delete");
        let r = judge_manifest(&m, Some(&live), None, MergeMode::Client, "", &cfg, None).unwrap();
        assert_eq!(r.verdict, "unchanged");
    }

    #[test]
    fn server_mode_judges_the_dry_run_result() {
        let cfg = Config::from_yaml(CFG).unwrap();
        let m = manifest(DB);
        let live = live_db(true);
        let mut result = live.clone();
        result["spec"]["forProvider"]["region"] = json!("eu-west-1");
        let r = judge_manifest(
            &m,
            Some(&live),
            Some(result),
            MergeMode::Server,
            "",
            &cfg,
            None,
        )
        .unwrap();
        assert_eq!(r.verdict, "denied");
        assert!(r.notes.is_empty());
    }
}
