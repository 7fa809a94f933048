#!/usr/bin/env bash
# Builds the real Crossplane the end-to-end suite runs beside mrguard, from
# Go modules, and prints the folder that holds it (MRGUARD_CROSSPLANE):
#
#   export MRGUARD_CROSSPLANE="$(scripts/crossplane.sh | tail -n 1)"
#
#   provider-kubernetes        the provider (tools/provider-kubernetes)
#   crossplane                 Crossplane core (tools/crossplane)
#   crds/provider/*.yaml       the provider's CRDs, of the same module version
#   crds/core/*.yaml           Crossplane's CRDs, likewise
#
# The CRDs come from the Go module cache (the modules' package/crds and
# cluster/crds) and are copied into the cache folder, never into the
# repository. Cached by the two versions: a cached run copies nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib/go-build.sh
source "$root/scripts/lib/go-build.sh"
need_go

provider="$("$root/scripts/go-tool.sh" provider-kubernetes)"
core="$("$root/scripts/go-tool.sh" crossplane)"
module_dir() { (cd "$root/tools/$1" && go list -m -f '{{.Dir}}' "$2"); }
pdir="$(module_dir provider-kubernetes github.com/crossplane-contrib/provider-kubernetes)"
cdir="$(module_dir crossplane github.com/crossplane/crossplane/v2)"
pv="$(basename "$(dirname "$provider")")"
cv="$(basename "$(dirname "$core")")"

out="${MRGUARD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mrguard-tools}/crossplane-e2e/provider-kubernetes-$pv-crossplane-$cv"
if [[ ! -f "$out/.complete" ]] || ! cmp -s "$provider" "$out/provider-kubernetes" || ! cmp -s "$core" "$out/crossplane"; then
  tmp="$out.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp/crds/provider" "$tmp/crds/core"
  cp "$provider" "$tmp/provider-kubernetes"
  cp "$core" "$tmp/crossplane"
  cp "$pdir"/package/crds/*.yaml "$tmp/crds/provider/"
  cp "$cdir"/cluster/crds/*.yaml "$tmp/crds/core/"
  chmod -R u+w "$tmp"
  touch "$tmp/.complete"
  rm -rf "$out"
  mv "$tmp" "$out"
fi
echo "$out"
