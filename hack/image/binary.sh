#!/usr/bin/env bash
# The kdoctor binary that goes into the image: release, the locked dependencies, glibc linked
# statically (+crt-static on the host's gnu target: rustup cannot fetch the musl target here, and
# static glibc still resolves names from /etc/hosts and DNS without its NSS modules), symbols
# stripped. Prints its path. The Dockerfile and hack/image/build.sh both call this.
#
#   hack/image/binary.sh [BINARY]     # BINARY: kdoctor (default)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${1:-kdoctor}"
triple="$(rustc -vV | sed -n 's/^host: //p')"
case "$triple" in *-linux-gnu) ;; *) echo "binary.sh: a *-linux-gnu host is needed, this is $triple" >&2; exit 2 ;; esac
# --target keeps these flags off build scripts and proc-macros, and the result in its own
# directory (target/$triple/), apart from the ordinary release build.
RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release --locked -p kdoctor --bin "$bin" --target "$triple" >&2
out="target/$triple/release/$bin"
if readelf -l "$out" | grep -q 'Requesting program interpreter'; then
  echo "binary.sh: $out still needs a dynamic loader" >&2
  exit 1
fi
echo "$out"
