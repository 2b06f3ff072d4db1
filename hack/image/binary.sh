#!/usr/bin/env bash
# A binary that goes into an image: release, the locked dependencies, glibc linked statically
# (+crt-static on the host's gnu target: rustup cannot fetch the musl target here, and static
# glibc still resolves names from /etc/hosts and DNS without its NSS modules), symbols stripped.
# Prints its path. The Dockerfile and hack/image/build.sh both call this.
#
#   hack/image/binary.sh [kdoctor|pause]     # default: kdoctor (pause: hack/image/pause)
set -euo pipefail
cd "$(dirname "$0")/../.."
triple="$(rustc -vV | sed -n 's/^host: //p')"
case "$triple" in *-linux-gnu) ;; *) echo "binary.sh: a *-linux-gnu host is needed, this is $triple" >&2; exit 2 ;; esac
case "${1:-kdoctor}" in
  kdoctor) dir=. build=(-p kdoctor --bin kdoctor) out="target/$triple/release/kdoctor" ;;
  pause) dir=hack/image/pause build=() out="hack/image/pause/target/$triple/release/kdoctor-pause" ;;
  *) echo "binary.sh: unknown binary $1 (kdoctor or pause)" >&2; exit 2 ;;
esac
# --target keeps these flags off build scripts and proc-macros, and the result in its own
# directory (target/$triple/), apart from the ordinary release build.
(cd "$dir" && RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release --locked "${build[@]}" --target "$triple" >&2)
if readelf -l "$out" | grep -q 'Requesting program interpreter'; then
  echo "binary.sh: $out still needs a dynamic loader" >&2
  exit 1
fi
echo "$out"
