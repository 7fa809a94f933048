//! What every replica (not only the leader) watches for admission: which
//! provider's service account serves which MR kind (docs/rules.md, exempt
//! users), and which Provider package serves which MR kind (the teardown
//! guard). The MR CRDs come from the shared CRD store (`crds`);
//! ProviderRevisions and DeploymentRuntimeConfigs are watched here, each
//! into a reflector store. The pure derivations in
//! `mrguard_policy::cluster::providers` replace the maps in the shared `Cluster`.
//!
//! Readiness: a replica reports ready only once its certificate is loaded
//! and the map was derived from a first complete list of all three (a
//! group that is not installed, 404, or not readable, 403, counts as
//! empty), so that no replica judges a provider's write before it knows
//! the provider.

pub mod coverage;
pub(crate) mod crds;
pub(crate) mod documented;
pub(crate) mod identity;
pub(crate) mod in_process;
pub mod mr_states;
pub(crate) mod mrds;
pub(crate) mod secret;
pub(crate) mod xrds;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;
use kube::Api;
use mrguard_policy::cluster::providers::{self, MrCrd, Revision, RuntimeConfig, PKG_GROUP};
use mrguard_policy::cluster::Cluster;

use crate::kube::reflect::{Missing, Reflected};
use crate::kube::retry::{backoff_watcher, watch_config};
use crate::metrics::controller::ControllerMetrics;
use crate::shutdown::Signal;
use coverage::{CrdSummary, MANAGED_CATEGORY};
use crds::CrdStore;

/// `/readyz` turns true once every part is in place.
#[derive(Debug)]
pub(crate) struct ReadyGate {
    cert: AtomicBool,
    providers: AtomicBool,
    ready: Arc<AtomicBool>,
}

impl ReadyGate {
    pub(crate) fn new(ready: Arc<AtomicBool>) -> Arc<Self> {
        Arc::new(Self {
            cert: AtomicBool::new(false),
            providers: AtomicBool::new(false),
            ready,
        })
    }

    /// A serving certificate from the Secret is loaded.
    pub(crate) fn cert_loaded(&self) {
        self.cert.store(true, Ordering::SeqCst);
        self.update();
    }

    /// The provider accounts were derived once.
    pub(crate) fn providers_synced(&self) {
        self.providers.store(true, Ordering::SeqCst);
        self.update();
    }

    fn update(&self) {
        // Both flags are set before each check, so the last setter sees both.
        if self.cert.load(Ordering::SeqCst) && self.providers.load(Ordering::SeqCst) {
            self.ready.store(true, Ordering::Release);
        }
    }
}

fn revisions_resource() -> ApiResource {
    ApiResource {
        group: PKG_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{PKG_GROUP}/v1"),
        kind: "ProviderRevision".into(),
        plural: "providerrevisions".into(),
    }
}

fn runtime_configs_resource() -> ApiResource {
    ApiResource {
        group: PKG_GROUP.into(),
        version: "v1beta1".into(),
        api_version: format!("{PKG_GROUP}/v1beta1"),
        kind: "DeploymentRuntimeConfig".into(),
        plural: "deploymentruntimeconfigs".into(),
    }
}

/// An MR CRD's facts, or None for any other CRD.
fn mr_crd(crd: &CrdSummary) -> Option<MrCrd> {
    let s = &crd.spec;
    if !s.names.categories.iter().any(|c| c == MANAGED_CATEGORY) || s.group.is_empty() {
        return None;
    }
    Some(MrCrd {
        group: s.group.clone(),
        kind: s.names.kind.clone(),
        owners: crd.metadata.owner_references.clone().unwrap_or_default(),
    })
}

/// A store's objects read by `convert`, by name.
fn by_name<T>(
    store: &kube::runtime::reflector::Store<DynamicObject>,
    convert: impl Fn(&serde_json::Value) -> Option<T>,
) -> BTreeMap<String, T> {
    store
        .state()
        .iter()
        .filter_map(|o| {
            let name = o.metadata.name.clone()?;
            let v = serde_json::to_value(&**o).ok()?;
            Some((name, convert(&v)?))
        })
        .collect()
}

