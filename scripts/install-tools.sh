#!/usr/bin/env bash
# Puts the Go programs the tests call by path into .tools/bin (git-ignored):
# helm (tests/it/chart/, the end-to-end suite) and promtool (the alert
# unit tests in tests/alerts/). Each is built from its Go module at the
# version pinned in tools/NAME/go.mod (scripts/go-tool.sh, cached by
# version), so this is idempotent and quick once built.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$root/.tools/bin"
for name in helm promtool; do
  bin="$("$root/scripts/go-tool.sh" "$name")"
  ln -sfn "$bin" "$root/.tools/bin/$name"
  echo "$name: $bin"
done
