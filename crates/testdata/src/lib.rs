//! Where the third-party test data is: std only, so that the policy
//! crate's unit tests and the end-to-end harness find it the same way.

use std::io::Write;
use std::path::PathBuf;

/// Names the folder of third-party test data (real provider CRDs and
/// examples, Crossplane's and the policy-report CRDs, the differential
/// set), laid out as the shared fixtures folder beside the repository
/// (tests/fixtures/PROVENANCE.md). The repository holds no copy of
/// them; `.ci/run` and `scripts/test.sh` set it.
pub const FIXTURES_ENV: &str = "MRGUARD_FIXTURES";

/// The line scripts/test.sh counts for a test skipped for want of
/// [`FIXTURES_ENV`].
pub const FIXTURES_SKIP_MARKER: &str = "fixtures skipped:";

/// `CI=true` (or `1`): what would be skipped elsewhere must run here.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The third-party fixtures folder ([`FIXTURES_ENV`]), or None where it is
/// not set: `test` is then reported as skipped with the reason (and
/// returns), or fails with `CI=true`, where the data must be there.
pub fn third_party_fixtures(test: &str) -> Option<PathBuf> {
    match std::env::var_os(FIXTURES_ENV).filter(|d| !d.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            assert!(
                dir.is_dir(),
                "{test}: {FIXTURES_ENV}={} is not a folder",
                dir.display()
            );
            Some(dir)
        }
        None => {
            let why = format!(
                "{FIXTURES_ENV} is not set: this test reads third-party data (real provider and \
                 Crossplane CRDs) that the repository does not hold; scripts/test.sh sets it when \
                 the shared fixtures folder beside the repository exists"
            );
            if ci() {
                panic!("{test} needs third-party fixtures and CI=true: {why}");
            }
            // Past the test harness's output capture, so it shows for
            // passing tests too.
            let line = format!("{FIXTURES_SKIP_MARKER} {test}: {why}\n");
            let _ = std::io::stderr().write_all(line.as_bytes());
            None
        }
    }
}
