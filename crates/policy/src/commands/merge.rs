//! `kubectl apply`'s client-side three-way merge, as it works for custom
//! resources: kubectl has no strategic-merge schema for a CRD, so it sends
//! a JSON merge patch (RFC 7386) computed from three documents:
//!
//! - *original*: the `kubectl.kubernetes.io/last-applied-configuration`
//!   annotation of the live object (what the last apply sent);
//! - *modified*: the manifest, with that annotation set to itself;
//! - *current*: the live object.
//!
//! Fields that were in *original* and are gone from *modified* are deleted;
//! fields of *modified* that differ from *current* are set; everything else
//! in *current* (defaults, fields other writers set, status) stays. Lists are
//! values: a list that differs is replaced whole. This mirrors
//! `jsonmergepatch.CreateThreeWayJSONMergePatch` in k8s.io/apimachinery, which
//! `mrguard check --live --merge client` uses to compute the object the API
//! server would store.

use serde_json::{Map, Value};

/// The annotation kubectl keeps the last applied manifest in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Why a three-way merge could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// One of the three documents is not a JSON object.
    #[error("failed to merge: the {0} is not an object")]
    NotAnObject(&'static str),
    /// The live object's last-applied annotation is not a JSON object.
    #[error("failed to read the {LAST_APPLIED} annotation of the live object: {0}")]
    LastApplied(String),
}

/// The JSON merge patch that turns `from` into `to` (RFC 7386): changed
/// and added fields with their new value, removed fields as `null`, nested
/// objects as nested patches, lists and scalars whole.
pub fn create_merge_patch(
    from: &Map<String, Value>,
    to: &Map<String, Value>,
) -> Map<String, Value> {
    let mut patch = Map::new();
    for (key, b) in to {
        match (from.get(key), b) {
            (None, _) => {
                patch.insert(key.clone(), b.clone());
            }
            (Some(Value::Object(a)), Value::Object(b)) => {
                let nested = create_merge_patch(a, b);
                if !nested.is_empty() {
                    patch.insert(key.clone(), Value::Object(nested));
                }
            }
            (Some(a), b) if a != b => {
                patch.insert(key.clone(), b.clone());
            }
            _ => {}
        }
    }
    for key in from.keys() {
        if !to.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    patch
}

/// Keeps only the deletions (`keep_null`) or only the additions and
/// changes of a merge patch. An explicitly empty object is a value, not an
/// empty patch, so it counts as a change (as in apimachinery).
fn filter_nulls(patch: &Map<String, Value>, keep_null: bool) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, v) in patch {
        match v {
            Value::Null if keep_null => {
                out.insert(key.clone(), Value::Null);
            }
            Value::Null => {}
            Value::Object(m) if m.is_empty() && !keep_null => {
                out.insert(key.clone(), v.clone());
            }
            Value::Object(m) if m.is_empty() => {}
            Value::Object(m) => {
                let sub = filter_nulls(m, keep_null);
                if !sub.is_empty() {
                    out.insert(key.clone(), Value::Object(sub));
                }
            }
            _ if !keep_null => {
                out.insert(key.clone(), v.clone());
            }
            _ => {}
        }
    }
    out
}

/// Merges two merge patches: `over`'s entries win, nested objects merge,
/// and `under`'s nulls (deletions) stay.
fn merge_patches(under: &mut Map<String, Value>, over: Map<String, Value>) {
    for (key, v) in over {
        match (under.get_mut(&key), v) {
            (Some(Value::Object(u)), Value::Object(o)) => merge_patches(u, o),
            (_, v) => {
                under.insert(key, v);
            }
        }
    }
}

/// kubectl's three-way JSON merge patch: deletions from `original` (the
/// last applied configuration; `None` when there is none, so nothing is
/// deleted) to `modified`, plus additions and changes from `current` to
/// `modified`.
///
/// Deletions and changes cannot overlap: a deletion names a key absent from
/// `modified`, a change one present in it, so apimachinery's conflict check
/// never fires for these inputs and is not repeated here.
pub fn three_way_merge_patch(
    original: Option<&Value>,
    modified: &Value,
    current: &Value,
) -> Result<Value, MergeError> {
    let empty = Map::new();
    let original = match original {
        None => &empty,
        Some(Value::Object(o)) => o,
        Some(_) => return Err(MergeError::NotAnObject("last applied configuration")),
    };
    let modified = modified
        .as_object()
        .ok_or(MergeError::NotAnObject("manifest"))?;
    let current = current
        .as_object()
        .ok_or(MergeError::NotAnObject("live object"))?;
    let changes = filter_nulls(&create_merge_patch(current, modified), false);
    let mut patch = filter_nulls(&create_merge_patch(original, modified), true);
    merge_patches(&mut patch, changes);
    Ok(Value::Object(patch))
}

