//! Every replica's watch on CompositeResourceDefinitions: the XR schemas
//! that make a Composition finding informational when the XRD already
//! freezes its source (docs/compositions.md). Admission reads them from
//! `Cluster::composites`.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use kube::Api;
use mrguard_policy::cluster::composition::XrSchemas;
use mrguard_policy::cluster::Cluster;

use crate::kube::reflect::{Missing, Reflected};
use crate::kube::retry::{backoff_watcher, watch_config};

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

/// The schemas of `xrds`.
fn schemas<'a>(xrds: impl IntoIterator<Item = &'a serde_json::Value>) -> XrSchemas {
    let mut x = XrSchemas::default();
    for v in xrds {
        x.add(v);
    }
    x
}

/// Keeps `cluster.composites()` equal to the cluster's XRDs, from a
/// reflector store. Without Crossplane (no such resource) it says so once
/// and keeps retrying; Compositions are then judged without XRDs, as
/// `check` without --crd.
pub(crate) async fn run(client: kube::Client, cluster: Arc<Cluster>) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource());
    let mut stream = backoff_watcher(watcher(api, watch_config())).boxed();
    let mut xrds: Reflected<DynamicObject> = Reflected::new(
        resource(),
        "compositeresourcedefinitions.apiextensions.crossplane.io",
        "XRDs (Compositions are judged without them until listed)",
        Missing::Empty,
    );
    while let Some(item) = stream.next().await {
        if !(xrds.apply(item, None) && xrds.synced()) {
            continue;
        }
        let objects: Vec<serde_json::Value> = xrds
            .store
            .state()
            .iter()
            .filter_map(|o| serde_json::to_value(&**o).ok())
            .collect();
        let next = schemas(&objects);
        if *cluster.composites().snapshot() != next {
            tracing::debug!(xrds = objects.len(), "XRDs changed");
            cluster.composites().replace(next);
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
        let x = schemas([&xrd]);
        assert!(x.knows("aws.example.org/v1alpha1", "XNetwork"));
        assert!(schemas([]).is_empty());
        assert_eq!(resource().plural, "compositeresourcedefinitions");
    }
}
