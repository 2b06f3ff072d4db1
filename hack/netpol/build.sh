#!/usr/bin/env bash
# Builds the NetworkPolicy enforcer the real nodes of the test clusters run:
# sigs.k8s.io/kube-network-policies (Kubernetes SIG Network's reference enforcer) from its Go
# module, with kube-network-policies-$VERSION.patch applied, into a cache folder keyed by the
# version and the patch: $KUBE_BIN_CACHE (default ~/.cache/kdoctor/kube)/netpol-<key>/.
# Prints the binary's path on stdout (progress goes to stderr); skips the build when it is there.
#   hack/netpol/build.sh            build when missing, print the binary
#   hack/netpol/build.sh --print    print the binary only (exit 1 when it is not built)
#
# Why the patch (two changes, the policy engine untouched):
# - upstream sends packets to its NFQUEUE with nftables' native `queue` expression, which needs
#   nft_queue (CONFIG_NFT_QUEUE). The kernels this project's CI runs on lack it but have
#   nft_compat and xt_NFQUEUE, so the patched build queues with the xtables NFQUEUE target
#   through nft_compat: the same queue, the same verdicts.
# - upstream reads only the in-cluster configuration; the real nodes run it as a process of the
#   node (like their kube-proxy), so it takes $KUBECONFIG when set.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module=sigs.k8s.io/kube-network-policies
version=v0.8.0
patch="$here/kube-network-policies-$version.patch"
key="$version-$(sha256sum <"$patch" | cut -c1-12)"
out="${KUBE_BIN_CACHE:-$HOME/.cache/kdoctor/kube}/netpol-$key"
bin="$out/kube-network-policies"

if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
if [ "${1:-}" = "--print" ]; then
  echo "not built: $bin (run hack/netpol/build.sh)" >&2
  exit 1
fi
command -v go >/dev/null || { echo "hack/netpol/build.sh: go is not on PATH" >&2; exit 2; }
command -v patch >/dev/null || { echo "hack/netpol/build.sh: patch is not on PATH (apt-get install patch)" >&2; exit 2; }
start=$SECONDS
echo "building $module $version (patched) into $out" >&2
echo "  with Go's module and build caches cold this took about 3 minutes on 2 cores here" >&2
src="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[ -d "$src" ] || { echo "hack/netpol/build.sh: cannot download $module@$version from the Go module proxy" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
(cd "$work" && patch -p1 --quiet <"$patch")
mkdir -p "$out"
(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin.tmp" ./cmd)
mv "$bin.tmp" "$bin"
echo "kube-network-policies built in $((SECONDS - start)) s: $bin" >&2
echo "$bin"