/// Applies a JSON merge patch (RFC 7386), as the API server does for
/// `application/merge-patch+json`.
pub fn apply_merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// The live object's last applied configuration, if it has one.
pub fn last_applied(live: &Value) -> Result<Option<Value>, MergeError> {
    let Some(text) = live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
    else {
        return Ok(None);
    };
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(Some(v)),
        Ok(_) => Err(MergeError::LastApplied("not a JSON object".into())),
        Err(e) => Err(MergeError::LastApplied(e.to_string())),
    }
}

/// The manifest as `kubectl apply` sends it: with the last-applied
/// annotation set to the manifest itself (serialised without that
/// annotation, with an `annotations` map even when it was empty, as kubectl
/// writes it).
pub fn with_last_applied(manifest: &Value) -> Value {
    let mut out = manifest.clone();
    let Some(obj) = out.as_object_mut() else {
        return out;
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        return out;
    }
    let annotations = meta
        .as_object_mut()
        .map(|m| {
            m.entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()))
        })
        .filter(|a| a.is_object());
    if let Some(Value::Object(a)) = annotations {
        a.remove(LAST_APPLIED);
    } else {
        return out;
    }
    let serialised = out.to_string();
    if let Some(Value::Object(a)) = out.pointer_mut("/metadata/annotations") {
        a.insert(LAST_APPLIED.to_string(), Value::String(serialised));
    }
    out
}

/// What `kubectl apply` (client-side) would make of `manifest` given the
/// live object: the merge patch it would send (`None` when it is empty, in
/// which case kubectl sends nothing) and the object the API server would
/// then hold, before defaulting and admission. A main-resource patch cannot
/// change `status` (MR CRDs have the status subresource), so the live status
/// is kept.
pub fn client_side_apply(live: &Value, manifest: &Value) -> Result<Applied, MergeError> {
    let original = last_applied(live)?;
    let modified = with_last_applied(manifest);
    let patch = three_way_merge_patch(original.as_ref(), &modified, live)?;
    let mut object = live.clone();
    apply_merge_patch(&mut object, &patch);
    match live.get("status") {
        Some(s) => {
            object["status"] = s.clone();
        }
        None => {
            if let Some(o) = object.as_object_mut() {
                o.remove("status");
            }
        }
    }
    let empty = patch.as_object().is_some_and(Map::is_empty);
    Ok(Applied {
        patch: (!empty).then_some(patch),
        object,
        had_last_applied: original.is_some(),
    })
}

