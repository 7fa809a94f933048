//! What every replica (not only the leader) watches for admission: which
//! provider's service account serves which MR kind (docs/rules.md, exempt
//! users). Three watches, CRDs in the `managed` category, ProviderRevisions
//! and DeploymentRuntimeConfigs, feed the pure derivation in
//! `mrguard_policy::providers`, whose result replaces the map in the shared
//! `Cluster`.
//!
//! Readiness: a replica reports ready only once its certificate is loaded
//! and the map was derived from a first complete list of all three (a
//! group that is not installed, 404, or not readable, 403, counts as
//! empty), so that no replica judges a provider's write before it knows
//! the provider.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;
use kube::Api;
use mrguard_policy::cluster::Cluster;
use mrguard_policy::providers::{self, MrCrd, Revision, RuntimeConfig, PKG_GROUP};

use super::api::{watcher_source, ControllerError};
use super::coverage::{CrdSummary, CRD_PAGE_SIZE, MANAGED_CATEGORY};
use super::metrics::ControllerMetrics;
use super::retry::{backoff_watcher, watcher_progress, ErrorOnce};
use crate::shutdown::Signal;

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

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// One watched collection: its objects by name, what it has listed so
/// far, and whether a first list is complete.
struct Source<T> {
    what: &'static str,
    items: BTreeMap<String, T>,
    listing: Option<BTreeMap<String, T>>,
    synced: bool,
    errors: ErrorOnce,
    /// "Not installed" was logged.
    absent_logged: bool,
}

impl<T> Source<T> {
    fn new(what: &'static str) -> Self {
        Self {
            what,
            items: BTreeMap::new(),
            listing: None,
            synced: false,
            errors: ErrorOnce::default(),
            absent_logged: false,
        }
    }

    /// Applies one watcher event, with `convert` reading the object.
    /// Returns whether `items` changed.
    fn apply<K>(
        &mut self,
        event: Result<watcher::Event<K>, watcher::Error>,
        name: impl Fn(&K) -> String,
        convert: impl Fn(&K) -> Option<T>,
        metrics: &ControllerMetrics,
    ) -> bool {
        if watcher_progress(&event) {
            self.errors.ok(self.what);
        }
        match event {
            Ok(watcher::Event::Init) => {
                self.listing = Some(BTreeMap::new());
                false
            }
            Ok(watcher::Event::InitApply(o)) => {
                if let (Some(l), Some(v)) = (self.listing.as_mut(), convert(&o)) {
                    l.insert(name(&o), v);
                }
                false
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(l) = self.listing.take() {
                    self.items = l;
                }
                self.synced = true;
                true
            }
            Ok(watcher::Event::Apply(o)) => {
                let n = name(&o);
                match convert(&o) {
                    Some(v) => {
                        self.items.insert(n, v);
                    }
                    None => {
                        self.items.remove(&n);
                    }
                }
                true
            }
            Ok(watcher::Event::Delete(o)) => self.items.remove(&name(&o)).is_some(),
            Err(e) => {
                let e = ControllerError::Api {
                    verb: "watch",
                    resource: self.what,
                    object: String::new(),
                    source: watcher_source(e),
                };
                if e.status_code() == Some(404) {
                    // Not installed (no Crossplane): no providers, which is
                    // the strict side. Expected, so said once at INFO; the
                    // watch keeps retrying and picks it up once it appears.
                    if !std::mem::replace(&mut self.absent_logged, true) {
                        tracing::info!(
                            resource = self.what,
                            "not installed; no provider accounts from it until it is"
                        );
                    }
                    let first = !self.synced;
                    self.synced = true;
                    return first;
                }
                if e.status_code() == Some(403) && !self.synced {
                    // Not readable: as above, but RBAC is wrong, so it is
                    // an error (logged once per streak, naming the verb).
                    self.synced = true;
                    self.errors.failed(
                        &e,
                        Some(metrics),
                        "cannot list it; deriving provider accounts without it and retrying",
                    );
                    return true;
                }
                self.errors.failed(
                    &e,
                    Some(metrics),
                    "failed to watch it for the provider accounts; retrying with backoff",
                );
                false
            }
        }
    }
}

/// Keeps `cluster`'s provider accounts in step with the cluster until
/// shutdown. `namespace` is where Crossplane runs the providers' pods.
pub(crate) async fn run_provider_watch(
    client: kube::Client,
    namespace: String,
    cluster: Arc<Cluster>,
    gate: Arc<ReadyGate>,
    metrics: Arc<ControllerMetrics>,
    shutdown: Signal,
) {
    let crds: Api<CrdSummary> = Api::all(client.clone());
    let mut crd_stream = backoff_watcher(watcher(
        crds,
        watcher::Config::default().page_size(CRD_PAGE_SIZE),
    ))
    .boxed();
    let revs: Api<DynamicObject> = Api::all_with(client.clone(), &revisions_resource());
    let mut rev_stream = backoff_watcher(watcher(revs, watcher::Config::default())).boxed();
    let drcs: Api<DynamicObject> = Api::all_with(client, &runtime_configs_resource());
    let mut drc_stream = backoff_watcher(watcher(drcs, watcher::Config::default())).boxed();

    let mut crd_src: Source<MrCrd> = Source::new("customresourcedefinitions");
    let mut rev_src: Source<Revision> = Source::new("providerrevisions.pkg.crossplane.io");
    let mut drc_src: Source<RuntimeConfig> =
        Source::new("deploymentruntimeconfigs.pkg.crossplane.io");
    let mut published = false;
    loop {
        let changed = tokio::select! {
            Some(e) = crd_stream.next() => crd_src.apply(e, |c: &CrdSummary| name_of(&c.metadata), mr_crd, &metrics),
            Some(e) = rev_stream.next() => rev_src.apply(
                e,
                |o: &DynamicObject| name_of(&o.metadata),
                |o| serde_json::to_value(o).ok().and_then(|v| Revision::from_object(&v)),
                &metrics,
            ),
            Some(e) = drc_stream.next() => drc_src.apply(
                e,
                |o: &DynamicObject| name_of(&o.metadata),
                |o| serde_json::to_value(o).ok().and_then(|v| RuntimeConfig::from_object(&v)),
                &metrics,
            ),
            _ = shutdown.wait() => return,
            else => return,
        };
        if !(changed && crd_src.synced && rev_src.synced && drc_src.synced) {
            continue;
        }
        let accounts = providers::derive(
            &namespace,
            crd_src.items.values(),
            &rev_src.items,
            &drc_src.items,
        );
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
    use crate::controller::mock::{self, list, Reply};
    use serde_json::json;
    use std::time::Duration;

    fn crd(name: &str, group: &str, kind: &str, revision: &str) -> serde_json::Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name, "resourceVersion": "1", "ownerReferences": [
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
                        "metadata": {"name": "rev-s3", "resourceVersion": "1"},
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
        let task = tokio::spawn(run_provider_watch(
            client,
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
        trigger.fire();
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
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
        let task = tokio::spawn(run_provider_watch(
            client,
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
    }
}
