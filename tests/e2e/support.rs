//! The harness lives in `crates/envtest` (shared with the benchmarks that
//! go through the API server); this module gives it the binary under test.

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
