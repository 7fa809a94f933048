//! `mrguard explain` on composed MRs and XRs: which patches of the
//! Composition would be denied once the composed resources exist
//! (docs/compositions.md).

use serde_json::{json, Value};

use super::cluster::{api_error, ClusterError};
use mrguard_policy::composition::{self, PatchFinding};
use mrguard_policy::config::Config;
use mrguard_policy::mr;

/// Annotation Crossplane sets on composed resources: the template's name.
const RESOURCE_NAME: &str = "crossplane.io/composition-resource-name";

/// The Composition's patches that concern one object.
pub(crate) struct Patches {
    composition: String,
    /// The composed resource's name in the Composition, for an MR.
    resource: Option<String>,
    findings: Vec<PatchFinding>,
    notes: Vec<String>,
}

/// The patches of `composition` into immutable fields that concern `obj`:
/// for an MR, those of its template (by the composition-resource-name
/// annotation, else by kind); for an XR, all.
pub(crate) fn patches(obj: &Value, composition: &Value, config: &Config) -> Patches {
    let a = composition::analyse(composition, config, None);
    let is_mr = mr::is_managed(obj);
    let resource = is_mr
        .then(|| mr::Mr(obj).annotation(RESOURCE_NAME).map(str::to_string))
        .flatten();
    let api_version = obj["apiVersion"].as_str().unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = obj["kind"].as_str().unwrap_or("");
    let findings = a
        .findings
        .into_iter()
        .filter(|f| {
            !is_mr
                || match &resource {
                    Some(r) => &f.resource == r,
                    None => f.group == group && f.kind == kind,
                }
        })
        .collect();
    Patches {
        composition: composition["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        resource,
        findings,
        notes: a.notes,
    }
}

impl Patches {
    /// The text section.
    pub(crate) fn render_text(&self, label: &str) -> String {
        let of = match &self.resource {
            Some(r) => format!(", resource {r:?}"),
            None => String::new(),
        };
        let mut s = format!(
            "\nComposition {:?}{of}: patches into immutable fields of {label}\n",
            self.composition
        );
        if self.findings.is_empty() {
            s.push_str("  none: a change on the XR reaches no immutable field here\n");
        }
        for f in &self.findings {
            s.push_str(&format!("  - {}\n    fix: {}\n", f.message(), f.fix()));
        }
        for n in &self.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        s
    }

    /// The JSON section.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "name": self.composition,
            "resource": self.resource,
            "patches": self.findings.iter().map(|f| json!({
                "step": f.step,
                "resource": f.resource,
                "patch": f.patch.to_string(),
                "type": f.patch_type,
                "sources": f.sources,
                "target": f.target,
                "immutable": f.immutable,
                "message": f.message(),
                "fix": f.fix(),
            })).collect::<Vec<_>>(),
            "notes": self.notes,
        })
    }
}

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
