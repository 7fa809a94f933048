//! Every replica: the immutable fields that installed MR CRDs document
//! (docs/documented-immutables.md), kept in the shared `Cluster` for the
//! `documented-immutable-field` rule. A reader of the shared CRD store
//! (`crds`), which derives each MR CRD's fields
//! (`mrguard_policy::cluster::documented`) as it decodes it; after every change the
//! kinds in the store replace the `Cluster`'s.
//!
//! Kinds that have an MRD but no CRD yet (Crossplane v2's safe-start) get
//! their fields from the MRD's schema, which the CRD will copy once an
//! MRAP activates it (`mrds`).

use std::collections::HashSet;
use std::sync::Arc;

use mrguard_policy::cluster::documented::KindFields;
use mrguard_policy::cluster::Cluster;
use tokio::sync::watch;

use super::crds::CrdStore;

/// The CRDs' fields, then those of MRDs whose kind no CRD defines.
fn kinds(crds: &CrdStore, cluster: &Cluster) -> Vec<Arc<KindFields>> {
    let from_crds: Vec<Arc<KindFields>> = crds
        .snapshot()
        .iter()
        .filter_map(|c| c.documented.clone())
        .collect();
    let served: HashSet<(String, String)> = crds
        .snapshot()
        .iter()
        .map(|c| {
            (
                c.summary.spec.group.clone(),
                c.summary.spec.names.kind.clone(),
            )
        })
        .collect();
    let known = cluster.activations().snapshot();
    let from_mrds = known
        .mrds()
        .filter(|m| !served.contains(&(m.group.clone(), m.kind.clone())))
        .filter_map(|m| m.documented.clone());
    from_crds.into_iter().chain(from_mrds).collect()
}

/// Runs until aborted (or until the CRD watch is gone).
pub(crate) async fn run(crds: CrdStore, cluster: Arc<Cluster>, mrds: watch::Receiver<u64>) {
    let store = cluster.documented();
    let mut changes = crds.subscribe();
    let mut first = true;
    let mut crds_listed = false;
    // `None` once the MRD watch is gone: CRDs alone from then on.
    let mut mrds = Some(mrds);
    loop {
        let mrd_change = async {
            match mrds.as_mut() {
                Some(rx) => rx.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            c = changes.next() => {
                if c.is_none() {
                    return;
                }
                crds_listed = true;
            }
            alive = mrd_change => {
                if !alive {
                    mrds = None;
                }
                if !crds_listed {
                    continue;
                }
            }
        }
        store.replace_with_shared(kinds(&crds, &cluster));
        let (kinds, fields) = store.counts();
        if std::mem::take(&mut first) {
            tracing::info!(
                kinds,
                fields,
                "documented immutable fields derived from the MR CRDs"
            );
        } else {
            tracing::debug!(kinds, fields, "documented immutable fields updated");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::replica::crds::StoredCrd;
    use serde_json::{json, Value};

    fn crd(cats: Value) -> StoredCrd {
        serde_json::from_value(
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "accounts.storage.azure.upbound.io"},
            "spec": {"group": "storage.azure.upbound.io", "names": {"kind": "Account", "categories": cats},
                "versions": [{"name": "v1beta1", "served": true, "schema": {"openAPIV3Schema": {"properties": {
                    "spec": {"properties": {"forProvider": {"properties": {
                        "accountTier": {"type": "string", "description": "Changing this forces a new resource to be created."}}}}}}}}}]}}),
        )
        .unwrap()
    }

    #[test]
    fn only_managed_crds_are_read() {
        let k = crd(json!(["crossplane", "managed"])).documented.unwrap();
        assert_eq!(k.fields[0].path.as_str(), "spec.forProvider.accountTier");
        assert!(crd(json!(["crossplane"])).documented.is_none());
        let c = Cluster::default();
        c.documented().replace_with_shared([k.clone()]);
        assert!(Arc::ptr_eq(
            &c.documented()
                .get("storage.azure.upbound.io", "Account")
                .unwrap(),
            &k
        ));
        assert_eq!(c.documented().counts(), (1, 1));
        c.documented().replace_with([]);
        assert_eq!(c.documented().counts(), (0, 0));
    }

    /// A kind with an MRD and no CRD gets the MRD's fields; a CRD of the
    /// same kind wins.
    #[tokio::test]
    async fn mrd_kinds_without_a_crd_are_added() {
        use crate::kube::mock::{self, crds_reply, Reply};
        let (client, _api) = mock::client(|r| {
            crds_reply(r, &[]).unwrap_or(Reply::Json(404, mock::status(404, "NotFound", "")))
        });
        let metrics = std::sync::Arc::new(
            crate::metrics::controller::ControllerMetrics::register(&prometheus::Registry::new())
                .unwrap(),
        );
        let (crds, crd_watch) = CrdStore::watch(client, metrics);
        let crd_task = tokio::spawn(crd_watch);
        let cluster = Arc::new(Cluster::default());
        let (tx, rx) = watch::channel(0);
        let task = tokio::spawn(run(crds, cluster.clone(), rx));
        let mut known = mrguard_policy::cluster::activation::Activations::default();
        known.add(&json!({"apiVersion": "apiextensions.crossplane.io/v1alpha1",
            "kind": "ManagedResourceDefinition", "metadata": {"name": "buckets.s3.aws.upbound.io"},
            "spec": {"group": "s3.aws.upbound.io", "names": {"kind": "Bucket", "plural": "buckets"},
              "versions": [{"name": "v1beta1", "served": true, "schema": {"openAPIV3Schema": {"properties": {
                "spec": {"properties": {"forProvider": {"properties": {"region": {"type": "string",
                  "description": "Changing this forces a new resource to be created."}}}}}}}}}]}}));
        cluster.activations().replace(known);
        tx.send_replace(1);
        for _ in 0..100 {
            if cluster
                .documented()
                .get("s3.aws.upbound.io", "Bucket")
                .is_some()
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let k = cluster
            .documented()
            .get("s3.aws.upbound.io", "Bucket")
            .unwrap();
        assert_eq!(k.fields[0].path.as_str(), "spec.forProvider.region");
        // The MRD watch gone: the reader goes on with the CRDs.
        drop(tx);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!task.is_finished());
        task.abort();
        crd_task.abort();
    }
}
