#!/usr/bin/env bash
# The project's test command: installs what the tests need, then runs them.
# Usage: scripts/test.sh                  # everything, then 30 s per fuzz target
#        FUZZ_SECONDS=0 scripts/test.sh   # skip the fuzz smoke
#
# The end-to-end tests (tests/e2e) need a real kube-apiserver and etcd from
# KUBEBUILDER_ASSETS (scripts/envtest.sh, docs/controller.md). Without them
# each prints "e2e skipped: ..." and passes; they are counted as skipped
# here, never as passed. With CI=true they fail instead.
#
# Tests that read third-party data (real provider and Crossplane CRDs, which
# the repository does not hold) find it in MRGUARD_FIXTURES, set here to
# ../shared/fixtures when that folder exists. Without it each prints
# "fixtures skipped: ..." and is counted as skipped the same way.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${MRGUARD_FIXTURES:-}" && -d ../shared/fixtures ]]; then
  MRGUARD_FIXTURES=$(cd ../shared/fixtures && pwd)
  export MRGUARD_FIXTURES
fi

# helm for tests/it/chart.rs and tests/e2e, into .tools/bin/helm, and
# promtool for the alert unit tests (tests/alerts/), into .tools/bin/promtool
# (both idempotent).
scripts/install-helm.sh
scripts/install-promtool.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --all-targets 2>&1 | tee "$log" || status=$?
passed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')
# Skipped tests passed as far as cargo knows; their marker (written
# straight to stderr, so it may share a line with the harness's output)
# says otherwise: "e2e skipped: <test>: <why>" (no API server, or one older
# than the test needs) or "fixtures skipped: <test>: <why>" (no third-party
# data). One per test name.
skip_lines=$( (grep -oE '(e2e|fixtures) skipped: [A-Za-z0-9_]+: .*' "$log" || true) \
  | sed -E 's/^(e2e|fixtures) skipped: //' | sort -u -t: -k1,1)
skipped=$(printf '%s' "$skip_lines" | grep -c . || true)
passed=$((passed - skipped))
if [[ "$skipped" -gt 0 ]]; then
  echo "skipped tests ($skipped), each with the reason:"
  printf '%s\n' "$skip_lines" | sed 's/^/  /'
  versions=$(printf '%s\n' "$skip_lines" | grep -c 'needs kube-apiserver >=' || true)
  if [[ "$versions" -gt 0 ]]; then
    echo "  ($versions of them need a newer kube-apiserver than KUBEBUILDER_ASSETS holds)"
  fi
fi

# Fuzz smoke: every libFuzzer target briefly (FUZZ_SECONDS each, default 30;
# 0 skips it). Longer runs: see "Fuzzing" in docs/performance.md.
if [ "${FUZZ_SECONDS:-30}" = 0 ]; then
  echo "fuzz smoke skipped (FUZZ_SECONDS=0)"
else
  scripts/fuzz.sh
fi

# One closing line for the whole run, after the fuzz output.
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit "$status"
