//! Every replica's one CRD watch: one list-and-watch, one reflector store,
//! several readers. The provider accounts (`replica`), the documented
//! immutable fields (`documented`), the identity index's kinds
//! (`identity`) and, on the leader, the webhook coverage (`coverage`) all
//! read it instead of each watching CRDs.
//!
//! Each CRD is decoded once, as the list page arrives, into what the
//! readers need: its summary (names, group, versions, owners) and, for MR
//! CRDs, the documented immutable fields derived from its schema. The
//! schema itself (most of a provider CRD's size) is dropped right away.
//!
//! Readers wait on [`CrdChanges`]: it fires after the first complete list and
//! after every change; changes that arrive while a reader is busy
//! coalesce into one wake-up, and the reader then reads the whole store.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Resource};
use mrguard_policy::cluster::documented::{derive, KindFields};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::watch;
use tracing::Instrument;

use crate::kube::reflect::{Missing, Reflected};
use crate::kube::retry::{backoff_watcher, watch_config};
use crate::metrics::controller::ControllerMetrics;

/// The category Crossplane gives every MR CRD.
pub(crate) const MANAGED_CATEGORY: &str = "managed";

/// CRDs of big providers carry large schemas: list them in small pages.
pub(crate) const CRD_PAGE_SIZE: u32 = 50;

/// A CRD type read from the CRD API: the views below are each a
/// CustomResourceDefinition to kube, with their metadata at `$($meta).+`,
/// named from k8s-openapi's type.
///
/// Views of their own, not k8s-openapi's `CustomResourceDefinition` nor
/// kube's `DynamicObject`: those keep each CRD's schemas, most of a
/// provider CRD's size (1,539 Azure CRDs are 79 MB of YAML; the facts the
/// controller derives from them take 3.9 MiB, BENCHMARKS.md), and every
/// replica holds every CRD in its store. Nor kube's `Object<P, U>`: [`StoredCrd`]
/// derives its documented fields from the schema while decoding and keeps
/// fields that are neither spec nor status.
macro_rules! crd_resource {
    ($ty:ty, $($meta:ident).+) => {
        impl Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::ClusterResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                <CustomResourceDefinition as k8s_openapi::Resource>::KIND.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                <CustomResourceDefinition as k8s_openapi::Resource>::GROUP.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                <CustomResourceDefinition as k8s_openapi::Resource>::VERSION.into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                <CustomResourceDefinition as k8s_openapi::Resource>::URL_PATH_SEGMENT.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.$($meta).+
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.$($meta).+
            }
        }
    };
}

/// The parts of a CustomResourceDefinition the controller reads. The
/// schemas, often most of a provider CRD's size, are skipped while decoding.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub(crate) struct CrdSummary {
    #[serde(default)]
    pub(crate) metadata: ObjectMeta,
    #[serde(default)]
    pub(crate) spec: CrdSummarySpec,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub(crate) struct CrdSummarySpec {
    #[serde(default)]
    pub(crate) group: String,
    #[serde(default)]
    pub(crate) names: CrdNames,
    #[serde(default)]
    pub(crate) scope: String,
    #[serde(default)]
    pub(crate) versions: Vec<CrdSummaryVersion>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub(crate) struct CrdNames {
    #[serde(default)]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) plural: String,
    #[serde(default)]
    pub(crate) categories: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub(crate) struct CrdSummaryVersion {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) served: bool,
    #[serde(default)]
    pub(crate) storage: bool,
}

crd_resource!(CrdSummary, metadata);

/// The resource, in logs and the API-error metric.
const RESOURCE: &str = "customresourcedefinitions.apiextensions.k8s.io";

/// One CRD as the readers need it.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "RawCrd")]
pub(crate) struct StoredCrd {
    /// Names, group, scope, versions and owners; no schema.
    pub(crate) summary: CrdSummary,
    /// For an MR CRD, the immutable fields its schema documents.
    pub(crate) documented: Option<Arc<KindFields>>,
    /// Whether the API server serves its kind: the `Established` condition.
    /// Until then a list of the kind is a 404.
    pub(crate) established: bool,
}

/// A CRD as it comes off the wire, for one object at a time.
#[derive(Deserialize)]
struct RawCrd {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Value,
    /// Read leniently: a new CRD's `conditions` is `null`, and an event
    /// that fails to decode is lost (kube turns it into an error item).
    #[serde(default)]
    status: Value,
}

/// The annotation kubectl fills with a whole copy of the object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

impl From<RawCrd> for StoredCrd {
    fn from(raw: RawCrd) -> Self {
        let RawCrd {
            mut metadata,
            spec,
            status,
        } = raw;
        let established = is_established(&status);
        // Neither is read; both can be as big as the rest of the summary.
        metadata.managed_fields = None;
        if let Some(a) = metadata.annotations.as_mut() {
            a.remove(LAST_APPLIED);
        }
        let spec_summary = CrdSummarySpec::deserialize(&spec).unwrap_or_default();
        let managed = spec_summary
            .names
            .categories
            .iter()
            .any(|c| c == MANAGED_CATEGORY);
        let documented = managed
            .then(|| {
                derive(&json!({
                    "kind": "CustomResourceDefinition",
                    "metadata": {"name": metadata.name.clone().unwrap_or_default()},
                    "spec": spec,
                }))
            })
            .flatten()
            .map(Arc::new);
        StoredCrd {
            summary: CrdSummary {
                metadata,
                spec: spec_summary,
            },
            documented,
            established,
        }
    }
}

crd_resource!(StoredCrd, summary.metadata);

/// Whether a CRD's `status` has `Established=True`.
fn is_established(status: &Value) -> bool {
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    })
}

