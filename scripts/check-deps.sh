#!/usr/bin/env bash
# Dependency gates (run by .ci/run):
# - cargo-deny: banned crates (OpenSSL, aws-lc, native-tls), licences and
#   sources, from deny.toml;
# - the policy crate stays pure: its normal dependency tree has no async
#   runtime, no HTTP stack and no Kubernetes client.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export PATH="$root/.tools/bin:$PATH"

scripts/install-cargo-deny.sh
cargo deny --all-features check bans licenses sources

impure=$(cargo tree -p mrguard-policy -e normal --prefix none --format '{p}' \
  | awk '{print $1}' | sort -u \
  | grep -xE 'tokio|hyper|hyper-util|axum|tower|kube|kube-client|kube-runtime|reqwest' || true)
if [ -n "$impure" ]; then
  echo "error: mrguard-policy must stay pure, but its dependency tree has:" >&2
  echo "$impure" >&2
  cargo tree -p mrguard-policy -e normal -i "$(echo "$impure" | head -1)" >&2 || true
  exit 1
fi
echo "check-deps: mrguard-policy has no tokio, hyper, axum or kube client"