/// Keeps `cluster`'s provider accounts and Provider kinds in step with the
/// cluster until shutdown. `namespace` is where Crossplane runs the
/// providers' pods.
pub(crate) async fn run_provider_watch(
    client: kube::Client,
    crds: CrdStore,
    namespace: String,
    cluster: Arc<Cluster>,
    gate: Arc<ReadyGate>,
    metrics: Arc<ControllerMetrics>,
    shutdown: Signal,
) {
    let mut crd_changes = crds.subscribe();
    let mut crds_synced = false;
    let revs: Api<DynamicObject> = Api::all_with(client.clone(), &revisions_resource());
    let mut rev_stream = backoff_watcher(watcher(revs, watch_config())).boxed();
    let drcs: Api<DynamicObject> = Api::all_with(client, &runtime_configs_resource());
    let mut drc_stream = backoff_watcher(watcher(drcs, watch_config())).boxed();

    const PURPOSE: &str = "provider accounts";
    let mut rev_src: Reflected<DynamicObject> = Reflected::new(
        revisions_resource(),
        "providerrevisions.pkg.crossplane.io",
        PURPOSE,
        Missing::Empty,
    );
    let mut drc_src: Reflected<DynamicObject> = Reflected::new(
        runtime_configs_resource(),
        "deploymentruntimeconfigs.pkg.crossplane.io",
        PURPOSE,
        Missing::Empty,
    );
    let mut published = false;
    loop {
        let changed = tokio::select! {
            c = crd_changes.next() => {
                if c.is_none() {
                    return;
                }
                crds_synced = true;
                true
            }
            Some(e) = rev_stream.next() => rev_src.apply(e, Some(&metrics)),
            Some(e) = drc_stream.next() => drc_src.apply(e, Some(&metrics)),
            _ = shutdown.wait() => return,
            else => return,
        };
        if !(changed && crds_synced && rev_src.synced() && drc_src.synced()) {
            continue;
        }
        let mr_crds: Vec<MrCrd> = crds
            .snapshot()
            .iter()
            .filter_map(|c| mr_crd(&c.summary))
            .collect();
        let revisions = by_name(&rev_src.store, Revision::from_object);
        let runtime_configs = by_name(&drc_src.store, RuntimeConfig::from_object);
        let accounts = providers::derive(&namespace, &mr_crds, &revisions, &runtime_configs);
        cluster
            .identities()
            .set_provider_kinds(providers::provider_kinds(&mr_crds, &revisions));
        if !published || *cluster.providers().snapshot() != accounts {
            let kinds: usize = accounts.values().map(BTreeMap::len).sum();
            tracing::debug!(kinds, "derived the provider accounts");
            cluster.providers().replace(accounts);
        }
        if !published {
            published = true;
            tracing::info!(
                kinds = cluster.providers().snapshot().values().map(BTreeMap::len).sum::<usize>(),
                namespace = %namespace,
                "provider accounts derived; their writes are exempt for the kinds they serve"
            );
            if !shutdown.is_fired() {
                gate.providers_synced();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mock::{self, list, Reply};
    use serde_json::json;
    use std::time::Duration;

    /// An MR CRD as Crossplane v2 makes it from an MRD: owned by the MRD
    /// and controlled by the revision, with no reference to the Provider.
    fn crd(name: &str, group: &str, kind: &str, revision: &str) -> serde_json::Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name, "resourceVersion": "1", "ownerReferences": [
                {"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition",
                 "name": name, "uid": "u0", "controller": false},
                {"apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision", "name": revision,
                 "uid": "u1", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"group": group, "scope": "Cluster",
                     "names": {"kind": kind, "plural": "x", "categories": ["crossplane", "managed"]},
                     "versions": [{"name": "v1", "served": true, "storage": true}]}
        })
    }

    /// Every replica derives the map from a mocked API server: the CRD's
    /// revision, the revision's runtime config and its ServiceAccount name;
    /// readiness waits for it.
    #[tokio::test]
    async fn the_watch_fills_the_cluster_and_gates_readiness() {
        let (client, _api) = mock::client(|r| {
            let watch = r.query.contains("watch=true");
            if watch {
                // No changes after the list: an empty, slow watch.
                return Reply::Hang;
            }
            match r.path.as_str() {
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions" => Reply::Json(
                    200,
                    list(
                        "CustomResourceDefinitionList",
                        "apiextensions.k8s.io/v1",
                        vec![crd(
                            "buckets.s3.aws.upbound.io",
                            "s3.aws.upbound.io",
                            "Bucket",
                            "rev-s3",
                        )],
                    ),
                ),
                "/apis/pkg.crossplane.io/v1/providerrevisions" => Reply::Json(
                    200,
                    list(
                        "ProviderRevisionList",
                        "pkg.crossplane.io/v1",
                        vec![
                            json!({"apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision",
                        "metadata": {"name": "rev-s3", "resourceVersion": "1", "ownerReferences": [
                            {"apiVersion": "pkg.crossplane.io/v1", "kind": "Provider",
                             "name": "upbound-provider-aws-s3", "uid": "p1", "controller": true}]},
                        "spec": {"runtimeConfigRef": {"name": "irsa"}}}),
                        ],
                    ),
                ),
                "/apis/pkg.crossplane.io/v1beta1/deploymentruntimeconfigs" => Reply::Json(
                    200,
                    list(
                        "DeploymentRuntimeConfigList",
                        "pkg.crossplane.io/v1beta1",
                        vec![
                            json!({"apiVersion": "pkg.crossplane.io/v1beta1", "kind": "DeploymentRuntimeConfig",
                        "metadata": {"name": "irsa", "resourceVersion": "1"},
                        "spec": {"serviceAccountTemplate": {"metadata": {"name": "provider-aws"}}}}),
                        ],
                    ),
                ),
                _ => Reply::Json(404, mock::status(404, "NotFound", "not found")),
            }
        });
        let cluster = Arc::new(Cluster::default());
        let ready = Arc::new(AtomicBool::new(false));
        let gate = ReadyGate::new(ready.clone());
        gate.cert_loaded();
        assert!(
            !ready.load(Ordering::Acquire),
            "ready before the providers are known"
        );
        let (trigger, signal) = crate::shutdown::channel();
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let (crds, crd_watch) = CrdStore::watch(client.clone(), metrics.clone());
        let crd_task = tokio::spawn(crd_watch);
        let task = tokio::spawn(run_provider_watch(
            client,
            crds,
            "crossplane-system".into(),
            cluster.clone(),
            gate,
            metrics,
            signal,
        ));
        let user = "system:serviceaccount:crossplane-system:provider-aws";
        for _ in 0..100 {
            if ready.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ready.load(Ordering::Acquire));
        assert!(cluster.is_provider_of("s3.aws.upbound.io", "Bucket", user));
        assert!(!cluster.is_provider_of(
            "s3.aws.upbound.io",
            "Bucket",
            "system:serviceaccount:crossplane-system:rev-s3"
        ));
        // The teardown guard's map: the CRD names no Provider, its
        // controlling revision does.
        let bucket =
            mrguard_policy::cluster::identity::MrKey::new("s3.aws.upbound.io", "Bucket", "", "b1");
        cluster
            .identities()
            .upsert(mrguard_policy::cluster::identity::IndexedMr::new(
                bucket.clone(),
                None,
                true,
            ));
        assert_eq!(
            cluster
                .identities()
                .mrs_of_provider("upbound-provider-aws-s3"),
            vec![bucket]
        );
        trigger.fire();
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        crd_task.abort();
    }

    /// Without Crossplane's package CRDs (404) the map is derived empty and
    /// the replica still becomes ready.
    #[tokio::test]
    async fn missing_package_crds_count_as_empty() {
        let (client, _api) = mock::client(|r| {
            if r.query.contains("watch=true") {
                return Reply::Hang;
            }
            match r.path.as_str() {
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions" => Reply::Json(
                    200,
                    list(
                        "CustomResourceDefinitionList",
                        "apiextensions.k8s.io/v1",
                        vec![crd(
                            "buckets.s3.aws.upbound.io",
                            "s3.aws.upbound.io",
                            "Bucket",
                            "rev-s3",
                        )],
                    ),
                ),
                _ => Reply::Json(
                    404,
                    mock::status(
                        404,
                        "NotFound",
                        "the server could not find the requested resource",
                    ),
                ),
            }
        });
        let cluster = Arc::new(Cluster::default());
        let ready = Arc::new(AtomicBool::new(false));
        let gate = ReadyGate::new(ready.clone());
        gate.cert_loaded();
        let (trigger, signal) = crate::shutdown::channel();
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let (crds, crd_watch) = CrdStore::watch(client.clone(), metrics.clone());
        let crd_task = tokio::spawn(crd_watch);
        let task = tokio::spawn(run_provider_watch(
            client,
            crds,
            "crossplane-system".into(),
            cluster.clone(),
            gate,
            metrics,
            signal,
        ));
        for _ in 0..100 {
            if ready.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ready.load(Ordering::Acquire));
        assert!(cluster.providers().is_synced());
        assert!(cluster.providers().snapshot().is_empty());
        trigger.fire();
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        crd_task.abort();
    }
}
