//! The schemas of composite resources (XRs), from their
//! CompositeResourceDefinitions or the CRDs Crossplane generates from them:
//! enough to know whether an XR field is immutable, so that a patch from it
//! cannot carry a change into a composed resource.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

/// The XR schemas the runtime's XRD watch keeps, for the webhook
/// (`Cluster::composites`): swapped whole on each change,
/// read as a snapshot by each decision.
#[derive(Debug, Default)]
pub struct XrIndex {
    current: RwLock<Arc<XrSchemas>>,
}

impl XrIndex {
    /// Replaces what is known.
    pub fn replace(&self, schemas: XrSchemas) {
        // A poisoned lock only means a writer panicked mid-swap of an Arc.
        let mut g = self.current.write().unwrap_or_else(|e| e.into_inner());
        *g = Arc::new(schemas);
    }

    /// What is known now.
    pub fn snapshot(&self) -> Arc<XrSchemas> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// XR schemas by API group, kind and version.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct XrSchemas {
    schemas: BTreeMap<(String, String, String), Value>,
}

impl XrSchemas {
    /// Adds the schemas of `object` when it is a CompositeResourceDefinition
    /// (`apiextensions.crossplane.io`) or a CustomResourceDefinition; other
    /// objects are ignored. Returns whether it added any.
    pub fn add(&mut self, object: &Value) -> bool {
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        let api = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let is_xrd = kind == "CompositeResourceDefinition"
            && api.starts_with("apiextensions.crossplane.io/");
        let is_crd = kind == "CustomResourceDefinition" && api.starts_with("apiextensions.k8s.io/");
        if !(is_xrd || is_crd) {
            return false;
        }
        let spec = &object["spec"];
        let (Some(group), Some(xr_kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str())
        else {
            return false;
        };
        let mut added = false;
        for v in spec["versions"].as_array().into_iter().flatten() {
            let (Some(name), Some(schema)) = (
                v["name"].as_str(),
                v.get("schema").and_then(|s| s.get("openAPIV3Schema")),
            ) else {
                continue;
            };
            self.schemas.insert(
                (group.to_string(), xr_kind.to_string(), name.to_string()),
                schema.clone(),
            );
            added = true;
        }
        added
    }

    /// Whether no schema was added.
    pub fn is_empty(&self) -> bool {
        self.schemas.is_empty()
    }

    /// Whether the schema of `api_version`/`kind` is known.
    pub fn knows(&self, api_version: &str, kind: &str) -> bool {
        self.schema(api_version, kind).is_some()
    }

    fn schema(&self, api_version: &str, kind: &str) -> Option<&Value> {
        let (group, version) = api_version.rsplit_once('/')?;
        self.schemas
            .get(&(group.to_string(), kind.to_string(), version.to_string()))
    }

    /// Whether the XR's schema makes the field at `keys` immutable: a
    /// `self == oldSelf` rule on it or on an object that holds it.
    pub fn is_immutable(&self, api_version: &str, kind: &str, keys: &[String]) -> bool {
        let Some(mut node) = self.schema(api_version, kind) else {
            return false;
        };
        for k in keys {
            node = match node.get("properties").and_then(|p| p.get(k)) {
                Some(n) => n,
                None => match (node.get("items"), node.get("additionalProperties")) {
                    (Some(items), _) if k.parse::<usize>().is_ok() => items,
                    (_, Some(ap)) if ap.is_object() => ap,
                    _ => return false,
                },
            };
            if freezes(node) {
                return true;
            }
        }
        false
    }
}

/// A `self == oldSelf` transition rule, however it is spaced or ordered.
fn freezes(node: &Value) -> bool {
    node.get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("rule").and_then(Value::as_str))
        .any(|r| {
            let r: String = r.chars().filter(|c| !c.is_whitespace()).collect();
            r == "self==oldSelf" || r == "oldSelf==self"
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn k(s: &str) -> Vec<String> {
        super::super::paths::keys(s).unwrap()
    }

    #[test]
    fn a_self_equals_old_self_rule_on_the_field_or_a_parent_freezes_it() {
        let mut x = XrSchemas::default();
        assert!(!x.add(&json!({"kind": "ConfigMap", "apiVersion": "v1"})));
        assert!(x.add(&json!({
            "apiVersion": "apiextensions.crossplane.io/v1",
            "kind": "CompositeResourceDefinition",
            "spec": {"group": "example.org", "names": {"kind": "XNetwork"},
                "versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": {
                        "parameters": {"type": "object", "properties": {
                            "region": {"type": "string",
                                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "region is immutable"}]},
                            "name": {"type": "string"},
                            "fixed": {"type": "object",
                                "x-kubernetes-validations": [{"rule": "oldSelf==self"}],
                                "properties": {"zone": {"type": "string"}}},
                        }}}}}}}}]}
        })));
        let v = "example.org/v1alpha1";
        assert!(x.is_immutable(v, "XNetwork", &k("spec.parameters.region")));
        assert!(x.is_immutable(v, "XNetwork", &k("spec.parameters.fixed.zone")));
        assert!(!x.is_immutable(v, "XNetwork", &k("spec.parameters.name")));
        assert!(!x.is_immutable(v, "XNetwork", &k("spec.parameters.nope")));
        assert!(!x.is_immutable("example.org/v1", "XNetwork", &k("spec.parameters.region")));
        assert!(x.knows(v, "XNetwork"));
    }
}
