//! Every replica's watch on ManagedResourceDefinitions and
//! ManagedResourceActivationPolicies (Crossplane v2, docs/activation.md):
//! which MR kinds are inactive (safe-start: no CRD until an MRAP activates
//! the MRD), what an MRAP's patterns match (the MRAP webhook), and the
//! documented immutable fields of the kinds that have no CRD yet.
//!
//! Each MRD is decoded once, as it arrives, into what the readers need
//! (`mrguard_policy::cluster::activation::Mrd`): names, state and the documented
//! fields; its schema is dropped, as the CRD watch drops CRDs' schemas.
//! Without Crossplane v2 the API does not exist: the watch says so once
//! and keeps retrying, and the index stays empty.

use std::borrow::Cow;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::watcher;
use kube::{Api, Resource};
use mrguard_policy::cluster::activation::{self, Activations, Mrd};
use mrguard_policy::cluster::Cluster;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::kube::reflect::{Missing, Reflected};
use crate::kube::retry::{backoff_watcher, watch_config};
use crate::metrics::controller::ControllerMetrics;

/// MRDs carry a CRD's schemas: list them in pages as small as CRDs'.
const PAGE_SIZE: u32 = super::crds::CRD_PAGE_SIZE;

/// One MRD as the readers need it.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "RawMrd")]
pub(crate) struct MrdView {
    metadata: ObjectMeta,
    /// `None` when it lacks a name, group or kind.
    mrd: Option<Mrd>,
}

#[derive(Deserialize)]
struct RawMrd {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Value,
}

impl From<RawMrd> for MrdView {
    fn from(raw: RawMrd) -> Self {
        let RawMrd { mut metadata, spec } = raw;
        let mrd = Mrd::from_object(&json!({
            "apiVersion": format!("{}/{}", activation::GROUP, activation::VERSION),
            "kind": activation::MRD_KIND,
            "metadata": {"name": metadata.name.clone().unwrap_or_default()},
            "spec": spec,
        }));
        // Not read; as big as the rest.
        metadata.managed_fields = None;
        metadata.annotations = None;
        MrdView { metadata, mrd }
    }
}

impl Resource for MrdView {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        activation::MRD_KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        activation::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        activation::VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        activation::MRD_PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn mraps_resource() -> ApiResource {
    ApiResource {
        group: activation::GROUP.into(),
        version: activation::VERSION.into(),
        api_version: format!("{}/{}", activation::GROUP, activation::VERSION),
        kind: activation::MRAP_KIND.into(),
        plural: activation::MRAP_PLURAL.into(),
    }
}

/// What the two stores hold, as the policy crate reads it.
fn activations<'a>(
    mrds: impl IntoIterator<Item = &'a MrdView>,
    mraps: impl IntoIterator<Item = Value>,
) -> Activations {
    let mut known = Activations::default();
    for m in mrds {
        if let Some(mrd) = &m.mrd {
            known.insert_mrd(mrd.clone());
        }
    }
    for mut p in mraps {
        // The dynamic store keeps the type; set it for objects that lost it.
        p["apiVersion"] = format!("{}/{}", activation::GROUP, activation::VERSION).into();
        p["kind"] = activation::MRAP_KIND.into();
        known.add(&p);
    }
    known
}

