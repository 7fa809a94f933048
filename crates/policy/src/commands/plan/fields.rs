//! The field-level diff of one MR and the mark of each field: what the
//! change meets at the provider.

use serde_json::{Map, Value};

use crate::admission::crd::NodeShape;
use crate::commands::check::CheckFinding;
use crate::commands::explain::display_path;
use crate::commands::managed_fields::{ManagedEntry, Step};
use crate::commands::merge::LAST_APPLIED;

use super::{FieldChange, Mark};

/// The parts of an MR the diff shows; each is walked down to its values
/// (scalars, lists and empty objects), except the policies, shown whole.
const ROOTS: [&[&str]; 5] = [
    &["spec", "forProvider"],
    &["spec", "initProvider"],
    &["metadata", "annotations"],
    &["spec", "managementPolicies"],
    &["spec", "deletionPolicy"],
];

/// The rules whose findings mean the provider cannot change a field in
/// place, and the source each names.
const REPLACEMENT_RULES: [(&str, &str); 2] = [
    ("immutable-field", "curated"),
    ("documented-immutable-field", "documented"),
];

/// One changed value: its keys from the root, before and after.
pub(super) type Change = (Vec<String>, Option<Value>, Option<Value>);

fn at<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, k| cur.get(*k))
}

/// Every value that differs between `old` and `new` under the roots.
pub(super) fn diff(old: &Value, new: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    for root in ROOTS {
        let mut keys: Vec<String> = root.iter().map(|s| s.to_string()).collect();
        let (a, b) = (at(old, root), at(new, root));
        let whole = root[0] == "spec" && root[1] != "forProvider" && root[1] != "initProvider";
        if whole {
            if a != b {
                out.push((keys, a.cloned(), b.cloned()));
            }
        } else {
            walk(&mut keys, a, b, &mut out);
        }
    }
    // kubectl's own bookkeeping is no change to the resource.
    out.retain(|(k, _, _)| !(k.len() == 3 && k[1] == "annotations" && k[2] == LAST_APPLIED));
    out
}

fn walk(keys: &mut Vec<String>, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<Change>) {
    let empty = Map::new();
    match (object_or_empty(a, &empty), object_or_empty(b, &empty)) {
        (Some(x), Some(y)) if !(x.is_empty() && y.is_empty()) => {
            let mut names: Vec<&String> = x.keys().chain(y.keys()).collect();
            names.sort();
            names.dedup();
            for k in names {
                keys.push(k.clone());
                walk(keys, x.get(k), y.get(k), out);
                keys.pop();
            }
        }
        _ if a != b => out.push((keys.clone(), a.cloned(), b.cloned())),
        _ => {}
    }
}

/// A non-empty object, or `empty` for an absent value; `None` otherwise.
fn object_or_empty<'a>(
    v: Option<&'a Value>,
    empty: &'a Map<String, Value>,
) -> Option<&'a Map<String, Value>> {
    match v {
        Some(Value::Object(m)) if !m.is_empty() => Some(m),
        None => Some(empty),
        _ => None,
    }
}

/// What the marks are read against.
pub(super) struct Marks<'a> {
    /// The live object's `managedFields`.
    pub(super) entries: &'a [ManagedEntry],
    /// Whether a field manager is the provider.
    pub(super) is_provider: &'a dyn Fn(&str) -> bool,
    /// The findings of the judgement.
    pub(super) findings: &'a [CheckFinding],
    /// Why the provider writes no `spec.forProvider` change, if it does not.
    pub(super) ignore_for_provider: Option<String>,
    /// Why the provider writes no `spec.initProvider` change, if it does not.
    pub(super) ignore_init_provider: Option<String>,
}

/// Whether the field at `path` is, holds or lies in the field `finding`.
fn same_field(path: &str, finding: &str) -> bool {
    let finding = finding.split("[*]").next().unwrap_or(finding);
    let under = |a: &str, b: &str| {
        a.strip_prefix(b)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    };
    under(path, finding) || under(finding, path)
}

