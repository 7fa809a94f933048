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

use super::super::claimants::Families;
use super::super::cluster::{self, api_error, ClusterError, ConfigSource, Discovery};
use super::super::manifests::{self, Manifest, ManifestError};
use super::super::progress::Progress;
use mrguard_policy::admission::api_server::identity;
use mrguard_policy::admission::crd::Crds;
use mrguard_policy::admission::model::Operation;
use mrguard_policy::cluster::identity::IdentityIndex;
use mrguard_policy::commands::check::{
    annotations, judge_manifest, rejected, render_text, skipped, Applier,
};
pub(crate) use mrguard_policy::commands::check::{CheckError, CheckFinding, CheckResult};
use mrguard_policy::commands::sarif;

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
pub(crate) enum CheckOutput {
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
    pub(crate) output: CheckOutput,
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
    /// A manifest could not be judged.
    #[error(transparent)]
    Judge(#[from] CheckError),
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
) -> Result<Vec<CheckResult>, LiveError> {
    let live = args.live;
    let client = cluster::client(live.kubeconfig.as_deref(), live.context.as_deref()).await?;
    let config = ConfigSource::from_flags(args.config, live.config_from_cluster.as_ref())
        .load(Some(&client))
        .await?;
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
    let mut activations = super::super::activations::Lazy::default();
    // Every manifest is judged as applied by the user, at one instant.
    let by = Applier {
        username: args.username,
        now: jiff::Timestamp::now(),
    };
    let mut out = Vec::new();
    let progress = Progress::new(manifests.len() as u64, "manifests", live.quiet);
    for mut m in manifests {
        let _done = progress.item();
        if mrguard_policy::commands::check::is_composition(&m.object) {
            out.push(composition(&client, &mut activations, &m).await);
            continue;
        }
        if !mrguard_policy::admission::mr::is_managed(&m.object) {
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
                // Crossplane v2 serves a kind only once an MRAP activates
                // its MRD: say which MRD, rather than only "not served".
                let reason = match activations.get(&client).await {
                    Ok(a) => a.state_of(&api_version, &kind).problem().unwrap_or(reason),
                    Err(_) => reason,
                };
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
        // The live MRs of the kinds its identity can meet (the legacy and
        // the `.m.` kind of its family), listed once per family.
        let family = families
            .get(&client, &config, &resource.api.group, &resource.api.kind)
            .await;
        let fill = |index: &IdentityIndex| {
            if let Ok(f) = &family {
                f.fill(index)
            }
        };
        let mut result = judge_manifest(
            &m,
            live_obj.as_ref(),
            merged,
            by,
            &config,
            (!crds.is_empty()).then_some(&crds),
            family.is_ok().then_some(&fill as &dyn Fn(&IdentityIndex)),
        )?;
        if let Err(e) = &family {
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

/// A Composition against the cluster: not judged as an MR, but each
/// composed kind that no MRAP activates is a warning.
async fn composition(
    client: &kube::Client,
    activations: &mut super::super::activations::Lazy,
    m: &Manifest,
) -> CheckResult {
    let mut r = skipped(
        m,
        "a Composition: its patches are checked offline (mrguard check without --live)",
    );
    match activations.get(client).await {
        Ok(a) => r.warnings = mrguard_policy::commands::check::inactive_composed(m, a),
        Err(e) => r
            .notes
            .push(format!("composed kinds not checked for activation: {e}")),
    }
    r
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
    let Some(runtime) = super::super::cluster::runtime("check") else {
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
        CheckOutput::Text => write!(out, "{}", render_text(&results)),
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
