# syntax=docker/dockerfile:1
# mrguard: admission webhook and controller for Crossplane managed resources.
#
#   docker build -t mrguard:dev .
#
# The chart (charts/mrguard) runs /usr/local/bin/mrguard serve; tests/it/chart.rs
# checks that this file and the chart agree.

ARG RUST_VERSION=1.95

# ---- build: compile a release binary with cargo ----
FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# The cache mounts keep the registry and target/ between builds; the binary
# is copied out because a cache mount is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin mrguard \
    && install -D -m 0755 target/release/mrguard /out/mrguard

# ---- runtime: distroless with glibc and CA certificates, no shell ----
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=build /out/mrguard /usr/local/bin/mrguard
# 65532 is distroless' "nonroot"; numeric so that runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 9443 8080
ENTRYPOINT ["/usr/local/bin/mrguard", "serve"]
