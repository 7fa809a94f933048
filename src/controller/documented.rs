//! Every replica: the immutable fields that installed MR CRDs document
//! (docs/documented-immutables.md), kept in the shared `Cluster` for the
//! `documented-immutable-field` rule. A watch over CRDs in the `managed`
//! category; each change re-derives its kind (`mrguard_policy::documented`),
//! a relist replaces everything. Unlike `coverage`, it reads the schemas,
//! so it decodes whole CRDs, one at a time, and keeps only what it derives.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;
use kube::Api;
use mrguard_policy::cluster::Cluster;
use mrguard_policy::documented::{derive, KindFields};
use serde_json::{json, Value};

use super::api::{watcher_source, ControllerError};
use super::coverage::MANAGED_CATEGORY;
use super::metrics::ControllerMetrics;
use super::retry::{backoff_watcher, watcher_progress, ErrorOnce};

/// Whole CRDs (schemas included, tens of KB each) decoded per list page:
/// a small page bounds what a relist holds at once (coverage's summaries
/// skip the schemas and use bigger pages).
const PAGE_SIZE: u32 = 10;

/// The CRD as the derivation reads it, when it is an MR CRD.
fn managed_crd(obj: &DynamicObject) -> Option<Value> {
    let spec = obj.data.get("spec")?;
    let managed = spec
        .pointer("/names/categories")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c == MANAGED_CATEGORY));
    managed.then(|| {
        json!({
            "kind": "CustomResourceDefinition",
            "metadata": {"name": obj.metadata.name.clone().unwrap_or_default()},
            "spec": spec,
        })
    })
}

/// The group and kind `obj` defines, for forgetting it.
fn group_kind(obj: &DynamicObject) -> Value {
    json!({"spec": obj.data.get("spec").cloned().unwrap_or(Value::Null)})
}

/// Runs until aborted.
pub(crate) async fn run(
    client: kube::Client,
    cluster: Arc<Cluster>,
    metrics: Arc<ControllerMetrics>,
) {
    let ar = ApiResource::erase::<CustomResourceDefinition>(&());
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let mut stream = backoff_watcher(watcher(
        api,
        watcher::Config::default().page_size(PAGE_SIZE),
    ))
    .boxed();
    let store = cluster.documented();
    let mut listing: Option<Vec<KindFields>> = None;
    let mut watch_error = ErrorOnce::default();
    while let Some(event) = stream.next().await {
        if watcher_progress(&event) {
            watch_error.ok("CRD watch for documented immutable fields");
        }
        match event {
            Ok(watcher::Event::Init) => listing = Some(Vec::new()),
            Ok(watcher::Event::InitApply(crd)) => {
                if let (Some(l), Some(k)) =
                    (listing.as_mut(), managed_crd(&crd).and_then(|c| derive(&c)))
                {
                    l.push(k);
                }
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(l) = listing.take() {
                    store.replace_with(l);
                }
                let (kinds, fields) = store.counts();
                tracing::info!(
                    kinds,
                    fields,
                    "documented immutable fields derived from the MR CRDs"
                );
            }
            Ok(watcher::Event::Apply(crd)) => match managed_crd(&crd).and_then(|c| derive(&c)) {
                Some(k) => {
                    let (kind, group) = (k.kind.clone(), k.group.clone());
                    let n = store.set(k);
                    tracing::debug!(%group, %kind, fields = n, "documented immutable fields updated");
                }
                None => store.remove(&group_kind(&crd)),
            },
            Ok(watcher::Event::Delete(crd)) => store.remove(&group_kind(&crd)),
            Err(e) => {
                let e = ControllerError::Api {
                    verb: "watch",
                    resource: "customresourcedefinitions.apiextensions.k8s.io",
                    object: String::new(),
                    source: watcher_source(e),
                };
                watch_error.failed(
                    &e,
                    Some(&metrics),
                    "failed to watch CRDs for documented immutable fields; retrying with backoff",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_managed_crds_are_read() {
        let spec = |cats: Value| {
            object(
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "accounts.storage.azure.upbound.io"},
                "spec": {"group": "storage.azure.upbound.io", "names": {"kind": "Account", "categories": cats},
                    "versions": [{"name": "v1beta1", "served": true, "schema": {"openAPIV3Schema": {"properties": {
                        "spec": {"properties": {"forProvider": {"properties": {
                            "accountTier": {"type": "string", "description": "Changing this forces a new resource to be created."}}}}}}}}}]}}),
            )
        };
        let k = derive(&managed_crd(&spec(json!(["crossplane", "managed"]))).unwrap()).unwrap();
        assert_eq!(k.fields[0].path.as_str(), "spec.forProvider.accountTier");
        assert!(managed_crd(&spec(json!(["crossplane"]))).is_none());
        let c = Cluster::default();
        c.documented().set(k);
        c.documented().remove(&group_kind(&spec(json!([]))));
        assert_eq!(c.documented().counts(), (0, 0));
    }
}
