#!/usr/bin/env bash
# Installs Debian's buildah for scripts/image.sh; exits non-zero, saying
# why, where it cannot be installed (no apt, not root, no package).
set -euo pipefail
command -v buildah >/dev/null && { buildah --version; exit 0; }
command -v apt-get >/dev/null || { echo "install-buildah: no apt-get on this machine" >&2; exit 1; }
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq buildah >&2
buildah --version
