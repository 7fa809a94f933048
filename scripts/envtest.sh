#!/usr/bin/env bash
# Runs the end-to-end suite (tests/e2e) against a real kube-apiserver and
# etcd on loopback: one API server for the whole run, mrguard run as the
# real binary with the Helm chart's arguments and RBAC.
#
# Usage: scripts/envtest.sh [ASSETS_DIR] [-- TEST_FILTER...]
#   ASSETS_DIR (default: $KUBEBUILDER_ASSETS) holds kube-apiserver and etcd
#   (the controller-runtime envtest layout). With neither, they are fetched
#   with setup-envtest, which needs Go and network access to its releases.
#   Arguments after -- go to the test binary (e.g. a test name).
set -euo pipefail
cd "$(dirname "$0")/.."

assets="${KUBEBUILDER_ASSETS:-}"
if [[ $# -gt 0 && "$1" != "--" ]]; then
  assets="$1"
  shift
fi
[[ "${1:-}" == "--" ]] && shift

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
scripts/install-helm.sh
# CI=true: a test that cannot reach the API server fails instead of skipping.
KUBEBUILDER_ASSETS="$(cd "$assets" && pwd)" CI=true exec cargo test -p mrguard --test e2e -- "$@"
