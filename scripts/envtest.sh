#!/usr/bin/env bash
# Builds the end-to-end suite's API server from Go modules: kube-apiserver
# from k8s.io/kubernetes and etcd from go.etcd.io/etcd/server/v3, and prints
# the folder holding both (the KUBEBUILDER_ASSETS layout) on its last line:
#
#   export KUBEBUILDER_ASSETS="$(scripts/envtest.sh | tail -n 1)"
#   KUBE_VERSION=v1.30 scripts/envtest.sh       # the oldest supported minor
#   KUBE_VERSION=v1.35.4 scripts/envtest.sh     # any release the proxy serves
#
# KUBE_VERSION (default: the newest pinned) is a release (vX.Y.Z) or a minor
# (vX.Y). Pinned releases are Go modules of ours, tools/kube-apiserver/X.Y/
# (go.mod + go.sum): they require k8s.io/kubernetes at the release and
# point its staging modules (k8s.io/api, k8s.io/apiserver, ...), which its
# own go.mod replaces with folders of its tree, at the matching k8s.io/*
# v0.Y.Z releases, the usual way to depend on k8s.io/kubernetes. A release
# that is not pinned gets such a module generated in the cache from that
# release's own go.mod (its sums checked against sum.golang.org as usual).
# `scripts/envtest.sh --pin vX.Y.Z` writes it into tools/ instead.
#
# Build: `go build -trimpath` with CGO_ENABLED=0, `-ldflags -s -w` and the
# version variables Kubernetes' own build sets (hack/lib/version.sh:
# gitVersion, gitMajor, gitMinor of k8s.io/component-base/version and
# k8s.io/client-go/pkg/version), so `--version` and /version say the
# release. etcd is tools/etcd (scripts/go-tool.sh). Only the go command and
# the Go module proxy are used.
#
# Cache: ${MRGUARD_ENVTEST_CACHE:-~/.cache/mrguard-envtest}/VERSION/ holds
# kube-apiserver and etcd, with stamps of what built them; a cached run
# checks the stamps and builds nothing. First build on 2 cores: about 4
# minutes for kube-apiserver and 1 for etcd, plus the module downloads
# (docs/controller.md#the-api-server).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib/go-build.sh
source "$root/scripts/lib/go-build.sh"
pinned="$root/tools/kube-apiserver"

# The module of a release: k8s.io/kubernetes at VERSION with its staging
# modules at v0.MINOR.PATCH, written into DIR.
write_module() {
  local version="$1" dir="$2" upstream staging
  need_go
  upstream="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "$upstream" ]] || { echo "envtest: the Go module proxy has no k8s.io/kubernetes@$version" >&2; exit 2; }
  staging="v0.${version#v1.}"
  mkdir -p "$dir"
  {
    printf 'module mrguard/tools/kube-apiserver\n\ngo 1.26\n\n'
    printf '// kube-apiserver %s: k8s.io/kubernetes replaces its staging modules with\n' "$version"
    printf '// folders of its own tree; a module depending on it points them at the\n'
    printf '// releases of the same version. Written by scripts/envtest.sh --pin.\n'
    printf 'replace (\n'
    awk '$2 == "=>" && $3 ~ /^\.\/staging\// { printf "\t%s => %s '"$staging"'\n", $1, $1 }' "$upstream"
    printf ')\n'
  } >"$dir/go.mod"
  rm -f "$dir/go.sum"
  (cd "$dir" && go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$version" >&2)
}

# The module folder for a KUBE_VERSION, and the release it pins.
resolve() {
  local want="$1" dir v
  if [[ -z "$want" ]]; then
    dir="$(ls -d "$pinned"/*/ | sort -V | tail -n 1)"
  else
    want="v${want#v}"
    dir="$pinned/$(sed -E 's/^v([0-9]+\.[0-9]+).*/\1/' <<<"$want")"
  fi
  if [[ -f "$dir/go.mod" ]]; then
    v="$(go_mod_version_of "$dir/go.mod" k8s.io/kubernetes/cmd/kube-apiserver)"
    if [[ -z "$want" || "$want" == "$v" || ! "$want" =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]]; then
      echo "${dir%/} $v"
      return
    fi
  fi
  [[ "$want" =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] || {
    echo "envtest: no pinned kube-apiserver for $want (tools/kube-apiserver has $(ls "$pinned" | tr '\n' ' ')); give a release, vX.Y.Z" >&2
    exit 2
  }
  echo "$cache/$want/module $want"
}

cache="${MRGUARD_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mrguard-envtest}"

if [[ "${1:-}" == "--pin" ]]; then
  version="v${2#v}"
  [[ "$version" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || { echo "usage: scripts/envtest.sh --pin v1.Y.Z" >&2; exit 2; }
  write_module "$version" "$pinned/1.${BASH_REMATCH[1]}"
  echo "pinned kube-apiserver $version in tools/kube-apiserver/1.${BASH_REMATCH[1]}" >&2
  exit 0
fi

read -r mod version < <(resolve "${KUBE_VERSION:-}")
if [[ ! -f "$mod/go.mod" ]]; then
  echo "envtest: kube-apiserver $version is not pinned in tools/kube-apiserver; generating its module in $mod" >&2
  write_module "$version" "$mod"
fi
[[ "$version" =~ ^v([0-9]+)\.([0-9]+)\. ]]
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$version -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done

out="$cache/$version"
go_build_cached "$mod" k8s.io/kubernetes/cmd/kube-apiserver "$out/kube-apiserver" "$ldflags" "" "kube-apiserver $version"
etcd="$("$root/scripts/go-tool.sh" etcd)"
if ! cmp -s "$etcd" "$out/etcd"; then
  cp -f "$etcd" "$out/etcd.tmp.$$" && mv -f "$out/etcd.tmp.$$" "$out/etcd"
fi
echo "$out"
