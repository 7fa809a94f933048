//! `mrguard check --live`, the reads: what the request's
//! [`Needs`] name, asked of the cluster and handed back as it answered
//! (`mrguard_policy::commands::check::judge` decides). Each MR manifest's
//! kind is resolved, its live object read and, in server merge mode, a
//! server-side-apply dry run sent (`dryRun=All`); nothing is written.

use std::collections::BTreeMap;

use clap::{Args, ValueEnum};
use kube::api::{Patch, PatchParams};
use serde::Serialize;
use serde_json::Value;

use super::super::claimants;
use super::super::cluster::{
    api_error, live_only, ClusterArgs, ClusterContext, ClusterError, ConfigFromCluster,
};
use super::super::progress::Progress;
use mrguard_policy::commands::check::judge::{Listed, Live, Merged, Served};
use mrguard_policy::commands::check::request::Needs;

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
#[command(group(live_only()))]
pub(crate) struct LiveArgs {
    /// Judge the manifests against the live objects of a cluster: each as
    /// the UPDATE (or CREATE) applying it would send. Never writes.
    #[arg(long, conflicts_with_all = ["old", "operation", "patch", "crd"])]
    pub(crate) live: bool,
    #[command(flatten)]
    pub(crate) cluster: ClusterArgs,
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
    #[command(flatten)]
    pub(crate) config_from_cluster: ConfigFromCluster,
    /// Output format: text (with --live one block per manifest; offline,
    /// objects on stdout and findings on stderr), or a JSON array of
    /// results, or SARIF, on stdout.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub(crate) output: CheckOutput,
    /// No progress on stderr (shown only when stderr is a terminal).
    #[arg(long, requires = "live")]
    pub(crate) quiet: bool,
}

/// Asks the cluster what `needs` names: each wanted object's kind, live
/// object, CRD (client merge) or dry-run answer (server merge), the MRs of
/// each family, and the MRDs and MRAPs when a Composition or a kind the
/// cluster does not serve asks for them.
pub(crate) async fn fetch(
    ctx: &mut ClusterContext,
    live: &LiveArgs,
    needs: &Needs,
) -> Result<Live, ClusterError> {
    let progress = Progress::new(needs.objects.len() as u64, "manifests", live.quiet);
    let mut objects = Vec::with_capacity(needs.objects.len());
    let mut crds: BTreeMap<String, Result<Value, String>> = BTreeMap::new();
    let mut activations = needs.activations;
    for wanted in &needs.objects {
        let _done = progress.item();
        let Some(w) = wanted else {
            objects.push(None);
            continue;
        };
        let resource = match ctx
            .discovery
            .resolve(&ctx.client, &w.api_version, &w.kind)
            .await
        {
            Ok(r) => r,
            Err(ClusterError::Discovery {
                reason,
                not_served: true,
                ..
            }) => {
                // Crossplane v2 serves a kind only once an MRAP activates
                // its MRD: the MRDs name which.
                activations = true;
                objects.push(Some(Served::NotServed { reason }));
                continue;
            }
            Err(e) => return Err(e),
        };
        let (ns, body) = if resource.namespaced {
            (w.namespace.as_str(), &w.namespaced)
        } else {
            ("", &w.cluster_scoped)
        };
        let api = resource.api(&ctx.client, ns);
        let what = resource.object(ns, &w.name);
        let live_obj = api
            .get_opt(&w.name)
            .await
            .map_err(|e| api_error("get", what.clone(), e))?
            .map(|o| serde_json::to_value(o).unwrap_or(Value::Null));
        let name = resource.display();
        if live.merge == MergeMode::Client && !crds.contains_key(&name) {
            // The CRD gives defaults and schema checks, as the API server
            // applies them; without read access to CRDs, judge without and
            // say so.
            crds.insert(name.clone(), read_crd(&ctx.client, &name).await);
        }
        let merged = match live.merge {
            MergeMode::Client => None,
            MergeMode::Server => {
                let pp = PatchParams::apply(&live.field_manager).force().dry_run();
                match api.patch(&w.name, &pp, &Patch::Apply(body)).await {
                    Ok(o) => Some(Merged::Object(
                        serde_json::to_value(o).unwrap_or(Value::Null),
                    )),
                    Err(kube::Error::Api(s)) if s.code != 403 && s.code != 401 => {
                        Some(Merged::Refused {
                            code: s.code,
                            message: s.message,
                        })
                    }
                    Err(e) => {
                        return Err(api_error(
                            "patch",
                            format!("{what} (server-side apply, dry run)"),
                            e,
                        ))
                    }
                }
            }
        };
        objects.push(Some(Served::Found {
            namespaced: resource.namespaced,
            resource: name,
            live: live_obj,
            merged,
        }));
    }
    // The live MRs of the kinds an identity can meet (the legacy and the
    // `.m.` kind of a family), listed once per family.
    let mut families = Vec::with_capacity(needs.families.len());
    for f in &needs.families {
        let listed =
            claimants::list_kinds(&ctx.client, |g| f.groups.iter().any(|x| x == g), &f.kind)
                .await
                .map(|kinds| {
                    kinds
                        .into_iter()
                        .map(|k| Listed {
                            group: k.group,
                            kind: k.kind,
                            objects: k.objects,
                        })
                        .collect()
                })
                .map_err(|e| e.to_string());
        families.push(listed);
    }
    let activations = if activations {
        Some(
            super::super::activations::list_objects(&ctx.client)
                .await
                .map_err(|e| e.to_string()),
        )
    } else {
        None
    };
    progress.finish();
    Ok(Live {
        config: ctx.config.clone(),
        objects,
        crds,
        families,
        activations,
    })
}

/// The CRD `name`, or why it cannot be read.
async fn read_crd(client: &kube::Client, name: &str) -> Result<Value, String> {
    let crd_api: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(client.clone());
    match crd_api.get_opt(name).await {
        Ok(Some(crd)) => serde_json::to_value(&crd).map_err(|e| e.to_string()),
        Ok(None) => Err("it does not exist".to_string()),
        Err(e) => Err(e.to_string()),
    }
}
