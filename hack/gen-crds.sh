#!/usr/bin/env bash
# Regenerates manifests/crds/ from the Rust types (kdoctor crd), and the chart's copy of them. A
# test fails when they differ.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --bin kdoctor
for pair in NetReach:netreaches AppHttpHealthy:apphttphealthies Netdns:netdnses; do
  "${CARGO_TARGET_DIR:-target}/debug/kdoctor" crd --kind "${pair%%:*}" > "manifests/crds/kdoctor.io_${pair##*:}.yaml"
done
cp manifests/crds/*.yaml charts/kdoctor/crds/
echo "wrote manifests/crds/ and charts/kdoctor/crds/"
