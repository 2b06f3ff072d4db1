# The one kdoctor image: the controller, the default agent and every per-task carrier run it
# with a subcommand as `args` (manifests/, charts/kdoctor). Not built in this repository's CI
# (no container engine there); tests/cli/manifests.rs checks statically that the binary path,
# entrypoint and user below are what the manifests expect.
#
#   docker build -t ghcr.io/kdoctor-io/kdoctor:0.1.0 .

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# Only the shipped binary (not kube-sim or the benchmarks), exactly the locked dependencies.
RUN cargo build --release --locked -p kdoctor --bin kdoctor \
 && install -D -m 0755 target/release/kdoctor /out/kdoctor

# glibc, libgcc and CA certificates, no shell; the binary links glibc dynamically.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/kdoctor /usr/bin/kdoctor
USER 65532:65532
ENTRYPOINT ["/usr/bin/kdoctor"]
