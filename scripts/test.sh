#!/usr/bin/env bash
# The project's test command: installs what the tests need, then runs them.
# Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# No OpenSSL or aws-lc in the binary: rustls runs on ring.
if cargo tree -e normal,build --target all 2>/dev/null | grep -E 'openssl-sys|aws-lc-(rs|sys)|native-tls' ; then
  echo "error: a forbidden TLS/crypto dependency is in the tree (see above)" >&2
  exit 1
fi

# helm for tests/chart.rs, into .tools/bin/helm (idempotent).
scripts/install-helm.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --all-targets 2>&1 | tee "$log"
passed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')

# Fuzz smoke: every libFuzzer target briefly (FUZZ_SECONDS each, default 30).
# Longer runs: see "Fuzzing" in README.md.
scripts/fuzz.sh

# One closing line for the whole run, after the fuzz output.
echo "tests: $passed passed, $failed failed"
