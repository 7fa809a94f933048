//! `mrguard explain` on composed MRs and XRs: the Composition read from the
//! cluster; [`mrguard_policy::cluster::composition::patches`] says which of its
//! patches would be denied once the composed resources exist
//! (docs/compositions.md).

use serde_json::Value;

use super::cluster::{api_error, ClusterError};
use mrguard_policy::admission::mr;
use mrguard_policy::cluster::composition;

/// The Composition of `obj` from the cluster: an XR's own, or a composed
/// MR's XR's (its controller owner reference). `None` when `obj` is
/// neither.
pub(crate) async fn fetch(
    client: &kube::Client,
    obj: &Value,
) -> Result<Option<Value>, ClusterError> {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    let xr = if mr::is_managed(obj) {
        let owner = obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["controller"].as_bool() == Some(true));
        let Some(owner) = owner else { return Ok(None) };
        let (Some(api_version), Some(kind), Some(name)) = (
            owner["apiVersion"].as_str(),
            owner["kind"].as_str(),
            owner["name"].as_str(),
        ) else {
            return Ok(None);
        };
        let Some((group, _)) = api_version.rsplit_once('/') else {
            return Ok(None);
        };
        let r = super::cluster::resolve(client, kind, Some(group)).await?;
        let got = r
            .api(client, ns)
            .get(name)
            .await
            .map_err(|e| api_error("get", r.object(ns, name), e))?;
        serde_json::to_value(got).unwrap_or_default()
    } else {
        obj.clone()
    };
    // Crossplane v1 and v2 keep the reference in different places.
    let name = xr["spec"]["compositionRef"]["name"]
        .as_str()
        .or_else(|| xr["spec"]["crossplane"]["compositionRef"]["name"].as_str());
    let Some(name) = name else { return Ok(None) };
    let r = super::cluster::resolve(client, composition::KIND, Some(composition::GROUP)).await?;
    let got = r
        .api(client, "")
        .get(name)
        .await
        .map_err(|e| api_error("get", r.object("", name), e))?;
    Ok(Some(serde_json::to_value(got).unwrap_or_default()))
}
