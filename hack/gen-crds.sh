#!/usr/bin/env bash
# Regenerates manifests/crds/ from the Rust types (kdoctor crd). A test fails when they differ.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --bin kdoctor
for pair in NetReach:netreaches AppHttpHealthy:apphttphealthies Netdns:netdnses; do
  "${CARGO_TARGET_DIR:-target}/debug/kdoctor" crd --kind "${pair%%:*}" > "manifests/crds/kdoctor.io_${pair##*:}.yaml"
done
echo "wrote manifests/crds/"