impl Marks<'_> {
    /// The mark of one changed field.
    pub(super) fn mark(&self, keys: &[String], old: Option<&Value>, new: Option<&Value>) -> Mark {
        let path = display_path(keys);
        let ignored = match keys.get(1).map(String::as_str) {
            Some("forProvider") => self.ignore_for_provider.as_ref(),
            Some("initProvider") => self.ignore_init_provider.as_ref(),
            _ => None,
        };
        if let Some(reason) = ignored {
            return Mark::Ignored {
                reason: reason.clone(),
            };
        }
        for (rule, source) in REPLACEMENT_RULES {
            if self
                .findings
                .iter()
                .any(|f| f.rule == rule && f.field.as_deref().is_some_and(|p| same_field(&path, p)))
            {
                return Mark::ForcesReplacement {
                    source: source.into(),
                    rule: rule.into(),
                };
            }
        }
        if keys.first().map(String::as_str) == Some("spec") && old.is_some() {
            let list = old.is_some_and(Value::is_array) || new.is_some_and(Value::is_array);
            let steps: Vec<Step<'_>> = keys.iter().map(|k| Step::Field(k)).collect();
            let mut managers: Vec<String> = Vec::new();
            for e in self
                .entries
                .iter()
                .filter(|e| e.subresource.is_empty() && (self.is_provider)(&e.manager))
                .filter(|e| e.owns(&steps, list))
            {
                if !managers.contains(&e.manager) {
                    managers.push(e.manager.clone());
                }
            }
            if !managers.is_empty() {
                return Mark::OwnedByProvider { managers };
            }
        }
        Mark::InPlace
    }

    /// The diff of `old` and `new`, marked.
    pub(super) fn changes(&self, old: &Value, new: &Value) -> Vec<FieldChange> {
        diff(old, new)
            .into_iter()
            .map(|(keys, o, n)| FieldChange {
                mark: self.mark(&keys, o.as_ref(), n.as_ref()),
                path: display_path(&keys),
                old: o,
                new: n,
            })
            .collect()
    }
}

/// What the provider does about a drifted value: with a value the spec
/// sets (`set`), and with a key of a map the spec sets that only the
/// cloud has (`remove`).
pub(super) struct Then<'a> {
    pub set: &'a str,
    pub remove: &'a str,
}

/// The keys of maps whose shape no schema gives (a `manifest`'s embedded
/// object, a kind without a CRD read) that are maps by convention: tags,
/// and Kubernetes objects' labels, annotations and data.
const CONVENTIONAL_MAPS: [&str; 6] = [
    "tags",
    "labels",
    "annotations",
    "data",
    "stringData",
    "binaryData",
];

/// Whether the object node at `keys` (under `spec.forProvider`) is a map,
/// by its `shape` or, where that is unknown, by its key's name.
fn is_map(keys: &[String], shape: &dyn Fn(&[String]) -> NodeShape) -> bool {
    match shape(keys) {
        NodeShape::Map => true,
        NodeShape::Struct => false,
        NodeShape::Unknown => keys
            .last()
            .is_some_and(|k| CONVENTIONAL_MAPS.contains(&k.as_str())),
    }
}

/// The values the spec sets under `spec.forProvider` that `status.atProvider`
/// reports otherwise, and the keys of maps the spec sets (tags, labels, a
/// manifest's data: [`is_map`]) that only the cloud has, which the provider
/// removes. Fields of structs only `atProvider` has (ids, ARNs, computed
/// values) are no drift. `changed` fields are shown as changes already.
pub(super) fn drift(
    new: &Value,
    live: &Value,
    changed: &[FieldChange],
    then: &Then<'_>,
    shape: &dyn Fn(&[String]) -> NodeShape,
) -> Vec<FieldChange> {
    let (Some(spec), Some(cloud)) = (
        at(new, &["spec", "forProvider"]),
        at(live, &["status", "atProvider"]),
    ) else {
        return vec![];
    };
    let mut values = Vec::new();
    leaves(spec, &mut vec![], &mut values);
    let mut out = Vec::new();
    let shown = |keys: &[String]| {
        let mut full = vec!["spec".to_string(), "forProvider".to_string()];
        full.extend(keys.iter().cloned());
        let path = display_path(&full);
        (!changed.iter().any(|c| c.path == path)).then_some(path)
    };
    for (keys, value) in values {
        let Some(reported) = keys.iter().try_fold(cloud, |cur, k| cur.get(k)) else {
            continue;
        };
        if reported == value {
            continue;
        }
        let Some(path) = shown(&keys) else { continue };
        out.push(FieldChange {
            path,
            old: Some(value.clone()),
            new: Some(value.clone()),
            mark: Mark::Drift {
                cloud: reported.clone(),
                then: then.set.to_string(),
            },
        });
    }
    let mut maps = Vec::new();
    set_objects(spec, &mut vec![], &mut maps);
    for (keys, set) in maps {
        if !is_map(&keys, shape) {
            continue;
        }
        let Some(Value::Object(reported)) = keys.iter().try_fold(cloud, |cur, k| cur.get(k)) else {
            continue;
        };
        for (k, v) in reported {
            if set.contains_key(k) {
                continue;
            }
            let mut keys = keys.clone();
            keys.push(k.clone());
            let Some(path) = shown(&keys) else { continue };
            out.push(FieldChange {
                path,
                old: None,
                new: None,
                mark: Mark::Drift {
                    cloud: v.clone(),
                    then: then.remove.to_string(),
                },
            });
        }
    }
    out
}

