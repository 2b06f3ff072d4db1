#!/usr/bin/env bash
# Builds the real Kubernetes the system tests run against (etcd, kube-apiserver, kube-proxy,
# kube-controller-manager, kube-scheduler, the kubelet of the real node, and kubectl of the same
# release) from their Go modules into a cache folder keyed by version: $KUBE_BIN_CACHE (default
# ~/.cache/kdoctor/kube) /<version>/.
# Skips what is already built; prints the folder on stdout (progress goes to stderr).
#   hack/kube/build.sh            build what is missing, print the bin folder
#   hack/kube/build.sh --print    print the bin folder only (exit 1 when something is missing)
#   KUBE_VERSION=v1.37 hack/kube/build.sh
#                                 another served minor: its Kubernetes tools from the module in
#                                 hack/kube/versions/v1.37/ (etcd stays this folder's); unset,
#                                 the default pin of ./go.mod (hack/cluster.sh passes it on)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

# The module the Kubernetes tools come from.
tools_dir="$here"
if [ -n "${KUBE_VERSION:-}" ]; then
  tools_dir="$here/versions/$KUBE_VERSION"
  [ -f "$tools_dir/go.mod" ] || { echo "hack/kube/build.sh: KUBE_VERSION=$KUBE_VERSION: no hack/kube/versions/$KUBE_VERSION/go.mod (there: $(ls "$here/versions" | tr '\n' ' '))" >&2; exit 2; }
fi
# The pins, read from go.mod without the go command (--print must work without Go).
pin() { awk -v m="$1" '($1 == m) { print $2 } ($1 == "require" && $2 == m) { print $3 }' "$2" | head -n1; }
k8s_version="$(pin k8s.io/kubernetes "$tools_dir/go.mod")"
etcd_version="$(pin go.etcd.io/etcd/server/v3 go.mod)"
[ -n "$k8s_version" ] && [ -n "$etcd_version" ] || { echo "hack/kube/build.sh: no k8s.io/kubernetes or etcd pin in go.mod" >&2; exit 2; }
# A change of go.mod or go.sum (a new pin) is a new folder; the old one can be removed by hand.
modules=(go.mod go.sum cmd/etcd/main.go)
[ "$tools_dir" = "$here" ] || modules+=("$tools_dir/go.mod" "$tools_dir/go.sum")
key="${k8s_version}-etcd${etcd_version}-$(cat "${modules[@]}" | sha256sum | cut -c1-12)"
out="${KUBE_BIN_CACHE:-$HOME/.cache/kdoctor/kube}/$key"
tools=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl kubelet)

missing=()
for t in "${tools[@]}"; do
  [ -x "$out/$t" ] || missing+=("$t")
done
if [ "${1:-}" = "--print" ]; then
  [ ${#missing[@]} -eq 0 ] || { echo "not built: ${missing[*]} (run hack/kube/build.sh)" >&2; exit 1; }
  echo "$out"
  exit 0
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "$out"
  exit 0
fi

command -v go >/dev/null || { echo "hack/kube/build.sh: go is not on PATH (Go 1.24 or newer builds Kubernetes $k8s_version)" >&2; exit 2; }
mkdir -p "$out"
start=$SECONDS
echo "building the control plane (Kubernetes $k8s_version, etcd $etcd_version) into $out: ${missing[*]}" >&2
echo "  a cold build (empty Go caches) took 6 minutes on 2 cores here; with Go's caches warm, under a minute" >&2
# The flags Kubernetes' own release build uses: no cgo, no debug info, the version stamped in.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$k8s_version" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"
export CGO_ENABLED=0
n=0
for t in "${missing[@]}"; do
  n=$((n + 1))
  t0=$SECONDS
  case "$t" in
    etcd) pkg=./cmd/etcd dir="$here" ;;
    *) pkg="k8s.io/kubernetes/cmd/$t" dir="$tools_dir" ;;
  esac
  echo "  [$n/${#missing[@]}] $t ..." >&2
  (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$out/$t.tmp" "$pkg")
  mv "$out/$t.tmp" "$out/$t"
  echo "  [$n/${#missing[@]}] $t built in $((SECONDS - t0)) s" >&2
done
echo "control plane built in $((SECONDS - start)) s: $out" >&2
echo "$out"
