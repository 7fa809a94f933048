//! `metadata.managedFields`: which field manager owns which field.
//!
//! Each entry's `fieldsV1` is a trie of path elements, one JSON key per
//! element (the `FieldsV1` format of sigs.k8s.io/structured-merge-diff):
//!
//! - `f:<name>`: a field of an object (or a key of a map);
//! - `k:<json object>`: the element of an associative list whose key fields
//!   have these values (e.g. `k:{"name":"web","port":80}`);
//! - `v:<json>`: the element of a set-list with this value;
//! - `i:<n>`: the element at an index (atomic lists seldom show this);
//! - `.`: the node itself is owned, besides the children listed next to it.
//!
//! A node whose value is `{}` is owned whole: a scalar, or an atomic list or
//! map (for CRDs, lists without `x-kubernetes-list-type` are atomic).

use serde::Serialize;
use serde_json::{Map, Value};

/// One step of a managed-fields path.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PathElement {
    /// `f:`: an object field or map key.
    Field(String),
    /// `k:`: the list element whose key fields have these values.
    Key(Map<String, Value>),
    /// `v:`: the set element with this value.
    Value(Value),
    /// `i:`: the list element at this index.
    Index(usize),
}

impl PathElement {
    /// Whether this element selects `step` of an object path.
    pub fn matches(&self, step: &Step<'_>) -> bool {
        match (self, step) {
            (PathElement::Field(a), Step::Field(b)) => a == b,
            (PathElement::Key(k), Step::Item(_, v)) => v
                .as_object()
                .is_some_and(|o| k.iter().all(|(kk, kv)| o.get(kk) == Some(kv))),
            (PathElement::Value(x), Step::Item(_, v)) => x == *v,
            (PathElement::Index(i), Step::Item(j, _)) => i == j,
            _ => false,
        }
    }
}

/// One step of a path into an object, as it is walked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step<'a> {
    /// An object field.
    Field(&'a str),
    /// A list element: its index and value.
    Item(usize, &'a Value),
}

/// A path a manager owns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OwnedPath {
    /// The steps from the object's root.
    pub path: Vec<PathElement>,
    /// No children are listed under it: the manager owns the whole subtree
    /// (a scalar, or an atomic list or map).
    pub whole: bool,
}

/// One `managedFields` entry, decoded.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedEntry {
    /// The field manager, e.g. `kubectl-client-side-apply` or `provider`.
    pub manager: String,
    /// `Apply` (server-side apply) or `Update`.
    pub operation: String,
    /// The subresource written, e.g. `status`; empty for the main resource.
    pub subresource: String,
    /// When the entry last changed (RFC 3339), if recorded.
    pub time: Option<String>,
    /// Every owned path.
    pub paths: Vec<OwnedPath>,
}

