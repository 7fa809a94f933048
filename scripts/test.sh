#!/usr/bin/env bash
# The project's test command: installs what the tests need, then runs them.
# Usage: scripts/test.sh                  # everything, then 30 s per fuzz target
#        FUZZ_SECONDS=0 scripts/test.sh   # skip the fuzz smoke
#
# The end-to-end tests (tests/e2e) need a real kube-apiserver and etcd from
# KUBEBUILDER_ASSETS. When it is unset they are built here from their Go
# modules (scripts/envtest.sh: the newest pinned release, KUBE_VERSION=
# for another; cached by version, so only the first run builds them).
# Without Go nothing is built: each e2e test prints "e2e skipped: ..." and
# is counted as skipped here, never as passed; with CI=true they fail.
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

# helm for tests/it/chart/ and tests/e2e, and promtool for the alert unit
# tests (tests/alerts/), built from their Go modules into .tools/bin
# (idempotent).
scripts/install-tools.sh

if [[ -z "${KUBEBUILDER_ASSETS:-}" ]]; then
  if command -v go >/dev/null 2>&1; then
    KUBEBUILDER_ASSETS="$(scripts/envtest.sh | tail -n 1)"
    export KUBEBUILDER_ASSETS
  else
    echo "no Go: the end-to-end tests have no API server and are reported as skipped"
  fi
fi
if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  echo "end-to-end tests on $("$KUBEBUILDER_ASSETS/kube-apiserver" --version) ($KUBEBUILDER_ASSETS)"
fi
# The real Crossplane of the end-to-end tests (provider-kubernetes and
# Crossplane core, built from their Go modules; tests/e2e/with_crossplane.rs).
if [[ -z "${MRGUARD_CROSSPLANE:-}" ]] && command -v go >/dev/null 2>&1; then
  MRGUARD_CROSSPLANE="$(scripts/crossplane.sh | tail -n 1)"
  export MRGUARD_CROSSPLANE
fi

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
# Those skipped because the API server is older than they need.
versions=$(printf '%s\n' "$skip_lines" | grep -c 'needs kube-apiserver >=' || true)
if [[ "$skipped" -gt 0 ]]; then
  echo "skipped tests ($skipped), each with the reason:"
  printf '%s\n' "$skip_lines" | sed 's/^/  /'
fi

# Fuzz smoke: every libFuzzer target briefly (FUZZ_SECONDS each, default 30;
# 0 skips it). Longer runs: see "Fuzzing" in docs/performance.md.
if [ "${FUZZ_SECONDS:-30}" = 0 ]; then
  echo "fuzz smoke skipped (FUZZ_SECONDS=0)"
else
  scripts/fuzz.sh
fi

# One closing line for the whole run, after the fuzz output.
echo "tests: $passed passed, $failed failed, $skipped skipped ($versions of them for the API server's version)"
exit "$status"