/// A CRD's summary and whether it is established, without the documented
/// fields [`StoredCrd`] derives from the schema: for one-shot readers such as
/// the `audit` command, which need only the kinds the cluster serves.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "RawServedCrd")]
pub(crate) struct ServedCrd {
    pub(crate) summary: CrdSummary,
    pub(crate) established: bool,
}

/// Read as it streams: the schemas are skipped, not buffered.
#[derive(Deserialize)]
struct RawServedCrd {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: CrdSummarySpec,
    #[serde(default)]
    status: Value,
}

impl From<RawServedCrd> for ServedCrd {
    fn from(raw: RawServedCrd) -> Self {
        ServedCrd {
            established: is_established(&raw.status),
            summary: CrdSummary {
                metadata: raw.metadata,
                spec: raw.spec,
            },
        }
    }
}

crd_resource!(ServedCrd, summary.metadata);

/// The shared CRD store and its change signal. Cheap to clone.
#[derive(Clone)]
pub(crate) struct CrdStore {
    store: Store<StoredCrd>,
    /// `None` until the first list is complete, then a change counter.
    changes: watch::Receiver<Option<u64>>,
}

impl CrdStore {
    /// The store and the watch that fills it, for the caller to spawn; the
    /// watch runs until its task is aborted.
    pub(crate) fn watch(
        client: kube::Client,
        metrics: Arc<ControllerMetrics>,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let mut reflected: Reflected<StoredCrd> =
            Reflected::new((), RESOURCE, "CRD watch", Missing::Wait);
        let store = reflected.store.clone();
        let (tx, rx) = watch::channel(None);
        let task = async move {
            let api: Api<StoredCrd> = Api::all(client);
            let mut stream =
                backoff_watcher(watcher(api, watch_config().page_size(CRD_PAGE_SIZE))).boxed();
            let mut generation = 0u64;
            while let Some(item) = stream.next().await {
                if !(reflected.apply(item, Some(&metrics)) && reflected.synced()) {
                    continue;
                }
                if generation == 0 {
                    tracing::info!(crds = reflected.store.len(), "CRDs listed");
                }
                generation += 1;
                tx.send_replace(Some(generation));
            }
        };
        let task = task.instrument(tracing::info_span!("crd_watch"));
        (Self { store, changes: rx }, task)
    }

    /// A new reader's wake-ups; the first comes as soon as a list is
    /// complete (at once if it already is).
    pub(crate) fn subscribe(&self) -> CrdChanges {
        let mut rx = self.changes.clone();
        rx.mark_changed();
        CrdChanges(rx)
    }

    /// Every CRD of the last complete list, with the changes since.
    pub(crate) fn snapshot(&self) -> Vec<Arc<StoredCrd>> {
        self.store.state()
    }

    /// The CRDs whose kinds the API server serves (`Established`): what is
    /// worth listing. Before that a list is a 404.
    pub(crate) fn served(&self) -> Vec<Arc<StoredCrd>> {
        let mut crds = self.snapshot();
        crds.retain(|c| c.established);
        crds
    }
}

/// One reader's wake-ups from [`CrdStore`].
pub(crate) struct CrdChanges(watch::Receiver<Option<u64>>);