/// Why `managedFields` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManagedFieldsError {
    /// `metadata.managedFields` is not a list of objects.
    #[error("failed to read metadata.managedFields: {0}")]
    Shape(String),
    /// A `fieldsV1` key is not one of `f:`, `k:`, `v:`, `i:` or `.`.
    #[error("failed to decode fieldsV1 of manager {manager:?}: key {key:?}: {reason}")]
    Key {
        /// The entry's manager.
        manager: String,
        /// The offending key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Decodes one `fieldsV1` trie into the paths it owns.
pub fn decode_fields_v1(
    manager: &str,
    fields: &Value,
) -> Result<Vec<OwnedPath>, ManagedFieldsError> {
    let mut out = Vec::new();
    let Some(map) = fields.as_object() else {
        return Err(ManagedFieldsError::Shape(format!(
            "fieldsV1 of manager {manager:?} is not an object"
        )));
    };
    walk(manager, map, &mut Vec::new(), &mut out)?;
    Ok(out)
}

fn walk(
    manager: &str,
    node: &Map<String, Value>,
    prefix: &mut Vec<PathElement>,
    out: &mut Vec<OwnedPath>,
) -> Result<(), ManagedFieldsError> {
    for (key, child) in node {
        if key == "." {
            // The node itself; the root has no path to own.
            if !prefix.is_empty() {
                out.push(OwnedPath {
                    path: prefix.clone(),
                    whole: false,
                });
            }
            continue;
        }
        let element = parse_key(manager, key)?;
        prefix.push(element);
        match child.as_object() {
            Some(m) if m.is_empty() => out.push(OwnedPath {
                path: prefix.clone(),
                whole: true,
            }),
            Some(m) => walk(manager, m, prefix, out)?,
            None => {
                return Err(ManagedFieldsError::Key {
                    manager: manager.to_string(),
                    key: key.clone(),
                    reason: "its value is not an object".into(),
                })
            }
        }
        prefix.pop();
    }
    Ok(())
}

fn parse_key(manager: &str, key: &str) -> Result<PathElement, ManagedFieldsError> {
    let bad = |reason: String| ManagedFieldsError::Key {
        manager: manager.to_string(),
        key: key.to_string(),
        reason,
    };
    let (prefix, rest) = key
        .split_once(':')
        .ok_or_else(|| bad("expected f:, k:, v:, i: or .".into()))?;
    match prefix {
        "f" => Ok(PathElement::Field(rest.to_string())),
        "k" => match serde_json::from_str::<Value>(rest) {
            Ok(Value::Object(m)) => Ok(PathElement::Key(m)),
            Ok(_) => Err(bad("a k: key must be a JSON object".into())),
            Err(e) => Err(bad(e.to_string())),
        },
        "v" => serde_json::from_str(rest)
            .map(PathElement::Value)
            .map_err(|e| bad(e.to_string())),
        "i" => rest
            .parse()
            .map(PathElement::Index)
            .map_err(|e| bad(format!("{e}"))),
        _ => Err(bad("expected f:, k:, v:, i: or .".into())),
    }
}

/// Decodes `metadata.managedFields` of an object; absent means none.
pub fn entries(object: &Value) -> Result<Vec<ManagedEntry>, ManagedFieldsError> {
    let Some(list) = object.pointer("/metadata/managedFields") else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| ManagedFieldsError::Shape("not a list".into()))?;
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        if !e.is_object() {
            return Err(ManagedFieldsError::Shape(format!(
                "entry {i} is not an object"
            )));
        }
        let text = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
        let manager = text("manager").unwrap_or_default();
        let paths = match e.get("fieldsV1") {
            None | Some(Value::Null) => Vec::new(),
            Some(f) => decode_fields_v1(&manager, f)?,
        };
        out.push(ManagedEntry {
            manager,
            operation: text("operation").unwrap_or_default(),
            subresource: text("subresource").unwrap_or_default(),
            time: text("time"),
            paths,
        });
    }
    Ok(out)
}

