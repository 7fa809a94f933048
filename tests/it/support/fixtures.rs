//! The project's own files under `tests/fixtures/` (see its PROVENANCE.md),
//! and the third-party data that only `MRGUARD_FIXTURES` names.

use std::path::PathBuf;

use mrguard_policy::admission::review::Request;
use serde_json::Value;

/// `tests/fixtures/`.
pub(crate) fn dir() -> PathBuf {
    super::root().join("tests/fixtures")
}

/// A file or folder under `tests/fixtures/`, as a string for argv.
pub(crate) fn path(rel: &str) -> String {
    dir().join(rel).display().to_string()
}

/// The text of a fixture file.
pub(crate) fn read(rel: &str) -> String {
    let p = dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("failed to read {}: {e}", p.display()))
}

/// The third-party fixtures folder (`MRGUARD_FIXTURES`, see
/// tests/fixtures/PROVENANCE.md), or None after `test` has been reported as
/// skipped; with `CI=true` a missing folder fails the test.
pub(crate) fn third_party(test: &str) -> Option<PathBuf> {
    mrguard_envtest::third_party_fixtures(test)
}

/// An AdmissionReview a real kube-apiserver sent (`reviews/`).
pub(crate) fn review(name: &str) -> Value {
    let rel = format!("reviews/{name}");
    serde_json::from_str(&read(&rel)).unwrap_or_else(|e| panic!("{rel} is not JSON: {e}"))
}

/// Every recorded review (`reviews/`), decoded, in the order of the file
/// names.
pub(crate) fn recorded_reviews() -> Vec<Request> {
    let mut paths: Vec<_> = std::fs::read_dir(dir().join("reviews"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| mrguard_policy::admission::review::decode(&std::fs::read(&p).unwrap()).unwrap())
        .collect()
}

/// The documents of an example manifest (`examples/`).
pub(crate) fn example(name: &str) -> Vec<Value> {
    let rel = format!("examples/{name}");
    serde_saphyr::from_multiple::<Value>(&read(&rel))
        .unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// The first object of an example manifest.
pub(crate) fn example_object(name: &str) -> Value {
    example(name).remove(0)
}
