//! Helpers shared by every module of the integration-test binary. One way
//! to do each thing:
//!
//! - [`fixtures`]: files under `tests/fixtures/` (recorded reviews,
//!   example manifests, CRDs);
//! - [`review`]: AdmissionReview JSON built from
//!   `mrguard_policy::admission::review::RequestBuilder`, and applying the patch of
//!   an answer;
//! - [`tls`]: the one TLS client (HTTP/1.1, HTTP/2 by ALPN, pinned TLS
//!   versions, raw TLS streams) and fresh test certificates;
//! - [`server`]: [`TestServer`], `mrguard serve` started in this process
//!   from typed options;
//! - [`bin`]: the built `mrguard` binary, for tests that need a process
//!   (exit codes, signals);
//! - [`helm`]: a real helm rendering the chart.

pub(crate) mod bin;
pub(crate) mod fixtures;
pub(crate) mod helm;
pub(crate) mod review;
pub(crate) mod server;
pub(crate) mod tls;

pub(crate) use review::{apply_patch, create, delete, request, update, warnings, IntoReview};
pub(crate) use server::TestServer;
pub(crate) use tls::{read_until_closed, Proto, TestPki, TlsClient};

use std::path::Path;

use serde_json::Value;

/// The repository root (the `mrguard` package).
pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Writes `text` to `dir/name`; returns the path as a string for argv.
pub(crate) fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("failed to write {}: {e}", p.display()));
    p.display().to_string()
}

/// The objects of a YAML stream, such as the output of `helm template` or
/// `mrguard export` (empty documents dropped).
pub(crate) fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap_or_else(|e| panic!("not YAML: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}