/// How an owned path relates to a path in the object.
fn relation(owned: &OwnedPath, steps: &[Step<'_>]) -> Option<Relation> {
    let common = owned.path.len().min(steps.len());
    if !owned.path[..common]
        .iter()
        .zip(&steps[..common])
        .all(|(e, s)| e.matches(s))
    {
        return None;
    }
    use std::cmp::Ordering::*;
    match owned.path.len().cmp(&steps.len()) {
        Equal => Some(Relation::Exact),
        Less if owned.whole => Some(Relation::Ancestor),
        Less => None,
        Greater => Some(Relation::Descendant),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Relation {
    Exact,
    Ancestor,
    Descendant,
}

impl ManagedEntry {
    /// Whether this manager owns the value at `steps`: the path itself, a
    /// whole (atomic) ancestor, or, with `or_inside`, anything beneath it
    /// (for a list shown as one value).
    pub fn owns(&self, steps: &[Step<'_>], or_inside: bool) -> bool {
        self.paths.iter().any(|p| match relation(p, steps) {
            Some(Relation::Exact | Relation::Ancestor) => true,
            Some(Relation::Descendant) => or_inside,
            None => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_every_key_kind() {
        let f = json!({
            "f:metadata": {"f:annotations": {".": {}, "f:crossplane.io/external-name": {}}},
            "f:spec": {
                "f:forProvider": {
                    "f:ports": {"k:{\"name\":\"web\",\"port\":80}": {".": {}, "f:protocol": {}}},
                    "f:zones": {"v:\"us-east-1a\"": {}},
                    "f:subnetIds": {},
                    "f:rules": {"i:0": {"f:cidr": {}}}
                }
            }
        });
        let paths = decode_fields_v1("m", &f).unwrap();
        let field = |s: &str| PathElement::Field(s.into());
        assert!(paths.contains(&OwnedPath {
            path: vec![field("metadata"), field("annotations")],
            whole: false
        }));
        assert!(paths.contains(&OwnedPath {
            path: vec![
                field("metadata"),
                field("annotations"),
                field("crossplane.io/external-name")
            ],
            whole: true
        }));
        let key = json!({"name": "web", "port": 80})
            .as_object()
            .unwrap()
            .clone();
        assert!(paths.contains(&OwnedPath {
            path: vec![
                field("spec"),
                field("forProvider"),
                field("ports"),
                PathElement::Key(key.clone()),
                field("protocol")
            ],
            whole: true
        }));
        assert!(paths.contains(&OwnedPath {
            path: vec![
                field("spec"),
                field("forProvider"),
                field("zones"),
                PathElement::Value(json!("us-east-1a"))
            ],
            whole: true
        }));
        assert!(paths.contains(&OwnedPath {
            path: vec![
                field("spec"),
                field("forProvider"),
                field("rules"),
                PathElement::Index(0),
                field("cidr")
            ],
            whole: true
        }));
    }

    #[test]
    fn bad_keys_are_named() {
        for (f, needle) in [
            (json!({"x:y": {}}), "x:y"),
            (json!({"k:[1]": {}}), "JSON object"),
            (json!({"k:{oops": {}}), "k:{oops"),
            (json!({"i:a": {}}), "i:a"),
            (json!({"f:a": 3}), "not an object"),
            (json!({"nocolon": {}}), "nocolon"),
        ] {
            let e = decode_fields_v1("provider", &f).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("provider"), "{e}");
        }
        let e = entries(&json!({"metadata": {"managedFields": {}}})).unwrap_err();
        assert!(e.to_string().contains("managedFields"), "{e}");
    }

    #[test]
    fn ownership_of_object_paths() {
        let obj = json!({"metadata": {"managedFields": [
            {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {"f:forProvider": {
                "f:region": {}, "f:ports": {"k:{\"name\":\"web\"}": {".": {}, "f:port": {}}}}}}},
            {"manager": "provider", "operation": "Update", "time": "2024-01-01T00:00:00Z",
             "fieldsV1": {"f:spec": {"f:forProvider": {"f:subnetIds": {}, "f:tags": {}}}}},
            {"manager": "provider", "operation": "Update", "subresource": "status",
             "fieldsV1": {"f:status": {"f:atProvider": {".": {}}}}}
        ]}});
        let e = entries(&obj).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[2].subresource, "status");
        assert_eq!(e[1].time.as_deref(), Some("2024-01-01T00:00:00Z"));
        let web = json!({"name": "web", "port": 80});
        let db = json!({"name": "db", "port": 5432});
        let s = |steps: &[Step<'_>]| -> Vec<String> {
            e.iter()
                .filter(|m| m.owns(steps, false))
                .map(|m| m.manager.clone())
                .collect()
        };
        let fp = [Step::Field("spec"), Step::Field("forProvider")];
        assert_eq!(s(&[fp[0], fp[1], Step::Field("region")]), ["kubectl"]);
        // An atomic map owns its keys.
        assert_eq!(
            s(&[fp[0], fp[1], Step::Field("tags"), Step::Field("a")]),
            ["provider"]
        );
        // List elements by key.
        assert_eq!(
            s(&[
                fp[0],
                fp[1],
                Step::Field("ports"),
                Step::Item(0, &web),
                Step::Field("port")
            ]),
            ["kubectl"]
        );
        assert!(s(&[
            fp[0],
            fp[1],
            Step::Field("ports"),
            Step::Item(1, &db),
            Step::Field("port")
        ])
        .is_empty());
        // The list as a whole: owned through its elements only with or_inside.
        let ports = [fp[0], fp[1], Step::Field("ports")];
        assert!(!e[0].owns(&ports, false));
        assert!(e[0].owns(&ports, true));
        assert!(s(&[fp[0], fp[1], Step::Field("other")]).is_empty());
    }
}
