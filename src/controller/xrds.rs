//! Every replica's watch on CompositeResourceDefinitions: the XR schemas
//! that make a Composition finding informational when the XRD already
//! freezes its source (docs/compositions.md). Admission reads them from
//! `Cluster::composites`.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use kube::Api;
use mrguard_policy::cluster::Cluster;
use mrguard_policy::composition::XrSchemas;

use super::api::ControllerError;
use super::retry::{backoff_watcher, watcher_progress, ErrorOnce};

fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "apiextensions.crossplane.io",
            "v1",
            "CompositeResourceDefinition",
        ),
        "compositeresourcedefinitions",
    )
}

/// The schemas of `xrds`, by name.
fn schemas(xrds: &BTreeMap<String, serde_json::Value>) -> XrSchemas {
    let mut x = XrSchemas::default();
    for v in xrds.values() {
        x.add(v);
    }
    x
}

fn key(o: &DynamicObject) -> String {
    o.metadata.name.clone().unwrap_or_default()
}

/// Keeps `cluster.composites()` equal to the cluster's XRDs. Without
/// Crossplane (no such resource) it says so once and keeps retrying.
pub(crate) async fn run(client: kube::Client, cluster: Arc<Cluster>) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource());
    let mut stream = backoff_watcher(watcher(api, watcher::Config::default())).boxed();
    let mut absent_logged = false;
    let mut current: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    let mut listing: Option<BTreeMap<String, serde_json::Value>> = None;
    let mut synced = false;
    let mut watch_error = ErrorOnce::default();
    while let Some(event) = stream.next().await {
        if watcher_progress(&event) {
            watch_error.ok("XRD watch");
        }
        let value = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_default();
        match event {
            Ok(watcher::Event::Init) => listing = Some(BTreeMap::new()),
            Ok(watcher::Event::InitApply(o)) => {
                if let Some(l) = listing.as_mut() {
                    l.insert(key(&o), value(&o));
                }
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(l) = listing.take() {
                    current = l;
                }
                synced = true;
            }
            Ok(watcher::Event::Apply(o)) => {
                current.insert(key(&o), value(&o));
            }
            Ok(watcher::Event::Delete(o)) => {
                current.remove(&key(&o));
            }
            Err(e) => {
                let e = ControllerError::watch(
                    "compositeresourcedefinitions.apiextensions.crossplane.io",
                    "",
                    e,
                );
                // Not a controller failure: Compositions are then judged
                // without XRDs, as `check` without --crd. Without
                // Crossplane (404) that is expected: said once, at INFO.
                if e.status_code() == Some(404) {
                    if !std::mem::replace(&mut absent_logged, true) {
                        tracing::info!(
                            "compositeresourcedefinitions are not installed; Compositions are judged without XRDs until they are"
                        );
                    }
                    continue;
                }
                watch_error.failed(
                    &e,
                    None,
                    "failed to watch XRDs (is Crossplane installed?); Compositions are judged without them; retrying with backoff",
                );
                continue;
            }
        }
        if synced {
            let next = schemas(&current);
            if *cluster.composites().snapshot() != next {
                tracing::debug!(xrds = current.len(), "XRDs changed");
                cluster.composites().replace(next);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_come_from_every_xrd() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/compositions/xrd-network-immutable-region.yaml");
        let xrd: serde_json::Value =
            serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut m = BTreeMap::new();
        m.insert("xnetworks.aws.example.org".to_string(), xrd);
        let x = schemas(&m);
        assert!(x.knows("aws.example.org/v1alpha1", "XNetwork"));
        assert!(schemas(&BTreeMap::new()).is_empty());
        assert_eq!(resource().plural, "compositeresourcedefinitions");
    }
}
