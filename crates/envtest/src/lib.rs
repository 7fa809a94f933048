//! The end-to-end harness: a real API server on loopback and mrguard
//! installed from its chart, shared by the end-to-end tests (`tests/e2e`)
//! and the benchmarks that go through the API server (`benches/`), so that
//! each thing is built one way:
//!
//! - [`cluster::Cluster::shared`]: ONE etcd + kube-apiserver per binary run
//!   (from `KUBEBUILDER_ASSETS`), started lazily, stopped when the binary
//!   exits ([`cluster::Cluster::start`] starts one with options, e.g. the
//!   API server's audit log, for a benchmark); an admin client
//!   ([`cluster::Cluster::admin`]), the fixture CRDs installed, [`cluster::create_crd`], ServiceAccount tokens
//!   ([`cluster::Cluster::service_account_token`]);
//! - [`release::Release::install`]: the chart rendered with helm, its RBAC
//!   and webhook configurations applied, the real `mrguard` binary
//!   ([`release::Options::binary`]: the test's or bench's
//!   `CARGO_BIN_EXE_mrguard`) run with the chart's arguments under the
//!   chart's ServiceAccount;
//! - [`chart::Rendered`]: `helm template` and the Deployment's command;
//! - [`metrics::Metrics`]: a parsed `/metrics` scrape;
//! - [`process::Guarded`]: processes that never outlive the binary;
//! - [`procfs`]: CPU, memory and connections of a process, for benchmarks;
//! - [`scale`]: generated MR kinds and MRs at platform scale;
//! - [`wait_for`]: every wait is bounded;
//! - [`require_cluster`]: the skip/fail policy when the binaries are absent.

pub mod api;
pub mod assets;
pub mod certs;
pub mod chart;
pub mod cluster;
pub mod crossplane;
pub use mrguard_testdata as fixtures;
pub mod metrics;
pub mod process;
pub mod procfs;
pub mod release;
pub mod scale;
pub mod version;

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::api::ApiResource;
use serde_json::{json, Value};

pub use cluster::Cluster;
use fixtures::ci;
pub use fixtures::{third_party_fixtures, FIXTURES_ENV, FIXTURES_SKIP_MARKER};
pub use metrics::Metrics;
pub use release::{Options, Release};
pub use version::{needs, KubeVersion};

/// The longest any single wait may take.
pub const WAIT: Duration = Duration::from_secs(60);

/// The repository (this crate lives in `crates/envtest`).
pub fn repo_root() -> &'static Path {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        crate_dir
            .ancestors()
            .nth(2)
            .unwrap_or(crate_dir)
            .to_path_buf()
    })
}

/// The project's own fixtures (`tests/fixtures`): files written or
/// recorded here.
pub fn fixtures_dir() -> PathBuf {
    repo_root().join("tests/fixtures")
}

/// Polls `f` every 100 ms until it returns Some, for at most `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The line scripts/test.sh counts; written to the real stderr, past the
/// test harness's output capture, so it shows for passing tests too.
pub const SKIP_MARKER: &str = "e2e skipped:";

/// Writes the skip line for `test` past the harness's capture, as
/// scripts/test.sh counts it.
pub fn skip(test: &str, why: &str) {
    let line = format!("{SKIP_MARKER} {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Whether `test` can run on the API server in `KUBEBUILDER_ASSETS`: false
/// (with the skip line `needs kube-apiserver >= X (this is Y)`) where that
/// server is older than `min`. A skip for the version is never a failure,
/// not even with `CI=true`: the server cannot show the feature.
pub fn version_at_least(test: &str, min: (u32, u32)) -> bool {
    let Ok(v) = version::of_assets() else {
        // No API server: require_cluster says so.
        return true;
    };
    if v.at_least(min) {
        return true;
    }
    skip(
        test,
        &format!("needs kube-apiserver >= {}.{} (this is {v})", min.0, min.1),
    );
    false
}

/// [`require_cluster`] for a test that needs kube-apiserver `min` or newer:
/// None, reported as skipped with the version it needs, on an older one.
pub async fn require_cluster_at(test: &str, min: (u32, u32)) -> Option<&'static Cluster> {
    if !version_at_least(test, min) {
        return None;
    }
    require_cluster(test).await
}

/// Whether `KUBEBUILDER_ASSETS` holds an API server: false (the test
/// prints why and how to get the binaries, and passes) where it does not;
/// under `CI=true` a missing API server fails the test.
pub fn require_assets(test: &str) -> bool {
    let Err(why) = assets::assets() else {
        return true;
    };
    let how = "run scripts/e2e.sh (it builds them from their Go modules), or set \
               KUBEBUILDER_ASSETS=\"$(scripts/envtest.sh | tail -n 1)\" (docs/controller.md, \
               \"End-to-end tests\")";
    if ci() {
        panic!("{test} needs a real API server and CI=true: {why}; {how}");
    }
    skip(test, &format!("{why}; {how}"));
    false
}

/// The real Crossplane ([`crossplane::Crossplane`]) on the shared API
/// server, or None when this test is skipped: without the API server, or
/// without `MRGUARD_CROSSPLANE` (the test says why; with `CI=true` it
/// fails).
pub async fn require_crossplane(test: &str) -> Option<&'static crossplane::Crossplane> {
    require_cluster(test).await?;
    if let Err(why) = crossplane::running::assets() {
        let how = "run scripts/e2e.sh, or set MRGUARD_CROSSPLANE=\"$(scripts/crossplane.sh | tail -n 1)\"";
        if ci() {
            panic!("{test} needs a real Crossplane and CI=true: {why}; {how}");
        }
        skip(test, &format!("{why}; {how}"));
        return None;
    }
    match crossplane::Crossplane::shared().await {
        Ok(xp) => Some(xp),
        Err(e) => panic!("{test}: Crossplane did not start: {e}"),
    }
}

