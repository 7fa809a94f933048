//! The one place a JSON Patch is built: diff the original against the
//! mutated object, then sort so the output is deterministic.

use json_patch::{Patch, PatchOperation};
use serde_json::Value;

/// The patch that turns `before` into `after`, or `None` when they are equal.
pub fn build(before: &Value, after: &Value) -> Option<Patch> {
    if before == after {
        return None;
    }
    let mut patch = json_patch::diff(before, after);
    // Mutators only add or replace whole values at distinct paths, so
    // ordering by path (parents sort before children) keeps it valid.
    patch.0.sort_by(|a, b| path(a).cmp(path(b)));
    (!patch.0.is_empty()).then_some(patch)
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
        let mut sorted = paths.clone();
        sorted.sort();
        assert_eq!(paths, sorted);
        let mut doc = before.clone();
        json_patch::patch(&mut doc, &p).unwrap();
        assert_eq!(doc, after);
    }
}
