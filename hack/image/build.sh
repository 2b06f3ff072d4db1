#!/usr/bin/env bash
# The kdoctor image and the pause image, built without a container engine or a registry: static
# binaries (hack/image/binary.sh), their root filesystems (hack/image/rootfs.sh), packed into
# OCI layouts and archives (hack/image/oci.py) under target/image/:
#
#   target/image/kdoctor/  target/image/kdoctor.oci.tar   ghcr.io/kdoctor-io/kdoctor:<version>
#   target/image/pause/    target/image/pause.oci.tar     registry.k8s.io/pause:3.10
#
# Cargo's caches make a second run quick; the first compiles kdoctor in release (about 6
# minutes on 2 cores). `ctr -n k8s.io images import target/image/kdoctor.oci.tar` loads it
# into containerd. The Dockerfile builds the same image elsewhere (tests/cli/image.rs holds
# the two to one description, hack/image/kdoctor.json).
#
#   hack/image/build.sh [kdoctor|pause]...    # default: both
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/image
mkdir -p "$out"
images=("$@")
[ ${#images[@]} -gt 0 ] || images=(kdoctor pause)
log() { printf '%s image: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
command -v readelf >/dev/null || { log "installing binutils (readelf)"; apt-get install -y -qq binutils >/dev/null; }
[ -s /etc/ssl/certs/ca-certificates.crt ] || { log "installing ca-certificates"; apt-get install -y -qq ca-certificates >/dev/null; }

for image in "${images[@]}"; do
  started=$SECONDS
  case "$image" in
    kdoctor)
      log "building the static kdoctor binary (release; the first build takes minutes)"
      bin="$(hack/image/binary.sh)"
      version="$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "kdoctor"))')"
      hack/image/rootfs.sh "$bin" "$out/kdoctor.rootfs"
      python3 hack/image/oci.py --rootfs "$out/kdoctor.rootfs" --image hack/image/kdoctor.json \
        --tag "$version" --out "$out/kdoctor"
      ;;
    pause)
      log "building the pause program"
      bin="$(hack/image/binary.sh pause)"
      rm -rf "$out/pause.rootfs" && mkdir -p "$out/pause.rootfs"
      install -m 0755 "$bin" "$out/pause.rootfs/pause"
      python3 hack/image/oci.py --rootfs "$out/pause.rootfs" --image hack/image/pause.json --out "$out/pause"
      ;;
    *) echo "build.sh: unknown image $image (kdoctor or pause)" >&2; exit 2 ;;
  esac
  log "$image done in $((SECONDS - started)) s"
done