/// The shared API server, or None when this test is skipped
/// ([`require_assets`]).
pub async fn require_cluster(test: &str) -> Option<&'static Cluster> {
    if !require_assets(test) {
        return None;
    }
    match Cluster::shared().await {
        Ok(c) => Some(c),
        Err(e) => panic!("{test}: the API server did not start: {e}"),
    }
}

/// A dedicated API server for a test that stops, restarts or loads it so
/// hard that it would disturb the tests sharing one; None when skipped, as
/// with [`require_cluster`]. It lives until the test process ends.
pub async fn require_own_cluster(test: &str) -> Option<&'static Cluster> {
    require_cluster(test).await?;
    match Cluster::start(&cluster::ClusterOptions::default()).await {
        Ok(c) => Some(Box::leak(Box::new(c))),
        Err(e) => panic!("{test}: the API server did not start: {e}"),
    }
}

/// Installs a release for `test`, failing the test with mrguard's log.
pub async fn install(cluster: &'static Cluster, test: &str, options: Options) -> Release {
    match Release::install(cluster, test, options).await {
        Ok(r) => r,
        Err(e) => panic!("{test}: failed to install mrguard: {e}"),
    }
}

/// An ApiResource by parts.
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub fn bucket_resource() -> ApiResource {
    resource("s3.aws.upbound.io", "v1beta1", "Bucket", "buckets")
}

pub fn vpc_resource() -> ApiResource {
    resource("ec2.aws.upbound.io", "v1beta1", "VPC", "vpcs")
}

pub fn namespaced_vpc_resource() -> ApiResource {
    resource("ec2.aws.m.upbound.io", "v1beta1", "VPC", "vpcs")
}

pub fn contact_resource() -> ApiResource {
    resource(
        "account.aws.upbound.io",
        "v1beta1",
        "AlternateContact",
        "alternatecontacts",
    )
}

/// A cluster-scoped Bucket manifest.
pub fn bucket(name: &str, for_provider: Value) -> Value {
    json!({
        "apiVersion": "s3.aws.upbound.io/v1beta1",
        "kind": "Bucket",
        "metadata": {"name": name},
        "spec": {"forProvider": for_provider},
    })
}

/// A cluster-scoped VPC manifest (a provider-assigned identifier).
pub fn vpc(name: &str, spec: Value) -> Value {
    let mut v = json!({
        "apiVersion": "ec2.aws.upbound.io/v1beta1",
        "kind": "VPC",
        "metadata": {"name": name},
        "spec": {"forProvider": {"region": "us-east-1", "cidrBlock": "10.0.0.0/16"}},
    });
    if let (Some(s), Some(extra)) = (v["spec"].as_object_mut(), spec.as_object()) {
        for (k, val) in extra {
            s.insert(k.clone(), val.clone());
        }
    }
    v
}

/// A namespaced (Crossplane v2) VPC manifest; the namespace is set by
/// [`Release::namespaced_object`].
pub fn namespaced_vpc(name: &str, spec: Value) -> Value {
    let mut v = vpc(name, spec);
    v["apiVersion"] = json!("ec2.aws.m.upbound.io/v1beta1");
    v
}

/// A loose MR CRD (no enums, unknown fields kept), as older or hand-made
/// providers ship: it lets values reach the webhook that the upjet CRDs'
/// schemas reject first. In a group the chart's RBAC covers, so it is not
/// a forbidden kind. Installed with the fixture CRDs.
pub const LOOSE_GROUP: &str = "azure.upbound.io";
pub const LOOSE_VERSION: &str = "v1alpha1";
pub const LOOSE_KIND: &str = "E2eLooseResource";
pub const LOOSE_PLURAL: &str = "e2elooseresources";

/// A minimal MR CRD in the `managed` category.
pub fn managed_crd(group: &str, version: &str, kind: &str, plural: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
                "categories": ["crossplane", "managed"],
            },
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                }},
                "subresources": {"status": {}},
            }],
        },
    })
}
