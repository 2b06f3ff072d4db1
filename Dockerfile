# The one kdoctor image: the controller, the default agent and every per-task carrier run it
# with a subcommand as `args` (manifests/, charts/kdoctor). hack/image/build.sh builds the same
# image here without a container engine (an OCI archive under target/image/); both use the same
# scripts, and tests/cli/image.rs holds this file and that build to one description,
# hack/image/kdoctor.json (user, entrypoint, environment, ports, files).
#
#   docker build -t ghcr.io/kdoctor-io/kdoctor:0.1.0 .

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# Only the shipped binary, exactly the locked dependencies, glibc linked statically; then the
# image's files: the binary, CA certificates, the non-root user, /tmp.
RUN hack/image/rootfs.sh "$(hack/image/binary.sh)" /rootfs

FROM scratch
COPY --from=build /rootfs/ /
ENV PATH=/usr/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
EXPOSE 80/tcp 443/tcp 3000/tcp 5710/tcp 5711/tcp 5712/udp 5721/tcp 5722/tcp 6443/tcp
USER 65532:65532
ENTRYPOINT ["/usr/bin/kdoctor"]
