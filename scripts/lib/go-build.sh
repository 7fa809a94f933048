# Shared by scripts/go-tool.sh and scripts/envtest.sh: builds one package of
# a Go module of ours (tools/...) into a cached binary. Sourced, not run.

# The Go the machine has is the one used: never a toolchain download that a
# dependency's `toolchain` line would ask for.
export GOTOOLCHAIN=local
export CGO_ENABLED=0

need_go() {
  command -v go >/dev/null 2>&1 && return 0
  echo "error: the go command is missing: the test programs (kube-apiserver, etcd, helm, promtool) are built from their Go modules; install Go 1.26 or later" >&2
  exit 2
}

# The package a go.mod's `tool` directive names (the first one).
go_mod_tool() {
  awk '
    /^tool \(/ { block = 1; next }
    block && /^\)/ { block = 0; next }
    block && NF { print $1; exit }
    /^tool [^(]/ { print $2; exit }
  ' "$1"
}

# The version at which a go.mod requires the module that holds PKG (the
# longest required module path that is a prefix of PKG).
go_mod_version_of() {
  awk -v pkg="$2" '
    /^require \(/ { block = 1; next }
    block && /^\)/ { block = 0; next }
    { line = $0; sub(/^require /, "", line) }
    (block || /^require [^(]/) {
      split(line, f, " ")
      m = f[1]
      if ((pkg == m || index(pkg, m "/") == 1) && length(m) > length(best)) { best = m; v = f[2] }
    }
    END { if (v == "") exit 1; print v }
  ' "$1" || { echo "error: $1 requires no module holding $2" >&2; exit 2; }
}

# go_build_cached MODDIR PKG OUT LDFLAGS TAGS LABEL
# Builds PKG from the module in MODDIR into OUT, unless OUT is there with a
# stamp of the same inputs (go.mod, go.sum, Go version, flags).
go_build_cached() {
  local mod="$1" pkg="$2" out="$3" ldflags="$4" tags="$5" label="$6"
  need_go
  local stamp
  stamp="$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16) $(go env GOVERSION) $ldflags tags=$tags"
  if [[ -x "$out" && -f "$out.stamp" && "$(cat "$out.stamp")" == "$stamp" ]]; then
    return 0
  fi
  mkdir -p "$(dirname "$out")"
  echo "building $label ($pkg) from its Go module with $(go env GOVERSION)" >&2
  local start=$SECONDS
  (
    cd "$mod"
    go build -trimpath -mod=readonly ${tags:+-tags "$tags"} -ldflags "$ldflags" -o "$out.tmp.$$" "$pkg"
  ) >&2
  mv -f "$out.tmp.$$" "$out"
  printf '%s' "$stamp" >"$out.stamp"
  echo "built $label in $((SECONDS - start)) s: $out" >&2
}
