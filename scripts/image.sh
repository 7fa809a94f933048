#!/usr/bin/env bash
# Builds mrguard's OCI image with buildah, from scratch, and smoke-tests it.
#
#   scripts/image.sh [OUT]          build OUT (default target/image/mrguard.oci.tar),
#                                   an oci-archive, then smoke-test it
#   scripts/image.sh --no-smoke [OUT]
#
# The result is what the Dockerfile builds: the release binary at
# /usr/local/bin/mrguard, the shared libraries it links (glibc, libgcc_s,
# libm), CA certificates, the distroless "nonroot" user 65532 and its home,
# a world-writable /tmp, no shell, entrypoint `mrguard serve`, ports 9443
# and 8080, and org.opencontainers.image.* labels. Base images cannot be
# pulled here (only package registries are reachable), so the files come
# from this Debian machine instead of gcr.io/distroless/cc-debian12;
# tests/it/chart/dockerfile.rs checks that this script and the Dockerfile
# agree on user, entrypoint and ports.
#
# buildah runs with vfs storage and chroot isolation under target/image/,
# so nothing is written to the machine's own container storage.
set -euo pipefail
cd "$(dirname "$0")/.."

# Kept in step with the Dockerfile (tests/it/chart/dockerfile.rs).
IMAGE_USER="65532:65532"
IMAGE_ENTRYPOINT='["/usr/local/bin/mrguard", "serve"]'
IMAGE_PORTS="9443 8080"

smoke=1
if [[ "${1:-}" == "--no-smoke" ]]; then smoke=0; shift; fi
out="${1:-target/image/mrguard.oci.tar}"
work="$PWD/target/image"
mkdir -p "$work" "$(dirname "$out")"
bah() { buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"; }

command -v buildah >/dev/null || { echo "image: buildah is not installed (scripts/install-buildah.sh)" >&2; exit 2; }
bin="${MRGUARD_BIN:-}"
if [[ -z "$bin" ]]; then
  cargo build --release --locked --bin mrguard
  bin=target/release/mrguard
fi

# ---- the root filesystem, staged as plain files ----
rootfs="$(mktemp -d)"
cleanup() { rm -rf "$rootfs"; }
trap cleanup EXIT
install -D -m 0755 "$bin" "$rootfs/usr/local/bin/mrguard"
# The dynamic loader and every library the binary links, at their paths.
for lib in $(ldd "$bin" | grep -oE '/[^ ]+\.so[^ ]*'); do
  install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
done
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
mkdir -p "$rootfs/etc" "$rootfs/home/nonroot" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
chown 65532:65532 "$rootfs/home/nonroot"
cat > "$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat > "$rootfs/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
GROUP
printf 'hosts: files dns\n' > "$rootfs/etc/nsswitch.conf"

# ---- the image ----
version="$("$bin" --version | awk '{print $2}')"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
ctr="$(bah from scratch)"
bah copy --quiet "$ctr" "$rootfs/" / >/dev/null
port_flags=()
for p in $IMAGE_PORTS; do port_flags+=(--port "$p/tcp"); done
bah config \
  --user "$IMAGE_USER" \
  --entrypoint "$IMAGE_ENTRYPOINT" \
  --cmd '' \
  --workingdir / \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  "${port_flags[@]}" \
  --label org.opencontainers.image.title=mrguard \
  --label "org.opencontainers.image.description=Admission webhook and controller for Crossplane managed resources" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.created=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  "$ctr"
rm -f "$out"
bah commit --quiet --format oci --rm "$ctr" "oci-archive:$out" >/dev/null
echo "image: wrote $out ($(du -h "$out" | cut -f1), mrguard $version)"

[[ "$smoke" == 1 ]] || exit 0

# ---- smoke test: run what the archive holds ----
fail() { echo "image smoke test: FAILED: $*" >&2; exit 1; }
ctr="$(bah from --quiet "oci-archive:$out")"
port=$((20000 + RANDOM % 20000))
served="^/usr/local/bin/mrguard serve --self-signed --self-signed-ca-file /tmp/ca.crt --listen 127.0.0.1:$port"
stop() { pkill -f "$served" 2>/dev/null || true; wait 2>/dev/null || true; bah rm "$ctr" >/dev/null 2>&1 || true; cleanup; }
trap stop EXIT
run() { bah run --isolation chroot --network host "$ctr" -- "$@"; }

# The image's config, as the archive holds it.
bah inspect --type container "$ctr" | python3 -c '
import json, sys
c = json.load(sys.stdin)["OCIv1"]["config"]
user, entrypoint, ports, version = sys.argv[1:5]
problems = []
got_user, got_entry = c.get("User"), c.get("Entrypoint")
if got_user != user: problems.append(f"user {got_user!r}")
if got_entry != json.loads(entrypoint): problems.append(f"entrypoint {got_entry}")
for p in ports.split():
    if f"{p}/tcp" not in (c.get("ExposedPorts") or {}): problems.append(f"port {p} not exposed")
labels = c.get("Labels") or {}
if labels.get("org.opencontainers.image.version") != version: problems.append(f"labels {labels}")
if problems: sys.exit("image config: " + "; ".join(problems))
' "$IMAGE_USER" "$IMAGE_ENTRYPOINT" "$IMAGE_PORTS" "$version" || fail "the image's config"

got="$(run /usr/local/bin/mrguard --version)"
[[ "$got" == "mrguard $version" ]] || fail "--version said: $got"
if run /bin/sh -c true >/dev/null 2>&1; then fail "the image has a shell"; fi
run /usr/local/bin/mrguard config default | grep -q 'resources:' || fail "config default"

run /usr/local/bin/mrguard serve --self-signed --self-signed-ca-file /tmp/ca.crt \
  --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$((port + 1))" >"$work/serve.log" 2>&1 &
for _ in $(seq 1 100); do
  if curl -fsk "https://127.0.0.1:$port/healthz" 2>/dev/null | grep -q ok; then break; fi
  sleep 0.1
done
curl -fsk "https://127.0.0.1:$port/healthz" | grep -q ok || fail "no /healthz answer: $(cat "$work/serve.log")"
curl -fs "http://127.0.0.1:$((port + 1))/metrics" | grep -q mrguard_admission || fail "no /metrics"
# The server runs as the image's user, not as root.
pid="$(pgrep -f "$served" | head -n 1)"
uid="$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")"
[[ "$uid" == "65532" ]] || fail "the server runs as uid $uid"
# SIGTERM drains and exits, as a pod's termination would.
kill "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the server did not exit on SIGTERM"
echo "image smoke test: ok (--version, no shell, /healthz over HTTPS, /metrics, uid 65532)"
