#!/usr/bin/env bash
# Packs a built kdoctor binary as a release archive for krew and downloads:
#   hack/release-archive.sh BINARY OUT_DIR [OS-ARCH]    (default: linux-amd64)
# writes OUT_DIR/kdoctor-OS-ARCH.tar.gz (kdoctor, README.md) and prints its path and sha256.
set -euo pipefail
bin=${1:?usage: hack/release-archive.sh BINARY OUT_DIR [OS-ARCH]}
out=${2:?usage: hack/release-archive.sh BINARY OUT_DIR [OS-ARCH]}
platform=${3:-linux-amd64}
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$bin" ] || { echo "release-archive: $bin is not an executable" >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$bin" "$stage/kdoctor"
cp "$root/README.md" "$stage/README.md"
mkdir -p "$out"
archive="$out/kdoctor-$platform.tar.gz"
# Stable bytes for the same inputs: sorted names, fixed owner and time.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$stage" -czf "$archive" kdoctor README.md
echo "$archive $(sha256sum "$archive" | cut -d' ' -f1)"
