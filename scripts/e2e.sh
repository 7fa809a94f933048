#!/usr/bin/env bash
# Runs the end-to-end suite (tests/e2e) against a real kube-apiserver and
# etcd on loopback: one API server for the whole run, mrguard run as the
# real binary with the Helm chart's arguments and RBAC.
#
# Usage: scripts/e2e.sh [-- TEST_FILTER...]
#   KUBE_VERSION=v1.30 scripts/e2e.sh      # on the oldest supported minor
#   KUBEBUILDER_ASSETS=DIR scripts/e2e.sh  # on binaries from elsewhere
#
# Without KUBEBUILDER_ASSETS the API server is built from its Go modules at
# KUBE_VERSION (scripts/envtest.sh; cached, so only the first run builds).
# Arguments after -- go to the test binary (e.g. a test name). CI=true is
# set: a test that cannot reach the API server fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "${1:-}" == "--" ]] && shift

if [[ -z "${KUBEBUILDER_ASSETS:-}" ]]; then
  KUBEBUILDER_ASSETS="$(scripts/envtest.sh | tail -n 1)"
fi
export KUBEBUILDER_ASSETS
if [[ -z "${MRGUARD_CROSSPLANE:-}" ]]; then
  MRGUARD_CROSSPLANE="$(scripts/crossplane.sh | tail -n 1)"
fi
export MRGUARD_CROSSPLANE
echo "e2e: kube-apiserver $("$KUBEBUILDER_ASSETS/kube-apiserver" --version) from $KUBEBUILDER_ASSETS"
scripts/install-tools.sh >/dev/null
CI=true exec cargo test -p mrguard --test e2e -- "$@"
