#!/usr/bin/env bash
# The project's test command: installs what the tests need, then runs them.
# Usage: scripts/test.sh                  # everything, then 30 s per fuzz target
#        FUZZ_SECONDS=0 scripts/test.sh   # skip the fuzz smoke
set -euo pipefail
cd "$(dirname "$0")/.."

# helm for tests/it/chart.rs, into .tools/bin/helm (idempotent).
scripts/install-helm.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-targets 2>&1 | tee "$log"
passed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')

# Fuzz smoke: every libFuzzer target briefly (FUZZ_SECONDS each, default 30;
# 0 skips it). Longer runs: see "Fuzzing" in docs/performance.md.
if [ "${FUZZ_SECONDS:-30}" = 0 ]; then
  echo "fuzz smoke skipped (FUZZ_SECONDS=0)"
else
  scripts/fuzz.sh
fi

# One closing line for the whole run, after the fuzz output.
echo "tests: $passed passed, $failed failed"