/// Keeps `cluster.activations()` equal to the cluster's MRDs and MRAPs;
/// `changed` counts the updates, for the documented-fields reader.
pub(crate) async fn run(
    client: kube::Client,
    cluster: Arc<Cluster>,
    metrics: Arc<ControllerMetrics>,
    changed: watch::Sender<u64>,
) {
    const PURPOSE: &str = "MRDs and MRAPs (inactive kinds and the MRAP webhook)";
    let mrds: Api<MrdView> = Api::all(client.clone());
    let mut mrd_stream =
        backoff_watcher(watcher(mrds, watch_config().page_size(PAGE_SIZE))).boxed();
    let mraps: Api<DynamicObject> = Api::all_with(client, &mraps_resource());
    let mut mrap_stream = backoff_watcher(watcher(mraps, watch_config())).boxed();
    let mut mrd_src: Reflected<MrdView> = Reflected::new(
        (),
        "managedresourcedefinitions.apiextensions.crossplane.io",
        PURPOSE,
        Missing::Empty,
    );
    let mut mrap_src: Reflected<DynamicObject> = Reflected::new(
        mraps_resource(),
        "managedresourceactivationpolicies.apiextensions.crossplane.io",
        PURPOSE,
        Missing::Empty,
    );
    let mut generation = 0u64;
    loop {
        let moved = tokio::select! {
            Some(e) = mrd_stream.next() => mrd_src.apply(e, Some(&metrics)),
            Some(e) = mrap_stream.next() => mrap_src.apply(e, Some(&metrics)),
            else => return,
        };
        if !(moved && mrd_src.synced() && mrap_src.synced()) {
            continue;
        }
        let mrds = mrd_src.store.state();
        let next = activations(
            mrds.iter().map(|m| &**m),
            mrap_src
                .store
                .state()
                .iter()
                .filter_map(|o| serde_json::to_value(&**o).ok()),
        );
        let index = cluster.activations();
        if index.is_watched() && *index.snapshot() == next {
            continue;
        }
        let inactive = next.mrds().filter(|m| !m.active).count();
        if generation == 0 {
            tracing::info!(
                mrds = next.mrds().count(),
                inactive,
                mraps = next.mraps().count(),
                "MRDs and MRAPs listed"
            );
        } else {
            tracing::debug!(
                mrds = next.mrds().count(),
                inactive,
                "MRDs or MRAPs changed"
            );
        }
        index.replace(next);
        generation += 1;
        changed.send_replace(generation);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mock::{self, list, Reply};
    use std::time::Duration;

    fn mrd(state: &str) -> Value {
        json!({"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition",
            "metadata": {"name": "buckets.s3.aws.upbound.io", "resourceVersion": "1",
                         "managedFields": [{"manager": "crossplane"}]},
            "spec": {"group": "s3.aws.upbound.io", "scope": "Cluster", "state": state,
                "names": {"kind": "Bucket", "plural": "buckets"},
                "versions": [{"name": "v1beta1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"properties": {"spec": {"properties": {
                        "forProvider": {"properties": {"region": {"type": "string",
                            "description": "Changing this forces a new resource to be created."}}}}}}}}}]}})
    }

    #[test]
    fn an_mrd_is_decoded_into_what_is_read() {
        let v: MrdView = serde_json::from_value(mrd("Inactive")).unwrap();
        assert!(v.metadata.managed_fields.is_none());
        let m = v.mrd.as_ref().unwrap();
        assert_eq!(
            (m.name.as_str(), m.active),
            ("buckets.s3.aws.upbound.io", false)
        );
        assert_eq!(
            m.documented.as_ref().unwrap().fields[0].path.as_str(),
            "spec.forProvider.region"
        );
        let a = activations(
            [&v],
            [
                json!({"metadata": {"name": "default"}, "spec": {"activate": ["*.ec2.aws.upbound.io"]}}),
            ],
        );
        assert_eq!(a.mraps().count(), 1);
        assert!(a.state("s3.aws.upbound.io", "Bucket").problem().is_some());
    }

    /// The index fills from a mocked API server; the MRAP API missing
    /// (404) counts as none, without stopping the MRDs.
    #[tokio::test]
    async fn the_watch_fills_the_index() {
        let (client, _api) = mock::client(|r| {
            if r.query.contains("watch=true") {
                return Reply::Hang;
            }
            match r.path.as_str() {
                "/apis/apiextensions.crossplane.io/v1alpha1/managedresourcedefinitions" => {
                    Reply::Json(
                        200,
                        list(
                            "ManagedResourceDefinitionList",
                            "apiextensions.crossplane.io/v1alpha1",
                            vec![mrd("Inactive")],
                        ),
                    )
                }
                _ => Reply::Json(404, mock::status(404, "NotFound", "not found")),
            }
        });
        let cluster = Arc::new(Cluster::default());
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let (tx, mut rx) = watch::channel(0);
        let task = tokio::spawn(run(client, cluster.clone(), metrics, tx));
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .unwrap()
            .unwrap();
        let known = cluster.activations().snapshot();
        assert!(matches!(
            known.state("s3.aws.upbound.io", "Bucket"),
            activation::KindState::Inactive(_)
        ));
        assert_eq!(known.mraps().count(), 0);
        task.abort();
    }
}
