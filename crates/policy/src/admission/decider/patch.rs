//! The one place a JSON Patch is built: diff the original against the
//! mutated object, then sort so the output is deterministic.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::Value;

/// The patch that turns `before` into `after`, or `None` when they are equal.
pub fn build(before: &Value, after: &Value) -> Option<Patch> {
    let mut ops = Vec::new();
    diff(before, after, &mut PointerBuf::new(), &mut ops);
    // No path is a prefix of another (a changed value is replaced whole,
    // never also descended into), so sorting keeps the patch valid.
    ops.sort_by(|a, b| path(a).cmp(path(b)));
    (!ops.is_empty()).then_some(Patch(ops))
}

/// The patch that turns `before` into `after` where `after` holds only the
/// subtrees at `paths` (and the objects on the way), as mutation's working
/// copy does: what `after` leaves out is not a removal. Saves copying the
/// untouched rest of an object just to diff it.
pub(crate) fn build_along(before: &Value, after: &Value, paths: &[&[&str]]) -> Option<Patch> {
    let mut ops = Vec::new();
    for path in paths {
        along(before, after, path, &mut PointerBuf::new(), &mut ops);
    }
    // Paths that share a prefix can reach the same node twice.
    ops.sort_by(|a, b| path(a).cmp(path(b)));
    ops.dedup_by(|a, b| path(a) == path(b));
    (!ops.is_empty()).then_some(Patch(ops))
}

fn along(
    before: &Value,
    after: &Value,
    rest: &[&str],
    at: &mut PointerBuf,
    ops: &mut Vec<PatchOperation>,
) {
    let (Some((key, rest)), Value::Object(b), Value::Object(a)) =
        (rest.split_first(), before, after)
    else {
        // The path's end, or a non-object on the way: compared whole.
        diff(before, after, at, ops);
        return;
    };
    at.push_back(*key);
    match (b.get(*key), a.get(*key)) {
        (Some(bv), Some(av)) => along(bv, av, rest, at, ops),
        (None, Some(av)) => ops.push(PatchOperation::Add(AddOperation {
            path: at.clone(),
            value: av.clone(),
        })),
        (Some(_), None) => ops.push(PatchOperation::Remove(RemoveOperation { path: at.clone() })),
        (None, None) => {}
    }
    at.pop_back();
}

// Unlike json_patch::diff, equal subtrees are skipped with one comparison
// instead of being walked key by key, and changed lists are replaced whole:
// most of an object (managedFields, status, big maps) never changes.
fn diff(before: &Value, after: &Value, at: &mut PointerBuf, ops: &mut Vec<PatchOperation>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (key, av) in a {
                match b.get(key) {
                    Some(bv) if bv == av => {}
                    Some(bv) => {
                        at.push_back(key);
                        diff(bv, av, at, ops);
                        at.pop_back();
                    }
                    None => {
                        at.push_back(key);
                        ops.push(PatchOperation::Add(AddOperation {
                            path: at.clone(),
                            value: av.clone(),
                        }));
                        at.pop_back();
                    }
                }
            }
            for key in b.keys().filter(|k| !a.contains_key(*k)) {
                at.push_back(key);
                ops.push(PatchOperation::Remove(RemoveOperation { path: at.clone() }));
                at.pop_back();
            }
        }
        _ if before == after => {}
        _ => ops.push(PatchOperation::Replace(ReplaceOperation {
            path: at.clone(),
            value: after.clone(),
        })),
    }
}

fn path(op: &PatchOperation) -> &str {
    match op {
        PatchOperation::Add(o) => o.path.as_str(),
        PatchOperation::Remove(o) => o.path.as_str(),
        PatchOperation::Replace(o) => o.path.as_str(),
        PatchOperation::Move(o) => o.path.as_str(),
        PatchOperation::Copy(o) => o.path.as_str(),
        PatchOperation::Test(o) => o.path.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_objects_give_no_patch() {
        assert!(build(&json!({"a": 1}), &json!({"a": 1})).is_none());
    }

    #[test]
    fn patch_applies_and_is_sorted() {
        let before = json!({"metadata": {"name": "x"}, "spec": {"forProvider": {}}});
        let after = json!({"metadata": {"name": "x", "annotations": {"crossplane.io/external-name": "x"}},
                           "spec": {"forProvider": {"tags": {"a": "b"}}, "deletionPolicy": "Delete"}});
        let p = build(&before, &after).unwrap();
        let paths: Vec<&str> = p.0.iter().map(path).collect();
        assert_eq!(paths.len(), 3, "{paths:?}");
        let mut sorted = paths.clone();
        sorted.sort();
        assert_eq!(paths, sorted);
        let mut doc = before.clone();
        json_patch::patch(&mut doc, &p).unwrap();
        assert_eq!(doc, after);
    }

    #[test]
    fn lists_are_replaced_whole_and_removals_and_escapes_work() {
        let before =
            json!({"a": [1, 2, 3], "b/c": {"x~y": 1, "gone": true}, "same": {"deep": [1]}});
        let after = json!({"a": [1, 5], "b/c": {"x~y": 2}, "same": {"deep": [1]}, "new": null});
        let p = build(&before, &after).unwrap();
        let ops = serde_json::to_value(&p).unwrap();
        assert_eq!(
            ops,
            json!([
                {"op": "replace", "path": "/a", "value": [1, 5]},
                {"op": "remove", "path": "/b~1c/gone"},
                {"op": "replace", "path": "/b~1c/x~0y", "value": 2},
                {"op": "add", "path": "/new", "value": null},
            ])
        );
        let mut doc = before.clone();
        json_patch::patch(&mut doc, &p).unwrap();
        assert_eq!(doc, after);
    }

    #[test]
    fn a_partial_after_diffs_only_along_its_paths() {
        let before = json!({"metadata": {"name": "a", "managedFields": [1]},
                            "spec": {"forProvider": {"region": "r", "tags": {"a": "1"}}, "x": 1},
                            "status": {"s": 1}});
        // What mutation's working copy holds after the steps ran.
        let after = json!({"metadata": {"name": "a", "annotations": {"k": "v"}},
                           "spec": {"forProvider": {"tags": {"a": "1", "b": "2"}},
                                    "deletionPolicy": "Delete"}});
        let paths: &[&[&str]] = &[
            &["metadata", "name"],
            &["metadata", "annotations"],
            &["spec", "deletionPolicy"],
            &["spec", "forProvider", "tags"],
            &["spec", "forProvider", "tags"],
        ];
        let p = build_along(&before, &after, paths).unwrap();
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!([
                {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}},
                {"op": "add", "path": "/spec/deletionPolicy", "value": "Delete"},
                {"op": "add", "path": "/spec/forProvider/tags/b", "value": "2"},
            ])
        );
        let mut doc = before.clone();
        json_patch::patch(&mut doc, &p).unwrap();
        assert_eq!(doc["spec"]["x"], 1);
        assert_eq!(doc["status"]["s"], 1);
        assert_eq!(doc["spec"]["forProvider"]["region"], "r");
        // Nothing changed along the paths: no patch, whatever else differs.
        let same =
            json!({"metadata": {"name": "a"}, "spec": {"forProvider": {"tags": {"a": "1"}}}});
        assert!(build_along(&before, &same, paths).is_none());
    }
}
