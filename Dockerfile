# syntax=docker/dockerfile:1
# mrguard: admission webhook and controller for Crossplane managed resources.
#
#   docker build -t mrguard:dev .
#
# The chart (charts/mrguard) runs /usr/local/bin/mrguard serve;
# tests/it/chart/dockerfile.rs checks that this file and the chart agree.

# Base images are pinned by digest, so a rebuild gets the same bases; the
# tag beside each digest says what it was resolved from. To refresh, resolve
# the tag again and replace the digest (docs/helm.md, "The image"):
#   docker buildx imagetools inspect rust:1.95-bookworm
#   docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot
# scripts/image.sh builds the same image with buildah, without pulling.

# ---- build: compile a release binary with cargo ----
FROM rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1 AS build
WORKDIR /src
COPY . .
# The cache mounts keep the registry and target/ between builds; the binary
# is copied out because a cache mount is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin mrguard \
    && install -D -m 0755 target/release/mrguard /out/mrguard

# ---- runtime: distroless with glibc and CA certificates, no shell ----
FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f AS runtime
COPY --from=build /out/mrguard /usr/local/bin/mrguard
# 65532 is distroless' "nonroot"; numeric so that runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 9443 8080
ENTRYPOINT ["/usr/local/bin/mrguard", "serve"]