impl CrdChanges {
    /// Waits until the store changed after its first complete list.
    /// `None` once the watch task is gone. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<()> {
        loop {
            self.0.changed().await.ok()?;
            if self.0.borrow_and_update().is_some() {
                return Some(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mock::{self, list, Reply};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn crd(name: &str, categories: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name, "resourceVersion": "1",
                         "annotations": {LAST_APPLIED: "{\"huge\": true}", "keep": "me"},
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"group": "storage.azure.upbound.io", "scope": "Cluster",
                "names": {"kind": "Account", "plural": "accounts", "categories": categories},
                "versions": [{"name": "v1beta1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"properties": {"spec": {"properties": {
                        "forProvider": {"properties": {"accountTier": {"type": "string",
                            "description": "Changing this forces a new resource to be created."}}}}}}}}}]}
        })
    }

    #[test]
    fn a_crd_is_decoded_into_its_summary_and_documented_fields_only() {
        let c: StoredCrd = serde_json::from_value(crd(
            "accounts.storage.azure.upbound.io",
            json!(["crossplane", "managed"]),
        ))
        .unwrap();
        assert_eq!(c.summary.spec.names.kind, "Account");
        assert_eq!(c.summary.spec.versions[0].name, "v1beta1");
        assert!(c.summary.metadata.managed_fields.is_none());
        let a = c.summary.metadata.annotations.as_ref().unwrap();
        assert!(!a.contains_key(LAST_APPLIED) && a.contains_key("keep"));
        let d = c.documented.unwrap();
        assert_eq!(d.fields[0].path.as_str(), "spec.forProvider.accountTier");
        // Not an MR CRD: no schema read.
        let other: StoredCrd = serde_json::from_value(crd(
            "accounts.storage.azure.upbound.io",
            json!(["crossplane"]),
        ))
        .unwrap();
        assert!(other.documented.is_none());
        // Served only once the API server says so. A CRD just created has
        // `conditions: null` (no omitempty in the API types): its ADDED
        // event must decode, or the watch loses it.
        assert!(!other.established);
        let mut created = crd("accounts.storage.azure.upbound.io", json!(["managed"]));
        created["status"] = json!({"conditions": null, "storedVersions": null,
                                   "acceptedNames": {"kind": "", "plural": ""}});
        let created: StoredCrd = serde_json::from_value(created).unwrap();
        assert!(!created.established && created.documented.is_some());
        let mut served = crate::controller::replica::coverage::tests::established(crd(
            "accounts.storage.azure.upbound.io",
            json!(["managed"]),
        ));
        assert!(
            serde_json::from_value::<StoredCrd>(served.clone())
                .unwrap()
                .established
        );
        served["status"]["conditions"][1]["status"] = json!("False");
        assert!(
            !serde_json::from_value::<StoredCrd>(served)
                .unwrap()
                .established
        );
    }

    /// The audit command's read of a CRD: the same summary and the same
    /// `Established` verdict as the watch's, for a null, a true and a false
    /// condition.
    #[test]
    fn a_served_crd_reads_as_the_watch_reads_it() {
        let name = "accounts.storage.azure.upbound.io";
        let mut created = crd(name, json!(["managed"]));
        created["status"] = json!({"conditions": null});
        let served =
            crate::controller::replica::coverage::tests::established(crd(name, json!(["managed"])));
        let mut refused = served.clone();
        refused["status"]["conditions"][1]["status"] = json!("False");
        for (v, want) in [(created, false), (served, true), (refused, false)] {
            let s: ServedCrd = serde_json::from_value(v.clone()).unwrap();
            let c: StoredCrd = serde_json::from_value(v).unwrap();
            assert_eq!((s.established, c.established), (want, want));
            assert_eq!(s.summary.spec.names.kind, "Account");
            assert_eq!(s.summary.spec.versions[0].name, "v1beta1");
            assert_eq!(s.summary.metadata.name.as_deref(), Some(name));
        }
    }

    /// One list and one watch serve every reader: three readers, one
    /// list call; each reader is woken once the list is complete.
    #[tokio::test]
    async fn one_list_serves_every_reader() {
        let lists = Arc::new(AtomicUsize::new(0));
        let l = lists.clone();
        let (client, _api) = mock::client(move |r| {
            if r.query.contains("watch=true") {
                return Reply::Hang;
            }
            assert_eq!(
                r.path,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
            );
            l.fetch_add(1, Ordering::SeqCst);
            Reply::Json(
                200,
                list(
                    "CustomResourceDefinitionList",
                    "apiextensions.k8s.io/v1",
                    vec![crd("accounts.storage.azure.upbound.io", json!(["managed"]))],
                ),
            )
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let (crds, watch) = CrdStore::watch(client, metrics);
        let task = tokio::spawn(watch);
        let mut readers: Vec<CrdChanges> = (0..3).map(|_| crds.subscribe()).collect();
        for r in &mut readers {
            tokio::time::timeout(Duration::from_secs(5), r.next())
                .await
                .expect("woken after the list")
                .expect("the watch runs");
        }
        assert_eq!(crds.snapshot().len(), 1);
        // A reader that comes late is woken at once.
        let mut late = crds.subscribe();
        tokio::time::timeout(Duration::from_secs(1), late.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(lists.load(Ordering::SeqCst), 1);
        task.abort();
    }
}