/// The outcome of [`client_side_apply`].
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The merge patch kubectl would send; `None` when nothing changes.
    pub patch: Option<Value>,
    /// The object after the patch.
    pub object: Value,
    /// Whether the live object carried a last-applied configuration; without
    /// one kubectl deletes nothing (and warns that it adds the annotation).
    pub had_last_applied: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(original: Option<Value>, modified: Value, current: Value) -> Value {
        three_way_merge_patch(original.as_ref(), &modified, &current).unwrap()
    }

    #[test]
    fn rfc7386_diff() {
        let a = json!({"a": 1, "b": {"c": 1, "d": [1, 2]}, "e": "x"});
        let b = json!({"a": 2, "b": {"c": 1, "d": [1]}, "f": {}});
        let p = create_merge_patch(a.as_object().unwrap(), b.as_object().unwrap());
        assert_eq!(
            Value::Object(p.clone()),
            json!({"a": 2, "b": {"d": [1]}, "e": null, "f": {}})
        );
        let mut applied = a.clone();
        apply_merge_patch(&mut applied, &Value::Object(p));
        assert_eq!(applied, b);
    }

    #[test]
    fn changes_win_and_unmanaged_fields_stay() {
        let original = json!({"spec": {"forProvider": {"region": "us-east-1"}}});
        let current = json!({"spec": {"forProvider": {"region": "us-east-1", "arn": "x"},
                                      "deletionPolicy": "Delete"},
                             "status": {"atProvider": {}}});
        let modified = json!({"spec": {"forProvider": {"region": "eu-west-1"}}});
        let p = patch(Some(original), modified, current.clone());
        assert_eq!(p, json!({"spec": {"forProvider": {"region": "eu-west-1"}}}));
        let mut o = current;
        apply_merge_patch(&mut o, &p);
        assert_eq!(o["spec"]["forProvider"]["arn"], "x");
        assert_eq!(o["spec"]["deletionPolicy"], "Delete");
        assert_eq!(o["spec"]["forProvider"]["region"], "eu-west-1");
    }

    #[test]
    fn fields_dropped_from_the_manifest_are_deleted_only_if_last_applied_had_them() {
        let current = json!({"spec": {"forProvider": {"region": "us-east-1", "tags": {"a": "1", "b": "2"},
                                                      "late": "provider"}}});
        // The last apply set tags.a, tags.b and region; the provider set "late".
        let original =
            json!({"spec": {"forProvider": {"region": "us-east-1", "tags": {"a": "1", "b": "2"}}}});
        let modified = json!({"spec": {"forProvider": {"tags": {"a": "1"}}}});
        let p = patch(Some(original), modified.clone(), current.clone());
        assert_eq!(
            p,
            json!({"spec": {"forProvider": {"region": null, "tags": {"b": null}}}})
        );
        let mut o = current.clone();
        apply_merge_patch(&mut o, &p);
        assert_eq!(
            o,
            json!({"spec": {"forProvider": {"tags": {"a": "1"}, "late": "provider"}}})
        );
        // Without a last-applied configuration nothing is deleted.
        assert_eq!(patch(None, modified, current), json!({}));
    }

    #[test]
    fn a_whole_subtree_dropped_is_one_null() {
        let original = json!({"spec": {"initProvider": {"a": 1}, "forProvider": {}}});
        let current = json!({"spec": {"initProvider": {"a": 1}, "forProvider": {}}});
        let modified = json!({"spec": {"forProvider": {}}});
        assert_eq!(
            patch(Some(original), modified, current),
            json!({"spec": {"initProvider": null}})
        );
    }

    #[test]
    fn lists_are_replaced_whole() {
        let original = json!({"spec": {"forProvider": {"subnets": [{"id": "a"}, {"id": "b"}]}}});
        let current =
            json!({"spec": {"forProvider": {"subnets": [{"id": "a", "zone": "z1"}, {"id": "b"}]}}});
        let modified = json!({"spec": {"forProvider": {"subnets": [{"id": "a"}]}}});
        let p = patch(Some(original.clone()), modified, current.clone());
        assert_eq!(
            p,
            json!({"spec": {"forProvider": {"subnets": [{"id": "a"}]}}})
        );
        // A list equal to the live one is not sent, even if last-applied differs.
        let p = patch(Some(original), current.clone(), current);
        assert_eq!(p, json!({}));
    }

    #[test]
    fn empty_objects_are_values_and_nulls_in_the_manifest_delete_what_was_applied() {
        let original = json!({"spec": {"forProvider": {"a": "x"}}});
        let current = json!({"spec": {"forProvider": {"a": "x"}}});
        let modified = json!({"spec": {"forProvider": {"a": null, "tags": {}}}});
        let p = patch(Some(original), modified, current.clone());
        assert_eq!(p, json!({"spec": {"forProvider": {"a": null, "tags": {}}}}));
        let mut o = current;
        apply_merge_patch(&mut o, &p);
        assert_eq!(o, json!({"spec": {"forProvider": {"tags": {}}}}));
    }

    #[test]
    fn type_changes_replace() {
        let current = json!({"spec": {"forProvider": {"x": {"a": 1}}}});
        let modified = json!({"spec": {"forProvider": {"x": "flat"}}});
        assert_eq!(
            patch(None, modified, current),
            json!({"spec": {"forProvider": {"x": "flat"}}})
        );
    }

    #[test]
    fn last_applied_is_the_manifest_without_itself() {
        let manifest = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n"}});
        let m = with_last_applied(&manifest);
        let text = m["metadata"]["annotations"][LAST_APPLIED].as_str().unwrap();
        // kubectl's form: an empty annotations map, keys sorted.
        assert_eq!(
            text,
            r#"{"apiVersion":"v1","kind":"X","metadata":{"annotations":{},"name":"n"}}"#
        );
        // Re-applying replaces the old annotation rather than nesting it.
        let again = with_last_applied(&m);
        assert_eq!(again, m);
    }

    #[test]
    fn client_side_apply_keeps_status_and_reports_no_op() {
        let manifest = json!({"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket",
                              "metadata": {"name": "b"}, "spec": {"forProvider": {"region": "us-east-1"}}});
        let mut live = with_last_applied(&manifest);
        live["metadata"]["uid"] = json!("u1");
        live["spec"]["deletionPolicy"] = json!("Delete");
        live["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        let same = client_side_apply(&live, &manifest).unwrap();
        assert!(same.patch.is_none(), "{:?}", same.patch);
        assert_eq!(same.object, live);
        assert!(same.had_last_applied);

        let mut changed = manifest.clone();
        changed["spec"]["forProvider"]["region"] = json!("eu-west-1");
        changed["status"] = json!({"conditions": []});
        let a = client_side_apply(&live, &changed).unwrap();
        assert_eq!(a.object["spec"]["forProvider"]["region"], "eu-west-1");
        assert_eq!(a.object["status"], live["status"]);
        assert_eq!(a.object["metadata"]["uid"], "u1");
        let recorded: Value = serde_json::from_str(
            a.object["metadata"]["annotations"][LAST_APPLIED]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(recorded["spec"]["forProvider"]["region"], "eu-west-1");
    }

    #[test]
    fn a_broken_annotation_is_named() {
        let live = json!({"metadata": {"annotations": {LAST_APPLIED: "{not json"}}});
        let e = client_side_apply(&live, &json!({})).unwrap_err();
        assert!(e.to_string().contains(LAST_APPLIED), "{e}");
        assert_eq!(
            three_way_merge_patch(None, &json!([]), &json!({})),
            Err(MergeError::NotAnObject("manifest"))
        );
    }
}