/// The non-empty objects in `v`, with their keys.
fn set_objects<'a>(
    v: &'a Value,
    keys: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, &'a Map<String, Value>)>,
) {
    if let Value::Object(m) = v {
        if m.is_empty() {
            return;
        }
        if !keys.is_empty() {
            out.push((keys.clone(), m));
        }
        for (k, child) in m {
            keys.push(k.clone());
            set_objects(child, keys, out);
            keys.pop();
        }
    }
}

/// The values of `v`: scalars, lists and empty objects, with their keys.
fn leaves<'a>(v: &'a Value, keys: &mut Vec<String>, out: &mut Vec<(Vec<String>, &'a Value)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                keys.push(k.clone());
                leaves(child, keys, out);
                keys.pop();
            }
        }
        _ => out.push((keys.clone(), v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_diff_walks_down_to_values_and_shows_policies_whole() {
        let old = json!({"metadata": {"annotations": {LAST_APPLIED: "x", "a": "1"}},
            "spec": {"forProvider": {"region": "eu", "tags": {"t": "1"}, "list": [1]},
                     "managementPolicies": ["*"]}});
        let new = json!({"metadata": {"annotations": {LAST_APPLIED: "y", "b": "2"}},
            "spec": {"forProvider": {"region": "us", "tags": {"t": "1", "u": "2"}, "list": [1, 2]},
                     "managementPolicies": ["Observe"], "deletionPolicy": "Orphan"}});
        let d: Vec<String> = diff(&old, &new)
            .iter()
            .map(|(k, o, n)| format!("{} {:?} {:?}", k.join("."), o, n))
            .collect();
        assert_eq!(
            d,
            [
                "spec.forProvider.list Some(Array [Number(1)]) Some(Array [Number(1), Number(2)])",
                "spec.forProvider.region Some(String(\"eu\")) Some(String(\"us\"))",
                "spec.forProvider.tags.u None Some(String(\"2\"))",
                "metadata.annotations.a Some(String(\"1\")) None",
                "metadata.annotations.b None Some(String(\"2\"))",
                "spec.managementPolicies Some(Array [String(\"*\")]) Some(Array [String(\"Observe\")])",
                "spec.deletionPolicy None Some(String(\"Orphan\"))",
            ]
        );
        assert!(diff(&old, &old).is_empty());
    }

    #[test]
    fn an_object_replaced_by_a_value_is_one_change_per_value() {
        let old = json!({"spec": {"forProvider": {"a": {"b": 1, "c": 2}}}});
        let new = json!({"spec": {"forProvider": {"a": "x"}}});
        let d = diff(&old, &new);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].0.join("."), "spec.forProvider.a");
    }

    #[test]
    fn findings_match_the_field_its_block_or_its_list() {
        assert!(same_field(
            "spec.forProvider.region",
            "spec.forProvider.region"
        ));
        assert!(same_field(
            "spec.forProvider.net.id",
            "spec.forProvider.net"
        ));
        assert!(same_field(
            "spec.forProvider.net",
            "spec.forProvider.net[*].id"
        ));
        assert!(!same_field(
            "spec.forProvider.regionx",
            "spec.forProvider.region"
        ));
    }
}
