//! The cluster's ManagedResourceDefinitions and activation policies, read
//! once per command (`check --live`, `explain`): they name the MRD of a
//! kind the API server does not serve (docs/activation.md). A cluster
//! without Crossplane v2 has no such API, which is not an error.

use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::Api;
use mrguard_policy::cluster::activation::{self, Activations};
use serde_json::Value;

use super::cluster::{api_error, ClusterError};

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: activation::GROUP.into(),
        version: activation::VERSION.into(),
        api_version: format!("{}/{}", activation::GROUP, activation::VERSION),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Every MRD and MRAP of the cluster; empty where the API does not exist.
pub(crate) async fn list(client: &kube::Client) -> Result<Activations, ClusterError> {
    let mut known = Activations::default();
    for o in list_objects(client).await? {
        known.add(&o);
    }
    Ok(known)
}

/// The MRD and MRAP objects of the cluster, as read; none where the API
/// does not exist.
pub(crate) async fn list_objects(client: &kube::Client) -> Result<Vec<Value>, ClusterError> {
    let mut out = Vec::new();
    for (kind, plural) in [
        (activation::MRD_KIND, activation::MRD_PLURAL),
        (activation::MRAP_KIND, activation::MRAP_PLURAL),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind, plural));
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                for o in list.items {
                    let mut v = serde_json::to_value(o).unwrap_or_default();
                    // A list's items carry no type; the readers check it.
                    v["apiVersion"] =
                        format!("{}/{}", activation::GROUP, activation::VERSION).into();
                    v["kind"] = kind.into();
                    out.push(v);
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(api_error(
                    "list",
                    format!("{plural}.{}", activation::GROUP),
                    e,
                ))
            }
        }
    }
    Ok(out)
}
