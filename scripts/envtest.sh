#!/usr/bin/env bash
# Runs the end-to-end test (tests/envtest.rs) against a real kube-apiserver
# and etcd on loopback. `scripts/test.sh` runs the same test, which skips
# itself there unless KUBEBUILDER_ASSETS is set.
#
# Usage: scripts/envtest.sh [ASSETS_DIR]
#   ASSETS_DIR (default: $KUBEBUILDER_ASSETS) holds kube-apiserver and etcd.
#   With neither, they are fetched with setup-envtest, which needs Go and
#   network access to the envtest releases.
set -euo pipefail
cd "$(dirname "$0")/.."

assets="${1:-${KUBEBUILDER_ASSETS:-}}"
if [[ -z "$assets" ]]; then
  bin="$PWD/target/envtest-tools"
  if ! command -v setup-envtest >/dev/null 2>&1 && [[ ! -x "$bin/setup-envtest" ]]; then
    if ! command -v go >/dev/null 2>&1; then
      echo "error: pass a folder holding kube-apiserver and etcd, or install Go for setup-envtest" >&2
      exit 2
    fi
    GOBIN="$bin" go install sigs.k8s.io/controller-runtime/tools/setup-envtest@latest
  fi
  PATH="$bin:$PATH"
  assets="$(setup-envtest use -p path --bin-dir "$PWD/target/envtest")"
fi
for b in kube-apiserver etcd; do
  if [[ ! -x "$assets/$b" ]]; then
    echo "error: $assets/$b is missing or not executable" >&2
    exit 2
  fi
done
KUBEBUILDER_ASSETS="$(cd "$assets" && pwd)" exec cargo test --test envtest -- --nocapture
