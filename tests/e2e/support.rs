//! The harness lives in `crates/envtest` (shared with the benchmarks that
//! go through the API server); this module gives it the binary under test.

use mrguard_envtest::cluster::ClusterOptions;
pub(crate) use mrguard_envtest::*;

/// Installs a release for `test` running this build's `mrguard`, failing
/// the test with mrguard's log.
pub(crate) async fn install(
    cluster: &'static Cluster,
    test: &str,
    mut options: Options,
) -> Release {
    // MRGUARD_E2E_BINARY runs the tests against another build (say, the
    // previous commit's, to see a new test fail there).
    options.binary.get_or_insert_with(|| {
        std::env::var_os("MRGUARD_E2E_BINARY")
            .map(Into::into)
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_mrguard").into())
    });
    mrguard_envtest::install(cluster, test, options).await
}

/// A test's own API server whose audit log records every request of
/// `release`'s service accounts (received only), so that it holds this
/// release's requests only; `None` where the test may skip.
pub(crate) async fn audited_cluster(test: &str, release: &str) -> Option<&'static Cluster> {
    require_cluster(test).await?;
    let policy = format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [ResponseStarted, ResponseComplete]\n\
         rules:\n- level: Metadata\n  userGroups: [\"system:serviceaccounts:{release}-system\"]\n- level: None\n"
    );
    let cluster = Cluster::start(&ClusterOptions {
        audit_policy: Some(policy),
        ..ClusterOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{test}: the API server did not start: {e}"));
    Some(Box::leak(Box::new(cluster)))
}

/// The events of `log`, the audit log of an [`audited_cluster`], with
/// `verb`, in the order received.
pub(crate) fn audited<'a>(
    log: &'a str,
    verb: &'a str,
) -> impl Iterator<Item = serde_json::Value> + 'a {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(move |v| v["verb"] == verb)
}

/// The request URIs of `verb` on `collection` (with any query) in `log`,
/// the audit log of an [`audited_cluster`], in the order received.
pub(crate) fn requested(log: &str, verb: &str, collection: &str) -> Vec<String> {
    let prefix = format!("{collection}?");
    audited(log, verb)
        .filter_map(|v| v["requestURI"].as_str().map(str::to_string))
        .filter(|u| u.starts_with(&prefix))
        .collect()
}
