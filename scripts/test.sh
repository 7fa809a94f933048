#!/usr/bin/env bash
# The project's test command: installs what the tests need, then runs them.
# Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# helm for tests/it/chart.rs, into .tools/bin/helm (idempotent).
scripts/install-helm.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-targets 2>&1 | tee "$log"
passed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')

# Fuzz smoke: every libFuzzer target briefly (FUZZ_SECONDS each, default 30).
# Longer runs: see "Fuzzing" in README.md.
scripts/fuzz.sh

# One closing line for the whole run, after the fuzz output.
echo "tests: $passed passed, $failed failed"
