#!/usr/bin/env bash
# Puts promtool (Prometheus's rule tester) at .tools/bin/promtool, for the
# alert unit tests (tests/alerts/, run by tests/it/observability.rs).
#
# promtool comes from Debian's `prometheus` package. Only the binary is
# unpacked from the .deb (apt-get download + dpkg-deb -x): no service is
# installed or started. A promtool already on PATH is used as it is.
#
# Idempotent: a working .tools/bin/promtool is kept.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST_DIR="$ROOT/.tools/bin"
DEST="$DEST_DIR/promtool"

if [[ -x "$DEST" ]] && "$DEST" --version >/dev/null 2>&1; then
  echo "promtool already installed: $DEST"
  exit 0
fi
mkdir -p "$DEST_DIR"
if command -v promtool >/dev/null 2>&1; then
  ln -sf "$(command -v promtool)" "$DEST"
  echo "promtool: using $(command -v promtool)"
  exit 0
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
if ! apt-get download prometheus >/dev/null 2>&1; then
  # The package lists may be missing on a fresh machine.
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq >&2
  apt-get download prometheus >/dev/null
fi
dpkg-deb -x prometheus_*.deb unpacked
install -m 0755 unpacked/usr/bin/promtool "$DEST"
"$DEST" --version | head -n 1
