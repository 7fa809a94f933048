//! Every replica: the immutable fields that installed MR CRDs document
//! (docs/documented-immutables.md), kept in the shared `Cluster` for the
//! `documented-immutable-field` rule. A reader of the shared CRD store
//! (`crds`), which derives each MR CRD's fields
//! (`mrguard_policy::documented`) as it decodes it; after every change the
//! kinds in the store replace the `Cluster`'s.

use std::sync::Arc;

use mrguard_policy::cluster::Cluster;

use super::crds::Crds;

/// Runs until aborted (or until the CRD watch is gone).
pub(crate) async fn run(crds: Crds, cluster: Arc<Cluster>) {
    let store = cluster.documented();
    let mut changes = crds.subscribe();
    let mut first = true;
    while changes.next().await.is_some() {
        store.replace_with_shared(crds.snapshot().iter().filter_map(|c| c.documented.clone()));
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
    use crate::controller::replica::crds::Crd;
    use serde_json::{json, Value};

    fn crd(cats: Value) -> Crd {
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
}
