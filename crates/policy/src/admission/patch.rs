//! The one place a JSON Patch is built: diff the original against the
//! mutated object, then sort so the output is deterministic.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::Value;

/// The patch that turns `before` into `after`, or `None` when they are equal.
pub fn build(before: &Value, after: &Value) -> Option<Patch> {
    build_except(before, after, &[])
}

/// As [`build`], for an `after` built without the subtrees at the JSON
/// pointers `left_out`: their absence is not a removal.
pub fn build_except(before: &Value, after: &Value, left_out: &[&str]) -> Option<Patch> {
    let mut ops = Vec::new();
    diff(before, after, &mut PointerBuf::new(), left_out, &mut ops);
    // No path is a prefix of another (a changed value is replaced whole,
    // never also descended into), so sorting keeps the patch valid.
    ops.sort_by(|a, b| path(a).cmp(path(b)));
    (!ops.is_empty()).then_some(Patch(ops))
}

// Unlike json_patch::diff, equal subtrees are skipped with one comparison
// instead of being walked key by key, and changed lists are replaced whole:
// most of an object (managedFields, status, big maps) never changes.
fn diff(
    before: &Value,
    after: &Value,
    at: &mut PointerBuf,
    left_out: &[&str],
    ops: &mut Vec<PatchOperation>,
) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (key, av) in a {
                match b.get(key) {
                    Some(bv) if bv == av => {}
                    Some(bv) => {
                        at.push_back(key);
                        diff(bv, av, at, left_out, ops);
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
                if !left_out.contains(&at.as_str()) {
                    ops.push(PatchOperation::Remove(RemoveOperation { path: at.clone() }));
                }
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
    fn left_out_subtrees_are_not_removed() {
        let before = json!({"metadata": {"name": "a", "managedFields": [1]}, "status": {"x": 1}, "spec": {}});
        let after = json!({"metadata": {"name": "a"}, "spec": {"p": 1}});
        let p = build_except(&before, &after, &["/status", "/metadata/managedFields"]).unwrap();
        let ops = serde_json::to_value(&p).unwrap();
        assert_eq!(ops, json!([{"op": "add", "path": "/spec/p", "value": 1}]));
        assert!(build_except(
            &before,
            &json!({"metadata": {"name": "a"}, "spec": {}}),
            &["/status", "/metadata/managedFields"]
        )
        .is_none());
    }
}
