//! AdmissionReviews for tests, built by the same `RequestBuilder` that
//! `mrguard check` and the audit use, and the patches of the answers
//! applied to the objects.

use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use mrguard_policy::admission::model::Operation;
use mrguard_policy::admission::review::{Request, RequestBuilder};
use serde_json::{json, Value};

/// A request for `op` by an authenticated user "alice", with a uid of its
/// own so that the echo check means something.
pub(crate) fn request(op: Operation) -> RequestBuilder {
    static UID: AtomicU64 = AtomicU64::new(1);
    RequestBuilder::new(op)
        .username("alice")
        .groups(vec!["system:authenticated".to_string()])
        .uid(format!("test-{}", UID.fetch_add(1, Ordering::Relaxed)))
}

/// A CREATE of `object`.
pub(crate) fn create(object: &Value) -> RequestBuilder {
    request(Operation::Create).object(object.clone())
}

/// An UPDATE from `old` to `object`.
pub(crate) fn update(old: &Value, object: &Value) -> RequestBuilder {
    request(Operation::Update)
        .old_object(old.clone())
        .object(object.clone())
}

/// A DELETE of `old` (the API server sends only the old object).
pub(crate) fn delete(old: &Value) -> RequestBuilder {
    request(Operation::Delete).old_object(old.clone())
}

/// The AdmissionReview v1 envelope around a built request.
pub(crate) trait IntoReview {
    /// `{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": …}`.
    fn review(self) -> Value;
}

impl IntoReview for RequestBuilder {
    fn review(self) -> Value {
        let request = serde_json::to_value(self.build()).expect("a built request serializes");
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }
}

/// Applies the base64 JSON Patch of an AdmissionReview response to `obj`;
/// a response without a patch must not carry a patchType either.
pub(crate) fn apply_patch(obj: &Value, response: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(p) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(p)
            .expect("patch is base64");
        let patch: json_patch::Patch = serde_json::from_slice(&raw).expect("patch is a JSON Patch");
        json_patch::patch(&mut out, &patch).expect("patch applies");
    } else {
        assert!(
            response.get("patchType").is_none(),
            "patchType without patch: {response}"
        );
    }
    out
}

/// The warnings of an AdmissionReview response.
pub(crate) fn warnings(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .map(|w| w.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// Hostile variants of every `step`th request of `base` (the one at index
/// `i`): in its object and old object, the value at one path replaced by a
/// value of each JSON type in turn; a step on the way that is not an object
/// is left as it is, the path ending there. The path is `pick(i)` (cycling)
/// of the four every MR has (`spec`, `spec.forProvider`, `metadata`,
/// `metadata.annotations`) followed by `more`.
pub(crate) fn hostile(
    base: &[Request],
    step: usize,
    more: &[&[&str]],
    pick: impl Fn(usize) -> usize,
) -> Vec<Request> {
    let mut paths: Vec<&[&str]> = vec![
        &["spec"],
        &["spec", "forProvider"],
        &["metadata"],
        &["metadata", "annotations"],
    ];
    paths.extend_from_slice(more);
    let wrong = [
        json!(null),
        json!(1),
        json!("x"),
        json!([]),
        json!({}),
        json!(true),
    ];
    let mut out = Vec::new();
    for (i, req) in base.iter().enumerate().step_by(step) {
        let mut r = req.clone();
        let w = &wrong[i % wrong.len()];
        let p = paths[pick(i) % paths.len()];
        for o in [r.object.as_mut(), r.old_object.as_mut()]
            .into_iter()
            .flatten()
        {
            let mut at = &mut o.value;
            for (k, key) in p.iter().enumerate() {
                if !at.is_object() {
                    break;
                }
                if k + 1 == p.len() {
                    at[*key] = w.clone();
                } else {
                    at = at
                        .as_object_mut()
                        .unwrap()
                        .entry(key.to_string())
                        .or_insert(json!({}));
                }
            }
        }
        out.push(r);
    }
    out
}
