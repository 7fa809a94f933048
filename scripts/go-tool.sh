#!/usr/bin/env bash
# Builds a Go program the tests need from its Go module, at the version
# pinned in tools/NAME/go.mod (+ go.sum), and prints the binary's path.
#
# Usage: scripts/go-tool.sh NAME        NAME: a folder of tools/ (etcd, helm, promtool, ...)
#
# Each program is its own Go module (tools/NAME), whose `tool` directive
# names the package to build and whose requirements pin the program's
# version and dependencies. One module per program, not one for all:
# minimal version selection gives a module one version of each dependency,
# and the programs disagree (helm v4.3.1 and promtool need
# k8s.io/client-go v0.37.1, kube-apiserver v1.36.3 its own v0.36.3), so a
# shared module would build at least one of them against dependencies its
# release was never built with.
#
# Only the `go` command and the Go module proxy are used: no release
# archive, no clone. The binary is cached by version under
# ${MRGUARD_TOOLS_CACHE:-~/.cache/mrguard-tools}/NAME/VERSION/, with a stamp
# of go.mod, go.sum, the Go version and the flags: a cached run only checks
# the stamp. GOCACHE and GOMODCACHE are Go's own (shared by every build).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib/go-build.sh
source "$root/scripts/lib/go-build.sh"

name="${1:?usage: scripts/go-tool.sh NAME (a folder of tools/)}"
mod="$root/tools/$name"
[[ -f "$mod/go.mod" ]] || { echo "go-tool: no Go module at tools/$name" >&2; exit 2; }

pkg="$(go_mod_tool "$mod/go.mod")"
version="$(go_mod_version_of "$mod/go.mod" "$pkg")"
# The binary is named for the folder (provider-kubernetes' package is
# cmd/provider, etcd's the module root server/v3).
bin="$name"

# What each program's own release build passes (its Makefile or .promu.yml),
# so that `--version` says what it is.
ldflags="-s -w"
tags=""
case "$name" in
  helm)
    ldflags+=" -X helm.sh/helm/v4/internal/version.version=$version"
    ;;
  promtool)
    # Prometheus's Go module versions v0.3XX.Y are its releases v3.XX.Y.
    release="$(sed -E 's/^v0\.([0-9])([0-9][0-9])\.([0-9]+)$/\1.\2.\3/' <<<"$version")"
    ldflags+=" -X github.com/prometheus/common/version.Version=$release"
    ldflags+=" -X github.com/prometheus/common/version.Branch=HEAD"
    # Service discovery is for the server; promtool tests and checks rules.
    tags="netgo,remove_all_sd"
    ;;
  provider-kubernetes)
    ldflags+=" -X github.com/crossplane-contrib/provider-kubernetes/internal/version.Version=$version"
    ;;
  crossplane)
    ldflags+=" -X github.com/crossplane/crossplane-runtime/v2/pkg/version.version=$version"
    ;;
esac

cache="${MRGUARD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mrguard-tools}/$name/$version"
go_build_cached "$mod" "$pkg" "$cache/$bin" "$ldflags" "$tags" "$name $version"
echo "$cache/$bin"
