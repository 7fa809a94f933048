#!/usr/bin/env bash
# `check --crd` against a real API server over a whole provider family:
# every example manifest of a provider-upjet-aws checkout (or of the listed
# service groups), each judged by check's CRD code and by a server-side
# dry-run create, with the CRDs of every group the manifests use installed.
# Prints and writes the agreement table docs/check.md quotes, with every
# document that does not simply agree. The vendored subset of the same
# comparison runs in scripts/test.sh (tests/e2e/differential.rs).
#
# Usage: scripts/differential.sh CHECKOUT [GROUPS] [REPORT]
#   CHECKOUT  a provider-upjet-aws tree (package/crds/ and examples/)
#   GROUPS    comma-separated examples/ folders, e.g. ec2,iam,s3 (default: all)
#   REPORT    where to write the table (default: target/differential.md)
# Needs KUBEBUILDER_ASSETS (kube-apiserver and etcd): export
# KUBEBUILDER_ASSETS="$(scripts/envtest.sh | tail -n 1)".
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 1 || ! -d "$1/package/crds" || ! -d "$1/examples" ]]; then
  echo "usage: $0 CHECKOUT [GROUPS] [REPORT] (CHECKOUT holds package/crds/ and examples/)" >&2
  exit 2
fi
MRGUARD_DIFFERENTIAL_DIR="$(cd "$1" && pwd)"
export MRGUARD_DIFFERENTIAL_DIR
if [[ -n "${2:-}" ]]; then
  export MRGUARD_DIFFERENTIAL_GROUPS="$2"
fi
report="${3:-target/differential.md}"
mkdir -p "$(dirname "$report")"
MRGUARD_DIFFERENTIAL_REPORT="$(cd "$(dirname "$report")" && pwd)/$(basename "$report")"
export MRGUARD_DIFFERENTIAL_REPORT
cargo test -p mrguard --test e2e check_crd_agrees_with_the_api_server_on_upstream_manifests -- --nocapture
echo "report: $MRGUARD_DIFFERENTIAL_REPORT"
